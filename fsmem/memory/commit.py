"""Commit: one L2 unit holding one event, written whole (its content as an input block)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

from fsmem.format.errors import FsmemError
from fsmem.format.model import Event, MediaAttachment, check_name
from fsmem.format.timestamps import Timestamp
from fsmem.memory.maintenance import stored_event

if TYPE_CHECKING:
    from fsmem.memory.writer import Writer

__all__ = ["commit", "update"]

log = logging.getLogger("fsmem.flows")


def commit(mem: "Writer", content: str, *, summary: str = "", tags: Sequence[str] = (),
           attachments: Sequence[MediaAttachment] = (), source: str = "manual",
           timestamp: object = None, entities: Sequence[str] = (),
           meta: dict[str, str] | None = None, media_digests: Sequence[str] = (),
           event_id: str | None = None, private: bool = False) -> str:
    """Write one L2 unit holding one event (``content`` as its input text block);
    ``private``: only this memory's agent sees it (format 4).

    ``media_digests`` (coldcontext_commit's parameter) are digests or unique prefixes of
    blocks already in the store, or sha256 digests of HomeAgent's media store.
    ``event_id`` is an idempotency key (as in ``append``): when that event is already
    stored, nothing is written and the id of the unit holding it is returned."""
    atts = [*attachments, *(MediaAttachment(digest=d) for d in media_digests)]
    event = Event(timestamp=Timestamp.coerce(timestamp), source=source, input=content,
                  attachments=atts, id=check_name(event_id, "event_id") if event_id else "")
    with mem.store.locked():
        if event_id:
            holder = stored_event(mem, event_id)
            if holder:
                log.info("%s: event %s already stored in %s; nothing committed",
                         mem.root, event_id, holder)
                return holder
        return mem.commit_events([event], summary=summary, tags=tags, source=source,
                                  entities=entities, meta=meta, private=private)


def update(mem: "Writer", unit_id: str, content: str, *, summary: str | None = None,
           tags: Sequence[str] | None = None, entities: Sequence[str] | None = None,
           private: bool | None = None, timestamp: object = None) -> str:
    """A new version of the L2 unit ``unit_id``: a new unit holding ``content`` (one event)
    whose ``meta["supersedes"]`` names the old one. Units are immutable, so the old one
    stays, whole, as history (``fsmem show`` reads it; removing the update brings it back);
    search, recall and the fleet index show only the newest version. Unset fields are the
    old unit's (its summary, tags, entities, source, meta, privacy). Refused, with nothing
    written, for a unit this agent cannot see, one not in documents/, or one already
    updated (update the newest version)."""
    old = mem.visible(unit_id)
    if old.layer != "documents":
        raise FsmemError(f"unit {unit_id} is in {old.layer}/: update works on documents/ "
                         "(recall a unit back there by pruning, or commit a new one)")
    newer = mem.index.superseded_by(unit_id)
    if newer:
        raise FsmemError(f"unit {unit_id} was updated by {newer}: update that one")
    meta = {**old.meta, "supersedes": unit_id}
    meta.pop("is_archived_context", None)
    event = Event(timestamp=Timestamp.coerce(timestamp), source=old.source or "manual",
                  input=content)
    with mem.store.locked():
        return mem.commit_events(
            [event], summary=old.summary if summary is None else summary,
            tags=old.tags if tags is None else tags,
            entities=old.entities if entities is None else entities,
            source=old.source or "manual", meta=meta,
            private=old.private if private is None else private)
