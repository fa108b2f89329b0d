"""Commit: one L2 unit holding one event, written whole (its content as an input block)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

from fsmem.format.model import Event, MediaAttachment, check_name
from fsmem.format.timestamps import Timestamp
from fsmem.memory.maintenance import stored_event

if TYPE_CHECKING:
    from fsmem.memory.writer import Writer

__all__ = ["commit"]

log = logging.getLogger("fsmem.flows")


def commit(mem: "Writer", content: str, *, summary: str = "", tags: Sequence[str] = (),
           attachments: Sequence[MediaAttachment] = (), source: str = "manual",
           timestamp: object = None, entities: Sequence[str] = (),
           meta: dict[str, str] | None = None, media_digests: Sequence[str] = (),
           event_id: str | None = None) -> str:
    """Write one L2 unit holding one event (``content`` as its input text block).

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
                                  entities=entities, meta=meta)
