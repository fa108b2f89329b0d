"""The store root: layout, marker, writer lock, publish and move of units, journal, recovery.

Layout (docs/FORMAT.md)::

    ROOT/context/<unit-id>/     L1: the events the model sees
    ROOT/documents/<unit-id>/   L2: searchable, not fed to the model
    ROOT/stablemem/<unit-id>/   L3 holding: distilled units, kept whole
    ROOT/inbox/                 drop zone for the watch daemon
    ROOT/.fsmem/                marker.json, lock, staging/, journal/, index/, quarantine/

A unit appears in a layer by exactly one ``renameat2(RENAME_NOREPLACE)`` of a directory that is
complete (manifest written last) and durable before the rename.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Callable, Iterator, Literal

from fsmem.format import fsops as fsops
from fsmem.format.blocks import block_filename
from fsmem.format.errors import AlreadyExists, FormatError, FsmemError, NotFound, StoreLocked
from fsmem.format.hosts import LOCK_RECORD_WIDTH, Owner, lock_record, owner_token, parse_owner
from fsmem.format.layout import (LAYERS, JournalEntry, Layer, Layout, owner_dead, staging_owner,
                                 valid_layer)
from fsmem.format.model import FORMAT_VERSION, HASH_ALGORITHM, Marker, check_name, encode_pretty
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import MANIFEST, VECTORS, UnitBuilder, read_manifest, verify_unit
from fsmem.store import leases
from fsmem.store.changes import FeedWriter
from fsmem.store.config import effective
from fsmem.store.filesystems import check_writer
from fsmem.store.derived import replace_file

__all__ = ["Store", "LAYERS", "Layer", "Durability", "JournalEntry", "new_unit_id",
           "foreign_entries", "FOREIGN_LABEL", "SyncStrategy", "SYNC_STRATEGIES"]

log = logging.getLogger("fsmem.store")

Durability = Literal["full", "off"]
SyncStrategy = Literal["batch", "syncfs", "fsync"]
SYNC_STRATEGIES: tuple[str, ...] = ("batch", "syncfs", "fsync")


def new_unit_id(prefix: str = "u") -> str:
    """A fresh unit id that sorts by creation time: ``u-20261130T054012-3f2a91c0d4e5``."""
    return f"{prefix}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.urandom(6).hex()}"


_renameat2_cache: dict[int, bool] = {}
# Units a prune removed wait in .fsmem/trash/ (deleting them costs a turn as much as the rest
# of the prune): the trash is emptied in one batch at open, at close, and at the lock that
# finds this many entries there.
TRASH_BATCH = 64


class Store(Layout):
    """A store root opened for writing: every change runs under ``locked()``.

    The read side (paths, listings, consistent views) is ``Layout``; readers use it alone.
    """

    _remote_lock: bool | None = None   # the lock file on FUSE/NFS (``_note_holder``)

    def __init__(self, root: str, *, durability: Durability = "full",
                 lock_timeout: float = 10.0, create: bool = True) -> None:
        if durability not in ("full", "off"):
            raise ValueError(f"durability must be 'full' or 'off', not {durability!r}")
        super().__init__(root)
        self.durability = durability
        self.lock_timeout = lock_timeout
        self.pins_dir = os.path.join(self.meta, "snapshot-pins")
        self._lock_fd: int | None = None
        self._lock_depth = 0
        self._recovered = False
        # A journal entry's deletion not yet flushed ("batch": ``journal_apply``'s
        # ``lazy_retire``): the next wave, or ``flush_retired``, flushes journal/.
        self._retire_unflushed = False
        # How "full" durability is reached: "batch" (every file and directory of a step flushed
        # at once, one wave, before the publish rename), "syncfs" (one syncfs(2) of the whole
        # filesystem instead) or "fsync" (each file fsynced as it is written, in turn).
        self.sync_strategy: SyncStrategy = _default_sync_strategy()
        self._thread_lock = threading.RLock()
        # The change feed (fsmem.store.changes): a record per unit change, written before it.
        self.feed = FeedWriter(self.root, self.meta)
        # Before anything is created: a writer on a filesystem whose lock excludes nothing
        # is refused (readers never come here).
        self.mount = check_writer(self.root, self.lock_path,
                                  str(effective(self.root).get("allow_fs", "")))
        self._init_layout(create)
        self.noreplace = self._probe_renameat2()

    # -- layout -------------------------------------------------------------------------
    def _init_layout(self, create: bool) -> None:
        if os.path.lexists(self.root) and not os.path.isdir(self.root):
            raise FormatError(f"{self.root}: exists and is not a directory")
        if not self.has_marker() and os.path.lexists(self.marker_path):
            self.require_readable()   # a FIFO or a directory there: an error naming it
        if not self.has_marker() and not create:
            raise NotFound(f"not an fsmem store: {self.root} (run fsmem init)")
        named: set[str] = set()   # the directories that name a directory made here
        for path in (self.root, self.meta, self.staging, self.journal_dir, self.quarantine_dir,
                     self.index_dir, self.trash_dir, os.path.join(self.root, "inbox"),
                     *(os.path.join(self.root, layer) for layer in LAYERS)):
            if os.path.islink(path):
                raise FormatError(f"{path}: is a symlink; fsmem will not follow it")
            if not os.path.isdir(path):
                if os.path.lexists(path):
                    raise FormatError(f"{path}: exists and is not a directory")
                made = os.path.abspath(path)
                while not os.path.lexists(made):   # it and each ancestor makedirs makes
                    named.add(os.path.dirname(made))
                    made = os.path.dirname(made)
                os.makedirs(path, exist_ok=True)
        if named and self.sync:
            # The layout is durable before anything is written into it: a unit published
            # into a layer whose own name could still vanish in a power loss is lost with it
            # (a store created by its first operation, the adoption of context.json: the
            # crash-state checker found the layer's mkdir undone and the adopted file renamed).
            for parent in sorted(named, key=len, reverse=True):
                fsops.fsync_dir(parent)
        if self.has_marker():
            marker = self.read_marker()
            if marker.format < FORMAT_VERSION or not marker.id:   # newer manifests; an id
                log.info("%s: format %d -> %d", self.marker_path, marker.format, FORMAT_VERSION)
                marker.format = FORMAT_VERSION
                marker.id = marker.id or os.urandom(16).hex()
                self.write_file_atomic(self.marker_path, encode_pretty(marker), sync=True)
            return
        marker = Marker(format=FORMAT_VERSION, hash=HASH_ALGORITHM, created_at=Timestamp.now(),
                        id=os.urandom(16).hex())
        self.write_file_atomic(self.marker_path, encode_pretty(marker), sync=True)

    def _probe_renameat2(self) -> bool:
        dev = os.stat(self.staging).st_dev
        if dev not in _renameat2_cache:
            _renameat2_cache[dev] = fsops.renameat2_supported(self.staging)
            if not _renameat2_cache[dev]:
                log.warning("%s: renameat2(RENAME_NOREPLACE) unsupported; publishing with a "
                            "plain rename under the store lock", self.root)
        return _renameat2_cache[dev]

    @property
    def sync(self) -> bool:
        return self.durability == "full"

    # -- lock ---------------------------------------------------------------------------
    @contextmanager
    def locked(self) -> Iterator[None]:
        """The writer lock: flock on .fsmem/lock, re-entrant within a process."""
        with self._thread_lock:
            if self._lock_depth == 0:
                self._acquire()
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
                if self._lock_depth == 0:
                    self._release()

    @property
    def holds_lock(self) -> bool:
        return self._lock_depth > 0

    def _acquire(self) -> None:
        fd = self._open_lock_file()
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreLocked(f"{self.lock_path}: held by another writer for more than "
                                      f"{self.lock_timeout:g}s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        self._lock_fd = fd
        self._note_holder(fd)
        # Recovery runs holding the lock as one level of it: what it calls (a rename
        # fallback, a discard) re-enters the lock instead of taking it again.
        self._lock_depth += 1
        try:
            self.recover(full=not self._recovered)
            self._recovered = True
        except BaseException:
            self._lock_depth -= 1
            self._release()
            raise
        self._lock_depth -= 1

    def _open_lock_file(self) -> int:
        """The lock file, opened without following a link or waiting on a FIFO. Anything but
        a regular file there is refused with an error naming it: it is not set aside by
        itself, since two writers doing so at once could each end up locking a file of its
        own (remove it by hand; no writer can hold it)."""
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
                raise FormatError(f"{self.lock_path}: not a regular file ({exc.strerror}); "
                                  f"remove it, then open the store again") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise FormatError(f"{self.lock_path}: not a regular file; remove it, then open "
                              f"the store again")
        return fd

    def _note_holder(self, fd: int) -> None:
        """Format 5: record who holds the lock in the lock file (host, pid, start; read by
        fsck on any host: /proc/locks shows no lock of a FUSE or network filesystem), and
        keep this host's lease fresh (``fsmem.store.leases``). One pwrite, in place, not
        flushed, except where the store is on a filesystem without a device of its own
        (FUSE, NFS: major 0), whose other clients see a write once it is flushed. Advisory:
        a failure is logged, never fails the operation."""
        try:
            os.pwrite(fd, lock_record(), 0)
            if self._remote_lock is None:
                self._remote_lock = os.major(os.fstat(fd).st_dev) == 0
                leases.register(self)
            if self._remote_lock:
                os.fdatasync(fd)
        except OSError as exc:
            log.warning("%s: holder not recorded: %s", self.lock_path, exc)
        leases.renew_if_due(self.leases_dir)

    def _release(self) -> None:
        self.feed.close_session()   # the end mark, before another writer may append
        if self._lock_fd is not None:
            try:   # the record blanked before the lock goes: a record names a holder
                os.pwrite(self._lock_fd, b" " * (LOCK_RECORD_WIDTH - 1) + b"\n", 0)
            except OSError as exc:
                log.warning("%s: holder record not cleared: %s", self.lock_path, exc)
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def bump_epoch(self) -> None:
        """Tell lock-free readers that a journaled change begins or ends (not durable: after
        a crash the journal itself is the truth). Rewritten in place as a fixed-width number:
        a rename over the old file would make ext4 start writing the new one back at once
        (auto_da_alloc), 2-4 ms a bump. A reader racing the write may read a mix of the old
        and new digits: any digit of the new number differs, so it starts again. Anything
        but a plain file of its own (a FIFO, a link) is replaced instead, never written
        through."""
        path = os.path.join(self.meta, "epoch")
        data = b"%020d" % (self.epoch() + 1)
        try:
            fd = fsops.open_(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                             0o644)
        except OSError:   # ELOOP (a symlink), ENXIO (a FIFO no one reads), ...
            fd = -1
        if fd >= 0:
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size <= 64:
                    fsops.write_all(fd, data)
                    return
            finally:
                os.close(fd)
        self.write_file_atomic(path, data, sync=False)

    # -- the change feed -------------------------------------------------------------------
    def record(self, kind: str, layer: str, unit_id: str, *, src: str = "", op: str = "",
               flush: bool = True) -> None:
        """Note a unit change in the feed before it is made (under the lock); ``flush``: made
        durable now, by a barrier of its own (a change with no barrier to ride)."""
        self.feed.note(kind, layer, unit_id, src=src, op=op)
        if flush and self.sync:
            self.feed.flush()

    def _layer_of(self, path: str) -> str:
        """The layer whose directory holds ``path`` directly ("" if none)."""
        parent = os.path.dirname(os.path.abspath(path).rstrip("/"))
        if os.path.dirname(parent) == self.root and valid_layer(os.path.basename(parent)):
            return os.path.basename(parent)
        return ""

    def ensure_layer(self, layer: str) -> None:
        """Create a layer directory that is missing (an agent's L1: ``context@<agent>``),
        durably: the directory, then the root that names it."""
        path = self.layer_dir(layer)
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            raise FormatError(f"{path}: exists and is not a directory")
        if not os.path.isdir(path):
            with self.locked():
                if not os.path.isdir(path):
                    fsops.mkdir(path)
                    if self.sync:
                        fsops.fsync_dir(self.root)

    # -- writing ------------------------------------------------------------------------
    def builder(self, unit_id: str | None = None) -> UnitBuilder:
        return UnitBuilder(self.staging, new_unit_id() if unit_id is None else unit_id,
                           sync=self.sync and self.sync_strategy == "fsync")

    def write_file_atomic(self, path: str, data: bytes, *, sync: bool | None = None) -> None:
        """temp in the same directory → write → fsync → rename → fsync the directory."""
        replace_file(path, data, self.meta, sync=self.sync if sync is None else sync)

    def publish(self, builder: UnitBuilder, layer: str, *,
                prepare: Callable[[], None] | None = None,
                overlap: Callable[[str], None] | None = None, op: str = "") -> str:
        """Make a finished staged unit visible in ``layer`` with one no-replace rename.

        The caller's CPU work overlaps the barriers under "batch" (and runs in turn with
        them otherwise): ``prepare()`` (nothing visible: e.g. computing the unit's index
        entry) while the staged unit's flush is in flight, ``overlap(dst)`` (in-memory work
        on the published unit: indexing it) while the layer directory's flush is. If that
        last flush fails, the unit is withdrawn and the error raised after ``overlap`` ran:
        the caller undoes its work."""
        dst = self.unit_dir(layer, builder.unit_id)
        with self.locked():
            # Its feed record first, durable in the same barrier as the unit's files.
            self.feed.note("publish", layer, builder.unit_id, op=op)
            if self.sync and self.sync_strategy == "batch":
                files, dirs = self.feed.dirty()
                wait = self.flush_staged_start([builder.path], files, dirs)
                try:
                    if prepare is not None:
                        prepare()
                finally:
                    wait()
                self.feed.flushed()
            elif prepare is not None:
                prepare()
            if self.sync:
                if self.sync_strategy == "syncfs":
                    fsops.syncfs(self.staging)  # every block, the manifest, the directories
                    self.feed.flushed()
                elif self.sync_strategy == "fsync":
                    fsops.fsync_dir(self.staging)
                    self.feed.flush()
            self.rename_dir(builder.path, dst)
            if self.sync and self.sync_strategy == "batch":
                self._flush_published(dst, overlap)
                return dst
            if self.sync:
                # staging/ is not synced again: should the rename's removal from it be lost,
                # the leftover is dead staging that recovery removes (same inodes, no data).
                try:
                    fsops.fsync_dir(os.path.dirname(dst))
                except OSError:
                    # Not durable, and a failed fsync is never retried: take it back out.
                    self._withdraw(dst)
                    raise
            if overlap is not None:
                overlap(dst)
        return dst

    def _flush_published(self, dst: str, overlap: Callable[[str], None] | None) -> None:
        """The batch strategy's second barrier: the new name in the layer directory, with
        ``overlap`` run while it is in flight; on failure the unit is taken back out (not
        durable, and a failed flush is never retried). staging/ is not flushed again (see
        the other strategies' comment)."""
        try:
            wait = fsops.flush_many_start([], [os.path.dirname(dst)])
        except OSError:
            self._withdraw(dst)
            raise
        try:
            if overlap is not None:
                overlap(dst)
        finally:
            try:
                wait()
            except OSError:
                self._withdraw(dst)
                raise

    def _withdraw(self, dst: str) -> None:
        """Take a published unit whose name is not durable back out of sight (logged if that
        fails too: the caller raises its flush error either way)."""
        try:
            self.discard(dst, sync=False)
        except OSError:
            log.error("%s: published but not durable, and could not be withdrawn", dst)

    def flush_staged(self, paths: list[str], files: tuple[str, ...] = (),
                     dirs: tuple[str, ...] = ()) -> None:
        """The "batch" barrier: every file in the staged unit directories ``paths`` (listed:
        blocks, vectors, manifest), the directories themselves and ``staging/``, plus
        ``files`` and ``dirs``, made durable in one wave (``fsops.flush_many``)."""
        self.flush_staged_start(paths, files, dirs)()

    def flush_staged_start(self, paths: list[str], files: tuple[str, ...] = (),
                           dirs: tuple[str, ...] = ()) -> Callable[[], None]:
        """``flush_staged`` issued, not awaited: returns its wait (call it exactly once)."""
        names: list[str] = list(files)
        if self._retire_unflushed:   # a retired journal entry's deletion rides this wave
            self._retire_unflushed = False
            dirs = (*dirs, self.journal_dir) if self.journal_dir not in dirs else dirs
        for path in paths:
            with os.scandir(path) as it:
                names.extend(e.path for e in it if e.is_file(follow_symlinks=False))
        return fsops.flush_many_start(names, [*paths, self.staging, *dirs])

    def rename_dir(self, src: str, dst: str) -> None:
        """Rename a directory to a name that must not exist (EEXIST even for an empty one)."""
        if self.noreplace:
            try:
                fsops.rename_noreplace(src, dst)
                return
            except FileExistsError as exc:
                raise AlreadyExists(f"{dst}: already exists; nothing was replaced") from exc
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                    raise
                self.noreplace = False
        # Fallback (GlusterFS, FUSE filesystems): under the writer lock, which every writer
        # of the store takes, a name found free stays free until our rename; the rename is
        # the one atomic step, so a crash leaves the unit staged or published, never an empty
        # claim in its layer (an earlier mkdir-then-rename did). rename(2) itself refuses a
        # directory that is not empty, and a unit directory never is.
        with self.locked():
            if os.path.lexists(dst):
                raise AlreadyExists(f"{dst}: already exists; nothing was replaced")
            try:
                fsops.rename(src, dst)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise AlreadyExists(f"{dst}: already exists; nothing was replaced") from exc
                raise

    def move(self, unit_id: str, src_layer: str, dst_layer: str) -> str:
        """Move a unit between layers: one no-replace rename, then both parents fsynced."""
        src = self.unit_dir(src_layer, unit_id)
        dst = self.unit_dir(dst_layer, unit_id)
        with self.locked():
            if not os.path.isdir(src) or os.path.islink(src):
                raise NotFound(f"{src}: no such unit")
            self.record("move", dst_layer, unit_id, src=src_layer)
            # Readers are told, as for a journaled change: a listing of the layers that
            # straddles the rename (the source listed after it, the target before) would
            # miss the unit; with the epoch moved it is taken again. (Best effort: a rename
            # needs no space, a full disk must not stop it.)
            self._bump_quietly(unit_id)
            self.rename_dir(src, dst)
            if self.sync and self.sync_strategy == "batch":
                # the target's parent durable before the source's is flushed (a flush of the
                # source alone may keep the old name's removal without the new name)
                fsops.flush_many([], [os.path.dirname(dst)])
                fsops.flush_many([], [os.path.dirname(src)])
            elif self.sync:
                fsops.fsync_dir(os.path.dirname(dst))
                fsops.fsync_dir(os.path.dirname(src))
            self._bump_quietly(unit_id)   # a follow-up of a durable move: never fails it
        return dst

    def _bump_quietly(self, unit_id: str) -> None:
        try:
            self.bump_epoch()
        except OSError as exc:
            log.warning("%s: epoch not bumped for the move of %s (%s): a reader listing "
                        "meanwhile may miss it once", self.root, unit_id, exc)

    def discard(self, path: str, *, sync: bool | None = None, defer: bool = False,
                record: bool = True) -> None:
        """Take a directory out of sight by one rename into ``.fsmem/trash/``, then delete it
        there, unless a snapshot is being taken (it may still link the files; recovery
        deletes the trash once no snapshot holds a pin) or ``defer``: left in the trash,
        deleted in a batch later (``recover``), off the caller's critical path. ``record``:
        a unit of a layer gets its feed record (a journaled removal has it already)."""
        name = os.path.basename(path.rstrip("/"))
        layer = self._layer_of(path) if record else ""
        foreign = foreign_entries(path)
        if foreign:   # never delete what fsmem did not write: the unit is kept whole
            dst = self.quarantine(path, f"{FOREIGN_LABEL}{name}")
            log.warning("%s holds files fsmem did not write (%s): kept whole in %s",
                        path, ", ".join(foreign[:5]), dst)
            return
        trash = os.path.join(self.trash_dir, f"{name}~{owner_token()}~{uuid.uuid4().hex[:12]}")
        with self.locked():   # the record and its rename in one session of the feed
            if layer:
                self.record("remove", layer, name, flush=self.sync if sync is None else sync)
            fsops.rename(path, trash)
        if self.sync if sync is None else sync:
            fsops.fsync_dir(os.path.dirname(path))
        if not defer and not self.pinned():
            fsops.rmtree(trash)

    def quarantine(self, path: str, label: str) -> str:
        """Move a damaged entry into .fsmem/quarantine/ (never deleted)."""
        name = f"{time.strftime('%Y%m%dT%H%M%S')}-{label}-{uuid.uuid4().hex[:6]}"
        dst = os.path.join(self.quarantine_dir, name)
        layer = self._layer_of(path)
        with self.locked():   # the record and its rename in one session of the feed
            if layer:   # a unit, or a HomeAgent document (documents/<id>.json)
                base = os.path.basename(path.rstrip("/"))
                self.record("quarantine", layer, base)   # a .json: the file's name
            fsops.rename(path, dst)
        if self.sync:
            fsops.fsync_dir(os.path.dirname(path))
            fsops.fsync_dir(self.quarantine_dir)
        log.warning("quarantined %s -> %s", path, dst)
        return dst

    # -- snapshot pins ------------------------------------------------------------------
    def pin(self) -> str:
        """A pin file, ``<pid>@<host>~<random>``: while it exists (and its process lives, or
        on another host that host's lease is fresh) discarded units stay in trash."""
        os.makedirs(self.pins_dir, exist_ok=True)
        path = os.path.join(self.pins_dir, f"{owner_token()}~{uuid.uuid4().hex[:12]}")
        fd = fsops.open_(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        return path

    def unpin(self, path: str) -> None:
        _quiet_unlink(path)
        with self.locked():
            self._empty_trash()

    def pinned(self) -> bool:
        try:
            names = os.listdir(self.pins_dir)
        except FileNotFoundError:
            return False
        return any(not owner_dead(_pin_owner(n), os.path.join(self.pins_dir, n), self.leases_dir)
                   for n in names)

    def _empty_trash(self) -> None:
        """Delete what the trash holds, unless a snapshot pins it; another host's entries stay
        while that host lives (its discard deletes them itself)."""
        if self.pinned():
            return
        for name in os.listdir(self.trash_dir):
            path = os.path.join(self.trash_dir, name)
            owner = staging_owner(name)   # ``<unit-id>~<pid>@<host>~<random>``, as staging
            if owner is not None and not owner.local \
                    and not owner_dead(owner, path, self.leases_dir):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                fsops.rmtree(path)
            else:
                _quiet_unlink(path)

    # -- journal ------------------------------------------------------------------------
    def journal_commit(self, entry: JournalEntry) -> str:
        """Write a journal entry durably: from here on the change will be completed. Readers
        are told (epoch) before the first visible step, the entry itself: the barrier is the
        last call, so a failure never comes after the entry is durable (a caller that sees
        one undoes the entry, and must not undo a decided change)."""
        path = os.path.join(self.journal_dir, f"{check_name(entry.id, 'journal id')}.json")
        self.bump_epoch()
        # The change's feed records, durable with the entry (replaying it adds none).
        for _staged, layer, unit_id in entry.publish:
            self.feed.note("publish", layer, unit_id, op=entry.op)
        for layer, unit_id in entry.remove:
            self.feed.note("remove", layer, unit_id, op=entry.op)
        if self.sync and self.sync_strategy == "batch":
            # One wave, as one syncfs: the staged units (built unflushed) and the entry. A
            # power loss inside it may keep the entry and not all of a unit: recovery finds
            # such a unit torn and drops the entry whole (never decided).
            self.write_file_atomic(path, encode_pretty(entry), sync=False)
            files, dirs = self.feed.dirty()
            self.flush_staged([os.path.join(self.staging, staged)
                               for staged, _layer, _uid in entry.publish
                               if os.path.isdir(os.path.join(self.staging, staged))],
                              files=(path, *files), dirs=(self.journal_dir, *dirs))
            self.feed.flushed()
        elif self.sync and self.sync_strategy == "syncfs":
            # One barrier: the staged units (built unsynced) and the entry itself.
            self.write_file_atomic(path, encode_pretty(entry), sync=False)
            fsops.syncfs(self.journal_dir)
            self.feed.flushed()
        elif not self.sync:   # durability off: nothing else is flushed, nor is the entry
            self.write_file_atomic(path, encode_pretty(entry), sync=False)
        else:
            if self.sync:
                fsops.fsync_dir(self.staging)
                self.feed.flush()
            self.write_file_atomic(path, encode_pretty(entry), sync=True)
        return path

    def journal_apply(self, entry: JournalEntry, *, defer_trash: bool = False,
                      lazy_retire: bool = False) -> None:
        """Roll a committed entry forward; safe to run again after a crash at any step.
        ``defer_trash``: removed units stay in the trash (``discard``'s ``defer``).
        ``lazy_retire`` (the "batch" strategy): the entry's deletion is flushed by the next
        wave of this store (or ``flush_retired``) instead of a barrier of its own; an entry
        that comes back after a power loss meanwhile is applied again (idempotent, see
        below)."""
        touched: set[str] = set()
        for staged, layer, unit_id in entry.publish:
            src = os.path.join(self.staging, staged)
            dst = self.unit_dir(layer, unit_id)
            if os.path.isdir(src):
                if _empty_dir(dst):   # an older fsmem's mkdir claim, left by a crash: the
                    _quiet_rmdir(dst)  # unit was never published there; publish it now
                if os.path.lexists(dst):
                    fsops.rmtree(src)
                else:
                    if unit_id in entry.mtimes:   # arrival time, set before it is visible
                        fsops.utime(src, (entry.mtimes[unit_id], entry.mtimes[unit_id]))
                    self.rename_dir(src, dst)
                touched.add(os.path.dirname(dst))
        for layer, unit_id in entry.remove:
            path = self.unit_dir(layer, unit_id)
            if os.path.isdir(path):
                self.discard(path, sync=False, defer=defer_trash, record=False)
                touched.add(os.path.dirname(path))
        if self.sync and self.sync_strategy == "syncfs":
            fsops.syncfs(self.staging)  # every rename and removal of the entry: one barrier
        elif self.sync and self.sync_strategy == "batch":
            # One wave: the new names and the removed units' layers, not staging/ (the
            # publish renames' source). A flush in flight orders nothing: were staging/ in
            # it, its flush could finish first and keep a staged unit's removal without its
            # new name, and recovery would drop the entry while the removals stand, losing
            # the events only that unit held. Unflushed, the rename is whole or absent (the
            # staged unit still there, the entry applied again) until its target is durable.
            fsops.flush_many([], sorted(touched) or [self.staging])
        elif self.sync:   # every rename of the entry made durable at once, before it goes;
            # targets before the staging directory: a rename whose source directory alone was
            # flushed may lose the object
            for parent in [*sorted(touched), self.staging]:
                fsops.fsync_dir(parent)
        path = os.path.join(self.journal_dir, f"{entry.id}.json")
        # Under syncfs not flushed: an entry that comes back after a power loss is applied
        # again, which is idempotent (targets already published are skipped, removed units
        # are gone) as long as no unit has reappeared under a removed id. One can only come
        # back through a publish (commit, import, ingest, legacy conversion: each a syncfs,
        # which flushes this deletion first) and then a move; a move alone (fsyncs of two
        # layer directories) cannot bring back an id that is in no layer.
        # Under fsync (a barrier per directory anyway) and batch (whose publishes do not flush
        # the journal directory) it is flushed, which makes a missing fsync of a removal's
        # parent show in every "all lost" power-loss state.
        # ``lazy_retire`` takes the syncfs argument for "batch" (an append's own prune: the
        # ids it removes are L1 units', never reused; the next wave flushes journal/).
        _quiet_unlink(path)
        if self.sync and lazy_retire and self.sync_strategy == "batch":
            self._retire_unflushed = True
        elif self.sync and self.sync_strategy in ("fsync", "batch"):
            fsops.fsync_dir(self.journal_dir)
        self.bump_epoch()

    def flush_retired(self) -> None:
        """Make a lazily retired journal entry's deletion durable (``journal_apply``)."""
        if self._retire_unflushed:
            self._retire_unflushed = False
            fsops.fsync_dir(self.journal_dir)

    # -- recovery -----------------------------------------------------------------------
    def recover(self, *, full: bool = True) -> None:
        """Run under the lock: finish journaled changes and clean dead staging (cheap: two
        small directories); on the first lock of this Store (``full``) also settle unit ids
        found in two layers, which needs a listing of every layer: only when a crash left
        something behind (a journal entry or dead staging), since only an interrupted change
        can leave a unit in two layers (fsck reports and fixes any other duplicate). The trash
        is emptied on the first lock and once it holds ``TRASH_BATCH`` entries."""
        crashed = False
        for name in sorted(os.listdir(self.journal_dir)):
            path = os.path.join(self.journal_dir, name)
            if name.endswith(".tmp"):
                _quiet_unlink(path)
                continue
            try:
                entry = self.read_journal(name)
            except (OSError, FormatError) as exc:
                dst = self.quarantine(path, "journal")
                log.error("%s: undecodable journal entry moved to %s: %s", path, dst, exc)
                continue
            crashed = True
            torn = self._torn_staged(entry) + self.lost_staged(entry)
            if torn:   # its barrier never completed: the change was never decided
                log.error("recovery: journal entry %s names torn or lost staged units "
                          "(%s): its barrier never completed; dropping the change whole",
                          path, torn)
                self.drop_entry(entry)
                continue
            log.info("recovery: completing %s %s", entry.op, entry.id)
            self.journal_apply(entry)
        pending = self.pending_staged()
        for name in os.listdir(self.staging):
            if name in pending or not self.staging_is_dead(name):
                continue
            path = os.path.join(self.staging, name)
            crashed = True
            if os.path.isdir(path) and not os.path.islink(path):
                fsops.rmtree(path)
            else:
                _quiet_unlink(path)
        if full or len(os.listdir(self.trash_dir)) >= TRASH_BATCH:
            self._empty_trash()
        if full and crashed:
            self._settle_duplicates()
            if not self.noreplace:
                self._drop_empty_claims()

    def _torn_staged(self, entry: JournalEntry) -> list[str]:
        """The staged units of ``entry`` still in staging that are not whole. Every one is
        whole once the entry's barrier completed; a torn one means the barrier failed (the
        abort could not remove the entry durably either) and a power loss kept the entry
        but not all of the units' files (``drop_entry``). Checked in full (every block's
        BLAKE3): this runs only in recovery after a crash."""
        torn = []
        for staged, _layer, unit_id in entry.publish:
            src = os.path.join(self.staging, staged)
            if os.path.isdir(src) and verify_unit(src, expect_id=unit_id)[1:] != ([],):
                torn.append(staged)
        return torn

    def drop_entry(self, entry: JournalEntry) -> bool:
        """Undo a change that was never decided (its barrier did not complete): remove its
        journal entry (and a temp file of it), make that removal durable, and only then its
        staged units; True if dropped. Were the staged units removed while the entry may
        still come back after a power loss, recovery would publish half-removed units (or
        apply the entry's removals alone). If the removal cannot be made durable, the
        staged units stay, logged: whichever way a power loss decides, the change is then
        whole or absent (dead staging is cleaned by a later writer)."""
        path = os.path.join(self.journal_dir, f"{entry.id}.json")
        try:
            for name in os.listdir(self.journal_dir):
                if name == f"{entry.id}.json" or (name.startswith(f"{entry.id}.json.")
                                                  and name.endswith(".tmp")):
                    try:
                        fsops.unlink(os.path.join(self.journal_dir, name))
                    except FileNotFoundError:
                        pass
            if self.sync:
                fsops.fsync_dir(self.journal_dir)
        except OSError as exc:
            log.error("%s %s: journal entry %s could not be removed durably (%s): its staged "
                      "units are kept", entry.op, entry.id, path, exc)
            return False
        for staged, _layer, _uid in entry.publish:
            src = os.path.join(self.staging, staged)
            if os.path.isdir(src) and not os.path.islink(src):
                fsops.rmtree(src)
        return True

    def _drop_empty_claims(self) -> None:
        """Remove the empty directories an older fsmem's fallback publish (mkdir, then rename
        onto it) left in a layer when it crashed between the two: never a unit (a unit holds
        its manifest), listed as one. Only on a store without no-replace rename, after a
        crash: one listing of each unit directory."""
        for layer in self.layers():
            for unit_id in self.iter_units(layer):
                path = self.unit_dir(layer, unit_id)
                if _empty_dir(path):
                    log.warning("recovery: %s is an empty directory left by an interrupted "
                                "publish; removed", path)
                    _quiet_rmdir(path)

    def _settle_duplicates(self) -> None:
        """A unit id in two layers (a crash mid-rename on some filesystems): keep the first
        valid copy in layer order context, documents, stablemem; quarantine the others."""
        seen: dict[str, list[str]] = {}
        for layer in self.layers():
            for unit_id in self.iter_units(layer):
                seen.setdefault(unit_id, []).append(layer)
        for unit_id, layers in seen.items():
            if len(layers) < 2:
                continue
            paths = [self.unit_dir(layer, unit_id) for layer in layers]
            valid = [p for p in paths if not verify_unit(p, read_data=False)[1]]
            keep = valid[0] if valid else paths[0]
            for path in paths:
                if path != keep:
                    self.quarantine(path, f"duplicate-{unit_id}")


FOREIGN_LABEL = "foreign-"   # quarantine name prefix of units discard kept for their files


def foreign_entries(unit_dir: str) -> list[str]:
    """Names in a unit directory that its manifest does not account for (a user's
    ``notes.txt``); a unit whose manifest cannot be read counts all but the manifest as
    foreign, so nothing unknown is ever deleted."""
    try:
        names = os.listdir(unit_dir)
    except OSError:
        return []
    known = {MANIFEST, VECTORS}
    try:
        manifest = read_manifest(unit_dir)
        known |= {block_filename(ref.digest, ref.mime) for ev in manifest.events
                  for ref in ev.blocks}
    except (FsmemError, OSError, ValueError):
        known = {MANIFEST}
    return sorted(n for n in names if n not in known)


def _pin_owner(name: str) -> Owner | None:
    """The owner of a pin ``<pid>@<host>~<random>`` (``<pid>~<random>`` before format 5)."""
    return parse_owner(name.split("~", 1)[0])


def _default_sync_strategy() -> SyncStrategy:
    """"batch" (the fsyncs of the "fsync" strategy, each step's issued at once), unless
    ``FSMEM_SYNC=batch|syncfs|fsync`` says otherwise.

    Measured on this project's machine, interleaved beside SQLite, quiet and beside a noisy
    neighbour (docs/DECISIONS.md): a wave of concurrent fdatasyncs beats one syncfs(2), which
    also flushes every other program's dirty data, and both beat fsyncs in turn (each its own
    journal commit and device flush). It needs nothing but fsync, so it is the default
    everywhere.
    """
    forced = os.environ.get("FSMEM_SYNC", "")
    if forced in SYNC_STRATEGIES:
        return forced  # type: ignore[return-value]
    if forced:
        log.warning("FSMEM_SYNC=%r is not one of %s; using batch", forced,
                    ", ".join(SYNC_STRATEGIES))
    return "batch"


def _quiet_unlink(path: str) -> None:
    try:
        fsops.unlink(path)
    except OSError:
        pass


def _empty_dir(path: str) -> bool:
    """A real directory (not a link) with nothing in it."""
    try:
        st = os.lstat(path)
        return stat.S_ISDIR(st.st_mode) and not os.listdir(path)
    except OSError:
        return False


def _quiet_rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass
