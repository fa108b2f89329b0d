"""Read-side views: events hydrated from their blocks, documents, hits, the content view.

A view is never memory: ``Document.content`` is rendered from the events on demand, whole.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import msgspec

from fsmem.format.blocks import read_block
from fsmem.format.errors import FsmemError
from fsmem.format.model import BlockRef, Event, EventRecord, Manifest, ToolOutput
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import block_path

__all__ = ["Document", "Hit", "Fact", "hydrate_event", "content_view", "matched_view",
           "event_text", "summary_label", "unit_label", "LABEL_CHARS"]

LABEL_CHARS = 100   # a label made from a unit's text is cut here (a view: the text stays whole)


def _text(unit_dir: str, ref: BlockRef) -> str:
    return read_block(block_path(unit_dir, ref), ref.digest).decode("utf-8")


def hydrate_event(unit_dir: str, unit_id: str, rec: EventRecord, agent: str = "") -> Event:
    """An event with its text read from its text blocks (each verified by BLAKE3)."""
    by_digest = {ref.digest: ref for ref in rec.blocks}
    inp = next((r for r in rec.blocks if r.role == "input" and r.modality == "text"), None)
    resp = next((r for r in rec.blocks if r.role == "response" and r.modality == "text"), None)
    results = [ToolOutput(name=tr.name, output=_text(unit_dir, by_digest[tr.block]))
               for tr in rec.tool_results]
    texts = {r.digest: _text(unit_dir, r) for r in rec.blocks
             if r.role == "attachment" and r.modality == "text"}
    return Event(id=rec.id, timestamp=rec.timestamp, source=rec.source, role=rec.role,
                 input=_text(unit_dir, inp) if inp else "",
                 response=_text(unit_dir, resp) if resp else "",
                 tools_used=list(rec.tools_used), tool_results=results,
                 blocks=list(rec.blocks), unit_id=unit_id, texts=texts, agent=agent)


def said_by(source: str, text: str) -> bool:
    """Whether ``text`` already names its speaker ("Tom: got it" from Tom): a view then
    shows it once, not "Tom: Tom: got it"."""
    return bool(source) and text.startswith(source + ":")


def wall_clock(ts: Timestamp) -> str:
    """``2025-04-05 21:22:47``: the wall-clock time in the event's own offset, as the
    timeline shows it (without the offset: the model reads times, not zones)."""
    try:
        return ts.strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError):   # beyond datetime's years 1..9999
        return ts.isoformat()


def event_text(event: Event, *, compact: bool = False) -> str:
    """One event as a person reads it: full timestamp, source, full texts, media labels.
    ``compact`` (a hit in the model's view): the timeline's wall-clock time, and the
    source once when the text already begins with it."""
    if compact:
        who = "" if said_by(event.source, event.input) else f" {event.source}:"
        line = f"[{wall_clock(event.timestamp)}]{who} {event.input}"
    else:
        line = f"[{event.timestamp.isoformat()}] {event.source}: {event.input}"
    if event.tools_used:
        line += " → tools: " + ", ".join(event.tools_used)
    if event.response:
        line += f" → {event.response}"
    for tr in event.tool_results:
        line += f"\n  [tool] {tr.name}: {tr.output}"
    for digest, text in event.texts.items():
        line += f"\n  [text {digest[:8]}] {text}"
    for ref in event.blocks:
        if ref.modality != "text":
            dims = f" {ref.width}×{ref.height}" if ref.width and ref.height else ""
            label = f" {ref.name}" if ref.name else ""
            line += f"\n  [{ref.mime}{dims} {ref.digest[:8]}{label}]"
    return line


def content_view(events: list[Event]) -> str:
    """The SDK's Doc.content: every event rendered whole, in timestamp order; never stored."""
    ordered = sorted(events, key=lambda e: (e.timestamp.ns, e.id))
    return "\n".join(event_text(e) for e in ordered)


#: a hit's view keeps these neighbours of each matched event (before, after): the turn a
#: reply answers, and the reply to a matched question
MATCH_CONTEXT = (1, 1)


def matched_view(events: list[Event], matched: Iterable[str],
                 near: Iterable[Event] = ()) -> str:
    """A hit's text as the model's view shows it: where the query matched some events of a
    unit, those events and their neighbours (``MATCH_CONTEXT``), in timestamp order, "…"
    where events are left out; every event when nothing is left out or nothing matched.
    ``near``: conversation turns other units hold next to the matched ones (the question a
    reply answers, the reply: ``Hit.events_near``), shown in their place in time. Each event
    a compact line (``event_text``). Never stored: the unit stays whole (recall brings all
    of it, not the turns borrowed from other units)."""
    own = sorted(events, key=lambda e: (e.timestamp.ns, e.id))
    ids = {e.id for e in own}
    near = [e for e in near if e.id not in ids]
    ordered = sorted([*own, *near], key=lambda e: (e.timestamp.ns, e.id))
    pos = {e.id: i for i, e in enumerate(ordered)}
    at = [pos[m] for m in matched if m in ids]
    if not at:
        return "\n".join(event_text(e, compact=True) for e in own)
    before, after = MATCH_CONTEXT
    # the matched events' neighbours in time, the borrowed turns among them: a reply
    # archived apart is next to its question
    keep = {j for p in at for j in range(p - before, p + after + 1) if 0 <= j < len(ordered)}
    keep |= {pos[e.id] for e in near}
    if ids <= {ordered[j].id for j in keep}:   # the unit whole: nothing of it left out
        keep = set(range(len(ordered)))
    parts: list[str] = []
    for j, e in enumerate(ordered):
        if j in keep:
            parts.append(event_text(e, compact=True))
        elif not parts or parts[-1] != "…":
            parts.append("…")
    return "\n".join(parts)


def hit_label(doc: "Document") -> str:
    """A hit's label in the model's view: the unit's summary, except that an L1 archive's
    own (prune writes "N archived events from A, B, <ISO> .. <ISO>") is told in fewer
    tokens, its speakers left to the lines below and its times as the timeline's:
    "N archived events, 2025-04-12 17:41:17 .. 17:55:02"."""
    times = sorted((e.timestamp for e in doc.events), key=lambda t: t.ns)
    if not (times and doc.meta.get("is_archived_context") == "true"
            and doc.summary.startswith(f"{len(doc.events)} archived events from ")):
        return doc.summary
    first, last = wall_clock(times[0]), wall_clock(times[-1])
    if last[:10] == first[:10]:
        last = last[11:]
    return f"{len(doc.events)} archived events, {first} .. {last}"


def summary_label(summary: str, texts: Iterable[str]) -> str:
    """The one rule every view labels a unit by (ls, query, search, the MCP tools, ``Hit``):
    the summary its writer gave, whole; a unit stored without one (a plain commit, an L1
    turn) is labelled by the first non-blank text of its events in time order, whitespace
    collapsed, cut at ``LABEL_CHARS`` characters ("…" marks the cut). Only a view: what is
    stored stays what the writer gave, and the text stays whole."""
    if summary.strip():
        return summary
    for text in texts:
        line = " ".join(text.split())
        if line:
            return line if len(line) <= LABEL_CHARS else line[:LABEL_CHARS - 1] + "…"
    return ""


def _record_texts(unit_dir: str, records: Iterable[EventRecord]) -> Iterator[str]:
    """Each event's input, then its response, in time order, read only as far as asked."""
    for rec in sorted(records, key=lambda r: (r.timestamp.ns, r.id)):
        for role in ("input", "response"):
            ref = next((r for r in rec.blocks if r.role == role and r.modality == "text"), None)
            if ref is None:
                continue
            try:
                yield _text(unit_dir, ref)
            except (FsmemError, OSError, UnicodeDecodeError):
                continue   # a damaged block labels nothing (fsck reports it); the next may


def unit_label(unit_dir: str, manifest: Manifest) -> str:
    """``summary_label`` of a unit on disk; reads only the text blocks it needs (none when
    the unit has a summary)."""
    return summary_label(manifest.summary, _record_texts(unit_dir, manifest.events))


class Document(msgspec.Struct, kw_only=True):
    """A unit read back: its manifest fields, where it lives, and its events with text."""

    id: str
    layer: str
    path: str
    summary: str
    tags: list[str]
    entities: list[str]
    source: str
    meta: dict[str, str]
    created_at: Timestamp
    updated_at: Timestamp
    access_count: int
    last_access: Timestamp | None
    embedder: str
    events: list[Event]
    agent: str = ""        # format 4: whose unit ("" = the default agent)
    private: bool = False  # format 4: seen by its agent only

    @classmethod
    def of(cls, m: Manifest, *, layer: str, path: str, events: list[Event]) -> "Document":
        return cls(id=m.id, layer=layer, path=path, summary=m.summary, tags=list(m.tags),
                   entities=list(m.entities), source=m.source, meta=dict(m.meta),
                   created_at=m.created_at, updated_at=m.updated_at,
                   access_count=m.access_count, last_access=m.last_access,
                   embedder=m.embedder, events=events, agent=m.agent, private=m.private)

    @property
    def content(self) -> str:
        return content_view(self.events)

    @property
    def label(self) -> str:
        """The summary every view shows for this unit (``summary_label``)."""
        ordered = sorted(self.events, key=lambda e: (e.timestamp.ns, e.id))
        return summary_label(self.summary, (t for e in ordered for t in (e.input, e.response)))

    @property
    def blocks(self) -> list[BlockRef]:
        return [ref for ev in self.events for ref in ev.blocks]


class Fact(msgspec.Struct, kw_only=True):
    """A graph fact of L3 (graph.db) that a search found: subject, relation, object, and
    where it was read (the unit and event; "" when the graph does not say)."""

    subject: str
    relation: str
    object: str
    confidence: float = 0.0
    unit_id: str = ""
    event_id: str = ""

    @property
    def text(self) -> str:
        return f"{self.subject} {self.relation} {self.object}"


class Hit(msgspec.Struct, kw_only=True):
    """A query result: which unit, how well it matched, and its label. ``Reader.search``
    labels each with its ``layer`` and ``kind`` ("unit", or "fact": a graph fact found on
    its own, ``facts[0]``, whose unit is ``unit_id`` when known); ``facts``: the graph facts
    the query found that came from this unit."""

    unit_id: str
    score: float
    summary: str = ""
    layer: str = "documents"
    created_at: Timestamp | None = None
    events: int = 0
    events_matched: list[str] = []   # ids of the unit's events that matched, best first
    # (unit id, event id) of the conversation's turns next to a matched event that another
    # unit holds (the question a reply answers, the reply): shown in the hit's view only
    events_near: list[tuple[str, str]] = []
    agent: str = ""                  # format 4: whose unit ("" = the default agent)
    kind: str = "unit"               # "unit" or "fact" (Reader.search)
    facts: list[Fact] = []           # graph facts found that came from this unit
