"""L1 kept in memory by the process that reads it every turn: loaded units and term counts.

Every append asks prune whether L1 is over capacity, and a prune ranks every L1 event: without
this cache each turn re-read, BLAKE3-verified and re-tokenised all of ``context/``. A published
unit directory is immutable, so a unit read once stays valid for as long as its directory is the
same directory: same inode, mtime and ctime. ctime cannot be set from user space (``cp -a``,
``touch -d`` and ``utime`` all set it to now), so a unit removed and copied back under the same
id, even onto a reused inode with its mtime preserved, is read again. Where a time is a whole
second (a filesystem that keeps no more, as sshfs) the manifest's key joins the stamp. Never
the device: one shared volume mounted twice is two devices. Another process's writes change the
listing or these stamps and are picked up the same way. Nothing here writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fsmem.format.layout import Vanished, View
from fsmem.search.lazy_vectors import on_demand

if TYPE_CHECKING:
    from fsmem.format.model import Event
    from fsmem.format.unit import Written
    from fsmem.memory.reader import Loaded, Reader

__all__ = ["L1Cache", "load_context", "context_timeline", "dir_stamp", "event_terms",
           "seed_written", "note_written"]

Stamp = tuple[int, int, int, int]
_SECOND = 1_000_000_000


def dir_stamp(path: str) -> Stamp:
    """What identifies one published version of a unit directory: (inode, mtime, ctime,
    manifest key where a time is a whole second, else 0)."""
    st = os.stat(path, follow_symlinks=False)
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, _ambiguous_key(path, st))


def _ambiguous_key(path: str, st: os.stat_result) -> int:
    """0 where the directory's times have a sub-second part (they tell versions apart);
    else its manifest's key (-1 if it cannot be read: matches no cached stamp)."""
    if st.st_mtime_ns % _SECOND and st.st_ctime_ns % _SECOND:
        return 0
    from fsmem.format.errors import FsmemError  # lazy: start-up, loaded only when used
    # lazy: start-up, loaded only when used (+blake3)
    from fsmem.format.unit import read_manifest_key
    try:
        return read_manifest_key(path)
    except (OSError, FsmemError):
        return -1


@dataclass
class _Entry:
    stamp: Stamp
    unit: "Loaded"
    with_vectors: bool
    terms: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    events: "list[Event] | None" = None   # hydrated (block text read and verified once)


class L1Cache:
    """Loaded L1 units by path, each valid while its directory stamp is unchanged."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self.hits = 0
        self.misses = 0
        # What this process wrote, so that nothing it wrote is read back to be ranked: unit
        # id -> text block digest -> text (units staged to arrive in L1, and seeded ones),
        # and the term counts of a staged arrival's events, (unit id, event id) -> counts,
        # which ``seed_written`` moves into the published unit's entry.
        self.written: dict[str, dict[str, str]] = {}
        self.fresh: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}

    def units(self, mem: "Reader", view: View, *, with_vectors: bool) -> list["Loaded"]:
        """The readable units of ``view``'s context layer, from the cache where still valid;
        damaged units are skipped (by ``Reader._read_unit``) and never cached."""
        out, seen = [], set()
        entries, stat = self._entries, os.stat
        for uid, path in view.layer(mem.l1):
            seen.add(path)
            entry = entries.get(path)
            if entry is not None and entry.unit.unit_id == uid \
                    and (entry.with_vectors or not with_vectors):
                try:   # ``_get``'s hit, inline: one stat per unit of every append's L1
                    st = stat(path, follow_symlinks=False)
                except OSError:
                    pass
                else:
                    key = entry.stamp[3]
                    if (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, key) == entry.stamp and (
                            not key or _ambiguous_key(path, st) == key):
                        self.hits += 1
                        out.append(entry.unit)
                        continue
            entry = self._get(mem, uid, path, with_vectors)
            if entry is not None:
                out.append(entry.unit)
        for path in [p for p in list(self._entries) if p not in seen]:
            gone = self._entries.pop(path, None)   # (a snapshot: threads may share it)
            if gone is not None:
                self.written.pop(gone.unit.unit_id, None)
        return out

    def _get(self, mem: "Reader", uid: str, path: str, with_vectors: bool) -> _Entry | None:
        try:
            stamp = dir_stamp(path)
        except OSError as exc:
            if mem.layout.vanished(path):
                raise Vanished(path) from exc
            stamp = None
        entry = self._entries.get(path)
        if entry is not None and stamp is not None and entry.stamp == stamp \
                and entry.unit.unit_id == uid and (entry.with_vectors or not with_vectors):
            self.hits += 1
            return entry
        self.misses += 1
        self._entries.pop(path, None)
        unit = mem._read_unit(uid, path, with_vectors=with_vectors)
        if unit is None:
            return None
        entry = _Entry(stamp or (0, 0, 0, 0), unit, with_vectors)
        try:
            if stamp is not None and stamp[3] != -1 and dir_stamp(path) == stamp:   # unchanged
                self._entries[path] = entry
        except OSError:
            pass
        return entry

    def events(self, mem: "Reader", unit: "Loaded") -> "list[Event] | None":
        """The unit's events with their text, hydrated once per unit version (None, logged,
        if a block is damaged: not cached, so it is looked at again)."""
        entry = self._entries.get(unit.path)
        if entry is not None and entry.unit is unit and entry.events is not None:
            return entry.events
        events = mem._hydrate(unit)
        if events is not None and entry is not None and entry.unit is unit:
            entry.events = events
        return events

    def terms(self, mem: "Reader", pairs: "list[tuple[Loaded, Any]]"
              ) -> list[tuple[np.ndarray, np.ndarray]]:
        """BM25 term counts of each (unit, event) of L1, tokenised once per unit version:
        the events not cached yet tokenised together (one ``term_rows`` pass), from the
        text this process wrote where it has it (``written``), else from their blocks, read
        and verified. A unit not in the cache (one staged to arrive) keeps its counts in
        ``fresh`` until it is published and seeded."""
        # lazy: start-up, loaded only when used (+blake3)
        from fsmem.search.index_entry import event_texts, term_rows
        out: list[tuple[np.ndarray, np.ndarray] | None] = []
        todo: list[int] = []
        for unit, ev in pairs:
            entry = self._entries.get(unit.path)
            if entry is not None and entry.unit is unit:
                cached = entry.terms.get(ev.id)
            else:   # only a unit this process staged has counts kept outside an entry
                cached = self.fresh.get((unit.unit_id, ev.id)) \
                    if unit.unit_id in self.written else None
            if cached is None:
                todo.append(len(out))
            out.append(cached)
        if todo:
            terms, tfs, ptr = term_rows([event_texts(mem.plugins, pairs[i][0].path, pairs[i][1],
                                                     self.written.get(pairs[i][0].unit_id))
                                         for i in todo])
            for k, i in enumerate(todo):
                unit, ev = pairs[i]
                got = out[i] = (terms[ptr[k]:ptr[k + 1]], tfs[ptr[k]:ptr[k + 1]])
                entry = self._entries.get(unit.path)
                if entry is not None and entry.unit is unit:
                    entry.terms[ev.id] = got
                elif unit.unit_id in self.written:   # a staged arrival: kept for its seeding
                    self.fresh[(unit.unit_id, ev.id)] = got
        return out   # type: ignore[return-value]   (every None was filled)

    def note_written(self, unit_id: str, texts: dict[str, str]) -> None:
        """Text blocks this process wrote for a unit about to join L1 (digest -> text)."""
        if len(self.written) > _WRITTEN_MAX:   # left by appends that failed: start again
            self.written.clear()
            self.fresh.clear()
        self.written[unit_id] = texts


_WRITTEN_MAX = 4096


def seed_written(mem: "Reader", path: str, written: "Written") -> None:
    """Cache an L1 unit this process has just published (under the writer lock) from what it
    wrote: its manifest, vectors and text, so no prune or turn reads them back (issue 18:
    "append and prune never re-read L1"). Seeded only when its vectors are all in hand (else
    it is read as usual). Its events' term counts come with it when a prune ranked it while
    it was staged, else they are tokenised from its text in hand when a prune first ranks
    it. A unit of another process, or one read after a restart, is read from its blocks and
    verified (a damaged block fails the prune: tests/test_hardening.py)."""
    from fsmem.memory.reader import Loaded  # lazy: start-up, loaded only when used (+blake3)
    manifest = written.manifest
    rows: dict[str, np.ndarray] = {}
    if manifest.vectors is not None:
        if written.vectors is None or manifest.vectors.embedder != mem.embedder.fingerprint:
            return
        rows = dict(zip(*written.vectors))
    elif any(ev.blocks for ev in manifest.events) and not on_demand(mem):
        return   # rows may come from the derived vector cache: read it as usual
    try:
        stamp = dir_stamp(path)
    except OSError:
        return
    unit = Loaded(manifest.id, path, manifest, rows, stamp[1])
    cache = _cache_of(mem)
    cache.note_written(manifest.id, written.texts)
    terms = {ev.id: got for ev in manifest.events
             if (got := cache.fresh.pop((manifest.id, ev.id), None)) is not None}
    cache._entries[path] = _Entry(stamp, unit, True, terms)


def note_written(mem: "Reader", unit_id: str, texts: dict[str, str]) -> None:
    """A unit this process staged to arrive in L1: its text blocks (digest -> text), so
    ranking it reads nothing back (``L1Cache.note_written``)."""
    _cache_of(mem).note_written(unit_id, texts)


def _cache_of(mem: "Reader") -> L1Cache:
    cache = getattr(mem, "_l1_cache", None)
    if cache is None:
        cache = L1Cache()
        mem._l1_cache = cache   # type: ignore[attr-defined]
    return cache


def load_context(mem: "Reader", *, with_vectors: bool = True) -> list["Loaded"]:
    """Every readable unit of L1 from one consistent view, re-reading only what changed."""
    cache = _cache_of(mem)
    view = _locked_view(mem)
    if view is not None:
        return cache.units(mem, view, with_vectors=with_vectors)
    return mem.consistent(lambda v: cache.units(mem, v, with_vectors=with_vectors),
                          (mem.l1,))


def _locked_view(mem: "Reader") -> View | None:
    """L1's listing when this process holds the writer lock (None otherwise): no other writer
    can begin or end a change meanwhile, and taking the lock completed every journal entry,
    so the listing is consistent without the epoch reads of ``Layout.consistent``. A journal
    entry still pending (this process failed to apply it) gives the full view instead."""
    store = getattr(mem, "store", None)
    if store is None or not store.holds_lock or not store._thread_lock._is_owned():
        return None   # (held by another thread of this process: it may be mid-change)
    if store.journal_names():
        return store.view((mem.l1,))
    return View(units={mem.l1: store.list_layer(mem.l1)})


def context_timeline(mem: "Reader") -> "list[Event]":
    """The L1 events sorted as ``Reader.timeline`` sorts them, re-reading only the units
    that changed. The events are shared with the cache: callers must not modify them."""
    cache = _cache_of(mem)

    def read(view: View) -> "list[Event]":
        pairs = []
        for unit in cache.units(mem, view, with_vectors=True):
            for ev in cache.events(mem, unit) or ():
                pairs.append((ev, unit.arrival_ns))
        pairs.sort(key=lambda p: (p[0].timestamp.ns, p[1], p[0].id))
        return [e for e, _ in pairs]
    return mem.consistent(read, (mem.l1,))


def event_terms(mem: "Reader", pairs: "list[tuple[Loaded, Any]]"
                ) -> list[tuple[np.ndarray, np.ndarray]]:
    """BM25 term counts of each (unit, event) of L1 (cached with its unit)."""
    return _cache_of(mem).terms(mem, pairs)
