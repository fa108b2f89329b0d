"""``fsmem mcp``: a Model Context Protocol server for one store, on the official ``mcp`` SDK.

The tools are the ones defined in fsmem.interfaces.tools (names, descriptions, JSON schemas and
annotations come from there; nothing is copied). A tool call answers with the result as JSON
text plus structured content; media blocks come back as MCP image content (image/*) or as an
embedded resource (other media), never as text. Bad arguments and store errors are MCP tool
errors (``isError``) whose text names the argument; the server keeps serving. Units are
resources ``fsmem://unit/<id>`` (JSON), their blocks ``fsmem://unit/<id>/block/<digest>``.

stdio by default; ``--http`` serves streamable HTTP on 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from typing import Any, Sequence

from fsmem._version import __version__
from fsmem.format import blocks as blockfiles  # module attribute: tests count its reads
from fsmem.format.errors import FsmemError, MissingDependency, NotFound
from fsmem.format.unit import block_path
from fsmem.interfaces.tools import TOOLS, call, definitions, unit_json, validate
from fsmem.memory.facade import Memory

__all__ = ["MemoryService", "build_server", "serve_stdio", "serve_http", "add_cli",
           "MEDIA_INLINE_MAX", "RESOURCE_PAGE"]

log = logging.getLogger("fsmem.mcp_server")

MEDIA_INLINE_MAX = 8 << 20     # larger media come back as a resource link, not inline bytes
RESOURCE_PAGE = 500


def _sdk() -> Any:
    try:
        import mcp_types  # lazy: start-up, loaded only when used (+shutil, hashlib, fractions)

        # lazy: start-up, loaded only when used (+mcp, shutil, hashlib)
        from mcp.server.lowlevel import Server
    except ImportError as exc:
        raise MissingDependency("fsmem mcp needs the MCP SDK: pip install 'fsmem[mcp]'") from exc
    return mcp_types, Server


class MemoryService:
    """The store behind the server: opened on first use (a missing store is an error on each
    call, not a crash), one call at a time (the SDK runs handlers on worker threads)."""

    def __init__(self, root: str, *, create: bool = False, agent: str | None = None) -> None:
        self.root = os.path.abspath(root)
        self.create = create
        self.agent = agent   # the agent the server's tools act as (None: config, else default)
        self._mem: Any = None
        self._lock = threading.Lock()

    def memory(self) -> Any:
        if self._mem is None:
            self._mem = Memory.open(self.root, create=self.create, agent=self.agent)
        return self._mem

    def call(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        with self._lock:
            validate(name, arguments)   # bad arguments never open (or create) anything
            return call(self.memory(), name, arguments)

    def block(self, unit_id: str, digest: str) -> tuple[bytes, str]:
        with self._lock:
            doc = self.memory().visible(unit_id)
            for ref in doc.blocks:
                if ref.digest == digest:
                    return blockfiles.read_block(block_path(doc.path, ref), ref.digest), ref.mime
        raise NotFound(f"unit {unit_id}: no block {digest}")

    def unit(self, unit_id: str) -> dict[str, Any]:
        with self._lock:
            return unit_json(self.memory().visible(unit_id))   # never another's private

    def units(self) -> list[tuple[str, str, str]]:
        with self._lock:
            mem = self.memory()
            out = []
            for layer in ("context", "documents", "stablemem"):   # this agent's view
                for u in mem._load_layer(mem.l1 if layer == "context" else layer,
                                         with_vectors=False):
                    if not mem.sees(u.manifest):
                        continue   # another agent's private unit is no resource
                    out.append((u.unit_id, layer, u.manifest.summary))
            return out

    def close(self) -> None:
        if self._mem is not None:
            self._mem.close()


def _media_content(types: Any, service: MemoryService, media: list[dict], *,
                   inline: bool) -> list[Any]:
    """Media of a result as MCP content: image content or an embedded resource when
    ``inline`` (memory_show) and small enough, else a resource link the client can read."""
    out = []
    for m in media:
        uri = m["uri"]
        if not inline or m["size"] > MEDIA_INLINE_MAX:
            out.append(types.ResourceLink(type="resource_link", name=m["name"] or m["digest"],
                                          uri=uri, mime_type=m["mime"], size=m["size"]))
            continue
        data, mime = service.block(m["unit_id"], m["digest"])
        b64 = base64.b64encode(data).decode("ascii")
        if mime.startswith("image/"):
            out.append(types.ImageContent(type="image", data=b64, mime_type=mime))
        else:
            out.append(types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(
                uri=uri, mime_type=mime, blob=b64)))
    return out


def _parse_uri(uri: str) -> tuple[str, str | None]:
    prefix = "fsmem://unit/"
    if not uri.startswith(prefix):
        raise NotFound(f"resource {uri!r}: want fsmem://unit/<id>")
    parts = uri[len(prefix):].split("/")
    if len(parts) == 1:
        return parts[0], None
    if len(parts) == 3 and parts[1] == "block":
        return parts[0], parts[2]
    raise NotFound(f"resource {uri!r}: want fsmem://unit/<id> or fsmem://unit/<id>/block/<digest>")


def _sdk_tools(types: Any) -> list[Any]:
    """fsmem.interfaces.tools.TOOLS as SDK Tool objects: the same schemas and annotations."""
    return [types.Tool(name=t.name, title=t.title, description=t.description,
                       input_schema=t.schema,
                       annotations=types.ToolAnnotations(
                           title=t.title, read_only_hint=t.read_only,
                           destructive_hint=t.destructive, idempotent_hint=t.idempotent,
                           open_world_hint=False)) for t in TOOLS]


def build_server(service: MemoryService) -> Any:
    """The low-level SDK server with fsmem's tools and unit resources."""
    types, Server = _sdk()
    import anyio  # lazy: start-up, loaded only when used
    tools = _sdk_tools(types)

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        def run() -> Any:
            result = service.call(params.name, params.arguments)
            content = [types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))]
            media = _media_content(types, service, result.get("media", []),
                                   inline=params.name == "memory_show")
            return types.CallToolResult(content=content + media, structured_content=result)
        try:
            return await anyio.to_thread.run_sync(run)
        except (FsmemError, OSError, ValueError) as exc:
            log.info("tool %s failed: %s", params.name, exc)
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(exc))],
                                        is_error=True)

    async def list_resources(ctx: Any, params: Any) -> Any:
        rows = await anyio.to_thread.run_sync(service.units)
        start = int(params.cursor) if params is not None and params.cursor else 0
        page = rows[start:start + RESOURCE_PAGE]
        nxt = str(start + RESOURCE_PAGE) if start + RESOURCE_PAGE < len(rows) else None
        return types.ListResourcesResult(next_cursor=nxt, resources=[
            types.Resource(name=uid, uri=f"fsmem://unit/{uid}", mime_type="application/json",
                           description=f"{layer}: {summary}"[:200]) for uid, layer, summary in page])

    async def list_templates(ctx: Any, params: Any) -> Any:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(name="unit", uri_template="fsmem://unit/{unit_id}",
                                   mime_type="application/json",
                                   description="one memory unit, whole, as JSON")])

    async def read_resource(ctx: Any, params: Any) -> Any:
        uri = str(params.uri)
        unit_id, digest = _parse_uri(uri)
        if digest is None:
            data = await anyio.to_thread.run_sync(service.unit, unit_id)
            return types.ReadResourceResult(contents=[types.TextResourceContents(
                uri=uri, mime_type="application/json", text=json.dumps(data, ensure_ascii=False))])
        raw, mime = await anyio.to_thread.run_sync(service.block, unit_id, digest)
        return types.ReadResourceResult(contents=[types.BlobResourceContents(
            uri=uri, mime_type=mime, blob=base64.b64encode(raw).decode("ascii"))])

    return Server("fsmem", version=__version__,
                  instructions="Long-term memory of this agent: query before answering about "
                               "the past; commit what is worth keeping.",
                  on_list_tools=list_tools, on_call_tool=call_tool,
                  on_list_resources=list_resources, on_list_resource_templates=list_templates,
                  on_read_resource=read_resource)


def serve_stdio(service: MemoryService) -> None:
    """Serve MCP over stdin/stdout until the client closes them."""
    server = build_server(service)
    import anyio  # lazy: start-up, loaded only when used

    # lazy: start-up, loaded only when used (+mcp, shutil, hashlib)
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    try:
        anyio.run(main)
    finally:
        service.close()


def serve_http(service: MemoryService, port: int) -> None:
    """Serve streamable HTTP at http://127.0.0.1:<port>/mcp (loopback only)."""
    server = build_server(service)
    try:
        import uvicorn  # lazy: start-up, loaded only when used (+shutil, http, concurrent)
    except ImportError as exc:
        raise MissingDependency("fsmem mcp --http needs uvicorn: pip install 'fsmem[mcp]'") from exc
    app = server.streamable_http_app(host="127.0.0.1")
    try:
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    finally:
        service.close()


def _port_arg(text: str) -> int:
    """``--port``: a TCP port, 1..65535, checked when the arguments are parsed (exit 2)."""
    import argparse  # lazy: start-up, the CLI has it loaded already
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port, 1 to 65535, got {port}")
    return port


def _port_free(port: int) -> None:
    """OSError naming the port when 127.0.0.1:``port`` cannot be bound (in use, or not
    allowed), so ``fsmem mcp --http`` says so in one line instead of uvicorn's traceback.
    The socket is closed at once: the server binds it again (SO_REUSEADDR, as uvicorn)."""
    import socket  # lazy: start-up, loaded only when used
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise OSError(exc.errno, f"--port {port}: cannot listen on 127.0.0.1:{port}: "
                          f"{exc.strerror}") from None


def _cmd_mcp(args: Any) -> int:
    _sdk()   # the install hint before anything else
    if args.http:
        _port_free(args.port)
    service = MemoryService(args.root, create=args.init, agent=getattr(args, "agent", None))
    if args.http:
        serve_http(service, args.port)
    else:
        serve_stdio(service)
    return 0


def _cmd_tools(args: Any) -> int:
    print(json.dumps(definitions(args.format), ensure_ascii=False, indent=2))
    return 0


def add_cli(subparsers: Any, parents: Sequence[Any]) -> None:
    """Register ``fsmem mcp`` and ``fsmem tools``."""
    text = "serve the store to agents over MCP (stdio by default)"
    sp = subparsers.add_parser("mcp", parents=list(parents), help=text, description=text)
    sp.add_argument("--http", action="store_true",
                    help="streamable HTTP on 127.0.0.1 instead of stdio")
    sp.add_argument("--port", type=_port_arg, default=8765,
                    help="with --http: the port on 127.0.0.1, 1 to 65535 (default 8765)")
    sp.add_argument("--init", action="store_true", help="create the store if it is missing")
    sp.set_defaults(fn=_cmd_mcp)
    text = "print the agent tool definitions as JSON"
    sp = subparsers.add_parser("tools", parents=list(parents), help=text, description=text)
    sp.add_argument("--format", choices=["openai", "anthropic", "mcp"], default="openai",
                    help="whose function-calling schema (default: openai)")
    sp.set_defaults(fn=_cmd_tools)
