"""The inbox protocol's ingest side: what a dropped file or unit directory becomes.

A claimed entry (``inbox/.processing/<claim>``) is opened with ``O_NOFOLLOW|O_NONBLOCK``
relative to a directory fd, required to be a regular file with one link under the size cap,
hashed and stored from the same descriptor (docs/FORMAT.md §7). Every ingested file's BLAKE3
is recorded in what it became (``meta.inbox_digest``, event ids ``e-i<digest>-<n>``), and a
small ledger keeps the duplicate check cheap, so a crash between claim and store re-ingests
without a duplicate. The daemon that finds and claims entries is ``fsmem.ingest.watch``.
"""

from __future__ import annotations

import codecs
import errno
import io
import logging
import os
import shutil
import stat
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import blake3
import msgspec

from fsmem.format import fsops as fsops
from fsmem.format.blocks import CHUNK, block_filename, hash_bytes, hash_fd
from fsmem.format.errors import FormatError, FsmemError, NotFound, StoreLocked
from fsmem.format.event_json import decode_json, event_from_record
from fsmem.format.layout import open_regular, read_small
from fsmem.format.media import sniff_mime
from fsmem.format.model import FORMAT_VERSION, Event, Manifest, VectorsRef, check_name, encode
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import MANIFEST, VECTORS, UnitBuilder, load_npy, read_manifest
from fsmem.ingest import notes
from fsmem.ingest.inbox_dirs import _display, _InboxDirs, ignored_name, special_reason
from fsmem.memory.facade import Memory
from fsmem.search import analyze
from fsmem.store.derived import make_room

__all__ = ["Ingestor", "Outcome", "Rejected", "DEFAULT_SIZE_CAP", "TEXT_PART", "EVENTS_CAP",
           "TERM_MEMO_MAX", "ignored_name", "trim_term_memos"]

log = logging.getLogger("fsmem.inbox")

DEFAULT_SIZE_CAP = 1 << 30
TEXT_PART = 1 << 20     # a text file is stored in units of at most this many bytes each
EVENTS_CAP = 32 << 20   # an event file (.jsonl/.json) is parsed whole: at most this big
TERM_MEMO_MAX = 20_000  # terms a per-term memo table may keep between two stored parts
LEDGER = "inbox.ledger"
LEDGER_CAP = 1 << 30
_EVENT_EXT = {".jsonl", ".ndjson", ".json"}
_TEXT_EXT = {".md", ".markdown", ".txt"}
_MEDIA_EXT = {".png": "PNG image", ".jpg": "JPEG image", ".jpeg": "JPEG image",
              ".gif": "GIF image", ".webp": "WebP image", ".wav": "WAV audio",
              ".mp3": "MP3 audio", ".ogg": "Ogg audio", ".oga": "Ogg audio",
              ".mp4": "MP4 video", ".m4a": "MP4 audio", ".pdf": "PDF document"}
_HEAD = 65536           # the first read of a file (its type); a smaller file is read once


class Rejected(FsmemError):
    """A dropped entry that will not be stored; the message says why (it goes to error.txt)."""


class _Duplicate(Exception):
    """The content is already in the store (``where`` = layer/unit)."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


class _Interrupted(BaseException):
    """A second SIGINT/SIGTERM: abandon the file in hand (the library leaves no partial unit)."""


@dataclass
class Outcome:
    """What happened to one dropped entry: ``ingested``, ``duplicate``, ``rejected`` or
    ``deferred`` (a transient error; the claim stays in .processing and is retried)."""

    status: str
    name: str
    kind: str = ""
    units: list[str] = field(default_factory=list)  # "layer/unit-id"
    reason: str = ""
    size: int = 0
    digest: str = ""
    moved_to: str = ""
    skipped: list[str] = field(default_factory=list)  # a notes folder's entries not taken


def _ext(name: str) -> str:
    return os.path.splitext(name)[1].lower()


# -- the digest ledger ----------------------------------------------------------------------

class _StoreScan:
    """What one pass over every manifest tells about earlier ingests (and event ids)."""

    def __init__(self, mem: Memory) -> None:
        self.digests: dict[str, str] = {}    # inbox digest (or its 32-hex prefix) -> unit id
        self.event_ids: dict[str, str] = {}  # event id -> "layer/unit"
        self.attachments: dict[str, str] = {}  # attachment block digest -> unit id
        for layer in mem.store.layers():
            for unit_id in mem.store.iter_units(layer):
                try:
                    m = read_manifest(mem.store.unit_dir(layer, unit_id))
                except (FsmemError, OSError):
                    continue
                if len(d := m.meta.get("inbox_digest", "")) == 64:
                    self.digests.setdefault(d, unit_id)
                for ev in m.events:
                    self.event_ids[ev.id] = f"{layer}/{unit_id}"
                    if ev.id.startswith("e-i") and len(ev.id) > 36 and ev.id[35] == "-":
                        self.digests.setdefault(ev.id[3:35], unit_id)
                    for ref in ev.blocks:
                        if ref.role == "attachment":
                            self.attachments.setdefault(ref.digest, unit_id)

    def lookup(self, digest: str, *, attachments: bool = False) -> str | None:
        """The unit an ingest of these bytes made. With ``attachments`` (resuming a claim),
        a media block with these bytes also counts: the store holds them either way."""
        return (self.digests.get(digest) or self.digests.get(digest[:32])
                or (self.attachments.get(digest) if attachments else None))


class _Ledger:
    """``.fsmem/inbox.ledger``: one ``<digest> <unit id>`` line per ingested file, appended
    after the unit is published (lines gathered, written by ``flush`` before the batch's
    syncfs: one write per batch, not per file). Derived: rebuilt from the manifests when
    missing; a digest whose unit is gone is checked against the manifests before it counts."""

    def __init__(self, mem: Memory) -> None:
        self.mem = mem
        self.path = os.path.join(mem.store.meta, LEDGER)
        self.map: dict[str, str] = {}
        self._fd: int | None = None   # the kept append descriptor (see ``flush``)
        self._lines: list[str] = []   # added, not yet written
        self._broken = False          # a write failed: the file was removed, nothing more

    def load(self) -> None:
        try:
            raw = read_small(self.path, LEDGER_CAP)
        except FileNotFoundError:
            self.rebuild(_StoreScan(self.mem))
            return
        except FormatError as exc:  # derived: a FIFO or a monster in its place is rebuilt
            log.warning("%s; rebuilding the ledger from the manifests", exc)
            make_room(self.path, self.mem.store.meta)   # a directory: into quarantine
            self.rebuild(_StoreScan(self.mem))
            return
        for line in raw.decode("ascii", "replace").splitlines():
            parts = line.split()
            if len(parts) == 2 and len(parts[0]) in (32, 64):  # a torn last line is skipped
                if parts[1] == "-":
                    self.map.pop(parts[0], None)
                else:
                    self.map[parts[0]] = parts[1]

    def rebuild(self, scan: _StoreScan) -> None:
        self._lines.clear()   # their units are in the scan
        self.close()   # the file is replaced: the next add opens the new one
        self.map = dict(scan.digests)
        data = "".join(f"{d} {u}\n" for d, u in sorted(self.map.items())).encode()
        self.mem.store.write_file_atomic(self.path, data, sync=False)

    def add(self, digest: str, unit_id: str) -> None:
        """Record one line (written by the next ``flush``; the map answers at once)."""
        self.map[digest] = unit_id
        self._lines.append(f"{digest} {unit_id}\n")

    def flush(self) -> None:
        """Append the recorded lines with one write, through a descriptor kept open between
        batches (``rebuild`` replaces the file and closes it). The ledger is derived: a
        ledger removed under a running watcher is rebuilt from the manifests next start,
        and so is one whose write failed (removed here, not written again this run: a
        ledger missing lines would miss duplicates)."""
        lines, self._lines = self._lines, []
        if not lines or self._broken:
            return
        try:
            fsops.write_all(self._append_fd(), "".join(lines).encode())
        except OSError as exc:
            log.warning("%s: not written (%s); removed, rebuilt at the next start",
                        self.path, exc)
            self.close()
            self._broken = True
            try:
                fsops.unlink(self.path)
            except OSError:
                pass

    def _append_fd(self) -> int:
        if self._fd is None:
            fd = fsops.open_(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                             | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise FormatError(f"{self.path}: not a regular file")
            self._fd = fd
        return self._fd

    def close(self) -> None:
        """Close the kept append descriptor (the watcher's exit: what is recorded is
        written first)."""
        if self._lines:
            self.flush()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def forget(self, digest: str) -> None:
        """A digest whose units are all gone: a tombstone line, so it may be ingested again."""
        self.add(digest, "-")
        self.map.pop(digest, None)

    def get(self, digest: str) -> str | None:
        return self.map.get(digest) or self.map.get(digest[:32])


# -- ingesting one claimed entry ------------------------------------------------------------

class Ingestor:
    """Turns one claimed entry of ``inbox/.processing/`` into units, or says why not."""

    def __init__(self, mem: Memory, dirs: _InboxDirs, ledger: _Ledger, size_cap: int) -> None:
        self.mem = mem
        self.dirs = dirs
        self.ledger = ledger
        self.size_cap = size_cap
        self.scan: _StoreScan | None = None  # set while resuming claims left by a crash
        self.published: list[tuple[str, str]] = []  # (layer, unit id) of the last entry

    def ingest(self, claim: str, name: str, *, resume: bool = False,
               fd: int | None = None) -> Outcome:
        """Store, reject or report as duplicate. A rejected or duplicate claim moves to
        .rejected/; an ingested one stays for the caller to release once the units are
        durable. A transient error (StoreLocked, ENOSPC, EIO...) is raised. ``fd``: the
        claimed file already open by the caller (who closes it); used only while the claim
        still names that file."""
        self.published = []
        out = Outcome(status="ingested", name=name)
        try:
            st = os.lstat(claim, dir_fd=self.dirs.proc_fd)
            if stat.S_ISDIR(st.st_mode):
                out.kind = "unit"
                self._adopt(claim, name, out, resume)
            elif stat.S_ISREG(st.st_mode):
                self._file(claim, name, out, resume, fd, (st.st_dev, st.st_ino))
            else:
                out.kind = "special"
                raise Rejected(special_reason(st.st_mode))
        except _Duplicate as dup:
            if resume:  # stored before the crash; only the claim was left to remove
                out.reason = f"already stored as {dup.where} before a restart"
                return out
            out.status, out.reason = "duplicate", f"same content as {dup.where}"
        except Rejected as exc:
            out.status, out.reason = "rejected", str(exc)
        except StoreLocked:
            raise
        except OSError as exc:  # StorageError too: ENOSPC, EIO... are transient
            if exc.errno != errno.EFBIG:
                raise
            out.status, out.reason = "rejected", f"over the size cap of {self.size_cap} bytes"
        except (FsmemError, msgspec.ValidationError, ValueError) as exc:
            out.status, out.reason = "rejected", str(exc)
        except Exception as exc:  # a bug must not crash-loop the daemon on the same claim
            log.exception("%s: unexpected error", _display(name))
            out.status, out.reason = "rejected", f"internal error: {type(exc).__name__}: {exc}"
        trim_term_memos(self.mem)  # a long-running daemon's memos stay bounded too
        if out.status == "ingested":  # the caller releases the claim once this is durable
            out.units = [f"{layer}/{u}" for layer, u in self.published]
        else:
            out.moved_to = self.dirs.reject(claim, name, f"{out.status}: {out.reason}")
        return out

    # -- regular files ----------------------------------------------------------------------
    def _file(self, claim: str, name: str, out: Outcome, resume: bool, fd: int | None,
              ident: tuple[int, int]) -> None:
        """A claimed regular file, read from ``fd`` if that is still the file the claim
        names (``ident``: its st_dev, st_ino), else opened here."""
        if fd is not None:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != ident:
                fd = None   # replaced between the caller's open and its claim
        own = None
        if fd is None:
            try:
                own = fd = os.open(claim, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                                   | os.O_CLOEXEC, dir_fd=self.dirs.proc_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise Rejected("a symbolic link (never followed)") from exc
                raise
            st = os.fstat(fd)
        try:
            self._file_fd(fd, st, name, out, resume)
        finally:
            if own is not None:
                os.close(own)
        self.ledger.add(out.digest, self.published[0][1])

    def _file_fd(self, fd: int, st: os.stat_result, name: str, out: Outcome,
                 resume: bool) -> None:
        """The checks and the store of one open regular file (see ``_file``)."""
        out.size = st.st_size
        if not stat.S_ISREG(st.st_mode):
            raise Rejected(special_reason(st.st_mode))
        if st.st_nlink != 1:
            raise Rejected(f"has {st.st_nlink} hard links; only a file with one name "
                           "is taken (its other names could change it)")
        if st.st_size > self.size_cap:
            raise Rejected(f"{st.st_size} bytes is over the size cap of "
                           f"{self.size_cap} bytes")
        if st.st_size == 0:
            raise Rejected("empty file: nothing to store")
        head = os.pread(fd, _HEAD, 0)
        whole = head if len(head) == st.st_size < _HEAD else None   # all of it, read once
        mime = sniff_mime(head[:64])
        ext = _ext(name)
        if mime:
            out.kind = "media"
            self._media(fd, name, mime, head, out, resume)
        elif ext in _MEDIA_EXT:
            raise Rejected(f"named like a {_MEDIA_EXT[ext]}, but its content is not one "
                           "(media is recognised by content)")
        elif ext in _EVENT_EXT:
            out.kind = "events"
            if st.st_size > EVENTS_CAP:
                raise Rejected(f"{st.st_size} bytes is over the cap of {EVENTS_CAP} bytes "
                               "for an event file (it is parsed whole); split it")
            data = whole if whole is not None else _read_all(fd, EVENTS_CAP)
            out.digest = hash_bytes(data)
            if not resume:  # resume skips part by part
                self._check_seen(out.digest, resume)
            self._events(_utf8(data), name, out.digest, resume)
        elif ext in _TEXT_EXT:
            out.kind = "text"
            whole = whole if whole is not None and len(whole) <= TEXT_PART else None
            out.digest, out.size, title = _scan_text(fd, self.size_cap, whole)
            if not (resume and out.size > TEXT_PART):  # resume skips part by part
                self._check_seen(out.digest, resume)
            self._text_parts(fd, name, out.digest, title or _display(name), resume,
                             whole)
        else:
            raise Rejected(f"unsupported type ({ext or 'no extension'}, content not "
                           "recognised): takes .jsonl/.json events, .md/.txt text, and "
                           "png, jpeg, gif, webp, wav, mp3, ogg, mp4, pdf media")

    def _check_seen(self, digest: str, resume: bool) -> None:
        """Raise _Duplicate if a file with these bytes was ingested before."""
        if resume and self.scan and (uid := self.scan.lookup(digest, attachments=True)):
            raise _Duplicate(uid)
        uid = self.ledger.get(digest)
        if uid is None:
            return
        try:
            layer, _ = self.mem.store.locate(uid)
            raise _Duplicate(f"{layer}/{uid}")
        except NotFound:
            pass
        found = _StoreScan(self.mem).lookup(digest)  # its unit was pruned, moved or removed
        if found:
            raise _Duplicate(found)
        self.ledger.forget(digest)

    def _media(self, fd: int, name: str, mime: str, head: bytes, out: Outcome,
               resume: bool) -> None:
        out.digest, out.size = _hash_fd(fd, self.size_cap)
        self._check_seen(out.digest, resume)
        os.lseek(fd, 0, os.SEEK_SET)
        shown = _display(name)
        extra = {"meta": _meta(out.digest, name)}
        uid = self.mem.commit_file(fd, mime=mime, name=shown, text=shown, summary=shown,
                                   source="inbox", head=head, size_cap=self.size_cap, **extra)
        self.published.append(("documents", uid))
        m = read_manifest(self.mem.store.unit_dir("documents", uid))
        if not any(ref.digest == out.digest for ev in m.events for ref in ev.blocks):
            self.mem.remove(uid)  # changed under us between the two reads: never half-true
            self.published.clear()
            raise Rejected("the file changed while it was being stored")

    def _text_parts(self, fd: int, name: str, digest: str, title: str, resume: bool,
                    whole: bytes | None = None) -> None:
        """A text file as units of at most TEXT_PART bytes each, read window by window (the
        file is never in memory whole). One part: one unit, event ``e-i<digest>-0``, as
        always. More: part n is event ``e-i<digest>-n`` in a unit of its own, cut at a blank
        line (else a line end, else a character boundary); the parts' bytes together are
        the file. A restart skips the parts already stored (their event ids). ``whole``:
        the file's bytes already read and hashed (a small file: one part, no second read)."""
        stored = self.scan.event_ids if (resume and self.scan) else {}
        meta = _meta(digest, name)
        hasher = blake3.blake3()
        parts = [whole] if whole is not None else _text_windows(fd, TEXT_PART, hasher)
        for n, part in enumerate(parts):
            if n:
                trim_term_memos(self.mem)   # between parts (the caller trims after the last)
            ev_id = f"e-i{digest[:32]}-{n}"
            if ev_id in stored:
                continue
            text = part.decode("utf-8-sig" if n == 0 else "utf-8")
            summary = title if n == 0 and len(part) < TEXT_PART else f"{title} (part {n + 1})"
            event = Event(id=ev_id, source="inbox", input=text, timestamp=Timestamp.now())
            del text, part
            uid = self.mem.commit_events([event], summary=summary, source="inbox",
                                         meta={**meta, "inbox_part": str(n)} if n else meta)
            self.published.append(("documents", uid))
        if whole is None and hasher.hexdigest() != digest:  # changed since scanned: withdrawn
            for _, uid in self.published:
                self.mem.remove(uid)
            self.published.clear()
            raise Rejected("the file changed while it was being stored")
        if not self.published:
            raise _Duplicate("the units written before a restart")

    def _events(self, text: str, name: str, digest: str, resume: bool,
                base_fd: int | None = None) -> None:
        shown = _display(name)
        records = _records(text)
        if not records:
            raise Rejected("no event records")
        events: list[tuple[Event, str]] = []
        explicit: set[str] = set()
        for i, (lineno, rec) in enumerate(records):
            where = f"line {lineno}"
            layer = rec.get("layer", "documents") if isinstance(rec, dict) else "documents"
            if layer not in ("documents", "context"):
                raise Rejected(f"{where}: layer must be 'documents' or 'context', not {layer!r}")
            ev = event_from_record(rec, where, base_fd)
            if ev.id:
                check_name(ev.id, f"{where}: event id")
                if ev.id in explicit:
                    raise Rejected(f"{where}: event id {ev.id!r} appears twice in the file")
                explicit.add(ev.id)
            else:
                ev = msgspec.structs.replace(ev, id=f"e-i{digest[:32]}-{i}")
            events.append((ev, layer))
        stored = self.scan.event_ids if (resume and self.scan) else (
            _StoreScan(self.mem).event_ids if explicit else {})
        if not resume and (clash := sorted(explicit & stored.keys())):
            raise Rejected(f"event id {clash[0]!r} is already stored (in {stored[clash[0]]})")
        meta = _meta(digest, name)
        l2 = [ev for ev, layer in events if layer == "documents"]
        if l2 and not any(ev.id in stored for ev in l2):  # one unit: all of it or none
            uid = self.mem.commit_events(l2, summary=f"{shown} ({len(l2)} events)",
                                         source="inbox", meta=meta)
            self.published.append(("documents", uid))
        l1 = [ev for ev, layer in events if layer == "context" and ev.id not in stored]
        for ev in l1:  # like Memory.append: one L1 unit per event
            # "context": the watching agent's L1 (``--agent``; the default agent's context/)
            uid = self.mem.commit_events([ev], source=ev.source, meta=meta, layer=self.mem.l1)
            self.published.append((self.mem.l1, uid))
        if l1 and self.mem.auto_prune:
            self.mem.prune(query=" ".join(t for t in (l1[-1].input, l1[-1].response) if t))
        if not self.published:
            raise _Duplicate("the units written before a restart")

    # -- unit directories -------------------------------------------------------------------
    def _adopt(self, claim: str, name: str, out: Outcome, resume: bool) -> None:
        """Verify a dropped unit directory (every digest, from the bytes it copies) and
        publish the copy into documents/; nothing of the dropped inodes enters the store.
        A folder without manifest.json is a record folder (``_record_folder``)."""
        path = os.path.join(self.dirs.processing, claim)
        try:
            dfd = os.open(claim, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=self.dirs.proc_fd)
        except OSError as exc:
            raise Rejected(f"cannot open the directory ({exc.strerror})") from exc
        try:
            try:
                manifest = read_manifest(path, expect_id=name)
            except NotFound:
                if any(_ext(n) in _EVENT_EXT and not ignored_name(n) for n in os.listdir(dfd)):
                    out.kind = "records"
                    self._record_folder(dfd, name, out, resume)
                else:
                    out.kind = "notes"
                    self._notes_folder(dfd, name, out, resume)
                return
            if os.lstat(path).st_ino != os.fstat(dfd).st_ino:
                raise Rejected("the directory was replaced while being read")
            if manifest.format > FORMAT_VERSION:
                raise Rejected(f"manifest format {manifest.format} is newer than this fsmem "
                               f"reads ({FORMAT_VERSION})")
            self._check_adoptable(manifest, resume, events=True)
            self._publish_copy(dfd, manifest, out, resume)
        finally:
            os.close(dfd)
        self.published.append(("documents", name))

    def _record_folder(self, dfd: int, name: str, out: Outcome, resume: bool) -> None:
        """A dropped folder of event records (``*.jsonl``/``*.json``) and the files their
        ``path`` attachments name (bare names in this folder, opened with O_NOFOLLOW through
        the folder's fd). Each record file is ingested like a dropped one."""
        files = sorted(n for n in os.listdir(dfd) if _ext(n) in _EVENT_EXT and not ignored_name(n))
        if not files:
            raise Rejected("a directory with neither manifest.json (a unit) nor event records "
                           "(.jsonl/.json); archives and other folders are not taken")
        published: list[tuple[str, str]] = []
        for fname in files:
            fd = _open_regular(fname, dfd)
            try:
                data = _read_all(fd, min(self.size_cap, EVENTS_CAP))
            finally:
                os.close(fd)
            digest = hash_bytes(data)
            out.digest = out.digest or digest
            self.published = []
            try:
                self._check_seen(digest, resume)
                self._events(_utf8(data), f"{name}/{fname}", digest, resume, base_fd=dfd)
            except _Duplicate:
                if not resume:
                    raise
            published += self.published
            if self.published:
                self.ledger.add(digest, self.published[0][1])
        self.published = published
        if not published:
            raise _Duplicate("the units written before a restart")

    def _notes_folder(self, dfd: int, name: str, out: Outcome, resume: bool) -> None:
        """A dropped folder of notes and media (``fsmem.ingest.notes.take``): checked whole,
        then its new units published together; a unit whose key (its note's digest) was
        ingested before is not written again."""
        limits = notes.NotesLimits(file_size=self.size_cap, total=self.size_cap,
                                   note_size=min(self.size_cap, EVENTS_CAP))

        def seen(key: str) -> bool:
            try:
                self._check_seen(key, resume)
            except _Duplicate:
                return True
            return False
        rep = notes.take(self.mem, dfd, name, seen, limits=limits, op="watch-notes")
        out.size, out.skipped, out.reason = rep.size, rep.skipped, rep.summary()
        if not rep.imported:
            raise _Duplicate(f"the {rep.already} units stored before")
        out.digest = rep.keys[0]
        for key, uid in zip(rep.keys, rep.imported):
            self.ledger.add(key, uid)
            self.published.append(("documents", uid))

    def _publish_copy(self, dfd: int, manifest: Manifest, out: Outcome, resume: bool) -> None:
        store = self.mem.store
        builder = store.builder(manifest.id)
        try:
            out.size = self._copy_unit(dfd, manifest, builder)
            builder.finish(manifest)
            with store.locked():  # nobody may publish the same id in between
                self._check_adoptable(manifest, resume, events=False)
                store.publish(builder, "documents")
        except BaseException:
            shutil.rmtree(builder.path, ignore_errors=True)
            raise

    def _check_adoptable(self, manifest: Manifest, resume: bool, *, events: bool) -> None:
        """Duplicate if the id is stored with the same content; rejected if with other
        content, or if one of its events is already stored in another unit."""
        try:
            layer, path = self.mem.store.locate(manifest.id)
        except NotFound:
            layer = path = ""
        if path:
            try:
                same = _comparable(read_manifest(path)) == _comparable(manifest)
            except FsmemError:
                same = False
            if same:
                raise _Duplicate(f"{layer}/{manifest.id}")
            raise Rejected(f"unit {manifest.id} already exists in {layer}/ with other content")
        if not events:
            return
        stored = (self.scan if resume and self.scan else _StoreScan(self.mem)).event_ids
        for ev in manifest.events:
            if ev.id in stored:
                raise Rejected(f"event {ev.id} is already stored (in {stored[ev.id]})")

    def _copy_unit(self, dfd: int, manifest: Manifest, builder: UnitBuilder) -> int:
        expected, total = {MANIFEST}, 0
        for ev in manifest.events:
            for ref in ev.blocks:
                fname = block_filename(ref.digest, ref.mime)
                if fname in expected:
                    continue
                expected.add(fname)
                total += ref.size
                if total > self.size_cap:
                    raise Rejected(f"unit is over the size cap of {self.size_cap} bytes")
                fd = _open_regular(fname, dfd)
                try:
                    if os.fstat(fd).st_size != ref.size:
                        raise Rejected(f"block {fname}: size differs from the manifest")
                    got = builder.add_fd(fd, ref.mime, role=ref.role, created_at=ref.created_at,
                                         size_cap=ref.size)
                finally:
                    os.close(fd)
                if got.digest != ref.digest:
                    raise Rejected(f"block {fname}: bytes hash to {got.digest}")
        if manifest.vectors is not None:
            expected.add(VECTORS)
            manifest.vectors = self._copy_vectors(dfd, manifest, builder)
        for entry in sorted(os.listdir(dfd)):
            if entry not in expected:
                raise Rejected(f"unexpected entry {_display(entry)!r} in the unit directory")
        return total

    def _copy_vectors(self, dfd: int, manifest: Manifest,
                      builder: UnitBuilder) -> VectorsRef:
        ref = manifest.vectors
        assert ref is not None
        fd = _open_regular(VECTORS, dfd)
        try:
            data = _read_all(fd, self.size_cap)
        finally:
            os.close(fd)
        if hash_bytes(data) != ref.digest:
            raise Rejected(f"{VECTORS}: bytes do not match the digest in the manifest")
        try:
            mat = load_npy(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise Rejected(f"{VECTORS}: not a .npy array: {exc}") from exc
        if mat.shape != (len(ref.rows), ref.dim):
            raise Rejected(f"{VECTORS}: shape {mat.shape} != ({len(ref.rows)}, {ref.dim})")
        return builder.set_vectors(list(ref.rows), mat, ref.embedder)


def trim_term_memos(mem: Memory) -> None:
    """Empty each per-term memo table (the analyzer's stems and hashes, the embedder's word
    hashes) holding more than TERM_MEMO_MAX terms. They cap themselves only at a million
    entries (~100 MB apiece), which one huge file of distinct tokens (numbers, ids) fills:
    trimmed between parts, ingest memory stays flat in the file's size. They are speed
    memos, so emptying one costs only re-hashing."""
    analyze.trim_memos(TERM_MEMO_MAX)
    trim = getattr(mem.embedder, "trim_memos", None)
    if trim is not None:
        trim(TERM_MEMO_MAX)


def _open_regular(name: str, dir_fd: int) -> int:
    """Open a file of a dropped folder through the one safe open (layout.open_regular): no
    symlink, no FIFO, a regular file with one link (a second name could be a file outside
    the store, or change it under us); what it refuses is the folder's rejection reason."""
    try:
        return open_regular(name, dir_fd=dir_fd, one_link=True)
    except FileNotFoundError as exc:
        raise Rejected(f"{name}: missing") from exc
    except FormatError as exc:
        raise Rejected(f"{exc}; symlinks are never followed, only a regular file with one "
                       "name is taken") from exc
    except OSError as exc:
        raise Rejected(f"{name}: cannot open ({exc.strerror}); symlinks are never followed") \
            from exc


def _read_all(fd: int, cap: int) -> bytes:
    parts, size = [], 0
    while chunk := os.read(fd, CHUNK):
        size += len(chunk)
        if size > cap:
            raise Rejected(f"over the size cap of {cap} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _hash_fd(fd: int, cap: int) -> tuple[str, int]:
    try:
        return hash_fd(fd, cap)
    except FormatError as exc:
        raise Rejected(str(exc)) from None


def _scan_text(fd: int, cap: int, whole: bytes | None = None) -> tuple[str, int, str]:
    """One bounded pass over a text file: its BLAKE3, size and title, checking that it is
    UTF-8 without NUL bytes (so a rejection comes before anything is stored). ``whole``:
    the file's bytes, already read (then ``fd`` is not read)."""
    if whole and len(whole) <= cap and b"\x00" not in whole:
        try:   # a small file, already read: one decode (an error: the pass below says where)
            text = whole.decode("utf-8-sig")
        except UnicodeDecodeError:
            pass
        else:
            return blake3.blake3(whole).hexdigest(), len(whole), notes.heading(text[:65536])
    hasher, size = blake3.blake3(), 0
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    head = ""
    if whole is None:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks: Iterable[bytes] = iter(lambda: os.read(fd, CHUNK), b"")
    else:
        chunks = [whole]
    for chunk in chunks:
        if size + len(chunk) > cap:
            raise Rejected(f"over the size cap of {cap} bytes")
        if b"\x00" in chunk:
            raise Rejected("contains NUL bytes: not a text file")
        try:
            text = decoder.decode(chunk)
        except UnicodeDecodeError as exc:
            raise Rejected(f"not UTF-8 text (invalid byte at offset {size + exc.start})") \
                from exc
        if len(head) < 65536:
            head += text[:65536]
        size += len(chunk)
        hasher.update(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise Rejected(f"not UTF-8 text (truncated character at offset {size})") from exc
    if size == 0:
        raise Rejected("empty file: nothing to store")
    return hasher.hexdigest(), size, notes.heading(head)


def _text_windows(fd: int, part: int, hasher: Any) -> Iterator[bytes]:
    """The file's bytes in pieces of at most ``part`` bytes, each ending at a blank line, else
    a line end, else a UTF-8 character boundary; together exactly the file (fed to
    ``hasher`` as read, so the caller can tell the file did not change since it was scanned)."""
    os.lseek(fd, 0, os.SEEK_SET)
    buf = b""
    while True:
        while len(buf) <= part and (more := os.read(fd, part + 1 - len(buf))):
            hasher.update(more)
            buf += more
        if len(buf) <= part:  # end of file
            if buf:
                yield buf
            return
        cut = buf.rfind(b"\n\n", 0, part - 1) + 2
        if cut < part // 4 + 2:
            cut = buf.rfind(b"\n", 0, part) + 1
        if cut < part // 4 + 1:
            cut = part
            while cut > 0 and buf[cut] & 0xC0 == 0x80:  # never inside a character
                cut -= 1
        piece, buf = buf[:cut], buf[cut:]
        yield piece


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Rejected(f"not UTF-8 text (invalid byte at offset {exc.start})") from exc


def _meta(digest: str, name: str) -> dict[str, str]:
    return {"inbox_digest": digest, "inbox_name": _display(name)}


def _comparable(m: Manifest) -> tuple:
    """A manifest without what changes by use or by re-encoding (access stats, vectors)."""
    return (m.id, m.created_at.isoformat(), encode(m.events),
            m.summary, m.tags, m.entities, m.source, m.meta)


def _records(text: str) -> list[tuple[int, Any]]:
    """JSON Lines, or one JSON object or array (as fsmem.format.event_json reads them), with line
    numbers."""
    stripped = text.strip()
    if stripped.startswith("["):
        return [(1, r) for r in _decode(stripped, "")]
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append((lineno, _decode(line, f"line {lineno}: ")))
        except Rejected:
            if lineno == 1 or not records:
                try:  # one pretty-printed object
                    return [(1, _decode(stripped, ""))]
                except Rejected:
                    pass
            raise
    return records


def _decode(text: str, where: str) -> Any:
    """One JSON value; Rejected names the line and what is wrong (nesting past msgspec's
    depth limit is "nested too deeply", never an internal error)."""
    try:
        return decode_json(text, where)
    except FormatError as exc:
        raise Rejected(str(exc)) from exc


# -- the daemon -----------------------------------------------------------------------------
