"""The layer flows: commit and append write units; prune, recall and query move or read them.

Everything here speaks in units, events and blocks; paths come from ``Store`` and ``unit``.
The compute layer (vectors) is derived from block text through the plugin declarations and
stored inside each unit, so no move between layers ever recomputes it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from . import _fsops as fsops
from .blocks import DIGEST_RE
from .embed import Embedder, HashEmbedder
from .errors import (AmbiguousDigest, FormatError, FsmemError, InvalidName, NotFound,
                     StorageError)
from .index import DEFAULT_RANKER
from .model import (FORMAT_VERSION, BlockRef, Event, EventRecord, Manifest, MediaAttachment,
                    TextEvent, ToolResult, check_name)
from .plugins import ChannelDef, Plugins, ToolDef
from .store import Durability, Store, new_unit_id
from .timestamps import Timestamp
from .unit import UnitBuilder, block_path, read_manifest, read_vectors, write_manifest_in_place
from .views import Document, Hit, hydrate_event

__all__ = ["Memory"]

_MEDIA_STORE = "<media-store>"   # find_block's marker for a legacy media-store blob

if TYPE_CHECKING:
    from .index import Index

log = logging.getLogger(__name__)


@dataclass
class _Loaded:
    """One unit read from disk: where it is, its manifest, its vectors by row key."""

    unit_id: str
    path: str
    manifest: Manifest
    rows: dict[str, np.ndarray]
    arrival_ns: int


class Memory:
    """A three-layer memory rooted at a directory (see README and docs/FORMAT.md)."""

    def __init__(self, store: Store, *, context_capacity: int, context_protected: int,
                 plugins: Plugins, embedder: Embedder, auto_prune: bool,
                 ranker: str = DEFAULT_RANKER) -> None:
        if context_capacity < 1 or not 0 <= context_protected <= context_capacity:
            raise ValueError("need context_capacity >= 1 and 0 <= context_protected <= capacity")
        self.store = store
        self.context_capacity = context_capacity
        self.context_protected = context_protected
        self.plugins = plugins
        self.embedder = embedder
        self.auto_prune = auto_prune
        self.ranker = ranker
        self._index: "Index | None" = None
        self._graph = None

    @classmethod
    def open(cls, root: str | os.PathLike, *, context_capacity: int = 30,
             context_protected: int = 10,
             plugins: Plugins | Iterable[ToolDef | ChannelDef] | None = None,
             embedder: Embedder | None = None, durability: Durability = "full",
             lock_timeout: float = 10.0, auto_prune: bool = True, create: bool = True,
             ranker: str | None = None) -> "Memory":
        """Open (creating what is missing) the store at ``root`` and run crash recovery."""
        store = Store(os.fspath(root), durability=durability, lock_timeout=lock_timeout,
                      create=create)
        # The default ranker follows the measurements (docs/BENCHMARKS.md): BM25 alone beats
        # every fusion with the hashed dense signal; with a real embedder, fusion wins.
        default = DEFAULT_RANKER if embedder is None or isinstance(embedder, HashEmbedder) \
            else "fusion"
        mem = cls(store, context_capacity=context_capacity, context_protected=context_protected,
                  plugins=Plugins.of(plugins), embedder=embedder or HashEmbedder(),
                  auto_prune=auto_prune, ranker=ranker or default)
        with store.locked():  # taking the lock runs recovery
            if os.path.isfile(os.path.join(store.root, "context.json")):
                from .legacy import adopt_context_json
                try:
                    adopt_context_json(mem)
                except FormatError as exc:
                    log.error("context.json not adopted: %s", exc)
        return mem

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Save the search index if it has unsaved changes (it is derived: optional) and
        close graph.db."""
        if self._index is not None and self._index._unsaved:
            self._index.save()
        if self._graph is not None:
            self._graph.close()
            self._graph = None

    # -- L3 stable memory -----------------------------------------------------------------
    @property
    def graph(self):
        """graph.db in HomeAgent's schema (fsmem.stablemem.Graph): commit, recall, search."""
        if self._graph is None:
            from .graph import Graph
            self._graph = Graph(self)
        return self._graph

    def find_cold(self, max_age_s: float = 72 * 3600, max_access: int = 2) -> list[str]:
        from .stablemem import find_cold
        return find_cold(self, max_age_s, max_access)

    def distill(self, *, max_age_s: float = 72 * 3600, max_access: int = 2, distiller=None,
                dry_run: bool = False):
        """Distil cold L2 units (legacy HomeAgent documents included: they first become
        new-format units, whole) into graph.db, moving each original into stablemem/."""
        from .stablemem import distill
        if not dry_run:
            from .legacy import convert_cold_legacy
            convert_cold_legacy(self, max_age_s, max_access)
        return distill(self, max_age_s=max_age_s, max_access=max_access, distiller=distiller,
                       dry_run=dry_run)

    def recall_from_graph(self, names, depth: int = 2) -> list[str]:
        """Bring the original units of the facts about ``names`` back to L1 (one rename each)."""
        from .stablemem import recall_from_graph
        return recall_from_graph(self, names, depth)

    # -- index --------------------------------------------------------------------------
    @property
    def index(self) -> "Index":
        """The derived index of L2, loaded on first use and kept in step with documents/."""
        self._load_index()
        self._index.sync()
        return self._index

    def _load_index(self) -> int | None:
        """Load the saved index on first use, or rebuild it; returns the unit count when it
        had to be rebuilt, else None."""
        if self._index is not None:
            return None
        from .index import Index
        self._index = Index(self)
        return None if self._index.load() else self._index.rebuild()

    def reconcile(self) -> dict[str, int]:
        """Bring the index in step with units added, moved or removed by plain file tools;
        returns how many entries were added and removed."""
        rebuilt = self._load_index()
        if rebuilt is not None:
            return {"added": rebuilt, "removed": 0}
        return self._index.sync(force=True)

    def reindex(self, progress=None) -> int:
        """Rebuild the index from the directories alone; returns how many units it holds."""
        from .index import Index
        self._index = Index(self)
        return self._index.rebuild(progress)

    def _indexed(self, unit_id: str, layer: str, *, added: bool) -> None:
        """Tell a loaded index about a change this process made to documents/."""
        if self._index is None or layer != "documents":
            return
        if added:
            self._index.add_unit(unit_id)
        else:
            self._index.remove(unit_id)
        self._index._unsaved += 1

    @property
    def root(self) -> str:
        return self.store.root

    # -- writing ------------------------------------------------------------------------
    def commit(self, content: str, *, summary: str = "", tags: Sequence[str] = (),
               attachments: Sequence[MediaAttachment] = (), source: str = "manual",
               timestamp: object = None, entities: Sequence[str] = (),
               meta: dict[str, str] | None = None, media_digests: Sequence[str] = ()) -> str:
        """Write one L2 unit holding one event (``content`` as its input text block).

        ``media_digests`` (coldcontext_commit's parameter) are digests or unique prefixes of
        blocks already in the store, or sha256 digests of HomeAgent's media store."""
        atts = [*attachments, *(MediaAttachment(digest=d) for d in media_digests)]
        event = Event(timestamp=Timestamp.coerce(timestamp), source=source, input=content,
                      attachments=atts)
        return self.commit_events([event], summary=summary, tags=tags, source=source,
                                  entities=entities, meta=meta)

    def commit_events(self, events: Sequence[Event | TextEvent], *, summary: str = "",
                      tags: Sequence[str] = (), source: str = "manual",
                      entities: Sequence[str] = (), meta: dict[str, str] | None = None,
                      layer: str = "documents", unit_id: str | None = None) -> str:
        """Write one unit holding ``events`` into ``layer`` (documents by default)."""
        drafts = [e.to_event() if isinstance(e, TextEvent) else e for e in events]
        _check_strings(summary=summary, source=source, tags=tags, entities=entities)
        resolved = [self._resolve_attachments(e.attachments) for e in drafts]

        def fill(builder: UnitBuilder) -> tuple[list[EventRecord], list[tuple[str, str]]]:
            records, texts = [], []
            for draft, links in zip(drafts, resolved):
                rec, rec_texts = self._write_event(builder, draft, links)
                records.append(rec)
                texts.extend(rec_texts)
            return records, texts
        return self.write_unit(layer, fill, unit_id=unit_id, summary=summary, tags=list(tags),
                               entities=list(entities), source=source, meta=dict(meta or {}))

    def commit_file(self, fd: int, *, mime: str, name: str = "", text: str = "",
                    summary: str = "", source: str = "inbox", timestamp: object = None,
                    head: bytes = b"", size_cap: int | None = None,
                    layer: str = "documents", meta: dict[str, str] | None = None) -> str:
        """Write one unit whose single event holds ``text`` (its input) and the bytes read from
        the open file ``fd`` as an attachment block, hashed from the same bytes it writes
        (never loaded whole into memory). ``head`` (the first bytes) gives image dimensions."""
        ts = Timestamp.coerce(timestamp)
        _check_strings(mime=mime, name=name, text=text, summary=summary, source=source)

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
                   **manifest_fields: object) -> str:
        """Build a unit in staging and publish it into ``layer``: ``fill(builder)`` writes the
        blocks and returns (event records, [(vector row key, compute-layer text)]); the
        manifest gets ``manifest_fields``. On any failure nothing is published and the staged
        directory is removed; filesystem errors surface as StorageError."""
        try:
            builder = self.store.builder(unit_id)
        except OSError as exc:
            raise StorageError(exc.errno, f"{self.store.staging}: cannot stage a unit: {exc}") from exc
        try:
            records, texts = fill(builder)
            now = Timestamp.now()
            fields = {"created_at": now, **manifest_fields}
            manifest = Manifest(format=FORMAT_VERSION, id=builder.unit_id, updated_at=now,
                                events=records, embedder=self.embedder.fingerprint, **fields)
            manifest.vectors = self._embed_rows(builder, [(k, t) for k, t in texts if t.strip()])
            builder.finish(manifest)
            self.store.publish(builder, layer)
            self._indexed(builder.unit_id, layer, added=True)
        except BaseException as exc:
            _remove_tree(builder.path)
            if isinstance(exc, OSError) and not isinstance(exc, FsmemError):
                raise StorageError(exc.errno, f"{self.root}: commit failed, nothing published: "
                                   f"{exc}") from exc
            raise
        return builder.unit_id

    def append(self, event: Event | TextEvent | dict) -> str:
        """Add one event to L1 (durable on return); prunes if L1 is over capacity."""
        if isinstance(event, dict):
            event = TextEvent(**event) if "content" in event else Event(**event)
        draft = event.to_event() if isinstance(event, TextEvent) else event
        event_id = draft.id or new_unit_id("e")
        draft = _with(draft, id=event_id, timestamp=Timestamp.coerce(draft.timestamp))
        self.commit_events([draft], source=draft.source, layer="context")
        if self.auto_prune:
            self.prune(query=" ".join(self._compute_texts(draft)))
        return event_id

    def _write_event(self, builder: UnitBuilder, draft: Event,
                     links: list[tuple[str, BlockRef]]) -> tuple[EventRecord, list[tuple[str, str]]]:
        """Blocks of one event: input and response text blocks, tool outputs, attachments."""
        ts = Timestamp.coerce(draft.timestamp, field="event.timestamp")
        event_id = check_name(draft.id or new_unit_id("e"), "event id")
        _check_strings(source=draft.source, role=draft.role, tools_used=draft.tools_used)
        blocks: list[BlockRef] = []
        texts: list[tuple[str, str]] = []
        compute = self.plugins

        def text_block(text: str, role: str, compute_text: str) -> BlockRef:
            ref = builder.add_text(text, role=role, created_at=ts)
            blocks.append(ref)
            if compute_text.strip():
                texts.append((f"{event_id}:{ref.digest}", compute_text))
            return ref

        if draft.input:
            text_block(draft.input, "input", compute.source_text(draft.source, draft.input))
        if draft.response:
            text_block(draft.response, "response",
                       compute.source_text(draft.source, draft.response))
        results = []
        for tr in draft.tool_results:
            _check_strings(tool_name=tr.name, tool_output=tr.output)
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
            if src_dir == _MEDIA_STORE:   # a blob of HomeAgent's media store: copied in
                from .legacy import LegacyMedia, read_blob
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

    def find_block(self, digest: str) -> tuple[str, BlockRef]:
        """The unit directory and reference of the block whose digest (or unique prefix of at
        least 8 hex) is ``digest``; NotFound or AmbiguousDigest otherwise."""
        prefix = digest.strip().lower()
        if not (8 <= len(prefix) <= 64) or not DIGEST_RE.match(prefix.ljust(64, "0")):
            raise InvalidName(f"digest {digest!r}: want 8 to 64 hex characters")
        found: dict[str, tuple[str, BlockRef]] = {}
        for layer in ("context", "documents", "stablemem"):
            for unit_id in self.store.iter_units(layer):
                path = self.store.unit_dir(layer, unit_id)
                try:
                    manifest = read_manifest(path)
                except FsmemError:
                    continue
                for ev in manifest.events:
                    for ref in ev.blocks:
                        if ref.digest.startswith(prefix) or ref.sha256.startswith(prefix):
                            found.setdefault(ref.digest, (path, ref))
        if not found:
            from .legacy import find_legacy_blob
            legacy = find_legacy_blob(self.root, prefix)
            if len(legacy) > 1:
                raise AmbiguousDigest(f"digest {digest!r} matches {len(legacy)} media blobs")
            if legacy:   # HomeAgent's media store (sha256): resolved, copied in on write
                return _MEDIA_STORE, BlockRef(digest="0" * 64, modality="file", mime="",
                                              size=0, created_at=Timestamp.now(),
                                              role="attachment", sha256=legacy[0])
            raise NotFound(f"digest {digest!r}: no block in the store has it")
        if len(found) > 1:
            raise AmbiguousDigest(f"digest {digest!r} matches {len(found)} blocks: "
                                  + ", ".join(sorted(d[:16] for d in found)))
        return next(iter(found.values()))

    # -- reading ------------------------------------------------------------------------
    def document(self, unit_id: str) -> Document:
        """A unit read back whole, from whichever layer holds it."""
        layer, path = self.store.locate(unit_id)
        manifest = read_manifest(path)
        events = [hydrate_event(path, manifest.id, rec) for rec in manifest.events]
        return Document.of(manifest, layer=layer, path=path, events=events)

    def read_block(self, digest: str) -> bytes:
        """The bytes of a block (digest or unique prefix), verified against its digest."""
        from .blocks import read_block
        path, ref = self.find_block(digest)
        return read_block(block_path(path, ref), ref.digest)

    def units(self, layer: str) -> list[str]:
        return list(self.store.iter_units(layer))

    def timeline(self) -> list[Event]:
        """The L1 events, sorted by original timestamp (ties: arrival, then event id)."""
        loaded = self._load_layer("context", with_vectors=False)
        events = [(hydrate_event(u.path, u.unit_id, rec), u.arrival_ns)
                  for u in loaded for rec in u.manifest.events]
        events.sort(key=lambda p: (p[0].timestamp.ns, p[1], p[0].id))
        return [e for e, _ in events]

    def render(self, budget_tokens: int, *, estimator=None) -> str:
        """The model's view of L1 under a token budget (fsmem.render.render over timeline())."""
        from .render import render
        return render(self.timeline(), budget_tokens, estimator=estimator)

    def _load_layer(self, layer: str, *, with_vectors: bool) -> list[_Loaded]:
        out = []
        for unit_id in self.store.iter_units(layer):
            path = self.store.unit_dir(layer, unit_id)
            try:
                manifest = read_manifest(path)
                st = os.stat(path)
                rows: dict[str, np.ndarray] = {}
                if with_vectors and manifest.vectors is not None \
                        and manifest.vectors.embedder == self.embedder.fingerprint:
                    keys, mat = read_vectors(path, manifest)  # type: ignore[misc]
                    rows = dict(zip(keys, mat))
            except FileNotFoundError:
                continue  # moved by another process while we listed
            except FsmemError as exc:
                log.warning("skipping damaged unit %s: %s", path, exc)
                continue
            out.append(_Loaded(unit_id, path, manifest, rows, st.st_mtime_ns))
        return out

    # -- compute layer ------------------------------------------------------------------
    def _compute_texts(self, draft: Event) -> list[str]:
        texts = [self.plugins.source_text(draft.source, draft.input),
                 self.plugins.source_text(draft.source, draft.response)]
        texts += [self.plugins.tool_text(draft.source, t.name, t.output) for t in draft.tool_results]
        return [t for t in texts if t.strip()]

    def _query_vector(self, text: str) -> np.ndarray | None:
        if not text.strip():
            return None
        return self.embedder.embed([text])[0]

    # -- query / recall / prune -----------------------------------------------------------
    def query(self, text: str, top_k: int = 3) -> list[Hit]:
        """Read-only search of L2: nothing moves; only access_count/last_access change."""
        hits = self._search(text, top_k)
        if hits:
            self._touch(hits)
        return hits

    def _search(self, text: str, top_k: int, ranker: str | None = None) -> list[Hit]:
        index = self.index
        hits = []
        for unit_id, score, matched in index.search_events(text, top_k, ranker or self.ranker):
            row = index.row_of.get(unit_id)
            if row is not None and index.alive[row]:
                summary, events = index.summaries[row], int(index.nevents[row])
                created = Timestamp(int(index.created[row, 0]), int(index.created[row, 1]))
            else:
                e = index.pending[unit_id]
                summary, events = e.summary, e.events
                created = Timestamp(e.created_ns, e.created_off)
            hits.append(Hit(unit_id=unit_id, score=score, summary=summary, created_at=created,
                            events=events, events_matched=matched))
        return hits

    def _touch(self, hits: list[Hit]) -> None:
        now = Timestamp.now()
        with self.store.locked():
            for hit in hits:
                path = self.store.unit_dir("documents", hit.unit_id)
                if not os.path.isdir(path):
                    continue  # a legacy JSON document: never rewritten, or moved meanwhile
                try:
                    manifest = read_manifest(path)
                except (NotFound, FileNotFoundError):
                    continue
                manifest.access_count += 1
                manifest.last_access = now
                write_manifest_in_place(path, manifest, scratch_dir=self.store.staging,
                                        sync=self.store.sync)

    def recall(self, text: str, top_k: int = 3) -> list[str]:
        """Move the best L2 matches into L1, each by one rename; returns the moved unit ids."""
        moved = []
        hits = self._search(text, top_k)   # brings the index in step once, not per hit
        for hit in hits:
            legacy_file = self._index.legacy_file(hit.unit_id)
            with self.store.locked():
                if legacy_file:
                    from .legacy import recall_legacy
                    uid = recall_legacy(self, legacy_file)
                    self._indexed(hit.unit_id, "documents", added=False)
                    if uid:
                        moved.append(uid)
                    continue
                src = self.store.unit_dir("documents", hit.unit_id)
                if not os.path.isdir(src):
                    continue  # another process recalled it first
                os.utime(src, ns=(Timestamp.now().ns,) * 2)  # arrival in L1
                if self.store.sync:
                    fsops.fsync_dir(src)
                self.store.move(hit.unit_id, "documents", "context")
                self._indexed(hit.unit_id, "documents", added=False)
                moved.append(hit.unit_id)
        if moved and self.auto_prune:
            self.prune(query=text)
        return moved

    def prune(self, query: str = "") -> str | None:
        """If L1 holds more than capacity, move the least relevant unprotected events into one
        new L2 unit (journaled, exactly once); returns its id, or None when nothing moved."""
        from .prune import prune_context
        return prune_context(self, query)

    def remove(self, unit_id: str, layer: str = "documents") -> None:
        """Delete a unit on explicit request: it vanishes in one rename, then is deleted."""
        path = self.store.unit_dir(layer, unit_id)
        with self.store.locked():
            if not os.path.isdir(path) or os.path.islink(path):
                raise NotFound(f"{path}: no such unit")
            self.store.discard(path)
        self._indexed(unit_id, layer, added=False)

    # -- maintenance ----------------------------------------------------------------------
    def fsck(self, *, fix: bool = False, read_data: bool = True):
        from .fsck import fsck
        return fsck(self.store, fix=fix, read_data=read_data)

    def stats(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for layer in ("context", "documents", "stablemem"):
            units = self._load_layer(layer, with_vectors=False)
            out[f"{layer}_units"] = len(units)
            out[f"{layer}_events"] = sum(len(u.manifest.events) for u in units)
        from .legacy import legacy_doc_files
        out["legacy_documents"] = len(legacy_doc_files(self.root))
        return out


def _with(event: Event, **changes: object) -> Event:
    import msgspec
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


def _check_strings(**fields: object) -> None:
    """Reject values that are not text (and NULs, which no path or manifest should carry)."""
    for name, value in fields.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if not isinstance(item, str):
                raise FormatError(f"field {name!r}: expected text, got {type(item).__name__}")


def _remove_tree(path: str) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)
