"""``fsmem export`` and ``fsmem import``: an archive of units, or a foreign export, in and out."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, Sequence

from fsmem.format.model import encode
from fsmem.interfaces.cli.args import UsageError, timestamp_arg
from fsmem.ingest.archive import export_archive, import_archive
from fsmem.ingest.homeagent_export import export_homeagent
from fsmem.ingest.importers import import_chatgpt
from fsmem.ingest.notes import import_notes
from fsmem.memory.facade import Memory
from fsmem.store.store import LAYERS

__all__ = ["add_cli"]


def _cmd_export(args: Any) -> int:
    if args.homeagent:
        return _cmd_export_homeagent(args)
    if not args.out:
        raise UsageError("give the archive file OUT to create, or --homeagent DIR")
    to_stdout = args.out == "-"
    if to_stdout and sys.stdout.isatty():
        raise UsageError("argument OUT: '-' writes the archive to stdout, which is a terminal; "
                         "redirect it (fsmem export - > backup.tar) or pipe it")
    mem = Memory.open(args.root, create=False, agent=getattr(args, "agent", None))
    if to_stdout:
        sys.stdout.flush()
        rep = export_archive(mem.store, "-", layers=[args.layer] if args.layer else None,
                             since=args.since, stream=sys.stdout.buffer)
    else:
        rep = export_archive(mem.store, args.out, layers=[args.layer] if args.layer else None,
                             since=args.since)
    out = sys.stderr if to_stdout else sys.stdout   # stdout holds the archive
    if args.json:
        print(encode(rep).decode(), file=out)
    else:
        carried = f", with {', '.join(rep.store_files)}" if rep.store_files else ""
        size = f" ({rep.bytes} bytes)" if rep.bytes >= 0 else ""
        print(f"exported {rep.units} units{carried}{size} to "
              f"{'stdout' if to_stdout else rep.path}", file=out)
    return 0


def _cmd_export_homeagent(args: Any) -> int:
    if args.layer or args.since:
        raise UsageError("--layer and --since select units of a tar archive; --homeagent "
                         "exports the whole memory")
    reader = Memory.open(args.root, readonly=True, agent=getattr(args, "agent", None))
    with reader:
        rep = export_homeagent(reader, args.homeagent)
    if args.json:
        print(encode(rep).decode())
    else:
        print("\n".join(rep.lines()))
    return 0


def _cmd_import_chatgpt(mem: Any, args: Any) -> int:
    """``import --from chatgpt``: the zip or conversations.json, missing images named."""
    rep = import_chatgpt(mem, args.src)
    print(encode(rep).decode() if args.json else "\n".join(rep.lines()))
    return 0


def _remove_if_empty(root: str) -> None:
    """Remove the store this command made at ``root`` when no unit was published in it
    (every layer directory empty): only the skeleton ``Memory.open`` created goes."""
    for layer in os.scandir(root):
        if layer.name != ".fsmem" and layer.is_dir(follow_symlinks=False) \
                and any(os.scandir(layer.path)):
            return
    shutil.rmtree(root, ignore_errors=True)


def _cmd_import(args: Any) -> int:
    if args.src == "-" and args.from_format != "chatgpt" and sys.stdin.isatty():
        raise UsageError("argument SRC: '-' reads the archive from stdin, which is a "
                         "terminal; pipe one in (fsmem import - < backup.tar)")
    made = not os.path.lexists(args.root)   # a refused import leaves no store it made
    mem = Memory.open(args.root, agent=getattr(args, "agent", None))
    try:
        if args.from_format == "chatgpt":
            return _cmd_import_chatgpt(mem, args)
        if args.from_format == "notes" or (args.from_format == "fsmem" and args.src != "-"
                                           and os.path.isdir(args.src)):
            rep = import_notes(mem, args.src)   # an fsmem archive is a file, never a folder
        else:
            rep = import_archive(mem, args.src)
    except BaseException:
        mem.close()
        if made:
            _remove_if_empty(mem.root)
        raise
    if args.json:
        print(encode(rep).decode())
    else:
        print("\n".join(rep.lines()))
    return 0


def add_cli(subparsers: Any, parents: Sequence[Any]) -> None:
    """Register ``fsmem export`` and ``fsmem import``."""
    text = ("write units into a self-contained archive (tar), or the memory as a HomeAgent "
            "directory (--homeagent)")
    sp = subparsers.add_parser("export", parents=list(parents), help=text, description=text)
    where = sp.add_mutually_exclusive_group()
    where.add_argument("out", nargs="?", help="the archive file to create ('-': stdout); a "
                       "whole export carries every unit, graph.db, config.toml, access "
                       "statistics, pins and the change feed position")
    where.add_argument("--homeagent", metavar="DIR",
                       help="write a HomeAgent memory directory DIR (new or empty): v3 "
                       "documents, context.json, media, graph.db (docs/FORMAT.md §10a)")
    sp.add_argument("--layer", choices=list(LAYERS), help="only this layer (default: all)")
    sp.add_argument("--since", type=timestamp_arg, metavar="TIME",
                    help="only units created at or after this RFC 3339 time, with its zone "
                    "(e.g. 2026-05-01T00:00:00Z)")
    sp.set_defaults(fn=_cmd_export)
    text = "read an archive (or a foreign export) into the store, exactly once"
    sp = subparsers.add_parser("import", parents=list(parents), help=text, description=text)
    sp.add_argument("src", help="the archive ('-' for stdin) or foreign export file; "
                    "everything is verified before anything is stored")
    sp.add_argument("--from", dest="from_format", choices=["fsmem", "chatgpt", "notes"],
                    default="fsmem",
                    help="fsmem archive (default), or a ChatGPT export: the .zip as "
                    "downloaded (images kept as media blocks) or its conversations.json, or "
                    "a folder of notes (.md/.txt and images; a folder SRC is always read so)")
    sp.set_defaults(fn=_cmd_import)
