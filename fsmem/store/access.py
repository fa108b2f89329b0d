"""Access statistics outside the units: an append-only log under ``.fsmem/``.

Units are immutable once published, so a query's bump of ``access_count``/``last_access`` is one
small line appended to ``.fsmem/access.log`` (``<unit id> <unix ns>``; no fsync: it is a
statistic). A unit's access count is the count its manifest was written with (a new unit counts
its write, as HomeAgent does; a prune remainder carries its original's history) plus its lines.

Writers compact: the log is sealed by a rename (``access.<ns>.log``), a fresh one started, and
the sealed logs folded into ``access.state`` (counts, last access, and how far each sealed log
was folded). A sealed log is deleted only after a grace period, so a reader that opened the
log just before the seal never writes into a deleted file. Readers append when the log exists
and is writable; on a read-only store they simply do not count.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from types import MappingProxyType
from typing import Iterable, Mapping

import msgspec

from fsmem.format.errors import FsmemError
from fsmem.format.layout import open_regular, read_small
from fsmem.format.model import NAME_RE
from fsmem.store.derived import make_room, replace_file

__all__ = ["AccessLog", "AccessStats"]

log = logging.getLogger("fsmem.access")

LOG = "access.log"
STATE = "access.state"
COMPACT_BYTES = 1 << 20
SEAL_GRACE_S = 60.0


class AccessStats(msgspec.Struct, array_like=True):
    count: int = 0
    last_ns: int = 0


class _State(msgspec.Struct, kw_only=True):
    version: int = 1
    units: dict[str, AccessStats] = {}
    folded: dict[str, int] = {}     # sealed log name -> bytes folded


_state_decoder = msgspec.json.Decoder(_State)


class AccessLog:
    """The access statistics of one store (``meta`` is its ``.fsmem`` directory)."""

    def __init__(self, meta: str) -> None:
        self.meta = meta
        self.path = os.path.join(meta, LOG)
        # stats() memo: the fold of state + sealed logs (keyed by their stamps) and of the
        # live log up to an offset (keyed by its inode): a call reads only appended bytes.
        self._memo_key: tuple = ()
        self._memo_base: dict[str, AccessStats] = {}
        self._memo_units: dict[str, AccessStats] = {}
        self._memo_ino = -1
        self._memo_off = 0

    # -- writing a statistic (readers too) -------------------------------------------------
    def create(self) -> None:
        """Writers make the log at open, so readers never have to create it."""
        # lazy: start-up, loaded only when used (+ctypes, struct)
        from fsmem.format import fsops as fsops
        try:
            make_room(self.path, self.meta)   # a FIFO or a directory there: taken away
            fd = fsops.open_(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
                             | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
            os.close(fd)
        except OSError as exc:
            log.debug("%s: cannot create: %s", self.path, exc)

    def record(self, unit_ids: Iterable[str], when_ns: int | None = None) -> bool:
        """Append one line per unit; False (and nothing raised) where the log is missing or
        not writable (a read-only store just answers)."""
        # lazy: start-up, loaded only when used (+ctypes, struct)
        from fsmem.format import fsops as fsops
        ns = time.time_ns() if when_ns is None else when_ns
        data = "".join(f"{u} {ns}\n" for u in unit_ids if NAME_RE.match(u)).encode()
        if not data:
            return True
        try:
            fd = fsops.open_(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW
                             | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EROFS, errno.EACCES, errno.EPERM):
                log.warning("%s: access not counted: %s", self.path, exc)
            return False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):   # a FIFO someone reads: not ours
                log.warning("%s: not a regular file; access not counted", self.path)
                return False
            fsops.write_all(fd, data)   # one write: O_APPEND keeps concurrent lines whole
            return True
        except OSError as exc:
            log.warning("%s: access not counted: %s", self.path, exc)
            return False
        finally:
            os.close(fd)

    # -- reading ---------------------------------------------------------------------------
    def stats(self) -> Mapping[str, AccessStats]:
        """unit id -> (accesses recorded since its manifest was written, last access ns).

        Memoised: while the state file and the sealed logs are unchanged (same stamps) and
        the live log is the same file, only the bytes appended since the last call are read.
        The answer is a read-only view, valid until the next call."""
        sealed = self._sealed()
        key = tuple(_stamp(os.path.join(self.meta, n)) for n in (STATE, *sealed)) + (
            tuple(sealed),)
        if key != self._memo_key:
            state = self._state()
            base = {u: AccessStats(s.count, s.last_ns) for u, s in state.units.items()}
            for name in sealed:
                _fold(base, self._read(name, state.folded.get(name, 0)))
            self._memo_key, self._memo_base, self._memo_ino = key, base, -1
        ino, size, _ = _stamp(self.path)
        if ino != self._memo_ino or size < self._memo_off:   # a new or truncated log
            self._memo_units = _copy(self._memo_base)
            self._memo_ino, self._memo_off = ino, 0
        self._memo_off += _fold(self._memo_units, self._read(LOG, self._memo_off))
        return MappingProxyType(self._memo_units)

    def _state(self) -> _State:
        try:
            return _state_decoder.decode(read_small(os.path.join(self.meta, STATE), 1 << 30))
        except FileNotFoundError:
            return _State()
        except (OSError, FsmemError, msgspec.DecodeError, ValueError) as exc:
            log.warning("%s: unreadable access state (%s); counting from the logs",
                        os.path.join(self.meta, STATE), exc)
            return _State()

    def _sealed(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.meta)
                          if n.startswith("access.") and n.endswith(".log") and n != LOG)
        except FileNotFoundError:
            return []

    def _read(self, name: str, offset: int) -> bytes:
        """The bytes of a log from ``offset`` on (a regular file only, capped at 1 GiB)."""
        path = os.path.join(self.meta, name)
        try:
            fd = open_regular(path, cap=1 << 30)
        except FileNotFoundError:
            return b""
        except (OSError, FsmemError) as exc:
            log.warning("%s: unreadable access log (%s); not counted", path, exc)
            return b""
        try:
            st = os.fstat(fd)
            chunks, pos = [], offset
            while pos < st.st_size:
                chunk = os.pread(fd, st.st_size - pos, pos)
                if not chunk:
                    break
                chunks.append(chunk)
                pos += len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            log.warning("%s: unreadable access log: %s", name, exc)
            return b""
        finally:
            os.close(fd)

    # -- compaction (writers, under the store lock) ----------------------------------------
    def compact(self, *, force: bool = False) -> bool:
        """Fold sealed logs into the state when the log has grown (or ``force``); True if
        it did. The caller holds the writer lock."""
        # lazy: start-up, loaded only when used (+ctypes, struct)
        from fsmem.format import fsops as fsops
        for name in (LOG, STATE, *self._sealed()):   # a FIFO or a directory: taken away
            make_room(os.path.join(self.meta, name), self.meta)
        try:
            size = os.lstat(self.path).st_size
        except FileNotFoundError:
            size = 0
        sealed = self._sealed()
        if not force and size < COMPACT_BYTES and not sealed:
            return False
        if size:
            fsops.rename(self.path, os.path.join(self.meta, f"access.{time.time_ns()}.log"))
            self.create()
            sealed = self._sealed()
        state = self._state()
        now = time.time()
        gone = []
        for name in sealed:
            done = state.folded.get(name, 0)
            done += _fold(state.units, self._read(name, done))
            state.folded[name] = done
            if now - _sealed_at(name) > SEAL_GRACE_S:
                gone.append(name)
        self._write_state(state)
        for name in gone:   # its bytes are in the state; late appends past the grace: none
            try:
                fsops.unlink(os.path.join(self.meta, name))
            except FileNotFoundError:
                pass
            state.folded.pop(name, None)
        if gone:
            self._write_state(state)
        return True

    def restore(self, stats: Mapping[str, AccessStats]) -> list[str]:
        """Add the logged statistics of units this store has none for (an archive's import);
        returns their ids. Units with statistics of their own keep them, so running an
        import again never counts twice. The caller holds the writer lock."""
        have = self.stats()
        add = {u: s for u, s in stats.items() if u not in have and NAME_RE.match(u)
               and s.count > 0}
        if add:
            state = self._state()
            for uid, s in add.items():
                state.units[uid] = AccessStats(s.count, s.last_ns)
            self._write_state(state)
        return sorted(add)

    def _write_state(self, state: _State) -> None:
        # the data before the name, and the name before a folded log goes (always flushed:
        # a compaction is rare, the log has grown past COMPACT_BYTES)
        replace_file(os.path.join(self.meta, STATE), msgspec.json.encode(state), self.meta,
                     sync=True)


def _stamp(path: str) -> tuple[int, int, int]:
    """(inode, size, mtime) of a file, or (-1, 0, 0) if it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return (-1, 0, 0)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _copy(units: dict[str, AccessStats]) -> dict[str, AccessStats]:
    return {u: AccessStats(s.count, s.last_ns) for u, s in units.items()}


def _sealed_at(name: str) -> float:
    stamp = name[len("access."):-len(".log")]
    return int(stamp) / 1e9 if stamp.isdigit() else 0.0


def _fold(units: dict[str, AccessStats], data: bytes) -> int:
    """Count the complete lines of ``data``; returns how many bytes they span (a line being
    appended right now is left for the next read)."""
    end = data.rfind(b"\n") + 1
    for line in data[:end].split(b"\n"):
        parts = line.split(b" ")
        if len(parts) != 2 or not parts[1].isdigit():
            continue   # a torn line of a crashed append: a statistic, skipped
        uid = parts[0].decode("ascii", "replace")
        s = units.get(uid)
        if s is None:
            units[uid] = s = AccessStats()
        s.count += 1
        s.last_ns = max(s.last_ns, int(parts[1]))
    return end
