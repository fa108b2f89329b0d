"""``fsmem export`` and ``fsmem import``: an archive of units, or a foreign export, in and out."""

from __future__ import annotations

from typing import Any, Sequence

from fsmem.format.model import encode
from fsmem.ingest.archive import export_archive, import_archive
from fsmem.ingest.importers import import_chatgpt
from fsmem.memory.facade import Memory
from fsmem.store.store import LAYERS

__all__ = ["add_cli"]


def _cmd_export(args: Any) -> int:
    mem = Memory.open(args.root, create=False, agent=getattr(args, "agent", None))
    rep = export_archive(mem.store, args.out, layers=[args.layer] if args.layer else None,
                         since=args.since)
    if args.json:
        print(encode(rep).decode())
    else:
        print(f"exported {rep.units} units ({rep.bytes} bytes) to {rep.path}")
    return 0


def _cmd_import(args: Any) -> int:
    mem = Memory.open(args.root, agent=getattr(args, "agent", None))
    if args.from_format == "chatgpt":
        rep = import_chatgpt(mem, args.src)
    else:
        rep = import_archive(mem, args.src)
    if args.json:
        print(encode(rep).decode())
    else:
        print(f"imported {len(rep.imported)} units, {len(rep.skipped)} already present")
    return 0


def add_cli(subparsers: Any, parents: Sequence[Any]) -> None:
    """Register ``fsmem export`` and ``fsmem import``."""
    sp = subparsers.add_parser("export", parents=list(parents),
                               help="write units into a self-contained archive (tar)")
    sp.add_argument("out", help="the archive file to create")
    sp.add_argument("--layer", choices=list(LAYERS))
    sp.add_argument("--since", help="only units created at or after this RFC 3339 time")
    sp.set_defaults(fn=_cmd_export)
    sp = subparsers.add_parser("import", parents=list(parents),
                               help="read an archive (or a foreign export) into the store, "
                               "exactly once")
    sp.add_argument("src", help="the archive ('-' for stdin) or foreign export file")
    sp.add_argument("--from", dest="from_format", choices=["fsmem", "chatgpt"], default="fsmem",
                    help="fsmem archive (default) or ChatGPT conversations.json")
    sp.set_defaults(fn=_cmd_import)
