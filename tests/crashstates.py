"""Crash states from the real syscall trace (ALICE-style), for tests/test_crash_states.py.

A scenario's operation runs in a child process under ``strace -f`` (every thread, so the flush
workers of ``fsops.flush_many`` too), with fds shown as paths (``-y``) and every string in hex
(``-xx``). After each operation returns, the child writes ``ack <text>`` to a side-channel file
outside the store; that write is in the trace too, so the checker knows which operations were
acknowledged at every point of the trace.

The trace becomes a list of operations on inodes (``parse``): create, mkdir, write (bytes and
offset), truncate, copy (sendfile), rename, link, unlink, rmdir, utime, and the flushes
fsync/fdatasync (of one inode) and syncfs (of everything), each flush with the trace position
where it *started* and where it *completed* (a flush on a helper thread is
``<unfinished ...>`` ... ``resumed``). The power-loss model (docs/RELIABILITY.md, "the
crash-state checker"), for a crash at trace position ``k``:

- an operation is *durable* if a flush that covers it started after it completed and itself
  completed before ``k``: file data (write, truncate, copy) and times are covered by an fsync
  or fdatasync of that inode (times: fsync only); a directory entry change (create, mkdir,
  link, unlink, rmdir) by an fsync of its parent directory; syncfs covers everything. A file's
  own fsync does not make its name durable.
- a rename is durable (whole) once its target directory is flushed. Once its source directory
  is flushed and the target's is not, the old name is surely gone but the new one may be
  missing ("half": the object is lost); while a flush of the source directory is in flight
  the same may already have happened. Otherwise it happened whole or not at all (a syncfs,
  one commit of the whole filesystem, makes it durable whole).
- every other operation issued before ``k`` (including one in flight at ``k``) may or may not
  have reached the disk, independently of the others (a flush in flight orders nothing).

A state keeps every durable operation and a chosen subset of the others, replayed in trace
order onto a copy of the store as it was before the run (``materialize``); each replayed
operation follows its inode (a write lands in the file wherever the state's renames left it).
Choosers: all kept (the page cache a SIGKILL leaves), all lost, all lost with every possible
"half" rename, names kept with data lost, each single omission, and seeded random subsets.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable

STRESS = os.environ.get("FSMEM_STRESS") == "1"
INF = 1 << 62
SYSCALLS = ("open,openat,creat,write,pwrite64,writev,pwritev,pwritev2,fsync,fdatasync,syncfs,"
            "rename,renameat,renameat2,mkdir,mkdirat,unlink,unlinkat,rmdir,link,linkat,"
            "utimensat,ftruncate,truncate,close,lseek,sendfile,copy_file_range,dup,dup2,dup3,"
            "fcntl,clone,clone3,fork,vfork")


def have_strace() -> bool:
    return shutil.which("strace") is not None


# -- recording --------------------------------------------------------------------------------
def record(script: str, args: list[str], out: Path, *, cwd: Path, pkg_root: Path,
           env: dict[str, str] | None = None, timeout: float = 300) -> None:
    """Run ``python -c script *args`` under strace, the trace written to ``out``."""
    cmd = ["strace", "-f", "-qq", "-tt", "-y", "-xx", "-s", str(1 << 24), "--seccomp-bpf",
           "-e", f"trace={SYSCALLS}", "-o", str(out), sys.executable, "-c", script, *args]
    full = {**os.environ, "PYTHONPATH": str(pkg_root), **(env or {})}
    proc = subprocess.run(cmd, cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"traced run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")


# -- parsing ----------------------------------------------------------------------------------
@dataclasses.dataclass
class Op:
    kind: str                 # create mkdir write trunc copy rename link unlink rmdir utime
    start: int                # flush syncfs ack
    end: int
    ino: int = -1             # the inode written, flushed, renamed, created, removed
    parent: int = -1          # entry ops: the directory; rename: the source directory
    name: str = ""
    parent2: int = -1         # rename/link: the target directory
    name2: str = ""
    offset: int = 0
    data: bytes = b""
    length: int = 0
    src_ino: int = -1         # copy: the source inode and offset
    is_dir: bool = False
    text: str = ""            # ack text; flush: "data" for fdatasync
    times: tuple[int, int] | None = None


_LINE = re.compile(r"^(\d+) +\d\d:\d\d:\d\d\.\d+ (.*)$")
_HEX = re.compile(r'"((?:\\x[0-9a-f]{2})*)"')
_ANNOT = re.compile(r"<((?:\\x[0-9a-f]{2})*)>")


def _unhex(s: str) -> bytes:
    return bytes.fromhex(s.replace("\\x", ""))


def _split_args(s: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur or out:
        out.append("".join(cur).strip())
    return out


def _str_arg(a: str) -> str:
    m = _HEX.match(a)
    return os.fsdecode(_unhex(m.group(1))) if m else ""


def _bytes_arg(a: str) -> bytes:
    m = _HEX.match(a)
    return _unhex(m.group(1)) if m else b""


def _fd_arg(a: str) -> tuple[int | None, str | None]:
    """(fd number or None for AT_FDCWD, its annotated path)."""
    m = _ANNOT.search(a)
    path = os.fsdecode(_unhex(m.group(1))) if m else None
    head = a.split("<", 1)[0].strip()
    if head == "AT_FDCWD":
        return None, path
    try:
        return int(head), path
    except ValueError:
        return None, path


class Trace:
    """The operations of one traced run under ``root`` (a directory copied from ``pre``)."""

    def __init__(self, path: Path, root: Path, pre: Path, ack_path: Path, cwd: Path) -> None:
        self.root, self.pre = os.path.realpath(root), os.path.realpath(pre)
        self.ack_path, self.cwd = os.path.realpath(ack_path), os.path.realpath(cwd)
        self.ops: list[Op] = []
        self.pre_path: dict[int, str] = {0: ""}     # inode -> its path relative to pre
        self.paths: dict[str, int] = {"": 0}        # real run: relative path -> inode
        self.dirs: set[int] = {0}
        self.size: dict[int, int] = {}
        self.fds: dict[int, dict] = {}
        self._next = 1
        self._pending: dict[int, tuple[str, str, int]] = {}
        self._parse(path)

    # inode bookkeeping of the real run
    def _rel(self, path: str | None) -> str | None:
        if path is None:
            return None
        path = os.path.normpath(path)
        if path == self.root:
            return ""
        if path.startswith(self.root + os.sep):
            return path[len(self.root) + 1:]
        return None

    def _lookup(self, rel: str) -> int | None:
        """The inode at ``rel`` in the real run (a pre-existing one is registered)."""
        if rel in self.paths:
            return self.paths[rel]
        parent, _, name = rel.rpartition("/")
        pino = self._lookup(parent) if rel else 0
        if pino is None or pino not in self.pre_path:
            return None
        pre_rel = os.path.join(self.pre_path[pino], name) if self.pre_path[pino] else name
        full = os.path.join(self.pre, pre_rel)
        if not os.path.lexists(full):
            return None
        ino = self._new()
        self.pre_path[ino] = pre_rel
        self.paths[rel] = ino
        if os.path.isdir(full) and not os.path.islink(full):
            self.dirs.add(ino)
        else:
            self.size[ino] = os.lstat(full).st_size
        return ino

    def _new(self) -> int:
        self._next += 1
        return self._next - 1

    def _entry(self, rel: str) -> tuple[int, str] | None:
        parent, _, name = rel.rpartition("/")
        pino = self._lookup(parent)
        return None if pino is None else (pino, name)

    def _move(self, old: str, new: str) -> None:
        moved = {p: i for p, i in self.paths.items() if p == old or p.startswith(old + "/")}
        for p in moved:
            del self.paths[p]
        for p in [p for p in self.paths if p == new or p.startswith(new + "/")]:
            del self.paths[p]
        for p, i in moved.items():
            self.paths[new + p[len(old):]] = i

    def _forget(self, rel: str) -> None:
        for p in [p for p in self.paths if p == rel or p.startswith(rel + "/")]:
            del self.paths[p]

    def _path(self, dirfd_arg: str | None, path_arg: str) -> str:
        p = _str_arg(path_arg)
        if os.path.isabs(p):
            return os.path.normpath(p)
        base = self.cwd
        if dirfd_arg is not None:
            _fd, ann = _fd_arg(dirfd_arg)
            if ann:
                base = ann
        return os.path.normpath(os.path.join(base, p))

    # the parser
    def _parse(self, path: Path) -> None:
        with open(path, encoding="ascii", errors="replace") as fh:
            for pos, line in enumerate(fh):
                m = _LINE.match(line.rstrip("\n"))
                if not m:
                    continue
                pid, rest = int(m.group(1)), m.group(2)
                if rest.startswith("---") or rest.startswith("+++"):
                    continue
                if rest.startswith("<... "):
                    name_end = rest.index(" resumed>")
                    name = rest[5:name_end]
                    if pid not in self._pending:
                        continue
                    pname, head, start = self._pending.pop(pid)
                    self._call(pname, head + rest[name_end + len(" resumed>"):], start, pos)
                elif rest.endswith("<unfinished ...>"):
                    name, _, head = rest.partition("(")
                    self._pending[pid] = (name, head[:-len("<unfinished ...>")].rstrip(), pos)
                    if name in ("fsync", "fdatasync", "syncfs"):
                        self._flush_start(name, head, pos)
                else:
                    name, _, tail = rest.partition("(")
                    self._call(name, tail, pos, pos)
        for pid, (name, head, start) in self._pending.items():   # never returned: in flight
            if name not in ("fsync", "fdatasync", "syncfs"):
                self._call(name, head + ") = 0", start, INF)

    def _flush_start(self, name: str, head: str, pos: int) -> None:
        pass   # the start is kept with the pending call; the op is made at completion

    def _call(self, name: str, tail: str, start: int, end: int) -> None:
        i = tail.rfind(") = ")
        if i < 0:
            return
        args, ret = _split_args(tail[:i]), tail[i + 4:]
        if ret.startswith("-1") or ret.startswith("?"):
            return
        ret_val = ret.split("<", 1)[0].split(" ", 1)[0]
        try:
            rv = int(ret_val, 0)
        except ValueError:
            rv = 0
        handler = getattr(self, f"_sys_{name}", None)
        if handler is not None:
            handler(args, ret, rv, start, end)

    def _fd(self, arg: str) -> dict | None:
        fd, ann = _fd_arg(arg)
        if fd is None:
            return None
        ent = self.fds.get(fd)
        if ent is None and ann is not None:
            rel = self._rel(ann)
            ino = self._lookup(rel) if rel is not None else None
            ent = {"ino": ino, "path": ann, "append": False, "off": 0}
            self.fds[fd] = ent
        return ent

    def _sys_openat(self, args, ret, rv, start, end, *, dirfd: str | None = "x") -> None:
        if dirfd == "x":
            dirfd_arg, path_arg, flags = args[0], args[1], args[2]
        else:
            dirfd_arg, path_arg, flags = None, args[0], args[1]
        m = _ANNOT.search(ret)
        real = os.path.normpath(os.fsdecode(_unhex(m.group(1)))) if m else \
            self._path(dirfd_arg, path_arg)
        rel = self._rel(real)
        ent = {"ino": None, "path": real, "append": "O_APPEND" in flags, "off": 0}
        if rel is not None:
            ino = self._lookup(rel)
            if ino is None and "O_CREAT" in flags:
                where = self._entry(rel)
                ino = self._new()
                self.paths[rel] = ino
                self.size[ino] = 0
                if where is not None:
                    self.ops.append(Op("create", start, end, ino=ino, parent=where[0],
                                       name=where[1]))
            elif ino is not None and "O_TRUNC" in flags and self.size.get(ino):
                self.ops.append(Op("trunc", start, end, ino=ino, length=0))
                self.size[ino] = 0
            ent["ino"] = ino
        self.fds[rv] = ent

    def _sys_open(self, args, ret, rv, start, end) -> None:
        self._sys_openat(args, ret, rv, start, end, dirfd=None)

    def _sys_creat(self, args, ret, rv, start, end) -> None:
        self._sys_openat([args[0], "O_CREAT|O_TRUNC|O_WRONLY"], ret, rv, start, end, dirfd=None)

    def _sys_close(self, args, ret, rv, start, end) -> None:
        fd, _ann = _fd_arg(args[0])
        self.fds.pop(fd, None)

    def _dup(self, args, rv) -> None:
        ent = self._fd(args[0])
        if ent is not None:
            self.fds[rv] = dict(ent)

    def _sys_dup(self, args, ret, rv, start, end) -> None:
        self._dup(args, rv)

    _sys_dup2 = _sys_dup3 = _sys_dup

    def _sys_fcntl(self, args, ret, rv, start, end) -> None:
        if len(args) > 1 and args[1].startswith("F_DUPFD"):
            self._dup(args, rv)

    def _sys_lseek(self, args, ret, rv, start, end) -> None:
        ent = self._fd(args[0])
        if ent is not None:
            ent["off"] = rv

    def _write(self, ent: dict | None, data: bytes, offset: int | None, start: int,
               end: int) -> None:
        if ent is None:
            return
        if ent["path"] == self.ack_path:
            for text in data.decode("utf-8", "replace").splitlines():
                if text.startswith("ack "):
                    self.ops.append(Op("ack", start, end, text=text[4:]))
            return
        ino = ent["ino"]
        if offset is None:
            offset = self.size.get(ino, 0) if ent["append"] else ent["off"]
            ent["off"] = offset + len(data)
        if ino is None or not data:
            return
        self.ops.append(Op("write", start, end, ino=ino, offset=offset, data=data))
        self.size[ino] = max(self.size.get(ino, 0), offset + len(data))

    def _sys_write(self, args, ret, rv, start, end) -> None:
        self._write(self._fd(args[0]), _bytes_arg(args[1])[:rv], None, start, end)

    def _sys_pwrite64(self, args, ret, rv, start, end) -> None:
        self._write(self._fd(args[0]), _bytes_arg(args[1])[:rv], int(args[3], 0), start, end)

    def _sys_writev(self, args, ret, rv, start, end) -> None:
        data = b"".join(_unhex(h) for h in re.findall(r'iov_base="((?:\\x[0-9a-f]{2})*)"',
                                                      args[1]))
        self._write(self._fd(args[0]), data[:rv], None, start, end)

    def _sys_pwritev(self, args, ret, rv, start, end) -> None:
        data = b"".join(_unhex(h) for h in re.findall(r'iov_base="((?:\\x[0-9a-f]{2})*)"',
                                                      args[1]))
        self._write(self._fd(args[0]), data[:rv], int(args[3], 0), start, end)

    _sys_pwritev2 = _sys_pwritev

    def _sys_ftruncate(self, args, ret, rv, start, end) -> None:
        ent = self._fd(args[0])
        if ent is not None and ent["ino"] is not None:
            self.ops.append(Op("trunc", start, end, ino=ent["ino"], length=int(args[1], 0)))
            self.size[ent["ino"]] = int(args[1], 0)

    def _sys_truncate(self, args, ret, rv, start, end) -> None:
        rel = self._rel(self._path(None, args[0]))
        ino = self._lookup(rel) if rel is not None else None
        if ino is not None:
            self.ops.append(Op("trunc", start, end, ino=ino, length=int(args[1], 0)))
            self.size[ino] = int(args[1], 0)

    def _copy(self, out_ent, in_ent, in_off: int | None, n: int, start: int, end: int) -> None:
        if out_ent is None or out_ent["ino"] is None or n <= 0:
            return
        if in_off is None:
            in_off = in_ent["off"] if in_ent else 0
            if in_ent:
                in_ent["off"] += n
        off = out_ent["off"]
        out_ent["off"] += n
        self.ops.append(Op("copy", start, end, ino=out_ent["ino"], offset=off, length=n,
                           src_ino=in_ent["ino"] if in_ent and in_ent["ino"] is not None
                           else -1, name=in_ent["path"] if in_ent else "", parent=in_off))
        self.size[out_ent["ino"]] = max(self.size.get(out_ent["ino"], 0), off + n)

    def _sys_sendfile(self, args, ret, rv, start, end) -> None:
        m = re.match(r"\[(\d+)\]", args[2])
        self._copy(self._fd(args[0]), self._fd(args[1]), int(m.group(1)) if m else None, rv,
                   start, end)

    def _sys_copy_file_range(self, args, ret, rv, start, end) -> None:
        m = re.match(r"\[(\d+)\]", args[1])
        self._copy(self._fd(args[2]), self._fd(args[0]), int(m.group(1)) if m else None, rv,
                   start, end)

    def _flush(self, kind: str, args, start, end) -> None:
        if kind == "syncfs":
            self.ops.append(Op("syncfs", start, end))
            return
        ent = self._fd(args[0])
        if ent is not None and ent["ino"] is not None:
            self.ops.append(Op("flush", start, end, ino=ent["ino"],
                               text="data" if kind == "fdatasync" else ""))

    def _sys_fsync(self, args, ret, rv, start, end) -> None:
        self._flush("fsync", args, start, end)

    def _sys_fdatasync(self, args, ret, rv, start, end) -> None:
        self._flush("fdatasync", args, start, end)

    def _sys_syncfs(self, args, ret, rv, start, end) -> None:
        self._flush("syncfs", args, start, end)

    def _sys_mkdirat(self, args, ret, rv, start, end, *, at: bool = True) -> None:
        real = self._path(args[0], args[1]) if at else self._path(None, args[0])
        rel = self._rel(real)
        if rel is None or rel == "":
            return
        where = self._entry(rel)
        ino = self._new()
        self.paths[rel] = ino
        self.dirs.add(ino)
        if where is not None:
            self.ops.append(Op("mkdir", start, end, ino=ino, parent=where[0], name=where[1],
                               is_dir=True))

    def _sys_mkdir(self, args, ret, rv, start, end) -> None:
        self._sys_mkdirat(args, ret, rv, start, end, at=False)

    def _remove(self, real: str, start: int, end: int, is_dir: bool) -> None:
        rel = self._rel(real)
        if rel is None:
            return
        ino = self._lookup(rel)
        where = self._entry(rel)
        if ino is not None and where is not None:
            self.ops.append(Op("rmdir" if is_dir else "unlink", start, end, ino=ino,
                               parent=where[0], name=where[1], is_dir=is_dir))
        self._forget(rel)

    def _sys_unlink(self, args, ret, rv, start, end) -> None:
        self._remove(self._path(None, args[0]), start, end, False)

    def _sys_rmdir(self, args, ret, rv, start, end) -> None:
        self._remove(self._path(None, args[0]), start, end, True)

    def _sys_unlinkat(self, args, ret, rv, start, end) -> None:
        self._remove(self._path(args[0], args[1]), start, end, "AT_REMOVEDIR" in args[2])

    def _rename(self, src: str, dst: str, start: int, end: int, exchange: bool = False) -> None:
        rs, rd = self._rel(src), self._rel(dst)
        if rs is None or rd is None:
            if rd is not None:   # moved in from outside: the target's name is gone from sight
                self._forget(rd)
            return
        ino = self._lookup(rs)
        ws, wd = self._entry(rs), self._entry(rd)
        if ino is None or ws is None or wd is None:
            self._move(rs, rd)
            return
        self.ops.append(Op("rename", start, end, ino=ino, parent=ws[0], name=ws[1],
                           parent2=wd[0], name2=wd[1], is_dir=ino in self.dirs))
        self._move(rs, rd)

    def _sys_rename(self, args, ret, rv, start, end) -> None:
        self._rename(self._path(None, args[0]), self._path(None, args[1]), start, end)

    def _sys_renameat(self, args, ret, rv, start, end) -> None:
        self._rename(self._path(args[0], args[1]), self._path(args[2], args[3]), start, end)

    _sys_renameat2 = _sys_renameat

    def _link(self, src: str, dst: str, start: int, end: int) -> None:
        rs, rd = self._rel(src), self._rel(dst)
        if rs is None or rd is None:
            return
        ino, wd = self._lookup(rs), self._entry(rd)
        if ino is None or wd is None:
            return
        self.paths[rd] = ino
        self.ops.append(Op("link", start, end, ino=ino, parent2=wd[0], name2=wd[1]))

    def _sys_link(self, args, ret, rv, start, end) -> None:
        self._link(self._path(None, args[0]), self._path(None, args[1]), start, end)

    def _sys_linkat(self, args, ret, rv, start, end) -> None:
        self._link(self._path(args[0], args[1]), self._path(args[2], args[3]), start, end)

    def _sys_utimensat(self, args, ret, rv, start, end) -> None:
        if args[1] == "NULL":
            ent = self._fd(args[0])
            ino = ent["ino"] if ent else None
        else:
            rel = self._rel(self._path(args[0], args[1]))
            ino = self._lookup(rel) if rel is not None else None
        nums = [int(x) for x in re.findall(r"tv_(?:sec|nsec)=(\d+)", args[2])]
        if ino is None or len(nums) != 4:
            return
        self.ops.append(Op("utime", start, end, ino=ino,
                           times=(nums[0] * 10**9 + nums[1], nums[2] * 10**9 + nums[3])))

    def _sys_clone(self, args, ret, rv, start, end) -> None:
        if "CLONE_THREAD" not in ",".join(args) and "CLONE_FILES" not in ",".join(args):
            raise RuntimeError("the traced run forked a process: one fd table is modelled")

    _sys_clone3 = _sys_clone
    _sys_fork = _sys_vfork = _sys_clone

    # -- the model ----------------------------------------------------------------------------
    def acks(self, k: int) -> list[str]:
        """The texts acknowledged before position ``k``."""
        return [op.text for op in self.ops if op.kind == "ack" and op.end < k]

    def coverage(self) -> None:
        """For every op: when (trace position) a flush covering it completes (``done``),
        and for a rename when a flush of its source directory starts and completes."""
        flushes = sorted((op for op in self.ops if op.kind in ("flush", "syncfs")),
                         key=lambda f: f.start)
        for op in self.ops:
            op.done = op.src_start = op.src_done = INF   # type: ignore[attr-defined]
            if op.kind in ("flush", "syncfs", "ack"):
                continue
            for f in flushes:
                if f.start <= op.end:
                    continue
                covers = src = False
                if f.kind == "syncfs":
                    covers = True
                elif op.kind in ("write", "trunc", "copy"):
                    covers = f.ino == op.ino
                elif op.kind == "utime":
                    covers = f.ino == op.ino and f.text != "data"
                elif op.kind == "rename":
                    covers = f.ino == op.parent2
                    src = f.ino == op.parent
                elif op.kind == "link":
                    covers = f.ino == op.parent2
                else:
                    covers = f.ino == op.parent
                if covers:
                    op.done = min(op.done, f.end)   # type: ignore[attr-defined]
                if src:   # (a syncfs commits a rename whole: no half under it)
                    op.src_start = min(op.src_start, f.start)   # type: ignore[attr-defined]
                    op.src_done = min(op.src_done, f.end)       # type: ignore[attr-defined]

    def points(self) -> list[int]:
        """Every distinct crash point: right after an op starts or a flush completes."""
        pts = {op.start + 1 for op in self.ops} | {op.end + 1 for op in self.ops
                                                    if op.end < INF}
        return sorted(pts)


Choice = Callable[[int, Op, bool], str]   # (op index, op, half possible) -> keep/omit/half


def decisions(trace: Trace, k: int, chooser: Choice) -> dict[int, str]:
    """What a state at ``k`` does with each op issued before ``k``."""
    out: dict[int, str] = {}
    for i, op in enumerate(trace.ops):
        if op.start >= k or op.kind in ("flush", "syncfs", "ack"):
            continue
        if op.done < k:                                  # type: ignore[attr-defined]
            out[i] = "keep"
            continue
        half_ok = op.kind == "rename" and op.src_start < k   # type: ignore[attr-defined]
        got = chooser(i, op, half_ok)
        if op.kind == "rename" and op.src_done < k and got == "omit":   # type: ignore
            got = "half"                                 # the old name is surely gone
        if got == "half" and not half_ok:
            got = "omit"
        out[i] = got
    return out


def optional(trace: Trace, k: int) -> list[int]:
    return [i for i, op in enumerate(trace.ops) if op.start < k
            and op.kind not in ("flush", "syncfs", "ack") and op.done >= k]   # type: ignore


def choosers(trace: Trace, k: int, rng: random.Random, singles: int, randoms: int
             ) -> list[tuple[str, Choice]]:
    out: list[tuple[str, Choice]] = [
        ("all kept", lambda i, op, h: "keep"),
        ("all lost", lambda i, op, h: "omit"),
        ("all lost, renames half", lambda i, op, h: "half" if h else "omit"),
        ("names kept, data lost", lambda i, op, h: "omit" if op.kind in
         ("write", "trunc", "copy") else "keep"),
    ]
    opt = optional(trace, k)
    picks = opt if singles < 0 else rng.sample(opt, min(len(opt), singles))
    for j in picks:
        out.append((f"all kept but #{j} {trace.ops[j].kind}",
                    lambda i, op, h, j=j: ("half" if h else "omit") if i == j else "keep"))
    for r in range(randoms):
        bits: dict[int, str] = {}
        sub = random.Random(rng.random())
        out.append((f"random {r}", lambda i, op, h, b=bits, s=sub: b.setdefault(
            i, s.choice(["keep", "omit", "half"] if h else ["keep", "omit"]))))
    return out


# -- materializing ----------------------------------------------------------------------------
def materialize(trace: Trace, decided: dict[int, str], dst: Path) -> None:
    """A copy of ``pre`` with the decided ops replayed, each following its inode."""
    shutil.copytree(trace.pre, dst, symlinks=True)
    base = str(dst)
    where: dict[int, list[str]] = {i: [p] for i, p in trace.pre_path.items()}

    def at(ino: int) -> str | None:
        names = where.get(ino)
        return os.path.join(base, names[0]) if names else None

    def child(parent: int, name: str) -> str | None:
        names = where.get(parent)
        if not names:
            return None
        return os.path.join(names[0], name) if names[0] else name

    def gone(rel: str) -> None:
        for ino, names in list(where.items()):
            keep = [n for n in names if n != rel and not n.startswith(rel + "/")]
            if keep != names:
                if keep:
                    where[ino] = keep
                else:
                    del where[ino]

    for i in sorted(decided, key=lambda i: trace.ops[i].end):
        what = decided[i]
        if what == "omit":
            continue
        op = trace.ops[i]
        try:
            _replay(op, what, where, at, child, gone, base, trace)
        except OSError:
            pass    # a precondition was lost (its directory or file never reached the disk)


def _replay(op: Op, what: str, where, at, child, gone, base: str, trace: Trace) -> None:
    kind = op.kind
    if kind in ("create", "mkdir"):
        rel = child(op.parent, op.name)
        if rel is None:
            return
        full = os.path.join(base, rel)
        if kind == "mkdir":
            os.mkdir(full)
        else:
            os.close(os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        where[op.ino] = [rel]
    elif kind in ("write", "trunc", "copy", "utime"):
        path = at(op.ino)
        if path is None:
            return
        if kind == "utime":
            os.utime(path, ns=op.times, follow_symlinks=False)
            return
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            if kind == "write":
                os.pwrite(fd, op.data, op.offset)
            elif kind == "trunc":
                os.ftruncate(fd, op.length)
            else:
                src = at(op.src_ino) if op.src_ino >= 0 else op.name
                if src:
                    with open(src, "rb") as fh:
                        fh.seek(op.parent)
                        os.pwrite(fd, fh.read(op.length), op.offset)
        finally:
            os.close(fd)
    elif kind in ("unlink", "rmdir"):
        rel = child(op.parent, op.name)
        if rel is None:
            return
        (os.rmdir if kind == "rmdir" else os.unlink)(os.path.join(base, rel))
        gone(rel)
    elif kind == "link":
        src, rel = at(op.ino), child(op.parent2, op.name2)
        if src is None or rel is None:
            return
        os.link(src, os.path.join(base, rel), follow_symlinks=False)
        where.setdefault(op.ino, []).append(rel)
    elif kind == "rename":
        old, new = child(op.parent, op.name), child(op.parent2, op.name2)
        if old is None or not os.path.lexists(os.path.join(base, old)):
            return
        if what == "half" or new is None:
            full = os.path.join(base, old)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
            gone(old)
            return
        full_new = os.path.join(base, new)
        if op.is_dir and os.path.lexists(full_new):
            if os.listdir(full_new):
                return        # NOREPLACE onto a live directory: never happened
            os.rmdir(full_new)
        os.rename(os.path.join(base, old), full_new)
        gone(new)
        for ino, names in list(where.items()):
            where[ino] = [new + n[len(old):] if n == old or n.startswith(old + "/") else n
                          for n in names]


# -- checking ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Tally:
    states: int = 0
    lost: int = 0
    duplicated: int = 0
    torn: int = 0
    examples: list[str] = dataclasses.field(default_factory=list)

    def add(self, label: str, lost: Iterable[str], dup: Iterable[str], torn: Iterable[str]
            ) -> None:
        lost, dup, torn = list(lost), list(dup), list(torn)
        self.states += 1
        self.lost += bool(lost)
        self.duplicated += bool(dup)
        self.torn += bool(torn)
        if (lost or dup or torn) and len(self.examples) < 8:
            self.examples.append(f"{label}: lost={lost[:3]} dup={dup[:3]} torn={torn[:3]}")

    def row(self, name: str) -> str:
        return f"| {name} | {self.states} | {self.lost} | {self.duplicated} | {self.torn} |"


Check = Callable[[Path, list[str]], tuple[list[str], list[str], list[str]]]


def run_states(trace: Trace, tmp: Path, check: Check, *, budget: int, seed: int,
               every: bool = STRESS, points: list[int] | None = None) -> Tally:
    """Build and check crash states: at every point the fixed choosers and random subsets,
    and every single omission where a flush starts or completes or an ack was written
    (``every``); else the strongest state (all lost, renames half) at each of those key
    points and a seeded sample of others, ``budget`` states or the key points and a third of
    ``budget`` more, whichever is more."""
    trace.coverage()
    rng = random.Random(seed)
    pts = trace.points() if points is None else points
    tally = Tally()
    plan: list[tuple[int, str, Choice]] = []
    # the points where durability is decided: right after a flush starts (a rename's
    # source flush in flight) and completes, and after each acknowledgement
    key = sorted({op.end + 1 for op in trace.ops if op.kind in ("flush", "syncfs", "ack")
                  and op.end < INF} | {op.start + 1 for op in trace.ops
                                       if op.kind in ("flush", "syncfs")})
    key = [k for k in key if k in set(pts)] or pts
    if every:   # every point: the fixed choosers and two random subsets; at the key
        for k in pts:   # points also every single omission
            for label, ch in choosers(trace, k, rng, -1 if k in key else 0, 2):
                plan.append((k, label, ch))
    else:   # the strongest state at every key point (how many the trace has, not a sample:
        # which points are key varies with the threads' timing, a sample could miss the one),
        # then in priority order, each list shuffled; duplicates skipped, up to ``budget``
        strongest = [(k, "all lost, renames half", choosers(trace, k, rng, 0, 0)[2][1])
                     for k in key]
        budget = max(budget, len(strongest) + budget // 3)
        base = [(k, lab, ch) for k in pts for lab, ch in choosers(trace, k, rng, 0, 0)]
        extra = [(k, lab, ch) for k in key for lab, ch in choosers(trace, k, rng, 1, 1)[4:]]
        rng.shuffle(base)
        rng.shuffle(extra)
        plan = strongest + base + extra
    seen: set[tuple] = set()
    todo: list[tuple[int, str, dict[int, str]]] = []
    for k, label, ch in plan:
        decided = decisions(trace, k, ch)
        sig = tuple(sorted(decided.items()))
        if sig not in seen:
            seen.add(sig)
            todo.append((k, label, decided))
        if not every and len(todo) >= budget:
            break
    for n, (k, label, decided) in enumerate(todo):
        state = tmp / f"state-{n}"
        materialize(trace, decided, state)
        acked = trace.acks(k)
        try:
            lost, dup, torn = check(state, acked)
        except Exception as exc:   # noqa: BLE001 - the store cannot be opened: a finding
            lost, dup, torn = [], [], [f"cannot open: {exc!r}"]
        tally.add(f"crash at {k} ({label})", lost, dup, torn)
        shutil.rmtree(state, ignore_errors=True)
    return tally


def events_check(store: str, *, expect: Callable[[list[str]], dict[str, tuple[int, int]]],
                 open_kw: dict | None = None, known: tuple[str, ...] = ()) -> Check:
    """The usual invariant: open the store (recovery runs), count each event input over the
    layers, compare with ``expect(acked)`` (input -> (min, max) count), and fsck it (findings
    about the ``known`` file names, damaged before the run on purpose, aside)."""
    def check(state: Path, acked: list[str]) -> tuple[list[str], list[str], list[str]]:
        from conftest import stored_inputs
        from fsmem import Memory
        mem = Memory.open(state / store, auto_prune=False, **(open_kw or {}))
        try:
            seen = stored_inputs(mem)
            want = expect(acked)
            lost = [t for t, (lo, hi) in want.items() if seen[t] < lo or (hi == 0 and seen[t])]
            dup = [t for t, c in seen.items() if c > max(1, want.get(t, (0, 1))[1])]
            torn = [f"{f.kind} {f.path}: {f.detail}" for f in mem.fsck()
                    if os.path.basename(f.path) not in known]
        finally:
            mem.close()
        return lost, dup, torn
    return check
