"""The change feed: ``.fsmem/changes/``, every change a writer made to the set of units, in order.

A writer appends one record per unit change (``publish`` into a layer, ``move`` between layers,
``remove``, ``quarantine``) to the newest segment, a JSON-lines file named by the sequence
number of its first record, **before** the change is made and durable in the same barrier as
the change's own data (a journaled change: with its journal entry). So after any crash every
change that can be seen in the layers has its record; a record whose change never happened (a
crash between the two) names a unit that is not there, and a consumer confirms every record
against the layer anyway (one ``stat``). Each writer session (one hold of the writer lock that
changed something) is framed by a ``begin`` and an ``end`` mark carrying each layer
directory's identity (inode, mtime, entry count) before and after: a consumer that finds every
``begin`` equal to the ``end`` before it, and the last ``end`` equal to the directories now,
knows that nothing outside fsmem (``cp -a``, ``mv``, ``rm -r``) changed the layers; otherwise
it takes one listing. The feed is bounded: a segment is closed at ``SEGMENT_BYTES`` and only
the newest ``SEGMENTS_KEPT`` are kept; a consumer behind the oldest kept record is told
(``ChangesTruncated``) and lists once. docs/FORMAT.md section 3b is the contract.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import msgspec

from fsmem.format import fsops as fsops
from fsmem.format.errors import FormatError, FsmemError
from fsmem.format.layout import LAYERS, open_regular, read_small
from fsmem.store.derived import make_room, problem

__all__ = ["MARKS", "Change", "ChangesTruncated", "FeedRead", "FeedWriter", "Settled",
           "dir_stamp", "layer_stamps", "read_changes", "read_recent", "feed_stamp", "feed_id",
           "settle", "UNIT_KINDS", "FEED_DIR"]

log = logging.getLogger("fsmem.changes")

FEED_DIR = "changes"
SEGMENT_BYTES = 1 << 20     # ~7,000 records a segment
SEGMENTS_KEPT = 8           # the feed holds at most ~8 MiB: ~56,000 recent records
UNIT_KINDS = ("publish", "move", "remove", "quarantine")
MARKS = ("begin", "end")
_SUFFIX = ".jsonl"
_TAIL = 64 << 10            # bytes read back from a segment's end to find its last record
_ID_FILE = "ID"


class ChangesTruncated(FsmemError):
    """The records asked for are older than the feed keeps: list the layers once."""

    def __init__(self, message: str, horizon: int) -> None:
        super().__init__(message)
        self.horizon = horizon


class Change(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of a segment. ``layer``: where the unit is after a publish or move, where it
    was before a remove or quarantine; ``src``: the layer a move left; ``op``: the operation
    (commit, append, prune, recall, distill, import, ingest, fsck, ...); ``dirs`` (marks):
    layer -> [inode, mtime ns, entry count] of its directory."""

    seq: int
    at: int
    kind: str
    layer: str = ""
    unit: str = ""
    src: str = ""
    op: str = ""
    pid: int = 0
    dirs: dict[str, list[int]] = {}


_encode = msgspec.json.Encoder().encode
_decode_line = msgspec.json.Decoder(Change).decode


def dir_stamp(path: str) -> list[int]:
    """[inode, mtime ns, entry count] of a layer directory ([0, 0, 0] if it is missing). The
    count is ``st_nlink`` (2 + subdirectories on ext4, XFS, tmpfs): a unit added or removed
    within one mtime tick still changes it."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return [0, 0, 0]
    return [st.st_ino, st.st_mtime_ns, st.st_nlink]


def layer_stamps(root: str, layers: Sequence[str] = LAYERS) -> dict[str, list[int]]:
    return {layer: dir_stamp(os.path.join(root, layer)) for layer in layers}


def _segments(feed_dir: str) -> list[tuple[int, str]]:
    """(first seq, file name) of every segment, oldest first."""
    try:
        names = os.listdir(feed_dir)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        stem = name[:-len(_SUFFIX)] if name.endswith(_SUFFIX) else ""
        if stem.isdigit():
            out.append((int(stem), name))
    return sorted(out)


def _seg_name(first: int) -> str:
    return f"{first:016d}{_SUFFIX}"


def feed_id(feed_dir: str) -> str:
    """The feed's identity (a random id written when the feed was created; "" if none): a
    consumer's position is only meaningful in the feed it was read from."""
    try:
        return read_small(os.path.join(feed_dir, _ID_FILE), 256).decode("ascii").strip()
    except (OSError, FsmemError, UnicodeDecodeError):
        return ""


def _parse(data: bytes, path: str) -> tuple[list[Change], int]:
    """The records of complete lines of ``data`` and the byte length they span (a last line
    without its newline is a record still being written, or torn: not taken)."""
    out: list[Change] = []
    end = data.rfind(b"\n") + 1
    for line in data[:end].split(b"\n"):
        if not line.strip():
            continue
        try:
            out.append(_decode_line(line))
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.debug("%s: undecodable line skipped", path)   # a power loss's zeros
    return out, end


@dataclass
class FeedRead:
    """What ``read_changes`` found: the records after ``since`` (marks included), the feed's
    id, its oldest kept sequence number (``horizon``), its last one, and where reading
    stopped (``hint``: segment name, byte offset) for the next call."""

    records: list[Change]
    feed: str
    horizon: int
    last: int
    hint: tuple[str, int] = ("", 0)


def read_changes(meta_dir: str, since: int = 0, *, hint: tuple[str, int] = ("", 0),
                 feed: str = "") -> FeedRead:
    """The records with a sequence number above ``since``, oldest first, read without a lock
    (a reader creates nothing). ``hint`` (from the previous call) lets a follower read only
    what was appended since. ``feed``: the id the caller's ``since`` belongs to; another id
    (the feed was deleted and started again) or a ``since`` older than the oldest kept record
    raises ``ChangesTruncated``."""
    feed_dir = os.path.join(meta_dir, FEED_DIR)
    fid = feed_id(feed_dir)
    segs = _segments(feed_dir)
    if not segs:
        if since and (feed and fid != feed or not fid):
            raise ChangesTruncated(f"{feed_dir}: no change feed records", 1)
        return FeedRead([], fid, 1, since, ("", 0))
    horizon = segs[0][0]
    if feed and fid != feed:
        raise ChangesTruncated(f"{feed_dir}: the feed was started again (id {fid!r}, "
                               f"asked about {feed!r})", horizon)
    if since + 1 < horizon:
        raise ChangesTruncated(f"{feed_dir}: records up to {horizon - 1} were compacted "
                               f"away (asked for those after {since})", horizon)
    start = max(i for i, (first, _n) in enumerate(segs) if first <= since + 1) \
        if segs[0][0] <= since + 1 else 0
    records: list[Change] = []
    seg_name, offset = "", 0
    for first, name in segs[start:]:
        path = os.path.join(feed_dir, name)
        at = hint[1] if hint[0] == name else 0
        try:
            fd = open_regular(path)
        except FileNotFoundError:   # compacted away meanwhile: the later ones still hold ours
            continue
        except (OSError, FsmemError) as exc:
            # A damaged segment (a FIFO, a directory...): its records are lost. Before a
            # later segment, the caller is told to list once; the newest one is skipped (the
            # layers' stamps no longer match the last end mark read: a consumer lists once).
            log.warning("%s: unreadable change feed segment (%s); its records are skipped",
                        path, exc)
            later = [f for f, _n in segs if f > first]
            if later:
                raise ChangesTruncated(f"{path}: unreadable segment ({exc})", later[0]) \
                    from exc
            continue
        try:
            size = os.fstat(fd).st_size
            at = at if at <= size else 0
            data = os.pread(fd, size - at, at) if size > at else b""
        finally:
            os.close(fd)
        recs, used = _parse(data, path)
        records.extend(r for r in recs if r.seq > since)
        seg_name, offset = name, at + used
    last = records[-1].seq if records else since
    return FeedRead(records, fid, horizon, last, (seg_name, offset))


def read_recent(meta_dir: str) -> FeedRead:
    """The records of the newest segment (a consumer with no position: it lists once and
    takes its position from these)."""
    segs = _segments(os.path.join(meta_dir, FEED_DIR))
    return read_changes(meta_dir, segs[-1][0] - 1 if segs else 0)


def feed_stamp(meta_dir: str, hint: tuple[str, int]) -> tuple[int, int]:
    """(mtime of the feed directory, size of the segment ``hint`` names): unchanged while no
    record was appended (a new segment changes the directory)."""
    feed_dir = os.path.join(meta_dir, FEED_DIR)
    try:
        d = os.stat(feed_dir).st_mtime_ns
    except OSError:
        return (0, 0)
    try:
        size = os.stat(os.path.join(feed_dir, hint[0])).st_size if hint[0] else -1
    except OSError:
        size = -2
    return (d, size)


@dataclass
class Settled:
    """What a consumer of one layer learns from records after its position: the units to
    look at again, the position it may keep (records of a session still in progress are
    looked at but read again next time), the directory stamp it is in step with there, and
    whether that is proven (``complete``) or one listing is needed."""

    units: set[str] = field(default_factory=set)
    pos: int = 0
    stamp: list[int] = field(default_factory=list)
    complete: bool = True
    safe_pos: int = 0        # after a listing: the position to keep (before a session at work)
    safe_stamp: list[int] = field(default_factory=list)   # ... and the stamp it matches


def settle(records: Iterable[Change], since: int, stamp: Sequence[int], now: Sequence[int],
           layer: str) -> Settled:
    """Follow ``records`` (after position ``since``, at which the consumer's view of
    ``layer`` matched directory stamp ``stamp``) to the directory as it is ``now``."""
    records = list(records)
    out = Settled(pos=since, stamp=list(stamp))
    expect, ok, open_at, open_dirs = list(stamp), True, 0, []
    for r in records:
        if r.kind == "begin":
            if open_at:            # the session before never ended: a crash
                ok = False
            ok = ok and r.dirs.get(layer) == expect
            open_at, open_dirs = r.seq, r.dirs.get(layer, [])
        elif r.kind == "end":
            expect = list(r.dirs.get(layer, []))
            open_at = 0
            if ok:
                out.pos, out.stamp = r.seq, list(expect)
        elif r.kind in UNIT_KINDS and layer in (r.layer, r.src):
            out.units.add(r.unit)
    out.safe_pos = open_at - 1 if open_at else (records[-1].seq if records else since)
    out.safe_stamp = list(open_dirs) if open_at else list(now)
    if open_at:   # a writer is at work: its records were looked at; the position stays
        out.complete = ok
    else:
        out.complete = ok and expect == list(now)
        if out.complete:
            out.pos = records[-1].seq if records else since
            out.stamp = list(now)
    return out


class FeedWriter:
    """The writer side, used by ``fsmem.store.store.Store`` under its lock: ``note`` a
    change (a ``begin`` mark first in a session), ``close_session`` at the lock's release
    (the ``end`` mark), and the files a barrier must flush (``dirty``)."""

    def __init__(self, root: str, meta_dir: str) -> None:
        self.root = root
        self.dir = os.path.join(meta_dir, FEED_DIR)
        self._fd = -1
        self._path = ""
        self._next = 0           # sequence number of the next record
        self._size = 0
        self._new_dir_entry = False   # a segment (or the feed) was created: flush feed/
        self._unflushed = False
        self.session = False

    # -- the session ----------------------------------------------------------------------
    def note(self, kind: str, layer: str, unit: str, *, src: str = "", op: str = "") -> None:
        """Append one unit change (before it is made; under the writer lock)."""
        if not self.session:
            self._open()
            self._append([Change(seq=0, at=0, kind="begin", pid=os.getpid(),
                                 dirs=layer_stamps(self.root))])
            self.session = True
        self._append([Change(seq=0, at=0, kind=kind, layer=layer, unit=unit, src=src, op=op)])

    def close_session(self) -> None:
        """The ``end`` mark, with the layers as this session leaves them (not flushed: a
        lost one costs a consumer one listing; the next barrier of the store flushes it)."""
        if not self.session:
            return
        self.session = False
        try:
            self._append([Change(seq=0, at=0, kind="end", dirs=layer_stamps(self.root))])
            self._rotate()
        except OSError as exc:
            log.warning("%s: change feed end mark not written (%s); consumers list once",
                        self.dir, exc)
        finally:
            self._close()

    # -- barriers -------------------------------------------------------------------------
    def dirty(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(files, directories) to flush so that every record noted is durable."""
        if not self._unflushed:
            return (), ()
        return (self._path,), ((self.dir,) if self._new_dir_entry else ())

    def flushed(self) -> None:
        """The caller's barrier made what ``dirty`` named durable."""
        self._unflushed = self._new_dir_entry = False

    def flush(self) -> None:
        """A barrier of its own (a move or remove has none to ride before its rename)."""
        files, dirs = self.dirty()
        if files:
            fsops.flush_many(files, dirs)
            self.flushed()

    # -- segments -------------------------------------------------------------------------
    def _open(self) -> None:
        """Open the newest segment for appending (the feed created if missing); find the
        last sequence number from its tail and cut a torn last line."""
        self._repair()
        if not os.path.isdir(self.dir):
            try:
                fsops.mkdir(self.dir)
                self._new_dir_entry = True
            except FileExistsError:
                pass
        if not feed_id(self.dir):
            tmp = os.path.join(self.dir, f"{_ID_FILE}.{os.getpid()}.tmp")
            fd = fsops.open_(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            try:
                fsops.write_all(fd, uuid.uuid4().hex.encode("ascii") + b"\n")
            finally:
                os.close(fd)
            fsops.replace(tmp, os.path.join(self.dir, _ID_FILE))
            self._new_dir_entry = True
        segs = _segments(self.dir)
        if not segs:
            self._create(1)
            return
        first, name = segs[-1]
        path = os.path.join(self.dir, name)
        fd = fsops.open_(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise FormatError(f"{path}: not a regular file")
            if st.st_size == self._size and path == self._path and self._next:
                last = self._next - 1   # nobody appended since this writer's last session
            else:
                at = max(0, st.st_size - _TAIL)
                data = os.pread(fd, st.st_size - at, at)
                recs, used = _parse(data, path)
                if at + used < st.st_size:   # a torn last line (a crash mid-append): cut it
                    os.ftruncate(fd, at + used)
                last = recs[-1].seq if recs else first - 1
        except BaseException:
            fsops.close(fd)
            raise
        self._fd, self._path, self._next = fd, path, last + 1
        self._size = os.fstat(fd).st_size

    def _repair(self) -> None:
        """A feed whose ID or a segment is not a regular file (a FIFO, a directory) is set
        aside whole (``make_room``: into quarantine) and started again with a new id: every
        consumer then lists once (``ChangesTruncated``); nothing is written through it."""
        what = problem(self.dir)
        if what and what != "a directory":
            make_room(self.dir, os.path.dirname(self.dir))
            return
        if not what:
            return
        bad = [n for n in (_ID_FILE, *(n for _f, n in _segments(self.dir)))
               if problem(os.path.join(self.dir, n))]
        if bad:
            log.warning("%s: %s not a regular file; the feed starts again", self.dir,
                        ", ".join(bad))
            make_room(self.dir, os.path.dirname(self.dir))
            self._next, self._size, self._path = 0, 0, ""

    def _create(self, first: int) -> None:
        path = os.path.join(self.dir, _seg_name(first))
        self._close()
        self._fd = fsops.open_(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL
                               | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        self._path, self._next, self._size = path, first, 0
        self._new_dir_entry = True

    def _append(self, recs: list[Change]) -> None:
        now = time.time_ns()
        for r in recs:
            r.seq, r.at = self._next, now
            self._next += 1
        data = b"".join(_encode(r) + b"\n" for r in recs)
        fsops.write_all(self._fd, data)
        self._size += len(data)
        self._unflushed = True

    def _rotate(self) -> None:
        """Close the segment at its size bound; keep the newest ``SEGMENTS_KEPT``."""
        if self._size < SEGMENT_BYTES:
            return
        self._create(self._next)
        segs = _segments(self.dir)
        for _first, name in segs[:-SEGMENTS_KEPT]:
            try:
                fsops.unlink(os.path.join(self.dir, name))
            except FileNotFoundError:
                pass

    def _close(self) -> None:
        if self._fd >= 0:
            try:
                fsops.close(self._fd)
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
            self._fd = -1
