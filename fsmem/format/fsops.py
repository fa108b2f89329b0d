"""Every filesystem call that changes the store goes through this module.

One narrow layer makes faults injectable (a crash or an errno at the Nth call), which is how
the crash-point sweeps and ENOSPC/EIO tests drive the real code paths. Set ``FSMEM_CRASH_AT=N``
to ``os._exit(77)`` just before the Nth mutating call, or ``FSMEM_FAIL_AT=N:ERRNO[:op]`` to raise
``OSError(ERRNO)`` at the Nth call (of ``op`` only, when given). ``set_hook`` does the same from code.
``set_recorder`` logs every call with its arguments (the power-loss test replays such a log).
``FSMEM_CALLS_OUT=path`` writes the number of mutating calls to ``path`` at a normal exit (a crash
sweep learns how many points there are).
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:   # the flush workers start on the first flush (CLI start-up)
    import queue

__all__ = [
    "set_hook", "call_count", "open_", "write_all", "fsync", "fsync_dir", "syncfs", "close",
    "link", "unlink", "mkdir", "rmdir", "rename", "replace", "rename_noreplace",
    "renameat2_supported", "CRASH_EXIT_CODE", "has_syncfs", "rmtree", "utime", "set_recorder",
    "record_mark", "flush_many", "flush_many_start", "FLUSH_THREADS",
]

CRASH_EXIT_CODE = 77
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100

Hook = Callable[[str], None]
_hook: Hook | None = None
_calls = 0
# The recorder: a list of (op, *args) tuples, file descriptors mapped to the open that made them.
_log: list[tuple] | None = None
_fd_open: dict[int, int] = {}
_path_open: dict[str, int] = {}   # absolute path -> the open that made its inode (recording)


def set_recorder(log: list[tuple] | None) -> None:
    """Append every mutating call to ``log`` (None stops recording). Entries: ("open", id,
    path, created, append), ("write", id, bytes), ("fsync", id), ("fsync_dir", path),
    ("syncfs",), ("rename", src, dst), ("link", src, dst), ("unlink", path), ("mkdir", path),
    ("rmdir", path), ("utime", path, ns), ("mark", label); paths are absolute. A flush of a
    wave (``flush_many``) is logged when it completes, with a third field: the log position
    where it started (a single ``fsync``/``fsync_dir`` starts and completes at its entry)."""
    global _log
    _log = log
    _fd_open.clear()
    _path_open.clear()


def record_mark(label: str) -> None:
    """Put a marker in the recorded log (e.g. "an operation returned here")."""
    if _log is not None:
        _log.append(("mark", label))


def _rec(*entry: object) -> None:
    if _log is not None:
        _log.append(entry)


def _abs(path: str | os.PathLike, dir_fd: int | None = None) -> str:
    path = os.fsdecode(path)
    if dir_fd is not None and not os.path.isabs(path):
        return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
    return os.path.abspath(path)


def set_hook(hook: Hook | None) -> None:
    """Install ``hook(op)``, run before every mutating call; it may raise or exit."""
    global _hook, _calls
    _hook, _calls = hook, 0


def call_count() -> int:
    """How many mutating calls have run since the hook was (re)set."""
    return _calls


def _env_hook() -> Hook | None:
    crash = os.environ.get("FSMEM_CRASH_AT")
    fail = os.environ.get("FSMEM_FAIL_AT")
    if not crash and not fail:
        return None
    crash_n = int(crash) if crash else -1
    fail_n, fail_errno, fail_op, fail_every = -1, 0, "", False
    if fail:
        parts = fail.split(":")
        fail_n = int(parts[0].rstrip("+"))
        fail_every = parts[0].endswith("+")
        fail_errno = getattr(errno, parts[1]) if not parts[1].isdigit() else int(parts[1])
        fail_op = parts[2] if len(parts) > 2 else ""
    seen_op = 0

    def hook(op: str) -> None:
        nonlocal seen_op
        if _calls == crash_n:
            os._exit(CRASH_EXIT_CODE)
        if fail_n >= 0 and (not fail_op or op == fail_op):
            seen_op += 1
            if seen_op == fail_n or (fail_every and seen_op > fail_n):
                raise OSError(fail_errno, f"injected {os.strerror(fail_errno)} at {op} #{seen_op}")
    return hook


def _enter(op: str) -> None:
    global _calls
    _calls += 1
    if _hook is not None:
        _hook(op)


def open_(path: str | os.PathLike, flags: int, mode: int = 0o666, *, dir_fd: int | None = None) -> int:
    writing = bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
    if writing:
        _enter("open")
    existed = _log is not None and writing and os.path.lexists(_abs(path, dir_fd))
    fd = os.open(path, flags | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    if _log is not None and writing:
        _fd_open[fd] = _path_open[_abs(path, dir_fd)] = len(_log)
        _rec("open", len(_log), _abs(path, dir_fd), not existed, bool(flags & os.O_APPEND))
    return fd


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte; a short write is retried, a zero-length write is an error."""
    _enter("write")
    if _log is not None and fd in _fd_open:
        _rec("write", _fd_open[fd], bytes(data))
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write returned 0")
        view = view[n:]


def fsync(fd: int) -> None:
    _enter("fsync")
    if _log is not None and fd in _fd_open:
        _rec("fsync", _fd_open[fd])
    os.fsync(fd)


def close(fd: int) -> None:
    _fd_open.pop(fd, None)
    os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory so the names it holds are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _enter("fsync")
        if _log is not None:
            _rec("fsync_dir", _abs(path))
        os.fsync(fd)
    finally:
        os.close(fd)


# dlopen(NULL): the C library the interpreter runs on, as ctypes.util.find_library("c") found
# it, without the ldconfig child process find_library starts at import (CLI start-up)
_libc = ctypes.CDLL(None, use_errno=True)
_syncfs = getattr(_libc, "syncfs", None)
_renameat2 = getattr(_libc, "renameat2", None)
if _renameat2 is not None:
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    _renameat2.restype = ctypes.c_int


def has_syncfs() -> bool:
    return _syncfs is not None


def syncfs(path: str | os.PathLike) -> None:
    """Flush the whole filesystem holding ``path`` (one call for all files of a unit)."""
    _enter("fsync")
    _rec("syncfs")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _syncfs is None:
            os.sync()
            return
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}", os.fspath(path))
    finally:
        os.close(fd)


_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    _sync_file_range.restype = ctypes.c_int
_SFR_WRITE = 2
_fdatasync = getattr(os, "fdatasync", os.fsync)   # macOS has no fdatasync
FLUSH_THREADS = 32   # one wave: a unit's ~25 files and its directories in flight at once


class _Wave:
    """One ``flush_many_start``: how many of its flushes are still running, each one's
    error, and a lock held until the last one is done (the waiter's wake-up)."""

    __slots__ = ("left", "errors", "done")

    def __init__(self, n: int) -> None:
        self.left = n
        self.errors: list[BaseException | None] = [None] * n
        self.done = threading.Lock()
        self.done.acquire()


# The flush workers: threads started as waves need them (at most FLUSH_THREADS), each taking
# one (fd, is_dir, wave, index) at a time from one queue. Not a ThreadPoolExecutor: a Future,
# its Condition and a work item per flush cost more CPU than the flush itself where it is
# cheap (tmpfs, a device with a fast cache flush: issue 27), and a worker that finds more in
# the queue after a flush takes it without another wake-up. ``_state`` guards the counts:
# ``_idle`` workers wait for an item no wave has claimed for them yet, ``_backlog`` items
# wait for a worker (every one busy and FLUSH_THREADS running); a worker done with an item
# takes a backlog item if there is one, else becomes idle, so each queued item has a worker.
_queue: "queue.SimpleQueue[tuple[int, bool, _Wave, int]] | None" = None
_state = threading.Lock()
_threads = _idle = _backlog = 0


def _flush_worker(get: "Callable[[], tuple[int, bool, _Wave, int]]") -> None:
    global _idle, _backlog
    while True:
        fd, is_dir, wave, i = get()
        try:
            wave.errors[i] = _flush_one(fd, is_dir)
        except BaseException as exc:   # noqa: BLE001 - a bug: the wait raises it, the worker lives
            wave.errors[i] = exc
        finally:
            with _state:
                wave.left -= 1
                last = wave.left == 0
                if _backlog:
                    _backlog -= 1
                else:
                    _idle += 1
            if last:
                wave.done.release()


def _dispatch(items: list[tuple[int, bool, _Wave, int]]) -> None:
    """Queue one wave's flushes, starting the workers they need first (if a thread cannot
    start, nothing of the wave is queued and the error is raised)."""
    global _queue, _threads, _idle, _backlog
    with _state:
        if _queue is None:
            # lazy: start-up, loaded only when used (+queue)
            import queue
            _queue = queue.SimpleQueue()
        reuse = min(len(items), _idle)
        spawn = min(len(items) - reuse, FLUSH_THREADS - _threads)
        _idle -= reuse
        _threads += spawn
        _backlog += len(items) - reuse - spawn
        get = _queue.get
    started = 0
    try:
        for _ in range(spawn):
            threading.Thread(target=_flush_worker, args=(get,), name="fsmem-flush",
                             daemon=True).start()
            started += 1
    except BaseException:
        with _state:   # the threads that did start wait as idle workers
            _threads -= spawn - started
            _idle += reuse + started
            _backlog -= len(items) - reuse - spawn
        raise
    put = _queue.put
    for item in items:
        put(item)


def _forget_workers() -> None:   # a forked child has none of the parent's threads
    global _queue, _state, _threads, _idle, _backlog
    _queue, _state, _threads, _idle, _backlog = None, threading.Lock(), 0, 0, 0


os.register_at_fork(after_in_child=_forget_workers)


def _flush_one(fd: int, is_dir: bool) -> OSError | None:
    try:
        if is_dir:
            os.fsync(fd)
        else:
            _fdatasync(fd)
    except OSError as exc:
        return exc
    return None


def flush_many(files: Sequence[str], dirs: Sequence[str]) -> None:
    """Make ``files`` (their data) and ``dirs`` (the names they hold) durable in one wave:
    writeback of every file is started first (``sync_file_range``), then an fdatasync of
    each file and an fsync of each directory are issued at once from worker threads, so the
    filesystem folds them into one journal commit and the device's cache flushes merge,
    instead of one commit and one flush per call in turn (the "batch" sync strategy, chosen
    by measurement: docs/DECISIONS.md). Returns once every one is durable; if any failed,
    raises the first failure after all have finished (nothing is left in flight).

    The wave is one "fsync" call for the fault hook (one barrier: it fails or succeeds as a
    whole, and is never retried); once it has completed, the recorder logs ("fsync", open
    id, start) for each file and ("fsync_dir", path, start) for each directory, in the order
    given, ``start`` being the log position where the wave started: calls recorded between
    the two (while the flushes were in flight) are not made durable by them."""
    flush_many_start(files, dirs)()


def flush_many_start(files: Sequence[str], dirs: Sequence[str]) -> Callable[[], None]:
    """``flush_many`` issued, not awaited: returns the wait (which raises as ``flush_many``
    does, and must be called exactly once), so that CPU work overlaps the wave."""
    opened: list[tuple[int, bool, str]] = []
    try:
        for path, is_dir in [*((f, False) for f in files), *((d, True) for d in dirs)]:
            flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
            fd = os.open(path, flags | os.O_DIRECTORY if is_dir else flags)
            opened.append((fd, is_dir, os.fspath(path)))
        _enter("fsync")
        # Recorded when the wave completes, each entry with the log position where it
        # started: it makes durable what was done before its start, and nothing done while
        # it was in flight (a rename issued then is not ordered after it).
        started = len(_log) if _log is not None else 0
        done: list[tuple] = []
        if _log is not None:
            for _fd, is_dir, path in opened:
                if is_dir:
                    done.append(("fsync_dir", _abs(path), started))
                elif _abs(path) in _path_open:   # else its inode predates the recording
                    done.append(("fsync", _path_open[_abs(path)], started))
        if _sync_file_range is not None:
            for fd, is_dir, _path in opened:
                if not is_dir:   # a hint: an error here shows again in the fdatasync
                    _sync_file_range(fd, 0, 0, _SFR_WRITE)
        wave = _Wave(len(opened))
        if opened:
            _dispatch([(fd, is_dir, wave, i) for i, (fd, is_dir, _p) in enumerate(opened)])
    except BaseException:
        for fd, _is_dir, _path in opened:
            os.close(fd)
        raise

    def wait() -> None:
        try:
            if opened:
                wave.done.acquire()
        finally:
            for fd, _is_dir, _path in opened:
                os.close(fd)
        for (_fd, _is_dir, path), exc in zip(opened, wave.errors):
            if isinstance(exc, OSError):
                raise OSError(exc.errno, f"fsync: {exc.strerror}", path) from exc
            if exc is not None:
                raise exc
        for entry in done:   # (only a wave that succeeded made anything durable)
            _rec(*entry)
    return wait


def link(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    _enter("link")
    if _log is not None:   # _abs costs a normpath per path: only when recording
        _rec("link", _abs(src), _abs(dst))
        if _abs(src) in _path_open:
            _path_open[_abs(dst)] = _path_open[_abs(src)]
    os.link(src, dst, follow_symlinks=False)


def unlink(path: str | os.PathLike, *, dir_fd: int | None = None) -> None:
    _enter("unlink")
    if _log is not None:   # _abs of a dir_fd path costs a readlink: only when recording
        _rec("unlink", _abs(path, dir_fd))
    os.unlink(path, dir_fd=dir_fd)


def mkdir(path: str | os.PathLike, mode: int = 0o777) -> None:
    _enter("mkdir")
    if _log is not None:
        _rec("mkdir", _abs(path))
    os.mkdir(path, mode)


def rmdir(path: str | os.PathLike) -> None:
    _enter("rmdir")
    if _log is not None:
        _rec("rmdir", _abs(path))
    os.rmdir(path)


def rename(src: str | os.PathLike, dst: str | os.PathLike, *, src_dir_fd: int | None = None,
           dst_dir_fd: int | None = None) -> None:
    """Plain rename: only for files, or directories to a name known not to exist."""
    _enter("rename")
    if _log is not None:   # _abs of a dir_fd path costs a readlink: only when recording
        _rec("rename", _abs(src, src_dir_fd), _abs(dst, dst_dir_fd))
    os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


def replace(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Atomically replace a file (never used onto a directory)."""
    _enter("rename")
    if _log is not None:
        _rec("rename", _abs(src), _abs(dst))
        if _abs(src) in _path_open:
            _path_open[_abs(dst)] = _path_open.pop(_abs(src))
    os.replace(src, dst)


def rename_noreplace(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """renameat2(RENAME_NOREPLACE): EEXIST if ``dst`` exists, even as an empty directory.

    Raises OSError(EINVAL/ENOSYS) where the filesystem or libc lacks it; callers probe with
    ``renameat2_supported`` and fall back to a plain rename under the store lock.
    """
    _enter("rename")
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 not in libc")
    rc = _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fspath(src), None, os.fspath(dst))
    if _log is not None:
        _rec("rename", _abs(src), _abs(dst))


def rmtree(path: str | os.PathLike, *, ignore_errors: bool = True) -> None:
    """Delete a directory tree one entry at a time (each unlink/rmdir is a counted call, so a
    crash sweep reaches a crash in the middle of a removal). Entries already gone are fine;
    other errors are ignored like ``shutil.rmtree(path, ignore_errors=True)`` unless
    ``ignore_errors`` is False."""
    def quiet(call: Callable[[str], None], target: str) -> None:
        try:
            call(target)
        except FileNotFoundError:
            pass
        except OSError:
            if not ignore_errors:
                raise
    path = os.fspath(path)
    if os.path.islink(path) or not os.path.isdir(path):
        quiet(unlink, path)
        return
    for top, dirs, files in os.walk(path, topdown=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            quiet(unlink, os.path.join(top, name))
        for name in dirs:
            if not os.path.islink(os.path.join(top, name)):
                quiet(rmdir, os.path.join(top, name))
    quiet(rmdir, path)


def utime(path: str | os.PathLike, ns: tuple[int, int]) -> None:
    """Set a file's or directory's times (arrival times are part of the store)."""
    _enter("utime")
    if _log is not None:
        _rec("utime", _abs(path), tuple(ns))
    os.utime(path, ns=ns)


def renameat2_supported(scratch_dir: str | os.PathLike) -> bool:
    """Probe RENAME_NOREPLACE on the filesystem of ``scratch_dir`` (an existing directory)."""
    if _renameat2 is None:
        return False
    base = os.fspath(scratch_dir)
    src = os.path.join(base, f"probe-{os.getpid()}-a")
    dst = os.path.join(base, f"probe-{os.getpid()}-b")
    os.makedirs(src, exist_ok=True)
    try:
        rc = _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
        if rc == 0:
            os.rmdir(dst)
            return True
        return False
    finally:
        for p in (src, dst):
            try:
                os.rmdir(p)
            except OSError:
                pass


_hook = _env_hook()
if os.environ.get("FSMEM_CALLS_OUT"):
    import atexit

    def _write_count(out: str = os.environ["FSMEM_CALLS_OUT"]) -> None:
        with open(out, "w", encoding="ascii") as fh:
            fh.write(str(_calls))
    atexit.register(_write_count)
