"""The inbox's directories: ``inbox/``, ``.processing/`` (claims) and ``.rejected/``.

A dropped entry is claimed by one rename into ``.processing/`` (``<stamp>~<name>``; a name too
long for that keeps its extension and a hash, its original in a ``.name-`` side file), released
once its content is stored, or moved to ``.rejected/`` with a ``<name>.error.txt`` written first.
Every name is one path component relative to a directory fd, never followed as a link
(docs/WATCH.md). What a claimed entry becomes is ``fsmem.ingest.inbox``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import blake3

from fsmem.format import fsops as fsops
from fsmem.format.errors import FormatError, StoreLocked
from fsmem.format.timestamps import Timestamp

__all__ = ["ignored_name", "walk_tree"]

_GONE = ".gone-"   # .processing/.gone-<claim>: a released directory claim being removed
_SIDE = ".name-"   # .processing/.name-<stamp>: the original of a shortened claim name
_F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def ignored_name(name: str) -> bool:
    """Dot-files and temp names are never taken: they are still being written (Maildir)."""
    return name.startswith(".") or name.endswith((".tmp", ".part", "~"))


def _display(name: str) -> str:
    """A dropped name as safe text: undecodable bytes replaced, control characters escaped."""
    text = os.fsencode(name).decode("utf-8", "replace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _side(claim: str) -> str:
    """The side file holding a shortened claim's original name (keyed by its unique stamp)."""
    return _SIDE + claim.split("~", 1)[0]


def _shorten(name: str, room: int) -> str:
    """``name`` in at most ``room`` bytes: unchanged if it fits, else its start, a hash of
    the whole name and its extension, so a shortened name is still taken for its type."""
    raw = os.fsencode(name)
    if len(raw) <= room:
        return name
    ext = os.fsencode(os.path.splitext(name)[1])
    ext = ext if len(ext) <= 32 else b""
    tag = b"~" + blake3.blake3(raw).hexdigest()[:16].encode()
    return os.fsdecode(raw[:room - len(tag) - len(ext)] + tag + ext)


def _fit(name: str, room: int) -> str:
    """``name`` cut to ``room`` bytes (NAME_MAX counts bytes); surrogateescape keeps a cut
    through a multi-byte character byte-exact."""
    raw = os.fsencode(name)
    return name if len(raw) <= room else os.fsdecode(raw[:room])


# -- the inbox directories ------------------------------------------------------------------

class _InboxDirs:
    """``inbox/``, ``inbox/.processing/``, ``inbox/.rejected/``, held open by fd. A dropped
    name is only ever one path component inside them (an entry name holds no '/', and dot
    names are never taken), and never part of a path in the store."""

    def __init__(self, root: str) -> None:
        self.inbox = os.path.join(root, "inbox")
        self.processing = os.path.join(self.inbox, ".processing")
        self.rejected = os.path.join(self.inbox, ".rejected")
        self.inbox_fd = _open_dir(self.inbox)
        self.proc_fd = _open_dir(self.processing, create_in=self.inbox_fd)
        self.rej_fd = _open_dir(self.rejected, create_in=self.inbox_fd)
        self._no_side: set[str] = set()   # claims made here without a .name- file

    def close(self) -> None:
        for fd in (self.inbox_fd, self.proc_fd, self.rej_fd):
            os.close(fd)

    def names(self) -> list[str]:
        return [n for n in os.listdir(self.inbox_fd) if not ignored_name(n)]

    def claims(self) -> list[str]:
        """Claims left in .processing; removals a crash interrupted are finished first."""
        names = os.listdir(self.proc_fd)
        for name in names:
            if name.startswith(_GONE):
                fsops.rmtree(os.path.join(self.processing, name))
        return sorted(n for n in names if not n.startswith("."))

    def claim(self, name: str) -> str:
        """Take ``name`` out of the inbox by one rename. The claim name is ``<stamp>~<name>``;
        a name too long for that keeps its extension and a hash of the whole name, and the
        original is kept in ``.name-<claim>`` beside it (``original_name`` reads it back)."""
        prefix = f"{time.time_ns():016x}{uuid.uuid4().hex[:8]}~"
        claim = prefix + _shorten(name, 255 - len(prefix))
        if claim != prefix + name:
            self._write_side(_side(claim), os.fsencode(name))
        fsops.rename(name, claim, src_dir_fd=self.inbox_fd, dst_dir_fd=self.proc_fd)
        if claim == prefix + name:
            self._no_side.add(claim)
        return claim

    def original_name(self, claim: str) -> str:
        """The dropped name a claim was made from (see ``claim``)."""
        try:
            fd = os.open(_side(claim), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, dir_fd=self.proc_fd)
        except OSError:
            return claim.split("~", 1)[-1]
        try:
            raw = os.read(fd, 4096) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
        return os.fsdecode(raw) if raw and b"/" not in raw else claim.split("~", 1)[-1]

    def _write_side(self, side: str, data: bytes) -> None:
        fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=self.proc_fd)
        try:
            fsops.write_all(fd, data)
        finally:
            os.close(fd)

    def release(self, claim: str, *, is_dir: bool | None = None) -> None:
        """Remove a claim whose content is stored (a file, or an adopted unit directory);
        ``is_dir``: what the ingest found it to be (only this process touches .processing),
        else it is looked at."""
        if is_dir is None:
            is_dir = stat.S_ISDIR(os.lstat(claim, dir_fd=self.proc_fd).st_mode)
        _release(self.proc_fd, self.processing, claim, is_dir, self._side_of(claim))

    def _side_of(self, claim: str) -> str | None:
        """The side file a release must remove too (None: claimed by this run without one)."""
        if claim in self._no_side:
            self._no_side.discard(claim)
            return None
        return _side(claim)

    def _drop_side(self, claim: str) -> None:
        side = self._side_of(claim)
        if side is not None:
            _unlink_quiet(side, self.proc_fd)

    def reject(self, claim: str, name: str, reason: str) -> str:
        """Move a claim to ``.rejected/`` under its original name (made unique), then write
        ``<name>.error.txt`` beside it (temp + rename); returns the name used."""
        base = _fit(name, 255 - len(".error.txt") - 8)
        target, n = base, 0
        while _exists(target, self.rej_fd) or _exists(f"{target}.error.txt", self.rej_fd):
            n += 1
            target = f"{base}~{n}"
        # the error file first: on a full disk nothing moves and the claim is retried,
        # so an entry never sits in .rejected/ without its reason
        text = (f"fsmem watch rejected this entry.\nname: {_display(name)}\n"
                f"kept as: {_display(target)}\nreason: {reason}\n"
                f"time: {Timestamp.now().isoformat()}\n")
        tmp = f".tmp-{uuid.uuid4().hex}"
        try:
            fd = fsops.open_(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644,
                             dir_fd=self.rej_fd)
            try:
                fsops.write_all(fd, text.encode("utf-8"))
            finally:
                os.close(fd)
            fsops.rename(tmp, f"{target}.error.txt", src_dir_fd=self.rej_fd,
                      dst_dir_fd=self.rej_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=self.rej_fd)
            except OSError:
                pass
            raise
        try:
            fsops.rename_noreplace(os.path.join(self.processing, claim),
                                   os.path.join(self.rejected, target))
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                raise
            fsops.rename(claim, target, src_dir_fd=self.proc_fd, dst_dir_fd=self.rej_fd)
        self._drop_side(claim)
        return target


def _release(proc_fd: int, processing: str, claim: str, is_dir: bool, side: str | None) -> None:
    """Remove one claim (and its side file) from ``.processing`` (``proc_fd``)."""
    if not is_dir:
        fsops.unlink(claim, dir_fd=proc_fd)
    else:
        # hidden by one rename first: a crash inside the removal leaves a ``.gone-`` entry
        # (removed on the next start), never a half-removed claim that resumes as garbage
        gone = _GONE + claim
        fsops.rename(claim, gone, src_dir_fd=proc_fd, dst_dir_fd=proc_fd)
        fsops.rmtree(os.path.join(processing, gone))
    if side is not None:
        _unlink_quiet(side, proc_fd)


def _unlink_quiet(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


class _BatchSync(threading.Thread):
    """One batch's acknowledgement: a syncfs of the store's filesystem (``sync_path``; None:
    durability off), then, only if it succeeded, the release of the batch's claims. Run in
    this thread beside the next batch's ingest (``start``), or in the caller (``run``). It
    works on its own duplicate of the ``.processing`` fd, so closing the directories never
    points a late release at another directory. Results: ``started_ns`` (taken before the
    syncfs: what was published before it is durable once it returns), ``sync_error``,
    ``released`` (claims removed, in order) and ``error`` (what stopped the releases)."""

    def __init__(self, dirs: _InboxDirs, claims: list[tuple[str, bool]],
                 sync_path: str | None) -> None:
        super().__init__(name="fsmem-watch-sync", daemon=True)
        self.items = [(claim, is_dir, dirs._side_of(claim)) for claim, is_dir in claims]
        self.processing = dirs.processing
        self.proc_fd = os.dup(dirs.proc_fd)
        self.sync_path = sync_path
        self.started_ns = 0
        self.released = 0
        self.sync_error: OSError | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.started_ns = time.time_ns()
            if self.sync_path is not None:
                try:
                    fsops.syncfs(self.sync_path)
                except OSError as exc:   # a failed sync is final: nothing is released
                    self.sync_error = exc
                    return
            for claim, is_dir, side in self.items:
                _release(self.proc_fd, self.processing, claim, is_dir, side)
                self.released += 1
        except BaseException as exc:   # handed to the caller (``join`` then look)
            self.error = exc
        finally:
            os.close(self.proc_fd)


def _in_thread(work: Callable[[], None], name: str) -> Callable[[], None]:
    """Run ``work`` in a thread of its own; returns the wait, which joins it and raises in the
    caller what ``work`` raised (e.g. a durable write beside CPU work in the caller)."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            failed.append(exc)
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def wait() -> None:
        thread.join()
        if failed:
            raise failed[0]
    return wait


def _open_dir(path: str, create_in: int | None = None) -> int:
    if create_in is not None:
        try:
            os.mkdir(os.path.basename(path), 0o755, dir_fd=create_in)
        except FileExistsError:
            pass
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise FormatError(f"{path}: not a directory fsmem can use ({exc.strerror}); "
                          "a symlink is never followed") from exc


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return False


def _writer_holds(fd: int) -> bool | None:
    """True if some process has the file open for writing (a read lease is refused), False if
    none has, None where leases are unavailable (not the owner, NFS, leases disabled)."""
    try:
        fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_RDLCK)
    except OSError as exc:
        return True if exc.errno in (errno.EAGAIN, errno.EBUSY) else None
    fcntl.fcntl(fd, _F_SETLEASE, fcntl.F_UNLCK)
    return False


class _LockSlice:
    """The store's writer lock held across several files, at most ``slice_s`` at a time
    (``expired``; see ``fsmem.ingest.watch.Watcher._handle``)."""

    def __init__(self, store: Any, slice_s: float) -> None:
        self.store = store
        self.slice_s = slice_s
        self.stack: contextlib.ExitStack | None = None
        self.since = 0.0

    def hold(self) -> None:
        if self.stack is None:
            stack = contextlib.ExitStack()
            try:
                stack.enter_context(self.store.locked())
            except StoreLocked:
                return   # each file then asks for the lock itself (and is deferred)
            self.stack, self.since = stack, time.monotonic()

    def expired(self) -> bool:
        return self.stack is not None and time.monotonic() - self.since > self.slice_s

    def release(self) -> None:
        stack, self.stack = self.stack, None
        if stack is not None:
            stack.close()


def _close(fd: int | None) -> None:
    """Close ``fd`` if it is one; returns None (for ``return _close(fd)``)."""
    if fd is not None:
        os.close(fd)


def _stat_key(st: os.stat_result, name: str, dir_fd: int) -> tuple:
    """What the settle check compares for an inbox entry: mode, size, mtime, ctime, inode
    and links, and for a directory the names, sizes and mtimes of every entry of its tree
    (a notes folder has sub-folders), at most TREE_DEPTH deep and TREE_ENTRIES in all."""
    key: tuple = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
                  st.st_nlink)
    if stat.S_ISDIR(st.st_mode):
        key += (_tree_fingerprint(name, dir_fd),)
    return key


TREE_DEPTH = 9          # one deeper than a notes folder may be: a deeper one is seen whole
TREE_ENTRIES = 50_001   # (and rejected); the fingerprint's cost is bounded either way


def special_reason(mode: int) -> str:
    """Why an entry that is not a regular file is refused (a dropped file, a note)."""
    if stat.S_ISLNK(mode):
        return "a symbolic link (never followed)"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe), not a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node, not a regular file"
    return "not a regular file"


def _dir_or_none(path: str, dir_fd: int | None) -> int | None:
    """A directory opened without following a link, None if it is gone or not one."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=dir_fd)
    except OSError:
        return None


def _tree_fingerprint(path: str, dir_fd: int) -> Any:
    """Path, size, mtime, ctime and inode of each entry of a directory's tree, sub-folders
    entered without following a link, hidden ones not entered (None if it is gone)."""
    if (fd := _dir_or_none(path, dir_fd)) is None:
        return None
    try:
        out = tuple((rel, s.st_mode, s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino)
                    for _fd, _n, rel, s in walk_tree(fd, depth=TREE_DEPTH,
                                                     entries=TREE_ENTRIES))
        return (os.fstat(fd).st_ino, out)
    finally:
        os.close(fd)


def _dir_fingerprint(path: str, dir_fd: int | None = None) -> Any:
    """Names, sizes and mtimes of a directory's entries (None if it is gone)."""
    if (fd := _dir_or_none(path, dir_fd)) is None:
        return None
    try:
        out = []
        for n in sorted(os.listdir(fd)):
            try:
                s = os.lstat(n, dir_fd=fd)
            except FileNotFoundError:
                continue
            out.append((n, s.st_size, s.st_mtime_ns, s.st_ino))
        return (os.fstat(fd).st_ino, tuple(out))
    finally:
        os.close(fd)


def walk_tree(dfd: int, *, depth: int, entries: int, hidden: bool = False
              ) -> Iterator[tuple[int, str, str, os.stat_result]]:
    """(parent fd, name, path in the tree, lstat) of each entry under the open directory
    ``dfd``, sorted, sub-folders (never through a link) at most ``depth`` deep, at most
    ``entries`` in all; hidden and temp names are given but not entered unless ``hidden``.
    Bounded and quiet: an entry gone meanwhile is left out (for a fingerprint or a probe)."""
    budget = [entries]

    def walk(fd: int, prefix: str, level: int) -> Iterator[tuple[int, str, str, os.stat_result]]:
        try:
            names = sorted(os.listdir(fd))
        except OSError:
            return
        for n in names:
            if budget[0] <= 0:
                return
            budget[0] -= 1
            try:
                st = os.lstat(n, dir_fd=fd)
            except OSError:
                continue
            yield fd, n, prefix + n, st
            if stat.S_ISDIR(st.st_mode) and level < depth and (hidden or not ignored_name(n)):
                try:
                    sub = os.open(n, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                  | os.O_CLOEXEC, dir_fd=fd)
                except OSError:
                    continue
                try:
                    yield from walk(sub, prefix + n + "/", level + 1)
                finally:
                    os.close(sub)
    yield from walk(dfd, "", 0)
