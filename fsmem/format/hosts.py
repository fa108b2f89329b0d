"""Which host a process runs on, and whether another host's work in the store is still alive
(format 5, issue 28: one store on a shared filesystem, several hosts writing in turn).

``kill(pid, 0)`` and ``/proc/locks`` answer for this host only: a pid named by another host is
meaningless here. So every owner name in ``.fsmem/`` (staging, trash, snapshot pins) carries
the host (``<pid>@<host>``), the writer lock records its holder, and each host that runs a
writer keeps a lease, ``.fsmem/leases/<host>``, renewed while a writer lives there. Another
host's entry is alive while that lease is fresh; a host that dies has its leftovers cleaned
one lease period later.

The host id is a short stable token: the first 12 hex digits of the BLAKE3 of
``/etc/machine-id`` (else of the boot id). ``FSMEM_HOST_ID`` overrides it: for tests (one
machine playing two hosts in subprocesses) and for containers that share a machine id.
Bytes and paths only: nothing here knows what a unit or a journal is.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from functools import lru_cache

import msgspec

from fsmem.format.errors import FormatError

__all__ = ["host_id", "hostname", "Owner", "owner_token", "parse_owner", "lease_seconds",
           "lease_fresh", "renew_lease", "LockRecord", "lock_record", "read_lock_record",
           "process_start", "pid_alive", "HOST_RE", "LEASE_DEFAULT_S", "LOCK_RECORD_WIDTH",
           "lease_age", "record_alive"]

HOST_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")   # safe in a file name; no '~' or '@'
LEASE_DEFAULT_S = 15 * 60
LOCK_RECORD_WIDTH = 512     # the record is rewritten in place, padded: no truncate needed
_LEASE_CAP = 4096


@lru_cache(maxsize=8)
def _host_id(forced: str) -> str:
    if forced:
        if not HOST_RE.match(forced):
            raise FormatError(f"FSMEM_HOST_ID={forced!r}: a host id is 1-32 of a-z, 0-9, "
                              "'_' and '-', starting with a letter or digit")
        return forced
    # lazy: start-up, loaded only when used (+blake3)
    import blake3
    for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        try:
            with open(path, "rb") as fh:
                seed = fh.read(256).strip()
        except OSError:
            continue
        if seed:
            return blake3.blake3(b"fsmem-host:" + seed).hexdigest()[:12]
    return blake3.blake3(b"fsmem-host:" + hostname().encode()).hexdigest()[:12]


def host_id() -> str:
    """This host's id: 12 hex digits of the BLAKE3 of /etc/machine-id (else the boot id,
    else the host name); ``FSMEM_HOST_ID`` overrides it (tests; containers sharing a
    machine id). Cached."""
    return _host_id(os.environ.get("FSMEM_HOST_ID", ""))


def hostname() -> str:
    """This host's name, for people reading a record (never for deciding anything)."""
    return os.uname().nodename[:64]


@dataclass(frozen=True)
class Owner:
    """The process named in an entry: its pid and host ("" for a name written before format
    5, taken to be this host's)."""

    pid: int
    host: str = ""

    @property
    def local(self) -> bool:
        return not self.host or self.host == host_id()


def owner_token(pid: int | None = None) -> str:
    """``<pid>@<host>``: the owner part of a staging, trash or pin name."""
    return f"{os.getpid() if pid is None else pid}@{host_id()}"


def parse_owner(token: str) -> Owner | None:
    """The owner in ``<pid>@<host>`` or a bare ``<pid>`` (before format 5); None otherwise."""
    pid, at, host = token.partition("@")
    if not pid.isdigit() or (at and not HOST_RE.match(host)):
        return None
    return Owner(int(pid), host)


def pid_alive(pid: int) -> bool:
    """Whether a process of this host has this pid (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_start(pid: int | None = None) -> int:
    """The start time of a process of this host, in clock ticks after boot (field 22 of
    /proc/<pid>/stat): with the boot id, tells a pid reused from the one recorded; 0 where
    it cannot be read."""
    try:
        with open(f"/proc/{os.getpid() if pid is None else pid}/stat", "rb") as fh:
            data = fh.read()
        return int(data[data.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


@lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read(64).strip()
    except OSError:
        return ""


# -- leases ---------------------------------------------------------------------------------
def lease_seconds() -> float:
    """How long a host's lease lasts after its last renewal: 15 minutes, or
    ``FSMEM_LEASE_S`` (tests set it small). Every host of a store must use the same."""
    raw = os.environ.get("FSMEM_LEASE_S", "")
    if not raw:
        return float(LEASE_DEFAULT_S)
    try:
        value = float(raw)
    except ValueError:
        raise FormatError(f"FSMEM_LEASE_S={raw!r}: not a number of seconds") from None
    if not 0 < value <= 7 * 86400:
        raise FormatError(f"FSMEM_LEASE_S={raw!r}: between 0 and a week of seconds")
    return value


def lease_age(leases_dir: str, host: str) -> float | None:
    """Seconds since ``host`` last renewed its lease (the file's mtime, by this host's
    clock: hosts' clocks must agree to well within a lease), or None if it has none."""
    if not HOST_RE.match(host):
        return None
    try:
        st = os.stat(os.path.join(leases_dir, host), follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return time.time() - st.st_mtime


def lease_fresh(leases_dir: str, host: str) -> bool:
    """Whether ``host`` renewed its lease within the lease length."""
    age = lease_age(leases_dir, host)
    return age is not None and age <= lease_seconds()


def renew_lease(leases_dir: str) -> None:
    """Renew this host's lease: its file rewritten in place (host, name); only the mtime
    changes, and it is what counts (the bytes stay the same, so a byte-for-byte comparison
    of a store before and after a refused operation sees no change). Not flushed: a lease lost to a power loss is renewed again at once.
    Anything but a plain file of its own there (a symlink, a FIFO) is replaced."""
    from fsmem.format import fsops  # lazy: a reader never loads the mutating calls (+ctypes)
    path = os.path.join(leases_dir, host_id())
    data = msgspec.json.encode({"host": host_id(), "hostname": hostname()}).ljust(256) + b"\n"
    try:
        fd = fsops.open_(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        try:
            fsops.mkdir(leases_dir)
        except FileExistsError:
            pass
        return renew_lease(leases_dir)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size <= _LEASE_CAP:
                fsops.write_all(fd, data)
                return
        finally:
            os.close(fd)
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = fsops.open_(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fsops.write_all(fd, data)
    finally:
        os.close(fd)
    fsops.replace(tmp, path)


# -- the lock record ------------------------------------------------------------------------
class LockRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Who holds the writer lock, written into ``.fsmem/lock`` when it is taken and blanked
    before it is released (advisory: the flock is the lock)."""

    host: str
    hostname: str = ""
    pid: int
    start: int = 0          # the process's start, clock ticks after boot (process_start)
    boot: str = ""          # the boot id of its host, with ``start`` naming one process
    acquired_at: float = 0.0


_record_decoder = msgspec.json.Decoder(LockRecord)


@lru_cache(maxsize=4)
def _record_head(pid: int, host: str) -> bytes:
    """The record of a process but its time, as JSON up to ``"acquired_at":`` (cached: the
    lock is taken for every operation)."""
    full = msgspec.json.encode(LockRecord(host=host, hostname=hostname(), pid=pid,
                                          start=process_start(pid), boot=_boot_id(),
                                          acquired_at=1.0))
    return full[:full.rindex(b":") + 1]


def lock_record() -> bytes:
    """This process's record for the lock file, padded to ``LOCK_RECORD_WIDTH``."""
    data = _record_head(os.getpid(), host_id()) + repr(time.time()).encode() + b"}"
    return data.ljust(LOCK_RECORD_WIDTH - 1) + b"\n"


def read_lock_record(data: bytes) -> LockRecord | None:
    """The record in a lock file's bytes; None when blank (released, or never written by a
    format-5 writer) or not a record."""
    data = data.strip()
    if not data:
        return None
    try:
        record = _record_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    return record if HOST_RE.match(record.host) else None


def record_alive(record: LockRecord, leases_dir: str) -> bool:
    """Whether the process a lock record names lives: on this host its pid (and, where
    recorded, its start time on this boot); on another, that host's lease is fresh."""
    if record.host != host_id():
        return lease_fresh(leases_dir, record.host)
    if not pid_alive(record.pid):
        return False
    if record.start and record.boot and record.boot == _boot_id():
        return process_start(record.pid) == record.start
    return True
