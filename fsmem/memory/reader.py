"""The read side of a memory: listing, loading, query, timeline, render, stats, fsck.

A ``Reader`` takes no lock, never creates, probes, recovers or saves anything, and works on a
live store, a read-only mount, a ``chmod -R a-w`` copy or a snapshot. Every read runs on one
consistent view of the layers (``Layout.consistent``): a prune being applied is seen whole,
before or after, never half. A missing or stale search index is built in memory and not saved.
Query bumps go to the access log only where it is writable.

``Writer`` (fsmem.memory.writer), the write side, is a Reader that also holds the writer lock;
``Memory`` (fsmem.memory.facade) is the Writer with the flows.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Sequence, TypeVar

from fsmem.format import blocks as blockfiles  # module attribute: tests count its reads
from fsmem.format.blocks import DIGEST_RE
from fsmem.format.errors import AmbiguousDigest, FsmemError, InvalidName, NotFound
from fsmem.format.layout import LAYERS, Layout, Vanished, View
from fsmem.format.model import BlockRef, Event, Manifest, check_name
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import block_path, read_manifest, read_vectors
from fsmem.format.views import Document, Hit, hydrate_event
from fsmem.store.access import AccessLog, AccessStats

if TYPE_CHECKING:   # numpy, the index, embedders and plugins load on first use (CLI start-up)
    import numpy as np

    from fsmem.format.plugins import ChannelDef, Plugins, ToolDef
    from fsmem.memory.render import HitView
    from fsmem.search.embed import Embedder
    from fsmem.search.index import Index

__all__ = ["Reader", "Loaded", "MEDIA_STORE", "default_ranker", "hit_views", "find_cold"]

log = logging.getLogger("fsmem.reader")

MEDIA_STORE = "<media-store>"   # find_block's marker for a legacy media-store blob
T = TypeVar("T")


def default_ranker(embedder: Embedder | None) -> str:
    """BM25 alone beats every fusion with the hashed dense signal; with a real embedder,
    fusion wins (docs/BENCHMARKS.md)."""
    # lazy: start-up, loaded only when used (+numpy, ctypes, zlib)
    from fsmem.search.embed import HashEmbedder

    # lazy: start-up, loaded only when used (+numpy, ctypes)
    from fsmem.search.ranking import DEFAULT_RANKER
    return DEFAULT_RANKER if embedder is None or isinstance(embedder, HashEmbedder) \
        else "fusion"


@dataclass
class Loaded:
    """One unit read from disk: where it is, its manifest, its vectors by row key."""

    unit_id: str
    path: str
    manifest: Manifest
    rows: dict[str, np.ndarray]
    arrival_ns: int


class Reader:
    """Lock-free, write-free access to a store (or a HomeAgent directory read in place)."""

    writable = False

    def __init__(self, layout: Layout, *, plugins: Plugins | None, embedder: Embedder | None,
                 ranker: str | None) -> None:
        self.layout = layout
        self._plugins = plugins   # None: an empty registry, made on first use
        self._embedder = embedder   # None: the hashed default, built on first use
        self._ranker = ranker or (default_ranker(embedder) if embedder is not None else None)
        self.access = AccessLog(layout.meta)
        self._index: "Index | None" = None
        self._index_lock = threading.RLock()   # threads querying one Memory: see ``index``
        self._graph = None

    @classmethod
    def open(cls, root: str | os.PathLike[str], *,
             plugins: Plugins | Iterable[ToolDef | ChannelDef] | None = None,
             embedder: Embedder | None = None, ranker: str | None = None) -> "Reader":
        """Open ``root`` read-only: NotAStore unless it is an fsmem store or a HomeAgent
        memory directory. Nothing is created, locked or written."""
        layout = Layout(root)
        layout.require_readable()
        if plugins is not None:
            from fsmem.format.plugins import Plugins  # lazy: start-up, loaded only when used
            plugins = Plugins.of(plugins)
        return cls(layout, plugins=plugins, embedder=embedder, ranker=ranker)

    @property
    def plugins(self) -> Plugins:
        """The host's tool and channel declarations (none given: an empty registry, made on
        first use, as listing and reading units never consult it)."""
        if self._plugins is None:
            from fsmem.format.plugins import Plugins  # lazy: start-up, loaded only when used
            self._plugins = Plugins()
        return self._plugins

    @plugins.setter
    def plugins(self, value: Plugins) -> None:
        self._plugins = value

    @property
    def embedder(self) -> Embedder:
        """The embedder of vectors and queries; the default (fsmem.search.embed.HashEmbedder) is
        built on first use, so listing and reading units never import numpy."""
        if self._embedder is None:
            # lazy: start-up, loaded only when used (+numpy, ctypes, zlib)
            from fsmem.search.embed import HashEmbedder
            self._embedder = HashEmbedder()
        return self._embedder

    @embedder.setter
    def embedder(self, value: Embedder) -> None:
        self._embedder = value

    @property
    def ranker(self) -> str:
        """The ranker of queries (``default_ranker`` of the embedder given to ``open``)."""
        if self._ranker is None:
            self._ranker = default_ranker(None)
        return self._ranker

    @ranker.setter
    def ranker(self, value: str) -> None:
        self._ranker = value

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._graph is not None:
            self._graph.close()
            self._graph = None

    @property
    def root(self) -> str:
        return self.layout.root

    # -- consistent loading -----------------------------------------------------------------
    def consistent(self, read: Callable[[View], T], layers: tuple[str, ...] = LAYERS) -> T:
        return self.layout.consistent(read, layers)

    def _read_unit(self, uid: str, path: str, *, with_vectors: bool) -> Loaded | None:
        """One unit of a view; None (logged) if it is damaged; Vanished if it moved away."""
        try:
            manifest = read_manifest(path, expect_id=uid)
            st = os.stat(path)
            rows: dict[str, np.ndarray] = {}
            if with_vectors and manifest.vectors is not None \
                    and manifest.vectors.embedder == self.embedder.fingerprint:
                keys, mat = read_vectors(path, manifest)  # type: ignore[misc]
                rows = dict(zip(keys, mat))
            if with_vectors:   # rows not stored in the unit: the derived vector cache
                # lazy: start-up, loaded only when used (+numpy, ctypes, queue)
                from fsmem.search.vector_cache import fill_rows
                fill_rows(self.vector_cache, self.plugins, path, manifest, rows)
        except (FsmemError, OSError) as exc:
            if self.layout.vanished(path):
                raise Vanished(path) from exc
            log.warning("skipping damaged unit %s: %s", path, exc)
            return None
        return Loaded(uid, path, manifest, rows, st.st_mtime_ns)

    def _units_of(self, view: View, layer: str, *, with_vectors: bool = False) -> list[Loaded]:
        out = []
        for uid, path in view.layer(layer):
            unit = self._read_unit(uid, path, with_vectors=with_vectors)
            if unit is not None:
                out.append(unit)
        return out

    def _load_layer(self, layer: str, *, with_vectors: bool) -> list[Loaded]:
        """Every readable unit of ``layer``, from one consistent view."""
        return self.consistent(lambda v: self._units_of(v, layer, with_vectors=with_vectors),
                               (layer,))

    def _hydrate(self, unit: Loaded) -> list[Event] | None:
        """A unit's events with their text; None (logged) if a block is damaged."""
        try:
            return [hydrate_event(unit.path, unit.unit_id, rec) for rec in unit.manifest.events]
        except (FsmemError, OSError, UnicodeDecodeError) as exc:
            if self.layout.vanished(unit.path):
                raise Vanished(unit.path) from exc
            log.warning("skipping damaged unit %s: %s", unit.path, exc)
            return None

    # -- reading ----------------------------------------------------------------------------
    def units(self, layer: str) -> list[str]:
        return [uid for uid, _ in self.consistent(lambda v: v.layer(layer), (layer,))]

    def timeline(self) -> list[Event]:
        """The L1 events, sorted by original timestamp (ties: arrival, then event id)."""
        def read(view: View) -> list[Event]:
            pairs = []
            for unit in self._units_of(view, "context"):
                for ev in self._hydrate(unit) or ():
                    pairs.append((ev, unit.arrival_ns))
            pairs.sort(key=lambda p: (p[0].timestamp.ns, p[1], p[0].id))
            return [e for e, _ in pairs]
        return self.consistent(read, ("context",))

    def render(self, budget_tokens: int, *, estimator=None, hits: Sequence[Hit] = (),
               memory_tokens: int | None = None) -> str:
        """The model's view of L1 under a token budget (fsmem.memory.render.render over timeline());
        ``hits`` (a turn's query hits) come first as their own section within
        ``memory_tokens`` (default: a third of the budget, budget_split's memory share)."""
        from fsmem.memory.render import render  # lazy: start-up, loaded only when used
        views = hit_views(self, hits)
        if views and memory_tokens is None:
            memory_tokens = budget_tokens // 3
            budget_tokens -= memory_tokens
        return render(self.timeline(), budget_tokens, estimator=estimator, hits=views,
                      memory_tokens=memory_tokens or 0)

    def document(self, unit_id: str) -> Document:
        """A unit read back whole, from whichever layer holds it."""
        check_name(unit_id)

        def read(view: View) -> Document:
            found = view.locate(unit_id)
            if found is None:   # a HomeAgent document still in documents/: the fallback
                # lazy: start-up, loaded only when used
                from fsmem.homeagent.documents import legacy_document
                doc = legacy_document(self.root, unit_id)
                seen = self.access.stats().get(unit_id)
                if seen is not None:
                    doc.access_count += seen.count
                return doc
            layer, path = found
            try:
                manifest = read_manifest(path, expect_id=unit_id)
                events = [hydrate_event(path, manifest.id, rec) for rec in manifest.events]
            except (FsmemError, OSError) as exc:
                if self.layout.vanished(path):
                    raise Vanished(path) from exc
                raise
            doc = Document.of(manifest, layer=layer, path=path, events=events)
            doc.access_count, last = self.access_of(manifest, self.access.stats().get(unit_id))
            doc.last_access = last
            return doc
        return self.consistent(read)

    def access_of(self, manifest: Manifest, logged: AccessStats | None
                  ) -> tuple[int, Timestamp | None]:
        """A unit's access count and last access: what its manifest was written with (a
        format-1 manifest did not count its write) plus its lines in the access log."""
        count = manifest.access_count + (1 if manifest.format < 2 else 0)
        last = manifest.last_access
        if logged is not None:
            count += logged.count
            if last is None or logged.last_ns > last.ns:
                last = Timestamp(logged.last_ns, 0)
        return count, last

    def find_block(self, digest: str) -> tuple[str, BlockRef]:
        """The unit directory and reference of the block whose digest (or unique prefix of at
        least 8 hex) is ``digest``; NotFound or AmbiguousDigest otherwise. A HomeAgent block
        id (``blk_…``) resolves too."""
        if digest.startswith("blk_"):
            return self._find_legacy_block(digest)
        prefix = digest.strip().lower()
        if not (8 <= len(prefix) <= 64) or not DIGEST_RE.match(prefix.ljust(64, "0")):
            raise InvalidName(f"digest {digest!r}: want 8 to 64 hex characters")

        def read(view: View) -> dict[str, tuple[str, BlockRef]]:
            found: dict[str, tuple[str, BlockRef]] = {}
            for layer in LAYERS:
                for unit in self._units_of(view, layer):
                    for ev in unit.manifest.events:
                        for ref in ev.blocks:
                            if ref.digest.startswith(prefix) or ref.sha256.startswith(prefix):
                                found.setdefault(ref.digest, (unit.path, ref))
            return found
        found = self.consistent(read)
        if not found:
            # lazy: start-up, loaded only when used
            from fsmem.homeagent.documents import find_legacy_blob
            legacy = find_legacy_blob(self.root, prefix)
            if len(legacy) > 1:
                raise AmbiguousDigest(f"digest {digest!r} matches {len(legacy)} media blobs")
            if legacy:   # HomeAgent's media store (sha256): resolved, copied in on write
                return MEDIA_STORE, BlockRef(digest="0" * 64, modality="file", mime="",
                                             size=0, created_at=Timestamp.now(),
                                             role="attachment", sha256=legacy[0])
            raise NotFound(f"digest {digest!r}: no block in the store has it")
        if len(found) > 1:
            raise AmbiguousDigest(f"digest {digest!r} matches {len(found)} blocks: "
                                  + ", ".join(sorted(d[:16] for d in found)))
        return next(iter(found.values()))

    def _find_legacy_block(self, block_id: str) -> tuple[str, BlockRef]:
        """The block a HomeAgent ``blk_…`` id names: in a unit (kept as legacy_id), else a
        media-store blob named by a legacy document or by graph.db's memory_blocks row."""
        def read(view: View) -> tuple[str, BlockRef] | None:
            for layer in LAYERS:
                for unit in self._units_of(view, layer):
                    for ev in unit.manifest.events:
                        for ref in ev.blocks:
                            if ref.legacy_id == block_id:
                                return unit.path, ref
            return None
        found = self.consistent(read)
        if found is not None:
            return found
        # lazy: start-up, loaded only when used
        from fsmem.homeagent.documents import find_legacy_block
        m = find_legacy_block(self.root, block_id)
        sha = m.sha256 if m else self.graph.payload_digest(block_id)
        if sha:
            return self.find_block(sha)
        raise NotFound(f"block {block_id!r}: no unit, legacy document or graph row has it")

    def read_block(self, digest: str) -> bytes:
        """The bytes of a block (digest or unique prefix), verified against its digest."""
        path, ref = self.find_block(digest)
        if path == MEDIA_STORE:   # a HomeAgent media-store blob (verified by its sha256)
            # lazy: start-up, loaded only when used
            from fsmem.homeagent.documents import LegacyMedia, read_blob
            got = read_blob(self.root, LegacyMedia(sha256=ref.sha256))
            if got is None:
                raise NotFound(f"media blob {ref.sha256} missing from the media store")
            return got[0]
        return blockfiles.read_block(block_path(path, ref), ref.digest)

    # -- search -----------------------------------------------------------------------------
    @property
    def index(self) -> "Index":
        """The derived index of L2, loaded on first use and kept in step with documents/
        (a reader builds what is missing in memory and never saves it). Loading and the
        catch-up change the index, so threads querying one Memory take turns here."""
        with self._index_lock:
            self._load_index()
            self._index.sync()
            self._refresh_vectors()
            return self._index

    _vector_cache = None

    @property
    def vector_cache(self):
        """The derived vector cache of this embedder (fsmem.search.vector_cache), None if there is
        none; read here, written only by the writer's filler."""
        filler = getattr(self, "_filler", None)
        if filler is not None:
            return filler.cache
        if self._vector_cache is None:
            # lazy: start-up, loaded only when used (+numpy, ctypes, queue)
            from fsmem.search.vector_cache import VectorCache
            self._vector_cache = VectorCache(self.layout.meta, self.embedder.fingerprint,
                                             self.embedder.dim)
        return self._vector_cache if self._vector_cache.exists() else None

    _vectors_healed = False   # the index's zero-vector units were re-read (first use)

    def _refresh_vectors(self) -> None:
        """A reader never waits for vectors: units lacking some rank lexically. On first use
        it takes, in memory, the cached vectors of units its index holds without (a snapshot
        saved before the writer's filler ran)."""
        if self._vectors_healed or self._index is None:
            return
        self._vectors_healed = True
        if self.vector_cache is not None:
            # lazy: start-up, loaded only when used (+numpy, ctypes, queue)
            from fsmem.search.vector_cache import heal_index
            heal_index(self._index)

    # ``progress(done, total)``: told while a long index catch-up runs (the CLI's bar).
    progress: Callable[[int, int], None] | None = None

    def _load_index(self) -> int | None:
        """Load the saved index on first use, or rebuild it; returns the unit count when it
        had to be rebuilt, else None."""
        if self._index is not None:
            return None
        # lazy: start-up, loaded only when used (+numpy, ctypes)
        from fsmem.search.index import Index
        self._index = Index(self)
        return None if self._index.load() else self._index.rebuild()

    def query(self, text: str, top_k: int = 3, *, count: bool = True) -> list[Hit]:
        """Read-only search of L2: nothing moves, no unit changes; each hit's access is
        appended to the access log when it is writable (``count=False``: not at all)."""
        hits = self._search(text, top_k)
        if hits and count:
            self.access.record(h.unit_id for h in hits)
        return hits

    def _search(self, text: str, top_k: int, ranker: str | None = None) -> list[Hit]:
        index = self.index
        hits = []
        for unit_id, score, matched in index.search_events(text, top_k, ranker or self.ranker):
            row = index.row_of.get(unit_id)
            if row is not None and index.alive[row]:
                summary, events = index.summaries[row], int(index.nevents[row])
                created = index.created_at(row)
            else:
                e = index.pending[unit_id]
                summary, events = e.summary, e.events
                created = Timestamp(e.created_ns, e.created_off)
            hits.append(Hit(unit_id=unit_id, score=score, summary=summary, created_at=created,
                            events=events, events_matched=matched))
        return hits

    # -- L3 -----------------------------------------------------------------------------------
    @property
    def graph(self):
        """graph.db (fsmem.graph.graph.Graph); a reader opens it read-only and never creates it."""
        if self._graph is None:
            # lazy: start-up, loaded only when used (+sqlite3, shutil, hashlib)
            from fsmem.graph.graph import Graph
            self._graph = Graph(self)
        return self._graph

    def find_cold(self, max_age_s: float = 72 * 3600, max_access: int = 2) -> list[str]:
        return find_cold(self, max_age_s, max_access)

    # -- maintenance ------------------------------------------------------------------------
    def fsck(self, *, read_data: bool = True):
        """The store's consistency check, read-only: findings, nothing repaired."""
        from fsmem.memory.fsck import fsck  # lazy: start-up, loaded only when used
        return fsck(self.layout, read_data=read_data)

    def stats(self) -> dict[str, int]:
        def read(view: View) -> dict[str, int]:
            out: dict[str, int] = {}
            for layer in LAYERS:
                units = self._units_of(view, layer)
                out[f"{layer}_units"] = len(units)
                out[f"{layer}_events"] = sum(len(u.manifest.events) for u in units)
            return out
        out = self.consistent(read)
        # lazy: start-up, loaded only when used
        from fsmem.homeagent.documents import legacy_counts
        out["legacy_documents"], out["legacy_unreadable"] = legacy_counts(self.root)
        return out


def hit_views(mem: Reader, hits: Iterable[Hit]) -> list["HitView"]:
    """The hits as the model's view shows them: label = summary (or id), text = the unit's
    content, every event whole. Read-only; a hit gone meanwhile is left out."""
    from fsmem.memory.render import HitView  # lazy: start-up, loaded only when used
    out = []
    for hit in hits:
        try:
            doc = mem.document(hit.unit_id)
        except (FsmemError, OSError):
            continue
        out.append(HitView(label=doc.summary or hit.summary or doc.id, text=doc.content))
    return out


def find_cold(mem: Reader, max_age_s: float = 72 * 3600, max_access: int = 2, *,
              now: Timestamp | None = None) -> list[str]:
    """L2 units accessed at most ``max_access`` times (the write counts as the first, as in
    HomeAgent) whose last access (else creation) is at least ``max_age_s`` old, oldest first
    (HomeAgent FindColdDocs, thresholds as parameters). Counts come from the manifest a unit
    was written with plus the access log."""
    now_ns = (now or Timestamp.now()).ns
    limit = now_ns - int(max_age_s * 1e9)
    logged = mem.access.stats()
    found = []
    for unit in mem._load_layer("documents", with_vectors=False):
        count, last = mem.access_of(unit.manifest, logged.get(unit.unit_id))
        ref = (last or unit.manifest.created_at).ns
        if count <= max_access and ref <= limit:
            found.append((ref, unit.unit_id))
    return [u for _, u in sorted(found)]
