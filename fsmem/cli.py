"""The ``fsmem`` command: a thin dispatcher from verbs to library calls.

Exit codes: 0 ok, 1 findings or a failed operation, 2 usage error. ``--json`` prints one JSON
document on stdout; messages go to stderr and name the file at fault.
"""

from __future__ import annotations

import argparse
import logging
import mimetypes
import os
import sys
from typing import Any, Callable, Sequence

import msgspec

from .errors import FsmemError
from .flows import Memory
from .reader import Reader
from .media import sniff_mime
from .model import Event, MediaAttachment, ToolOutput, encode
from .timestamps import Timestamp

__all__ = ["main"]


def _root_default() -> str:
    return os.environ.get("FSMEM_ROOT") or "./memory"


def _open(args: argparse.Namespace, **kw: Any) -> Memory:
    """A writer on an existing store (``init``, ``demo`` and ``--init`` create one)."""
    create = args.verb in ("init", "adopt") or getattr(args, "init", False)
    timeout = os.environ.get("FSMEM_LOCK_TIMEOUT")
    if timeout:
        kw.setdefault("lock_timeout", float(timeout))
    return Memory.open(args.root, create=create, **kw)


def _read(args: argparse.Namespace) -> Reader:
    """A reader: no lock, nothing created or written (NotAStore if there is no store)."""
    return Reader.open(args.root)


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.json:
        sys.stdout.write(encode(data).decode() + "\n")
    elif text:
        print(text)


def _attachment(path: str) -> MediaAttachment:
    with open(path, "rb") as fh:
        data = fh.read()
    mime = sniff_mime(data[:64]) or mimetypes.guess_type(path)[0] or "application/octet-stream"
    return MediaAttachment(data=data, mime=mime, name=os.path.basename(path))


def cmd_init(args: argparse.Namespace) -> int:
    mem = _open(args)
    _emit(args, {"root": mem.root}, f"initialised fsmem store at {mem.root}")
    return 0


def cmd_commit(args: argparse.Namespace) -> int:
    text = args.text if args.text is not None else sys.stdin.read()
    mem = _open(args, durability=args.durability)
    uid = mem.commit(text, summary=args.summary, tags=args.tag or (), source=args.source,
                     attachments=[_attachment(p) for p in args.attach or ()])
    _emit(args, {"unit_id": uid}, uid)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    mem = _read(args)
    layers = [args.layer] if args.layer else ["context", "documents", "stablemem"]
    rows = []
    for layer in layers:
        for unit in mem._load_layer(layer, with_vectors=False):
            m = unit.manifest
            rows.append({"layer": layer, "unit_id": unit.unit_id, "events": len(m.events),
                         "created_at": m.created_at, "summary": m.summary})
        if layer == "documents":
            rows += _legacy_rows(mem.root)
    _emit(args, rows, "\n".join(f"{r['layer']:<10} {r['unit_id']}  {r['events']:>3} ev  "
                                f"{r['created_at'].strftime('%Y-%m-%d %H:%M:%S')}  {r['summary'][:60]}"
                                for r in rows))
    return 0


def _legacy_rows(root: str) -> list[dict]:
    """HomeAgent JSON documents still in documents/ (read through the logged fallback)."""
    from .legacy import legacy_doc_files, legacy_id, read_legacy
    rows = []
    for name, _ in legacy_doc_files(root):
        try:
            doc = read_legacy(os.path.join(root, "documents", name))
        except (FsmemError, OSError, ValueError):
            continue  # fsck reports it
        rows.append({"layer": "legacy", "unit_id": legacy_id(name), "events": 1,
                     "created_at": doc.created_at, "summary": doc.summary})
    return rows


def cmd_show(args: argparse.Namespace) -> int:
    doc = _read(args).document(args.unit)
    text = (f"unit {doc.id}  layer {doc.layer}  {len(doc.events)} events\npath {doc.path}\n"
            f"summary {doc.summary}\n\n{doc.content}")
    _emit(args, doc, text)
    return 0


def cmd_fsck(args: argparse.Namespace) -> int:
    if args.fix:
        from .fsck import fsck_fix, repair_marker
        marker = repair_marker(args.root)   # a damaged marker blocks everything else
        if marker is not None and not marker.fixed:
            _emit(args, [marker], str(marker))
            return 1
        before = _read(args).fsck(read_data=not args.quick)   # before recovery runs
        findings = fsck_fix(_open(args).store, read_data=not args.quick, before=before)
        findings = ([marker] if marker is not None else []) + findings
    else:
        findings = _read(args).fsck(read_data=not args.quick)
    _emit(args, findings, "\n".join(str(f) for f in findings) or "clean")
    if args.fix:
        return 0 if all(f.fixed for f in findings if f.kind not in
                        ("pending-journal", "legacy", "duplicate-event")
                        or "undecodable" in f.detail) else 1
    return 1 if findings else 0


def _event_from_args(args: argparse.Namespace) -> Event:
    return Event(timestamp=Timestamp.coerce(args.timestamp), source=args.source,
                 role=args.role, input=args.input or "", response=args.response or "",
                 tools_used=args.tool or [],
                 tool_results=[ToolOutput(name=n, output=o) for n, o in
                               (r.split("=", 1) for r in args.tool_result or [])],
                 attachments=[_attachment(p) for p in args.attach or ()])


def cmd_append(args: argparse.Namespace) -> int:
    mem = _open(args, context_capacity=args.capacity, context_protected=args.protected)
    if args.input is None and args.response is None:
        from .ingest import events_from_jsonl
        ids = [mem.append(ev) for ev in events_from_jsonl(sys.stdin.read(), "<stdin>")]
    else:
        ids = [mem.append(_event_from_args(args))]
    _emit(args, {"event_ids": ids}, "\n".join(ids))
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    hits = _read(args).query(args.text, top_k=args.top_k)
    _emit(args, hits, "\n".join(f"{h.score:.3f}  {h.unit_id}  {h.summary[:70]}" for h in hits)
          or "no match")
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    mem = _open(args, context_capacity=args.capacity, context_protected=args.protected)
    moved = mem.recall(args.text, top_k=args.top_k)
    _emit(args, {"recalled": moved}, "\n".join(moved) or "nothing recalled")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    mem = _open(args, context_capacity=args.capacity, context_protected=args.protected)
    uid = mem.prune(query=args.query)
    _emit(args, {"unit_id": uid}, uid or "within capacity; nothing pruned")
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    from .views import event_text
    events = _read(args).timeline()
    _emit(args, events, "\n".join(event_text(e) for e in events))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from .render import render
    text = render(_read(args).timeline(), args.budget)
    _emit(args, {"text": text}, text)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    stats = _read(args).stats()
    _emit(args, stats, "\n".join(f"{k}: {v}" for k, v in stats.items()))
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from .index import progress_bar
    mem = _open(args)
    n = mem.reindex(progress=None if args.json else progress_bar)
    _emit(args, {"units": n}, f"indexed {n} units")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    from .snapshot import snapshot
    report = snapshot(args.root, args.dest)
    _emit(args, report, f"snapshot of {report.units} units at {report.dest}: "
          f"{report.linked} files linked, {report.copied} copied ({report.bytes_copied} bytes)")
    return 0


def cmd_adopt(args: argparse.Namespace) -> int:
    from .legacy_context import adopt, plan as adoption_plan
    plan = adoption_plan(_read(args))[0] if args.dry_run else adopt(_open(args))
    lines = (["dry run: nothing changed"] if args.dry_run else []) + plan.lines()
    _emit(args, plan, "\n".join(lines))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    return run_demo(args.dir, as_json=args.json)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", default=_root_default(),
                        help="store directory (default $FSMEM_ROOT, else ./memory)")
    common.add_argument("--json", action="store_true", help="print JSON on stdout")
    common.add_argument("-v", "--verbose", action="store_true", help="log what happens")
    capacity = argparse.ArgumentParser(add_help=False)
    capacity.add_argument("--capacity", type=int, default=30, help="L1 capacity in events")
    capacity.add_argument("--protected", type=int, default=10,
                          help="most recent L1 arrivals never pruned")
    p = argparse.ArgumentParser(prog="fsmem", description="filesystem-native agent memory")
    sub = p.add_subparsers(dest="verb", required=True)

    def verb(name: str, fn: Callable, help: str, parents: Sequence = ()) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, parents=[common, *parents], help=help, description=help)
        sp.set_defaults(fn=fn)
        return sp

    init = argparse.ArgumentParser(add_help=False)
    init.add_argument("--init", action="store_true",
                      help="create the store if it does not exist yet")
    verb("init", cmd_init, "create a store (or add what is missing to a directory)")
    sp = verb("commit", cmd_commit, "write one L2 document (text from an argument or stdin)",
              [init])
    sp.add_argument("text", nargs="?")
    sp.add_argument("--summary", default="")
    sp.add_argument("--tag", action="append")
    sp.add_argument("--source", default="manual")
    sp.add_argument("--attach", action="append", metavar="FILE", help="repeatable")
    sp.add_argument("--durability", choices=["full", "off"], default="full")
    sp = verb("ls", cmd_ls, "list units")
    sp.add_argument("--layer", choices=["context", "documents", "stablemem"])
    sp = verb("show", cmd_show, "show one unit with its events whole")
    sp.add_argument("unit")
    sp = verb("fsck", cmd_fsck, "check the store; --fix quarantines what is damaged")
    sp.add_argument("--fix", action="store_true")
    sp.add_argument("--quick", action="store_true", help="skip re-hashing block bytes")
    sp = verb("append", cmd_append, "add an event to L1 (flags, or JSON lines on stdin)",
              [capacity, init])
    sp.add_argument("--input")
    sp.add_argument("--response")
    sp.add_argument("--source", default="cli")
    sp.add_argument("--role", default="")
    sp.add_argument("--timestamp")
    sp.add_argument("--tool", action="append", help="a tool used (repeatable)")
    sp.add_argument("--tool-result", action="append", metavar="NAME=OUTPUT")
    sp.add_argument("--attach", action="append", metavar="FILE")
    sp = verb("query", cmd_query, "read-only search of L2 documents")
    sp.add_argument("text")
    sp.add_argument("--top-k", type=int, default=3)
    sp = verb("recall", cmd_recall, "move the best L2 matches into L1", [capacity])
    sp.add_argument("text")
    sp.add_argument("--top-k", type=int, default=3)
    sp = verb("prune", cmd_prune, "move the least relevant L1 events into one L2 unit",
              [capacity])
    sp.add_argument("--query", default="")
    verb("timeline", cmd_timeline, "the L1 events in original-timestamp order")
    sp = verb("render", cmd_render, "the model's view of L1 under a token budget")
    sp.add_argument("--budget", type=int, required=True)
    verb("stats", cmd_stats, "counts per layer")
    verb("reindex", cmd_reindex, "rebuild the derived search index from the directories")
    sp = verb("snapshot", cmd_snapshot, "a point-in-time copy of the store: immutable files "
              "hard-linked, the rest copied; writers wait only for a listing")
    sp.add_argument("dest", help="a directory that does not exist yet (or is empty)")
    sp = verb("adopt", cmd_adopt, "adopt HomeAgent's context.json into L1 (see README)")
    sp.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")
    sp = verb("demo", cmd_demo, "build a memory from shipped fixtures, step by step")
    sp.add_argument("dir", nargs="?", default="./fsmem-demo")
    from .stablemem import add_cli as add_stablemem_cli
    add_stablemem_cli(sub, [common])
    from .watch import add_cli as add_watch_cli
    add_watch_cli(sub, [common])
    from . import archive, mcp_server
    archive.add_cli(sub, [common]), mcp_server.add_cli(sub, [common])
    return p


def _legacy_summary(args: argparse.Namespace) -> None:
    """One line per command about legacy documents served (per-document warnings come once
    per store: fsmem.legacy)."""
    from .legacy import summary_line
    root = getattr(args, "root", None)
    line = summary_line(root) if root and os.path.isdir(root) else None
    if line:
        logging.getLogger("fsmem.legacy").warning(line)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="fsmem: %(levelname)s %(name)s: %(message)s")
    try:
        return args.fn(args)
    except FsmemError as exc:
        print(f"fsmem {args.verb}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"fsmem {args.verb}: {exc}", file=sys.stderr)
        return 1
    except (msgspec.ValidationError, ValueError) as exc:
        print(f"fsmem {args.verb}: {exc}", file=sys.stderr)
        return 1
    finally:
        _legacy_summary(args)


if __name__ == "__main__":
    sys.exit(main())
