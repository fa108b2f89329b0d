"""Importers for foreign exports people have: ChatGPT's ``conversations.json``.

Each conversation becomes one L2 unit (summary = its title, id ``chatgpt-<conversation id>``),
each message on the path from the root to ``current_node`` one event in tree order: user text
is the event's input, assistant text its response, timestamps are ``create_time`` kept to the
microsecond. The whole file is parsed and every unit staged before anything is published (one
journal entry), so a bad file imports nothing; unit ids make re-import a no-op.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat as _stat
from dataclasses import dataclass, field
from typing import Any

import msgspec

from fsmem.format.errors import FormatError, NotFound
from fsmem.format.model import FORMAT_VERSION, Event, Manifest
from fsmem.format.timestamps import Timestamp
from fsmem.ingest.archive import ImportReport, publish_staged
from fsmem.search.lazy_vectors import stores_vectors

__all__ = ["ChatConversation", "parse_chatgpt", "import_chatgpt", "CHATGPT_SOURCE"]

log = logging.getLogger("fsmem.importers")

CHATGPT_SOURCE = "chatgpt"
MAX_FILE = 2 << 30
_ID_SAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass
class ChatConversation:
    unit_id: str
    title: str
    created_at: Timestamp
    events: list[Event] = field(default_factory=list)


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


def _message_text(msg: dict, where: str) -> str:
    content = msg.get("content") or {}
    if not isinstance(content, dict):
        raise FormatError(f"{where}: content must be an object")
    if isinstance(content.get("text"), str):
        return content["text"]
    parts = content.get("parts") or []
    if not isinstance(parts, list):
        raise FormatError(f"{where}: content.parts must be a list")
    texts = [p for p in parts if isinstance(p, str)]
    if len(texts) != len(parts):
        log.info("%s: %d non-text parts (asset pointers) not imported", where,
                 len(parts) - len(texts))
    return "\n".join(texts)


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
        text = _message_text(msg, mwhere)
        if not text.strip():
            continue   # empty system prompts, hidden tool calls: nothing to keep
        ts = _ts(msg.get("create_time"), mwhere) or last
        last = ts
        eid = _safe_id("cg-", msg.get("id") or node.get("id"), mwhere)
        if role == "assistant":
            ev = Event(id=eid, timestamp=ts, source=CHATGPT_SOURCE, role=role, response=text)
        else:
            ev = Event(id=eid, timestamp=ts, source=CHATGPT_SOURCE, role=str(role), input=text)
        out.events.append(ev)
    return out


def parse_chatgpt(path: str) -> list[ChatConversation]:
    """Every conversation of a ``conversations.json`` file; FormatError naming the entry."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not _stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE:
            raise FormatError(f"{path}: not a regular file of at most {MAX_FILE} bytes")
        raw = fh.read()
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


def _stage(mem: Any, conv: ChatConversation) -> str:
    """Build one unit in staging (not published); returns its staging path."""
    builder = mem.store.builder(conv.unit_id)
    try:
        records, texts = [], []
        for ev in conv.events:
            rec, rec_texts = mem._write_event(builder, ev, [])
            records.append(rec)
            texts.extend(rec_texts)
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


def import_chatgpt(mem: Any, path: str) -> ImportReport:
    """Import a ChatGPT export into L2, all or nothing, exactly once by conversation id."""
    convs = parse_chatgpt(path)
    report = ImportReport()
    staged: list[str] = []
    try:
        with mem.store.locked():  # the id check and the publish see the same store
            todo = _stage_new(mem, convs, path, report, staged)
            publish_staged(mem.store, todo, "import-chatgpt")
        staged.clear()
        report.imported = [uid for _, _, uid, _ in todo]
    finally:
        for p in staged:
            shutil.rmtree(p, ignore_errors=True)
    for uid in report.imported:
        mem._indexed(uid, "documents", added=True)
    return report


def _stage_new(mem: Any, convs: list[ChatConversation], path: str, report: ImportReport,
               staged: list[str]) -> list[tuple[str, str, str, None]]:
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
        staged.append(_stage(mem, conv))
        todo.append((staged[-1], "documents", conv.unit_id, None))
    return todo

