"""The write core every flow builds on: a unit staged, filled and published under the writer
lock, and the derived state (the index, deferred vectors) kept in step with what was written.

``Writer`` is the read side (``Reader``) plus the store's lock and these primitives; the flows
(fsmem.memory.appending, prune, recall, turn, stablemem) take a ``Writer`` and the ``Memory``
facade (fsmem.memory.facade) delegates to them. Everything here speaks in units, events and
blocks; paths come from ``Store`` and ``fsmem.format.unit``. The compute layer (vectors) is
derived from block text through the plugin declarations and stored inside each unit, so no
move between layers ever recomputes it.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Sequence

import msgspec

from fsmem.format import fsops
from fsmem.format.errors import FormatError, FsmemError, NotFound, StorageError
from fsmem.format.model import (
    FORMAT_VERSION,
    BlockRef,
    Event,
    EventRecord,
    Manifest,
    MediaAttachment,
    TextEvent,
    ToolResult,
    check_name,
)
from fsmem.format.plugins import Plugins
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import UnitBuilder, Written, damaged
from fsmem.memory.l1cache import seed_written
from fsmem.memory.reader import MEDIA_STORE, Loaded, Reader
from fsmem.search.embed import Embedder
from fsmem.search.lazy_vectors import stores_vectors
from fsmem.search.ranking import DEFAULT_RANKER  # not from the index: an append never loads it
from fsmem.search.speakers import spoken_text
from fsmem.store.store import Store, new_unit_id

__all__ = ["Writer", "as_event", "check_strings", "with_changes", "shared_embedder"]

log = logging.getLogger("fsmem.flows")


class Writer(Reader):
    """The read side plus every write primitive, each under the store's writer lock."""

    writable = True
    _filler = None   # fsmem.search.vector_cache.VectorFiller when vectors are deferred
    vectors_mode = "auto"   # Memory.open's ``vectors`` (fsmem.search.lazy_vectors.stores_vectors)
    homeagent_files = "move"   # config ``homeagent_files`` (fsmem.homeagent.documents.keeps_files)

    def __init__(self, store: Store, *, context_capacity: int, context_protected: int,
                 plugins: Plugins, embedder: Embedder, auto_prune: bool,
                 ranker: str = DEFAULT_RANKER, context_tokens: int | None = None,
                 agent: str | None = None) -> None:
        if context_capacity < 1 or not 0 <= context_protected <= context_capacity:
            raise ValueError("need context_capacity >= 1 and 0 <= context_protected <= capacity")
        super().__init__(store, plugins=plugins, embedder=embedder, ranker=ranker, agent=agent)
        self.store = store
        self.context_capacity = context_capacity
        self.context_protected = context_protected
        self.auto_prune = auto_prune
        self.context_tokens = context_tokens   # the host's token budget: sets prune's watermark

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        """Save the search index if it has unsaved changes (it is derived: optional), or
        build and save it when the store has none yet (a session that only wrote: else
        every reader, a CLI query, builds it again in memory), fold the access log if it
        has grown, and close graph.db (deferred vectors are filled first)."""
        if self._filler is not None:
            self._refresh_vectors()   # queues what the index still lacks (an import, say)
            self._filler.close()
            self._refresh_vectors()
        try:
            with self.store.locked():
                if self._index is None and self._no_saved_index():
                    self._load_index()   # builds it from the units, and saves it
                for index in (self._index, *self._layer_indexes.values()):
                    if index is not None and index.writable and (index._unsaved
                                                                 or index._unsaved_pos):
                        index.save()
                self.access.compact()
                self.store._empty_trash()   # what prunes left there (Store.TRASH_BATCH)
                self.store.flush_retired()
        except (OSError, FsmemError) as exc:   # derived state (a busy lock too): never fails
            log.warning("%s: derived state not saved: %s", self.root, exc)
        super().close()

    def _no_saved_index(self) -> bool:
        """No index generation is saved while documents/ holds units (readers would rebuild
        it in memory on every open; once one is saved they follow the change feed)."""
        if os.path.isfile(os.path.join(self.layout.index_dir, "CURRENT")):
            return False
        try:
            with os.scandir(self.store.layer_dir("documents")) as it:
                return any(e.is_dir(follow_symlinks=False) for e in it)
        except OSError:
            return False

    # -- deferred vectors (fsmem.search.vector_cache) ---------------------------------------
    def flush_vectors(self) -> None:
        """Wait until every deferred vector submitted so far is in the cache, and let the
        index use them. A no-op when vectors are inline."""
        if self._filler is not None:
            self._filler.flush()
            self._refresh_vectors()

    def fill_vectors(self) -> int:
        """Queue every unit text (L1 and L2) that has no vector in its unit nor in the cache
        (after the cache was deleted, or a crash before it was filled); returns how many
        texts were queued. Call ``flush_vectors`` to wait for them."""
        if self._filler is None:
            return 0
        return sum(self._queue_unit(unit) for layer in (self.l1, "documents")
                   for unit in self._load_layer(layer, with_vectors=True))

    def queue_vectors(self, units: Iterable[tuple[str, str]]) -> int:
        """Queue the texts lacking vectors of these (layer, unit id) units, e.g. just
        imported from an archive that carries no cached vectors; returns how many texts.
        A unit that cannot be read is skipped (its events rank lexically)."""
        if self._filler is None:
            return 0
        n = 0
        for layer, uid in units:
            try:
                unit = self._read_unit(uid, self.layout.unit_dir(layer, uid), with_vectors=True)
            except FsmemError as exc:   # Vanished: moved away meanwhile
                log.warning("vectors of %s not queued: %s", uid, exc)
                continue
            n += self._queue_unit(unit) if unit is not None else 0
        return n

    def _queue_unit(self, unit: Loaded) -> int:
        """Submit the texts of ``unit`` that have a vector neither in it nor in the cache."""
        # lazy: start-up, loaded only when used (+queue, heapq)
        from fsmem.search.vector_cache import fill_rows, unit_texts
        missing = set(fill_rows(self._filler.cache, self.plugins, unit.path, unit.manifest,
                                dict(unit.rows)))
        texts = [t for k, t in unit_texts(self.plugins, unit.path, unit.manifest)
                 if k in missing]
        self._filler.submit(unit.unit_id, texts)
        return len(texts)

    def _refresh_vectors(self) -> None:
        """Re-index units that lacked vectors once the filler has written some; on the first
        call, heal what a crash left (units indexed with zero vectors: re-read, the cache's
        vectors taken); queue for the filler every unit still lacking vectors and not queued
        already (after a crash, an import, a deleted cache: no reindex needed)."""
        if self._filler is None or self._index is None:
            return
        # lazy: start-up, loaded only when used (+queue, heapq)
        from fsmem.search.vector_cache import heal_index, queue_missing
        if not self._vectors_healed:
            self._vectors_healed = True
            if heal_index(self._index):
                self._index._unsaved += 1
        cached = queue_missing(self._filler, self.plugins, self.layout, self._index.missing)
        if (self._filler.filled() or cached) and self._index.missing:
            self._index.refresh_vectors()
            self._index._unsaved += 1

    # -- the index ---------------------------------------------------------------------------
    def reconcile(self, *, full: bool = True) -> dict[str, int]:
        """Bring the index in step with units added, moved or removed by plain file tools;
        returns how many entries were added and removed. ``full=False``: list ``documents/``
        only if its mtime changed since the index was last in step (as any open does)."""
        rebuilt = self._load_index()
        if rebuilt is not None:
            return {"added": rebuilt, "removed": 0}
        return self._index.sync(force=full)

    def reindex(self, progress=None) -> int:
        """Rebuild the index from the directories alone; returns how many units it holds."""
        # lazy: start-up, loaded only when used (+search.analyze, search.index_entry)
        from fsmem.search.index import Index
        self._index = Index(self)
        return self._index.rebuild(progress)

    def _index_entry(self, builder: UnitBuilder, layer: str, written: "Written"):
        """The index entry of a staged unit about to be published into documents/ (None:
        no index loaded, another layer, or it cannot be made here: ``_indexed`` then makes
        it from the published unit). Its identity is filled in once it is published (a
        rename changes the directory's ctime)."""
        if self._index is None or layer != "documents":
            return None
        try:
            return self._index.entry_for(builder.path, builder.unit_id, 0, written=written)
        except (FsmemError, OSError, ValueError):
            return None

    def _indexed(self, unit_id: str, layer: str, *, added: bool,
                 written: "Written | None" = None, entry=None) -> None:
        """Tell a loaded index about a change this process made to documents/ (its record in
        the change feed is looked at again by the next sync: one stat, nothing re-read);
        ``written``: the unit as just written (indexed without reading it back); ``entry``:
        its index entry made before the publish (``_index_entry``), given its identity now."""
        if self._index is None or layer != "documents":
            return
        # lazy: start-up, loaded only when used (+search.analyze, search.index_entry)
        from fsmem.search.index import unit_ident
        ino = unit_ident(self.store.unit_dir(layer, unit_id)) if entry is not None else None
        if added and entry is not None and ino is not None:
            entry.ino = ino
            self._index.add(entry)
        elif added:
            self._index.add_unit(unit_id, written=written)
        else:
            self._index.remove(unit_id)
        self._index._unsaved += 1

    # -- writing -----------------------------------------------------------------------------
    def commit_events(self, events: Sequence[Event | TextEvent], *, summary: str = "",
                      tags: Sequence[str] = (), source: str = "manual",
                      entities: Sequence[str] = (), meta: dict[str, str] | None = None,
                      layer: str = "documents", unit_id: str | None = None,
                      plugins: Plugins | None = None, private: bool = False) -> str:
        """Write one unit holding ``events`` into ``layer`` (documents by default);
        ``plugins`` overrides the declarations for the compute layer of these events;
        ``private``: seen by this memory's agent only (format 4)."""
        check_strings(summary=summary, source=source, tags=tags, entities=entities)
        fill = self._events_fill(events, plugins)
        return self.write_unit(layer, fill, unit_id=unit_id, summary=summary, tags=list(tags),
                               entities=list(entities), source=source, meta=dict(meta or {}),
                               private=bool(private))

    def _events_fill(self, events: Sequence[Event | TextEvent], plugins: Plugins | None):
        """The ``fill`` of ``write_unit`` writing ``events`` (attachments resolved first)."""
        drafts = [e.to_event() if isinstance(e, TextEvent) else e for e in events]
        resolved = [self._resolve_attachments(e.attachments) for e in drafts]

        def fill(builder: UnitBuilder) -> tuple[list[EventRecord], list[tuple[str, str]]]:
            records, texts = [], []
            for draft, links in zip(drafts, resolved):
                rec, rec_texts = self._write_event(builder, draft, links, plugins)
                records.append(rec)
                texts.extend(rec_texts)
            return records, texts
        return fill

    def commit_file(self, fd: int, *, mime: str, name: str = "", text: str = "",
                    summary: str = "", source: str = "inbox", timestamp: object = None,
                    head: bytes = b"", size_cap: int | None = None,
                    layer: str = "documents", meta: dict[str, str] | None = None) -> str:
        """Write one unit whose single event holds ``text`` (its input) and the bytes read from
        the open file ``fd`` as an attachment block, hashed from the same bytes it writes
        (never loaded whole into memory). ``head`` (the first bytes) gives image dimensions."""
        ts = Timestamp.coerce(timestamp)
        check_strings(mime=mime, name=name, text=text, summary=summary, source=source)

        def fill(builder: UnitBuilder) -> tuple[list[EventRecord], list[tuple[str, str]]]:
            event_id = new_unit_id("e")
            blocks, texts = [], []
            if text:
                ref = builder.add_text(text, role="input", created_at=ts)
                blocks.append(ref)
                texts.append((f"{event_id}:{ref.digest}", self.plugins.source_text(source, text)))
            blocks.append(builder.add_fd(fd, mime, role="attachment", created_at=ts, name=name,
                                         size_cap=size_cap, head=head))
            return [EventRecord(id=event_id, timestamp=ts, source=source, blocks=blocks)], texts
        return self.write_unit(layer, fill, summary=summary, source=source,
                               meta=dict(meta or {}))

    def write_unit(self, layer: str, fill, *, unit_id: str | None = None,
                   publish_with: "Callable[[UnitBuilder, Written], bool] | None" = None,
                   **manifest_fields: object) -> str:
        """Build a unit in staging and publish it into ``layer``: ``fill(builder)`` writes the
        blocks and returns (event records, [(vector row key, compute-layer text)]); the
        manifest gets ``manifest_fields``. On any failure nothing is published and the staged
        directory is removed; filesystem errors surface as StorageError. ``publish_with``
        (under the writer lock) may publish the finished unit itself, with more changes in
        one journal entry (an append's prune): it returns True when it did."""
        builder, manifest, texts = self._stage_unit(fill, unit_id, manifest_fields)
        with self._unpublished_on_failure(builder):
            with self.store.locked():
                written = Written(manifest, builder.vectors, builder.texts,
                                  builder.manifest_key)
                if publish_with is not None and publish_with(builder, written):
                    dst = self.store.unit_dir(layer, builder.unit_id)
                else:
                    dst = self._publish_indexed(builder, layer, written)
                if layer == self.l1 and self._filler is None:
                    seed_written(self, dst, written)
            if self._filler is not None:   # after publish: off the commit's critical path
                self._filler.submit(builder.unit_id, [t for _k, t in texts])
        return builder.unit_id

    def _publish_indexed(self, builder: UnitBuilder, layer: str, written: "Written") -> str:
        """Publish a staged unit (``Store.publish``), indexing it while its last barrier is in
        flight when it goes to documents/; returns its directory."""
        prepared: list[object] = []
        indexed: list[str] = []

        def prepare() -> None:   # overlaps the staged unit's flush
            prepared.append(self._index_entry(builder, layer, written))

        def index_it(dst: str) -> None:   # overlaps the publish's last barrier
            self._indexed(builder.unit_id, layer, added=True, written=written,
                          entry=prepared[0] if prepared else None)
            indexed.append(builder.unit_id)
        try:
            return self.store.publish(builder, layer, prepare=prepare, overlap=index_it)
        except BaseException:
            if indexed:   # withdrawn (its flush failed): out of the index again
                self._indexed(builder.unit_id, layer, added=False)
            raise

    def _stage_unit(self, fill, unit_id: str | None, manifest_fields: dict
                    ) -> tuple[UnitBuilder, Manifest, list[tuple[str, str]]]:
        """Build a finished unit in staging (see ``write_unit``), not yet published: (builder,
        manifest, [(vector row key, compute-layer text)]). On failure nothing is left."""
        try:
            builder = self.store.builder(unit_id)
        except OSError as exc:
            raise StorageError(exc.errno, f"{self.store.staging}: cannot stage a unit: {exc}") from exc
        with self._unpublished_on_failure(builder):
            records, texts = fill(builder)
            now = Timestamp.now()
            # A new unit counts its write as its first access (HomeAgent starts at 1).
            fields = {"created_at": now, "updated_at": now, "access_count": 1,
                      "agent": self.agent, **manifest_fields}
            manifest = Manifest(format=FORMAT_VERSION, id=builder.unit_id,
                                events=records, embedder=self.embedder.fingerprint, **fields)
            texts = [(k, t) for k, t in texts if t.strip()]
            if self._filler is None and stores_vectors(self):
                manifest.vectors = self._embed_rows(builder, texts)
            builder.finish(manifest)
        return builder, manifest, texts

    @contextmanager
    def _unpublished_on_failure(self, builder: UnitBuilder) -> Iterator[None]:
        """On any failure inside, the staged unit is removed (nothing published) and a
        filesystem error surfaces as StorageError."""
        try:
            yield
        except BaseException as exc:
            fsops.rmtree(builder.path)
            if isinstance(exc, OSError) and not isinstance(exc, FsmemError):
                raise StorageError(exc.errno, f"{self.root}: commit failed, nothing published: "
                                   f"{exc}") from exc
            raise

    def _append_draft(self, draft: Event, *, plugins: Plugins | None = None,
                      publish_with: "Callable[[UnitBuilder, Written], bool] | None" = None
                      ) -> str:
        """Write one event into L1 as its own unit, without pruning (unless ``publish_with``
        does, see ``write_unit``); returns its id."""
        event_id = draft.id or new_unit_id("e")
        draft = with_changes(draft, id=event_id, timestamp=Timestamp.coerce(draft.timestamp))
        check_strings(source=draft.source)
        self.write_unit(self.l1, self._events_fill([draft], plugins),
                        publish_with=publish_with, summary="", tags=[], entities=[],
                        source=draft.source, meta={})
        return event_id

    def _write_event(self, builder: UnitBuilder, draft: Event, links: list[tuple[str, BlockRef]],
                     plugins: Plugins | None = None
                     ) -> tuple[EventRecord, list[tuple[str, str]]]:
        """Blocks of one event: input and response text blocks, tool outputs, attachments."""
        ts = Timestamp.coerce(draft.timestamp, field="event.timestamp")
        event_id = check_name(draft.id or new_unit_id("e"), "event id")
        check_strings(source=draft.source, role=draft.role, tools_used=draft.tools_used)
        blocks: list[BlockRef] = []
        texts: list[tuple[str, str]] = []
        compute = plugins or self.plugins

        def text_block(text: str, role: str, compute_text: str) -> BlockRef:
            ref = builder.add_text(text, role=role, created_at=ts)
            blocks.append(ref)
            if compute_text.strip():
                texts.append((f"{event_id}:{ref.digest}", compute_text))
            return ref

        # what the embedder reads names the speaker ("Caroline: ..."), as the index does
        if draft.input:
            text_block(draft.input, "input", spoken_text(
                draft.source, compute.source_text(draft.source, draft.input)))
        if draft.response:
            text_block(draft.response, "response", spoken_text(
                draft.source, compute.source_text(draft.source, draft.response)))
        results = []
        for tr in draft.tool_results:
            check_strings(tool_name=tr.name, tool_output=tr.output)
            ref = text_block(tr.output, "tool_output",
                             compute.tool_text(draft.source, tr.name, tr.output))
            results.append(ToolResult(name=tr.name, block=ref.digest))
        for att in draft.attachments:
            if att.data is not None:
                if not att.mime:
                    raise FsmemError(f"attachment {att.name or '?'}: data given without mime")
                blocks.append(builder.add_bytes(att.data, att.mime, role="attachment",
                                                created_at=ts, name=att.name))
        for src_dir, ref in links:
            if src_dir == MEDIA_STORE:   # a blob of HomeAgent's media store: copied in
                # lazy: start-up, loaded only when used
                from fsmem.homeagent.documents import LegacyMedia, read_blob
                data, mime = read_blob(self.root, LegacyMedia(sha256=ref.sha256)) or (None, "")
                if data is None:
                    raise NotFound(f"media blob {ref.sha256} vanished from the media store")
                blocks.append(builder.add_bytes(data, mime, role="attachment", created_at=ts,
                                                sha256=ref.sha256))
                continue
            builder.add_existing(src_dir, ref)
            blocks.append(BlockRef(digest=ref.digest, modality=ref.modality, mime=ref.mime,
                                   size=ref.size, created_at=ref.created_at, role="attachment",
                                   width=ref.width, height=ref.height, name=ref.name,
                                   semantic_type=ref.semantic_type, sha256=ref.sha256))
        record = EventRecord(id=event_id, timestamp=ts, source=draft.source, role=draft.role,
                             tools_used=list(draft.tools_used), tool_results=results,
                             blocks=_dedupe(blocks))
        return record, texts

    def _embed_rows(self, builder: UnitBuilder, texts: list[tuple[str, str]]):
        if not texts:
            return None
        matrix = self.embedder.embed([t for _, t in texts])
        return builder.set_vectors([k for k, _ in texts], matrix, self.embedder.fingerprint)

    def _resolve_attachments(self, atts: Sequence[MediaAttachment]) -> list[tuple[str, BlockRef]]:
        """Digest-only attachments → (unit dir, block) already in the store; checked first."""
        out = []
        for att in atts:
            if not isinstance(att, MediaAttachment):
                raise FsmemError(f"attachment: expected MediaAttachment, got {type(att).__name__}")
            if att.data is None:
                if not att.digest:
                    raise FsmemError(f"attachment {att.name or '?'}: neither data nor digest")
                out.append(self.find_block(att.digest))
        return out

    def _compute_texts(self, draft: Event) -> list[str]:
        texts = [self.plugins.source_text(draft.source, draft.input),
                 self.plugins.source_text(draft.source, draft.response)]
        texts += [self.plugins.tool_text(draft.source, t.name, t.output) for t in draft.tool_results]
        return [t for t in texts if t.strip()]

    # -- removing ----------------------------------------------------------------------------
    def remove(self, unit_id: str, layer: str = "documents") -> None:
        """Delete a unit on explicit request: it vanishes in one rename, then is deleted."""
        path = self.store.unit_dir(layer, unit_id)
        if layer == "documents" and not os.path.lexists(path):
            # lazy: start-up, loaded only when used
            from fsmem.homeagent.documents import legacy_file_of, remove_legacy
            if legacy_file_of(self.root, unit_id):   # moved to .fsmem/legacy-removed/
                remove_legacy(self, unit_id)
                self._indexed(unit_id, layer, added=False)
                return
        with self.store.locked():
            if not os.path.isdir(path) or os.path.islink(path):
                raise NotFound(f"{path}: no such unit")
            self.store.discard(path)
        self._indexed(unit_id, layer, added=False)

    def _damaged_context(self) -> frozenset[str]:
        """L1 units whose manifest, blocks or vectors fail verification (the failure path
        of prune only: every block of L1 is read)."""
        with self.store.locked():
            return frozenset(uid for uid, path in self.store.list_layer(self.l1).items()
                             if damaged(path, uid))


def with_changes(event: Event, **changes: object) -> Event:
    """A copy of ``event`` with ``changes`` (Events are msgspec Structs)."""
    return msgspec.structs.replace(event, **changes)


def _dedupe(blocks: list[BlockRef]) -> list[BlockRef]:
    """Keep every role of a block once (the same bytes may be input and response)."""
    seen, out = set(), []
    for ref in blocks:
        key = (ref.digest, ref.role)
        if key not in seen:
            seen.add(key)
            out.append(ref)
    return out


def check_strings(**fields: object) -> None:
    """Reject values that are not text (and NULs, which no path or manifest should carry)."""
    for name, value in fields.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if not isinstance(item, str):
                raise FormatError(f"field {name!r}: expected text, got {type(item).__name__}")


def shared_embedder(embedder: Embedder) -> Embedder:
    """The embedder the writer's thread and its background filler share: as it is when it
    says it is ``thread_safe`` (a query then never waits behind a batch being embedded),
    else every call under one lock (an embedding engine need not be thread-safe)."""
    if getattr(embedder, "thread_safe", False):
        return embedder
    # lazy: start-up, loaded only when used (+queue, heapq)
    from fsmem.search.vector_cache import LockedEmbedder
    return LockedEmbedder(embedder, threading.Lock())


def as_event(event: Event | TextEvent | dict) -> Event:
    """An Event from what a caller hands in: an Event, a TextEvent, or a dict of either."""
    if isinstance(event, dict):
        event = TextEvent(**event) if "content" in event else Event(**event)
    if isinstance(event, TextEvent):
        return event.to_event()
    if not isinstance(event, Event):
        raise FormatError(f"turn: expected an Event or TextEvent, got {type(event).__name__}")
    return event
