"""``fsmem serve``: the read-only web view of a store (fsmem.interfaces.web), until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any, Sequence

from fsmem.interfaces.cli.args import positive_int

__all__ = ["add_cli", "cmd_serve", "port_arg"]


def port_arg(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 to 65535, got {value}")
    return value


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def cmd_serve(args: argparse.Namespace) -> int:
    # lazy: start-up, loaded only when used (+http.server, socketserver, email)
    from fsmem.interfaces.web import make_server, open_reader, url_of
    reader = open_reader(args.root, args.agent)   # a missing store: one line, exit 1
    search = reader.search_settings()
    if not search["embedder_installed"]:   # browsing works; the search page says why not
        print(f"fsmem serve: warning: the store's embedder {search['embedder']!r} is not "
              f"installed (pip install 'fsmem[{search['embedder_extra']}]'): search fails "
              "until it is", file=sys.stderr)
    host = args.host or "127.0.0.1"
    server = make_server(reader, host, args.port, check_host=args.host is None,
                         budget=args.budget, verbose=args.verbose)
    url = url_of(server)
    if args.json:
        import json  # lazy: start-up, loaded only when used
        print(json.dumps({"url": url, "root": reader.root}), flush=True)
    else:
        print(f"fsmem: serving {reader.root} read-only at {url} (Ctrl-C stops)", flush=True)
    # Ctrl-C and SIGTERM stop it cleanly (a shell starts background jobs with SIGINT ignored)
    previous = signal.signal(signal.SIGTERM, _stop)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        server.server_close()
        reader.close()
    print("fsmem: stopped", file=sys.stderr)
    return 0


def add_cli(subparsers: Any, parents: Sequence[argparse.ArgumentParser]) -> None:
    """Register ``fsmem serve``."""
    text = ("serve a read-only web view of the store (the model's view, L1 timeline, units "
            "and images, graph, search, changes) on 127.0.0.1 until Ctrl-C")
    sp = subparsers.add_parser("serve", parents=list(parents), help=text, description=text)
    sp.add_argument("--port", type=port_arg, default=8765, metavar="PORT",
                    help="the TCP port, 1 to 65535, or 0 for any free one (default 8765)")
    sp.add_argument("--host", default=None, metavar="ADDR",
                    help="the address to listen on (default 127.0.0.1; given, the view "
                    "answers any Host header: anyone who can reach it can read the store)")
    sp.add_argument("--budget", type=positive_int, default=2000, metavar="TOKENS",
                    help="token budget of the model's view on the overview (default 2000)")
    sp.set_defaults(fn=cmd_serve)
