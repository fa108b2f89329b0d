"""Importers for foreign exports people have: ChatGPT's export ``.zip`` as downloaded, or its
``conversations.json`` alone.

Each conversation becomes one L2 unit (summary = its title, id ``chatgpt-<conversation id>``),
each message on the path from the root to ``current_node`` one event in tree order: user text
is the event's input, assistant text its response, timestamps are ``create_time`` kept to the
microsecond. An image part (``image_asset_pointer``) becomes a media block of its event, read
from the zip member its pointer names (``file-service://file-<id>`` or ``sediment://file_<hex>``:
a member ``file-<id>-<name>.png``, ``file_<hex>-<uuid>.png`` anywhere in the zip), its MIME type
sniffed from the bytes; a pointer without a readable image is named in the report. The zip is
checked whole first (``fsmem.ingest.safezip``: never extracted), the whole export is parsed and
every unit staged before anything is published (one journal entry), so a bad export imports
nothing; unit ids make re-import a no-op.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import stat as _stat
from dataclasses import dataclass, field
from typing import Any

import msgspec

from fsmem.format.errors import FormatError, NotFound
from fsmem.format.media import sniff_mime
from fsmem.format.model import FORMAT_VERSION, Event, Manifest, MediaAttachment
from fsmem.format.timestamps import Timestamp
from fsmem.ingest.archive import publish_staged
from fsmem.ingest.safezip import SafeZip, ZipLimits, is_zip
from fsmem.search.lazy_vectors import stores_vectors

__all__ = ["ChatConversation", "ChatGPTReport", "parse_chatgpt", "import_chatgpt",
           "CHATGPT_SOURCE"]

log = logging.getLogger("fsmem.importers")

CHATGPT_SOURCE = "chatgpt"
MAX_FILE = 2 << 30
_ID_SAFE = re.compile(r"[^A-Za-z0-9_-]")
_FILE_ID = re.compile(r"^(file[-_][A-Za-z0-9]+)(?=[-.]|$)")   # a member's name or a pointer
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
CONVERSATIONS = "conversations.json"


@dataclass
class ChatConversation:
    """One conversation, parsed: ``images`` holds each event's image pointers, in order."""

    unit_id: str
    title: str
    created_at: Timestamp
    events: list[Event] = field(default_factory=list)
    images: dict[str, list[str]] = field(default_factory=dict)


class ChatGPTReport(msgspec.Struct, kw_only=True):
    """What ``import_chatgpt`` did: units imported and already present, image blocks stored,
    and every image pointer of an imported conversation that gave no image (with why)."""

    imported: list[str] = []
    skipped: list[str] = []
    images: int = 0
    images_missing: list[str] = []

    def lines(self) -> list[str]:
        """The human report: a summary line, then one line per missing image."""
        head = (f"imported {len(self.imported)} conversations, {len(self.skipped)} already "
                f"present; {self.images} images stored, {len(self.images_missing)} missing")
        return [head, *(f"image missing: {m}" for m in self.images_missing)]


def _ts(value: Any, where: str) -> Timestamp | None:
    """``create_time`` (float seconds) to the microsecond, as the export records it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FormatError(f"{where}: create_time must be a number, got {type(value).__name__}")
    return Timestamp(round(value * 1_000_000) * 1000)


def _safe_id(prefix: str, raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise FormatError(f"{where}: missing id")
    return f"{prefix}{_ID_SAFE.sub('_', raw)}"[:128]


def _message_parts(msg: dict, where: str) -> tuple[str, list[str]]:
    """A message's text and the asset pointers of its image parts."""
    content = msg.get("content") or {}
    if not isinstance(content, dict):
        raise FormatError(f"{where}: content must be an object")
    if isinstance(content.get("text"), str):
        return content["text"], []
    parts = content.get("parts") or []
    if not isinstance(parts, list):
        raise FormatError(f"{where}: content.parts must be a list")
    texts = [p for p in parts if isinstance(p, str)]
    images = []
    for p in parts:
        if isinstance(p, dict) and p.get("content_type") == "image_asset_pointer":
            pointer = p.get("asset_pointer")
            if not isinstance(pointer, str) or not pointer:
                raise FormatError(f"{where}: an image part without an asset_pointer")
            images.append(pointer)
    if len(texts) + len(images) != len(parts):
        log.info("%s: %d parts neither text nor image (audio, code...) not imported", where,
                 len(parts) - len(texts) - len(images))
    return "\n".join(texts), images


def _path_to_current(conv: dict, where: str) -> list[dict]:
    """The messages from the root to ``current_node``, in tree order."""
    mapping = conv.get("mapping")
    if not isinstance(mapping, dict):
        raise FormatError(f"{where}: 'mapping' must be an object")
    node_id = conv.get("current_node")
    if node_id is None and mapping:   # no current node: follow the first children
        node_id = next(k for k, v in mapping.items() if not (v or {}).get("parent"))
        while mapping[node_id].get("children"):
            node_id = mapping[node_id]["children"][0]
    path, seen = [], set()
    while node_id is not None:
        node = mapping.get(node_id)
        if not isinstance(node, dict) or node_id in seen:
            raise FormatError(f"{where}: node {node_id!r} missing from mapping or in a cycle")
        seen.add(node_id)
        path.append(node)
        node_id = node.get("parent")
    return path[::-1]


def _conversation(conv: Any, index: int) -> ChatConversation:
    where = f"conversations[{index}]"
    if not isinstance(conv, dict):
        raise FormatError(f"{where}: must be an object")
    cid = conv.get("conversation_id") or conv.get("id")
    title = conv.get("title") or ""
    if not isinstance(title, str):
        raise FormatError(f"{where}: title must be text")
    created = _ts(conv.get("create_time"), where) or Timestamp(0)
    out = ChatConversation(unit_id=_safe_id("chatgpt-", cid, where), title=title,
                           created_at=created)
    last = created
    for node in _path_to_current(conv, where):
        msg = node.get("message")
        if msg is None:
            continue
        mwhere = f"{where} message {node.get('id')!r}"
        if not isinstance(msg, dict):
            raise FormatError(f"{mwhere}: must be an object")
        role = (msg.get("author") or {}).get("role", "")
        text, images = _message_parts(msg, mwhere)
        if not text.strip() and not images:
            continue   # empty system prompts, hidden tool calls: nothing to keep
        ts = _ts(msg.get("create_time"), mwhere) or last
        last = ts
        eid = _safe_id("cg-", msg.get("id") or node.get("id"), mwhere)
        if role == "assistant":
            ev = Event(id=eid, timestamp=ts, source=CHATGPT_SOURCE, role=role, response=text)
        else:
            ev = Event(id=eid, timestamp=ts, source=CHATGPT_SOURCE, role=str(role), input=text)
        out.events.append(ev)
        if images:
            out.images[eid] = images
    return out


def _open_export(path: str) -> Any:
    """The export file opened as hostile input: no symlink followed, no FIFO waited on, a
    regular file (FormatError naming it otherwise)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FormatError(f"{path}: a symbolic link (never followed)") from exc
        raise
    fh = os.fdopen(fd, "rb")
    if not _stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise FormatError(f"{path}: not a regular file")
    return fh


def _read_export(fh: Any, path: str, limits: ZipLimits
                 ) -> tuple[list[ChatConversation], SafeZip | None]:
    """The conversations of the open export, and its zip (the caller closes it) if it is one:
    a zip is checked whole first (never extracted); a JSON file is read whole, at most
    MAX_FILE bytes."""
    if is_zip(fh.read(4)):
        zf = SafeZip(path, fh, limits)
        try:
            return _parse(*_conversations_member(zf)), zf
        except BaseException:
            zf.close()
            raise
    if os.fstat(fh.fileno()).st_size > MAX_FILE:
        raise FormatError(f"{path}: over {MAX_FILE} bytes")
    fh.seek(0)
    return _parse(fh.read(MAX_FILE + 1), path), None


def parse_chatgpt(path: str) -> list[ChatConversation]:
    """Every conversation of a ``conversations.json`` file (or of the one in an export zip);
    FormatError naming the entry."""
    with _open_export(path) as fh:
        convs, zf = _read_export(fh, path, ZipLimits())
        if zf is not None:
            zf.close()
        return convs


def _conversations_member(zf: SafeZip) -> tuple[bytes, str]:
    """(bytes, where) of the zip's ``conversations.json``: at the top, or in one top folder."""
    found = [n for n in zf.names if n == CONVERSATIONS or (
        n.endswith("/" + CONVERSATIONS) and n.count("/") == 1)]
    if not found:
        raise FormatError(f"{zf.path}: no {CONVERSATIONS} at the top of the zip (or in one "
                          "top folder): not a ChatGPT export")
    if len(found) > 1:
        raise FormatError(f"{zf.path}: more than one {CONVERSATIONS} ({', '.join(found)})")
    return zf.read(found[0]), f"{zf.path}: {found[0]}"


def _parse(raw: bytes, path: str) -> list[ChatConversation]:
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise FormatError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(data, list):
        raise FormatError(f"{path}: want a list of conversations, got {type(data).__name__}")
    try:
        convs = [_conversation(c, i) for i, c in enumerate(data)]
    except FormatError as exc:
        raise FormatError(f"{path}: {exc}") from exc
    ids = [c.unit_id for c in convs]
    if len(set(ids)) != len(ids):
        raise FormatError(f"{path}: a conversation id appears twice")
    return convs


class _Images:
    """The image files of an export by file id (``file-<id>``, ``file_<hex>``), read from the
    zip one at a time; without a zip (conversations.json alone) every pointer is missing."""

    def __init__(self, zf: SafeZip | None) -> None:
        self.zf = zf
        self.members: dict[str, str] = {}
        for name in zf.names if zf is not None else ():
            m = _FILE_ID.match(name.rsplit("/", 1)[-1])
            if m:
                self.members.setdefault(m.group(1), name)   # sorted: the first one wins

    def attachments(self, conv: ChatConversation, ev: Event, report: ChatGPTReport
                    ) -> list[MediaAttachment]:
        out = []
        for pointer in conv.images.get(ev.id, ()):
            m = _FILE_ID.match(pointer.split("://", 1)[-1])
            member = self.members.get(m.group(1)) if m else None
            where = f"{pointer} in {conv.unit_id} message {ev.id}"
            if member is None:
                why = ("not in the zip" if self.zf is not None else "conversations.json "
                       "alone has no image files: import the .zip as downloaded")
                report.images_missing.append(f"{where}: {why}")
                continue
            assert self.zf is not None
            data = self.zf.read(member)
            mime = sniff_mime(data[:64])
            if mime is None or not mime.startswith("image/"):
                report.images_missing.append(f"{where}: {member} is not a recognised image")
                continue
            name = _CONTROL.sub("_", member.rsplit("/", 1)[-1])[:200]
            out.append(MediaAttachment(data=data, mime=mime, name=name))
        return out


def _stage(mem: Any, conv: ChatConversation, images: _Images, report: ChatGPTReport
           ) -> str | None:
    """Build one unit in staging (not published); returns its staging path (None: no event
    was left to write, its only content being images that were not found)."""
    builder = mem.store.builder(conv.unit_id)
    try:
        records, texts = [], []
        for ev in conv.events:
            atts = images.attachments(conv, ev, report)
            if atts:
                ev = msgspec.structs.replace(ev, attachments=atts)
                report.images += len(atts)
            elif not (ev.input.strip() or ev.response.strip()):
                continue   # its only content was images, none of them found (reported)
            rec, rec_texts = mem._write_event(builder, ev, [])
            del atts, ev   # one event's images in memory at a time
            records.append(rec)
            texts.extend(rec_texts)
        if not records:
            shutil.rmtree(builder.path, ignore_errors=True)
            return None
        now = Timestamp.now()
        manifest = Manifest(format=FORMAT_VERSION, id=conv.unit_id, created_at=conv.created_at,
                            updated_at=now, events=records, summary=conv.title,
                            source=CHATGPT_SOURCE, embedder=mem.embedder.fingerprint)
        if stores_vectors(mem):   # else computed on first use, as for a commit
            manifest.vectors = mem._embed_rows(builder, [(k, t) for k, t in texts if t.strip()])
        builder.finish(manifest)
    except BaseException:
        shutil.rmtree(builder.path, ignore_errors=True)
        raise
    return builder.path


def import_chatgpt(mem: Any, path: str, *, limits: ZipLimits = ZipLimits()) -> ChatGPTReport:
    """Import a ChatGPT export (the ``.zip`` as downloaded, or ``conversations.json``) into
    L2, all or nothing, exactly once by conversation id; ``limits`` caps what a zip may hold."""
    report = ChatGPTReport()
    with _open_export(path) as fh:
        convs, zf = _read_export(fh, path, limits)
        try:
            _import(mem, convs, path, _Images(zf), report)
        finally:
            if zf is not None:
                zf.close()
    return report


def _import(mem: Any, convs: list[ChatConversation], path: str, images: _Images,
            report: ChatGPTReport) -> None:
    staged: list[str] = []
    try:
        with mem.store.locked():  # the id check and the publish see the same store
            todo = _stage_new(mem, convs, path, images, report, staged)
            publish_staged(mem.store, todo, "import-chatgpt")
        staged.clear()
        report.imported = [uid for _, _, uid, _ in todo]
    finally:
        for p in staged:
            shutil.rmtree(p, ignore_errors=True)
    for uid in report.imported:
        mem._indexed(uid, "documents", added=True)


def _stage_new(mem: Any, convs: list[ChatConversation], path: str, images: _Images,
               report: ChatGPTReport, staged: list[str]) -> list[tuple[str, str, str, None]]:
    todo = []
    for conv in convs:
        try:
            mem.store.locate(conv.unit_id)
            report.skipped.append(conv.unit_id)
            continue
        except NotFound:
            pass
        if not conv.events:
            log.info("%s: conversation %s has no message; skipped", path, conv.unit_id)
            continue
        staged_at = _stage(mem, conv, images, report)
        if staged_at is None:
            log.info("%s: conversation %s has nothing left to import; skipped", path,
                     conv.unit_id)
            continue
        staged.append(staged_at)
        todo.append((staged_at, "documents", conv.unit_id, None))
    return todo

