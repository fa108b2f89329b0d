"""``fsmem watch`` and ``python -m fsmem.watch``: the inbox daemon (fsmem.ingest.watch) on a
terminal, one line (or JSON line) per entry."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import Any, Iterable, Sequence

import msgspec

from fsmem.format.errors import FsmemError
from fsmem.ingest.inbox import Outcome, _Interrupted
from fsmem.interfaces.cli.args import positive_float
from fsmem.ingest.inbox_dirs import _display
from fsmem.ingest.watch import DEFAULT_RESCAN_S, DEFAULT_SIZE_CAP, Watcher
from fsmem.memory.facade import Memory

__all__ = ["add_cli", "cmd_watch", "main"]

log = logging.getLogger("fsmem.watch")


def _bytes_arg(text: str) -> int:
    """``1073741824``, ``512M``, ``1G``, ``64k``."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)i?[bB]?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r}")
    return int(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")


def _add_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--once", action="store_true",
                    help="handle what is waiting in the inbox, then exit (cron, tests)")
    sp.add_argument("--size-cap", type=_bytes_arg, default=DEFAULT_SIZE_CAP, metavar="BYTES",
                    help="largest file taken (default 1 GiB; suffixes k, M, G)")
    sp.add_argument("--rescan", type=positive_float, default=DEFAULT_RESCAN_S, metavar="SECONDS",
                    help=f"full inbox scan and reconcile period (default {DEFAULT_RESCAN_S:g})")
    sp.set_defaults(fn=cmd_watch)


def add_cli(subparsers: Any, common_parents: Sequence[argparse.ArgumentParser]) -> None:
    """Register the ``watch`` verb on the ``fsmem`` command's subparsers."""
    text = "ingest files dropped into ROOT/inbox/ and keep the index in step with cp/mv/rm"
    sp = subparsers.add_parser("watch", parents=list(common_parents), help=text,
                               description=text)
    _add_args(sp)


def _line(out: Outcome) -> str:
    name = _display(out.name)
    if out.status == "ingested":
        note = f"; {out.reason}" if out.reason else ""
        return (f"ingested  {name} -> {', '.join(out.units) or '-'} "
                f"({out.kind}, {out.size} bytes{note})")
    if out.status == "deferred":
        return f"deferred  {name}: {out.reason} (will retry)"
    return f"{out.status:<9} {name}: {out.reason} (kept as .rejected/{_display(out.moved_to)})"


def _json_name(name: str) -> str:
    """A file name as JSON text: undecodable bytes (surrogateescape) as ``\\xNN`` escapes, so
    a non-UTF-8 name is reported, not fatal, and its bytes can be told from the text."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _json_record(out: Outcome) -> dict[str, Any]:
    """An outcome as a JSON-encodable dict (names made encodable, see ``_json_name``)."""
    rec = dict(out.__dict__)
    rec["name"], rec["moved_to"] = _json_name(out.name), _json_name(out.moved_to)
    return rec


def cmd_watch(args: argparse.Namespace) -> int:
    """The ``watch`` verb: prints one line per entry (JSON lines with --json)."""
    lines: list[str] = []

    def report(out: Outcome) -> None:
        text = msgspec.json.encode(_json_record(out)).decode() if args.json else _line(out)
        lines.append(text + "\n")

    def told() -> None:   # a batch's lines in one write: whole lines, few syscalls
        if lines:
            sys.stdout.write("".join(lines))
            lines.clear()
            sys.stdout.flush()

    def reconciled(stats: dict) -> None:
        told()
        if args.json:
            print(msgspec.json.encode({"reconciled": stats}).decode(), flush=True)
        else:
            units = stats.get("units", {})
            found = "".join(f"; {what}: {' '.join(ids[:10])}{' ...' if len(ids) > 10 else ''}"
                            for what, ids in units.items() if ids)
            print("reconciled index after " + (", ".join(stats["changed"]) or "a rescan")
                  + found, flush=True)

    def started() -> None:
        told()
        if args.json:
            print(msgspec.json.encode({"watching": mem.root, "polling": watcher.polling}
                                      ).decode(), flush=True)
        else:
            how = (" by polling: inotify sees no other host's writes here"
                   if watcher.polling else "")
            print(f"watching {mem.root}/inbox{how} (Ctrl-C to stop)", flush=True)

    mem = Memory.open(args.root, create=False, agent=getattr(args, "agent", None))
    watcher = Watcher(mem, size_cap=args.size_cap, rescan_s=args.rescan, report=report,
                      on_reconcile=reconciled, on_start=started, on_told=told)
    try:
        counts = watcher.run(once=args.once)
    except _Interrupted:
        log.warning("interrupted; the entry in hand stays in inbox/.processing for next time")
        return 1
    finally:
        told()   # what was reported before an error, too
    if args.once:
        if args.json:
            print(msgspec.json.encode({"summary": counts}).decode(), flush=True)
        else:
            print(", ".join(f"{v} {k}" for k, v in counts.items()), file=sys.stderr)
        return 1 if counts.get("rejected") else 0
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m fsmem.watch [--root R] [--once] ...`` (the same as ``fsmem watch``)."""
    p = argparse.ArgumentParser(prog="fsmem watch", description=add_cli.__doc__)
    p.add_argument("--root", default=os.environ.get("FSMEM_ROOT") or "./memory",
                   help="store directory (default $FSMEM_ROOT, else ./memory)")
    p.add_argument("--json", action="store_true", help="print JSON lines on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="log what happens")
    _add_args(p)
    args = p.parse_args(None if argv is None else list(argv))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="fsmem: %(levelname)s %(name)s: %(message)s")
    try:
        return args.fn(args)
    except (FsmemError, OSError) as exc:
        print(f"fsmem watch: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
