"""``Memory``: the three-layer memory as one object, a list of delegations.

Where each verb lives: the read side (query, document, render, stats, find_cold, ...) in
``fsmem.memory.reader.Reader``; the write core (write_unit, commit_events, commit_file, remove,
close, reconcile, reindex, the deferred vectors) in ``fsmem.memory.writer.Writer``; the flows
below, each in its module. docs/ARCHITECTURE.md walks one append and one query through them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable, Sequence

from fsmem.format.model import Event, MediaAttachment, TextEvent
from fsmem.memory import appending, commit, prune, recall
from fsmem.memory.fsck import fsck, fsck_fix
from fsmem.memory.l1cache import context_timeline
from fsmem.memory.opening import open_memory
from fsmem.memory.turn import run_turn
from fsmem.memory.writer import Writer

if TYPE_CHECKING:
    from fsmem.format.plugins import ChannelDef, Plugins, ToolDef
    from fsmem.memory.fsck import Finding
    from fsmem.memory.reader import Reader
    from fsmem.memory.stablemem import DistillReport
    from fsmem.memory.turn import InjectOptions, TurnResult
    from fsmem.search.embed import Embedder
    from fsmem.store.snapshot import SnapshotReport
    from fsmem.store.store import Durability

__all__ = ["Memory"]


class Memory(Writer):
    """A three-layer memory rooted at a directory (see README and docs/FORMAT.md): the read
    side of ``Reader`` plus every write, each under the store's writer lock."""

    @classmethod
    def open(cls, root: str | os.PathLike, *, context_capacity: int | None = None,
             context_protected: int | None = None,
             plugins: "Plugins | Iterable[ToolDef | ChannelDef] | None" = None,
             embedder: "Embedder | None" = None, durability: "Durability | None" = None,
             lock_timeout: float | None = None, auto_prune: bool = True, create: bool = True,
             ranker: str | None = None, readonly: bool = False,
             adopt: bool = False, context_tokens: int | None = None,
             vectors: str = "auto", agent: str | None = None) -> "Memory | Reader":
        """Open (creating what is missing) the store at ``root`` and run crash recovery
        (fsmem.memory.opening).

        ``readonly=True`` returns a ``Reader`` instead: no lock, nothing created or written,
        works on a read-only filesystem (NotAStore if ``root`` holds no store). ``adopt``
        adopts HomeAgent's ``context.json`` into L1 (fsmem.homeagent.context).
        ``context_tokens`` (the host's token budget for L1) sets prune's low watermark.
        ``vectors``: "inline" (embedded into each unit at commit), "deferred" (embedded after
        the commit returns, into the derived vector cache, fsmem.search.vector_cache) or
        "auto" (deferred for a real embedder; for the hashed default, inline under a ranker
        that reads vectors, else none stored: computed on first use,
        fsmem.search.lazy_vectors). ``agent`` (default: the config's ``agent``, else the
        default agent): the namespace this memory reads and writes as: its own L1
        (``context@<agent>/``), its units marked with its name (docs/FORMAT.md, "Agents")."""
        return open_memory(cls, root, context_capacity=context_capacity,
                           context_protected=context_protected, plugins=plugins,
                           embedder=embedder, durability=durability, lock_timeout=lock_timeout,
                           auto_prune=auto_prune, create=create, ranker=ranker,
                           readonly=readonly, adopt=adopt, context_tokens=context_tokens,
                           vectors=vectors, agent=agent)

    def timeline(self) -> list[Event]:
        """The L1 events sorted by original timestamp (ties: arrival, then event id), from
        the L1 this process keeps in memory (fsmem.memory.l1cache): a turn re-reads only what
        changed. The events are shared with that cache: do not modify them."""
        return context_timeline(self)

    # -- L1 ---------------------------------------------------------------------------------
    def append(self, event: Event | TextEvent | dict, *, event_id: str | None = None) -> str:
        """Add one event to L1, durable on return; prunes a full L1; idempotent by
        ``event_id`` (fsmem.memory.appending.append)."""
        return appending.append(self, event, event_id=event_id, prune=self.prune)

    def append_many(self, events: Sequence[Event | TextEvent | dict]) -> list[str]:
        """Add a burst of events to L1 with one durability barrier, all or nothing
        (fsmem.memory.appending.append_many); returns the event ids in order."""
        return appending.append_many(self, events, prune=self.prune)

    def turn(self, input_event: Event | TextEvent | dict,
             response_event: Event | TextEvent | dict | None = None, *,
             options: "InjectOptions | None" = None,
             context_tokens: int | None = None) -> "TurnResult":
        """One agent turn (HomeAgent's memoryPass): append, then act on the policies
        (fsmem.memory.turn.run_turn)."""
        return run_turn(self, input_event, response_event, options=options,
                        context_tokens=context_tokens)

    def prune(self, query: str = "") -> str | None:
        """Move the least relevant events of an over-full L1 into L2, exactly once; the first
        new unit's id, or None (fsmem.memory.prune.prune)."""
        return prune.prune(self, query)

    # -- L2 ---------------------------------------------------------------------------------
    def commit(self, content: str, *, summary: str = "", tags: Sequence[str] = (),
               attachments: Sequence[MediaAttachment] = (), source: str = "manual",
               timestamp: object = None, entities: Sequence[str] = (),
               meta: dict[str, str] | None = None, media_digests: Sequence[str] = (),
               event_id: str | None = None, private: bool = False) -> str:
        """Write one L2 unit holding one event; idempotent by ``event_id``; ``private``:
        seen by this memory's agent only (fsmem.memory.commit.commit); returns the unit id."""
        return commit.commit(self, content, summary=summary, tags=tags, attachments=attachments,
                             source=source, timestamp=timestamp, entities=entities, meta=meta,
                             media_digests=media_digests, event_id=event_id, private=private)

    def update(self, unit_id: str, content: str, *, summary: str | None = None,
               tags: Sequence[str] | None = None, entities: Sequence[str] | None = None,
               private: bool | None = None) -> str:
        """A new version of an L2 unit; the old one stays as history, hidden from search
        (fsmem.memory.commit.update); returns the new unit's id."""
        return commit.update(self, unit_id, content, summary=summary, tags=tags,
                             entities=entities, private=private)

    def recall(self, text: str, top_k: int = 3, *, scope: str = "all",
               agent: str | None = None) -> list[str]:
        """Move the best L2 matches this agent sees (``scope``, ``agent`` as in ``query``)
        into its L1, each by one rename (fsmem.memory.recall); returns the moved unit ids."""
        return recall.recall(self, text, top_k, prune=self.prune, scope=scope, agent=agent)

    def recall_id(self, unit_id: str) -> str:
        """Move one L2 unit or HomeAgent document, named by its id (an empty document
        included), into L1 (fsmem.memory.recall.recall_id); returns its unit id."""
        return recall.recall_id(self, unit_id, prune=self.prune)

    # -- L3 ---------------------------------------------------------------------------------
    def distill(self, *, max_age_s: float = 72 * 3600, max_access: int = 2, distiller=None,
                dry_run: bool = False, progress=None) -> "DistillReport":
        """Distil cold L2 units (legacy HomeAgent documents included) into graph.db, moving
        each original into stablemem/ (fsmem.memory.stablemem.distill_store)."""
        from fsmem.memory.stablemem import distill_store  # lazy: sqlite3 and the distillers
        return distill_store(self, max_age_s=max_age_s, max_access=max_access,
                             distiller=distiller, dry_run=dry_run, progress=progress)

    def recall_from_graph(self, names, depth: int = 2) -> list[str]:
        """Bring the original units of the facts about ``names`` back to L1 (one rename each)."""
        from fsmem.memory.stablemem import recall_from_graph  # lazy: sqlite3
        return recall_from_graph(self, names, depth, prune=self.prune)

    # -- the store --------------------------------------------------------------------------
    def snapshot(self, dest: str | os.PathLike[str]) -> "SnapshotReport":
        """A point-in-time copy of the store at ``dest`` (fsmem.store.snapshot.snapshot)."""
        from fsmem.store.snapshot import snapshot  # lazy: only the snapshot verb needs it
        return snapshot(self.root, dest)

    def fsck(self, *, fix: bool = False, read_data: bool = True) -> "list[Finding]":
        """Read-only check; with ``fix``, under the writer lock: pending journals completed
        and dead staging cleaned by recovery (reported as fixed), damaged units quarantined
        (fsmem.memory.fsck)."""
        if not fix:
            return fsck(self.store, read_data=read_data)
        return fsck_fix(self.store, read_data=read_data)
