"""HomeAgent's memory directory, read in place through one logged fallback path.

Legacy documents (``documents/*.json``, versions v1 content-only, v2 ``media`` sha256 digests,
v3 ``blocks`` with ``payload_digest``), the media store (``media/blobs/ab/cdef…`` with its
``media.db``) are read here; ``context.json`` adoption is fsmem.homeagent.context.

Every field is either kept or its loss logged by name (docs/FORMAT.md, "HomeAgent fields").
A legacy document served through the fallback is counted, named once per process at INFO
(``fsmem -v``) and (where a writer made the file) recorded once per store in
``.fsmem/legacy-reported``; a command prints one summary line (``summary_line``), never a
warning per document (the list: ``fsmem stats --legacy``, fsmem.homeagent.report).
Nothing legacy is changed by a read: a recalled or removed legacy document is moved aside into
``.fsmem/legacy-recalled/`` or ``.fsmem/legacy-removed/``, never deleted. The index reads a
document through ``fsmem.homeagent.index_view`` (its text, without decoding its vectors; this
reader for anything that view cannot vouch for).
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from fsmem.format.blocks import DIGEST_RE
from fsmem.format.errors import FormatError, FsmemError, NotFound
from fsmem.format.layout import read_small
from fsmem.format.media import modality_of, sniff_mime
from fsmem.format.model import NAME_RE, BlockRef, Event, EventRecord
from fsmem.format.timestamps import Timestamp

if TYPE_CHECKING:   # hashlib, json and sqlite3 load where legacy content is read (CLI start-up)
    import sqlite3

    from fsmem.format.layout import Layout
    from fsmem.format.plugins import Plugins
    from fsmem.format.views import Document
    from fsmem.store.access import AccessLog
    from fsmem.store.store import Store

__all__ = ["LegacyDoc", "LegacyMedia", "legacy_doc_files", "read_legacy", "legacy_id",
           "blob_path", "recall_legacy", "find_legacy_blob", "legacy_texts",
           "cleanup_recalled", "convert_cold_legacy", "legacy_document", "legacy_file_of",
           "remove_legacy", "media_info", "allow_record", "summary_line", "legacy_counts",
           "NO_ID", "decode_json",
           "find_legacy_block", "block_ref", "read_blob", "unread_files", "ZERO_NS",
           "sqlite_readonly", "report_unreadable", "report_served", "read_bytes",
           "searched_texts", "Sink"]

log = logging.getLogger("fsmem.legacy")


class Sink(Protocol):
    """What a conversion of HomeAgent data into units writes through (a ``Memory`` is one):
    the store whose writer lock it runs under, the access log, the compute-layer declarations
    and ``write_unit`` (stage, fill, publish)."""

    root: str
    layout: "Layout"
    store: "Store"
    access: "AccessLog"
    plugins: "Plugins"

    def write_unit(self, layer: str, fill: Callable[[Any], tuple[list, list]], *,
                   unit_id: str | None = None, **manifest_fields: object) -> str: ...


_logged: set[tuple[str, str]] = set()          # (store root, file) reported by this process
_served: dict[str, set[str]] = {}              # store root -> files served this process
_recorded: dict[str, set[str]] = {}            # store root -> files named in legacy-reported
_unreadable: dict[str, set[str]] = {}          # store root -> JSON files found unreadable
_not_documents: dict[str, set[str]] = {}       # store root -> JSON files without an 'id'
NO_ID = "not a HomeAgent document (no 'id')"
_HEX64 = DIGEST_RE   # a sha256 as HomeAgent's media store names blobs: 64 lowercase hex
_ZERO = "0001-01-01T00:00:00Z"
ZERO_NS = -62135596800_000000000               # Go's zero time
RECORD = "legacy-reported"
_DOC_KEYS = {"id", "summary", "content", "tags", "entities", "created_at", "updated_at",
             "source", "meta", "access_count", "last_access", "media", "blocks", "vector",
             "dense_vec", "dense_fp"}
_BLOCK_KEYS = {"id", "modality", "text", "payload_digest", "mime", "size", "width", "height",
               "vector", "fingerprint", "source", "tool", "scene", "semantic_type",
               "created_at", "updated_at"}


@dataclass
class LegacyMedia:
    """A block of a legacy document or event (v3 MemoryBlock, or a v2 digest): every field."""

    sha256: str
    mime: str = ""
    size: int = 0
    width: int | None = None
    height: int | None = None
    created_at: Timestamp | None = None
    text: str = ""              # a v3 text block carries its text inline
    legacy_id: str = ""
    modality: str = ""
    vector: list[float] = field(default_factory=list)
    fingerprint: str = ""
    source: str = ""
    tool: str = ""
    scene: str = ""
    semantic_type: str = ""
    updated_at: Timestamp | None = None
    payload: bool = True        # False: a v3 block with neither payload_digest nor text (its
                                # vector and fields are all it has: kept as an empty block)


@dataclass
class LegacyDoc:
    """One HomeAgent document as the fallback reader sees it."""

    id: str
    version: str
    path: str
    summary: str = ""
    content: str = ""
    tags: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    source: str = ""
    meta: dict[str, str] = field(default_factory=dict)
    created_at: Timestamp = field(default_factory=lambda: Timestamp.parse(_ZERO))
    updated_at: Timestamp = field(default_factory=lambda: Timestamp.parse(_ZERO))
    access_count: int = 0
    last_access: Timestamp | None = None
    media: list[LegacyMedia] = field(default_factory=list)
    not_kept: list[str] = field(default_factory=list)   # fields dropped, by name and why


def legacy_id(filename: str) -> str:
    """The unit id a legacy file is known by: its name without ``.json`` when that is a valid
    id (HomeAgent names files ``<doc.id>.json``), else a stable hash of the name."""
    import hashlib  # lazy: start-up, loaded only when used (+hashlib)
    stem = filename[:-5] if filename.endswith(".json") else filename
    if NAME_RE.match(stem):
        return stem
    return "legacy-" + hashlib.sha256(filename.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def legacy_doc_files(root: str) -> list[tuple[str, int]]:
    """(file name, inode) of every regular ``documents/*.json`` file."""
    base = os.path.join(root, "documents")
    out = []
    try:
        with os.scandir(base) as it:
            for e in it:
                if e.name.endswith(".json") and e.is_file(follow_symlinks=False):
                    out.append((e.name, e.inode()))
    except FileNotFoundError:
        pass
    return sorted(out)


def legacy_file_of(root: str, unit_id: str) -> str | None:
    """The ``documents/*.json`` file a legacy id names (its own name first; a version id
    ``<id>-h<12 hex>``: the file whose bytes hash to it), or None."""
    if NAME_RE.match(unit_id) and os.path.isfile(os.path.join(root, "documents",
                                                              unit_id + ".json")):
        return unit_id + ".json"
    head, sep, tail = unit_id.rpartition("-h")
    for name, _ in legacy_doc_files(root):
        if legacy_id(name) == unit_id:
            return name
        if sep and len(tail) == 12 and legacy_id(name)[:110] == head:
            try:
                if version_id(name, file_digest(os.path.join(root, "documents", name))) \
                        == unit_id:
                    return name
            except (FormatError, OSError):
                continue
    return None


def _ts(value: Any, where: str) -> Timestamp:
    if value in (None, ""):
        return Timestamp.parse(_ZERO)
    return Timestamp.parse(value, field=where)


def _strs(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FormatError(f"{where}: expected a list of strings or null")
    return list(value)


def _floats(value: Any, where: str) -> list[float]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) for v in value):
        raise FormatError(f"{where}: expected a list of numbers or null")
    return [float(v) for v in value]


def _media_of_block(b: Any, where: str, dropped: list[str]) -> LegacyMedia | None:
    """A v3 MemoryBlock, every field kept (a block with neither a payload digest nor text,
    a vector-only block, is kept too: ``payload`` False)."""
    if not isinstance(b, dict):
        raise FormatError(f"{where}: a block must be an object")
    digest = str(b.get("payload_digest") or "").lower()
    text = str(b.get("text") or "")
    bid = str(b.get("id") or "")
    for key in sorted(set(b) - _BLOCK_KEYS):
        dropped.append(f"{where}.{key} (unknown field)")
    payload = bool(digest or text)

    def field_of(read: Callable[[Any, str], Any], key: str, empty: Any) -> Any:
        """A block without payload never made a document unreadable (fsmem skipped it
        before reading its fields, and still indexes nothing of it): a field of it that
        does not decode is left out, by name, and the block kept."""
        if b.get(key) in (None, ""):
            return empty if key != "created_at" else read(None, f"{where}.{key}")
        try:
            return read(b.get(key), f"{where}.{key}")
        except FormatError as exc:
            if payload:
                raise
            dropped.append(f"block {bid or where}: {key} ({exc}): left out")
            return empty
    return LegacyMedia(
        payload=payload,
        sha256=digest, mime=str(b.get("mime") or ""), size=int(b.get("size") or 0),
        width=b.get("width") or None, height=b.get("height") or None,
        created_at=field_of(_ts, "created_at", None),
        text=text if not digest else "", legacy_id=bid, modality=str(b.get("modality") or ""),
        vector=field_of(_floats, "vector", []),
        fingerprint=str(b.get("fingerprint") or ""), source=str(b.get("source") or ""),
        tool=str(b.get("tool") or ""), scene=str(b.get("scene") or ""),
        semantic_type=str(b.get("semantic_type") or ""),
        updated_at=field_of(_ts, "updated_at", None))


def read_bytes(path: str) -> bytes:
    """The bytes of a HomeAgent JSON file: a regular file (no symlink, no FIFO) under 256 MB."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(f"{path}: not a regular file")
        if st.st_size > 256 << 20:
            raise FormatError(f"{path}: {st.st_size} bytes, too large for a legacy file")
        parts = []   # to the end, as it is now (it may have grown since the fstat)
        while chunk := os.read(fd, max(st.st_size + 1, 1 << 16)):
            parts.append(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def decode_json(path: str, raw: bytes) -> Any:
    """``raw`` as JSON; FormatError naming ``path`` and the decoder's error."""
    import json  # lazy: start-up, loaded only when used (+json)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{path}: undecodable legacy document: {exc}") from exc


def _read_json(path: str) -> Any:
    return decode_json(path, read_bytes(path))


def read_legacy(path: str, raw: bytes | None = None, *, data: Any = None) -> LegacyDoc:
    """The one fallback reader of HomeAgent documents (v1, v2, v3); reported once per store.
    ``raw``: the file's bytes, when the caller has read them already; ``data``: its JSON,
    when the caller has decoded it already."""
    if data is None:
        data = decode_json(path, read_bytes(path) if raw is None else raw)
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
        raise FormatError(f"{path}: {NO_ID}")
    version = ("v3" if "blocks" in data or "dense_fp" in data else
               "v2" if "media" in data or "vector" in data or "dense_vec" in data else "v1")
    media: list[LegacyMedia] = []
    dropped: list[str] = [f"{k} (unknown field)" for k in sorted(set(data) - _DOC_KEYS)]
    for d in data.get("media") or []:
        if isinstance(d, str) and d:
            media.append(LegacyMedia(sha256=d.lower()))
    for i, b in enumerate(data.get("blocks") or []):
        m = _media_of_block(b, f"blocks[{i}]", dropped)
        if m is not None:
            media.append(m)
    if data.get("vector"):
        dropped.append(f"vector ({len(data['vector'])} sparse features: derived, recomputed)")
    if data.get("dense_vec"):
        dropped.append(f"dense_vec ({len(data['dense_vec'])} floats, fingerprint "
                       f"{data.get('dense_fp') or 'none'}: derived, recomputed)")
    meta = data.get("meta") or {}
    doc = LegacyDoc(
        id=data["id"], version=version, path=path, summary=str(data.get("summary") or ""),
        content=str(data.get("content") or ""), tags=_strs(data.get("tags"), f"{path}: tags"),
        entities=_strs(data.get("entities"), f"{path}: entities"),
        source=str(data.get("source") or ""),
        meta={str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {},
        created_at=_ts(data.get("created_at"), f"{path}: created_at"),
        updated_at=_ts(data.get("updated_at"), f"{path}: updated_at"),
        access_count=int(data.get("access_count") or 0),
        last_access=_ts(data.get("last_access"), f"{path}: last_access")
        if data.get("last_access") else None, media=media, not_kept=dropped)
    report_served(path, doc.id, doc.version)
    return doc


# -- reporting: once per document per store ---------------------------------------------------

def _store_of(path: str) -> tuple[str, str]:
    docs = os.path.dirname(os.path.realpath(path))
    return os.path.dirname(docs), os.path.basename(path)


_real_dirs: dict[str, str] = {}   # a documents/ path as named -> its real path (this process)


def _store_of_read(path: str) -> tuple[str, str]:
    """``_store_of`` of a file just opened without following a symlink: the real path of its
    directory, resolved once per process (a thousand documents, not a thousand realpaths)."""
    base, name = os.path.split(path)
    docs = _real_dirs.get(base)
    if docs is None:
        if len(_real_dirs) > 256:
            _real_dirs.clear()
        docs = _real_dirs[base] = os.path.realpath(base)
    return os.path.dirname(docs), name


def allow_record(root: str) -> None:
    """A writer makes the record file in ``root/.fsmem/``; from then on every process,
    readers too, appends to it where it is writable (like the access log, a reader never
    creates it and a read-only store just logs once per process)."""
    # lazy: start-up, loaded only when used (+ctypes)
    from fsmem.format import fsops as fsops  # here: readers (stats, ls) never load ctypes for it
    root = os.path.realpath(root)
    try:
        fd = fsops.open_(os.path.join(root, ".fsmem", RECORD),   # (a FIFO: ENXIO, no hang)
                         os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644)
        fsops.close(fd)
    except OSError as exc:
        log.debug("cannot make %s: %s", RECORD, exc)


def _recorded_names(root: str) -> set[str]:
    got = _recorded.get(root)
    if got is None:
        try:
            text = read_small(os.path.join(root, ".fsmem", RECORD), 64 << 20).decode(
                "utf-8", "replace")
            got = {line.split("\t", 1)[0] for line in text.splitlines() if line.strip()}
        except (OSError, FsmemError):   # none, or not a regular file: a courtesy record
            got = set()
        _recorded[root] = got
    return got


def report_served(path: str, doc_id: str, version: str) -> None:
    """Count a legacy document as served by this process, and report it once per store
    (``path``: a regular file, just read)."""
    root, name = _store_of_read(path)
    _served.setdefault(root, set()).add(name)
    _once(root, name, f"{doc_id}\t{version}",
          f"legacy document {doc_id} ({version}) read through the fallback path: {name}")


def report_unreadable(path: str, message: str) -> None:
    """Count a JSON file in documents/ that is not a readable HomeAgent document (named at
    INFO once per process; fsck lists a damaged one every time)."""
    root, name = _store_of(path)
    (_not_documents if NO_ID in message else _unreadable).setdefault(root, set()).add(name)
    _once(root, name, "unreadable", message)


def _once(root: str, name: str, record: str, message: str) -> None:
    """Name this file at INFO once per process (``fsmem -v`` lists each one; a command
    prints one summary line, never a warning per document), and append it to the store's
    record unless it is there already."""
    if (root, name) in _logged:
        return
    _logged.add((root, name))
    log.info("%s", message)
    if name in _recorded_names(root):
        return
    try:   # never created here (a reader creates nothing); appended where it exists
        fd = os.open(os.path.join(root, ".fsmem", RECORD), os.O_WRONLY | os.O_APPEND
                     | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):   # never into a FIFO someone reads
                os.write(fd, f"{name}\t{record}\n".encode())
        finally:
            os.close(fd)
        _recorded[root].add(name)
    except OSError as exc:   # the record is a courtesy: never fail a read over it
        log.debug("cannot record %s in %s: %s", name, RECORD, exc)


def summary_line(root: str) -> str | None:
    """The one line a command prints about HomeAgent's documents (None when documents/ has
    none and none was read): the JSON files there, and what this process made of them."""
    root = os.path.realpath(root)
    served = _served.get(root, set())
    left = len(legacy_doc_files(root)) if os.path.isdir(os.path.join(root, "documents")) else 0
    if not served and not left:
        return None
    bad, other = _unreadable.get(root, set()), _not_documents.get(root, set())
    seen = [f"{len(served)} read"] + ([f"{len(bad)} unreadable"] if bad else []) + (
        [f"{len(other)} not a document"] if other else [])
    return (f"{left} JSON files in documents/ are HomeAgent's, read in place (this command: "
            f"{', '.join(seen)}); fsmem stats --legacy lists them")


# -- the media store ------------------------------------------------------------------------

def blob_path(root: str, sha256: str) -> str:
    """HomeAgent's media store path of a blob: ``media/blobs/<2 hex>/<62 hex>``."""
    if not _HEX64.match(sha256):
        raise FormatError(f"invalid media digest {sha256!r}")
    return os.path.join(root, "media", "blobs", sha256[:2], sha256[2:])


def find_legacy_blob(root: str, prefix: str) -> list[str]:
    """Full sha256 digests in the media store starting with ``prefix`` (8+ hex)."""
    base = os.path.join(root, "media", "blobs", prefix[:2])
    try:
        names = os.listdir(base)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(prefix[:2] + n for n in names if (prefix[:2] + n).startswith(prefix)
                  and _HEX64.match(prefix[:2] + n))


_media_cache: dict[str, tuple[int, dict[str, dict[str, Any]]]] = {}


def sqlite_readonly(path: str, *, timeout: float = 10.0) -> sqlite3.Connection:
    """A read-only SQLite connection that creates nothing next to ``path``: ``mode=ro`` when a
    ``-wal`` file exists (a writer is active: its sidecar files are already there), else
    ``immutable=1`` (everything is in the main file; ``mode=ro`` would leave -wal/-shm)."""
    import sqlite3  # lazy: start-up, loaded only when used (+sqlite3)
    uri = "file:" + path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    mode = "mode=ro" if os.path.exists(path + "-wal") else "immutable=1"
    return sqlite3.connect(f"{uri}?{mode}", uri=True, timeout=timeout,
                           isolation_level=None, check_same_thread=False)


def media_info(root: str) -> dict[str, dict[str, Any]]:
    """``media/media.db``'s rows by sha256 digest (both schemas: with or without the
    ``vec``/``vec_model`` columns), read-only; {} when there is no media.db."""
    import sqlite3  # lazy: start-up, loaded only when used (+sqlite3)
    path = os.path.join(root, "media", "media.db")
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return {}
    cached = _media_cache.get(path)
    if cached and cached[0] == mtime:
        return cached[1]
    out: dict[str, dict[str, Any]] = {}
    try:
        db = sqlite_readonly(path)
        try:
            db.row_factory = sqlite3.Row
            for row in db.execute("SELECT * FROM media"):
                out[str(row["digest"]).lower()] = dict(row)
        finally:
            db.close()
    except sqlite3.Error as exc:
        log.warning("%s: not read (%s); media types come from the bytes", path, exc)
    _media_cache[path] = (mtime, out)
    return out


def read_blob(root: str, m: LegacyMedia) -> tuple[bytes, str] | None:
    """The bytes and MIME type of a media reference, or None if the blob is missing. The
    type is the block's own, else media.db's, else sniffed from the bytes."""
    import hashlib  # lazy: start-up, loaded only when used (+hashlib)
    path = blob_path(root, m.sha256)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        data = fh.read()
    if hashlib.sha256(data).hexdigest() != m.sha256:
        log.error("media blob %s does not match its sha256; not used", path)
        return None
    row = media_info(root).get(m.sha256) or {}
    return data, (m.mime or str(row.get("mime") or "") or sniff_mime(data[:64])
                  or "application/octet-stream")


def legacy_texts(doc: LegacyDoc) -> list[str]:
    """What the index searches of a legacy document: summary, content, tags, entities, and
    its blocks with a payload (a vector-only block is kept, but nothing of it is indexed)."""
    return searched_texts(doc.summary, doc.content, doc.tags, doc.entities,
                          [(m.text, m.mime) for m in doc.media if m.payload])


def searched_texts(summary: str, content: str, tags: list[str], entities: list[str],
                   media: list[tuple[str, str]]) -> list[str]:
    """``legacy_texts`` of a document's fields (``media``: each kept block's (text, mime))."""
    return [summary, content, " ".join(tags), " ".join(entities),
            *(text for text, _ in media if text), *(mime for _, mime in media if mime)]


def block_ref(ref: BlockRef, m: LegacyMedia, root: str) -> BlockRef:
    """``ref`` with the legacy block's own fields (format 2), and media.db's vector when the
    block has none."""
    import json  # lazy: start-up, loaded only when used (+json)
    row = media_info(root).get(m.sha256) or {} if m.sha256 else {}
    vector, fp = m.vector, m.fingerprint
    if not vector and row.get("vec"):
        try:
            vector, fp = [float(x) for x in json.loads(row["vec"]) or []], str(row.get("vec_model") or "")
        except (ValueError, TypeError):
            log.warning("media.db: vector of %s undecodable; not kept", m.sha256)
    ref.legacy_id, ref.source, ref.tool, ref.scene = m.legacy_id, m.source, \
        m.tool or str(row.get("tool") or ""), m.scene
    ref.semantic_type = m.semantic_type or ref.semantic_type
    ref.vector, ref.fingerprint, ref.updated_at = list(vector), fp, m.updated_at
    if ref.width is None and (m.width or row.get("width")):
        ref.width, ref.height = m.width or row.get("width"), m.height or row.get("height")
    return ref


def _add_media(mem: Sink, builder, media: list[LegacyMedia], ts: Timestamp,
               owner: str) -> list:
    """Copy each referenced blob into a block file (BLAKE3-named, sha256 kept), and each v3
    text block into a text block; every MemoryBlock field goes into the BlockRef."""
    refs = []
    for m in media:
        created = m.created_at if m.created_at and m.created_at.ns > ZERO_NS else ts
        if not m.payload:   # a vector-only block: an empty block file, every field kept
            ref = builder.add_bytes(b"", m.mime or "application/octet-stream",
                                    role="attachment", created_at=created)
            refs.append(block_ref(ref, m, mem.root))
            continue
        if m.text:
            ref = builder.add_bytes(m.text.encode("utf-8"), "text/plain; charset=utf-8",
                                    role="attachment", created_at=created)
            refs.append(block_ref(ref, m, mem.root))
            continue
        got = read_blob(mem.root, m) if _HEX64.match(m.sha256) else None
        if got is None:   # kept as a record (format 4 ``absent``): fsck says media-missing
            log.warning("%s: media blob %s%s is missing from the media store; kept as a "
                        "record only (fsck reports it)", owner, m.sha256,
                        f" (block {m.legacy_id})" if m.legacy_id else "")
            refs.append(block_ref(_absent_ref(m, mem.root, created), m, mem.root))
            continue
        data, mime = got
        ref = builder.add_bytes(data, mime, role="attachment", created_at=created,
                                sha256=m.sha256)
        refs.append(block_ref(ref, m, mem.root))
    return refs


def _absent_ref(m: LegacyMedia, root: str, created: Timestamp) -> BlockRef:
    """The record of a block whose media file is missing: HomeAgent's digest, MIME and size
    (from the block, else media.db), no file (``absent``)."""
    import hashlib  # lazy: start-up, loaded only when used (+hashlib)
    row = media_info(root).get(m.sha256) or {}
    mime = m.mime or str(row.get("mime") or "") or "application/octet-stream"
    digest = m.sha256 if _HEX64.match(m.sha256) else hashlib.sha256(
        m.sha256.encode("utf-8", "surrogateescape")).hexdigest()
    return BlockRef(digest=digest, modality=modality_of(mime), mime=mime,
                    size=m.size or int(row.get("size") or 0), created_at=created,
                    role="attachment", sha256=m.sha256, absent=True)


def find_legacy_block(root: str, block_id: str) -> LegacyMedia | None:
    """A ``blk_…`` id named by a legacy document still in documents/ (or by media.db-less
    graph rows): the block with its payload digest, or None."""
    for name, _ in legacy_doc_files(root):
        try:
            doc = read_legacy(os.path.join(root, "documents", name))
        except (FormatError, OSError, ValueError):
            continue
        for m in doc.media:
            if m.legacy_id == block_id and m.sha256:
                return m
    return None


# -- recall, remove, read views --------------------------------------------------------------

def _log_not_kept(doc: LegacyDoc, unit_id: str) -> None:
    for what in doc.not_kept:
        log.warning("legacy document %s -> unit %s: %s not kept", doc.id, unit_id, what)


def recall_legacy(mem: Sink, filename: str, layer: str = "context") -> str | None:
    """Make a legacy document a new-format unit in ``layer`` (context/ for recall; documents/
    before distillation): one ``cold_storage`` event at the document's created_at, the whole
    content, its blocks with every field; then move the JSON aside (``.fsmem/legacy-recalled/``).

    Must run under the writer lock. Returns the unit id, or None if the file is gone."""
    import hashlib  # lazy: start-up, loaded only when used (+hashlib)
    path = os.path.join(mem.root, "documents", filename)
    if not os.path.isfile(path):
        return None
    st = standing(mem.store, filename)
    if st.state == "same":   # a unit holds these bytes already (an interrupted recall)
        cleanup_recalled(mem, filename)
        return None
    raw = read_bytes(path)
    doc = read_legacy(path, raw)
    unit_id = st.unit_id
    import blake3  # lazy: start-up, loaded only when used
    digest = blake3.blake3(raw).hexdigest()
    ts = doc.created_at
    event_id = "e-" + hashlib.sha256(f"{unit_id}:legacy".encode()).hexdigest()[:24]

    def fill(builder) -> tuple[list, list]:
        blocks, texts = [], []
        for role, text in (("input", doc.summary), ("response", doc.content)):
            if text:
                blocks.append(builder.add_text(text, role=role, created_at=ts))
                texts.append((f"{event_id}:{blocks[-1].digest}",
                              mem.plugins.source_text("cold_storage", text)))
        blocks += _add_media(mem, builder, doc.media, ts, doc.id)
        for ref in blocks:
            if ref.role == "attachment" and ref.modality == "text":
                texts.append((f"{event_id}:{ref.digest}", mem.plugins.source_text(
                    "cold_storage", _text_of(doc, ref))))
        return [EventRecord(id=event_id, timestamp=ts, source="cold_storage", blocks=blocks)], \
            [(k, t) for k, t in texts if t]
    meta = dict(doc.meta) | {"legacy_id": doc.id, "legacy_version": doc.version,
                             "legacy_file": filename, "legacy_blake3": digest}
    if st.state == "rewritten":   # HomeAgent wrote it again: an update of what fsmem made
        meta["supersedes"] = st.prev
    mem.write_unit(layer, fill, unit_id=unit_id, created_at=doc.created_at,
                   updated_at=doc.updated_at, summary=doc.summary, tags=doc.tags,
                   entities=doc.entities, source=doc.source, meta=meta,
                   access_count=doc.access_count, last_access=doc.last_access)
    _log_not_kept(doc, unit_id)
    cleanup_recalled(mem, filename)
    return unit_id


def _text_of(doc: LegacyDoc, ref: BlockRef) -> str:
    return next((m.text for m in doc.media if m.text and m.legacy_id == ref.legacy_id), "")


def convert_cold_legacy(mem: Sink, max_age_s: float, max_access: int) -> list[str]:
    """Turn cold legacy documents (HomeAgent's rule: access_count <= max_access and last
    access older than max_age) into new-format units in documents/, so distillation reads
    their whole ``content`` like any other unit. Returns the unit ids made."""
    now = Timestamp.now().ns
    made = []
    with mem.store.locked():
        logged = mem.access.stats()
        for fname, _ in legacy_doc_files(mem.root):
            try:
                doc = read_legacy(os.path.join(mem.root, "documents", fname))
            except (FormatError, OSError, ValueError):
                continue   # reported by fsck
            seen = logged.get(legacy_id(fname))
            count = doc.access_count + (seen.count if seen else 0)
            last_ns = max((doc.last_access or doc.created_at).ns, seen.last_ns if seen else 0)
            if count <= max_access and now - last_ns >= max_age_s * 1e9:
                uid = recall_legacy(mem, fname, layer="documents")
                if uid:
                    made.append(uid)
    return made


def _unit_exists(mem: Sink, unit_id: str) -> bool:
    return any(os.path.isdir(mem.store.unit_dir(layer, unit_id))
               for layer in mem.store.layers())


def _move_aside(mem: Sink, filename: str, where: str) -> str:
    """Rename ``documents/<filename>`` into ``.fsmem/<where>/`` (a free name); returns it."""
    from fsmem.format import fsops as fsops  # lazy: start-up, loaded only when used (+ctypes)
    src = os.path.join(mem.root, "documents", filename)
    base = os.path.join(mem.store.meta, where)
    if not os.path.isdir(base):
        fsops.mkdir(base)
    dst, n = os.path.join(base, filename), 1
    while os.path.lexists(dst):
        n += 1
        dst = os.path.join(base, f"{filename}.{n}")
    with mem.store.locked():   # its feed record (by file name) first, then the rename
        mem.store.record("remove", "documents", filename, op=where)
        fsops.rename(src, dst)
    if mem.store.sync:
        fsops.fsync_dir(os.path.dirname(src))
        fsops.fsync_dir(base)
    return dst


def cleanup_recalled(mem: Sink, filename: str) -> None:
    """Move a legacy JSON whose bytes a durable unit holds aside into
    ``.fsmem/legacy-recalled/``: HomeAgent no longer loads it, and it is a way back. A file
    HomeAgent rewrote since (bytes no unit holds) stays, and so does every file of a store
    that keeps HomeAgent's files in place (``keeps_files``)."""
    path = os.path.join(mem.root, "documents", filename)
    if keeps_files(mem):
        return
    if os.path.isfile(path) and standing(mem.store, filename).state == "same":
        dst = _move_aside(mem, filename, "legacy-recalled")
        log.info("legacy document %s recalled; the JSON is kept at %s", filename, dst)


def remove_legacy(mem: Sink, unit_id: str) -> str:
    """Remove a legacy document on explicit request: its JSON leaves documents/ for
    ``.fsmem/legacy-removed/`` (said in a WARNING), as a unit leaves in one rename."""
    if keeps_files(mem):
        raise FsmemError(f"{mem.root}: this store keeps HomeAgent's files in place "
                         "(homeagent_files = keep): remove the document in HomeAgent, or set "
                         "homeagent_files = move")
    with mem.store.locked():
        name = legacy_file_of(mem.root, unit_id)
        if name is None:
            raise NotFound(f"{mem.root}: no unit or legacy document {unit_id!r}")
        dst = _move_aside(mem, name, "legacy-removed")
    log.warning("legacy document %s removed from documents/; the JSON is kept at %s",
                unit_id, dst)
    return dst


def legacy_document(root: str, unit_id: str) -> "Document":
    """A legacy document as a read-only Document (layer ``legacy``), through the fallback
    reader: one ``cold_storage`` event, as recall would make it; nothing is converted.
    Media blocks are named by their sha256 (what find_block and media_digests accept)."""
    import hashlib  # lazy: start-up, loaded only when used (+hashlib)

    from fsmem.format.views import Document  # lazy: start-up, loaded only when used (+blake3)
    name = legacy_file_of(root, unit_id)
    if name is None:
        raise NotFound(f"unit {unit_id!r} not found under {root}")
    path = os.path.join(root, "documents", name)
    doc = read_legacy(path)
    blocks, texts = [], {}
    for m in doc.media:
        created = m.created_at if m.created_at and m.created_at.ns > ZERO_NS else doc.created_at
        if not m.payload:   # a vector-only block (as recall keeps it: no bytes)
            mime = m.mime or "application/octet-stream"
            ref = BlockRef(digest=hashlib.sha256(b"").hexdigest(), modality=modality_of(mime),
                           mime=mime, size=0, created_at=created, role="attachment")
        elif m.text:
            digest = hashlib.sha256(m.text.encode()).hexdigest()
            texts[digest] = m.text
            ref = BlockRef(digest=digest, modality="text", mime="text/plain; charset=utf-8",
                           size=len(m.text.encode()), created_at=created, role="attachment")
        else:
            row = media_info(root).get(m.sha256) or {}
            mime = m.mime or str(row.get("mime") or "") or "application/octet-stream"
            ref = BlockRef(digest=m.sha256, modality=modality_of(mime), mime=mime,
                           size=m.size or int(row.get("size") or 0), created_at=created,
                           role="attachment", sha256=m.sha256)
        blocks.append(block_ref(ref, m, root))
    ev = Event(id="e-" + hashlib.sha256(f"{unit_id}:legacy".encode()).hexdigest()[:24],
               timestamp=doc.created_at, source="cold_storage", input=doc.summary,
               response=doc.content, blocks=blocks, unit_id=unit_id, texts=texts)
    return Document(id=unit_id, layer="legacy", path=path, summary=doc.summary,
                    tags=doc.tags, entities=doc.entities, source=doc.source,
                    meta=dict(doc.meta) | {"legacy_id": doc.id, "legacy_version": doc.version},
                    created_at=doc.created_at, updated_at=doc.updated_at,
                    access_count=doc.access_count, last_access=doc.last_access,
                    embedder="", events=[ev])


# -- running side by side: versions of a document -------------------------------------------
#
# HomeAgent keeps running on the directory: it may write documents/<id>.json again after fsmem
# made a unit of it (a recall, a conversion for distillation). The unit records the BLAKE3 of
# the bytes it was made from (meta "legacy_blake3"); a file whose bytes no unit holds is a new
# version: indexed, shown and recalled as ``<id>-h<12 hex of its BLAKE3>``, an update
# (meta "supersedes") of the newest unit made of that file before. Nothing is lost or hidden:
# each version is a unit (or the file) of its own, and fsck names both (legacy-rewritten).

def file_digest(path: str) -> str:
    """BLAKE3 (hex) of a HomeAgent file's bytes (read safely: no symlink, no FIFO)."""
    import blake3  # lazy: start-up, loaded only when used
    return blake3.blake3(read_bytes(path)).hexdigest()


def version_id(filename: str, digest: str) -> str:
    """The unit id of the version of ``documents/<filename>`` whose bytes hash to ``digest``
    (its first version keeps ``legacy_id(filename)``)."""
    return f"{legacy_id(filename)[:110]}-h{digest[:12]}"


@dataclass
class Standing:
    """How a ``documents/*.json`` file stands against the units made of it: ``plain`` (no
    unit: read in place as ``unit_id``), ``same`` (a unit holds exactly these bytes:
    ``unit_id``), ``rewritten`` (HomeAgent wrote it again after fsmem made ``prev`` of it:
    its bytes are the version ``unit_id``)."""

    state: str
    unit_id: str
    prev: str = ""
    digest: str = ""


def standing(layout: Any, filename: str, names: dict[str, set[str] | None] | None = None
             ) -> Standing:
    """``Standing`` of ``documents/<filename>``. ``names``: each layer's unit names, when the
    caller listed them (else looked up: a stat per layer). Reads no manifest and hashes no
    file unless a unit of that document exists (side by side with HomeAgent: rare)."""
    from fsmem.format.unit import read_manifest  # lazy: start-up (+blake3)
    base = legacy_id(filename)
    layers = layout.layers()
    if names is None:
        names = {}
    found: dict[str, str] = {}   # unit id -> layer, of every version of this document

    def where(uid: str) -> str | None:
        for layer in layers:
            known = names.get(layer)
            if (uid in known) if known is not None else os.path.isdir(
                    os.path.join(layout.root, layer, uid)):
                return layer
        return None
    if (layer := where(base)) is None:
        return Standing("plain", base)
    found[base] = layer
    digest = file_digest(os.path.join(layout.root, "documents", filename))
    vid = version_id(filename, digest)
    if where(vid) is not None:
        return Standing("same", vid, digest=digest)
    prefix = f"{base[:110]}-h"
    for layer in layers:
        known = names.get(layer)
        if known is None:
            try:
                known = set(os.listdir(os.path.join(layout.root, layer)))
            except OSError:
                known = set()
        for uid in known:
            if uid.startswith(prefix) and len(uid) == len(prefix) + 12:
                found.setdefault(uid, layer)
    metas = {}
    for uid, layer in found.items():
        try:
            metas[uid] = read_manifest(os.path.join(layout.root, layer, uid)).meta
        except (FormatError, OSError, ValueError):
            metas[uid] = {}
    if any(m.get("legacy_blake3") == digest for m in metas.values()):
        return Standing("same", next(u for u, m in metas.items()
                                     if m.get("legacy_blake3") == digest), digest=digest)
    if not metas[base].get("legacy_blake3") and len(found) == 1:
        # made before fsmem recorded digests: the copy it moved aside says what it read
        aside = _aside_digests(layout, filename)
        if not aside or digest in aside:
            return Standing("same", base, digest=digest)
    superseded = {m.get("supersedes", "") for m in metas.values()}
    newest = sorted(u for u in found if u not in superseded) or sorted(found)
    return Standing("rewritten", vid, prev=newest[-1], digest=digest)


def _aside_digests(layout: Any, filename: str) -> set[str]:
    """BLAKE3 of each copy of ``filename`` fsmem moved into ``.fsmem/legacy-recalled/``."""
    base = os.path.join(layout.meta, "legacy-recalled")
    try:
        names = [n for n in os.listdir(base) if n == filename or n.startswith(filename + ".")]
    except OSError:
        return set()
    out = set()
    for n in names:
        try:
            out.add(file_digest(os.path.join(base, n)))
        except (FormatError, OSError):
            continue
    return out


def rewritten_documents(layout: Any) -> list[tuple[str, Standing]]:
    """(file name, standing) of every ``documents/*.json`` HomeAgent rewrote after fsmem made
    a unit of it (fsck's ``legacy-rewritten``)."""
    out = []
    for name, _ in legacy_doc_files(layout.root):
        try:
            st = standing(layout, name)
        except (FormatError, OSError):
            continue
        if st.state == "rewritten":
            out.append((name, st))
    return out


def keeps_files(mem: Any) -> bool:
    """Whether this memory leaves HomeAgent's files where they are (config
    ``homeagent_files = "keep"``): never moved, renamed or deleted; converted documents are
    told apart by the digest their unit records."""
    return getattr(mem, "homeagent_files", "move") == "keep"


# -- counts and problems -------------------------------------------------------------------

def legacy_counts(root: str) -> tuple[int, int]:
    """(HomeAgent documents readable, other or unreadable JSON files) in documents/."""
    ok = bad = 0
    for name, _ in legacy_doc_files(root):
        path = os.path.join(root, "documents", name)
        try:
            read_legacy(path)
            ok += 1
        except (FormatError, OSError, ValueError) as exc:
            report_unreadable(path, str(exc))
            bad += 1
    return ok, bad


def unread_files(root: str) -> list[str]:
    """HomeAgent files fsmem does not read (``text/*.jsonl``): reported, never touched."""
    base = os.path.join(root, "text")
    try:
        names = sorted(os.listdir(base))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [os.path.join(base, n) for n in names if n.endswith(".jsonl")]
