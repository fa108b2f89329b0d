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
import shutil
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Iterator, Literal

import msgspec

from . import _fsops as fsops
from .errors import AlreadyExists, FormatError, FsmemError, NotFound, StoreLocked
from .model import (FORMAT_VERSION, HASH_ALGORITHM, Marker, check_name, decode_marker,
                    encode_pretty)
from .timestamps import Timestamp
from .unit import UnitBuilder, staging_owner

__all__ = ["Store", "LAYERS", "Layer", "Durability", "JournalEntry", "new_unit_id"]

log = logging.getLogger(__name__)

Layer = Literal["context", "documents", "stablemem"]
LAYERS: tuple[Layer, ...] = ("context", "documents", "stablemem")
Durability = Literal["full", "off"]
META = ".fsmem"
STAGING_GRACE_S = 24 * 3600


def new_unit_id(prefix: str = "u") -> str:
    """A fresh unit id that sorts by creation time: ``u-20261130T054012-3f2a91c0d4e5``."""
    return f"{prefix}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:12]}"


class JournalEntry(msgspec.Struct, kw_only=True):
    """A multi-step layer change, durable before its first visible step (the commit point).

    ``publish``: [staging name, layer, unit id] renamed into place; ``remove``: [layer, unit id]
    taken away after every publish is durable. Replaying an entry is idempotent.
    """

    id: str
    op: str
    created_at: Timestamp
    publish: list[tuple[str, str, str]] = []
    remove: list[tuple[str, str]] = []
    mtimes: dict[str, int] = {}


_journal_decoder = msgspec.json.Decoder(JournalEntry, dec_hook=lambda t, o: Timestamp.parse(o))
_renameat2_cache: dict[int, bool] = {}


class Store:
    """A store root on disk. Readers take no lock; every change runs under ``locked()``."""

    def __init__(self, root: str, *, durability: Durability = "full",
                 lock_timeout: float = 10.0, create: bool = True) -> None:
        if durability not in ("full", "off"):
            raise ValueError(f"durability must be 'full' or 'off', not {durability!r}")
        self.root = os.path.abspath(os.fspath(root))
        self.durability = durability
        self.lock_timeout = lock_timeout
        self.meta = os.path.join(self.root, META)
        self.staging = os.path.join(self.meta, "staging")
        self.journal_dir = os.path.join(self.meta, "journal")
        self.quarantine_dir = os.path.join(self.meta, "quarantine")
        self.index_dir = os.path.join(self.meta, "index")
        self._lock_fd: int | None = None
        self._lock_depth = 0
        self._recovered = False
        # How "full" durability is reached: fsync of every file and directory (portable), or
        # one syncfs(2) of the filesystem before the publish rename (Linux).
        self.sync_strategy: Literal["fsync", "syncfs"] = _default_sync_strategy()
        self._thread_lock = threading.RLock()
        self._init_layout(create)
        self.noreplace = self._probe_renameat2()

    # -- layout -------------------------------------------------------------------------
    def _init_layout(self, create: bool) -> None:
        marker_path = os.path.join(self.meta, "marker.json")
        if os.path.lexists(self.root) and not os.path.isdir(self.root):
            raise FormatError(f"{self.root}: exists and is not a directory")
        if not os.path.exists(marker_path) and not create:
            raise NotFound(f"{self.root}: not an fsmem store (no {META}/marker.json); run fsmem init")
        for path in (self.root, self.meta, self.staging, self.journal_dir, self.quarantine_dir,
                     self.index_dir, os.path.join(self.root, "inbox"),
                     *(os.path.join(self.root, layer) for layer in LAYERS)):
            if os.path.islink(path):
                raise FormatError(f"{path}: is a symlink; fsmem will not follow it")
            if not os.path.isdir(path):
                if os.path.lexists(path):
                    raise FormatError(f"{path}: exists and is not a directory")
                os.makedirs(path, exist_ok=True)
        if os.path.exists(marker_path):
            with open(marker_path, "rb") as fh:
                marker = decode_marker(fh.read(), marker_path)
            if marker.format > FORMAT_VERSION:
                raise FormatError(f"{marker_path}: format version {marker.format} is newer than "
                                  f"this fsmem reads (version {FORMAT_VERSION}); upgrade fsmem")
            if marker.hash != HASH_ALGORITHM:
                raise FormatError(f"{marker_path}: hash {marker.hash!r} unsupported "
                                  f"(this fsmem uses {HASH_ALGORITHM})")
            return
        marker = Marker(format=FORMAT_VERSION, hash=HASH_ALGORITHM, created_at=Timestamp.now())
        self.write_file_atomic(marker_path, encode_pretty(marker), sync=True)

    def _probe_renameat2(self) -> bool:
        dev = os.stat(self.staging).st_dev
        if dev not in _renameat2_cache:
            _renameat2_cache[dev] = fsops.renameat2_supported(self.staging)
            if not _renameat2_cache[dev]:
                log.warning("%s: renameat2(RENAME_NOREPLACE) unsupported; publishing with a "
                            "mkdir claim under the store lock", self.root)
        return _renameat2_cache[dev]

    @property
    def sync(self) -> bool:
        return self.durability == "full"

    def layer_dir(self, layer: str) -> str:
        if layer not in LAYERS:
            raise ValueError(f"unknown layer {layer!r} (one of {', '.join(LAYERS)})")
        return os.path.join(self.root, layer)

    def unit_dir(self, layer: str, unit_id: str) -> str:
        return os.path.join(self.layer_dir(layer), check_name(unit_id))

    def iter_units(self, layer: str) -> Iterator[str]:
        """Unit ids in ``layer``: valid names that are real directories (no symlinks)."""
        base = self.layer_dir(layer)
        try:
            entries = list(os.scandir(base))
        except FileNotFoundError:
            return
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False) and _valid(entry.name):
                yield entry.name

    def locate(self, unit_id: str) -> tuple[str, str]:
        """(layer, path) of a unit; NotFound if it is in no layer."""
        check_name(unit_id)
        found = [(layer, os.path.join(self.root, layer, unit_id)) for layer in LAYERS]
        found = [(layer, p) for layer, p in found if os.path.isdir(p) and not os.path.islink(p)]
        for layer, path in found:  # a crash may leave a stray copy: prefer a complete one
            if os.path.isfile(os.path.join(path, "manifest.json")):
                return layer, path
        if found:
            return found[0]
        raise NotFound(f"unit {unit_id!r} not found under {self.root}")

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

    def _acquire(self) -> None:
        path = os.path.join(self.meta, "lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreLocked(f"{path}: held by another writer for more than "
                                      f"{self.lock_timeout:g}s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        self._lock_fd = fd
        try:
            self.recover(full=not self._recovered)
            self._recovered = True
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def try_lock_free(self) -> bool:
        """True if no other process holds the writer lock right now."""
        fd = os.open(os.path.join(self.meta, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
        except BlockingIOError:
            return self._lock_depth > 0
        finally:
            os.close(fd)

    # -- writing ------------------------------------------------------------------------
    def builder(self, unit_id: str | None = None) -> UnitBuilder:
        return UnitBuilder(self.staging, new_unit_id() if unit_id is None else unit_id,
                           sync=self.sync and self.sync_strategy == "fsync")

    def write_file_atomic(self, path: str, data: bytes, *, sync: bool | None = None) -> None:
        """temp in the same directory → write → fsync → rename → fsync the directory."""
        sync = self.sync if sync is None else sync
        tmp = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        fd = fsops.open_(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fsops.write_all(fd, data)
            if sync:
                fsops.fsync(fd)
        except BaseException:
            os.close(fd)
            _quiet_unlink(tmp)
            raise
        os.close(fd)
        fsops.replace(tmp, path)
        if sync:
            fsops.fsync_dir(os.path.dirname(path))

    def publish(self, builder: UnitBuilder, layer: str) -> str:
        """Make a finished staged unit visible in ``layer`` with one no-replace rename."""
        dst = self.unit_dir(layer, builder.unit_id)
        with self.locked():
            if self.sync:
                if self.sync_strategy == "syncfs":
                    fsops.syncfs(self.staging)  # every block, the manifest, the directories
                else:
                    fsops.fsync_dir(self.staging)
            self.rename_dir(builder.path, dst)
            if self.sync:
                try:
                    fsops.fsync_dir(os.path.dirname(dst))
                    fsops.fsync_dir(self.staging)
                except OSError:
                    # Not durable, and a failed fsync is never retried: take it back out.
                    try:
                        self.discard(dst, sync=False)
                    except OSError:
                        log.error("%s: published but not durable, and could not be withdrawn",
                                  dst)
                    raise
        return dst

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
        with self.locked():  # fallback: claim the name with mkdir, then rename onto the claim
            try:
                fsops.mkdir(dst)
            except FileExistsError as exc:
                raise AlreadyExists(f"{dst}: already exists; nothing was replaced") from exc
            try:
                fsops.rename(src, dst)
            except BaseException:
                _quiet_rmdir(dst)
                raise

    def move(self, unit_id: str, src_layer: str, dst_layer: str) -> str:
        """Move a unit between layers: one no-replace rename, then both parents fsynced."""
        src = self.unit_dir(src_layer, unit_id)
        dst = self.unit_dir(dst_layer, unit_id)
        with self.locked():
            if not os.path.isdir(src) or os.path.islink(src):
                raise NotFound(f"{src}: no such unit")
            self.rename_dir(src, dst)
            if self.sync:
                fsops.fsync_dir(os.path.dirname(dst))
                fsops.fsync_dir(os.path.dirname(src))
        return dst

    def discard(self, path: str, *, sync: bool | None = None) -> None:
        """Take a directory out of sight by one rename into staging, then delete it there."""
        trash = os.path.join(self.staging, f"trash~{os.getpid()}~{uuid.uuid4().hex[:12]}")
        fsops.rename(path, trash)
        if self.sync if sync is None else sync:
            fsops.fsync_dir(os.path.dirname(path))
        shutil.rmtree(trash, ignore_errors=True)

    def quarantine(self, path: str, label: str) -> str:
        """Move a damaged entry into .fsmem/quarantine/ (never deleted)."""
        name = f"{time.strftime('%Y%m%dT%H%M%S')}-{label}-{uuid.uuid4().hex[:6]}"
        dst = os.path.join(self.quarantine_dir, name)
        fsops.rename(path, dst)
        if self.sync:
            fsops.fsync_dir(os.path.dirname(path))
            fsops.fsync_dir(self.quarantine_dir)
        log.warning("quarantined %s -> %s", path, dst)
        return dst

    # -- journal ------------------------------------------------------------------------
    def journal_commit(self, entry: JournalEntry) -> str:
        """Write a journal entry durably: from here on the change will be completed."""
        path = os.path.join(self.journal_dir, f"{check_name(entry.id, 'journal id')}.json")
        if self.sync:
            fsops.fsync_dir(self.staging)
        self.write_file_atomic(path, encode_pretty(entry), sync=True)
        return path

    def journal_apply(self, entry: JournalEntry) -> None:
        """Roll a committed entry forward; safe to run again after a crash at any step."""
        touched: set[str] = set()
        for staged, layer, unit_id in entry.publish:
            src = os.path.join(self.staging, staged)
            dst = self.unit_dir(layer, unit_id)
            if os.path.isdir(src):
                if os.path.lexists(dst):
                    shutil.rmtree(src, ignore_errors=True)
                else:
                    self.rename_dir(src, dst)
                    if unit_id in entry.mtimes:
                        os.utime(dst, ns=(entry.mtimes[unit_id], entry.mtimes[unit_id]))
                touched.add(os.path.dirname(dst))
        if self.sync:
            for parent in touched | {self.staging}:
                fsops.fsync_dir(parent)
        for layer, unit_id in entry.remove:
            path = self.unit_dir(layer, unit_id)
            if os.path.isdir(path):
                self.discard(path)
        path = os.path.join(self.journal_dir, f"{entry.id}.json")
        _quiet_unlink(path)
        if self.sync:
            fsops.fsync_dir(self.journal_dir)

    # -- recovery -----------------------------------------------------------------------
    def recover(self, *, full: bool = True) -> None:
        """Run under the lock: finish journaled changes and clean dead staging (cheap: two
        small directories); on the first lock of this Store (``full``) also settle unit ids
        found in two layers, which needs a listing of every layer."""
        for name in sorted(os.listdir(self.journal_dir)):
            path = os.path.join(self.journal_dir, name)
            if name.endswith(".tmp"):
                _quiet_unlink(path)
                continue
            try:
                with open(path, "rb") as fh:
                    entry = _journal_decoder.decode(fh.read())
            except (OSError, msgspec.DecodeError, FormatError) as exc:
                dst = self.quarantine(path, "journal")
                log.error("%s: undecodable journal entry moved to %s: %s", path, dst, exc)
                continue
            log.info("recovery: completing %s %s", entry.op, entry.id)
            self.journal_apply(entry)
        pending = self._pending_staged()
        for name in os.listdir(self.staging):
            if name in pending or not self._staging_is_dead(name):
                continue
            path = os.path.join(self.staging, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                _quiet_unlink(path)
        if full:
            self._settle_duplicates()

    def _pending_staged(self) -> set[str]:
        names: set[str] = set()
        for name in os.listdir(self.journal_dir):
            try:
                with open(os.path.join(self.journal_dir, name), "rb") as fh:
                    names.update(p[0] for p in _journal_decoder.decode(fh.read()).publish)
            except (OSError, msgspec.DecodeError, FormatError):
                pass
        return names

    def _staging_is_dead(self, name: str) -> bool:
        pid = staging_owner(name)
        if pid is not None and pid != os.getpid():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                pass
        elif pid == os.getpid():
            return False  # another thread of ours may be building it right now
        try:
            age = time.time() - os.lstat(os.path.join(self.staging, name)).st_mtime
        except FileNotFoundError:
            return False
        return age > STAGING_GRACE_S

    def _settle_duplicates(self) -> None:
        """A unit id in two layers (a crash mid-rename on some filesystems): keep the first
        valid copy in layer order context, documents, stablemem; quarantine the others."""
        from .unit import verify_unit
        seen: dict[str, list[str]] = {}
        for layer in LAYERS:
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


def _default_sync_strategy() -> Literal["fsync", "syncfs"]:
    """syncfs(2) where Linux reports writeback errors through it (5.8+), else per-file fsync.

    Measured on this project's machine (docs/BENCHMARKS.md): one syncfs per unit is faster than
    an fsync per block file. ``FSMEM_SYNC=fsync|syncfs`` overrides the choice.
    """
    forced = os.environ.get("FSMEM_SYNC", "")
    if forced in ("fsync", "syncfs"):
        return forced  # type: ignore[return-value]
    if not fsops.has_syncfs() or not sys.platform.startswith("linux"):
        return "fsync"
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return "fsync"
    return "syncfs" if (major, minor) >= (5, 8) else "fsync"


def _valid(name: str) -> bool:
    try:
        check_name(name)
        return True
    except FsmemError:
        return False


def _quiet_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _quiet_rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass
