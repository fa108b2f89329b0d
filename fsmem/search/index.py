"""The derived search index of L2: dense vectors and BM25 postings, per event row.

The unit directories are the only source of truth. The index is saved as snapshots
(``fsmem.search.index_files``: ``.fsmem/index/CURRENT`` names a generation directory of
``.npy`` arrays, a checksummed ``meta.json`` and deltas; derived, never fsynced), holding, per
unit, its id and identity (its directory's and manifest's), and per event row (each event of a
unit; a unit's summary and a legacy document are rows of their own) its id, time, conversation
key, neighbours, dense vector (the sum of its stored block vectors; saved only for a ranker
that reads it) and BM25 term counts (``fsmem.search.analyze`` terms; scoring in
``fsmem.search.ranking``). Events are rows so that an archive of many events ranks by its best
events. The index follows the store's change feed (``fsmem.store.changes``): an open or sync
looks again at the units named by the records after its position, and lists ``documents/``
once only when the feed cannot vouch for it (a plain file tool, an older fsmem, a crash).
A missing, truncated or corrupt snapshot is rebuilt from the directories.
"""

from __future__ import annotations

import functools
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import numpy as np

from fsmem.format.errors import FsmemError
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import Written, read_manifest, read_manifest_key, read_vectors
from fsmem.format.views import Hit
from fsmem.search import ranking
from fsmem.search.analyze import (
    cjk_unigram_mask,
    date_text,
    hash_terms,
    is_pair,
    term_hashes,
    unasked,
)
from fsmem.search.bridge import query_scripts, synonym_terms, translated_terms
from fsmem.search.index_entry import (
    IndexEntry,
    add_row_terms,
    _ident,
    _row_lengths,
    _Rows,
    _valid_name,
    clamp_ns,
    dir_names,
    event_texts,
    fold_postings,
    term_counts,
    term_rows,
    unit_ident,
)
from fsmem.search.index_files import (
    INDEX_VERSION,
    IndexFiles,
    _matvec,
    _Damaged,
    _Postings,
    _row_cjk_share,
    _term_postings,
)
from fsmem.search.lazy_vectors import embed_rows, missing_text_rows, on_demand
from fsmem.search.query_vectors import query_vector
from fsmem.search.ranking import DEFAULT_RANKER
from fsmem.search.speakers import (
    names_speaker,
    query_speaker_terms,
    speaker_of,
    speaker_terms,
)
from fsmem.search.when import may_name_dates
from fsmem.search.when import resolve as resolve_dates
from fsmem.store.changes import (
    ChangesTruncated,
    dir_stamp,
    feed_stamp,
    read_changes,
    read_recent,
    settle,
)

if TYPE_CHECKING:
    from fsmem.format.layout import Layout
    from fsmem.search.index_files import _Delta
    from fsmem.format.plugins import Plugins
    from fsmem.search.embed import Embedder

__all__ = ["Index", "Source", "IndexEntry", "RANKERS", "DEFAULT_RANKER", "INDEX_VERSION", "Who"]

log = logging.getLogger("fsmem.index")

RANKERS = ("bm25", "dense", "fusion", "rrf")
# Weight of the (min-max scaled) dense signal in "fusion": None = per query, from the query's
# lexical coverage (ranking.dense_weight; an embedder may name its own ``fusion_weights``
# (lo, hi) range, or a fixed ``fusion_weight``); a ``weight=`` given to search overrides.
DEFAULT_WEIGHT: float | None = None
K1, B = ranking.K1, ranking.B
_SAVE_EVERY = 64
_PROGRESS_FROM = 200   # units to index before a catch-up reports progress (CLI: a bar)
_PENDING_MAX = 256
_SAVED = ("documents", "stablemem")   # the layers whose index is saved (see Index)


class Source(Protocol):
    """What the index reads of the memory it serves (a ``Reader`` or ``Memory`` is one): the
    store's layout, whether it may save, and the compute settings, read at each use (a caller
    may give the memory another embedder). ``progress``, ``vector_cache`` and ``_filler`` are
    read where present."""

    layout: "Layout"
    writable: bool
    plugins: "Plugins"
    embedder: "Embedder"


@dataclass(frozen=True)
class Who:
    """Who searches and for what (format 4): the ``viewer`` agent ("" = the default), the
    ``scope`` (own: its units; shared: units not private; all: both) and ``agent_filter``
    (only that agent's units; None: any). Another agent's private unit is never seen."""

    viewer: str = ""
    scope: str = "all"
    agent_filter: str | None = None

    def allows(self, agent: str, private: bool) -> bool:
        if private and agent != self.viewer:
            return False
        if self.scope == "own" and agent != self.viewer:
            return False
        if self.scope == "shared" and private:
            return False
        return self.agent_filter is None or agent == self.agent_filter


class Index(IndexFiles):
    """The in-memory index of ``documents/`` for one Memory, kept in step with the directory."""

    def __init__(self, mem: Source, layer: str = "documents") -> None:
        self.mem = mem
        self.layout = mem.layout
        # The layer indexed: documents/ (saved in .fsmem/index/, HomeAgent's JSON documents
        # too), stablemem/ (saved in .fsmem/index-stablemem/), or an L1 layer (in memory
        # only: small, and changing at every append). ``Reader.search`` ranks them together.
        self.layer = layer
        self.writable = mem.writable and layer in _SAVED   # a reader's lives in memory only
        self.dir = mem.layout.index_dir if layer == "documents" \
            else f"{mem.layout.index_dir}-{layer}"
        self.dim = mem.embedder.dim
        self.fingerprint = mem.embedder.fingerprint
        # Vectors are saved only for a ranker that reads them (a bm25 store's would be a
        # matrix nobody reads: 200 MB at 100k units); another ranker asked for later builds
        # them once from the units (``dense``).
        # A writer filling deferred vectors keeps them too (what a crash left at zero is
        # found by them: fsmem.search.vector_cache.heal_index).
        self.keep_dense = getattr(mem, "ranker", DEFAULT_RANKER) != "bm25" \
            or getattr(mem, "_filler", None) is not None
        self._clear()
        # Where the index is in the change feed (fsmem.store.changes): the id of the feed,
        # the last record taken (-1: none), documents/'s stamp there, and a read hint.
        self._feed_id, self._feed_pos, self._doc_stamp = "", -1, []
        self._feed_hint: tuple[str, int] = ("", 0)
        self._feed_seen: tuple[int, int] | None = None
        self._unsaved = 0
        self._unsaved_pos = False
        # First use of the arrays (checksums, vectors a bm25 writer did not store) changes
        # the index: one thread at a time. A query's own state never lives on the index.
        self._first_use = threading.Lock()
        # Threaded hosts (an MCP HTTP server): searches run side by side, a change of the
        # index (an add, a compaction that replaces the arrays a search reads, a search's
        # catch-up) runs alone. Lock order: the writer lock, then this one.
        self.mutex = _SharedLock()

    def _clear(self) -> None:
        if getattr(self, "_dense_check", None) is not None:
            os.close(self._dense_check[1])
        self._dense_check: tuple[str, int, str] | None = None
        self._close_post_check()   # (path, fd, digest) of each postings file not yet checked
        self.ids: list[str] = []
        # (change, unit id) of every add and remove while a caller collects them (watch's
        # rescan reports the units it found); None: not collected.
        self.noticed: list[tuple[str, str]] | None = None
        self.row_of: dict[str, int] = {}
        self.inos = np.zeros(0, np.int64)
        self.mkeys = np.zeros(0, np.int64)   # manifest_key of each unit row (0: unknown)
        self.u_owner = np.zeros(0, np.int32)  # (agent index << 1) | private (index_files)
        self.agents: list[str] = [""]
        self.supersedes: dict[str, str] = {}  # unit id -> the older unit it updates
        self.moved_supersedes: dict[str, str] = {}   # the same, of updates now in L1 or L3
        self.last_sync = {"kept": 0, "reindexed": 0}
        self.alive = np.zeros(0, bool)
        self.dense = np.zeros((0, self.dim), np.float32)
        self.created = np.zeros((0, 3), np.int64)   # seconds, nanos, UTC offset
        self.nevents = np.zeros(0, np.int32)
        self.summaries: list[str] = []
        self.legacy: dict[str, str] = {}
        # a HomeAgent file rewritten after fsmem made a unit of it: its version id -> that
        # unit (``_listing`` finds them, ``add_legacy`` indexes them as its updates)
        self._legacy_prev: dict[str, str] = {}
        # every documents/*.json seen (file name -> identity), indexed or held by a unit:
        # watched for HomeAgent's in-place rewrites (``_legacy_rewritten``)
        self.legacy_idents: dict[str, int] = {}
        self._legacy_checked = 0.0
        self.post = _Postings()
        self.pending: dict[str, IndexEntry] = {}   # added since the arrays were built
        # Event rows (contiguous per unit: unit i owns rows u_ptr[i]:u_ptr[i+1]).
        self.u_ptr = np.zeros(1, np.int64)
        self.ev_ids: list[str] = []
        self.keys: list[str] = []
        self.key_of: dict[str, int] = {}
        self.ev_len = np.zeros(0, np.float32)
        self.ev_time = np.zeros(0, np.int64)
        self.ev_key = np.zeros(0, np.int32)
        self.ev_kind = np.zeros(0, np.int8)
        self.ev_prev = np.zeros(0, np.int32)
        self.ev_next = np.zeros(0, np.int32)
        self.ev_unit = np.zeros(0, np.int64)
        self._gen = ""
        self.dense_absent = False   # a snapshot loaded without its dense array
        self._base_dense = True
        self._base_bytes = self._delta_bytes = self._deltas = 0
        # What changed since the last save (written as a delta, fsmem.search.index_files).
        self._dirty_added: dict[str, IndexEntry] = {}
        self._dirty_removed: set[str] = set()
        self._dirty_idents: dict[str, int] = {}
        self._bulk = False   # a rebuild in progress: pending entries folded once, at its end
        # Every change to the entries bumps this count (never reset): a cache built from them
        # is tagged with the count read before it was built, so one built while another
        # thread changed the index is never taken for current (it would stay stale).
        self._changes = getattr(self, "_changes", 0) + 1
        self._pend_cache: "tuple[int, _PendingRows] | None" = None
        self._ev_alive_cache: tuple | None = None   # see _event_alive
        self._share_cache: tuple | None = None      # see _row_shares
        self.missing: set[str] = set()   # units whose cached vectors were not all there
        # Units indexed without vectors that are computed on first use (fsmem.search.lazy_vectors).
        self.unembedded: set[str] = set()
        self.dense_scanned = False   # every such unit of the arrays found (and embedded)

    def sync(self, *, force: bool = False) -> dict[str, int]:
        """Bring the index in step with ``documents/`` in O(changes): the change feed's
        records since the index's position (fsmem.store.changes), each unit they name looked
        at again (one stat); one listing only when the feed cannot prove that nothing else
        (a plain file tool, an older fsmem, a crash) changed the directory, or ``force``.
        A save it calls for runs after the index's mutex is released (``save`` takes the
        writer lock first: one order of the two locks). Nothing changed (two stats, no
        HomeAgent file to look at): no change of the index, so searches in progress go on."""
        if not force and not self.legacy_idents \
                and dir_stamp(self.layout.layer_dir(self.layer)) == self._doc_stamp \
                and feed_stamp(self.layout.meta, self._feed_hint) == self._feed_seen:
            return {"added": 0, "removed": 0}
        with self.mutex:
            stats, save = self._sync(force)
        if save:
            self.save()
        return stats

    def _sync(self, force: bool) -> tuple[dict[str, int], bool]:
        save = False
        docs = self.layout.layer_dir(self.layer)
        now = dir_stamp(docs)
        fstamp = feed_stamp(self.layout.meta, self._feed_hint)
        rewritten = self._legacy_rewritten()
        if not force and not rewritten and now == self._doc_stamp and fstamp == self._feed_seen:
            return {"added": 0, "removed": 0}, save
        fr = None
        if self._feed_pos >= 0:
            try:
                fr = read_changes(self.layout.meta, self._feed_pos, hint=self._feed_hint,
                                  feed=self._feed_id)
                since, stamp = self._feed_pos, self._doc_stamp
            except ChangesTruncated as exc:
                log.info("index: %s; listing documents/ once", exc)
        if fr is None:   # no position (a new index, an older snapshot) or one compacted away
            fr = read_recent(self.layout.meta)
            since, stamp = (fr.records[0].seq - 1 if fr.records else fr.last), []
        settled = settle(fr.records, since, stamp, now, self.layer)
        added, removed = self._reexamine(settled.units | rewritten)
        kept = 0
        if force or not settled.complete:
            a, r, kept = self._reconcile_listing()
            added, removed = added + a, removed + r
            pos, stamp = settled.safe_pos, settled.safe_stamp
        else:
            pos, stamp = settled.pos, settled.stamp
        # a position or a documents/ stamp proven anew (a listing that found nothing to do)
        moved = pos != self._feed_pos or list(stamp) != list(self._doc_stamp)
        self._feed_id, self._feed_pos, self._doc_stamp = fr.feed, pos, list(stamp)
        caught_up = pos == fr.last
        self._feed_hint = fr.hint if caught_up else ("", 0)
        self._feed_seen = feed_stamp(self.layout.meta, self._feed_hint) if caught_up else None
        if added or removed or kept:
            self._unsaved += added + removed + kept
            save = self.writable and self._unsaved >= max(_SAVE_EVERY, len(self.ids) // 20)
        elif moved and self.writable and self._gen and not self._unsaved:
            self._unsaved_pos = True   # only the position moved: saved at the next save
        return {"added": added, "removed": removed}, save

    _LEGACY_CHECK_S = 0.5

    def _legacy_rewritten(self) -> set[str]:
        """HomeAgent files of documents/ written again in place since they were seen (Go's
        os.WriteFile truncates and rewrites: the directory's stamp does not move, the feed
        knows nothing of it): one stat per HomeAgent file, at most every half second, only
        in a directory that has some."""
        if not self.legacy_idents:
            return set()
        clock = time.monotonic()
        if clock - self._legacy_checked < self._LEGACY_CHECK_S:
            return set()
        self._legacy_checked = clock
        docs = self.layout.layer_dir(self.layer)
        changed = set()
        for name, ident in self.legacy_idents.items():
            try:
                st = os.stat(os.path.join(docs, name), follow_symlinks=False)
                now = _ident(st) if stat.S_ISREG(st.st_mode) else None
            except OSError:
                now = None
            if now != ident:
                changed.add(name)
        return changed

    def _indexed_ident(self, unit_id: str) -> int | None:
        e = self.pending.get(unit_id)
        if e is not None:
            return e.ino
        row = self.row_of.get(unit_id)
        return int(self.inos[row]) if row is not None and self.alive[row] else None

    def _reexamine(self, names: set[str]) -> tuple[int, int]:
        """Look again at the units (or HomeAgent files, by file name) the feed named: index
        what is there under a new identity, drop what is gone; (added, removed)."""
        added = removed = 0
        docs = self.layout.layer_dir(self.layer)
        by_file: dict[str, list[str]] | None = None   # HomeAgent file -> its indexed entries
        for name in sorted(names):
            if name.endswith(".json") and self.layer == "documents":   # a HomeAgent document
                # lazy: start-up, loaded only when used
                from fsmem.homeagent.documents import standing
                try:
                    st = os.stat(os.path.join(docs, name), follow_symlinks=False)
                    ident = _ident(st) if stat.S_ISREG(st.st_mode) else None
                    now = standing(self.layout, name) if ident is not None else None
                except (OSError, FsmemError):
                    ident = now = None
                uid = now.unit_id if now is not None and now.state != "same" else ""
                if ident is None:
                    self.legacy_idents.pop(name, None)
                else:
                    self.legacy_idents[name] = ident
                if by_file is None:   # (once a call, not a pass over every entry a file)
                    by_file = {}
                    for u, f in [*self.legacy.items(),
                                 *((u, e.legacy_file) for u, e in self.pending.items())]:
                        by_file.setdefault(f, []).append(u)
                for old in [u for u in by_file.get(name, ()) if u != uid]:   # other versions
                    if self._indexed_ident(old) is not None and not os.path.isdir(
                            self.layout.unit_dir(self.layer, old)):
                        self.remove(old)
                        removed += 1
                if uid and ident != self._indexed_ident(uid):
                    added += self.add_legacy(name, ident, unit_id=uid,
                                             supersedes=now.prev if now else "")
                continue
            if not _valid_name(name):
                continue
            ident = unit_ident(os.path.join(docs, name))
            have = self._indexed_ident(name)
            if ident is None:
                if have is not None:
                    self.remove(name)
                    removed += 1
            elif ident != have:
                row = self.row_of.get(name) if name not in self.pending else None
                if row is not None and have is not None and self._adopt_unchanged(
                        {name: row}, {name: ident}):
                    added += 1
                elif self.add_unit(name, ident):
                    added += 1
                elif have is not None:   # unreadable now (logged): its old entry goes
                    self.remove(name)
                    removed += 1
        return added, removed

    def _apply_delta(self, delta: "_Delta") -> None:
        """Replay one saved delta (fsmem.search.index_files) onto the arrays."""
        for uid in delta.removed:
            self.remove(uid)
        if delta.idents:
            inos = np.array(self.inos)   # one copy (the loaded array is mapped read-only)
            for uid, ident in delta.idents.items():
                row = self.row_of.get(uid)
                if row is not None and self.alive[row]:
                    inos[row] = ident
            self.inos = inos
        for w in delta.entries:
            n_rows = len(w.row_ids)
            vec = np.frombuffer(w.vector, np.float32).reshape(n_rows, self.dim) if w.vector \
                else np.zeros((n_rows, self.dim), np.float32)
            rows = _Rows(list(w.row_ids), np.frombuffer(w.row_ptr, np.int64),
                         np.frombuffer(w.row_time, np.int64), list(w.row_keys),
                         np.frombuffer(w.row_kind, np.int8))
            self.add(IndexEntry(unit_id=w.unit_id, ino=w.ino, vector=vec,
                                terms=np.frombuffer(w.terms, np.uint64),
                                tfs=np.frombuffer(w.tfs, np.float32), summary=w.summary,
                                legacy_file=w.legacy_file, created_ns=w.created_ns,
                                created_off=w.created_off, events=w.events, rows=rows,
                                mkey=w.mkey, agent=w.agent, private=w.private,
                                supersedes=w.supersedes))
        self.moved_supersedes = dict(delta.moved)
        self.legacy_idents = dict(delta.legacy_idents)
        if delta.feed_pos >= 0:
            self._feed_id, self._feed_pos, self._doc_stamp = \
                delta.feed, delta.feed_pos, list(delta.stamp)

    def _stale(self, unit_ids: set[str]) -> set[str]:
        """Of these indexed units, those whose directory or manifest is no longer the one
        indexed (two stats each): a hit is never trusted on the index's word alone."""
        docs = self.layout.layer_dir(self.layer)
        return {u for u in unit_ids if not self.legacy_file(u)
                and unit_ident(os.path.join(docs, u)) != self._indexed_ident(u)}

    def _reconcile_listing(self) -> tuple[int, int, int]:
        """One listing of documents/ (names and identities) and per-unit add/remove;
        (added, removed, kept under a new identity)."""
        listing, legacy_files = self._listing()
        moved = {u: r for u, r in self.row_of.items() if self.alive[r]
                 and listing.get(u) != self.inos[r]}
        kept = self._adopt_unchanged(moved, listing)
        removed = [u for u in moved if u not in kept]
        removed += [u for u, e in self.pending.items() if listing.get(u) != e.ino]
        for u in removed:
            self.remove(u)
        self.last_sync = {"kept": len(kept), "reindexed": sum(u in listing for u in removed)}
        known = {u for u, r in self.row_of.items() if self.alive[r]} | set(self.pending)
        todo = [(name, ino) for name, ino in listing.items() if name not in known]
        tick = getattr(self.mem, "progress", None) if len(todo) >= _PROGRESS_FROM else None
        added = 0
        for i, (name, ino) in enumerate(todo):
            added += self._add_listed(name, ino, legacy_files)
            if tick:
                tick(i + 1, len(todo))
        return added, len(removed), len(kept)

    def _adopt_unchanged(self, moved: dict[str, int], listing: dict[str, int]) -> set[str]:
        """The units of ``moved`` (unit id -> row) listed under a new identity whose manifest
        is the one indexed: their rows stay, under the new identity. A backup restored with
        ``cp -a`` or ``rsync -a`` gives every directory a new inode and ctime, and a unit is
        immutable, so only its manifest (which names every block and the vectors by digest)
        needs to be read to know it is the same, not the whole unit indexed again (100k units:
        seconds instead of minutes). A unit that changed, or any doubt, is re-indexed."""
        rows = [(u, r) for u, r in moved.items() if u in listing and self.mkeys[r]]
        kept: set[str] = set()
        if not rows:
            return kept
        inos = np.array(self.inos)   # the loaded array is mapped read-only
        for u, r in rows:
            try:
                key = read_manifest_key(self.layout.unit_dir(self.layer, u))
            except OSError:
                continue
            if key == self.mkeys[r]:
                inos[r] = listing[u]
                kept.add(u)
                self._dirty_idents[u] = int(listing[u])
        self.inos = inos
        return kept

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Rebuild from the directories alone (``fsmem reindex``); returns the unit count."""
        self._clear()
        fr = read_recent(self.layout.meta)   # the position first, then the listing
        settled = settle(fr.records, fr.records[0].seq - 1 if fr.records else fr.last, [],
                         dir_stamp(self.layout.layer_dir(self.layer)), self.layer)
        self._feed_id, self._feed_pos = fr.feed, settled.safe_pos
        self._doc_stamp, self._feed_hint, self._feed_seen = settled.safe_stamp, ("", 0), None
        listing, legacy_files = self._listing()
        if progress is None and len(listing) >= _PROGRESS_FROM:
            progress = getattr(self.mem, "progress", None)
        self._bulk = True
        try:
            for i, (name, ino) in enumerate(sorted(listing.items())):
                self._add_listed(name, ino, legacy_files)
                if progress:
                    progress(i + 1, len(listing))
        finally:
            self._bulk = False
        if self.writable:
            self.save()
        else:
            self._compact()
        return len(self.ids)

    def _listing(self) -> tuple[dict[str, int], dict[str, str]]:
        """{id: inode} of unit directories and legacy JSON files in documents/, and
        {id: file name} for the legacy ones (a JSON whose unit already exists is left out:
        it is a leftover of an interrupted legacy recall)."""
        base = self.layout.layer_dir(self.layer)
        listing: dict[str, int] = {}
        json_files: list[tuple[str, int]] = []
        with os.scandir(base) as it:   # one pass: unit directories and legacy JSON files
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    if _valid_name(e.name):
                        ident = unit_ident(e.path)
                        if ident is not None:
                            listing[e.name] = ident
                elif e.name.endswith(".json") and self.layer == "documents" \
                        and e.is_file(follow_symlinks=False):
                    json_files.append((e.name, _ident(e.stat(follow_symlinks=False))))
        legacy_files = {}
        self.legacy_idents = dict(json_files)
        self._legacy_checked = time.monotonic()
        if json_files:   # (fsmem.homeagent.documents is not loaded for a store without any)
            # lazy: start-up, loaded only when used
            from fsmem.homeagent.documents import standing
            # the names in the other layers, listed once (not two stats per legacy file)
            names = {layer: dir_names(self.layout.layer_dir(layer))
                     for layer in self.layout.layers() if layer != "documents"}
            names["documents"] = set(listing)
        for fname, ino in sorted(json_files):
            try:
                st = standing(self.layout, fname, names)
            except (FsmemError, OSError):
                continue   # unreadable now: fsck reports it
            if st.state == "same":   # a unit holds these bytes (kept in place, or left over)
                continue
            listing[st.unit_id] = ino
            legacy_files[st.unit_id] = fname
            if st.prev:   # HomeAgent rewrote it after fsmem made ``prev`` of it
                self._legacy_prev[st.unit_id] = st.prev
        return listing, legacy_files

    # -- entries ------------------------------------------------------------------------
    def _add_listed(self, name: str, ino: int, legacy_files: dict[str, str]) -> bool:
        """Index one entry of a ``_listing``: a legacy JSON file or a unit directory."""
        if name in legacy_files:
            return self.add_legacy(legacy_files[name], ino, unit_id=name,
                                   supersedes=self._legacy_prev.get(name, ""))
        return self.add_unit(name, ino)

    def add_legacy(self, filename: str, ino: int, *, unit_id: str = "",
                   supersedes: str = "") -> bool:
        """Index a HomeAgent JSON document (BM25 over its text; its own dense vector belongs
        to another space and is never compared)."""
        # lazy: start-up, loaded only when used
        from fsmem.homeagent.documents import legacy_id, report_unreadable
        # lazy: start-up, loaded only when used (+msgspec decoders)
        from fsmem.homeagent.index_view import read_for_index
        path = os.path.join(self.layout.layer_dir(self.layer), filename)
        try:
            doc = read_for_index(path)   # its text, not its vectors (another space)
        except (FsmemError, OSError, ValueError) as exc:
            report_unreadable(path, f"index: skipping legacy {path}: {exc}")  # once per store
            return False
        texts = [self.mem.plugins.source_text(doc.source, t) for t in doc.texts]
        terms, tfs = term_counts(texts + [date_text(doc.created_at.ns, doc.created_at.offset)])
        self.add(IndexEntry(unit_id=unit_id or legacy_id(filename), ino=ino,
                            vector=np.zeros(self.dim, np.float32), terms=terms, tfs=tfs,
                            summary=doc.summary, legacy_file=filename,
                            created_ns=doc.created_at.ns, created_off=doc.created_at.offset,
                            events=1, supersedes=supersedes))
        return True

    def created_at(self, row: int) -> Timestamp:
        """The creation time of an indexed row (stored as seconds, nanos, offset)."""
        secs, nanos, off = (int(x) for x in self.created[row])
        return Timestamp.from_seconds_nanos(secs, nanos, off)

    def legacy_file(self, unit_id: str) -> str:
        """The legacy JSON file behind an index entry, or '' for a unit directory."""
        if unit_id in self.pending:
            return self.pending[unit_id].legacy_file
        return self.legacy.get(unit_id, "")

    def add_unit(self, unit_id: str, ino: int | None = None, *,
                 written: "Written | None" = None, embed: bool = False) -> bool:
        """Index one unit of ``documents/`` from its directory; False if it is unreadable.
        ``written``: what this process just wrote there (nothing is read back); ``embed``:
        rows without a stored vector are embedded now (fsmem.search.lazy_vectors)."""
        path = self.layout.unit_dir(self.layer, unit_id)
        try:
            if ino is None:
                ino = unit_ident(path)
                if ino is None:
                    raise FileNotFoundError(f"{path}: no manifest")
            entry = self.entry_for(path, unit_id, ino, written=written, embed=embed)
        except (FsmemError, OSError, ValueError) as exc:
            log.warning("index: skipping %s: %s", path, exc)
            return False
        self.add(entry)
        return True

    def entry_for(self, path: str, unit_id: str, ino: int, *,
                  written: "Written | None" = None, embed: bool = False) -> IndexEntry:
        """Dense vector from the unit's stored vectors (never re-embedded); BM25 terms from
        its compute-layer text (cleaners applied, no_memory left out) and media names.
        ``written`` (a unit this process just wrote): its manifest, vectors and texts in
        hand, so the unit is not read back and its text not re-read."""
        manifest = written.manifest if written is not None else read_manifest(path)
        by_event: dict[str, np.ndarray] = {}
        stored: dict[str, np.ndarray] = {}
        if manifest.vectors is not None and manifest.vectors.embedder == self.fingerprint:
            keys, mat = written.vectors if written is not None and written.vectors \
                else read_vectors(path, manifest)  # type: ignore[misc]
            stored = dict(zip(keys, mat))
        text_of = written.texts if written is not None else None
        self._cached_vectors(path, unit_id, manifest, stored)
        self._lazy_vectors(path, unit_id, manifest, stored, embed)
        for key, row in stored.items():
            ev_id = key.split(":", 1)[0]
            by_event[ev_id] = by_event.get(ev_id, 0) + row
        rows = _Rows([], np.zeros(1, np.int64), np.zeros(0, np.int64), [],
                     np.zeros(0, np.int8))
        pieces = [("", manifest.created_at.ns, "", ranking.KIND_PSEUDO, [manifest.summary])] \
            if manifest.summary or not manifest.events else []
        # A session (meta) groups turns; events archived from L1 were one timeline, the
        # agent's context: both neighbour across units (ranking.conversation_key).
        session = manifest.meta.get("session", "") or (
            "\0context" if manifest.meta.get("is_archived_context") == "true" else "")
        # The speaker (a source that reads as a name, fsmem.search.speakers) is a field of
        # the row: its name as a word when the text does not begin with it, plus speaker terms.
        speakers = [speaker_of(ev.source) for ev in manifest.events]
        texts = [event_texts(self.mem.plugins, path, ev, text_of) for ev in manifest.events]
        pieces += [(ev.id, ev.timestamp.ns,
                    ranking.conversation_key(ev.source, ev.role, session),
                    ranking.event_kind(ev.role, session, sp, ranking.asks(tx)),
                    _with_speaker(sp, tx) + [date_text(ev.timestamp.ns, ev.timestamp.offset)])
                   for ev, sp, tx in zip(manifest.events, speakers, texts)]
        terms, tfs, rows.ptr = term_rows([p[4] for p in pieces])
        if any(speakers):
            skip = len(pieces) - len(speakers)   # the summary row (if any) comes first
            terms, tfs, rows.ptr = add_row_terms(
                terms, tfs, rows.ptr, [None] * skip + [speaker_terms(sp) if sp else None
                                                       for sp in speakers])
        for ev_id, _t, key, _k, _x in pieces:
            rows.ids.append(ev_id)
            rows.keys.append(key)
        rows.time = np.array([clamp_ns(p[1]) for p in pieces], np.int64)
        rows.kind = np.array([p[3] for p in pieces], np.int8)
        vec = np.zeros((len(rows.ids), self.dim), np.float32)
        for i, ev_id in enumerate(rows.ids):
            v = by_event.get(ev_id) if ev_id else None
            n = float(np.linalg.norm(v)) if v is not None else 0.0
            if n > 0:
                vec[i] = v / n
        return IndexEntry(unit_id=unit_id, ino=ino, vector=vec, terms=terms, tfs=tfs,
                          summary=manifest.summary, created_ns=manifest.created_at.ns,
                          created_off=manifest.created_at.offset, events=len(manifest.events),
                          rows=rows, mkey=written.mkey if written is not None
                          else read_manifest_key(path), agent=manifest.agent,
                          private=manifest.private,
                          supersedes=manifest.meta.get("supersedes", ""))

    def _cached_vectors(self, path: str, unit_id: str, manifest, rows: dict) -> None:
        """Rows the unit does not store come from the derived vector cache
        (fsmem.search.vector_cache); a unit still missing some is noted in ``missing`` (its events
        rank lexically until ``refresh_vectors``)."""
        # lazy: start-up, loaded only when used (+queue, heapq)
        from fsmem.search.vector_cache import fill_rows
        if fill_rows(getattr(self.mem, "vector_cache", None), self.mem.plugins, path,
                     manifest, rows):
            self.missing.add(unit_id)
        else:
            self.missing.discard(unit_id)

    def _lazy_vectors(self, path: str, unit_id: str, manifest, rows: dict, embed: bool) -> None:
        """Rows stored nowhere whose vectors are computed on first use (fsmem.search.lazy_vectors):
        embedded now when ``embed``, else the unit is noted in ``unembedded``."""
        if not on_demand(self.mem) or not missing_text_rows(manifest, rows):
            self.unembedded.discard(unit_id)
        elif embed:
            embed_rows(self.mem, path, manifest, rows)
            self.unembedded.discard(unit_id)
        else:
            self.unembedded.add(unit_id)

    def refresh_vectors(self) -> int:
        """Re-index the units that lacked cached vectors (call when the cache has grown);
        returns how many were re-read."""
        todo = [u for u in self.missing if u in self.pending or u in self.row_of]
        self.missing.intersection_update(todo)
        for uid in todo:
            self.add_unit(uid)
        return len(todo)

    def zero_vector_units(self) -> list[str]:
        """Live units with an event row whose vector is all zero: deferred vectors not yet in
        the cache when the row was indexed (a crash before the filler ran, an import), or an
        event without text. Re-adding them picks up what the cache holds now."""
        out: list[str] = []
        if len(self.ev_len) and not self.dense_absent:   # (absent: built whole when read)
            self.dense   # checked (and rebuilt if damaged) before anything is taken from it
            zero = ~self.dense.any(axis=1) & (self.ev_kind != ranking.KIND_PSEUDO) \
                & self.alive[self.ev_unit]
            out = [self.ids[int(i)] for i in np.unique(self.ev_unit[zero])]
        out += [u for u, e in self.pending.items()
                if np.any(~e.vector.any(axis=1) & (e.rows.kind != ranking.KIND_PSEUDO))]
        return out

    def add(self, entry: IndexEntry) -> None:
        """Queue an entry; it is searchable at once and folded into the arrays in batches."""
        if self.noticed is not None:
            self.noticed.append(("added", entry.unit_id))
        self._drop(entry.unit_id)
        self.pending[entry.unit_id] = entry
        self._dirty_added[entry.unit_id] = entry
        self._dirty_removed.discard(entry.unit_id)
        self._pend_cache = None
        self._changes += 1
        # Fold in geometrically (a quarter of the size), so bulk adds stay O(n log n); a
        # rebuild folds once, at its end.
        if not self._bulk and len(self.pending) > max(_PENDING_MAX, len(self.ids) // 4):
            self._compact()

    def remove(self, unit_id: str) -> None:
        """A unit left documents/. An update that moved on (recalled into L1, distilled into
        L3) still hides the version it updates: its link is kept (``moved_supersedes``)
        while the unit is in some layer (checked again when the arrays are folded)."""
        if self.noticed is not None:
            self.noticed.append(("removed", unit_id))
        e = self.pending.get(unit_id)
        old = e.supersedes if e is not None else self.supersedes.get(unit_id, "")
        if old and (row := self.row_of.get(unit_id)) is not None and not self.alive[row]:
            old = ""   # (already removed)
        elsewhere = bool(old) and self.layout.view(only=unit_id).locate(unit_id) is not None
        self._drop(unit_id)
        if elsewhere:
            self.moved_supersedes[unit_id] = old

    def _drop(self, unit_id: str) -> None:
        self.moved_supersedes.pop(unit_id, None)
        self._dirty_added.pop(unit_id, None)
        self._dirty_removed.add(unit_id)
        if self.pending.pop(unit_id, None) is not None:
            self._pend_cache = None
        row = self.row_of.get(unit_id)
        if row is not None:
            self.alive[row] = False   # in place: the array's identity says nothing of it
            self._ev_alive_cache = None
        self._changes += 1

    def __len__(self) -> int:
        return int(self.alive.sum()) + len(self.pending)

    # -- who sees what (format 4) ---------------------------------------------------------
    def superseded_by(self, unit_id: str) -> str:
        """The indexed unit that updates ``unit_id`` ("" if none)."""
        for new, old in [*self.supersedes.items(), *self.moved_supersedes.items()]:
            if old == unit_id and (new in self.moved_supersedes or (
                    new in self.row_of and self.alive[self.row_of[new]])):
                return new
        return next((e.unit_id for e in self.pending.values() if e.supersedes == unit_id), "")

    def owner_of(self, unit_id: str) -> tuple[str, bool]:
        """(agent, private) of an indexed unit."""
        e = self.pending.get(unit_id)
        if e is not None:
            return e.agent, e.private
        row = self.row_of.get(unit_id)
        if row is None or not len(self.u_owner):
            return "", False
        code = int(self.u_owner[row])
        return self.agents[code >> 1], bool(code & 1)

    def _owner_code(self, agent: str, private: bool) -> int:
        if agent not in self.agents:
            self.agents.append(agent)
        return (self.agents.index(agent) << 1) | int(private)

    def superseded(self, pending: "Sequence[IndexEntry] | None" = None) -> set[str]:
        """The units an indexed update (or one that moved on to another layer) hides.
        ``pending``: a snapshot of the pending entries (default: taken now)."""
        row_of, alive = self.row_of, self.alive
        if pending is None:
            pending = list(self.pending.values())
        return {old for new, old in self.supersedes.items()
                if (row := row_of.get(new)) is not None and alive[row]} \
            | {e.supersedes for e in pending if e.supersedes} \
            | set(self.moved_supersedes.values())

    def _visible(self, pend: "_PendingRows", who: "Who | None") -> np.ndarray | None:
        """Units (arrays, then pending) that ``who`` may see and asked for, None when all:
        another agent's private unit is never seen; ``scope`` own: the viewer's units,
        shared: units not private; ``agent``: only that agent's; a unit another present
        unit updates (``supersedes``) is hidden. O(units) of numpy, skipped when nothing in
        the store is scoped."""
        who = who or Who()
        pending = pend.entries   # the query's own snapshot: another thread may fold them
        row_of = self.row_of
        superseded = self.superseded(pending)
        scoped = len(self.agents) > 1 or bool(np.any(np.asarray(self.u_owner) & 1)) \
            or any(e.agent or e.private for e in pending)
        if not scoped and not superseded and who.agent_filter in (None, "") \
                and (who.scope != "own" or who.viewer == ""):
            return None   # every unit is the default agent's and shared: all visible
        allowed = np.array([who.allows(self.agents[i >> 1], bool(i & 1))
                            for i in range(len(self.agents) * 2)], bool)   # by owner code
        codes = np.asarray(self.u_owner, np.int64)
        base = allowed[codes] if len(codes) else np.zeros(0, bool)
        tail = np.array([who.allows(e.agent, e.private) for e in pending], bool)
        mask = np.concatenate([base, tail])
        if superseded:
            for old in superseded:
                row = row_of.get(old)
                if row is not None:
                    mask[row] = False
                elif old in pend.unit_ids:
                    mask[len(base) + pend.unit_ids.index(old)] = False
        return mask

    def _compact(self) -> None:
        """Fold pending entries into the arrays and postings; drop removed rows; work out the
        neighbours of every event row (one sort; never per query)."""
        if not self.dense_absent:
            self.dense   # checked (and rebuilt if damaged) before it is folded into a new one
        self.post    # the same
        if not self._verify_all_chunks():
            return   # damaged: rebuilt (and compacted) from the directories meanwhile
        keep = np.flatnonzero(self.alive)
        if len(keep) == len(self.ids) and not self.pending:
            return
        self._as_lists()   # mapped string tables (fsmem.search.index_files.StrTable) decoded once
        new = list(self.pending.values())
        ev_keep = np.repeat(self.alive, np.diff(self.u_ptr))
        n_ev_kept = int(ev_keep.sum())
        remap = np.full(len(self.ev_len), -1, np.int64)
        remap[ev_keep] = np.arange(n_ev_kept)
        self.post = fold_postings(self.post, remap, n_ev_kept, new)
        del remap
        self._compact_events(keep, ev_keep, new)
        kept_ids = {self.ids[i] for i in keep}
        self.legacy = {u: f for u, f in self.legacy.items() if u in kept_ids}
        self.legacy.update({e.unit_id: e.legacy_file for e in new if e.legacy_file})
        self.supersedes = {u: s for u, s in self.supersedes.items() if u in kept_ids}
        self.supersedes.update({e.unit_id: e.supersedes for e in new if e.supersedes})
        self.moved_supersedes = {u: s for u, s in self.moved_supersedes.items()
                                 if self.layout.view(only=u).locate(u) is not None}
        self.u_owner = np.concatenate([np.asarray(self.u_owner)[keep], np.array(
            [self._owner_code(e.agent, e.private) for e in new], np.int32)])
        self.ids = [self.ids[i] for i in keep] + [e.unit_id for e in new]
        self.summaries = [self.summaries[i] for i in keep] + [e.summary for e in new]
        self.row_of = {u: i for i, u in enumerate(self.ids)}
        self.inos = np.concatenate([self.inos[keep], np.array([e.ino for e in new], np.int64)])
        self.mkeys = np.concatenate([self.mkeys[keep],
                                     np.array([e.mkey for e in new], np.int64)])
        if not self.dense_absent:   # (absent: the entries' vectors are read again when built)
            self.dense = np.vstack([self.dense[ev_keep]] + [e.vector for e in new]) \
                if new else self.dense[ev_keep]
        self.created = np.concatenate([self.created[keep], np.array(
            [[*divmod(e.created_ns, 1_000_000_000), e.created_off] for e in new],
            np.int64).reshape(-1, 3)])   # seconds + nanos: Go's years 1..9999 fit an int64
        self.nevents = np.concatenate([self.nevents[keep],
                                       np.array([e.events for e in new], np.int32)])
        self.alive = np.ones(len(self.ids), bool)
        self.pending = {}
        self._pend_cache = None
        self._changes += 1

    def _compact_events(self, keep: np.ndarray, ev_keep: np.ndarray,
                        new: list[IndexEntry]) -> None:
        """The event-row arrays of ``_compact``: kept rows, then the new entries' rows."""
        counts = np.concatenate([np.diff(self.u_ptr)[keep],
                                 np.array([len(e.rows.ids) for e in new], np.int64)])
        self.u_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.ev_ids = [i for i, k in zip(self.ev_ids, ev_keep) if k] \
            + [i for e in new for i in e.rows.ids]
        for e in new:
            for k in e.rows.keys:
                if k not in self.key_of:
                    self.key_of[k] = len(self.keys)
                    self.keys.append(k)
        self.ev_len = np.concatenate([self.ev_len[ev_keep]]
                                     + [_row_lengths(e) for e in new]).astype(np.float32)
        self.ev_time = np.concatenate([self.ev_time[ev_keep]] + [e.rows.time for e in new])
        self.ev_key = np.concatenate([self.ev_key[ev_keep]] + [
            np.array([self.key_of[k] for k in e.rows.keys], np.int32) for e in new])
        self.ev_kind = np.concatenate([self.ev_kind[ev_keep]] + [e.rows.kind for e in new])
        self.ev_unit = np.repeat(np.arange(len(counts)), counts)
        ids = [self.ids[i] for i in keep] + [e.unit_id for e in new]   # (as _compact sets)
        rank = np.argsort(np.argsort(np.array(ids)), kind="stable") if ids else \
            np.zeros(0, np.int64)   # each unit's place in id order: ties of equal times
        self.ev_prev, self.ev_next = ranking.link_neighbours(
            self.ev_unit, self.ev_key, self.ev_time, self.ev_kind, tie=rank[self.ev_unit])

    # -- search -------------------------------------------------------------------------
    def search(self, text: str, top_k: int, ranker: str = DEFAULT_RANKER, *,
               weight: float | None = None) -> list[tuple[str, float]]:
        """The ``top_k`` live units for ``text`` as (unit id, score), best first."""
        return [(u, sc) for u, sc, _ in self.search_events(text, top_k, ranker, weight=weight)]

    def hits(self, text: str, top_k: int, ranker: str, who: Who | None = None, *,
             others: "Sequence[Index]" = ()) -> list[Hit]:
        """The best ``top_k`` units for ``text`` under ``ranker`` that ``who`` sees, as
        ``Hit``s (score, summary, creation time, events and events matched). ``others``: the
        indexes of the other layers searched with this one (``Reader.search``): BM25 counts
        their rows too, so the scores of every layer are on one scale."""
        found = self.search_events(text, top_k, ranker, who=who, others=others, near=True)
        stale = self._stale({f[0] for f in found})
        if stale:   # edited in place since indexed (an identity the index does not hold)
            self._reexamine(stale)
            found = self.search_events(text, top_k, ranker, who=who, others=others, near=True)
            stale = self._stale({f[0] for f in found})
        return self._hit_list(found, stale)

    def _hit_list(self, found: list[tuple], stale: set[str]) -> list[Hit]:
        """``hits``' Hit of each unit found (one consistent read of the index)."""
        hits = []
        for unit_id, score, matched, near in found:
            if unit_id in stale:
                continue
            row = self.row_of.get(unit_id)
            if row is not None and self.alive[row]:
                summary, events = self.summaries[row], int(self.nevents[row])
                created = self.created_at(row)
            else:
                e = self.pending.get(unit_id)
                if e is None:   # removed by another thread since the search found it
                    continue
                summary, events = e.summary, e.events
                created = Timestamp(e.created_ns, e.created_off)
            hits.append(Hit(unit_id=unit_id, score=score, summary=summary, created_at=created,
                            events=events, events_matched=matched, layer=self.layer,
                            agent=self.owner_of(unit_id)[0],
                            events_near=[p for p in near if p[0] not in stale]))
        return hits

    def search_events(self, text: str, top_k: int, ranker: str = DEFAULT_RANKER, *,
                      weight: float | None = None, smooth: float | None = None,
                      who: Who | None = None, others: "Sequence[Index]" = (),
                      near: bool = False) -> list[tuple]:
        """The ``top_k`` live units as (unit id, score, ids of the events that matched);
        ``near``: and (unit id, event id) of the matched events' conversation neighbours
        in other units (``_near``), a fourth item.

        Scores are per event row (BM25 smoothed with the row's conversation neighbours,
        fused with the dense cosine for ``fusion``/``rrf``); a unit scores as its best row.
        A damaged postings chunk found while reading rebuilds the index: the search runs
        again on the rebuilt one."""
        try:
            return self._search_events(text, top_k, ranker, weight=weight, smooth=smooth,
                                       who=who, others=others, near=near)
        except _Damaged:
            return self._search_events(text, top_k, ranker, weight=weight, smooth=smooth,
                                       who=who, others=others, near=near)

    def _search_events(self, text: str, top_k: int, ranker: str, *,
                       weight: float | None, smooth: float | None, who: Who | None = None,
                       others: "Sequence[Index]" = (), near: bool = False) -> list[tuple]:
        if ranker not in RANKERS:
            raise ValueError(f"ranker must be one of {', '.join(RANKERS)}")
        if top_k <= 0 or not text.strip() or not len(self):
            return []
        self._prepare(ranker)
        pend = self._pending_rows()
        ids = _Joined(self.ids, pend.unit_ids) if pend.unit_ids else self.ids   # no copy
        alive = np.concatenate([self.alive, np.ones(len(pend.unit_ids), bool)])
        visible = self._visible(pend, who)
        if visible is not None:
            alive &= visible
        ev_alive = np.concatenate([self._event_alive()[0], np.ones(pend.n, bool)])
        starts = np.concatenate([self.u_ptr[:-1], len(self.ev_len) + pend.starts])
        raw = dense = None
        prev = np.concatenate([self.ev_prev, pend.prev]).astype(np.int64)
        nxt = np.concatenate([self.ev_next, pend.next]).astype(np.int64)
        prev[pend.fix[0]], nxt[pend.fix[2]] = pend.fix[1], pend.fix[3]   # (see _links)
        # the rows that ask: the turn after one takes more of its score, in the lexical and
        # the fused smoothing only. Cosines alone, and rrf's reciprocal ranks, sit close
        # together: the larger share would outweigh what tells them apart (plain turns of
        # fixtures/retrieval3, dense: 0.815 -> 0.400; rrf conv-direct -2)
        kinds = [self.ev_kind] + [e.rows.kind for e in pend.entries]
        asks = ranking.asking(np.concatenate(kinds)) if ranker in ("bm25", "fusion") else None
        idf_mass = 0.0
        reach = translated = None
        if ranker == "fusion":   # how far the query's own words can see each row
            reach = self._reach(text, self._row_shares(pend))
        if ranker != "dense":
            # fusion ranks by the query's own words; where they cannot reach (a row in the
            # other script) the translated words' scores compete with the embedder's
            # (``ranking.fuse``), not added to the rest (docs/DECISIONS.md "Search")
            raw, idf_mass, translated = self.bm25_rows_apart(
                text, pend, others, translate=ranker != "fusion" or reach is not None,
                apart=ranker == "fusion", asking=ranker != "bm25")
            ev = raw if ranking.SMOOTH_FUSED and ranker != "bm25" else \
                ranking.smooth(raw, prev, nxt, pend.extra, smooth, asks)
        if ranker != "bm25":
            cov = ranking.coverage(float(raw.max()) if raw is not None and len(raw) else 0.0,
                                   idf_mass)
            if weight is None:
                weight = self._fusion_weight(cov)
            # an anchor's words ("the trip" of "two weeks before the trip") describe another
            # event than the one asked about: left out of the dense query too
            cosine = self.dense_rows(self._relative_dates(text, pend)[1] if ranker != "dense"
                                     else text, pend)
            balance = self._balances_scripts()
            shares = self._row_shares(pend) if balance else None
            # a multilingual embedder's cosines sit lower across scripts (ranking.SCRIPT_BALANCE)
            dense = ranking.balance_scripts(cosine, shares) if balance else cosine
            ev = dense if ranker == "dense" else \
                ranking.fuse(ev, dense, ranker, weight=weight, live=ev_alive, reach=reach,
                             lexical_share=ranking.lexical_share(cov), reach_dense=cosine,
                             reach_lexical=None if translated is None else raw + translated)
            if ranking.SMOOTH_FUSED or ranker == "dense":
                ev = ranking.smooth(ev, prev, nxt, pend.extra, smooth, asks)
        scores = np.where(alive, ranking.unit_max(ev, starts), -np.inf)
        k = min(top_k, int(np.count_nonzero(scores > 0)))
        if k <= 0:
            return []
        # Candidates at or above the k-th score (ties included), then a deterministic order:
        # score (to 6 decimals, so float summation order never decides) and unit id.
        kth = np.partition(-scores, k - 1)[k - 1]
        cand = np.flatnonzero(-scores <= kth + 1e-6)
        rounded = np.round(scores[cand].astype(np.float64), 6)   # vectorised: no per-unit
        names = np.array([ids[i] for i in cand])                  # Python key over ties
        best = cand[np.lexsort((names, -rounded))[:k]]
        ends = np.append(starts[1:], len(self.ev_len) + pend.n)
        out = []
        for i in best:
            rows = self._matched((raw, dense), int(starts[i]), int(ends[i]), pend)
            matched = [self._event_id(r, pend) for r in rows]
            out.append((ids[i], float(scores[i]), matched) if not near else
                       (ids[i], float(scores[i]), matched,
                        self._near(rows, prev, nxt, starts, ids, alive, pend)))
        return out

    def _event_id(self, row: int, pend: "_PendingRows") -> str:
        n_base = len(self.ev_ids)
        return self.ev_ids[row] if row < n_base else pend.ev_ids[row - n_base]

    def _near(self, rows: list[int], prev: np.ndarray, nxt: np.ndarray, starts: np.ndarray,
              ids: Sequence[str], alive: np.ndarray, pend: "_PendingRows"
              ) -> list[tuple[str, str]]:
        """(unit id, event id) of the conversation neighbours (the rows' links:
        ``ranking.link_neighbours``) of matched ``rows`` that another live unit holds: a
        reply archived apart from the question it answers."""
        out: list[tuple[str, str]] = []
        for r in rows:
            home = int(np.searchsorted(starts, r, "right")) - 1
            for link in (int(prev[r]), int(nxt[r])):
                if link < 0:
                    continue
                u = int(np.searchsorted(starts, link, "right")) - 1
                name = self._event_id(link, pend)
                if u != home and alive[u] and name and (ids[u], name) not in out:
                    out.append((ids[u], name))
        return out

    def _relative_dates(self, text: str, pend: "_PendingRows") -> tuple[list[str], str]:
        """The date terms of the query's relative dates (``fsmem.search.when``): from the
        newest live event (the conversation's "now"), or from the time of the row that best
        matches the words after "before"/"after" (the anchor: "two weeks before the trip");
        and the query to rank lexically: without the anchor's words."""
        if not may_name_dates(text):
            return [], text
        times = np.concatenate([self.ev_time, pend.time]) if pend.n else self.ev_time
        ev_alive = np.concatenate([self._event_alive()[0], np.ones(pend.n, bool)])
        if not len(times) or not ev_alive.any():
            return [], text
        live_times = times[ev_alive]

        def anchor(words: str) -> int | None:
            sc = self._bm25_rows(words, pend)[0]
            if not len(sc) or float(sc.max()) <= 0:
                return None
            return int(times[int(np.argmax(np.where(ev_alive, sc, -1)))])
        try:
            return resolve_dates(text, int(live_times.max()), 0, anchor)
        except (OverflowError, ValueError):   # a time beyond datetime's years: no dates
            return [], text

    def _prepare(self, ranker: str) -> None:
        """Before a search reads the arrays: the checksums of a mapped snapshot's (a damaged
        one is rebuilt) and, for a ranker that reads vectors, the vectors a bm25 writer did not
        store (fsmem.search.lazy_vectors). Both change the index once, so threads take turns."""
        with self._first_use:
            if ranker != "bm25":
                self.dense
                embed_index(self)
            if ranker != "dense" or self._balances_scripts():   # (its rows' scripts)
                self.post

    def _needs_prepare(self, ranker: str) -> bool:
        """Whether ``_prepare`` would change the index for ``ranker`` (then it runs as a
        change, before the search reads anything)."""
        if ranker != "bm25" and (self.dense_absent or self._dense_check is not None or (
                on_demand(self.mem) and (self.unembedded or not self.dense_scanned))):
            return True
        return (ranker != "dense" or self._balances_scripts()) and self._post_check is not None

    def _balances_scripts(self) -> bool:
        """Whether dense scores are balanced across scripts (``ranking.balance_scripts``):
        for an embedder that says ``multilingual`` (one space for Chinese and English)."""
        return bool(getattr(self.mem.embedder, "multilingual", False))

    def _fusion_weight(self, cov: float) -> float:
        """The dense weight of "fusion" for a query of lexical coverage ``cov``."""
        emb = self.mem.embedder
        fixed = getattr(emb, "fusion_weight", DEFAULT_WEIGHT)
        if fixed is not None:
            return float(fixed)
        return ranking.dense_weight(cov, getattr(emb, "fusion_weights", None))

    def _row_shares(self, pend: "_PendingRows") -> np.ndarray:
        """Per row (compacted, then pending), its ``ranking.cjk_share``; the compacted rows'
        are cached until the postings change."""
        c = self._share_cache
        if c is None or c[0] is not self.post or c[1] != len(self.ev_len):
            c = self._share_cache = (self.post, len(self.ev_len),
                                     _row_cjk_share(self.post, self.ev_len))
        if not pend.n:
            return c[2]
        if pend.shares is None:   # (kept with the pending rows: made again after a change)
            pend.shares = _row_cjk_share(pend.post, pend.lens)
        return np.concatenate([c[2], pend.shares])

    def _translated(self, text: str, own: np.ndarray, pend: "_PendingRows"
                    ) -> tuple[np.ndarray, np.ndarray]:
        """The terms of the query's words in the other script (``fsmem.search.bridge``), not
        among its own, as (its Chinese words' English glosses, its English words' Chinese
        words); only when the store holds text in a script the query's words are not
        in: an English query and a row with Chinese in it, a Chinese query and a row mostly
        in Latin script (``ranking.cjk_share`` under a half: a Chinese turn's indexed date
        words, "Sunday 7 May 2023", are Latin too). A one-script store never loads the
        dictionary for them (a Chinese one does for the synonyms: ``_synonyms``)."""
        latin, cjk = query_scripts(text)
        none = np.zeros(0, np.uint64)
        if not (latin or cjk):
            return none, none
        rows = self._row_shares(pend)
        if not len(rows) or not ((latin and rows.max() > 0) or (cjk and rows.min() < 0.5)):
            return none, none
        glosses, words = translated_terms(text)
        return (np.setdiff1d(glosses, own, assume_unique=True),
                np.setdiff1d(words, own, assume_unique=True))

    def _synonyms(self, text: str, taken: np.ndarray, pend: _PendingRows) -> np.ndarray:
        """The terms of the synonyms of the query's Chinese words (``fsmem.search.bridge``:
        车胎 -> 轮胎), not among ``taken``; only for a query with Chinese in it and a store
        holding some: a store without Chinese never loads the dictionary for them."""
        none = np.zeros(0, np.uint64)
        if not query_scripts(text)[1]:
            return none
        rows = self._row_shares(pend)
        if not len(rows) or rows.max() <= 0:
            return none
        return np.setdiff1d(synonym_terms(text), taken, assume_unique=False)

    def _reach(self, text: str, rows: np.ndarray) -> np.ndarray | None:
        """Per row (compacted, then pending; ``rows``: their ``_row_shares``),
        ``ranking.reach`` of the query ``text``; None when the lexical signal reaches every
        row (one script throughout)."""
        q = term_hashes([text], pairs=False)
        q_share = float(ranking.cjk_share(np.float32(cjk_unigram_mask(q).sum()),
                                          np.float32(len(q))))
        if not len(rows) or (q_share == 0 and rows.max() == 0) \
                or (q_share == 1 and rows.min() == 1):
            return None   # every row in the query's script: nothing to hand to the embedder
        return ranking.reach(q_share, rows)

    def _matched(self, signals: tuple[np.ndarray | None, ...], lo: int, hi: int,
                 pend: "_PendingRows", limit: int = 5) -> list[int]:
        """Rows of a unit's events that matched by their own score (before neighbour
        smoothing; the lexical one, else the dense one): at least MATCH_RATIO of the unit's
        best row, best first (summary and legacy rows have no id and are left out)."""
        for sig in signals:
            if sig is None:
                continue
            sc = sig[lo:hi]
            top = float(sc.max()) if len(sc) else 0.0
            if top <= 0:
                continue
            good = np.flatnonzero(sc >= ranking.MATCH_RATIO * top)
            rows = (lo + int(j) for j in good[np.argsort(-sc[good], kind="stable")])
            return [r for r in rows if self._event_id(r, pend)][:limit]
        return []

    def dense_rows(self, text: str, pend: "_PendingRows | None" = None) -> np.ndarray:
        """Cosine of each event row's vector to the query, compacted rows then pending ones
        (``embed_query`` when the embedder has one: asymmetric models embed queries and
        passages differently)."""
        pend = pend or self._pending_rows()
        q = query_vector(self.mem.embedder, text)   # once per search (query_vectors)
        base = _matvec(self.dense, q)
        if not pend.entries:
            return base
        return np.concatenate([base] + [_matvec(e.vector, q) for e in pend.entries]
                              ).astype(np.float32)

    def dense_scores(self, text: str) -> np.ndarray:
        """Per unit (compacted, then pending), the cosine of its best event row."""
        self.dense   # checked before anything is taken from it
        embed_index(self)
        pend = self._pending_rows()
        starts = np.concatenate([self.u_ptr[:-1], len(self.ev_len) + pend.starts])
        return ranking.unit_max(self.dense_rows(text, pend), starts)

    def bm25_rows(self, text: str, pend: "_PendingRows | None" = None,
                  others: "Sequence[Index]" = (), translate: bool = True
                  ) -> tuple[np.ndarray, float]:
        """``_bm25_rows`` with the query's relative dates resolved (``_relative_dates``)."""
        return self.bm25_rows_apart(text, pend, others, translate)[:2]

    def bm25_rows_apart(self, text: str, pend: _PendingRows | None = None,
                        others: Sequence[Index] = (), translate: bool = True,
                        apart: bool = False, asking: bool = False
                        ) -> tuple[np.ndarray, float, np.ndarray | None]:
        """``bm25_rows``, and with ``apart`` the scores of the query's translated words and
        synonyms kept out of the first array, in a second one (None: there are none). The
        query's Chinese interrogative words are not its terms (``analyze.unasked``) unless
        ``asking``: fusion and rrf keep them, they were calibrated with them (without them
        they lost conversation questions: docs/DECISIONS.md "Search")."""
        self.post   # checked (and rebuilt if damaged) before anything is taken from it
        pend = pend or self._pending_rows()
        dates, text = self._relative_dates(text, pend)
        return self._bm25_rows(text if asking else unasked(text), pend, others, dates,
                               translate, apart)

    def _bm25_rows(self, text: str, pend: "_PendingRows | None" = None,
                   others: "Sequence[Index]" = (), dates: Sequence[str] = (),
                   translate: bool = True, apart: bool = False
                   ) -> tuple[np.ndarray, float, np.ndarray | None]:
        """Okapi BM25 (``ranking.K1``, ``ranking.B``) of ``text`` for every event row, the
        compacted rows first, then the pending ones (rows of removed units score 0), and the
        sum of the query terms' idf (``ranking.coverage``): returned, never kept on the
        index, which the queries of other threads share. Besides its own terms, a query
        matches the speaker field (``fsmem.search.speakers``: a word of the query naming a
        row's speaker, at ``ranking.SPEAKER_WEIGHT``), the date terms ``dates`` (its
        relative dates resolved, ``fsmem.search.when``, at ``ranking.DATE_WEIGHT``) and, with
        ``translate``, its words in the other script (``_translated``, at
        ``ranking.TRANSLATION_WEIGHT`` and ``GLOSS_WEIGHT``) and its Chinese words' synonyms
        (``_synonyms``, at ``ranking.SYNONYM_WEIGHT``); none counts in the idf mass. With
        ``apart`` those last two add to a third array instead (None when there are none)."""
        self.post   # checked (and rebuilt if damaged) before anything is taken from it
        pend = pend or self._pending_rows()
        n_base = len(self.ev_len)
        scores = np.zeros(n_base + pend.n, np.float32)
        # with counts: numpy >= 2.3's plain np.unique imports numpy.ma (~10 ms of a CLI query)
        own = np.unique(term_hashes([text]), return_counts=True)[0]
        if not len(own):
            return scores, 0.0, None
        spk = query_speaker_terms(own)
        none = np.zeros(0, np.uint64)
        day = hash_terms(dates) if dates else none
        gloss, words = self._translated(text, own, pend) if translate else (none, none)
        syn = self._synonyms(text, np.concatenate([own, gloss, words]), pend) \
            if translate else none
        q_terms = np.unique(np.concatenate([own, spk, day, gloss, words, syn]),
                            return_counts=True)[0]
        ev_alive, all_alive = self._event_alive()
        hits = _term_postings(self.post, q_terms)   # one slice per query term, no copies
        if not all_alive:   # rows of removed units: no score, not counted in df
            hits = [(qi, rows[ev_alive[rows]], tf[ev_alive[rows]]) for qi, rows, tf in hits]
        if pend.n:
            hits += [(qi, rows + n_base, tf) for qi, rows, tf
                     in _term_postings(pend.post, q_terms)]
        df = np.zeros(len(q_terms), np.float32)
        for qi, rows, _ in hits:
            df[qi] += len(rows)
        n_live = int(ev_alive.sum()) + pend.n
        doclen = np.concatenate([self.ev_len, pend.lens]) if pend.n else np.asarray(self.ev_len)
        total = float(self.ev_len[ev_alive].sum() + pend.lens.sum())
        for other in others:   # one corpus over the layers searched together
            o_df, o_n, o_total = other.term_stats(q_terms)
            df += o_df
            n_live += o_n
            total += o_total
        avgdl = max(total / max(n_live, 1), 1e-9)
        idf = np.log1p((n_live - df + 0.5) / (df + 0.5)).astype(np.float32)
        pair = is_pair(q_terms)
        mine = np.isin(q_terms, own)
        mass = float(idf[~pair & mine].sum())   # coverage: the words' evidence only
        idf[pair & mine] *= np.float32(ranking.PAIR_WEIGHT)
        idf[np.isin(q_terms, spk) & ~mine] *= np.float32(ranking.SPEAKER_WEIGHT)
        idf[np.isin(q_terms, day) & ~mine] *= np.float32(ranking.DATE_WEIGHT)
        if len(words):
            idf[np.isin(q_terms, words) & ~mine] *= np.float32(ranking.TRANSLATION_WEIGHT)
        if len(gloss):
            idf[np.isin(q_terms, gloss) & ~mine] *= np.float32(ranking.GLOSS_WEIGHT)
        if len(syn):
            idf[np.isin(q_terms, syn) & ~mine] *= np.float32(ranking.SYNONYM_WEIGHT)
        extra = None
        if apart and (len(gloss) or len(words) or len(syn)):
            extra = np.zeros_like(scores)
            moved = np.isin(q_terms, np.concatenate([gloss, words, syn])) & ~mine
        for qi, rows, tf in hits:   # a term's rows are distinct: a plain indexed add
            ranking.bm25_add_term(extra if extra is not None and moved[qi] else scores,
                                  rows, tf, idf[qi], doclen, avgdl)
        return scores, mass, extra

    def term_stats(self, q_terms: np.ndarray) -> tuple[np.ndarray, int, float]:
        """For BM25 over several indexes as one corpus: the live rows holding each of the
        (sorted, unique) ``q_terms``, the live row count and their total length."""
        self.post
        pend = self._pending_rows()
        ev_alive, all_alive = self._event_alive()
        df = np.zeros(len(q_terms), np.float32)
        for qi, rows, _tf in _term_postings(self.post, q_terms):
            df[qi] += len(rows) if all_alive else int(ev_alive[rows].sum())
        if pend.n:
            for qi, rows, _tf in _term_postings(pend.post, q_terms):
                df[qi] += len(rows)
        n_live = int(ev_alive.sum()) + pend.n
        return df, n_live, float(self.ev_len[ev_alive].sum() + pend.lens.sum())

    def _event_alive(self) -> tuple[np.ndarray, bool]:
        """Per compacted event row, whether its unit is live, and whether all are: kept
        until a removal or new arrays (an O(rows) gather once, not on every query)."""
        changes, c = self._changes, self._ev_alive_cache
        if c is None or c[0] != changes or c[1] is not self.alive or c[2] is not self.ev_unit:
            ev_alive = self.alive[self.ev_unit]
            c = self._ev_alive_cache = (changes, self.alive, self.ev_unit, ev_alive,
                                        bool(ev_alive.all()))
        return c[3], c[4]

    def bm25(self, text: str) -> np.ndarray:
        """Per unit (compacted, then pending), the BM25 score of its best event row."""
        self.post   # checked (and rebuilt if damaged) before anything is taken from it
        pend = self._pending_rows()
        starts = np.concatenate([self.u_ptr[:-1], len(self.ev_len) + pend.starts])
        return ranking.unit_max(self.bm25_rows(text, pend)[0], starts)

    def _pending_rows(self) -> "_PendingRows":
        """The event rows of the pending entries as arrays (cached until the next change),
        with their neighbours among themselves and among the compacted rows."""
        changes, c = self._changes, self._pend_cache
        if c is None or c[0] != changes:
            c = self._pend_cache = (changes, _PendingRows.build(self))
        return c[1]




class _SharedLock:
    """Many searches at once, or one change of the index: a change waits for the searches
    in progress, and new searches wait behind a waiting change (no change starves).
    Re-entrant: the changing thread may search and change again inside its change; a
    searching thread may search again, and may change the index (a damaged snapshot found
    mid-search is rebuilt) once the other searches are done."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer: int | None = None
        self._depth = 0
        self._waiting = 0
        self._upgrader: int | None = None
        self._mine = threading.local()   # this thread's search depth

    def __enter__(self) -> "_SharedLock":   # ``with index.mutex:`` is a change
        self.acquire_exclusive()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_exclusive()

    def acquire_exclusive(self) -> None:
        me = threading.get_ident()
        if self._writer == me:
            self._depth += 1
            return
        upgrade = bool(getattr(self._mine, "n", 0))   # a search that must change the index
        with self._cond:                                # (a damaged snapshot found mid-read)
            if upgrade and self._upgrader is not None:   # two would wait for each other
                raise RuntimeError("index: two searches found it damaged at once; try again")
            self._waiting += 1
            if upgrade:
                self._upgrader = me
            try:   # (an upgrading search waits for the other searches, not for itself)
                while self._writer is not None or self._readers > int(upgrade):
                    self._cond.wait()
            finally:
                self._waiting -= 1
                if upgrade:
                    self._upgrader = None
            self._writer, self._depth = me, 1

    def release_exclusive(self) -> None:
        self._depth -= 1
        if not self._depth:
            with self._cond:
                self._writer = None
                self._cond.notify_all()

    def inside(self) -> bool:
        """Whether this thread holds the lock already (shared or exclusive)."""
        return self._writer == threading.get_ident() or bool(getattr(self._mine, "n", 0))

    def acquire_shared(self) -> bool:
        """False when this thread is already inside (nothing to release)."""
        if self._writer == threading.get_ident() or getattr(self._mine, "n", 0):
            self._mine.n = getattr(self._mine, "n", 0) + 1
            return False
        with self._cond:
            while self._writer is not None or self._waiting:
                self._cond.wait()
            self._readers += 1
        self._mine.n = 1
        return True

    def release_shared(self, counted: bool) -> None:
        self._mine.n -= 1
        if counted:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()


def _changes(method: Callable) -> Callable:
    """``method`` run as a change of its index (``Index.mutex`` held exclusively)."""
    @functools.wraps(method)
    def run(self: Index, *args: Any, **kw: Any) -> Any:
        with self.mutex:
            return method(self, *args, **kw)
    return run


def _reads(method: Callable) -> Callable:
    """``method`` run as a search of its index (``Index.mutex`` shared)."""
    @functools.wraps(method)
    def run(self: Index, *args: Any, **kw: Any) -> Any:
        counted = self.mutex.acquire_shared()
        try:
            return method(self, *args, **kw)
        finally:
            self.mutex.release_shared(counted)
    return run


def _searches(method: Callable, ranker_at: int | None) -> Callable:
    """``method`` run as a search (``_reads``), its first-use work (``Index._prepare``: a
    snapshot's checksums, vectors computed for a ranker that reads them) done first as a
    change, until a search finds nothing left to prepare while it holds the lock.
    ``ranker_at``: where the ranker is among the arguments (None: ``dense`` or ``bm25``, the
    method's own name)."""
    @functools.wraps(method)
    def run(self: Index, *args: Any, **kw: Any) -> Any:
        if ranker_at is None:
            ranker = method.__name__.removesuffix("_scores")
        else:
            ranker = args[ranker_at] if len(args) > ranker_at else kw.get("ranker",
                                                                          DEFAULT_RANKER)
        while True:
            if self._needs_prepare(ranker) and not self.mutex.inside():
                with self.mutex:
                    self._prepare(ranker)
            counted = self.mutex.acquire_shared()
            if not counted or not self._needs_prepare(ranker):
                break
            self.mutex.release_shared(counted)   # a change came between: prepare again
        try:
            return method(self, *args, **kw)
        finally:
            self.mutex.release_shared(counted)
    return run


# Everything that changes the index, and everything that reads its arrays and pending
# entries (rebuild and save are left out: a rebuild fills an index no other thread has yet;
# save takes the writer lock, then the mutex, itself).
for _name in ("add", "add_unit", "add_legacy", "remove", "refresh_vectors", "_compact",
              "_reexamine"):
    setattr(Index, _name, _changes(getattr(Index, _name)))
for _name in ("zero_vector_units", "superseded", "superseded_by", "owner_of", "created_at",
              "legacy_file", "_hit_list", "_stale"):
    setattr(Index, _name, _reads(getattr(Index, _name)))
for _name, _at in (("search", 2), ("search_events", 2), ("dense_scores", None),
                   ("bm25", None)):
    setattr(Index, _name, _searches(getattr(Index, _name), _at))


@dataclass
class _PendingRows:
    """Pending entries' event rows, numbered after the compacted rows."""

    entries: list[IndexEntry]
    unit_ids: list[str]
    ev_ids: list[str]
    starts: np.ndarray            # first row of each entry (local numbering)
    n: int
    lens: np.ndarray
    post: _Postings               # local row numbers
    prev: np.ndarray              # global row numbers, -1: none
    next: np.ndarray
    extra: tuple[np.ndarray, np.ndarray]   # (compacted row, pending global row) neighbours
    # Compacted rows whose neighbour is now a pending row (it arrived between them and their
    # compacted neighbour): (rows, their new prev) and (rows, their new next), global numbers.
    fix: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = (
        np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
        np.zeros(0, np.int64))
    time: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))   # row times (ns)
    shares: np.ndarray | None = None   # rows' ranking.cjk_share, made by Index._row_shares

    @classmethod
    def build(cls, idx: Index) -> "_PendingRows":
        entries = list(idx.pending.values())
        counts = np.array([len(e.rows.ids) for e in entries], np.int64)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64) \
            if entries else np.zeros(0, np.int64)
        n, n_base = int(counts.sum()), len(idx.ev_len)
        post, lens = _Postings(), np.zeros(0, np.float32)
        prev = nxt = np.full(n, -1, np.int64)
        extra = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        fix = (extra[0], extra[0], extra[0], extra[0])
        if entries:
            rows = np.concatenate([s + np.repeat(np.arange(len(e.rows.ids)), np.diff(e.rows.ptr))
                                   for s, e in zip(starts, entries)])
            terms = np.concatenate([e.terms for e in entries])
            tfs = np.concatenate([e.tfs for e in entries])
            order = np.lexsort((rows, terms))
            uniq, first = np.unique(terms[order], return_index=True)
            post = _Postings(uniq, np.append(first, len(terms)).astype(np.int64),
                             rows[order].astype(np.int32), tfs[order].astype(np.float32))
            lens = np.concatenate([_row_lengths(e) for e in entries])
        if entries or (n_base and not idx._event_alive()[1]):
            prev, nxt, extra, fix = cls._links(idx, entries, counts, n_base)
        time = np.concatenate([e.rows.time for e in entries]) if entries \
            else np.zeros(0, np.int64)
        return cls(entries, [e.unit_id for e in entries],
                   [i for e in entries for i in e.rows.ids], starts, n, lens, post,
                   prev, nxt, extra, fix, time)

    @staticmethod
    def _links(idx: Index, entries: list[IndexEntry], counts: np.ndarray, n_base: int
               ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray], tuple]:
        """Neighbours of pending rows, and the compacted rows whose links the changes since
        the last compaction altered, as a compaction would link them (so a live index scores
        what a rebuilt one does): one sort of the pending rows plus the live compacted rows
        of their groups near them or near a removed unit's row.

        A pending row, or a removed compacted one, is a seed. It can change
        the links of rows up to two windows away (a spoken row changes whether its neighbours,
        one window away, are in a dialogue, so their links on the far side); those rows are
        relinked whole, and to relink them exactly the sort takes the rows two windows
        further. Returns the pending rows' (prev, next) in global numbers, the (compacted,
        pending) edges, and the compacted rows' new (rows, prev, rows, next)."""
        w = ranking.WINDOW_NS
        if entries:
            key_of = dict(idx.key_of)
            keys = np.array([key_of.setdefault(k, len(key_of)) for e in entries
                             for k in e.rows.keys], np.int64)
            time = np.concatenate([e.rows.time for e in entries])
            kind = np.concatenate([e.rows.kind for e in entries])
        else:
            keys = time = np.zeros(0, np.int64)
            kind = np.zeros(0, idx.ev_kind.dtype)
        unit = len(idx.ids) + np.repeat(np.arange(len(entries)), counts)
        cand = np.zeros(0, np.int64)
        whole = np.zeros(0, bool)
        if n_base:
            # a row's links depend on the rows of its sort group only (its key; every spoken
            # row is one group): ranking.link_neighbours
            group = ranking.neighbour_group
            ev_alive = idx._event_alive()[0]
            ev_group = group(idx.ev_key, idx.ev_kind)
            dead = ~ev_alive
            seeds = np.sort(np.concatenate([time, idx.ev_time[dead]]).astype(np.int64))
            seed_groups = np.unique(np.concatenate([group(keys, kind), ev_group[dead]]))
            if len(seeds):
                at = np.searchsorted(seeds, idx.ev_time)   # distance to the nearest seed
                after = seeds[np.minimum(at, len(seeds) - 1)]
                before = seeds[np.maximum(at - 1, 0)]
                dist = np.minimum(np.abs(after - idx.ev_time), np.abs(idx.ev_time - before))
                cand = np.flatnonzero(ev_alive & (dist <= 4 * w)
                                      & np.isin(ev_group, seed_groups))
                whole = dist[cand] <= 2 * w
        glob = np.concatenate([cand, n_base + np.arange(len(keys))])
        if not len(glob):
            empty = np.zeros(0, np.int64)
            return empty, empty, (empty, empty), (empty, empty, empty, empty)
        # ties of equal times ordered by unit id, as a compaction orders them
        row_ids = np.array([idx.ids[int(u)] for u in idx.ev_unit[cand]]
                           + [e.unit_id for e, c in zip(entries, counts) for _ in range(c)])
        p, q = ranking.link_neighbours(
            np.concatenate([idx.ev_unit[cand], unit]),
            np.concatenate([idx.ev_key[cand].astype(np.int64), keys]),
            np.concatenate([idx.ev_time[cand], time]),
            np.concatenate([idx.ev_kind[cand], kind]),
            tie=np.unique(row_ids, return_inverse=True)[1])
        glob_ext = np.append(glob, -1)
        prev, nxt = glob_ext[p], glob_ext[q]
        m = len(cand)
        # Edges between a compacted row and a pending one, seen from the pending side.
        pend_prev, pend_next = prev[m:], nxt[m:]
        own = n_base + np.arange(len(keys))
        is_b = (pend_prev >= 0) & (pend_prev < n_base)
        is_a = (pend_next >= 0) & (pend_next < n_base)
        extra = (np.concatenate([pend_prev[is_b], pend_next[is_a]]),
                 np.concatenate([own[is_b], own[is_a]]))
        # compacted rows near a seed, relinked whole where their links changed
        cprev, cnext = prev[:m], nxt[:m]
        fp = whole & (cprev != idx.ev_prev[cand])
        fn = whole & (cnext != idx.ev_next[cand])
        fix = (cand[fp], cprev[fp], cand[fn], cnext[fn])
        return pend_prev, pend_next, extra, fix


fuse = ranking.fuse


def _with_speaker(speaker: str, texts: list[str]) -> list[str]:
    """An event's texts with its speaker's name as one more, unless its text names it first
    ("Caroline: ..."), so a plain turn and a transcript line hold the same words."""
    if not speaker or any(names_speaker(speaker, t) for t in texts[:1]):
        return texts
    return [speaker] + texts


class _Joined:
    """Item i of ``a`` then of ``b``, without building their concatenation (the mapped ids
    table of 100k units decodes in ~80 ms; a search reads a few dozen of them)."""

    __slots__ = ("a", "b", "n")

    def __init__(self, a, b) -> None:
        self.a, self.b, self.n = a, b, len(a)

    def __getitem__(self, i: int) -> str:
        i = int(i)
        return self.a[i] if i < self.n else self.b[i - self.n]


def embed_index(index: Index) -> int:
    """Before a ranker reads the index's vectors: re-index, with vectors embedded now, every
    live unit indexed without them (on the first call, every unit with an all-zero event
    row, e.g. from a snapshot saved under ``bm25``; later, the units added meanwhile).
    Returns how many units were re-indexed; a no-op unless ``on_demand``."""
    if not on_demand(index.mem):
        return 0
    todo = set(index.unembedded)
    if not index.dense_scanned:
        index.dense_scanned = True
        todo.update(index.zero_vector_units())
    # (only what was taken: a unit another thread indexes meanwhile stays for the next call)
    index.unembedded.difference_update(todo)
    todo = {u for u in todo if not index.legacy_file(u)
            and (u in index.pending or (u in index.row_of and index.alive[index.row_of[u]]))}
    for uid in sorted(todo):
        index.add_unit(uid, embed=True)
    if todo:
        index._unsaved += 1
        logging.getLogger("fsmem.lazy_vectors").info(
            "index: vectors of %d units stored without them computed for the ranker", len(todo))
    return len(todo)
