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

import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, TypeVar

from fsmem.format.errors import InvalidName, NotFound
from fsmem.format.layout import Layout, View, l1_layer
from fsmem.format.model import SCOPES, BlockRef, Event, Manifest, check_agent
from fsmem.format.timestamps import Timestamp
from fsmem.format.views import Document, Hit
from fsmem.memory import lookup, units
from fsmem.memory.lookup import MEDIA_STORE, hit_views
from fsmem.memory.units import Loaded, find_cold
from fsmem.store.access import AccessLog, AccessStats

if TYPE_CHECKING:   # the index, embedders and plugins load on first use (CLI start-up)
    from fsmem.store.changes import Change
    from fsmem.format.plugins import ChannelDef, Plugins, ToolDef
    from fsmem.search.embed import Embedder
    from fsmem.search.index import Index

__all__ = ["Reader", "Loaded", "MEDIA_STORE", "default_ranker", "hit_views", "find_cold"]


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


class Reader:
    """Lock-free, write-free access to a store (or a HomeAgent directory read in place)."""

    writable = False

    def __init__(self, layout: Layout, *, plugins: Plugins | None, embedder: Embedder | None,
                 ranker: str | None, agent: str | None = None,
                 embedder_name: str = "hash") -> None:
        self.layout = layout
        # The agent this memory reads and writes as (format 4; "" = the default agent): its
        # L1 is the layer ``l1``; searches see its own units and every agent's shared ones.
        self.agent = check_agent(agent)
        self.l1 = l1_layer(self.agent)
        self._plugins = plugins   # None: an empty registry, made on first use
        self._embedder = embedder   # None: the store's (or the hashed default), on first use
        # the store's embedder setting (fsmem.store.config), made on first use when none given
        self.embedder_name = embedder_name if embedder is None else ""
        self._ranker = ranker or (default_ranker(embedder) if embedder is not None else
                                  "fusion" if embedder_name != "hash" else None)
        self.access = AccessLog(layout.meta)
        self._index: "Index | None" = None
        self._layer_indexes: dict[str, "Index"] = {}   # L1's, L3's: ``search`` (search_all)
        self._index_lock = threading.RLock()   # threads querying one Memory: see ``index``
        self._graph = None

    @classmethod
    def open(cls, root: str | os.PathLike[str], *,
             plugins: Plugins | Iterable[ToolDef | ChannelDef] | None = None,
             embedder: Embedder | None = None, ranker: str | None = None,
             agent: str | None = None) -> "Reader":
        """Open ``root`` read-only: NotAStore unless it is an fsmem store or a HomeAgent
        memory directory. Nothing is created, locked or written. ``agent``: whose L1 and
        whose view of L2/L3 (default: the default agent)."""
        layout = Layout(root)
        layout.require_readable()
        name = "hash"
        if os.path.isfile(os.path.join(layout.meta, "config.toml")) or any(
                os.environ.get(v) for v in ("FSMEM_AGENT", "FSMEM_EMBEDDER", "FSMEM_RANKER")):
            # lazy: start-up, loaded only when used (+tomllib)
            from fsmem.store.config import effective
            cfg = effective(layout.root, {})   # the file < $FSMEM_* < the arguments
            agent = cfg["agent"] if agent is None else agent
            name = cfg["embedder"]
            if ranker is None and cfg["ranker"] != "auto":
                ranker = cfg["ranker"]
        if plugins is not None:
            from fsmem.format.plugins import Plugins  # lazy: start-up, loaded only when used
            plugins = Plugins.of(plugins)
        return cls(layout, plugins=plugins, embedder=embedder, ranker=ranker, agent=agent,
                   embedder_name=name)

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
        if self._embedder is None and self.embedder_name in ("", "hash"):
            # lazy: start-up, loaded only when used (+numpy, ctypes, zlib)
            from fsmem.search.embed import HashEmbedder
            self._embedder = HashEmbedder()
        elif self._embedder is None:   # the store's own (config.toml)
            # lazy: start-up, loaded only when used (+the embedder's package)
            from fsmem.search.embedders import make_embedder
            self._embedder = make_embedder(
                self.embedder_name or "hash",
                f"embedder = {self.embedder_name!r} in {self.layout.meta}/config.toml")
        return self._embedder

    @embedder.setter
    def embedder(self, value: Embedder) -> None:
        self._embedder = value

    def search_settings(self) -> dict[str, Any]:
        """The embedder and ranker this memory searches with (``doctor``, ``stats``), without
        loading a model: its setting name ("hash", "e5-small", ...; a host's own: its
        fingerprint), whether its package is installed, and the extra that brings it."""
        import importlib.util  # lazy: start-up, loaded only when used

        from fsmem.store.config import EMBEDDER_EXTRAS  # lazy: start-up (+tomllib)
        name = self.embedder_name
        if not name:   # a host's own embedder object (a writer's): its setting or fingerprint
            from fsmem.search.embedders import embedder_name  # lazy: +numpy
            name = embedder_name(self.embedder)
        extra, module = EMBEDDER_EXTRAS.get(name, ("", None))
        installed = module is None or importlib.util.find_spec(module) is not None
        ranker = self._ranker or "bm25"   # (default_ranker(None), without loading numpy)
        return {"embedder": name, "ranker": ranker, "embedder_installed": installed,
                "embedder_extra": extra}

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
    def consistent(self, read: Callable[[View], T], layers: tuple[str, ...] | None = None,
                   *, only: str | None = None) -> T:
        return self.layout.consistent(read, layers, only=only)

    def _read_unit(self, uid: str, path: str, *, with_vectors: bool) -> Loaded | None:
        """One unit of a view; None (logged) if damaged; Vanished if it moved away."""
        return units.read_unit(self, uid, path, with_vectors=with_vectors)

    def _units_of(self, view: View, layer: str, *, with_vectors: bool = False) -> list[Loaded]:
        return units.units_of(self, view, layer, with_vectors=with_vectors)

    def _load_layer(self, layer: str, *, with_vectors: bool) -> list[Loaded]:
        """Every readable unit of ``layer``, from one consistent view."""
        return self.consistent(lambda v: self._units_of(v, layer, with_vectors=with_vectors),
                               (layer,))

    def _hydrate(self, unit: Loaded) -> list[Event] | None:
        """A unit's events with their text; None (logged) if a block is damaged."""
        return units.hydrate(self, unit)

    # -- reading ----------------------------------------------------------------------------
    def units(self, layer: str) -> list[str]:
        return [uid for uid, _ in self.consistent(lambda v: v.layer(layer), (layer,))]

    def timeline(self) -> list[Event]:
        """The L1 events, sorted by original timestamp (ties: arrival, then event id)."""
        return units.timeline(self)

    def render(self, budget_tokens: int, *, estimator=None, hits: Sequence[Hit] = (),
               memory_tokens: int | None = None) -> str:
        """The model's view of L1 under a token budget (fsmem.memory.render.render over
        timeline()); ``hits`` (a turn's query hits) come first as their own section. With
        ``memory_tokens`` the section gets that many tokens and the timeline
        ``budget_tokens``; without, the whole view fits ``budget_tokens``: the timeline is
        shown within half of it, and the hits get what it leaves (docs/RENDER.md)."""
        # lazy: start-up, loaded only when used
        from fsmem.memory.render import HeuristicEstimator, render
        views = lookup.hit_views(self, hits)
        if not views or memory_tokens is not None:
            return render(self.timeline(), budget_tokens, estimator=estimator, hits=views,
                          memory_tokens=memory_tokens or 0)
        est = estimator if estimator is not None else HeuristicEstimator()
        timeline = render(self.timeline(), budget_tokens // 2, estimator=est)
        room = max(budget_tokens - est.count(timeline), 0)
        while True:   # an estimator that is not additive may count the two parts together higher
            out = render((), 0, estimator=est, hits=views, memory_tokens=room) + timeline
            over = est.count(out) - budget_tokens
            if over <= 0 or room == 0:
                return out
            room = max(room - over, 0)

    def document(self, unit_id: str) -> Document:
        """A unit read back whole, from whichever layer holds it (fsmem.memory.lookup)."""
        return lookup.document(self, unit_id)

    def history(self, unit_id: str) -> list[Document]:
        """Every version of the memory ``unit_id`` is one version of, oldest first: back
        through each unit's ``meta["supersedes"]``, on through the index's updates. A
        version removed by hand ends the chain there; a link into a loop is followed once."""
        doc = self.visible(unit_id)
        chain, seen = [doc], {doc.id}
        while (prev := chain[0].meta.get("supersedes", "")) and prev not in seen:
            try:
                chain.insert(0, self.visible(prev))
            except (NotFound, InvalidName):
                break
            seen.add(prev)
        while (nxt := self.index.superseded_by(chain[-1].id)) and nxt not in seen:
            chain.append(self.visible(nxt))
            seen.add(nxt)
        return chain

    def sees(self, unit: Manifest | Document) -> bool:
        """Whether this memory's agent may see ``unit`` (format 4): every unit that is not
        private, and its own private ones (search applies the same rule: index.Who)."""
        return not unit.private or unit.agent == self.agent

    def visible(self, unit_id: str) -> Document:
        """``document`` as this memory's agent may see it: another agent's private unit is
        NotFound (the agent tools, the MCP server, update)."""
        doc = self.document(unit_id)
        if not self.sees(doc):
            raise NotFound(f"unit {unit_id!r} not found under {self.root}")
        return doc

    def access_of(self, manifest: Manifest, logged: AccessStats | None
                  ) -> tuple[int, Timestamp | None]:
        """A unit's access count and last access (fsmem.memory.units.access_of)."""
        return units.access_of(manifest, logged)

    def find_block(self, digest: str) -> tuple[str, BlockRef]:
        """The unit directory and reference of the block whose digest (or unique prefix of at
        least 8 hex, or a HomeAgent ``blk_…`` id) is ``digest``; NotFound or AmbiguousDigest
        otherwise (fsmem.memory.lookup)."""
        return lookup.find_block(self, digest)


    def read_block(self, digest: str) -> bytes:
        """The bytes of a block (digest or unique prefix), verified against its digest."""
        return lookup.read_block(self, digest)

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

    def query(self, text: str, top_k: int = 3, *, count: bool = True,
              scope: str = "all", agent: str | None = None) -> list[Hit]:
        """Read-only search of L2: nothing moves, no unit changes; each hit's access is
        appended to the access log when it is writable (``count=False``: not at all).
        What this memory's agent sees (format 4): ``scope`` "own" (its units), "shared"
        (units not private, any agent's) or "all" (both, the default); ``agent``: only that
        agent's units. Another agent's private unit is never a hit."""
        hits = self._search(text, top_k, scope=scope, agent=agent)
        if hits and count:
            self.access.record(h.unit_id for h in hits)
        return lookup.labelled(self, hits)

    def _search(self, text: str, top_k: int, ranker: str | None = None, *,
                scope: str = "all", agent: str | None = None) -> list[Hit]:
        return self.index.hits(text, top_k, ranker or self.ranker, self.who(scope, agent))

    def search(self, text: str, top_k: int = 5, *, layers: Sequence[str] | None = None,
               scope: str = "all", agent: str | None = None, facts: bool = True,
               count: bool = True) -> list[Hit]:
        """One search over every layer (fsmem.memory.search_all): this agent's L1, L2 (with
        HomeAgent's documents) and L3 ranked together, each hit labelled with its ``layer``;
        graph facts of L3 the query names beside the unit they came from, or as hits of
        their own (``kind`` "fact"). ``layers``: some of "context", "documents",
        "stablemem". ``scope``/``agent``/``count`` as ``query``. Nothing moves."""
        from fsmem.memory.search_all import search  # lazy: start-up, loaded only when used
        return lookup.labelled(self, search(self, text, top_k, layers=layers, scope=scope,
                                            agent=agent, facts=facts, count=count))

    def who(self, scope: str = "all", agent: str | None = None):
        """The search filter of this memory's agent (fsmem.search.index.Who); ValueError
        naming a bad scope, InvalidName a bad agent."""
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
        from fsmem.search.index import Who  # lazy: start-up (numpy arrives with the index)
        return Who(viewer=self.agent, scope=scope,
                   agent_filter=None if agent is None else check_agent(agent, "agent filter"))

    # -- the change feed ------------------------------------------------------------------
    def changes(self, since: int = 0, *, marks: bool = False) -> list["Change"]:
        """The store's change feed after sequence number ``since`` (fsmem.store.changes):
        one record per unit published, moved, removed or quarantined, oldest first
        (``marks``: the writer sessions' begin/end marks too). Read without a lock.
        ``ChangesTruncated`` (its ``horizon``: the oldest kept) when ``since`` is older
        than the feed keeps: list the layers once instead."""
        # lazy: start-up, loaded only when used
        from fsmem.store.changes import MARKS, read_changes
        records = read_changes(self.layout.meta, since).records
        return records if marks else [r for r in records if r.kind not in MARKS]

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
        """Cold L2 units, oldest first (fsmem.memory.units.find_cold)."""
        return units.find_cold(self, max_age_s, max_access)

    # -- maintenance ------------------------------------------------------------------------
    def fsck(self, *, read_data: bool = True):
        """The store's consistency check, read-only: findings, nothing repaired."""
        from fsmem.memory.fsck import fsck  # lazy: start-up, loaded only when used
        return fsck(self.layout, read_data=read_data)

    def stats(self) -> dict[str, int]:
        """Units and events per layer, and the HomeAgent documents."""
        return units.stats(self)


