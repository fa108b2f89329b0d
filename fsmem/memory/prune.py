"""Prune (L1 → L2), HomeAgent semantics, exactly once through the journal.

When L1 holds more than ``context_capacity`` events, it is pruned down to a low watermark
(HomeAgent's ``topK`` rule, see ``watermark``), so one prune archives a batch: the units a
recall pinned stay whole, the ``context_protected`` other events that arrived most recently
stay (arrival, not event time), the rest are ranked by similarity to the query and the best
stay up to the watermark. The evicted events are split into coherent groups (adjacent in
time: no gap over ``SESSION_GAP_NS``), one new L2 unit per group, all in ONE journal entry.
Blocks move by hard link (same inode, never re-encoded) and their vector rows are copied bit
for bit. A unit that keeps some events is replaced by a remainder unit holding exactly those,
with the same arrival time.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from fsmem.format import fsops as fsops
from fsmem.format.errors import FsmemError
from fsmem.format.layout import JournalEntry
from fsmem.format.model import FORMAT_VERSION, EventRecord, Manifest
from fsmem.format.timestamps import Timestamp
from fsmem.memory.l1cache import event_terms, load_context
from fsmem.memory.render import budget_split
from fsmem.search.lazy_vectors import embed_rows, on_demand
from fsmem.store.pins import read_pins
from fsmem.store.store import new_unit_id

if TYPE_CHECKING:
    from fsmem.memory.reader import Loaded as _Loaded
    from fsmem.memory.writer import Writer

__all__ = ["prune", "prune_context", "stage_arriving", "commit_arriving", "ArrivingPrune",
           "select_evictions", "watermark", "group_evictions",
           "AVG_EVENT_TOKENS", "SESSION_GAP_NS"]

log = logging.getLogger("fsmem.prune")

AVG_EVENT_TOKENS = 2000                   # HomeAgent's defaultAvgEventTokens
SESSION_GAP_NS = 3600 * 1_000_000_000     # a longer silence starts another archive unit


def watermark(capacity: int, protected: int, *, context_tokens: int | None,
              avg_event_tokens: int = AVG_EVENT_TOKENS) -> int:
    """How many events L1 keeps after a prune: HomeAgent's ``contextTopK`` =
    clamp(context_tokens / avg_event_tokens, >= protected + 1, <= capacity - 1).

    Without a token budget from the host, ``context_tokens`` is the context share of
    HomeAgent's budget for an unknown window (32768 tokens, empty system prompt), which is
    what HomeAgent itself falls back to: 11 at the defaults 30/10."""
    if context_tokens is None:
        context_tokens = budget_split(0, "").context_tokens
    if avg_event_tokens < 1:
        raise ValueError(f"avg_event_tokens: expected >= 1, got {avg_event_tokens!r}")
    top_k = max(context_tokens // avg_event_tokens, protected + 1)
    return max(0, min(top_k, capacity - 1))


def _event_vector(unit: "_Loaded", rec: EventRecord) -> np.ndarray | None:
    rows = [v for k, v in unit.rows.items() if k.split(":", 1)[0] == rec.id]
    if not rows:
        return None
    v = np.sum(rows, axis=0)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else None


def select_evictions(units: list["_Loaded"], capacity: int, protected: int,
                     similarity: Callable[["_Loaded", EventRecord], float], *,
                     keep: int | None = None, pinned: frozenset[str] = frozenset()) -> set[str]:
    """Event ids to move out of L1 (empty when L1 is within capacity): down to ``keep``
    events (default: capacity). Events of ``pinned`` units are never chosen; when they and
    the protected events alone exceed ``keep``, every other event goes and L1 stays over."""
    events = [(u, rec) for u in units for rec in u.manifest.events]
    if len(events) <= capacity:
        return set()
    keep = capacity if keep is None else keep
    n_pinned = sum(1 for u, _ in events if u.unit_id in pinned)
    events = [p for p in events if p[0].unit_id not in pinned]
    # Arrival order: unit arrival (directory mtime), then event time within a unit.
    events.sort(key=lambda p: (p[0].arrival_ns, p[0].unit_id, p[1].timestamp.ns, p[1].id))
    keep_protected = events[len(events) - protected:] if protected else []
    candidates = events[:len(events) - protected] if protected else events
    slots = max(0, keep - len(keep_protected) - n_pinned)
    ranked = sorted(candidates, reverse=True,  # ties: keep the more recent
                    key=lambda p: (similarity(*p), p[1].timestamp.ns, p[1].id))
    return {rec.id for _, rec in ranked[slots:]}


Pair = tuple["_Loaded", EventRecord]


def group_evictions(pairs: list[Pair], gap_ns: int = SESSION_GAP_NS) -> list[list[Pair]]:
    """Split evicted events into coherent groups, one archive unit each: in timestamp order,
    a silence longer than ``gap_ns`` starts a new group (a new session). Sources are not
    split: a two-person conversation alternates sources and belongs together. A lone event
    (a straggler kept by relevance since an older session) joins the nearest group in time,
    so no one-event crumbs are written while other groups exist."""
    ordered = sorted(pairs, key=lambda p: (p[1].timestamp.ns, p[1].id))
    groups: list[list[Pair]] = []
    for pair in ordered:
        if groups and pair[1].timestamp.ns - groups[-1][-1][1].timestamp.ns <= gap_ns:
            groups[-1].append(pair)
        else:
            groups.append([pair])
    i = 0
    while len(groups) > 1 and i < len(groups):
        if len(groups[i]) > 1:
            i += 1
            continue
        t = groups[i][0][1].timestamp.ns
        before = t - groups[i - 1][-1][1].timestamp.ns if i > 0 else None
        after = groups[i + 1][0][1].timestamp.ns - t if i + 1 < len(groups) else None
        j = i - 1 if after is None or (before is not None and before <= after) else i + 1
        lone = groups.pop(i)
        target = groups[j if j < i else i]
        target[:] = (lone + target) if j > i else (target + lone)
        i = 0
    return groups


def _by_owner(group: list[Pair]) -> list[list[Pair]]:
    """A group split by whose events they are and whether they are private (a unit never
    mixes agents: another agent's unit recalled into this L1 goes back as that agent's), and
    an update's events kept apart (its archive unit still names the version it updates)."""
    parts: dict[tuple[str, bool, str], list[Pair]] = {}
    for pair in group:
        m = pair[0].manifest
        parts.setdefault((m.agent, m.private, m.meta.get("supersedes", "")), []).append(pair)
    return list(parts.values())


def _similarity(mem: "Writer", units: list["_Loaded"], query: str
                ) -> Callable[["_Loaded", EventRecord], float]:
    """How close each L1 event is to the query, in the ranker's terms: BM25 over the events'
    compute-layer text (the default: no embedder call), or the cosine of their stored
    vectors to the embedded query (dense rankers: one embedder call, for the query)."""
    if not query.strip():
        return lambda unit, rec: 0.0
    if mem.ranker == "bm25":
        # lazy: start-up, loaded only when used (+search.analyze, search.index_files)
        from fsmem.search.index_entry import bm25_scores
        pairs = [(u, r) for u in units for r in u.manifest.events]
        docs = event_terms(mem, pairs)
        scores = dict(zip((r.id for _, r in pairs), bm25_scores(docs, query)))
        return lambda unit, rec: float(scores.get(rec.id, 0.0))
    if on_demand(mem):   # units stored without vectors (fsmem.search.lazy_vectors)
        for unit in units:
            embed_rows(mem, unit.path, unit.manifest, unit.rows)
    qv = mem.embedder.embed([query])[0]

    def cosine(unit: "_Loaded", rec: EventRecord) -> float:
        vec = _event_vector(unit, rec)
        return float(vec @ qv) if vec is not None else 0.0
    return cosine


def prune(mem: "Writer", query: str = "") -> str | None:
    """If L1 holds more than capacity, move the least relevant unprotected, unpinned
    events down to the watermark into new L2 units, one per coherent group, in one
    journal entry (exactly once); returns the first unit's id, or None when nothing
    moved (``prune_context`` returns them all)."""
    try:
        ids = prune_context(mem, query)
    except FsmemError as exc:   # a damaged L1 unit: prune around it, once
        damaged = mem._damaged_context()
        if not damaged:
            raise
        log.warning("%s: pruning around damaged L1 units %s (fsck reports them): %s",
                    mem.root, ", ".join(sorted(damaged)), exc)
        ids = prune_context(mem, query, skip=damaged)
    return ids[0] if ids else None


def prune_context(mem: "Writer", query: str, *, context_tokens: int | None = None,
                  pinned: frozenset[str] | None = None,
                  skip: frozenset[str] = frozenset()) -> list[str]:
    """Prune L1 if it holds more than capacity; returns the new L2 unit ids (oldest group
    first), [] when nothing moved. ``pinned`` (default: the recall pins on disk) are unit
    ids never evicted; ``context_tokens`` (default: ``mem.context_tokens``) sets the
    watermark; ``skip``: damaged L1 units left out entirely (left in place for fsck)."""
    store = mem.store
    with store.locked():
        units = load_context(mem, with_vectors=True)   # re-reads only what changed
        if skip:
            units = [u for u in units if u.unit_id not in skip]
        entry = JournalEntry(id=new_unit_id("j"), op="prune", created_at=Timestamp.now())
        staged, l2_ids = _stage_prune(mem, units, query, entry, context_tokens=context_tokens,
                                      pinned=pinned)
        if not l2_ids:
            return []
        try:
            store.journal_commit(entry)
        except BaseException:
            _settle_failed(store, entry, staged)
            raise
        try:
            store.journal_apply(entry, defer_trash=True)   # emptied later, in a batch
        except BaseException:
            _settle_failed(store, entry, staged)
            raise
        _index_archives(mem, l2_ids)
        return l2_ids


@dataclass
class ArrivingPrune:
    """Staged L1 arrivals and their prune in one journal entry, not yet decided."""

    entry: JournalEntry
    l2_ids: list[str]    # the prune's new L2 units ([]: the arrivals alone)


def stage_arriving(mem: "Writer", query: str, arrivals: list["_Loaded"], entry: JournalEntry,
                   *, context_tokens: int | None = None) -> list[str] | None:
    """The prune of an append (or a burst, or a turn), staged before its units are
    published: ``arrivals`` (finished units still in staging, which ``entry`` publishes)
    join L1 as its newest units in their order and, if L1 then holds more than capacity, the
    evicted events' units are built in staging and added to ``entry`` (``commit_arriving``
    publishes it all: two barriers, where publishing then pruning takes four). Returns the
    new L2 unit ids; None when no prune is due (L1 stays within capacity, or nothing can be
    evicted), ``entry`` then unchanged. The evictions are exactly those of publishing the
    arrivals and then ``prune_context``: they arrive last, so they are among the protected
    most recent events (the caller makes sure ``context_protected`` covers them). Under the
    writer lock; on failure ``entry`` is as it was and nothing of the prune is staged."""
    if mem.context_protected < len(arrivals):
        raise ValueError("stage_arriving: context_protected must cover the arrivals")
    units = load_context(mem, with_vectors=True)
    newest = max((u.arrival_ns for u in units), default=0)
    arrivals = [replace(u, arrival_ns=max(u.arrival_ns, newest + 1 + i))
                for i, u in enumerate(arrivals)]
    n_publish, n_remove, mtimes = len(entry.publish), len(entry.remove), dict(entry.mtimes)
    taken = False
    try:
        staged, l2_ids = _stage_prune(mem, [*units, *arrivals], query, entry,
                                      context_tokens=context_tokens)
        if l2_ids and not {(mem.l1, u.unit_id) for u in arrivals} & set(entry.remove):
            taken = True
            return l2_ids
        for name in staged:   # nothing evicted (or, never with protected arrivals, one
            fsops.rmtree(f"{mem.store.staging}/{name}")   # of them: defensive)
        return None
    finally:
        if not taken:   # nothing of the prune goes with the entry: as it was
            del entry.publish[n_publish:]
            del entry.remove[n_remove:]
            entry.mtimes = mtimes


def commit_arriving(mem: "Writer", plan: ArrivingPrune) -> list[str]:
    """Publish staged L1 arrivals and their prune (``stage_arriving``) by one journal entry;
    returns the new L2 unit ids. A failure up to the entry's barrier undoes the entry, the
    arrivals included (``Store.drop_entry``), and raises: nothing stored. After it the
    change is decided: completed here, or else by the next writer lock's recovery."""
    store, entry = mem.store, plan.entry
    try:
        store.journal_commit(entry)
    except BaseException:
        if store.drop_entry(entry):
            log.info("append %s failed: nothing stored", entry.id)
        raise
    try:   # the trash emptied later, in a batch; the entry's deletion flushed by the next wave
        store.journal_apply(entry, defer_trash=True, lazy_retire=True)
    except (OSError, FsmemError) as exc:
        log.warning("append %s: completing after %s", entry.id, exc)
        try:
            store.journal_apply(entry, defer_trash=True, lazy_retire=True)
        except (OSError, FsmemError) as again:
            log.error("append %s is durable; applying it failed again (%s): the next "
                      "writer lock's recovery completes it", entry.id, again)
            return plan.l2_ids
    _index_archives(mem, plan.l2_ids)
    return plan.l2_ids


def _stage_prune(mem: "Writer", units: list["_Loaded"], query: str, entry: JournalEntry, *,
                 context_tokens: int | None = None, pinned: frozenset[str] | None = None
                 ) -> tuple[list[str], list[str]]:
    """Choose the evictions of L1 (``units``) and build their units in staging, listed in
    ``entry`` (publish and remove): returns (staging names, new L2 unit ids); ([], []) when
    L1 is within capacity or nothing can be evicted. On failure nothing staged is left."""
    if sum(len(u.manifest.events) for u in units) <= mem.context_capacity:
        return [], []
    if pinned is None:
        pinned = frozenset(read_pins(mem.store, mem.l1))
    tokens = context_tokens if context_tokens is not None else \
        getattr(mem, "context_tokens", None)
    keep = watermark(mem.context_capacity, mem.context_protected, context_tokens=tokens)
    evict = select_evictions(units, mem.context_capacity, mem.context_protected,
                             _similarity(mem, units, query), keep=keep, pinned=pinned)
    if not evict:
        return [], []
    groups = [part for group in group_evictions([(u, r) for u in units
                                                 for r in u.manifest.events if r.id in evict])
              for part in _by_owner(group)]
    logged = None   # the access log, read only if a unit keeps some events
    staged: list[str] = []
    l2_ids: list[str] = []
    try:
        for group in groups:
            l2_ids.append(_stage(mem, group, entry, "documents", archive=True))
            staged.append(entry.publish[-1][0])
        for u in units:
            ids = {r.id for r in u.manifest.events}
            if not ids & evict:
                continue
            entry.remove.append((mem.l1, u.unit_id))
            rest = [(u, r) for r in u.manifest.events if r.id not in evict]
            if rest:   # the remainder keeps the unit's access history
                logged = mem.access.stats() if logged is None else logged
                history = mem.access_of(u.manifest, logged.get(u.unit_id))
                rid = _stage(mem, rest, entry, mem.l1, archive=False, base=u.manifest,
                             history=history)
                entry.mtimes[rid] = u.arrival_ns
                staged.append(entry.publish[-1][0])
    except BaseException:
        for name in staged:
            fsops.rmtree(f"{mem.store.staging}/{name}")
        raise
    log.info("pruning %d events from L1 into %s", len(evict), ", ".join(l2_ids))
    return staged, l2_ids


def _index_archives(mem: "Writer", l2_ids: list[str]) -> None:
    """Tell a loaded index about the archive units a prune published."""
    for l2_id in l2_ids:
        mem._indexed(l2_id, "documents", added=True)


def _settle_failed(store, entry: JournalEntry, staged: list[str]) -> None:
    """A prune failed: if its journal entry is on disk (the failure came after it was
    written), the change is decided, so roll it forward now (best effort; else the next
    writer does); if not, nothing is decided, so remove what was staged. Deleting staged
    units of a written entry would let recovery remove the L1 originals with no copy."""
    if os.path.lexists(os.path.join(store.journal_dir, f"{entry.id}.json")):
        try:
            store.journal_apply(entry)
        except Exception as exc:   # the next writer's recovery completes it
            log.warning("prune %s: left for recovery: %s", entry.id, exc)
        return
    for name in staged:
        fsops.rmtree(f"{store.staging}/{name}")
    for name in os.listdir(store.journal_dir):   # a half-written entry of this prune
        if name.startswith(f"{entry.id}.json.") and name.endswith(".tmp"):
            try:
                os.unlink(os.path.join(store.journal_dir, name))
            except OSError:
                pass


def _stage(mem: "Writer", pairs: list[tuple["_Loaded", EventRecord]], entry: JournalEntry,
           layer: str, *, archive: bool, base: Manifest | None = None,
           history: tuple[int, Timestamp | None] = (1, None)) -> str:
    """Build one unit from existing events in staging (links, copied vector rows)."""
    store = mem.store
    builder = store.builder(new_unit_id("u"))
    try:
        return _fill_staged(mem, builder, pairs, entry, layer, archive=archive, base=base,
                            history=history)
    except BaseException:
        fsops.rmtree(builder.path)   # not yet listed for cleanup
        raise


def _fill_staged(mem: "Writer", builder, pairs: list[tuple["_Loaded", EventRecord]],
                 entry: JournalEntry, layer: str, *, archive: bool, base: Manifest | None,
                 history: tuple[int, Timestamp | None]) -> str:
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
        meta = {"is_archived_context": "true"}
        if pairs[0][0].manifest.meta.get("supersedes"):   # (_by_owner: one per archive unit)
            meta["supersedes"] = pairs[0][0].manifest.meta["supersedes"]
        manifest = Manifest(format=FORMAT_VERSION, id=builder.unit_id, created_at=now,
                            updated_at=now, events=records, summary=summary,
                            source="context_archived", meta=meta,
                            embedder=mem.embedder.fingerprint, access_count=1,
                            agent=pairs[0][0].manifest.agent,
                            private=pairs[0][0].manifest.private)
    else:
        assert base is not None
        manifest = Manifest(format=FORMAT_VERSION, id=builder.unit_id, created_at=base.created_at,
                            updated_at=now, events=records, summary=base.summary,
                            tags=base.tags, entities=base.entities, source=base.source,
                            meta=base.meta, access_count=history[0],
                            last_access=history[1], embedder=base.embedder,
                            agent=base.agent, private=base.private)
    if keys:
        manifest.vectors = builder.set_vectors(keys, np.stack(rows), mem.embedder.fingerprint)
    builder.finish(manifest)
    name = builder.path.rsplit("/", 1)[1]
    entry.publish.append((name, layer, builder.unit_id))
    return builder.unit_id

