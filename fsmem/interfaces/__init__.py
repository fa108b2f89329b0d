"""The interfaces: the CLI, the MCP server, tool schemas, the demo, the SDK's DocMemory."""
