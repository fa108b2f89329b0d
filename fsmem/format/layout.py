"""The read side of a store root: paths, the marker, listings, the journal and consistent views.

Nothing here takes a lock, creates, probes or writes anything, so every function works on a
live store, a read-only mount and a restored backup alike. ``Store`` (the write side) builds on
``Layout``.

A reader sees one consistent state of the layers through ``Layout.consistent``: it lists the
layers with every pending journal entry applied in memory (a half-applied prune shows its after
state), and retries when a writer's journaled change began or ended while it read, or when a
unit it listed vanished under it (a recall or a remove renamed it away).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, TypeVar

import msgspec

from fsmem.format.errors import FormatError, FsmemError, NotFound
from fsmem.format.hosts import Owner, lease_fresh, lease_seconds, parse_owner, pid_alive
from fsmem.format.model import (
    AGENT_RE,
    FORMAT_VERSION,
    HASH_ALGORITHM,
    NAME_RE,
    Marker,
    check_name,
    decode_marker,
)
from fsmem.format.timestamps import Timestamp

__all__ = ["Layout", "View", "JournalEntry", "LAYERS", "Layer", "META", "Vanished",
           "l1_layer", "layer_agent", "is_l1", "valid_layer",
           "NotAStore", "read_small", "open_regular", "read_fd", "writer_alive", "staging_owner", "owner_dead"]

log = logging.getLogger("fsmem.layout")

Layer = Literal["context", "documents", "stablemem"]
LAYERS: tuple[Layer, ...] = ("context", "documents", "stablemem")
META = ".fsmem"
_L1_PREFIX = "context@"   # format 4: a named agent's L1 is ROOT/context@<agent>/


def l1_layer(agent: str) -> str:
    """The L1 layer of an agent: ``context`` for the default agent (""), else
    ``context@<agent>`` (a directory beside context/; '@' is in no unit id)."""
    return "context" if not agent else _L1_PREFIX + agent


def is_l1(layer: str) -> bool:
    """True for ``context`` and every agent's ``context@<agent>``."""
    return layer == "context" or layer.startswith(_L1_PREFIX)


def layer_agent(layer: str) -> str:
    """The agent whose L1 ``layer`` is ("" for ``context``); ValueError for L2/L3."""
    if layer == "context":
        return ""
    if layer.startswith(_L1_PREFIX) and AGENT_RE.match(layer[len(_L1_PREFIX):]):
        return layer[len(_L1_PREFIX):]
    raise ValueError(f"{layer!r} is not an L1 layer")


def valid_layer(layer: str) -> bool:
    if layer in LAYERS:
        return True
    try:
        return bool(layer_agent(layer))
    except ValueError:
        return False
_EPOCH_FILE = "epoch"
_MAX_ATTEMPTS = 1000
_SMALL_CAP = 16 << 20    # marker, journal entries, epoch: never this big
T = TypeVar("T")


STAGING_GRACE_S = 24 * 3600


def staging_owner(name: str) -> Owner | None:
    """The owner in a staging entry's name ``<unit-id>~<pid>@<host>~<random>`` (format 5;
    ``<unit-id>~<pid>~<random>`` before: this host's), or None."""
    parts = name.split("~")
    return parse_owner(parts[1]) if len(parts) == 3 else None


def owner_dead(owner: Owner | int | None, path: str, leases_dir: str | None = None) -> bool:
    """An entry whose owner is gone. This host's: its process is gone (never our own: another
    thread may be using it); another host's (format 5): that host's lease in ``leases_dir``
    expired (or it has none) and the entry is older than a lease; no owner known: older than
    a day."""
    if isinstance(owner, int):
        owner = Owner(owner)
    if owner is not None and not owner.local:
        if leases_dir is None or lease_fresh(leases_dir, owner.host):
            return False
        return _older_than(path, lease_seconds())
    if owner is not None and owner.pid == os.getpid():
        return False  # another thread of ours may be using it right now
    if owner is not None and not pid_alive(owner.pid):
        return True
    return _older_than(path, STAGING_GRACE_S)


def _older_than(path: str, seconds: float) -> bool:
    try:
        age = time.time() - os.lstat(path).st_mtime
    except FileNotFoundError:
        return False
    return age > seconds


class NotAStore(NotFound):
    """The path holds no fsmem store (and no HomeAgent memory directory to read in place)."""


class Vanished(FsmemError):
    """A unit listed by a view was renamed away while it was read: take a new view."""


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


def open_regular(path: str, *, dir_fd: int | None = None, cap: int | None = None,
                 one_link: bool = False) -> int:
    """Open store or inbox content for reading, safely: ``O_NOFOLLOW`` (no symlink),
    ``O_NONBLOCK`` (a FIFO never hangs the open), then fstat: a regular file, with
    ``one_link`` a single name (content dropped from outside), under ``cap`` bytes.
    FormatError names the path and what is wrong; OSError (ENOENT...) passes through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FormatError(f"{path}: a symbolic link (never followed)") from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(f"{path}: not a regular file")
        if one_link and st.st_nlink != 1:
            raise FormatError(f"{path}: has {st.st_nlink} hard links (one is required)")
        if cap is not None and st.st_size > cap:
            raise FormatError(f"{path}: {st.st_size} bytes, over the cap of {cap}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, cap: int, path: str) -> bytes:
    """Read an open file to its end, at most ``cap`` bytes (FormatError if it grew past)."""
    chunks, left = [], cap + 1
    while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > cap:
        raise FormatError(f"{path}: grew over the cap of {cap} bytes while read")
    return data


def read_small(path: str, cap: int = _SMALL_CAP, *, dir_fd: int | None = None,
               one_link: bool = False) -> bytes:
    """Read a small store file safely (``open_regular``): no symlink, no FIFO, a regular
    file under ``cap`` bytes."""
    fd = open_regular(path, dir_fd=dir_fd, cap=cap, one_link=one_link)
    try:
        return read_fd(fd, cap, path)
    finally:
        os.close(fd)


def writer_alive(lock_path: str) -> bool | None:
    """Whether some process holds the flock on ``lock_path``, read from /proc/locks (no lock
    taken); None where that cannot be told."""
    try:
        st = os.stat(lock_path)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            table = fh.read()
    except FileNotFoundError:
        return False if not os.path.exists(lock_path) else None
    except OSError:
        return None
    for line in table.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a "->" marks a waiter)
        if "FLOCK" not in parts or "->" in parts:
            continue
        for p in parts:
            if p.count(":") == 2:
                try:
                    ino = int(p.rsplit(":", 1)[1])
                except ValueError:
                    continue
                if ino == st.st_ino:
                    return True
    return False


@dataclass
class View:
    """One consistent listing: unit id -> directory per layer, pending journals applied."""

    units: dict[str, dict[str, str]]
    pending: list[JournalEntry] = field(default_factory=list)
    epoch: int = 0

    def layer(self, layer: str) -> list[tuple[str, str]]:
        """(unit id, path) of ``layer``, sorted by id."""
        return sorted(self.units.get(layer, {}).items())

    def locate(self, unit_id: str) -> tuple[str, str] | None:
        """The layer and path holding ``unit_id``; after a crash left a stray copy in a
        second layer, the copy with a manifest wins."""
        found = [(layer, path) for layer, units in self.units.items()
                 if (path := units.get(unit_id)) is not None]
        for layer, path in found:
            if os.path.isfile(os.path.join(path, "manifest.json")):
                return layer, path
        return found[0] if found else None


class Layout:
    """Where everything of a store root lives, and read-only access to it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.meta = os.path.join(self.root, META)
        self.staging = os.path.join(self.meta, "staging")
        self.journal_dir = os.path.join(self.meta, "journal")
        self.quarantine_dir = os.path.join(self.meta, "quarantine")
        self.index_dir = os.path.join(self.meta, "index")
        self.trash_dir = os.path.join(self.meta, "trash")
        self.lock_path = os.path.join(self.meta, "lock")
        self.leases_dir = os.path.join(self.meta, "leases")   # format 5: one file a host
        self.marker_path = os.path.join(self.meta, "marker.json")

    # -- what this directory is -------------------------------------------------------------
    def has_marker(self) -> bool:
        return os.path.isfile(self.marker_path) and not os.path.islink(self.marker_path)

    def is_homeagent_dir(self) -> bool:
        """A HomeAgent memory directory without fsmem's marker (read in place)."""
        if not os.path.isdir(self.root) or os.path.islink(self.root):
            return False
        if any(os.path.isfile(os.path.join(self.root, n)) for n in
               ("context.json", "graph.db", "context.json.adopted")):
            return True
        try:
            with os.scandir(os.path.join(self.root, "documents")) as it:
                return any(e.name.endswith(".json") for e in it)
        except OSError:
            return False

    def require_readable(self) -> None:
        """NotAStore unless this is an fsmem store (marker checked) or a HomeAgent directory."""
        if os.path.lexists(self.root) and (os.path.islink(self.root)
                                           or not os.path.isdir(self.root)):
            raise NotAStore(f"not an fsmem store: {self.root} (not a directory)")
        if self.has_marker():
            self.read_marker()
            return
        if os.path.lexists(self.marker_path):   # a FIFO, a directory, a symlink: never read
            raise NotAStore(f"not an fsmem store: {self.root} ({self.marker_path} is not a "
                            "regular file; `fsmem fsck --fix` rewrites it)")
        if not self.is_homeagent_dir():
            raise NotAStore(f"not an fsmem store: {self.root} (run fsmem init)")

    def read_marker(self) -> Marker:
        try:
            raw = read_small(self.marker_path)
        except OSError as exc:
            raise FormatError(f"{self.marker_path}: cannot read: {exc.strerror}") from exc
        try:
            marker = decode_marker(raw, self.marker_path)
        except RecursionError as exc:
            raise FormatError(f"{self.marker_path}: JSON nested too deeply") from exc
        except FormatError as exc:
            if "newer" in str(exc):
                raise
            raise FormatError(f"{exc} (a damaged marker: `fsmem fsck --fix` rewrites it when "
                              "the directory is recognisably an fsmem store)") from exc
        if marker.format > FORMAT_VERSION:
            raise FormatError(f"{self.marker_path}: format version {marker.format} is newer "
                              f"than this fsmem reads (version {FORMAT_VERSION}); upgrade fsmem")
        if marker.hash != HASH_ALGORITHM:
            raise FormatError(f"{self.marker_path}: hash {marker.hash!r} unsupported "
                              f"(this fsmem uses {HASH_ALGORITHM})")
        return marker

    # -- paths and listings -----------------------------------------------------------------
    def layer_dir(self, layer: str) -> str:
        if not valid_layer(layer):
            raise ValueError(f"unknown layer {layer!r} (one of {', '.join(LAYERS)}, or "
                             "context@<agent>)")
        return os.path.join(self.root, layer)

    def layers(self) -> tuple[str, ...]:
        """Every layer of this root: context, each agent's context@<agent> found here (by
        name), documents, stablemem."""
        try:
            with os.scandir(self.root) as it:
                agents = sorted(e.name for e in it if e.name.startswith(_L1_PREFIX)
                                and valid_layer(e.name) and e.is_dir(follow_symlinks=False))
        except OSError:
            agents = []
        return ("context", *agents, "documents", "stablemem")

    def store_id(self) -> str:
        """The store's id from marker.json (format 4), or "" (an older store, or none yet)."""
        try:
            return self.read_marker().id if self.has_marker() else ""
        except FormatError:
            return ""

    def unit_dir(self, layer: str, unit_id: str) -> str:
        return os.path.join(self.layer_dir(layer), check_name(unit_id))

    def list_layer(self, layer: str) -> dict[str, str]:
        """{unit id: path} of valid unit directory names in ``layer`` (no symlinks)."""
        base = self.layer_dir(layer)
        out: dict[str, str] = {}
        try:
            with os.scandir(base) as it:
                for entry in it:
                    if NAME_RE.match(entry.name) and entry.is_dir(follow_symlinks=False):
                        out[entry.name] = entry.path
        except (FileNotFoundError, NotADirectoryError):
            pass
        return out

    def iter_units(self, layer: str) -> Iterator[str]:
        """Unit ids in ``layer`` (a plain listing; see ``view`` for a consistent one)."""
        yield from sorted(self.list_layer(layer))

    def locate(self, unit_id: str) -> tuple[str, str]:
        """(layer, path) of a unit in a consistent view; NotFound if it is in no layer."""
        check_name(unit_id)
        found = self.view(only=unit_id).locate(unit_id)
        if found is None:
            raise NotFound(f"unit {unit_id!r} not found under {self.root}")
        return found

    # -- journal and epoch ------------------------------------------------------------------
    def epoch(self) -> int:
        """The change counter writers bump around every journaled change (0 if none yet)."""
        try:
            return int(read_small(os.path.join(self.meta, _EPOCH_FILE), 64) or b"0")
        except (OSError, ValueError, FormatError):
            return 0

    def journal_names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.journal_dir) if n.endswith(".json"))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_journal(self, name: str) -> JournalEntry:
        path = os.path.join(self.journal_dir, name)
        try:
            return _journal_decoder.decode(read_small(path))
        except msgspec.DecodeError as exc:
            raise FormatError(f"{path}: undecodable journal entry: {exc}") from exc
        except RecursionError as exc:
            raise FormatError(f"{path}: undecodable journal entry: JSON nested too deeply") \
                from exc

    def pending_journals(self) -> tuple[list[JournalEntry], list[tuple[str, str]]]:
        """Decodable pending entries, and (path, problem) for those that are not."""
        good, bad = [], []
        for name in self.journal_names():
            try:
                good.append(self.read_journal(name))
            except FileNotFoundError:
                continue   # completed while we listed
            except (OSError, FormatError) as exc:
                bad.append((os.path.join(self.journal_dir, name), str(exc)))
        return good, bad

    def pending_staged(self) -> set[str]:
        """Staging names that a pending journal entry will publish (never cleaned up)."""
        return {p[0] for e in self.pending_journals()[0] for p in e.publish}

    def lost_staged(self, entry: JournalEntry) -> list[str]:
        """The staged units of a pending entry that are nowhere: not in staging, and their
        unit id in no layer. After a power loss that kept the entry but not the staged
        directories (their creation unflushed, the entry's file flushed), the entry's barrier
        never completed, so its change was never decided: applying its removals would
        delete what only those units held. (An entry applied earlier whose deletion was
        lost has every unit in some layer, or removed since by a later change: skipping it
        then changes nothing.)"""
        lost, layers = [], None
        for staged, _layer, unit_id in entry.publish:
            if os.path.lexists(os.path.join(self.staging, staged)):
                continue
            layers = layers or self.layers()   # (one listing of the root, when needed)
            if not any(os.path.lexists(os.path.join(self.root, layer, unit_id))
                       for layer in layers):
                lost.append(staged)
        return lost

    def staging_is_dead(self, name: str) -> bool:
        """A staging entry left by a process that is gone (another host's: that host's lease
        expired; unknown owner: older than a day): safe to clean up."""
        return owner_dead(staging_owner(name), os.path.join(self.staging, name),
                          self.leases_dir)

    # -- consistent views -------------------------------------------------------------------
    def view(self, layers: tuple[str, ...] | None = None, *, only: str | None = None) -> View:
        """List ``layers`` (default: every layer, ``layers()``) with every pending journal
        entry applied (its after state); ``only``: look up that one unit id instead of
        listing whole layers."""
        epoch = self.epoch()
        if layers is None:
            layers = self.layers()
        pending, _ = self.pending_journals()
        if only is None:
            units = {layer: self.list_layer(layer) for layer in layers}
        else:
            units = {layer: {} for layer in layers}
            for layer in layers:
                path = os.path.join(self.root, layer, check_name(only))
                if not self.vanished(path) and not os.path.islink(path):
                    units[layer][only] = path
        for entry in pending:
            if self.lost_staged(entry):   # never decided: recovery drops it whole
                continue
            for layer, unit_id in entry.remove:
                units.get(layer, {}).pop(unit_id, None)
            for staged, layer, unit_id in entry.publish:
                if layer not in units or unit_id in units[layer] or only not in (None, unit_id):
                    continue
                for path in (os.path.join(self.staging, staged), os.path.join(
                        self.root, layer, unit_id)):
                    if os.path.isdir(path) and not os.path.islink(path):
                        units[layer][unit_id] = path
                        break
        return View(units=units, pending=pending, epoch=epoch)

    def consistent(self, read: Callable[[View], T], layers: tuple[str, ...] | None = None,
                   *, only: str | None = None) -> T:
        """Run ``read(view)`` until it completes without a journaled change beginning or
        ending meanwhile and without a listed unit vanishing under it (``Vanished``).
        ``only``: the view holds that one unit id (a stat per layer, no layer listed)."""
        for attempt in range(_MAX_ATTEMPTS):
            view = self.view(layers, only=only)
            try:
                result = read(view)
            except Vanished:
                time.sleep(min(0.0005 * attempt, 0.01))
                continue
            if self.epoch() == view.epoch:
                return result
        raise FsmemError(f"{self.root}: could not take a consistent view in {_MAX_ATTEMPTS} "
                         "attempts (a writer changes the store continuously)")

    def vanished(self, path: str) -> bool:
        """True if a unit directory is no longer where a view listed it."""
        try:
            return not stat.S_ISDIR(os.lstat(path).st_mode)
        except OSError as exc:
            return exc.errno in (errno.ENOENT, errno.ENOTDIR)
