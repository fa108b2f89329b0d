"""The migration report of a HomeAgent directory, its fsck findings, and the hashes that tell
afterwards whether any HomeAgent file changed.

``legacy_report`` lists, per ``documents/*.json``: its version, what fsmem reads (events,
blocks, media, text bytes), what it cannot read and why, and what a recall keeps
(``fsmem stats --legacy``, ``fsmem adopt --dry-run``). ``legacy_findings`` is fsck's part:
a damaged document is a ``legacy-unreadable`` finding, a missing media blob a ``legacy``
one; HomeAgent's healthy files (``text/*.jsonl``, ``settings.json``, ...) are none.
``save_report`` writes the BLAKE3 of every HomeAgent file to ``.fsmem/legacy-report.json``
(atomically, under the writer lock); ``verify_report`` (a reader: no lock, writes nothing)
hashes them again. Nothing here moves, renames or changes a HomeAgent file.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

import msgspec

from fsmem.format.blocks import DIGEST_RE
from fsmem.format.errors import FormatError, NotFound
from fsmem.format.layout import open_regular, read_small
from fsmem.format.timestamps import Timestamp
from fsmem.homeagent.documents import (
    NO_ID,
    blob_path,
    decode_json,
    legacy_doc_files,
    media_info,
    read_legacy,
    report_unreadable,
    unread_files,
)

if TYPE_CHECKING:
    from fsmem.homeagent.documents import Sink

__all__ = ["DocReport", "LegacyReport", "Verification", "legacy_report", "legacy_findings",
           "legacy_files", "save_report", "verify_report", "REPORT_FILE", "NOT_DOCUMENTED"]

REPORT_FILE = "legacy-report.json"
REPORT_FORMAT = 1
NOT_DOCUMENTED = "HomeAgent's loader is not documented for this case"
SKIPPED_BY_HOMEAGENT = ("HomeAgent skips it too (v3 loads only *.json with a non-empty id; "
                        "v1/v2 only doc_*.json)")
_MAX_DOC = 256 << 20            # as documents.read_bytes
_SIDECARS = ("-wal", "-shm", "-journal")   # SQLite's, changing while a writer runs
_MOVED_DIRS = ("legacy-recalled", "legacy-removed")   # where fsmem moves a document aside


class DocReport(msgspec.Struct, kw_only=True):
    """One ``documents/*.json``: ``status`` ok, unreadable (``error``; ``homeagent``: what
    HomeAgent does with it) or not-a-document (decodes, no id: settings and the like)."""

    file: str
    status: str
    id: str = ""
    version: str = ""
    error: str = ""
    homeagent: str = ""
    events: int = 0
    blocks: int = 0
    media: int = 0
    text_bytes: int = 0
    cannot_read: list[str] = []
    recall_keeps: list[str] = []
    dropped: list[str] = []


class LegacyReport(msgspec.Struct, kw_only=True):
    """Every HomeAgent document, and the HomeAgent files fsmem does not read."""

    root: str
    documents: list[DocReport]
    unread: list[str]

    def lines(self) -> list[str]:
        ok = sum(d.status == "ok" for d in self.documents)
        bad = sum(d.status == "unreadable" for d in self.documents)
        out = [f"documents/: {len(self.documents)} JSON files: {ok} HomeAgent documents, "
               f"{bad} unreadable, {len(self.documents) - ok - bad} other JSON (not documents)"]
        for d in self.documents:
            if d.status == "ok":
                out.append(f"{d.file}: {d.version} {d.id}: reads {d.events} event, {d.blocks} "
                           f"blocks ({d.media} media), {d.text_bytes} text bytes")
            else:
                out.append(f"{d.file}: {d.status}: {d.error}; {d.homeagent}")
            out += [f"  cannot read: {c}" for c in d.cannot_read]
            out += [f"  recall keeps: {k}" for k in d.recall_keeps]
            out += [f"  not kept: {x}" for x in d.dropped]
        out += [f"not read (kept as it is): {os.path.relpath(p, self.root)}" for p in self.unread]
        return out


def _utf8(text: Any) -> int:
    return len(str(text or "").encode("utf-8"))


def _blob_there(root: str, digest: str) -> bool:
    try:
        return DIGEST_RE.match(digest) is not None and \
            stat.S_ISREG(os.lstat(blob_path(root, digest)).st_mode)
    except OSError:
        return False


def _block(root: str, b: dict, r: DocReport) -> None:
    """One v3 MemoryBlock (or a v2 digest, as {"payload_digest": d}) into the report."""
    bid = str(b.get("id") or "")
    name = f"block {bid}" if bid else "media"
    digest, text = str(b.get("payload_digest") or "").lower(), str(b.get("text") or "")
    vector = b.get("vector") or []
    r.blocks += 1
    if digest:
        r.media += 1
        mime = str(b.get("mime") or "")
        if _blob_there(root, digest):
            r.recall_keeps.append(f"{name}: {digest[:12]} {mime or 'media'}, with its bytes")
        else:
            r.cannot_read.append(f"{name}: media file {digest} missing from media/blobs/")
            r.recall_keeps.append(f"{name}: {digest}: kept as a record, media missing "
                                  "(digest, MIME, size)")
    elif text:
        r.text_bytes += _utf8(text)
        r.recall_keeps.append(f"{name}: text block ({_utf8(text)} bytes)")
    elif vector:
        r.cannot_read.append(f"{name}: vector-only (no text, no payload_digest): nothing to "
                             "search or show")
        r.recall_keeps.append(f"{name}: kept as a block with its vector ({len(vector)} "
                              f"floats{', ' + str(b['fingerprint']) if b.get('fingerprint') else ''})")
    else:
        r.cannot_read.append(f"{name}: empty (no text, payload_digest or vector)")
        r.recall_keeps.append(f"{name}: kept as a block record (its fields)")


def doc_report(root: str, name: str) -> DocReport:
    """The report of ``documents/<name>``; reading it changes nothing."""
    path = os.path.join(root, "documents", name)
    r = DocReport(file=f"documents/{name}", status="unreadable", homeagent=NOT_DOCUMENTED)
    try:
        raw = read_small(path, _MAX_DOC)
        if not raw:
            r.error = "empty file (0 bytes)"
            return r
        data = decode_json(path, raw)
    except (FormatError, OSError) as exc:
        r.error = str(exc).removeprefix(f"{path}: ")
        return r
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
        r.status, r.error, r.homeagent = "not-a-document", NO_ID, SKIPPED_BY_HOMEAGENT
        return r
    try:
        doc = read_legacy(path, data=data)   # (decoded once)
    except (FormatError, ValueError, TypeError) as exc:
        r.error = "wrong shape: " + str(exc).removeprefix(f"{path}: ")
        return r
    r.status, r.id, r.version, r.homeagent, r.events = "ok", doc.id, doc.version, "", 1
    r.text_bytes = _utf8(doc.summary) + _utf8(doc.content)
    r.recall_keeps.append(f"one cold_storage event: summary and content whole "
                          f"({r.text_bytes} bytes), tags, entities, times, access counts")
    types = media_info(root)
    for d in data.get("media") or []:
        if isinstance(d, str) and d:
            row = types.get(d.lower()) or {}
            _block(root, {"payload_digest": d, "mime": row.get("mime") or ""}, r)
    for b in data.get("blocks") or []:
        if isinstance(b, dict):
            row = types.get(str(b.get("payload_digest") or "").lower()) or {}
            _block(root, {"mime": row.get("mime") or ""} | {k: v for k, v in b.items() if v}, r)
    r.dropped = [x for x in doc.not_kept if not x.startswith("block ")]
    return r


def legacy_report(root: str) -> LegacyReport:
    """Every ``documents/*.json`` of ``root`` and the HomeAgent files fsmem does not read."""
    docs = []
    for name, _ in legacy_doc_files(root):
        d = doc_report(root, name)
        if d.status != "ok":
            report_unreadable(os.path.join(root, "documents", name), f"{d.file}: {d.error}")
        docs.append(d)
    return LegacyReport(root=root, documents=docs, unread=unread_files(root))


def legacy_findings(root: str) -> list[tuple[str, str, str]]:
    """fsck's findings about HomeAgent's files, [(kind, path, detail)]: each damaged
    document (``legacy-unreadable``: what is wrong, what HomeAgent does with it) and each
    missing media blob (``legacy``). Healthy HomeAgent files are not findings."""
    out = []
    for d in legacy_report(root).documents:
        path = os.path.join(root, d.file)
        if d.status == "unreadable":
            out.append(("legacy-unreadable", path, f"{d.error}; {d.homeagent}; fsmem skips "
                        "it and leaves it where it is"))
        for c in d.cannot_read:
            if "missing from media/blobs/" in c:
                digest = c.split("media file ", 1)[1].split(" ", 1)[0]
                out.append(("legacy", path, f"media blob {digest} missing from the media "
                            "store"))
    return out


# -- the hashes of HomeAgent's files ---------------------------------------------------------

def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def legacy_files(root: str) -> list[str]:
    """Every HomeAgent file of ``root``, relative: ``documents/*.json``, the regular files at
    the root (``context.json``, ``graph.db``, ``settings.json``; not SQLite's sidecars nor
    fsmem's ``context.json.adopted*``), every file under ``media/`` and ``text/``."""
    out = [f"documents/{n}" for n, _ in legacy_doc_files(root)]
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        names = []
    out += [n for n in names if _regular(os.path.join(root, n)) and not n.endswith(_SIDECARS)
            and not n.startswith("context.json.adopted")]
    for top in ("media", "text"):
        for base, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for n in sorted(files):
                p = os.path.join(base, n)
                if _regular(p) and not n.endswith(_SIDECARS):
                    out.append(os.path.relpath(p, root))
    return sorted(out)


def _hash(path: str) -> tuple[str, int]:
    """(BLAKE3 hex, size) of a regular file, read through the safe-open helper."""
    import blake3  # lazy: start-up, loaded only when used (+blake3)
    fd = open_regular(path)
    try:
        h, size = blake3.blake3(), 0
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            size += len(chunk)
        return h.hexdigest(), size
    finally:
        os.close(fd)


def _hashes(root: str, rels: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for rel in rels:
        try:
            digest, size = _hash(os.path.join(root, rel))
        except (OSError, FormatError):
            continue   # gone (or replaced by a link) while we looked
        out[rel] = {"blake3": digest, "size": size}
    return out


def save_report(mem: "Sink") -> str:
    """Write the BLAKE3 of every HomeAgent file to ``.fsmem/legacy-report.json``, atomically
    under the writer lock; returns its path."""
    import json  # lazy: start-up, loaded only when used (+json)
    path = os.path.join(mem.store.meta, REPORT_FILE)
    with mem.store.locked():
        data = {"format": REPORT_FORMAT, "created_at": Timestamp.now().isoformat(),
                "tool": "fsmem", "files": _hashes(mem.root, legacy_files(mem.root))}
        mem.store.write_file_atomic(path, json.dumps(data, indent=1, sort_keys=True,
                                                     ensure_ascii=False).encode() + b"\n")
    return path


class Change(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One file that differs from the report: changed, vanished, appeared or moved."""

    file: str
    what: str
    to: str = ""
    note: str = ""


class Verification(msgspec.Struct, kw_only=True):
    """``verify_report``: what matches, what differs; ``ok`` when nothing but fsmem's own
    moves (a recalled document, an adopted context.json) differs."""

    report: str
    created_at: str
    matched: int
    moved: list[Change]
    changed: list[Change]
    vanished: list[Change]
    appeared: list[Change]
    ok: bool = True

    def lines(self) -> list[str]:
        out = [f"{c.file}: {c.what}{' to ' + c.to if c.to else ''}"
               f"{' (' + c.note + ')' if c.note else ''}"
               for c in sorted(self.moved + self.changed + self.vanished + self.appeared,
                               key=lambda c: c.file)]
        verdict = "all HomeAgent files match" if self.ok else "HomeAgent files differ"
        return out + [f"{verdict}: {self.matched} unchanged, {len(self.moved)} moved by fsmem, "
                      f"{len(self.changed)} changed, {len(self.vanished)} vanished, "
                      f"{len(self.appeared)} appeared (report of {self.created_at})"]


def _moved_candidates(root: str) -> list[str]:
    """Where fsmem moves HomeAgent files by design: the documents it recalled or removed,
    and the renamed ``context.json.adopted*``."""
    out = []
    for where in _MOVED_DIRS:
        base = os.path.join(root, ".fsmem", where)
        try:
            out += [f".fsmem/{where}/{n}" for n in sorted(os.listdir(base))]
        except (FileNotFoundError, NotADirectoryError):
            pass
    try:
        out += [n for n in sorted(os.listdir(root)) if n.startswith("context.json.adopted")]
    except FileNotFoundError:
        pass
    return [p for p in out if _regular(os.path.join(root, p))]


def verify_report(root: str) -> Verification:
    """Hash every HomeAgent file again against ``.fsmem/legacy-report.json``; a reader: no
    lock, nothing written. NotFound when there is no report."""
    import json  # lazy: start-up, loaded only when used (+json)
    path = os.path.join(root, ".fsmem", REPORT_FILE)
    try:
        raw = read_small(path, _MAX_DOC)
    except FileNotFoundError as exc:
        raise NotFound(f"{path}: no report (fsmem adopt or fsmem stats --legacy --save "
                       "writes it)") from exc
    try:
        data = json.loads(raw)
        files = {str(k): str(v["blake3"]) for k, v in data["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FormatError(f"{path}: not a legacy report ({exc})") from exc
    if data.get("format") != REPORT_FORMAT:
        raise FormatError(f"{path}: report format {data.get('format')!r}; this fsmem reads "
                          f"{REPORT_FORMAT}")
    now = _hashes(root, legacy_files(root))
    v = Verification(report=path, created_at=str(data.get("created_at") or ""), matched=0,
                     moved=[], changed=[], vanished=[], appeared=[])
    gone = []
    for rel, digest in sorted(files.items()):
        if rel not in now:
            gone.append(rel)
        elif now[rel]["blake3"] == digest:
            v.matched += 1
        else:
            note = "fsmem writes graph.db too (distill, fsmem graph)" if rel == "graph.db" else ""
            v.changed.append(Change(file=rel, what="changed", note=note))
    if gone:
        aside = {h["blake3"]: p for p, h in _hashes(root, _moved_candidates(root)).items()}
        for rel in gone:
            if files[rel] in aside:
                v.moved.append(Change(file=rel, what="moved by fsmem", to=aside[files[rel]]))
            else:
                v.vanished.append(Change(file=rel, what="vanished"))
    v.appeared = [Change(file=rel, what="appeared") for rel in sorted(set(now) - set(files))]
    v.ok = not (v.changed or v.vanished or v.appeared)
    return v
