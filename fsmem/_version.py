"""The package version (a module of its own: the CLI and the MCP server read it without
importing the package root, which names every public module)."""

__version__ = "0.1.0"
