"""``fsmem snapshot DEST``: a consistent point-in-time copy of a store, in which every
immutable file is a hard link (no bytes copied; a copy across filesystems).

The point in time is a listing of the layers taken under the writer lock (recovery has run,
so no change is half-applied) together with a read transaction on ``graph.db``; writers wait
for that listing only. Then, lock released, each listed unit's files are linked from wherever
the unit is now: units are immutable, so a unit recalled or distilled since is the same unit
in another layer, and a unit pruned or removed since stays in ``.fsmem/trash/`` while the
snapshot holds its pin. Mutable files (the access log, legacy JSON, ``graph.db``, HomeAgent's
``media.db``) are copied; SQLite files through SQLite's backup, as of the point in time.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import sqlite3
import time

import msgspec

from fsmem.format.errors import AlreadyExists, FsmemError
from fsmem.format.layout import META
from fsmem.store.store import Store

__all__ = ["snapshot", "SnapshotReport"]

log = logging.getLogger("fsmem.snapshot")


class SnapshotReport(msgspec.Struct, kw_only=True):
    dest: str
    units: int = 0
    linked: int = 0
    copied: int = 0
    bytes_copied: int = 0
    paused_s: float = 0.0      # how long writers waited (the listing)
    seconds: float = 0.0


def snapshot(root: str | os.PathLike[str], dest: str | os.PathLike[str]) -> SnapshotReport:
    """Take a snapshot of the store at ``root`` into ``dest`` (absent or an empty directory)."""
    t0 = time.monotonic()
    store = Store(os.fspath(root), create=False)
    dest = os.path.abspath(os.fspath(dest))
    if os.path.lexists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise AlreadyExists(f"{dest}: exists and is not an empty directory")
    if os.path.commonpath([dest, store.root]) == store.root:
        raise FsmemError(f"{dest}: inside the store it would copy")
    report = SnapshotReport(dest=dest)
    graph_db = None
    with store.locked():
        listing = {layer: sorted(store.list_layer(layer)) for layer in store.layers()}
        pin = store.pin()
        graph_db = _begin_read(os.path.join(store.root, "graph.db"))
        report.paused_s = time.monotonic() - t0
    try:
        copier = _Copier(store, dest, report, tuple(listing))
        copier.layout()
        for layer, ids in listing.items():
            for unit_id in ids:
                copier.unit(layer, unit_id)
        copier.meta_files()
        copier.legacy()
        if graph_db is not None:
            copier.sqlite(graph_db, "graph.db")
    finally:
        if graph_db is not None:
            graph_db.close()
        store.unpin(pin)
    report.seconds = time.monotonic() - t0
    return report


def _begin_read(path: str) -> sqlite3.Connection | None:
    """A read transaction on a SQLite file: its state now, for a backup taken later."""
    if not os.path.isfile(path):
        return None
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, timeout=10)
    db.execute("BEGIN")
    db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    return db


class _Copier:
    def __init__(self, store: Store, dest: str, report: SnapshotReport,
                 layers: tuple[str, ...]) -> None:
        self.store, self.dest, self.report = store, dest, report
        self.layers = layers   # the store's layers at the listing (every agent's L1)

    def layout(self) -> None:
        for sub in ("", META, *(f"{META}/{d}" for d in ("staging", "journal", "quarantine",
                                                      "index", "trash")), "inbox", *self.layers):
            os.makedirs(os.path.join(self.dest, sub), exist_ok=True)
        self.copy(self.store.marker_path, os.path.join(self.dest, META, "marker.json"))

    def _where(self, layer: str, unit_id: str) -> str | None:
        """Where a listed unit is now: its layer, another layer, or the trash."""
        for lay in (layer, *self.layers):
            path = os.path.join(self.store.root, lay, unit_id)
            if os.path.isdir(path) and not os.path.islink(path):
                return path
        for name in os.listdir(self.store.trash_dir):
            if name.split("~", 1)[0] == unit_id:
                return os.path.join(self.store.trash_dir, name)
        return None

    def unit(self, layer: str, unit_id: str) -> None:
        for _ in range(3):   # it may move again while we link it
            src = self._where(layer, unit_id)
            if src is None:
                log.error("snapshot: unit %s vanished (deleted by hand?); not in the snapshot",
                          unit_id)
                return
            dst = os.path.join(self.dest, layer, unit_id)
            try:
                os.makedirs(dst, exist_ok=True)
                for name in os.listdir(src):
                    target = os.path.join(dst, name)
                    if not os.path.lexists(target):
                        self.link(os.path.join(src, name), target)
                st = os.stat(src)
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))   # arrival time
                self.report.units += 1
                return
            except FileNotFoundError:
                continue
        raise FsmemError(f"snapshot: unit {unit_id} kept moving while it was linked")

    def link(self, src: str, dst: str) -> None:
        if os.path.islink(src) or not os.path.isfile(src):
            return   # not part of a unit; fsck reports it in the source
        try:
            os.link(src, dst, follow_symlinks=False)
            self.report.linked += 1
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
            self.copy(src, dst)

    def copy(self, src: str, dst: str) -> None:
        shutil.copy2(src, dst, follow_symlinks=False)
        self.report.copied += 1
        self.report.bytes_copied += os.path.getsize(dst)

    def meta_files(self) -> None:
        """The access statistics (copied) and the derived index (its files never change once
        written: linked)."""
        meta = self.store.meta
        for name in os.listdir(meta):
            if name == "access.state" or (name.startswith("access.") and name.endswith(".log")):
                self.copy(os.path.join(meta, name), os.path.join(self.dest, META, name))
        try:
            with open(os.path.join(self.store.index_dir, "CURRENT"), encoding="ascii") as fh:
                gen = fh.read().strip()
            src = os.path.join(self.store.index_dir, gen)
            dst = os.path.join(self.dest, META, "index", gen)
            os.makedirs(dst)
            for name in os.listdir(src):
                self.link(os.path.join(src, name), os.path.join(dst, name))
            with open(os.path.join(self.dest, META, "index", "CURRENT"), "w",
                      encoding="ascii") as fh:
                fh.write(gen)
        except (FileNotFoundError, NotADirectoryError):
            pass   # no saved index (or replaced meanwhile): the snapshot builds its own

    def legacy(self) -> None:
        """HomeAgent's files: JSON documents and context.json are rewritten in place by
        HomeAgent, so copied; media blobs are content-addressed, so linked."""
        root = self.store.root
        docs = os.path.join(root, "documents")
        for name in sorted(os.listdir(docs)):
            path = os.path.join(docs, name)
            if name.endswith(".json") and os.path.isfile(path) and not os.path.islink(path):
                self.copy(path, os.path.join(self.dest, "documents", name))
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if name.startswith("context.json") and os.path.isfile(path) \
                    and not os.path.islink(path):
                self.copy(path, os.path.join(self.dest, name))
        self._tree(os.path.join(root, "media", "blobs"), link=True)
        self._tree(os.path.join(root, "text"), link=False)
        media_db = _begin_read(os.path.join(root, "media", "media.db"))
        if media_db is not None:
            try:
                self.sqlite(media_db, os.path.join("media", "media.db"))
            finally:
                media_db.close()

    def _tree(self, src_root: str, *, link: bool) -> None:
        if not os.path.isdir(src_root):
            return
        rel_root = os.path.relpath(src_root, self.store.root)
        for dirpath, dirnames, files in os.walk(src_root):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            out = os.path.join(self.dest, rel_root, os.path.relpath(dirpath, src_root))
            os.makedirs(out, exist_ok=True)
            for name in files:
                (self.link if link else self.copy)(os.path.join(dirpath, name),
                                                   os.path.join(out, name))

    def sqlite(self, db: sqlite3.Connection, rel: str) -> None:
        dst_path = os.path.join(self.dest, rel)
        os.makedirs(os.path.dirname(dst_path), exist_ok=True)
        dst = sqlite3.connect(dst_path)
        try:
            db.backup(dst)
        finally:
            dst.close()
        self.report.copied += 1
        self.report.bytes_copied += os.path.getsize(dst_path)
