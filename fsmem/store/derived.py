"""Files of ``.fsmem/`` that fsmem writes and rebuilds (derived or state files), when
something else stands in their place.

A FIFO, a directory, a symbolic link or a device where the access log, the epoch, the
change feed, an index file or the vector cache should be is never written through and never
read (the reads go through ``fsmem.format.layout.open_regular``): a reader ignores it, a
writer takes it away before writing (``make_room``: a directory is moved into
``.fsmem/quarantine/``, never deleted; anything else is unlinked) and logs what it did;
``fsck`` reports it (``damaged-file``, docs/FORMAT.md section 6).
"""

from __future__ import annotations

import logging
import os
import stat
import time
import uuid


__all__ = ["make_room", "replace_file", "problem", "QUARANTINE_LABEL"]

log = logging.getLogger("fsmem.derived")

QUARANTINE_LABEL = "damaged-"   # quarantine names: <time>-damaged-<file name>-<random>


def problem(path: str) -> str:
    """What stands at ``path`` instead of a regular file ("" when it is one, or missing)."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return ""
    except OSError as exc:
        return f"cannot be examined: {exc.strerror}"
    if stat.S_ISREG(mode):
        return ""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFLNK: "a symbolic link",
          stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}


def replace_file(path: str, data: bytes, meta: str, *, sync: bool) -> None:
    """Replace the file ``path`` of the store whose ``.fsmem/`` is ``meta`` atomically: a
    temporary name beside it, written (and with ``sync`` flushed), renamed over ``path`` (a
    directory or FIFO in its place is quarantined first, never renamed onto), and with
    ``sync`` its directory flushed: the data before the name, the name before the return."""
    from fsmem.format import fsops  # lazy: readers import this module, never the mutating calls
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = fsops.open_(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
    try:
        fsops.write_all(fd, data)
        if sync:
            fsops.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    make_room(path, meta)
    fsops.replace(tmp, path)
    if sync:
        fsops.fsync_dir(os.path.dirname(path))


def make_room(path: str, meta: str) -> str:
    """Before a writer writes the file ``path`` of the store whose ``.fsmem`` is ``meta``:
    take away what is not a regular file there (a directory into quarantine, anything else
    unlinked). Returns what was done ("" if nothing was in the way)."""
    what = problem(path)
    if not what:
        return ""
    from fsmem.format import fsops  # lazy: readers import this module, never the mutating calls
    if what == "a directory":
        qdir = os.path.join(meta, "quarantine")
        if os.path.islink(qdir) or (os.path.lexists(qdir) and not os.path.isdir(qdir)):
            fsops.unlink(qdir)   # a FIFO, a symlink...: it holds nothing; never followed
            log.warning("%s: not a directory; removed", qdir)
        if not os.path.isdir(qdir):
            fsops.mkdir(qdir)
        dst = os.path.join(qdir, f"{time.strftime('%Y%m%dT%H%M%S')}-{QUARANTINE_LABEL}"
                                 f"{os.path.basename(path)}-{uuid.uuid4().hex[:6]}")
        fsops.rename(path, dst)
        done = f"moved to {dst}"
    else:
        fsops.unlink(path)
        done = "removed"
    log.warning("%s: %s where fsmem's file belongs; %s (it is rebuilt)", path, what, done)
    return done
