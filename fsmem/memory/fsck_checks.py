"""fsck's checks beyond the unit directories: graph.db, and the repair of a damaged marker.

graph.db is opened ``immutable=1`` and only when it has no ``-wal`` file (then everything
is in the main file); nothing here creates or writes a file, except ``rewrite_marker``, which
``fsck --fix`` runs under the writer lock.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from typing import TYPE_CHECKING

from fsmem.format.layout import LAYERS, Layout
from fsmem.format.model import FORMAT_VERSION, HASH_ALGORITHM, Marker, encode_pretty
from fsmem.format.timestamps import Timestamp

if TYPE_CHECKING:   # loaded where used: a store without graph.db, a plain check, need neither
    import sqlite3

__all__ = ["check_graph", "rewrite_marker", "GRAPH_DANGLING_LIMIT"]

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
    fd = os.open(layout.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
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
