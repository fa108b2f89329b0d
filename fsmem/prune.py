"""Prune (L1 → L2), HomeAgent semantics, exactly once through the journal.

When L1 holds more than ``context_capacity`` events: the ``context_protected`` events that
arrived in L1 most recently stay (arrival, not event time); the others are ranked by cosine
similarity of their stored vectors to the query; the best stay up to capacity; the rest move
whole into ONE new L2 unit. Blocks move by hard link (same inode, never re-encoded) and their
vector rows are copied bit for bit. A unit that keeps some events is replaced by a remainder
unit holding exactly those, with the same arrival time.
"""

from __future__ import annotations

import logging
import shutil
from typing import TYPE_CHECKING, Callable

import numpy as np

from .model import FORMAT_VERSION, EventRecord, Manifest
from .store import JournalEntry, new_unit_id
from .timestamps import Timestamp

if TYPE_CHECKING:
    from .flows import Memory, _Loaded

__all__ = ["prune_context", "select_evictions"]

log = logging.getLogger(__name__)


def _event_vector(unit: "_Loaded", rec: EventRecord) -> np.ndarray | None:
    rows = [v for k, v in unit.rows.items() if k.split(":", 1)[0] == rec.id]
    if not rows:
        return None
    v = np.sum(rows, axis=0)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else None


def select_evictions(units: list["_Loaded"], capacity: int, protected: int,
                     similarity: Callable[["_Loaded", EventRecord], float]) -> set[str]:
    """Event ids to move out of L1 (empty when L1 is within capacity)."""
    events = [(u, rec) for u in units for rec in u.manifest.events]
    if len(events) <= capacity:
        return set()
    # Arrival order: unit arrival (directory mtime), then event time within a unit.
    events.sort(key=lambda p: (p[0].arrival_ns, p[0].unit_id, p[1].timestamp.ns, p[1].id))
    keep_protected = events[len(events) - protected:] if protected else []
    candidates = events[:len(events) - protected] if protected else events
    slots = capacity - len(keep_protected)
    ranked = sorted(candidates, reverse=True,  # ties: keep the more recent
                    key=lambda p: (similarity(*p), p[1].timestamp.ns, p[1].id))
    return {rec.id for _, rec in ranked[slots:]}


def _similarity(mem: "Memory", units: list["_Loaded"], query: str
                ) -> Callable[["_Loaded", EventRecord], float]:
    """How close each L1 event is to the query, in the ranker's terms: BM25 over the events'
    compute-layer text (the default: no embedder call), or the cosine of their stored
    vectors to the embedded query (dense rankers: one embedder call, for the query)."""
    if not query.strip():
        return lambda unit, rec: 0.0
    if mem.ranker == "bm25":
        from .index import bm25_scores, event_texts, term_counts
        pairs = [(u, r) for u in units for r in u.manifest.events]
        docs = [term_counts(event_texts(mem, u.path, r)) for u, r in pairs]
        scores = dict(zip((r.id for _, r in pairs), bm25_scores(docs, query)))
        return lambda unit, rec: float(scores.get(rec.id, 0.0))
    qv = mem.embedder.embed([query])[0]

    def cosine(unit: "_Loaded", rec: EventRecord) -> float:
        vec = _event_vector(unit, rec)
        return float(vec @ qv) if vec is not None else 0.0
    return cosine


def prune_context(mem: "Memory", query: str) -> str | None:
    store = mem.store
    with store.locked():
        units = mem._load_layer("context", with_vectors=True)
        if sum(len(u.manifest.events) for u in units) <= mem.context_capacity:
            return None
        evict = select_evictions(units, mem.context_capacity, mem.context_protected,
                                 _similarity(mem, units, query))
        if not evict:
            return None
        entry = JournalEntry(id=new_unit_id("j"), op="prune", created_at=Timestamp.now())
        staged = []
        try:
            l2_id = _stage(mem, [(u, r) for u in units for r in u.manifest.events
                                 if r.id in evict], entry, "documents", archive=True)
            staged.append(entry.publish[-1][0])
            for u in units:
                ids = {r.id for r in u.manifest.events}
                if not ids & evict:
                    continue
                entry.remove.append(("context", u.unit_id))
                rest = [(u, r) for r in u.manifest.events if r.id not in evict]
                if rest:
                    rid = _stage(mem, rest, entry, "context", archive=False, base=u.manifest)
                    entry.mtimes[rid] = u.arrival_ns
                    staged.append(entry.publish[-1][0])
            store.journal_commit(entry)
        except BaseException:
            for name in staged:
                shutil.rmtree(f"{store.staging}/{name}", ignore_errors=True)
            raise
        store.journal_apply(entry)
        mem._indexed(l2_id, "documents", added=True)
        log.info("pruned %d events from L1 into %s", len(evict), l2_id)
        return l2_id


def _stage(mem: "Memory", pairs: list[tuple["_Loaded", EventRecord]], entry: JournalEntry,
           layer: str, *, archive: bool, base: Manifest | None = None) -> str:
    """Build one unit from existing events in staging (links, copied vector rows)."""
    store = mem.store
    builder = store.builder(new_unit_id("u"))
    keys, rows, records = [], [], []
    for unit, rec in pairs:
        for ref in rec.blocks:
            builder.add_existing(unit.path, ref)
        records.append(rec)
        for k, v in unit.rows.items():
            if k.split(":", 1)[0] == rec.id:
                keys.append(k)
                rows.append(v)
    records.sort(key=lambda r: (r.timestamp.ns, r.id))
    now = Timestamp.now()
    if archive:
        sources = sorted({r.source for r in records})
        summary = (f"{len(records)} archived events from {', '.join(sources)}, "
                   f"{records[0].timestamp.isoformat()} .. {records[-1].timestamp.isoformat()}")
        manifest = Manifest(format=FORMAT_VERSION, id=builder.unit_id, created_at=now,
                            updated_at=now, events=records, summary=summary,
                            source="context_archived", meta={"is_archived_context": "true"},
                            embedder=mem.embedder.fingerprint)
    else:
        assert base is not None
        manifest = Manifest(format=FORMAT_VERSION, id=builder.unit_id, created_at=base.created_at,
                            updated_at=now, events=records, summary=base.summary,
                            tags=base.tags, entities=base.entities, source=base.source,
                            meta=base.meta, access_count=base.access_count,
                            last_access=base.last_access, embedder=base.embedder)
    if keys:
        manifest.vectors = builder.set_vectors(keys, np.stack(rows), mem.embedder.fingerprint)
    builder.finish(manifest)
    name = builder.path.rsplit("/", 1)[1]
    entry.publish.append((name, layer, builder.unit_id))
    return builder.unit_id


def watermark(capacity, protected, *, context_tokens, avg_event_tokens=2000):
    return capacity
