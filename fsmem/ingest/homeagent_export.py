"""A way back: an fsmem store written out as a HomeAgent memory directory (docs/FORMAT.md §10a).

``export_homeagent(root, dest)`` reads the store as a ``Reader`` (no lock; nothing in it is
written) and writes, into a new directory beside ``dest`` renamed into place at the end (a
failed export leaves nothing):

* ``documents/<id>.json``: every L2 and L3 unit, and every other agent's L1 unit, as a v3
  HomeAgent document (Go ``MarshalIndent``: field order, ``omitempty``, escaping, times as
  RFC3339Nano); a unit adopted from HomeAgent keeps its document id, its block ids and fields.
  HomeAgent JSON documents still read in place are copied byte for byte. An update hides the
  version it updates (only the newest is exported).
* ``context.json``: the L1 of the exporting agent, compact ``json.Marshal`` of its events in
  timestamp order (an event adopted from ``context.json`` keeps its id).
* ``media/blobs/<2 hex>/<62 hex>`` (sha256-named, as HomeAgent's media store) and
  ``media/media.db`` rows (``media``, ``media_refs``) for every media block named.
* ``graph.db``: copied through SQLite's backup API (it is in HomeAgent's schema already).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import uuid
from decimal import Decimal
from typing import Any

import blake3
import msgspec

from fsmem.format.blocks import CHUNK, DIGEST_RE
from fsmem.format.errors import ChecksumMismatch, FormatError, FsmemError
from fsmem.format.layout import Vanished, View, is_l1, layer_agent, open_regular, read_small
from fsmem.format.model import BlockRef, Event, EventRecord, Manifest
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import block_path, read_manifest
from fsmem.format.views import Document, hydrate_event
from fsmem.homeagent.documents import (
    LegacyMedia,
    _media_of_block,
    blob_path,
    legacy_doc_files,
    media_info,
    sqlite_readonly,
)
from fsmem.memory.facade import Memory
from fsmem.memory.reader import Reader

__all__ = ["HomeAgentExportReport", "export_homeagent", "doc_id", "go_json"]

log = logging.getLogger("fsmem.archive")

_ZERO = "0001-01-01T00:00:00Z"
_LEGACY_META = ("legacy_id", "legacy_version", "legacy_file", "legacy_blake3",
                "supersedes")   # fsmem's bookkeeping of an adopted document (and its versions)
_DOC_LAYERS = ("documents", "stablemem")
_MAX_LEGACY = 256 << 20
# media.db as HomeAgent's media store creates and migrates it (reference §4: media.go, then the
# later vec/vec_model columns added by ALTER TABLE).
_MEDIA_DDL = (
    "CREATE TABLE media (digest TEXT PRIMARY KEY, kind TEXT NOT NULL, mime TEXT, size INTEGER, "
    "width INTEGER, height INTEGER, origin_path TEXT, tool TEXT, description TEXT, "
    "described_by TEXT, ref_count INTEGER DEFAULT 0, first_seen TIMESTAMP, last_seen TIMESTAMP)",
    "CREATE TABLE media_refs (digest TEXT NOT NULL, owner_kind TEXT NOT NULL, owner_id TEXT NOT "
    "NULL, PRIMARY KEY (digest, owner_kind, owner_id))",
    "ALTER TABLE media ADD COLUMN vec TEXT DEFAULT ''",
    "ALTER TABLE media ADD COLUMN vec_model TEXT DEFAULT ''")
_MEDIA_COLS = ("digest", "kind", "mime", "size", "width", "height", "origin_path", "tool",
               "description", "described_by", "ref_count", "first_seen", "last_seen", "vec",
               "vec_model")


class HomeAgentExportReport(msgspec.Struct, kw_only=True):
    """What an export wrote, and what HomeAgent's format could not say as fsmem does."""

    path: str
    documents: int = 0            # documents/*.json written (units and legacy JSON)
    legacy_json: int = 0          # of those, HomeAgent JSON copied as it was
    events: int = 0               # context.json events
    media: int = 0                # blobs under media/blobs/
    bytes: int = 0                # every file written
    graph: bool = False           # graph.db copied
    private: list[str] = []       # private units exported as plain documents
    superseded: list[str] = []    # old versions of updated units: not exported
    other_agents: dict[str, int] = {}   # agent -> its L1 units exported as documents
    media_missing: list[str] = []  # sha256 (or BLAKE3) of media named but not there
    skipped_files: list[str] = []  # documents/*.json that are no HomeAgent document
    legacy_over_units: list[str] = []   # a unit whose document id a JSON in place holds

    def lines(self) -> list[str]:
        out = [f"exported {self.documents} documents ({self.legacy_json} HomeAgent JSON as "
               f"they were), {self.events} context events, {self.media} media blobs"
               f"{', graph.db' if self.graph else ''} ({self.bytes} bytes) to {self.path}"]
        if self.private:
            out.append(f"  {len(self.private)} private units exported as plain documents "
                       "(HomeAgent has no privacy): " + ", ".join(self.private))
        for agent, n in sorted(self.other_agents.items()):
            out.append(f"  agent {agent}: {n} L1 units exported as documents")
        if self.superseded:
            out.append(f"  {len(self.superseded)} updated versions left out (their update is "
                       "exported): " + ", ".join(self.superseded))
        if self.media_missing:
            out.append(f"  {len(self.media_missing)} media named without their bytes: "
                       + ", ".join(self.media_missing))
        if self.skipped_files:
            out.append("  not HomeAgent documents, not exported: " + ", ".join(self.skipped_files))
        if self.legacy_over_units:
            out.append("  the HomeAgent JSON in place was exported instead of unit(s): "
                       + ", ".join(self.legacy_over_units))
        return out


# -- Go's encoding/json -----------------------------------------------------------------------

def _go_float(f: float) -> str:
    """A float64 as Go encodes it (ES6 number formatting: shortest digits, 'e-7' not 'e-07')."""
    if f != f or f in (float("inf"), float("-inf")):
        raise FormatError(f"{f}: Go's encoding/json cannot write this number")
    if f == 0:
        return "-0" if str(f).startswith("-") else "0"
    s = repr(f)
    if 1e-6 <= abs(f) < 1e21:
        if "e" in s:
            s = format(Decimal(s), "f")
        return s[:-2] if s.endswith(".0") else s
    return re.sub(r"e-0(\d)$", r"e-\1", s)


_ESC = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _go_str(s: str) -> str:
    text = json.dumps(s, ensure_ascii=False)
    text = re.sub(r"\\(.)", lambda m: {"b": "\\u0008", "f": "\\u000c"}.get(m.group(1),
                                                                            m.group(0)), text)
    return re.sub("[<>&\u2028\u2029]", lambda m: _ESC[m.group(0)], text)


def _enc(obj: Any, indent: str | None, level: int) -> str:
    if obj is None:
        return "null"
    if obj is True or obj is False:
        return "true" if obj else "false"
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        return _go_float(obj)
    if isinstance(obj, str):
        return _go_str(obj)
    if isinstance(obj, dict):
        items = [f"{_go_str(k)}:{' ' if indent is not None else ''}{_enc(v, indent, level + 1)}"
                 for k, v in obj.items()]
        return _join(items, "{", "}", indent, level)
    if isinstance(obj, list):
        return _join([_enc(v, indent, level + 1) for v in obj], "[", "]", indent, level)
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _join(items: list[str], open_: str, close: str, indent: str | None, level: int) -> str:
    if not items:
        return open_ + close
    if indent is None:
        return open_ + ",".join(items) + close
    pad, inner = "\n" + indent * level, "\n" + indent * (level + 1)
    return open_ + inner + ("," + inner).join(items) + pad + close


def go_json(obj: Any, *, indent: bool) -> bytes:
    """Go's ``json.MarshalIndent(obj, "", "  ")`` (``indent``) or ``json.Marshal(obj)`` of a
    value whose dicts are in Go's struct field order (maps: sorted keys, as Go writes them)."""
    return _enc(obj, "  " if indent else None, 0).encode("utf-8", "replace")


# -- the mapping ------------------------------------------------------------------------------

def _safe_id(text: str) -> bool:
    return bool(text) and text not in (".", "..") and "/" not in text and "\0" not in text


def doc_id(doc: Document | Manifest) -> str:
    """The HomeAgent document id of a unit: the id it was adopted with, else
    ``doc_<created_at UnixNano>_<10 digits of sha256(unit id)>``: HomeAgent's ``doc_<UnixNano>``
    with a suffix no two units share, the same in every export."""
    legacy = doc.meta.get("legacy_id", "")
    if _safe_id(legacy):
        return legacy
    tail = int(hashlib.sha256(doc.id.encode()).hexdigest()[:8], 16)
    return f"doc_{max(doc.created_at.ns, 0)}_{tail:010d}"


def _block_id(ref: BlockRef, owner: str) -> str:
    """A block's HomeAgent id: its own (``legacy_id``), else ``blk_<UnixNano>_<n>`` as
    HomeAgent names media blocks, ``n`` derived from the owner and the block's digest."""
    if ref.legacy_id:
        return ref.legacy_id
    n = int(hashlib.sha256(f"{owner}:{ref.digest}".encode()).hexdigest()[:8], 16)
    return f"blk_{max(ref.created_at.ns, 0)}_{n}"


def _time(ts: Timestamp | None) -> str:
    return ts.isoformat() if ts is not None else _ZERO


def _omit(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not (k in keys and v in ("", 0, None, [], {}))}


def _block(ref: BlockRef, bid: str, text: str | None, sha256: str) -> dict[str, Any]:
    """A v3 MemoryBlock (reference §2) in Go field order."""
    modality = ref.modality if ref.modality in ("image", "video", "audio") else "text"
    mime = "" if text is not None and ref.mime.startswith("text/plain") else ref.mime
    return _omit({"id": bid, "modality": modality, "text": text or "",
                  "payload_digest": sha256 if text is None else "", "mime": mime,
                  "size": ref.size if text is None else 0, "width": ref.width or 0,
                  "height": ref.height or 0, "vector": [float(v) for v in ref.vector],
                  "fingerprint": ref.fingerprint, "source": ref.source, "tool": ref.tool,
                  "scene": ref.scene, "semantic_type": ref.semantic_type,
                  "created_at": _time(ref.created_at),
                  "updated_at": _time(ref.updated_at or ref.created_at)},
                 "text", "payload_digest", "mime", "size", "width", "height", "vector",
                 "fingerprint", "source", "tool", "scene", "semantic_type")


def _line(e: Event) -> str:
    """One event as HomeAgent's ContextToDoc flattens it (reference §1b), nothing truncated."""
    out = f"[{e.timestamp.strftime('%H:%M')}] {e.source}: {e.input}"
    if e.response:
        out += f" → {e.response}"
    return out + "".join(f"\n  [工具] {t.name}: {t.output}" for t in e.tool_results)


def _content(m: Manifest, events: list[Event]) -> str:
    """A document's ``content``: an adopted document's own (its recall event's response), a
    commit's text (its one input), else every event flattened as an archive is."""
    if len(events) == 1:
        e = events[0]
        if "legacy_id" in m.meta and e.source == "cold_storage" and e.input == m.summary:
            return e.response
        if not e.response and not e.tool_results \
                and m.meta.get("is_archived_context") != "true":
            return e.input
    return "\n".join(_line(e) for e in events)


class _Export:
    """One export's state: the temp directory, the media found, the report."""

    def __init__(self, reader: Reader, tmp: str, report: HomeAgentExportReport) -> None:
        self.reader, self.tmp, self.report = reader, tmp, report
        self.media: dict[str, dict[str, Any]] = {}       # sha256 -> media.db row
        self.refs: set[tuple[str, str, str]] = set()      # media_refs rows
        self.known = media_info(reader.root)

    # -- media --------------------------------------------------------------------------
    def _note(self, sha: str, ref: BlockRef | None, owner: tuple[str, str]) -> None:
        row = self.media.get(sha)
        if row is None:
            src = self.known.get(sha) or {}
            seen = _sql_time(ref.created_at) if ref is not None else ""
            row = {"digest": sha, "kind": ref.modality if ref is not None and ref.modality in
                   ("image", "video", "audio") else str(src.get("kind") or "file"),
                   "mime": ref.mime if ref is not None else "", "size": ref.size if ref else 0,
                   "width": (ref.width or 0) if ref else 0, "height": (ref.height or 0) if ref
                   else 0, "origin_path": ref.name if ref else "", "tool": ref.tool if ref else "",
                   "description": "", "described_by": "", "ref_count": 0, "first_seen": seen,
                   "last_seen": seen, "vec": _enc([float(v) for v in ref.vector], None, 0)
                   if ref is not None and ref.vector else "",
                   "vec_model": ref.fingerprint if ref else ""}
            for col in _MEDIA_COLS:   # HomeAgent's own row wins where the source has one
                if src.get(col) not in (None, "") and col not in ("digest", "ref_count"):
                    row[col] = src[col]
            self.media[sha] = row
        self.refs.add((sha, *owner))

    def _copy(self, fd: int, want_blake3: str | None, want_sha: str | None, where: str) -> str:
        """Stream an open file into the media store of the export; returns its sha256."""
        blobs = os.path.join(self.tmp, "media", "blobs")
        os.makedirs(blobs, exist_ok=True)
        part = os.path.join(blobs, f".part-{uuid.uuid4().hex}")
        sha, b3 = hashlib.sha256(), blake3.blake3()
        out = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            while chunk := os.read(fd, CHUNK):
                sha.update(chunk)
                b3.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
            os.fsync(out)
        except BaseException:
            os.close(out)
            os.unlink(part)
            raise
        os.close(out)
        digest = sha.hexdigest()
        if (want_blake3 and b3.hexdigest() != want_blake3) or (want_sha and digest != want_sha):
            os.unlink(part)
            raise ChecksumMismatch(f"{where}: bytes do not match their digest; run fsmem fsck")
        os.makedirs(os.path.join(blobs, digest[:2]), exist_ok=True)
        final = os.path.join(blobs, digest[:2], digest[2:])
        if os.path.exists(final):
            os.unlink(part)
        else:
            os.rename(part, final)
        return digest

    def unit_media(self, unit_path: str, ref: BlockRef, owner: tuple[str, str]) -> str | None:
        """Copy a unit's media block; its sha256, or None (reported) when it is missing."""
        path = block_path(unit_path, ref)
        try:
            fd = open_regular(path)
        except FileNotFoundError:
            if self.reader.layout.vanished(unit_path):
                raise Vanished(unit_path) from None
            self.report.media_missing.append(ref.sha256 or ref.digest)
            if ref.sha256:
                self._note(ref.sha256, ref, owner)
            return ref.sha256 or None
        try:
            sha = self._copy(fd, ref.digest, ref.sha256 or None, path)
        finally:
            os.close(fd)
        self._note(sha, ref, owner)
        return sha

    def legacy_media(self, sha: str, owner: tuple[str, str]) -> None:
        """Copy a blob a HomeAgent JSON in place names from the source's media store."""
        try:
            path = blob_path(self.reader.root, sha)
            fd = open_regular(path)
        except (FileNotFoundError, FormatError):
            self.report.media_missing.append(sha)
            return
        try:
            self._copy(fd, None, sha, path)
        finally:
            os.close(fd)
        self._note(sha, None, owner)

    # -- documents and events -------------------------------------------------------------
    def blocks(self, unit_path: str, rec: EventRecord, ev: Event, owner: tuple[str, str],
               seen: set[str]) -> list[dict[str, Any]]:
        out = []
        for ref in rec.blocks:
            if ref.role != "attachment":
                continue   # input, response and tool output are the event's own fields
            bid = _block_id(ref, owner[1])
            if bid in seen:
                continue
            if ref.modality == "text" and ref.digest in ev.texts:
                block = _block(ref, bid, ev.texts[ref.digest], "")
            else:
                sha = self.unit_media(unit_path, ref, owner)
                if sha is None:
                    continue
                block = _block(ref, bid, None, sha)
            seen.add(bid)
            out.append(block)
        return out

    def document(self, layer: str, path: str, m: Manifest, events: list[Event]
                 ) -> tuple[str, dict[str, Any]]:
        did = doc_id(m)
        if "legacy_id" in m.meta:
            meta = {k: v for k, v in m.meta.items() if k not in _LEGACY_META}
        else:
            meta = dict(m.meta) | {"fsmem_unit": m.id}
        if layer != "documents":
            meta["fsmem_layer"] = layer
        if m.agent:
            meta["fsmem_agent"] = m.agent
        if m.private:
            meta["fsmem_private"] = "true"
            self.report.private.append(m.id)
        count, last = self.reader.access_of(m, self.stats.get(m.id))
        seen: set[str] = set()
        blocks = [b for rec, ev in zip(m.events, events)
                  for b in self.blocks(path, rec, ev, ("document", did), seen)]
        doc = {"id": did, "summary": m.summary, "content": _content(m, events),
               "tags": list(m.tags) or None, "entities": list(m.entities) or None,
               "created_at": _time(m.created_at), "updated_at": _time(m.updated_at),
               "source": m.source, "meta": dict(sorted(meta.items())), "access_count": count,
               "last_access": _time(last), "blocks": blocks}
        return did, _omit(doc, "meta", "blocks")

    def event(self, path: str, rec: EventRecord, ev: Event) -> dict[str, Any]:
        eid = rec.legacy_id or rec.id
        blocks = self.blocks(path, rec, ev, ("context", eid), set())
        return _omit({"id": eid, "timestamp": _time(ev.timestamp), "source": ev.source,
                      "input": ev.input, "response": ev.response,
                      "tools_used": list(ev.tools_used),
                      "tool_results": [{"name": t.name, "output": t.output}
                                       for t in ev.tool_results], "blocks": blocks},
                     "id", "response", "tools_used", "tool_results", "blocks")

    def collect(self, view: View) -> tuple[dict[str, bytes], list[dict[str, Any]]]:
        """Every document and context event of one consistent view (media copied as met)."""
        self.media.clear()
        self.refs.clear()
        rep = self.report
        rep.private, rep.superseded, rep.media_missing = [], [], []
        rep.other_agents, rep.skipped_files, rep.legacy_over_units = {}, [], []
        rep.legacy_json = 0
        self.stats = self.reader.access.stats()
        loaded = {layer: [self._read(uid, path) for uid, path in view.layer(layer)]
                  for layer in view.units}
        superseded = {m.meta["supersedes"] for units in loaded.values() for _, m in units
                      if m.meta.get("supersedes")}
        docs: dict[str, bytes] = {}
        owners: dict[str, str] = {}
        events: list[tuple[int, int, str, dict[str, Any]]] = []
        for layer, units in sorted(loaded.items()):
            for path, m in units:
                evs = self._hydrate(path, m)
                if layer == self.reader.l1:
                    arrival = self._arrival(path)
                    events += [(ev.timestamp.ns, arrival, ev.id, self.event(path, rec, ev))
                               for rec, ev in zip(m.events, evs)]
                    continue
                if layer in _DOC_LAYERS and m.id in superseded:
                    rep.superseded.append(m.id)
                    continue
                if is_l1(layer):
                    agent = layer_agent(layer) or "default"
                    rep.other_agents[agent] = rep.other_agents.get(agent, 0) + 1
                did, doc = self.document(layer, path, m, evs)
                docs[f"{did}.json"] = go_json(doc, indent=True)
                owners[f"{did}.json"] = m.id
        self._legacy(docs, owners)
        events.sort(key=lambda e: e[:3])
        return docs, [e[3] for e in events]

    def _legacy(self, docs: dict[str, bytes], owners: dict[str, str]) -> None:
        """HomeAgent JSON documents read in place: copied as they are, with their media."""
        root = self.reader.root
        for name, _ in legacy_doc_files(root):
            path = os.path.join(root, "documents", name)
            try:
                raw = read_small(path, _MAX_LEGACY)
                data = json.loads(raw.decode("utf-8"))
            except (FsmemError, OSError, ValueError):
                self.report.skipped_files.append(name)
                continue
            if not isinstance(data, dict) or not isinstance(data.get("id"), str) \
                    or not data["id"]:
                self.report.skipped_files.append(name)
                continue
            digests = [d.lower() for d in data.get("media") or [] if isinstance(d, str)]
            for i, b in enumerate(data.get("blocks") or []):
                try:
                    m: LegacyMedia | None = _media_of_block(b, f"{name}: blocks[{i}]", [])
                except (FormatError, ValueError, TypeError):
                    continue
                if m is not None and m.sha256:
                    digests.append(m.sha256)
            for sha in dict.fromkeys(digests):
                if DIGEST_RE.match(sha):
                    self.legacy_media(sha, ("document", data["id"]))
            if name in owners:
                self.report.legacy_over_units.append(owners.pop(name))
            docs[name] = raw
            self.report.legacy_json += 1

    def _arrival(self, path: str) -> int:
        try:
            return os.stat(path).st_mtime_ns
        except FileNotFoundError as exc:
            raise Vanished(path) from exc

    def _read(self, uid: str, path: str) -> tuple[str, Manifest]:
        try:
            return path, read_manifest(path, expect_id=uid)
        except (FsmemError, OSError) as exc:
            if self.reader.layout.vanished(path):
                raise Vanished(path) from exc
            raise FormatError(f"{path}: unreadable unit, not exported ({exc}); run fsmem "
                              "fsck, then export again") from exc

    def _hydrate(self, path: str, m: Manifest) -> list[Event]:
        try:
            return [hydrate_event(path, m.id, rec, m.agent) for rec in m.events]
        except (FsmemError, OSError, UnicodeDecodeError) as exc:
            if self.reader.layout.vanished(path):
                raise Vanished(path) from exc
            raise FormatError(f"{path}: a block is damaged, not exported ({exc}); run fsmem "
                              "fsck, then export again") from exc


def _sql_time(ts: Timestamp) -> str:
    """A time as Go's SQLite driver stores a ``time.Time`` (``2006-01-02 15:04:05.999999999-07:00``)."""
    iso = ts.isoformat()
    return iso[:10] + " " + iso[11:].replace("Z", "+00:00")


# -- writing ----------------------------------------------------------------------------------

def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_media_db(ex: _Export) -> None:
    path = os.path.join(ex.tmp, "media", "media.db")
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN")
        for ddl in _MEDIA_DDL:
            db.execute(ddl)
        counts: dict[str, int] = {}
        for sha, _, _ in ex.refs:
            counts[sha] = counts.get(sha, 0) + 1
        for sha in sorted(ex.media):
            row = ex.media[sha] | {"ref_count": counts.get(sha, 0)}
            db.execute(f"INSERT INTO media ({', '.join(_MEDIA_COLS)}) VALUES "
                       f"({', '.join('?' * len(_MEDIA_COLS))})", [row[c] for c in _MEDIA_COLS])
        db.executemany("INSERT INTO media_refs VALUES (?, ?, ?)", sorted(ex.refs))
        db.execute("COMMIT")
    finally:
        db.close()
    _fsync_file(path)


def _copy_graph(root: str, tmp: str) -> bool:
    """graph.db through SQLite's backup API (a consistent copy while a writer runs)."""
    src_path = os.path.join(root, "graph.db")
    if not os.path.isfile(src_path) or os.path.islink(src_path):
        return False
    dst_path = os.path.join(tmp, "graph.db")
    src = sqlite_readonly(src_path)
    try:
        dst = sqlite3.connect(dst_path)
        try:
            src.backup(dst)
        finally:
            dst.close()   # the last connection: a WAL database checkpoints, leaving no -wal
    finally:
        src.close()
    _fsync_file(dst_path)
    return True


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(top: str) -> int:
    """fsync every directory below ``top`` (files were fsynced when written); total bytes."""
    total = 0
    for dirpath, _, files in os.walk(top):
        total += sum(os.lstat(os.path.join(dirpath, f)).st_size for f in files)
        _fsync_file(dirpath)
    return total


def _check_dest(root: str, dest: str) -> None:
    real_root, real_dest = os.path.realpath(root), os.path.realpath(dest)
    if real_dest == real_root or real_dest.startswith(real_root + os.sep):
        raise FsmemError(f"{dest}: inside the store {root}; export to a directory outside it")
    if os.path.lexists(dest):
        if not os.path.isdir(dest) or os.path.islink(dest):
            raise FsmemError(f"{dest}: exists and is not a directory; nothing exported")
        if os.listdir(dest):
            raise FsmemError(f"{dest}: exists and is not empty; export into a new or empty "
                             "directory (nothing was written)")


def export_homeagent(src: str | os.PathLike[str] | Reader, dest: str | os.PathLike[str], *,
                     agent: str | None = None) -> HomeAgentExportReport:
    """Write the store at ``src`` (a root, or a ``Reader``) as a HomeAgent memory directory
    ``dest`` (new, or empty): built beside it, renamed into place; a failure leaves nothing.
    ``agent``: whose L1 becomes ``context.json`` (default: the reader's, the default agent)."""
    reader = src if isinstance(src, Reader) else Memory.open(src, readonly=True, agent=agent)
    dest = os.path.abspath(os.fspath(dest))
    _check_dest(reader.root, dest)
    tmp = f"{dest}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    os.mkdir(tmp, 0o755)
    report = HomeAgentExportReport(path=dest)
    try:
        ex = _Export(reader, tmp, report)
        docs, events = reader.consistent(ex.collect)
        os.mkdir(os.path.join(tmp, "documents"), 0o755)
        for name in sorted(docs):
            _write(os.path.join(tmp, "documents", name), docs[name])
        _write(os.path.join(tmp, "context.json"), go_json(events, indent=False))
        if ex.media:
            _write_media_db(ex)
        report.graph = _copy_graph(reader.root, tmp)
        report.documents, report.events = len(docs), len(events)
        report.media = sum(1 for sha in ex.media if os.path.isfile(blob_path(tmp, sha)))
        report.bytes = _fsync_tree(tmp)
        os.rename(tmp, dest)   # over an empty directory too; ENOTEMPTY if one appeared
        _fsync_file(os.path.dirname(dest))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if reader is not src:
            reader.close()
    log.info("exported %d documents and %d events as a HomeAgent directory to %s",
             report.documents, report.events, dest)
    return report
