"""fsck's checks beyond the unit directories: graph.db, and the repair of a damaged marker.

graph.db is opened ``immutable=1`` and only when it has no ``-wal`` file (then everything
is in the main file); nothing here creates or writes a file, except ``rewrite_marker``, which
``fsck --fix`` runs under the writer lock.
"""

from __future__ import annotations

import fcntl
import fnmatch
import logging
import os
import stat
import time
import uuid
from typing import TYPE_CHECKING

from fsmem.format.layout import LAYERS, Layout
from fsmem.format.model import FORMAT_VERSION, HASH_ALGORITHM, Marker, encode_pretty
from fsmem.format.timestamps import Timestamp

if TYPE_CHECKING:   # loaded where used: a store without graph.db, a plain check, need neither
    import sqlite3

__all__ = ["check_graph", "rewrite_marker", "GRAPH_DANGLING_LIMIT", "check_files",
           "check_partial"]

log = logging.getLogger("fsmem.fsck_checks")

GRAPH_DANGLING_LIMIT = 20   # dangling references reported one by one; the rest counted
_REFS = (  # (kind, what it must name): a 'block' end names memory_blocks.id, an 'edge' end
    ("block", "SELECT id FROM memory_blocks WHERE id=?"),   # names memory_block_edges.id
    ("edge", "SELECT id FROM memory_block_edges WHERE id=?"),
)


def _connect(path: str) -> sqlite3.Connection:
    """Read-only and creating nothing (fsmem.homeagent.documents.sqlite_readonly: ``mode=ro`` while
    a
    ``-wal`` file exists, else ``immutable=1``)."""
    # lazy: start-up, loaded only when used (+struct)
    from fsmem.homeagent.documents import sqlite_readonly
    return sqlite_readonly(path, timeout=2.0)


def check_graph(root: str) -> list[tuple[str, str, str]]:
    """[(kind, path, detail)]: ``graph-damaged`` when ``PRAGMA integrity_check`` fails or
    the file is not a database, ``graph-dangling`` for an edge whose block or edge end
    names no row. No graph.db: nothing to check."""
    path = os.path.join(root, "graph.db")
    if not os.path.isfile(path) or os.path.islink(path):
        return []
    if os.path.lexists(path + "-wal"):
        # A writer is active (or did not checkpoint): a read-only connection would write to
        # its -shm file and an immutable one would miss the WAL; a reader writes nothing.
        log.info("%s: has a -wal file; graph.db not checked", path)
        return []
    import sqlite3  # lazy: start-up, loaded only when used (+sqlite3)
    try:
        db = _connect(path)
    except sqlite3.Error as exc:
        return [("graph-damaged", path, f"cannot open: {exc}")]
    try:
        rows = [r[0] for r in db.execute("PRAGMA integrity_check(20)")]
        if rows != ["ok"]:
            return [("graph-damaged", path, "integrity_check: " + "; ".join(rows[:5]))]
        return _dangling(db, path)
    except sqlite3.Error as exc:
        return [("graph-damaged", path, str(exc))]
    finally:
        db.close()


def _dangling(db: sqlite3.Connection, path: str) -> list[tuple[str, str, str]]:
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not {"memory_blocks", "memory_block_edges"} <= tables:
        return []
    out: list[tuple[str, str, str]] = []
    missing = 0
    for kind, sql in _REFS:
        for side in ("source", "target"):
            rows = db.execute(f"SELECT e.id, e.{side}_id FROM memory_block_edges e WHERE "
                              f"e.{side}_kind=? ORDER BY e.id", (kind,))
            for edge_id, ref in rows:
                if db.execute(sql, (ref,)).fetchone() is not None:
                    continue
                missing += 1
                if len(out) < GRAPH_DANGLING_LIMIT:
                    out.append(("graph-dangling", path, f"edge {edge_id}: {side} {kind} "
                                f"{ref!r} names no {kind}"))
    if missing > len(out):
        out.append(("graph-dangling", path, f"{missing - len(out)} more dangling references"))
    return out


def _recognisable(layout: Layout) -> bool:
    """An fsmem store by its shape: .fsmem/staging and .fsmem/journal, and a layer."""
    return all(os.path.isdir(p) and not os.path.islink(p)
               for p in (layout.staging, layout.journal_dir)) and any(
        os.path.isdir(os.path.join(layout.root, layer)) for layer in LAYERS)


def rewrite_marker(layout: Layout) -> str:
    """Move a damaged marker into quarantine and write a fresh one; returns what was done
    ('' when nothing was: not recognisably a store, or a writer holds the lock)."""
    # lazy: start-up, loaded only when used (+ctypes, struct)
    from fsmem.format import fsops as fsops
    if not _recognisable(layout):
        log.error("%s: damaged, and %s does not look like an fsmem store: not rewritten",
                  layout.marker_path, layout.root)
        return ""
    fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return ""
        os.makedirs(layout.quarantine_dir, exist_ok=True)
        kept = os.path.join(layout.quarantine_dir, f"{time.strftime('%Y%m%dT%H%M%S')}-marker-"
                            f"{uuid.uuid4().hex[:6]}.json")
        fsops.rename(layout.marker_path, kept)
        marker = Marker(format=FORMAT_VERSION, hash=HASH_ALGORITHM, created_at=Timestamp.now())
        tmp = layout.marker_path + ".tmp"
        out = fsops.open_(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            fsops.write_all(out, encode_pretty(marker))
            fsops.fsync(out)
        finally:
            fsops.close(out)
        fsops.rename(tmp, layout.marker_path)
        fsops.fsync_dir(layout.meta)
        fsops.fsync_dir(layout.quarantine_dir)
    finally:
        os.close(fd)
    log.warning("%s: damaged marker moved to %s; a new one written", layout.marker_path, kept)
    return f"rewritten (the damaged one kept as {kept})"


# The files of .fsmem/ (and graph.db) that must be regular files where they exist: derived or
# state files that fsmem writes (docs/FORMAT.md section 6, ``damaged-file``). Patterns are
# relative to .fsmem/ (graph.db, in the store root, is checked on its own).
_FILES = ("access.log", "access.state", "access.*.log", "epoch", "lock", "watch.lock",
          "config.toml", "inbox.ledger", "legacy-reported", "legacy-report.json", "pins.json",
          "pins@*.json", "maintenance", "changes/ID", "changes/*.jsonl", "index/CURRENT",
          "index/SEEN", "index/gen-*/*", "index-stablemem/CURRENT", "index-stablemem/gen-*/*")
_META_DIRS = ("staging", "journal", "quarantine", "trash", "snapshot-pins", "vectors",
              "changes", "index", "index-stablemem")
_DIRS = ("changes", "index", "index/gen-*", "index-stablemem", "index-stablemem/gen-*")


def _match(rel: str, pattern: str) -> bool:
    """fnmatch, one path level per level (its ``*`` would match a "/" too)."""
    return rel.count("/") == pattern.count("/") and fnmatch.fnmatch(rel, pattern)


def _what(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def check_files(layout: Layout) -> list[tuple[str, str, str]]:
    """[(kind, path, detail)]: ``damaged-file`` for each store file that is not a regular
    file (a FIFO, a directory, a symlink...): readers ignore it, writers set it aside and
    rebuild it, ``fsck --fix`` sets it aside (a directory into quarantine). Lstat only:
    nothing is opened."""
    out = []

    def walk(rel: str) -> list[tuple[str, os.stat_result]]:
        base = os.path.join(layout.meta, rel)
        try:
            names = os.listdir(base)
        except OSError:
            return []
        found = []
        for name in sorted(names):
            try:
                found.append((os.path.join(rel, name) if rel else name,
                              os.lstat(os.path.join(base, name))))
            except OSError:
                continue
        return found

    entries = walk("")
    for sub in ("changes", "index", "index-stablemem"):
        entries += walk(sub)
    entries += [e for sub in ("index", "index-stablemem") for rel, st in walk(sub)
                if stat.S_ISDIR(st.st_mode) and fnmatch.fnmatch(rel, sub + "/gen-*")
                for e in walk(rel)]
    for rel, st in entries:
        if rel in _META_DIRS:
            if not stat.S_ISDIR(st.st_mode):
                out.append(("damaged-file", os.path.join(layout.meta, rel), f"{_what(st.st_mode)} "
                            "where fsmem keeps a directory; fsck --fix removes it (it holds "
                            "nothing) and the next writer makes the directory"))
            continue
        if stat.S_ISREG(st.st_mode) or any(_match(rel, d) for d in _DIRS) \
                and stat.S_ISDIR(st.st_mode):
            continue
        if any(_match(rel, f) for f in _FILES) or any(_match(rel, d) for d in _DIRS):
            out.append(("damaged-file", os.path.join(layout.meta, rel), _detail(rel, st)))
    graph = os.path.join(layout.root, "graph.db")
    try:
        st = os.lstat(graph)
        if not stat.S_ISREG(st.st_mode):
            out.append(("damaged-file", graph, _detail("graph.db", st)))
    except OSError:
        pass
    return out


def _detail(rel: str, st: os.stat_result) -> str:
    what = _what(st.st_mode)
    if rel in ("lock", "marker.json"):
        return f"{what} where fsmem keeps a regular file; no writer can work until it is " \
               "removed (fsck --fix sets it aside when it can take the lock)"
    if rel in ("config.toml", "graph.db"):
        return f"{what} where fsmem keeps a regular file; fsck --fix sets it aside (a " \
               "directory into .fsmem/quarantine/)"
    return f"{what} where fsmem keeps a derived file; readers ignore it, writers rebuild " \
           "it; fsck --fix sets it aside (a directory into .fsmem/quarantine/)"


def check_partial(layout: Layout) -> list[tuple[str, str, str]]:
    """[(kind, path, detail)]: ``partial-snapshot`` when this directory is the copy of a
    snapshot that never completed (fsmem.store.snapshot): the only finding then."""
    if not os.path.lexists(os.path.join(layout.meta, "partial-snapshot.json")):
        return []   # (fsmem.store.snapshot.PARTIAL_MARKER): a check loads no writer module
    # lazy: start-up, loaded only when used
    from fsmem.store.snapshot import PARTIAL_MARKER, partial_info
    info = partial_info(layout.root)
    if not info:
        return []
    return [("partial-snapshot", os.path.join(layout.meta, PARTIAL_MARKER),
             f"{info}: incomplete, not a store to use; delete this directory and take the "
             "snapshot again")]
