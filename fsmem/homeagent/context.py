"""Adoption of HomeAgent's ``context.json`` into L1: an explicit step, never a read's side effect.

``plan`` says what ``adopt`` would do (``fsmem adopt --dry-run``); ``adopt`` (``fsmem adopt``,
``Memory.open(..., adopt=True)``) writes each ``context.json`` into its own context unit and
renames the file to the first free name of ``context.json.adopted``, ``.adopted.2``, … (never
over an earlier one). Event ids: a HomeAgent ``id`` when it is a valid id, else derived from
(timestamp, source, input, response) plus the occurrence number, so two identical id-less
events get two ids, the same in every run. An event already in the store under that id (the
same event written again by a HomeAgent that kept running) is not adopted twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fsmem.format import fsops as fsops
from fsmem.format.errors import FormatError, FsmemError
from fsmem.format.model import NAME_RE, EventRecord, ToolResult
from fsmem.homeagent.documents import (
    LegacyMedia,
    Sink,
    _add_media,
    _media_of_block,
    _read_json,
    _strs,
    _ts,
    keeps_files,
    legacy_counts,
    unread_files,
)

if TYPE_CHECKING:
    from fsmem.format.layout import Layout

__all__ = ["AdoptionPlan", "plan", "adopt", "CONTEXT_FILE"]

log = logging.getLogger("fsmem.legacy")
CONTEXT_FILE = "context.json"


class Source(Protocol):
    """What planning an adoption reads (a ``Reader`` or ``Memory`` is one)."""

    root: str
    layout: "Layout"


@dataclass
class AdoptionPlan:
    """What adopting ``context.json`` does: the unit, the events new to the store, the name
    the file will get, and what is only reported (legacy documents, unread files)."""

    path: str = ""
    unit_id: str = ""
    events: int = 0
    new_events: int = 0
    rename_to: str = ""
    already_adopted: bool = False
    legacy_documents: int = 0
    unread: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    changed: bool = False        # the file changed while it was adopted: left for next time
    stat: tuple[int, int, int] = (0, 0, 0)   # (inode, size, mtime) of the file read

    def lines(self) -> list[str]:
        out = []
        if self.path:
            what = ("already adopted (finishing the rename)" if self.already_adopted else
                    f"{self.events} events, {self.new_events} new, into context/{self.unit_id}")
            out.append(f"context.json: {what}; renamed to {os.path.basename(self.rename_to)}")
        else:
            out.append("context.json: none to adopt")
        out += [f"  not kept: {d}" for d in self.dropped]
        out.append(f"documents/: {self.legacy_documents} HomeAgent documents stay in place, "
                   "read through the fallback path (recall moves each into a unit)")
        out += [f"not read (kept as it is): {p}" for p in self.unread]
        return out


def _identity(path: str) -> tuple[int, int, int]:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return (0, 0, 0)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _free_name(root: str) -> str:
    path = os.path.join(root, CONTEXT_FILE + ".adopted")
    n = 1
    while os.path.lexists(path):
        n += 1
        path = os.path.join(root, f"{CONTEXT_FILE}.adopted.{n}")
    return path


def _events(raw: Any, path: str, dropped: list[str]) -> list[dict]:
    """Parse context.json events (reference section 3), with their derived ids."""
    if not isinstance(raw, list):
        raise FormatError(f"{path}: expected a JSON array of events")
    out, seen = [], {}
    for i, e in enumerate(raw):
        where = f"{path}: [{i}]"
        if not isinstance(e, dict):
            raise FormatError(f"{where}: expected an object")
        media = [LegacyMedia(sha256=d.lower()) for d in e.get("media") or [] if isinstance(d, str)]
        media += [m for j, b in enumerate(e.get("blocks") or [])
                  if (m := _media_of_block(b, f"[{i}].blocks[{j}]", dropped)) is not None]
        results = []
        for j, tr in enumerate(e.get("tool_results") or []):
            if not isinstance(tr, dict):
                raise FormatError(f"{where}.tool_results[{j}]: expected an object")
            results.append((str(tr.get("name") or ""), str(tr.get("output") or "")))
        ev = dict(timestamp=_ts(e.get("timestamp"), f"{where}.timestamp"),
                  source=str(e.get("source") or ""), input=str(e.get("input") or ""),
                  response=str(e.get("response") or ""),
                  tools_used=_strs(e.get("tools_used"), f"{where}.tools_used"),
                  tool_results=results, media=media, legacy_id=str(e.get("id") or ""))
        if NAME_RE.match(ev["legacy_id"] or "-"):
            ev["id"] = ev["legacy_id"]
        else:
            key = json.dumps([ev["timestamp"].isoformat(), ev["source"], ev["input"],
                              ev["response"]], ensure_ascii=False)
            seen[key] = seen.get(key, 0) + 1
            suffix = "" if seen[key] == 1 else f":{seen[key]}"
            ev["id"] = "e-" + hashlib.sha256((key + suffix).encode()).hexdigest()[:24]
        out.append(ev)
    return out


def _store_event_ids(mem: Source) -> set[str]:
    from fsmem.format.unit import read_manifest  # lazy: start-up, loaded only when used (+blake3)
    ids: set[str] = set()
    for layer in mem.layout.layers():
        for unit_id in mem.layout.iter_units(layer):
            try:
                ids.update(ev.id for ev in read_manifest(mem.layout.unit_dir(layer, unit_id)).events)
            except (FsmemError, OSError):
                continue
    return ids


def plan(mem: Source) -> tuple[AdoptionPlan, list[dict], bytes]:
    """What ``adopt`` would do, changing nothing."""
    p = AdoptionPlan(legacy_documents=legacy_counts(mem.root)[0], unread=unread_files(mem.root))
    path = os.path.join(mem.root, CONTEXT_FILE)
    if not os.path.isfile(path) or os.path.islink(path):
        return p, [], b""
    p.stat = _identity(path)
    data = _read_json(path)
    raw = json.dumps(data, sort_keys=True, ensure_ascii=False).encode()
    p.path, p.rename_to = path, _free_name(mem.root)
    p.unit_id = "u-context-json-" + hashlib.sha256(raw).hexdigest()[:12]
    p.already_adopted = any(os.path.isdir(mem.layout.unit_dir(layer, p.unit_id))
                            for layer in mem.layout.layers())
    events = _events(data, path, p.dropped)
    have = _store_event_ids(mem)
    fresh = [e for e in events if e["id"] not in have]
    p.events, p.new_events = len(events), len(fresh)
    return p, fresh, raw


def adopt(mem: Sink, *, dry_run: bool = False) -> AdoptionPlan:
    """Adopt ``context.json`` (if any) into its own context unit, then rename it to the first
    free ``context.json.adopted[.N]``. Takes the writer lock; logs what it did."""
    if dry_run:
        return plan(mem)[0]
    with mem.store.locked():
        p, fresh, _ = plan(mem)
        if not p.path:
            return p
        if not p.already_adopted and fresh:
            _write(mem, p, fresh)
        if _identity(p.path) != p.stat:
            # HomeAgent rewrote it meanwhile: what was read is adopted; the new content
            # stays in context.json for the next adoption (its old events are not doubled).
            p.changed = True
            log.warning("%s changed while it was adopted; left in place for the next "
                        "fsmem adopt", p.path)
            return p
        if keeps_files(mem):   # HomeAgent's file stays: its events are known by their ids
            p.rename_to = p.path
        else:
            fsops.rename(p.path, p.rename_to)
            if mem.store.sync:
                fsops.fsync_dir(mem.root)
    for d in p.dropped:
        log.warning("%s: %s not kept", p.path, d)
    log.warning("adopted %d of %d events of %s into context/%s; the file is now %s",
                p.new_events, p.events, p.path, p.unit_id, os.path.basename(p.rename_to))
    return p


def _write(mem: Sink, p: AdoptionPlan, events: list[dict]) -> None:
    def fill(builder) -> tuple[list, list]:
        records, texts = [], []
        for e in events:
            eid, ts = e["id"], e["timestamp"]
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
            extra = _add_media(mem, builder, e["media"], ts, f"{p.path} event {eid}")
            inline = {m.legacy_id: m.text for m in e["media"] if m.text}
            for ref in extra:
                if ref.modality == "text" and inline.get(ref.legacy_id):
                    texts.append((f"{eid}:{ref.digest}",
                                  mem.plugins.source_text(e["source"], inline[ref.legacy_id])))
            records.append(EventRecord(id=eid, timestamp=ts, source=e["source"],
                                       tools_used=e["tools_used"], tool_results=results,
                                       blocks=blocks + extra,
                                       legacy_id=e["legacy_id"] if e["legacy_id"] != eid else ""))
        records.sort(key=lambda r: (r.timestamp.ns, r.id))
        return records, [(k, t) for k, t in texts if t.strip()]
    mem.write_unit("context", fill, unit_id=p.unit_id, source="context.json",
                   meta={"adopted_from": os.path.basename(p.rename_to)})
