"""The append paths into L1 (one event, a burst, an agent turn), each publishing its units and
the prune they cause by ONE journal entry (issue 18).

Publishing the new units and then pruning took two operations of two barriers each; staged
together, the units and the prune's archive and remainder units are made durable with the
journal entry in one wave and renamed in a second one. The evictions are those of the two-step
path: the new units count as L1's newest arrivals (fsmem.memory.prune.stage_arriving), so this is
taken only when ``context_protected`` covers them. A prune that fails before its entry is
written leaves the events published alone and the prune owed (fsmem.memory.maintenance); a damaged
L1
unit leaves the prune to ``Memory.prune``, which works around it.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Callable, Sequence

from fsmem.format.errors import FsmemError
from fsmem.format.layout import JournalEntry
from fsmem.format.model import check_name
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import Written
from fsmem.memory.l1cache import note_written, seed_written
from fsmem.memory.maintenance import after_write, failed_step, stored_event
from fsmem.memory.prune import ArrivingPrune, commit_arriving, stage_arriving
from fsmem.memory.reader import Loaded
from fsmem.memory.writer import as_event, check_strings, with_changes
from fsmem.store.pins import tick_pins
from fsmem.store.store import new_unit_id

if TYPE_CHECKING:
    import numpy as np

    from fsmem.format.model import Event, Manifest, TextEvent
    from fsmem.format.plugins import Plugins
    from fsmem.format.unit import UnitBuilder
    from fsmem.memory.writer import Writer

__all__ = ["append", "append_many", "after_append", "pruning_publish", "append_burst",
           "prune_after"]

log = logging.getLogger("fsmem.appending")


def append(mem: "Writer", event: "Event | TextEvent | dict", *, event_id: str | None = None,
           prune: Callable[[str], object]) -> str:
    """Add one event to L1 (durable on return); prunes (down to the watermark) if L1 is
    over capacity; releases the pins of a recall made before the previous write call.

    ``event_id`` (or the event's own ``id``) is an idempotency key: when an event with
    that id is already stored (L1, or L2 within ``maintenance.IDEMPOTENCY_WINDOW_S``),
    nothing is stored and the id is returned. Once the event is durable, append
    succeeds: a failing prune is logged, owed (``.fsmem/maintenance``) and retried by
    the next write or open (fsmem.memory.maintenance). ``prune(query)``: the memory's prune (a
    host's
    override of ``Memory.prune`` is the one called)."""
    draft = as_event(event)
    if event_id is not None:
        draft = with_changes(draft, id=check_name(event_id, "event_id"))
    query = " ".join(mem._compute_texts(draft))
    outcome: list[object] = []   # what its own prune did (appending.pruning_publish)
    with mem.store.locked():
        if draft.id and stored_event(mem, draft.id):
            log.info("%s: event %s already stored; nothing appended", mem.root, draft.id)
            return draft.id
        combined = mem.auto_prune and mem.context_protected >= 1
        event_id = mem._append_draft(draft, publish_with=pruning_publish(
            mem, query, outcome) if combined else None)
    after_append(mem, query, outcome[0] if outcome else None, prune)
    return event_id


def after_append(mem: "Writer", query: str, outcome: object,
                 prune: Callable[[str], object]) -> None:
    """The maintenance after a durable append (fsmem.memory.appending): the prune if it did not
    go with the append's entry (``outcome`` None: prune now; an error: owed), then the
    recall pins' tick."""
    step = prune_after(outcome, lambda: prune(query=query)) if mem.auto_prune \
        else None
    after_write(mem.store, *([step] if step is not None else []), lambda: tick_pins(mem.store, mem.l1))


def append_many(mem: "Writer", events: "Sequence[Event | TextEvent | dict]", *,
                prune: Callable[[str], object]) -> list[str]:
    """Add a burst of events to L1, each as its own unit (as ``append`` does), with one
    durability barrier for the burst (group commit: one journal entry publishes them
    all, and the prune they cause when ``context_protected`` covers the burst; else it
    prunes after); returns the event ids in order.

    All or nothing: a bad event or a failing write stores none of them; after a crash,
    recovery completes the burst or leaves no trace of it. Idempotency keys (an event's
    ``id``) are honoured as in ``append``: an event already stored, or repeated in the
    burst, is not stored again and its id is returned."""
    drafts = [as_event(e) for e in events]
    query = " ".join(t for d in drafts for t in mem._compute_texts(d))
    ids, _archived, outcome = append_burst(
        mem, drafts, prune=query if mem.auto_prune else None)
    after_append(mem, query, outcome, prune)
    return ids


def _arrival(mem: "Writer", builder: "UnitBuilder", manifest: "Manifest",
             vectors: "tuple[list[str], np.ndarray] | None") -> Loaded:
    """A finished staged unit as L1 will hold it (for the prune's ranking, which takes its
    text from what the builder wrote: nothing is read back)."""
    note_written(mem, builder.unit_id, builder.texts)
    rows = dict(zip(*vectors)) if vectors is not None else {}
    return Loaded(builder.unit_id, builder.path, manifest, rows,
                  os.stat(builder.path, follow_symlinks=False).st_mtime_ns)


def _stage_with(mem: "Writer", query: str, arrivals: list[Loaded], entry: JournalEntry,
                context_tokens: int | None) -> tuple[object, list[str] | None]:
    """Stage the prune into ``entry`` (fsmem.memory.prune.stage_arriving): (outcome, new L2 ids or
    None when nothing of it goes with the entry). The outcome: True (staged, or no prune
    due), the OSError that stopped it before its entry (the prune is owed), or None (a
    damaged L1 unit: the caller prunes the old way)."""
    try:
        return True, stage_arriving(mem, query, arrivals, entry, context_tokens=context_tokens)
    except OSError as exc:
        log.warning("%s: the prune of this append failed before it was decided; the events "
                    "are appended alone and the prune is owed: %s", mem.root, exc)
        return exc, None
    except FsmemError:   # a damaged L1 unit: Memory.prune prunes around it
        return None, None


def pruning_publish(mem: "Writer", query: str, outcome: list[object]
                    ) -> "Callable[[UnitBuilder, Written], bool]":
    """``Memory.write_unit``'s ``publish_with`` for one appended event: its unit and the prune
    it causes in one journal entry; the prune's outcome is appended to ``outcome``."""
    def publish_with(builder: "UnitBuilder", written: "Written") -> bool:
        entry = JournalEntry(id=new_unit_id("j"), op="append", created_at=Timestamp.now(),
                             publish=[(os.path.basename(builder.path), mem.l1,
                                       builder.unit_id)])
        result, l2_ids = _stage_with(mem, query, [_arrival(mem, builder, written.manifest,
                                                           written.vectors)], entry, None)
        outcome.append(result)
        if not l2_ids:   # no prune due, or it failed: the unit is published alone
            return False
        commit_arriving(mem, ArrivingPrune(entry, l2_ids))
        return True
    return publish_with


def append_burst(mem: "Writer", drafts: Sequence["Event"], *,
                 plugins: "Sequence[Plugins | None] | None" = None, dedupe: bool = True,
                 prune: str | None = None, context_tokens: int | None = None
                 ) -> tuple[list[str], list[str], object]:
    """Stage each event as its own L1 unit and publish them all by one journal entry, with
    the prune they cause (focus ``prune``; None: no prune) when ``context_protected`` covers
    them: (event ids in order, the prune's new L2 unit ids, its outcome: see ``_stage_with``;
    None also when no prune was tried).

    All or nothing: a bad event or a failing write stores none of them (and raises); after a
    crash, recovery completes the entry or leaves no trace of it. ``plugins``: per event,
    the declarations for its compute layer (None: the Memory's). ``dedupe``: an event whose
    id is already stored, or repeated in the burst, is not stored again (its id returned)."""
    ids: list[str] = []
    staged: list[tuple["UnitBuilder", "Manifest", list[tuple[str, str]]]] = []
    arrivals: list[Loaded] = []
    l2_ids: list[str] = []
    outcome: object = None
    with mem.store.locked():
        entry = JournalEntry(id=new_unit_id("j"), op="append", created_at=Timestamp.now())
        try:
            for i, draft in enumerate(drafts):
                if dedupe and draft.id and (draft.id in ids or stored_event(mem, draft.id)):
                    ids.append(draft.id)
                    continue
                draft = with_changes(draft, id=draft.id or new_unit_id("e"),
                              timestamp=Timestamp.coerce(draft.timestamp))
                check_strings(source=draft.source)
                builder, manifest, texts = mem._stage_unit(
                    mem._events_fill([draft], plugins[i] if plugins else None), None,
                    {"summary": "", "tags": [], "entities": [], "source": draft.source,
                     "meta": {}})
                staged.append((builder, manifest, texts))
                arrivals.append(_arrival(mem, builder, manifest, builder.vectors))
                entry.publish.append((os.path.basename(builder.path), mem.l1,
                                      builder.unit_id))
                ids.append(draft.id)
            if arrivals and prune is not None and len(arrivals) <= mem.context_protected:
                outcome, staged_l2 = _stage_with(mem, prune, arrivals, entry, context_tokens)
                l2_ids = staged_l2 or []
        except BaseException:
            if mem.store.drop_entry(entry):   # not written yet: its staged units go
                log.info("append burst %s failed: nothing stored", entry.id)
            raise
        if entry.publish:   # the commit point: one barrier for the burst and its prune
            commit_arriving(mem, ArrivingPrune(entry, l2_ids))
        if mem._filler is None:   # the next turn does not read them back
            for builder, manifest, _texts in staged:
                seed_written(mem, mem.store.unit_dir(mem.l1, builder.unit_id),
                             Written(manifest, builder.vectors, builder.texts,
                                     builder.manifest_key))
    if mem._filler is not None:
        for builder, _manifest, texts in staged:
            mem._filler.submit(builder.unit_id, [t for _k, t in texts])
    return ids, l2_ids, outcome


def prune_after(outcome: object, prune: Callable[[], object]) -> Callable[[], object] | None:
    """The maintenance step an append still owes for its prune, by the prune's ``outcome``
    (``_stage_with``): None when it went with the append's entry or none was due; the error
    when it failed before its entry (``after_write`` logs it and owes the prune); else
    ``prune`` itself (not tried, or a damaged L1 unit: it prunes around it)."""
    if outcome is True:
        return None
    return failed_step(outcome) if isinstance(outcome, BaseException) else prune
