"""HomeAgent's memory directory, read in place through one logged fallback path.

Legacy documents (``documents/*.json``, versions v1 content-only, v2 ``media`` sha256 digests,
v3 ``blocks`` with ``payload_digest``), ``context.json`` and the media store
(``media/blobs/ab/cdef…``) are read by ``read_legacy`` / ``read_context_json`` only. Every legacy
document read is logged once per document per process on the ``fsmem.legacy`` logger (WARNING,
id and version), so the stock can be watched draining. Nothing legacy is changed on open:
a legacy document is removed only after its recall has made it a durable new-format unit, and
``context.json`` is renamed to ``context.json.adopted`` after its events are adopted, never deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _fsops as fsops
from .errors import FormatError
from .media import sniff_mime
from .model import NAME_RE, EventRecord, ToolResult
from .timestamps import Timestamp

if TYPE_CHECKING:
    from .flows import Memory

__all__ = ["LegacyDoc", "LegacyMedia", "legacy_doc_files", "read_legacy", "legacy_id",
           "blob_path", "recall_legacy", "adopt_context_json", "find_legacy_blob",
           "legacy_problems", "legacy_texts", "cleanup_recalled", "convert_cold_legacy"]

log = logging.getLogger("fsmem.legacy")
_logged: set[tuple[str, str]] = set()
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ZERO = "0001-01-01T00:00:00Z"


@dataclass
class LegacyMedia:
    """A media reference of a legacy document or event: sha256 into the media store."""

    sha256: str
    mime: str = ""
    size: int = 0
    width: int | None = None
    height: int | None = None
    created_at: Timestamp | None = None
    text: str = ""              # a v3 text block carries its text inline


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


def legacy_id(filename: str) -> str:
    """The unit id a legacy file is known by: its name without ``.json`` when that is a valid
    id (HomeAgent names files ``<doc.id>.json``), else a stable hash of the name."""
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


def _media_of_block(b: Any, where: str) -> LegacyMedia | None:
    if not isinstance(b, dict):
        raise FormatError(f"{where}: a block must be an object")
    digest = (b.get("payload_digest") or "").lower()
    text = b.get("text") or ""
    if not digest and not text:
        return None
    return LegacyMedia(sha256=digest, mime=b.get("mime") or "", size=int(b.get("size") or 0),
                       width=b.get("width") or None, height=b.get("height") or None,
                       created_at=_ts(b.get("created_at"), f"{where}.created_at"),
                       text=text if not digest else "")


def read_legacy(path: str) -> LegacyDoc:
    """The one fallback reader of HomeAgent documents (v1, v2, v3); logs the read once."""
    name = os.path.basename(path)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise FormatError(f"{path}: not a regular file")
        raw = fh.read()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{path}: undecodable legacy document: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
        raise FormatError(f"{path}: not a HomeAgent document (no 'id')")
    version = ("v3" if "blocks" in data or "dense_fp" in data else
               "v2" if "media" in data or "vector" in data or "dense_vec" in data else "v1")
    media: list[LegacyMedia] = []
    for i, d in enumerate(data.get("media") or []):
        if isinstance(d, str) and d:
            media.append(LegacyMedia(sha256=d.lower()))
    for i, b in enumerate(data.get("blocks") or []):
        m = _media_of_block(b, f"{path}: blocks[{i}]")
        if m is not None:
            media.append(m)
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
        if data.get("last_access") else None, media=media)
    key = (os.path.realpath(path), doc.id)
    if key not in _logged:
        _logged.add(key)
        log.warning("legacy document %s (%s) read through the fallback path: %s",
                    doc.id, version, name)
    return doc


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


def read_blob(root: str, m: LegacyMedia) -> tuple[bytes, str] | None:
    """The bytes and MIME type of a media reference, or None if the blob is missing."""
    path = blob_path(root, m.sha256)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read()
    if hashlib.sha256(data).hexdigest() != m.sha256:
        log.error("media blob %s does not match its sha256; not used", path)
        return None
    return data, m.mime or sniff_mime(data[:64]) or "application/octet-stream"


def legacy_texts(doc: LegacyDoc) -> list[str]:
    """What the index searches of a legacy document: summary, content, tags, entities."""
    return [doc.summary, doc.content, " ".join(doc.tags), " ".join(doc.entities),
            *(m.text for m in doc.media if m.text), *(m.mime for m in doc.media if m.mime)]


def _add_media(mem: "Memory", builder, media: list[LegacyMedia], ts: Timestamp,
               owner: str) -> list:
    """Copy each referenced blob into a block file (BLAKE3-named, sha256 kept)."""
    refs = []
    for m in media:
        created = m.created_at if m.created_at and m.created_at.ns > -62135596800_000000000 \
            else ts
        if m.text:
            refs.append(builder.add_bytes(m.text.encode("utf-8"), "text/plain; charset=utf-8",
                                          role="attachment", created_at=created))
            continue
        got = read_blob(mem.root, m) if _HEX64.match(m.sha256) else None
        if got is None:
            log.warning("%s: media blob %s is missing from the media store; recalled without it",
                        owner, m.sha256)
            continue
        data, mime = got
        ref = builder.add_bytes(data, mime, role="attachment", created_at=created,
                                sha256=m.sha256)
        if ref.width is None and m.width:
            ref.width, ref.height = m.width, m.height
        refs.append(ref)
    return refs


def recall_legacy(mem: "Memory", filename: str, layer: str = "context") -> str | None:
    """Make a legacy document a new-format unit in ``layer`` (context/ for recall; documents/
    before distillation): one ``cold_storage`` event at the document's created_at, the whole
    content, its media copied in; then remove the JSON.

    Must run under the writer lock. Returns the unit id, or None if the file is gone."""
    path = os.path.join(mem.root, "documents", filename)
    if not os.path.isfile(path):
        return None
    doc = read_legacy(path)
    unit_id = legacy_id(filename)
    if _unit_exists(mem, unit_id):
        cleanup_recalled(mem, filename)
        return None
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
        return [EventRecord(id=event_id, timestamp=ts, source="cold_storage", blocks=blocks)], texts
    meta = dict(doc.meta) | {"legacy_id": doc.id, "legacy_version": doc.version,
                             "legacy_file": filename}
    mem.write_unit(layer, fill, unit_id=unit_id, created_at=doc.created_at,
                   summary=doc.summary, tags=doc.tags, entities=doc.entities, source=doc.source,
                   meta=meta, access_count=doc.access_count, last_access=doc.last_access)
    cleanup_recalled(mem, filename)
    return unit_id


def convert_cold_legacy(mem: "Memory", max_age_s: float, max_access: int) -> list[str]:
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


def _unit_exists(mem: "Memory", unit_id: str) -> bool:
    return any(os.path.isdir(mem.store.unit_dir(layer, unit_id))
               for layer in ("context", "documents", "stablemem"))


def cleanup_recalled(mem: "Memory", filename: str) -> None:
    """Remove a legacy JSON whose unit is durable (the new unit exists in some layer)."""
    path = os.path.join(mem.root, "documents", filename)
    if os.path.isfile(path) and _unit_exists(mem, legacy_id(filename)):
        fsops.unlink(path)
        if mem.store.sync:
            fsops.fsync_dir(os.path.dirname(path))


def _context_events(mem: "Memory", raw: list, path: str) -> tuple[list, list]:
    """Parse context.json events (reference section 3)."""
    out = []
    for i, e in enumerate(raw):
        where = f"{path}: [{i}]"
        if not isinstance(e, dict):
            raise FormatError(f"{where}: expected an object")
        media = [LegacyMedia(sha256=d.lower()) for d in e.get("media") or [] if isinstance(d, str)]
        media += [m for j, b in enumerate(e.get("blocks") or [])
                  if (m := _media_of_block(b, f"{where}.blocks[{j}]")) is not None]
        results = []
        for j, tr in enumerate(e.get("tool_results") or []):
            if not isinstance(tr, dict):
                raise FormatError(f"{where}.tool_results[{j}]: expected an object")
            results.append((str(tr.get("name") or ""), str(tr.get("output") or "")))
        out.append(dict(timestamp=_ts(e.get("timestamp"), f"{where}.timestamp"),
                        source=str(e.get("source") or ""), input=str(e.get("input") or ""),
                        response=str(e.get("response") or ""),
                        tools_used=_strs(e.get("tools_used"), f"{where}.tools_used"),
                        tool_results=results, media=media, id=str(e.get("id") or "")))
    return out, []


def adopt_context_json(mem: "Memory") -> str | None:
    """When context/ holds no unit and ``context.json`` exists, adopt its events whole into
    one context unit, then rename the file to ``context.json.adopted``. Under the lock."""
    path = os.path.join(mem.root, "context.json")
    adopted = path + ".adopted"
    if not os.path.isfile(path):
        return None
    if any(True for _ in mem.store.iter_units("context")):
        if _adopted_unit(mem):  # a crash after the publish, before the rename: finish it
            fsops.rename(path, adopted)
        return None
    with open(path, "rb") as fh:
        try:
            raw = json.loads(fh.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FormatError(f"{path}: undecodable context.json: {exc}") from exc
    if not isinstance(raw, list):
        raise FormatError(f"{path}: expected a JSON array of events")
    events, _ = _context_events(mem, raw, path)
    if not events:
        return None   # nothing to adopt; the file stays as it is
    unit_id = "u-context-json-" + hashlib.sha256(json.dumps(raw).encode()).hexdigest()[:12]
    def fill(builder) -> tuple[list, list]:
        records, texts = [], []
        for e in events:
            eid = e["id"] if NAME_RE.match(e["id"] or "-") else "e-" + hashlib.sha256(
                f"{e['timestamp']}|{e['source']}|{e['input']}".encode()).hexdigest()[:24]
            ts = e["timestamp"]
            blocks, results = [], []
            for role, text in (("input", e["input"]), ("response", e["response"])):
                if text:
                    ref = builder.add_text(text, role=role, created_at=ts)
                    blocks.append(ref)
                    texts.append((f"{eid}:{ref.digest}", mem.plugins.source_text(e["source"], text)))
            for name, output in e["tool_results"]:
                ref = builder.add_text(output, role="tool_output", created_at=ts)
                blocks.append(ref)
                results.append(ToolResult(name=name, block=ref.digest))
                texts.append((f"{eid}:{ref.digest}", mem.plugins.tool_text(e["source"], name, output)))
            blocks += _add_media(mem, builder, e["media"], ts, f"{path} event {eid}")
            records.append(EventRecord(id=eid, timestamp=ts, source=e["source"],
                                       tools_used=e["tools_used"], tool_results=results,
                                       blocks=blocks))
        records.sort(key=lambda r: (r.timestamp.ns, r.id))
        return records, texts
    mem.write_unit("context", fill, unit_id=unit_id, source="context.json",
                   meta={"adopted_from": "context.json"})
    fsops.rename(path, adopted)
    if mem.store.sync:
        fsops.fsync_dir(mem.root)
    log.warning("adopted %d events of %s into context/%s; the file is now %s",
                len(events), path, unit_id, os.path.basename(adopted))
    return unit_id


def _adopted_unit(mem: "Memory") -> bool:
    from .unit import read_manifest
    for unit_id in mem.store.iter_units("context"):
        if unit_id.startswith("u-context-json-"):
            try:
                if read_manifest(mem.store.unit_dir("context", unit_id)).meta.get(
                        "adopted_from") == "context.json":
                    return True
            except Exception:  # noqa: BLE001 - a damaged unit is fsck's business
                continue
    return False


def legacy_problems(root: str) -> list[tuple[str, str]]:
    """(path, problem) for each legacy document that cannot be read or misses a media blob."""
    out = []
    for name, _ in legacy_doc_files(root):
        path = os.path.join(root, "documents", name)
        try:
            doc = read_legacy(path)
        except (FormatError, OSError, ValueError) as exc:
            out.append((path, str(exc)))
            continue
        for m in doc.media:
            if m.sha256 and (not _HEX64.match(m.sha256) or not os.path.isfile(blob_path(root, m.sha256))):
                out.append((path, f"media blob {m.sha256} missing from the media store"))
    return out

