"""``fsmem mcp``: a Model Context Protocol server for one store, on the official ``mcp`` SDK's
high-level server (``mcp.server.mcpserver.MCPServer``, the SDK 2's successor of FastMCP).

The tools are the ones defined in fsmem.interfaces.tools: names, descriptions, input and output
schemas and annotations come from there, nothing is copied, and nothing is derived from a
Python signature. MCPServer would build a tool's input schema from its function's parameters
(pydantic) and validate with that model; here each tool is an SDK ``Tool`` built from the
published schema instead, whose metadata (``_Published``) hands the arguments on as the client
sent them to ``tools.validate`` (jsonschema against that very schema) and publishes the tool's
declared output schema. A call answers with the result as JSON text plus ``structuredContent``
(valid against that schema); media blocks come back as MCP image content (image/*) or as an
embedded resource (other media), never as text. Bad arguments and store errors are MCP tool
errors (``isError``) whose text names the argument; the server keeps serving.

Units are resources ``fsmem://unit/<id>`` (JSON), their blocks ``fsmem://unit/<id>/block/
<digest>`` (with the block's own media type). MCPServer's resource registry is static (a
resource registered one by one, a template with one fixed media type), so the server lists
(page by page) and reads the store's units itself. A store that is missing is refused at start,
before anything is served (``fsmem mcp --init`` creates it).

stdio by default; ``--http`` serves streamable HTTP on 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from functools import lru_cache
from typing import Any, Sequence

from fsmem._version import __version__
from fsmem.format import blocks as blockfiles  # module attribute: tests count its reads
from fsmem.format.errors import FsmemError, InvalidName, MissingDependency, NotFound
from fsmem.format.layout import Layout, NotAStore
from fsmem.format.unit import block_path
from fsmem.format.views import unit_label
from fsmem.interfaces.tools import TOOLS, call, definitions, unit_json, validate
from fsmem.memory.facade import Memory

__all__ = ["MemoryService", "build_server", "serve_stdio", "serve_http", "add_cli",
           "quiet_interrupted_shutdown", "run_loop", "MEDIA_INLINE_MAX", "RESOURCE_PAGE"]

log = logging.getLogger("fsmem.mcp_server")

MEDIA_INLINE_MAX = 8 << 20     # larger media come back as a resource link, not inline bytes
RESOURCE_PAGE = 500
INSTRUCTIONS = ("Long-term memory of this agent: search (memory_search) before answering about "
                "the past; commit what is worth keeping.")


def _sdk() -> Any:
    try:
        import mcp_types  # lazy: start-up, loaded only when used (+shutil, hashlib, fractions)

        # lazy: start-up, loaded only when used (+mcp, starlette, pydantic)
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise MissingDependency("fsmem mcp needs the MCP SDK: pip install 'fsmem[mcp]'") from exc
    return mcp_types, MCPServer


class MemoryService:
    """The store behind the server: opened at start (``open``: a missing store is refused
    before anything is served), one call at a time (the SDK runs tools on worker threads)."""

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

    def open(self) -> None:
        """Open the store now; FsmemError naming the path (and ``fsmem init``) if it is not
        one. Nothing is created unless the server was started with ``--init``."""
        with self._lock:
            self.memory()

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
        """(id, layer, label) of every unit this agent sees."""
        with self._lock:
            mem = self.memory()
            out = []
            for layer in ("context", "documents", "stablemem"):   # this agent's view
                for u in mem._load_layer(mem.l1 if layer == "context" else layer,
                                         with_vectors=False):
                    if not mem.sees(u.manifest):
                        continue   # another agent's private unit is no resource
                    out.append((u.unit_id, layer, unit_label(u.path, u.manifest)))
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


@lru_cache(maxsize=None)
def _published() -> type:
    """The SDK tool metadata for a tool whose schemas fsmem publishes (built on first use:
    the SDK is imported lazily)."""
    # lazy: start-up, loaded only when used (the SDK's pydantic models)
    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

    class _Published(FuncMetadata):
        """No argument model of its own: the arguments go to the tool as sent, to be
        validated there (fsmem.interfaces.tools.validate, jsonschema against the published
        schema); ``output_schema`` is the tool's declared one."""

        def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
            return {"arguments": arguments_to_validate}
    return _Published


def _sdk_tools(types: Any, service: MemoryService) -> list[Any]:
    """fsmem.interfaces.tools.TOOLS as SDK tools: the same schemas and annotations."""
    from mcp.server.mcpserver.exceptions import ToolError  # lazy: start-up, the SDK
    from mcp.server.mcpserver.tools import Tool  # lazy: start-up, the SDK
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase  # lazy: the SDK

    def runner(name: str) -> Any:
        def run(arguments: dict[str, Any]) -> Any:
            try:
                result = service.call(name, arguments)
                media = _media_content(types, service, result.get("media", []),
                                       inline=name == "memory_show")
            except (FsmemError, OSError, ValueError) as exc:
                log.info("tool %s failed: %s", name, exc)
                text = str(exc)
                raise ToolError(text[len(name) + 2:] if text.startswith(f"{name}: ")
                                else text) from None
            text = types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))
            return types.CallToolResult(content=[text, *media], structured_content=result)
        return run

    return [Tool(fn=runner(t.name), name=t.name, title=t.title, description=t.description,
                 parameters=t.schema, is_async=False,
                 fn_metadata=_published()(arg_model=ArgModelBase, output_schema=t.output_schema),
                 annotations=types.ToolAnnotations(
                     title=t.title, read_only_hint=t.read_only, destructive_hint=t.destructive,
                     idempotent_hint=t.idempotent, open_world_hint=False)) for t in TOOLS]


def build_server(service: MemoryService) -> Any:
    """The SDK's high-level server with fsmem's tools and unit resources."""
    types, MCPServer = _sdk()
    import anyio  # lazy: start-up, loaded only when used

    from mcp.server.lowlevel.helper_types import ReadResourceContents  # lazy: the SDK
    # lazy: start-up, loaded only when used (the SDK)
    from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
    from mcp.shared.exceptions import MCPError  # lazy: start-up, the SDK

    class FsmemServer(MCPServer):
        """MCPServer whose resources are the store's units, listed and read from it."""

        async def _handle_list_resources(self, ctx: Any, params: Any) -> Any:
            try:
                rows = await anyio.to_thread.run_sync(service.units)
            except (FsmemError, OSError) as exc:   # a reply naming it, never a traceback
                log.info("resources/list failed: %s", exc)
                raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None
            cursor = getattr(params, "cursor", None) if params is not None else None
            start = int(cursor) if cursor and str(cursor).isdigit() else 0
            page = rows[start:start + RESOURCE_PAGE]
            nxt = str(start + RESOURCE_PAGE) if start + RESOURCE_PAGE < len(rows) else None
            return types.ListResourcesResult(next_cursor=nxt, resources=[
                types.Resource(name=uid, uri=f"fsmem://unit/{uid}",
                               mime_type="application/json",
                               description=f"{layer}: {label}"[:200])
                for uid, layer, label in page])

        async def list_resource_templates(self) -> list[Any]:
            return [types.ResourceTemplate(
                        name="unit", uri_template="fsmem://unit/{unit_id}",
                        mime_type="application/json",
                        description="one memory unit, whole, as JSON"),
                    types.ResourceTemplate(
                        name="block", uri_template="fsmem://unit/{unit_id}/block/{digest}",
                        description="one block of a unit (its bytes, its media type)")]

        async def read_resource(self, uri: Any, context: Any = None) -> list[Any]:
            try:
                unit_id, digest = _parse_uri(str(uri))
                if digest is None:
                    data = await anyio.to_thread.run_sync(service.unit, unit_id)
                    return [ReadResourceContents(content=json.dumps(data, ensure_ascii=False),
                                                 mime_type="application/json")]
                raw, mime = await anyio.to_thread.run_sync(service.block, unit_id, digest)
                return [ReadResourceContents(content=raw, mime_type=mime)]
            except (NotFound, InvalidName) as exc:
                raise ResourceNotFoundError(str(exc)) from None
            except (FsmemError, OSError, ValueError) as exc:
                raise ResourceError(str(exc)) from None

    return FsmemServer("fsmem", version=__version__, instructions=INSTRUCTIONS,
                       tools=_sdk_tools(types, service), log_level="WARNING")


class _InterruptedShutdown(logging.Filter):
    """Drops asyncio's report of a task that ended with nothing but a Ctrl-C (a
    KeyboardInterrupt, alone or in a group with cancellations): asyncio.run's shutdown logs
    it as an error with a traceback, and the CLI answers a Ctrl-C with one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, KeyboardInterrupt):
            return False
        if isinstance(exc, BaseExceptionGroup):
            import asyncio  # lazy: loaded by the server already
            return exc.split((KeyboardInterrupt, asyncio.CancelledError))[1] is not None
        return True


@contextlib.contextmanager
def quiet_interrupted_shutdown() -> Iterator[None]:
    """While the server runs: asyncio's logger drops the report of a task a Ctrl-C ended."""
    quiet = _InterruptedShutdown()
    logger = logging.getLogger("asyncio")
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


@contextlib.contextmanager
def _ctrl_c_waits() -> Iterator[None]:
    """A Ctrl-C inside waits for the block's end, then meets the handler it would have met;
    a second one inside meets it at once (a block that hangs is not held). Only in the main
    thread with a SIGINT handler of Python's (an ignored SIGINT stays ignored)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if held:
            previous(signum, frame)
        held.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


def run_loop(main: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """``main()`` on a new event loop (``asyncio.Runner``, as ``anyio.run`` does), its
    shutdown held whole: a Ctrl-C that meets the shutdown (the client gone, the loop
    closing its tasks and async generators) cut it midway, and the interpreter then
    printed "coroutine ... was never awaited"; now it waits for the shutdown's end."""
    import asyncio  # lazy: loaded with the SDK
    runner = asyncio.Runner()
    try:
        runner.run(main())
    finally:
        with _ctrl_c_waits():
            runner.close()


def serve_stdio(service: MemoryService) -> None:
    """Serve MCP over stdin/stdout until the client closes them."""
    server = build_server(service)
    try:
        with quiet_interrupted_shutdown():
            run_loop(server.run_stdio_async)
    except BaseExceptionGroup as group:
        # a Ctrl-C met one of the server's tasks: anyio's task group wraps it; the CLI
        # answers a KeyboardInterrupt with one line (a group would be a traceback)
        if group.subgroup(KeyboardInterrupt) is not None:
            raise KeyboardInterrupt from None
        raise
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


def _no_store(exc: Exception) -> NotAStore:
    return NotAStore(f"{exc}; or start the server with `fsmem mcp --init`")


def _cmd_mcp(args: Any) -> int:
    if not args.init:   # no store, no server: one line, before the SDK (2 s) is even loaded
        try:
            Layout(os.path.abspath(args.root)).require_readable()
        except NotFound as exc:
            raise _no_store(exc) from None
    _sdk()   # the install hint before anything is created or served
    if args.http:
        _port_free(args.port)
    service = MemoryService(args.root, create=args.init, agent=getattr(args, "agent", None))
    try:
        service.open()   # refused here too, before serving anything
    except NotFound as exc:
        raise _no_store(exc) from None
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
