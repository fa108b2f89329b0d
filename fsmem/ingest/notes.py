"""A dropped folder of notes (an Obsidian vault, a Notion export): ``.md``/``.markdown``/``.txt``
notes and media files, in sub-folders at most ``NotesLimits.depth`` deep, read as hostile input.

``scan`` walks the folder through directory descriptors (``O_NOFOLLOW`` at every level) and
checks all of it before anything is stored: every file opened through the safe-open helper
(``fsmem.format.layout.open_regular``: no symlink, no FIFO, one link, a size cap), every note
UTF-8 without NUL bytes, at most ``files`` files and ``total`` bytes. One bad entry (a symlink,
a FIFO or device, a non-UTF-8 note, a file type that is neither a note nor recognised media,
too deep, too many) rejects the whole folder with a FormatError naming it by its path in the
folder. Hidden entries (``.obsidian/``, ``.DS_Store``, ``.git/``), temp names (``x.tmp``,
``x~``) and empty notes are skipped and listed in ``NotesPlan.skipped``.

Each note becomes one L2 unit holding one event: the note's bytes as its input text block,
exactly (a BOM is kept), and as attachment blocks the media files the note embeds
(``![alt](rel/path.png)``, ``![[file.png]]``); a media file no note embeds becomes a unit of
its own. A unit's time (its ``created_at`` and its event's) is the file's mtime; its summary
the note's first Markdown heading, else the file name without extension; ``meta.note_path``
keeps the path in the folder. ``stage`` builds every unit in staging, ``publish`` makes them
appear together through one journal entry, so a crash never leaves half a folder.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import unquote

import blake3
import msgspec

from fsmem.format import fsops as fsops
from fsmem.format.blocks import hash_fd
from fsmem.format.errors import FormatError, FsmemError
from fsmem.format.layout import open_regular, read_fd
from fsmem.format.media import sniff_mime
from fsmem.format.model import Event, MediaAttachment
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import read_manifest
from fsmem.ingest.inbox_dirs import _display, ignored_name, special_reason
from fsmem.memory.writer import check_strings
from fsmem.store.store import JournalEntry, new_unit_id

__all__ = ["NotesLimits", "NoteFile", "NoteUnit", "NotesPlan", "NotesReport", "scan", "stage",
           "publish", "discard", "take", "import_notes", "title", "NOTE_EXT"]

NOTE_EXT = {".md", ".markdown", ".txt"}
_MEDIA_NAMED = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".wav", ".mp3", ".ogg", ".oga",
                ".mp4", ".m4a", ".pdf"}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$")
_MD_IMAGE = re.compile(r"!\[[^\]\n]*\]\(\s*(<[^>\n]*>|[^)\s]+)(?:\s+[\"'(][^\n]*?[\"')])?\s*\)")
_WIKI_EMBED = re.compile(r"!\[\[([^\]\n|#]+)(?:[#|][^\]\n]*)?\]\]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class NotesLimits:
    """What one dropped notes folder may hold: sub-folders ``depth`` deep, ``files`` notes and
    media files, ``entries`` names listed in all, ``note_size`` bytes per note (held in memory
    whole), ``file_size`` per media file, ``total`` bytes in all."""

    depth: int = 8
    files: int = 10_000
    entries: int = 50_000
    note_size: int = 32 << 20
    file_size: int = 1 << 30
    total: int = 1 << 30


@dataclass
class NoteFile:
    """One checked file of the folder: a note (its bytes in ``data``) or a media file."""

    rel: str
    kind: str            # "note" | "media"
    size: int
    mtime_ns: int
    digest: str
    mime: str = ""
    data: bytes = b""


@dataclass
class NoteUnit:
    """One unit to write: a note with the media it embeds, or a media file alone. ``key`` is
    the digest its ingest is known by (the note's bytes, or with embedded media a digest of
    the note's and theirs; a lone media file's own)."""

    key: str
    main: NoteFile
    media: list[NoteFile] = field(default_factory=list)


@dataclass
class NotesPlan:
    """What ``scan`` found: the units, the entries skipped, the embeds that name no file."""

    units: list[NoteUnit]
    skipped: list[str]
    missing: list[str]
    total: int
    notes: int = 0
    media: int = 0


class _Walk:
    def __init__(self, limits: NotesLimits) -> None:
        self.limits = limits
        self.entries = 0
        self.count = 0
        self.files: list[NoteFile] = []
        self.skipped: list[str] = []
        self.total = 0


def scan(dfd: int, limits: NotesLimits = NotesLimits()) -> NotesPlan:
    """Check the whole folder open as ``dfd`` and plan its units (see the module docstring);
    FormatError naming the first bad entry, with nothing read into the store."""
    w = _Walk(limits)
    _walk(dfd, "", 0, w)
    notes = [f for f in w.files if f.kind == "note"]
    media = {f.rel: f for f in w.files if f.kind == "media"}
    if not notes and not media:
        raise FormatError("a folder with neither manifest.json (a unit), event records "
                          "(.jsonl/.json) nor notes (.md/.txt) or images; nothing to take")
    by_name: dict[str, list[str]] = {}
    for rel in sorted(media):
        by_name.setdefault(posixpath.basename(rel).lower(), []).append(rel)
    units: list[NoteUnit] = []
    embedded: set[str] = set()
    missing: list[str] = []
    for note in notes:
        refs = _embeds(note, media, by_name, missing)
        embedded.update(refs)
        atts = [media[r] for r in refs]
        key = note.digest if not atts else blake3.blake3(
            ("note\0" + note.digest + "".join(m.digest for m in atts)).encode()).hexdigest()
        units.append(NoteUnit(key=key, main=note, media=atts))
    inside = {media[r].digest for r in embedded}   # bytes a note's unit holds already
    units += [NoteUnit(key=m.digest, main=m) for rel, m in sorted(media.items())
              if rel not in embedded and m.digest not in inside]
    seen: set[str] = set()
    unique = []
    for u in units:   # the same bytes twice in one folder: one unit
        if u.key not in seen:
            seen.add(u.key)
            unique.append(u)
    return NotesPlan(units=unique, skipped=w.skipped, missing=missing, total=w.total,
                     notes=len(notes), media=len(media))


def _walk(dfd: int, prefix: str, level: int, w: _Walk) -> None:
    names = sorted(os.listdir(dfd))
    w.entries += len(names)
    if w.entries > w.limits.entries:
        raise FormatError(f"{_display(prefix) or '.'}: more than {w.limits.entries} entries "
                          "in the folder")
    for n in names:
        rel = prefix + n
        shown = _display(rel)
        try:
            st = os.lstat(n, dir_fd=dfd)
        except FileNotFoundError as exc:
            raise FormatError(f"{shown}: vanished while the folder was read") from exc
        if ignored_name(n):   # hidden or still being written: never taken, never entered
            w.skipped.append(rel + ("/" if stat.S_ISDIR(st.st_mode) else ""))
            continue
        if stat.S_ISLNK(st.st_mode):
            raise FormatError(f"{shown}: a symbolic link (never followed)")
        if stat.S_ISDIR(st.st_mode):
            if level + 1 > w.limits.depth:
                raise FormatError(f"{shown}: folders nested deeper than {w.limits.depth}")
            try:
                sub = os.open(n, _DIR_FLAGS, dir_fd=dfd)
            except OSError as exc:
                raise FormatError(f"{shown}: cannot open the folder ({exc.strerror})") from exc
            try:
                _walk(sub, rel + "/", level + 1, w)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            w.count += 1   # empty ones too: the cap bounds the opens
            if w.count > w.limits.files:
                raise FormatError(f"{shown}: more than {w.limits.files} files in the folder")
            got = _read_file(dfd, n, rel, w.limits)
            if got is None:
                w.skipped.append(rel)
                continue
            w.total += got.size
            if w.total > w.limits.total:
                raise FormatError(f"{shown}: the folder is over the size cap of "
                                  f"{w.limits.total} bytes")
            w.files.append(got)
        else:
            raise FormatError(f"{shown}: {special_reason(st.st_mode)}")


def _open(dfd: int, name: str, rel: str, cap: int) -> int:
    """``name`` in ``dfd`` through the safe-open helper; errors name ``rel``."""
    try:
        return open_regular(name, dir_fd=dfd, cap=cap, one_link=True)
    except FormatError as exc:
        text = str(exc)
        raise FormatError(f"{_display(rel)}: {text.split(': ', 1)[-1]}") from exc
    except FileNotFoundError as exc:
        raise FormatError(f"{_display(rel)}: vanished while the folder was read") from exc
    except OSError as exc:
        raise FormatError(f"{_display(rel)}: cannot open ({exc.strerror})") from exc


def _read_file(dfd: int, name: str, rel: str, limits: NotesLimits) -> NoteFile | None:
    """One file checked: a note read whole, media hashed; None for an empty note."""
    shown = _display(rel)
    ext = posixpath.splitext(name)[1].lower()
    fd = _open(dfd, name, rel, max(limits.note_size, limits.file_size))
    try:
        st = os.fstat(fd)
        head = os.pread(fd, 64, 0)
        mime = sniff_mime(head)
        if mime:   # media is recognised by content, as a dropped file is
            if st.st_size > limits.file_size:
                raise FormatError(f"{shown}: {st.st_size} bytes, over the cap of "
                                  f"{limits.file_size}")
            digest, size = hash_fd(fd, limits.file_size, shown)
            return NoteFile(rel=rel, kind="media", size=size, mtime_ns=st.st_mtime_ns,
                            digest=digest, mime=mime)
        if ext in _MEDIA_NAMED:
            raise FormatError(f"{shown}: named like media, but its content is not "
                              "(media is recognised by content)")
        if ext not in NOTE_EXT:
            raise FormatError(f"{shown}: unsupported type ({ext or 'no extension'}): a notes "
                              "folder takes .md/.markdown/.txt notes and png, jpeg, gif, webp "
                              "images (and the audio, video and pdf files the inbox takes)")
        if st.st_size > limits.note_size:
            raise FormatError(f"{shown}: {st.st_size} bytes, over the cap of "
                              f"{limits.note_size} for a note")
        data = read_fd(fd, limits.note_size, shown)
    finally:
        os.close(fd)
    if not data:
        return None
    if b"\x00" in data:
        raise FormatError(f"{shown}: contains NUL bytes: not a text file")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{shown}: not UTF-8 text (invalid byte at offset {exc.start})") \
            from exc
    return NoteFile(rel=rel, kind="note", size=len(data), mtime_ns=st.st_mtime_ns,
                    digest=blake3.blake3(data).hexdigest(), data=data)


def _embeds(note: NoteFile, media: dict[str, NoteFile], by_name: dict[str, list[str]],
            missing: list[str]) -> list[str]:
    """The media files a note embeds, in order of first embed: ``![alt](path)`` relative to
    the note (or to the folder), ``![[name]]`` by path or, Obsidian's way, by file name
    anywhere in the folder. An embed that names no file of the folder (a URL, a path out of
    it, a file not there) is listed in ``missing`` and otherwise ignored."""
    text = note.data.decode("utf-8")
    here = posixpath.dirname(note.rel)
    found: list[str] = []
    for m in re.finditer(f"{_MD_IMAGE.pattern}|{_WIKI_EMBED.pattern}", text):
        raw = m.group(1) if m.group(1) is not None else m.group(2)
        wiki = m.group(1) is None
        target = raw.strip()
        if not wiki:
            target = target.strip("<>")
            if _SCHEME.match(target):
                continue   # a URL: not part of the folder
            target = unquote(target.split("#", 1)[0].split("?", 1)[0])
        rel = _resolve(target, here, media, by_name, wiki)
        if rel is None:
            missing.append(f"{_display(note.rel)}: {_display(raw.strip())}")
        elif rel not in found:
            found.append(rel)
    return found


def _resolve(target: str, here: str, media: dict[str, NoteFile],
             by_name: dict[str, list[str]], wiki: bool) -> str | None:
    for base in (here, ""):
        rel = posixpath.normpath(posixpath.join(base, target.lstrip("/")))
        if not rel.startswith("..") and rel in media:
            return rel
    if wiki and "/" not in target:
        hits = by_name.get(target.lower())
        return hits[0] if hits else None
    return None


def heading(text: str) -> str:
    """The first Markdown heading of a text (ATX ``# x``, or setext ``x`` over ``===`` or
    ``---``) in its first 200 lines, else "": a dropped file's or a note's summary."""
    lines = text.splitlines()[:200]
    for i, line in enumerate(lines):
        if m := _HEADING.match(line):
            return m.group(1).strip()[:200]
        if line.strip() and i + 1 < len(lines) and re.fullmatch(r" {0,3}(=+|-+)\s*",
                                                                lines[i + 1]):
            return line.strip()[:200]
    return ""


def title(data: bytes, rel: str) -> str:
    """A note's summary: its first Markdown heading, else its file name without extension."""
    return heading(data[:65536].decode("utf-8", "replace").lstrip("\ufeff")) \
        or posixpath.splitext(posixpath.basename(_display(rel)))[0][:200]


def _read_media(dfd: int, f: NoteFile, limits: NotesLimits) -> bytes:
    """A media file's bytes, opened again path component by path component (never through a
    link); FormatError if they are not the bytes ``scan`` hashed."""
    parts = f.rel.split("/")
    fds: list[int] = []
    try:
        cur = dfd
        for part in parts[:-1]:
            try:
                cur = os.open(part, _DIR_FLAGS, dir_fd=cur)
            except OSError as exc:
                raise FormatError(f"{_display(f.rel)}: changed while being stored") from exc
            fds.append(cur)
        fd = _open(cur, parts[-1], f.rel, limits.file_size)
        try:
            data = read_fd(fd, limits.file_size, _display(f.rel))
        finally:
            os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)
    if blake3.blake3(data).hexdigest() != f.digest:
        raise FormatError(f"{_display(f.rel)}: changed while the folder was being stored")
    return data


def stage(mem: Any, dfd: int, units: list[NoteUnit], meta: dict[str, str],
          limits: NotesLimits = NotesLimits()) -> list[tuple[str, str, list[str]]]:
    """Build ``units`` in staging, none published: [(staging path, unit id, texts to embed
    later)]. ``meta`` goes into every unit's manifest beside ``inbox_digest`` (the unit's key)
    and ``note_path``. On failure every staged unit is removed."""
    staged: list[tuple[str, str, list[str]]] = []
    try:
        for u in units:
            ts = Timestamp(u.main.mtime_ns)
            shown = _display(u.main.rel)
            if u.main.kind == "note":
                text, summary = u.main.data.decode("utf-8"), title(u.main.data, u.main.rel)
                files = u.media
            else:
                text, summary, files = shown, posixpath.basename(shown), [u.main]
            check_strings(summary=summary)

            def fill(builder: Any, u: NoteUnit = u, text: str = text, files: list = files,
                     ts: Timestamp = ts) -> tuple[list, list]:
                atts = [MediaAttachment(data=_read_media(dfd, f, limits), mime=f.mime,
                                        name=posixpath.basename(_display(f.rel)))
                        for f in files]
                ev = Event(id=f"e-i{u.key[:32]}-0", timestamp=ts, source="inbox", input=text,
                           attachments=atts)
                rec, texts = mem._write_event(builder, ev, [])
                return [rec], texts
            fields = {"created_at": ts, "summary": summary, "source": "inbox",
                      "meta": {**meta, "inbox_digest": u.key, "note_path": shown}}
            builder, _manifest, texts = mem._stage_unit(fill, None, fields)
            staged.append((builder.path, builder.unit_id, [t for _k, t in texts]))
    except BaseException:
        discard(staged)
        raise
    return staged


def discard(staged: list[tuple[str, str, list[str]]]) -> None:
    """Remove staged units that will not be published."""
    import shutil  # lazy: start-up, loaded only when used
    for path, _uid, _texts in staged:
        shutil.rmtree(path, ignore_errors=True)


def publish(mem: Any, staged: list[tuple[str, str, list[str]]], op: str,
            indexed: Callable[[str], None] | None = None) -> list[str]:
    """Publish staged units into documents/ together (one journal entry: after a crash all
    of them appear or none), then index them; returns their ids."""
    store = mem.store
    entry = JournalEntry(id=new_unit_id("j"), op=op, created_at=Timestamp.now(),
                         publish=[(os.path.basename(p), "documents", uid) for p, uid, _ in staged])
    try:   # as fsmem.ingest.archive.publish_staged (the watch does not know the archive)
        with store.locked():
            if store.sync and store.sync_strategy == "syncfs":
                fsops.syncfs(store.staging)
            store.journal_commit(entry)
            store.journal_apply(entry)
    except BaseException:
        discard(staged)
        raise
    ids = []
    for _path, uid, texts in staged:
        mem._indexed(uid, "documents", added=True)
        filler = getattr(mem, "_filler", None)
        if filler is not None:
            filler.submit(uid, texts)
        ids.append(uid)
    return ids


class NotesReport(msgspec.Struct, kw_only=True):
    """What taking one notes folder did: the units written, how many were stored before,
    the entries skipped (hidden, temporary, empty) and the embeds that name no file."""

    imported: list[str] = []
    notes: int = 0
    media: int = 0
    already: int = 0
    size: int = 0
    skipped: list[str] = []
    missing: list[str] = []
    keys: list[str] = []   # of ``imported``, in order: the digest each unit is known by

    def summary(self) -> str:
        said = [f"{self.notes} notes, {self.media} media files"]
        if self.already:
            said.append(f"{self.already} already stored")
        if self.skipped:
            said.append(f"skipped {len(self.skipped)} hidden, temporary or empty")
        if self.missing:
            said.append(f"{len(self.missing)} embeds name no file of the folder")
        return "; ".join(said)

    def lines(self) -> list[str]:
        """The human report (``fsmem import``): a summary line, then each skip and miss."""
        return [f"imported {len(self.imported)} units ({self.summary()})",
                *(f"skipped: {s}" for s in self.skipped),
                *(f"embed names no file: {m}" for m in self.missing)]


def take(mem: Any, dfd: int, name: str, seen: Callable[[str], bool], *,
         limits: NotesLimits = NotesLimits(), op: str = "notes") -> NotesReport:
    """The notes folder open as ``dfd`` (called ``name``) into documents/, all or nothing:
    checked whole (``scan``), every unit whose key ``seen`` does not know staged, then all
    published in one journal entry. Nothing new (every key seen): ``imported`` is empty."""
    plan = scan(dfd, limits)
    todo = [u for u in plan.units if not seen(u.key)]
    rep = NotesReport(notes=plan.notes, media=plan.media, size=plan.total,
                      already=len(plan.units) - len(todo), skipped=plan.skipped,
                      missing=plan.missing)
    if todo:
        with mem.store.locked():   # the journal entry and the index see the same store
            staged = stage(mem, dfd, todo, {"inbox_name": _display(name)}, limits)
            rep.imported = publish(mem, staged, op)
        rep.keys = [u.key for u in todo]
    return rep


def import_notes(mem: Any, path: str, *, limits: NotesLimits = NotesLimits()) -> NotesReport:
    """``fsmem import DIR``: a notes folder as the watch takes one from the inbox, known
    keys (``meta.inbox_digest`` of every stored unit) not written again."""
    try:
        dfd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        why = "a symbolic link (never followed)" if os.path.islink(path) else exc.strerror
        raise FormatError(f"{path}: cannot open the folder ({why})") from exc
    try:
        known = _stored_keys(mem)
        try:
            return take(mem, dfd, os.path.basename(os.path.normpath(path)), known.__contains__,
                        limits=limits, op="import-notes")
        except FormatError as exc:
            raise FormatError(f"{path}: {exc}") from exc
    finally:
        os.close(dfd)


def _stored_keys(mem: Any) -> set[str]:
    """The inbox digests recorded in the store's units (the keys a notes folder's units are
    known by)."""
    keys = set()
    for layer in mem.store.layers():
        for uid in mem.store.iter_units(layer):
            try:
                m = read_manifest(mem.store.unit_dir(layer, uid))
            except (FsmemError, OSError):
                continue
            if key := m.meta.get("inbox_digest"):
                keys.add(key)
    return keys
