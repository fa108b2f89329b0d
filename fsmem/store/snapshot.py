"""``fsmem snapshot DEST``: a consistent point-in-time copy of a store, in which every
immutable file is a hard link (no bytes copied; a copy across filesystems).

The point in time is a listing of the layers taken under the writer lock (recovery has run,
so no change is half-applied) together with a read transaction on ``graph.db``; writers wait
for that listing only. Then, lock released, each listed unit's files are linked from wherever
the unit is now: units are immutable, so a unit recalled or distilled since is the same unit
in another layer, and a unit pruned or removed since stays in ``.fsmem/trash/`` while the
snapshot holds its pin. Mutable files (the access log, legacy JSON, ``graph.db``, HomeAgent's
``media.db``) are copied; SQLite files through SQLite's backup, as of the point in time.

Atomic and durable: the copy is built beside the destination under a temporary name
(``<dest>.fsmem-partial-<pid>-<random>``, whose ``.fsmem/partial-snapshot.json`` says what it
is: fsck of it reports ``partial-snapshot``), every file and directory of it flushed, the
marker of the partial state removed and flushed, and only then renamed to ``DEST`` (no
replace), and ``DEST``'s parent flushed. A failed or killed snapshot leaves nothing at
``DEST``; the next snapshot into ``DEST`` removes the partial copies of processes that are
gone (never a live one's).
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import stat
import time
import uuid

import msgspec

from fsmem.format import fsops as fsops
from fsmem.format.errors import AlreadyExists, FsmemError
from fsmem.format.layout import META, open_regular, owner_dead, read_small
from fsmem.store.store import Store

__all__ = ["snapshot", "SnapshotReport", "PARTIAL_MARKER", "PARTIAL_INFIX", "partial_info"]

log = logging.getLogger("fsmem.snapshot")

PARTIAL_MARKER = "partial-snapshot.json"   # in .fsmem/ of a snapshot being built
PARTIAL_INFIX = ".fsmem-partial-"           # <dest>.fsmem-partial-<pid>-<random>
_FLUSH_BATCH = 256                          # files held open by one flush wave


class SnapshotReport(msgspec.Struct, kw_only=True):
    dest: str
    units: int = 0
    linked: int = 0
    copied: int = 0
    bytes_copied: int = 0
    paused_s: float = 0.0      # how long writers waited (the listing)
    seconds: float = 0.0


class _Partial(msgspec.Struct, kw_only=True):
    source: str
    dest: str
    pid: int
    started_ns: int


def partial_info(root: str) -> str:
    """A description of the interrupted snapshot whose partial copy ``root`` is, or ""
    when it is none (read safely: never a FIFO, never a symlink)."""
    path = os.path.join(root, META, PARTIAL_MARKER)
    if not os.path.lexists(path):
        return ""
    try:
        info = msgspec.json.decode(read_small(path, 1 << 16), type=_Partial)
        return (f"a partial snapshot of {info.source} (meant for {info.dest}, by process "
                f"{info.pid}), never completed")
    except (OSError, FsmemError, msgspec.DecodeError):
        return "a partial snapshot, never completed"


def snapshot(root: str | os.PathLike[str], dest: str | os.PathLike[str]) -> SnapshotReport:
    """Take a snapshot of the store at ``root`` into ``dest`` (absent or an empty directory)."""
    t0 = time.monotonic()
    store = Store(os.fspath(root), create=False)
    dest = os.path.abspath(os.fspath(dest))
    _check_dest(dest)
    if os.path.commonpath([dest, store.root]) == store.root:
        raise FsmemError(f"{dest}: inside the store it would copy")
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    _clean_partials(dest)
    tmp = f"{dest}{PARTIAL_INFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    report = SnapshotReport(dest=dest)
    graph_db = None
    done = False
    fsops.mkdir(tmp)
    try:
        copier = _Copier(store, tmp, report, ())
        copier.start(dest)
        with store.locked():
            listing = {layer: sorted(store.list_layer(layer)) for layer in store.layers()}
            pin = store.pin()
            graph_db = _begin_read(os.path.join(store.root, "graph.db"))
            report.paused_s = time.monotonic() - t0
        try:
            copier.layers = tuple(listing)
            copier.layout()
            for layer, ids in listing.items():
                for unit_id in ids:
                    copier.unit(layer, unit_id)
            copier.meta_files()
            copier.legacy()
            copier.graph(graph_db, os.path.join(store.root, "graph.db"))
        finally:
            if graph_db is not None:
                graph_db.close()
            store.unpin(pin)
        copier.finish(dest, sync=store.sync)
        done = True
    finally:
        if not done:
            fsops.rmtree(tmp)
    report.seconds = time.monotonic() - t0
    return report


def _check_dest(dest: str) -> None:
    if os.path.islink(dest) or (os.path.lexists(dest) and (
            not os.path.isdir(dest) or os.listdir(dest))):
        raise AlreadyExists(f"{dest}: exists and is not an empty directory")


def _clean_partials(dest: str) -> None:
    """Remove ``dest``'s partial copies left by snapshots whose process is gone."""
    parent, base = os.path.split(dest)
    prefix = base + PARTIAL_INFIX
    for name in os.listdir(parent):
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix):].split("-", 1)[0]
        path = os.path.join(parent, name)
        if pid.isdigit() and int(pid) != os.getpid() and owner_dead(int(pid), path) \
                and os.path.isdir(path) and not os.path.islink(path):
            log.info("snapshot: removing %s, left by a snapshot that did not complete", path)
            fsops.rmtree(path)


def _begin_read(path: str) -> sqlite3.Connection | None:
    """A read transaction on a SQLite file: its state now, for a backup taken later. None
    when there is no such regular file (checked before SQLite opens it: never a FIFO, never
    through a symlink) or SQLite cannot read it (copied as bytes then)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None,
                             timeout=10)
    except sqlite3.Error as exc:
        log.warning("%s: not readable by SQLite (%s); copied as it is", path, exc)
        return None
    try:
        db.execute("BEGIN")
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        db.close()
        log.warning("%s: not readable by SQLite (%s); copied as it is", path, exc)
        return None
    return db


class _Copier:
    """Builds the copy in ``dest`` (the partial directory), keeping the files it wrote and
    the directories it made, to flush them all before the rename into place."""

    def __init__(self, store: Store, dest: str, report: SnapshotReport,
                 layers: tuple[str, ...]) -> None:
        self.store, self.dest, self.report = store, dest, report
        self.layers = layers   # the store's layers at the listing (every agent's L1)
        self.files: list[str] = []    # written (copied): data and name to flush
        self.dirs: list[str] = [dest]   # made, or given a new entry: names to flush

    def start(self, final: str) -> None:
        """``.fsmem/`` with the partial-snapshot marker first, then the store's marker: a
        copy killed at any later point is a store that fsck names as partial."""
        self.mkdir(os.path.join(self.dest, META))
        info = _Partial(source=self.store.root, dest=final, pid=os.getpid(),
                        started_ns=time.time_ns())
        self.write(os.path.join(self.dest, META, PARTIAL_MARKER), msgspec.json.encode(info))
        self.copy(self.store.marker_path, os.path.join(self.dest, META, "marker.json"))

    def layout(self) -> None:
        for sub in (*(f"{META}/{d}" for d in ("staging", "journal", "quarantine", "index",
                                              "trash")), "inbox", *self.layers):
            self.mkdir(os.path.join(self.dest, sub))

    def mkdir(self, path: str) -> None:
        if not os.path.isdir(path):
            parent = os.path.dirname(path)
            if not os.path.isdir(parent):
                self.mkdir(parent)
            fsops.mkdir(path)
            self.dirs.append(path)

    def finish(self, final: str, *, sync: bool) -> None:
        """Flush everything, drop the partial marker (flushed too), rename into place
        without replacing anything, flush the parent."""
        if sync:
            self.flush(self.files, self.dirs)
        fsops.unlink(os.path.join(self.dest, META, PARTIAL_MARKER))
        if sync:
            fsops.fsync_dir(os.path.join(self.dest, META))
        _check_dest(final)
        if os.path.isdir(final) and not os.path.islink(final):
            try:
                os.rmdir(final)   # the empty directory given: the copy takes its place
            except OSError as exc:
                raise AlreadyExists(f"{final}: exists and is not an empty directory") from exc
        try:
            fsops.rename_noreplace(self.dest, final)
        except OSError as exc:
            if exc.errno == errno.EEXIST or exc.errno == errno.ENOTEMPTY:
                raise AlreadyExists(f"{final}: appeared while the snapshot was taken") \
                    from exc
            if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                raise
            if os.path.lexists(final):   # no renameat2 here: checked, then renamed
                raise AlreadyExists(f"{final}: appeared while the snapshot was taken") \
                    from exc
            fsops.rename(self.dest, final)
        self.report.dest = final
        if sync:
            fsops.fsync_dir(os.path.dirname(final))

    def flush(self, files: list[str], dirs: list[str]) -> None:
        if self.store.sync_strategy == "syncfs":
            fsops.syncfs(self.dest)
            return
        for i in range(0, max(len(files), 1), _FLUSH_BATCH):
            fsops.flush_many(files[i:i + _FLUSH_BATCH], [])
        for i in range(0, len(dirs), _FLUSH_BATCH):
            fsops.flush_many([], dirs[i:i + _FLUSH_BATCH])

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
                self.mkdir(dst)
                for name in os.listdir(src):
                    target = os.path.join(dst, name)
                    if not os.path.lexists(target):
                        self.link(os.path.join(src, name), target)
                st = os.stat(src)
                fsops.utime(dst, (st.st_atime_ns, st.st_mtime_ns))   # arrival time
                self.report.units += 1
                return
            except FileNotFoundError:
                continue
        raise FsmemError(f"snapshot: unit {unit_id} kept moving while it was linked")

    def link(self, src: str, dst: str) -> None:
        if os.path.islink(src) or not os.path.isfile(src):
            return   # not part of a unit; fsck reports it in the source
        try:
            fsops.link(src, dst)
            self.report.linked += 1
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
            self.copy(src, dst)

    def write(self, dst: str, data: bytes) -> None:
        fd = fsops.open_(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o644)
        try:
            fsops.write_all(fd, data)
        finally:
            os.close(fd)
        self.files.append(dst)

    def copy(self, src: str, dst: str) -> bool:
        """Copy a regular file (opened safely: a FIFO, a directory or a symlink in its place
        is skipped with a warning, never read); its mode and times kept."""
        try:
            fd = open_regular(src)
        except FileNotFoundError:
            return False
        except (OSError, FsmemError) as exc:
            log.warning("snapshot: %s not copied: %s", src, exc)
            return False
        try:
            st = os.fstat(fd)
            out = fsops.open_(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                              | os.O_CLOEXEC, 0o600)
            try:
                size = 0
                while chunk := os.read(fd, 1 << 20):
                    fsops.write_all(out, chunk)
                    size += len(chunk)
                os.fchmod(out, stat.S_IMODE(st.st_mode))
            finally:
                os.close(out)
        finally:
            os.close(fd)
        fsops.utime(dst, (st.st_atime_ns, st.st_mtime_ns))
        self.files.append(dst)
        self.report.copied += 1
        self.report.bytes_copied += size
        return True

    def meta_files(self) -> None:
        """The access statistics (copied) and the derived index (its files never change once
        written: linked)."""
        meta = self.store.meta
        for name in sorted(os.listdir(meta)):
            if name == "access.state" or (name.startswith("access.") and name.endswith(".log")):
                self.copy(os.path.join(meta, name), os.path.join(self.dest, META, name))
        try:
            gen = read_small(os.path.join(self.store.index_dir, "CURRENT"), 4096) \
                .decode("ascii").strip()
            src = os.path.join(self.store.index_dir, gen)
            if not gen.startswith("gen-") or os.sep in gen or os.path.islink(src):
                raise ValueError(f"{gen!r}: not a generation name")
            names = os.listdir(src)
        except (OSError, FsmemError, ValueError) as exc:
            if not isinstance(exc, FileNotFoundError):
                log.warning("snapshot: the index is not copied (%s); the snapshot builds its "
                            "own", exc)
            return   # no saved index (or replaced meanwhile): the snapshot builds its own
        dst = os.path.join(self.dest, META, "index", gen)
        self.mkdir(dst)
        for name in names:
            try:
                self.link(os.path.join(src, name), os.path.join(dst, name))
            except FileNotFoundError:
                return   # replaced meanwhile: CURRENT not written, the snapshot rebuilds
        self.write(os.path.join(self.dest, META, "index", "CURRENT"), gen.encode("ascii"))

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
        media = os.path.join(root, "media", "media.db")
        self.graph(_begin_read(media), media)

    def _tree(self, src_root: str, *, link: bool) -> None:
        if not os.path.isdir(src_root) or os.path.islink(src_root):
            return
        rel_root = os.path.relpath(src_root, self.store.root)
        for dirpath, dirnames, files in os.walk(src_root):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            out = os.path.join(self.dest, rel_root, os.path.relpath(dirpath, src_root))
            self.mkdir(out)
            for name in files:
                src = os.path.join(dirpath, name)
                if link:
                    self.link(src, os.path.join(out, name))
                elif not os.path.islink(src) and os.path.isfile(src):
                    self.copy(src, os.path.join(out, name))

    def graph(self, db: sqlite3.Connection | None, src: str) -> None:
        """A SQLite file of the store (graph.db, HomeAgent's media.db): SQLite's backup of
        the read transaction ``db``; copied as bytes if SQLite could not read it."""
        rel = os.path.relpath(src, self.store.root)
        dst_path = os.path.join(self.dest, rel)
        if db is None:
            if os.path.lexists(src):
                self.mkdir(os.path.dirname(dst_path))
                self.copy(src, dst_path)
            return
        self.mkdir(os.path.dirname(dst_path))
        dst = sqlite3.connect(dst_path)
        try:
            db.backup(dst)
        finally:
            dst.close()
        self.files.append(dst_path)
        self.report.copied += 1
        self.report.bytes_copied += os.path.getsize(dst_path)
