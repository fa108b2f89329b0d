"""The index's files: loading and saving its snapshots, and the checksums that guard them.

``.fsmem/index/CURRENT`` names the current snapshot, a generation directory of ``.npy`` arrays
and a ``meta.json`` with their checksums (written whole, then switched to by one rename; never
fsynced: it is derived). ``SEEN`` records that a generation was in step with ``documents/`` at
its mtime, so an open with nothing changed skips the listing. ``IndexFiles`` is the part of
``fsmem.search.index.Index`` that reads and writes them; the arrays it fills are the index's.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Sequence, overload

import blake3
import msgspec
import numpy as np

from fsmem.format.errors import FsmemError, StoreLocked
from fsmem.format.layout import open_regular, read_small
from fsmem.search import ranking
from fsmem.search.analyze import ANALYZER_VERSION, cjk_unigram_hashes
from fsmem.store.derived import make_room

__all__ = ["IndexFiles", "INDEX_VERSION", "StrTable"]

log = logging.getLogger("fsmem.index")

# 3: event rows, manifest identity, created as (seconds, nanos, offset); older ones rebuild
# 4: a unit's identity includes its directory's inode and ctime
# 5: unit ids, event ids and summaries in mapped string tables, not in meta.json
# 6: the change-feed position in meta.json; delta files beside the arrays; no dense array
#    when the saver's ranker does not read it
# 7: a row's speaker (fsmem.search.speakers) as a word and speaker field terms; spoken rows
#    (ranking.KIND_SPOKEN) neighbour the turns of other speakers
# 8: a row's kind flags an event that asks (ranking.KIND_ASKS): its answer takes its score
INDEX_VERSION = 8 * 1000 + ANALYZER_VERSION
_ARRAYS = ("inos", "mkeys", "u_owner", "dense", "created", "nevents", "u_ptr", "ev_len",
           "ev_time", "ev_key", "ev_kind", "ev_prev", "ev_next", "p_terms", "p_ptr", "p_rows",
           "p_tfs")
# Added within version 5 (absent from older snapshots, read as zeros: "unknown"): the manifest
# key of each unit row, so a unit restored by cp -a under a new identity keeps its rows.
# Added with format 4 (issue 34): each unit row's owner, (agent index << 1) | private, agent
# index into meta ``agents``; absent from older snapshots (zeros: the default agent, shared,
# which every unit of a format-3 store is).
_OPTIONAL = ("mkeys", "u_owner")
_POSTINGS = ("p_terms", "p_ptr", "p_rows", "p_tfs")   # checksummed on first use (``post``)
_TABLES = ("ids", "ev_ids", "summaries")   # StrTables: ``<name>_ptr`` and ``<name>_utf8``
_TABLE_FILES = tuple(f"{t}_{part}" for t in _TABLES for part in ("ptr", "utf8")) \
    + ("ids_order",)   # the unit rows in id order: a lookup by id is a binary search
_META_CAP = 1 << 30              # meta.json: ~70 bytes per unit (the small-file cap is 16 MB)
_HASH_THREADS_FROM = 16 << 20    # files bigger than this are hashed on all cores
# The two biggest postings arrays are checksummed in chunks, each the first time a search reads
# into it: a first query hashes the few chunks its terms' postings sit in, not the whole file
# (46 of 79 ms of a first query at 100k units, 511 of 685 ms at 1M events).
_CHUNK = 4 << 20
_CHUNKED = ("p_rows", "p_tfs")
_DELTA_SHARE = 0.5   # deltas up to half the arrays' bytes; then one new generation
_DELTAS_MAX = 64
_DELTA_MIN_BASE = 256 << 10   # below this the arrays are simply written again


class _Meta(msgspec.Struct):
    """meta.json: small and of a size independent of the store's (the per-unit and per-row
    strings live in mapped string tables), except ``legacy`` in a HomeAgent directory."""
    version: int
    embedder: str
    dim: int
    units: int = 0                # unit rows (ids, summaries); events: ``rows``
    rows: int = 0                 # event rows (ev_ids: "" for a summary or legacy row)
    legacy: dict[str, str] = {}   # unit id -> legacy JSON file name in documents/
    digests: dict[str, str] = {}  # array name -> BLAKE3 of its .npy file
    keys: list[str] = []          # conversation keys, indexed by ev_key
    feed: str = ""                # the change feed's id and the last record taken (-1: none)
    feed_pos: int = -1
    stamp: list[int] = []         # documents/'s stamp (fsmem.store.changes.dir_stamp) there
    dense: bool = True            # dense.npy written (not when the saver's ranker is bm25)
    chunks: dict[str, list[str]] = {}   # file -> BLAKE3 of each _CHUNK bytes (_CHUNKED files)
    agents: list[str] = []        # format 4: the agents of ``u_owner`` ("" = the default first)
    supersedes: dict[str, str] = {}   # unit id -> the unit it updates (hidden from search)
    moved_supersedes: dict[str, str] = {}   # the same, of updates now in L1 or L3
    legacy_idents: dict[str, int] = {}   # HomeAgent files of documents/ -> identity seen


class _EntryWire(msgspec.Struct, array_like=True):
    """One IndexEntry in a delta file (arrays as raw bytes)."""
    unit_id: str
    ino: int
    mkey: int
    summary: str
    legacy_file: str
    created_ns: int
    created_off: int
    events: int
    terms: bytes
    tfs: bytes
    vector: bytes                 # float32 [rows, dim]; b"" when dense is not kept
    row_ids: list[str]
    row_ptr: bytes
    row_time: bytes
    row_keys: list[str]
    row_kind: bytes
    agent: str = ""               # format 4 (older deltas: the default agent, shared)
    private: bool = False
    supersedes: str = ""


class _Delta(msgspec.Struct):
    """``delta-<n>.bin`` of a generation: what changed since the arrays (and the deltas
    before it) were written, and the feed position after it. The file is the BLAKE3 (32
    bytes) of the rest, then this struct as msgpack; written whole, renamed into place."""
    version: int
    embedder: str
    gen: str
    removed: list[str] = []
    entries: list[_EntryWire] = []
    idents: dict[str, int] = {}   # units kept under a new identity (cp -a)
    feed: str = ""
    feed_pos: int = -1
    stamp: list[int] = []
    moved: dict[str, str] = {}    # format 4: moved_supersedes after it (whole: a few entries)
    legacy_idents: dict[str, int] = {}   # HomeAgent files -> identity after it (whole)


class StrTable(Sequence[str]):
    """A read-only list of strings stored as one UTF-8 byte array and int64 offsets (both
    memory-mapped from the snapshot): item i is decoded when asked, so an open does no work
    per unit; ``tolist`` decodes all at once (a compaction). ``order`` (optional): the item
    numbers in string order, for ``find``."""

    __slots__ = ("ptr", "data", "order")

    def __init__(self, ptr: np.ndarray, data: np.ndarray,
                 order: np.ndarray | None = None) -> None:
        self.ptr, self.data, self.order = ptr, data, order

    def find(self, s: str) -> int | None:
        """The item number holding ``s`` (by binary search over ``order``), or None."""
        order = self.order
        assert order is not None
        lo, hi = 0, len(order)
        while lo < hi:
            mid = (lo + hi) // 2
            if self[int(order[mid])] < s:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(order) and self[int(order[lo])] == s:
            return int(order[lo])
        return None

    def sorted_order(self) -> np.ndarray:
        """The item numbers in string (code point) order, as ``find`` needs them."""
        items = self.tolist()
        return np.argsort(np.array(items, dtype=str), kind="stable").astype(np.int64) \
            if items else np.zeros(0, np.int64)

    @classmethod
    def encode(cls, strings: Iterable[str]) -> "StrTable":
        if isinstance(strings, StrTable):
            return strings
        parts = [s.encode("utf-8", "surrogatepass") for s in strings]
        ptr = np.zeros(len(parts) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=ptr[1:])
        return cls(ptr, np.frombuffer(b"".join(parts), np.uint8))

    def __len__(self) -> int:
        return len(self.ptr) - 1

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i):
        n = len(self)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("StrTable index out of range")
        lo, hi = int(self.ptr[i]), int(self.ptr[i + 1])
        return bytes(self.data[lo:hi]).decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def __add__(self, other: Iterable[str]) -> list[str]:
        return self.tolist() + list(other)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (list, StrTable)) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def tolist(self) -> list[str]:
        data, ptr = bytes(self.data), self.ptr.tolist()
        return [data[a:b].decode("utf-8", "surrogatepass") for a, b in zip(ptr, ptr[1:])]


class _RowLookup(Mapping[str, int]):
    """unit id -> row over a mapped ids table (``StrTable.find``): no per-unit work until a
    caller walks all of it (``items``, ``__iter__``: then one dict, kept)."""

    def __init__(self, ids: StrTable) -> None:
        self._ids, self._all = ids, None

    def get(self, key: str, default=None):   # type: ignore[override]
        if self._all is not None:
            return self._all.get(key, default)
        row = self._ids.find(key) if isinstance(key, str) else None
        return default if row is None else row

    def __getitem__(self, key: str) -> int:
        row = self.get(key)
        if row is None:
            raise KeyError(key)
        return row

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None   # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._ids)

    def _dict(self) -> dict[str, int]:
        if self._all is None:
            self._all = {u: i for i, u in enumerate(self._ids.tolist())}
        return self._all

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def items(self):   # type: ignore[override]
        return self._dict().items()


class _Checked:
    """An array attribute of ``IndexFiles`` that a mapped snapshot checksums on first read
    (with the postings: ``IndexFiles._verify_post``); setting it stores it as it is."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if obj.__dict__.get("_post_check") is not None:
            obj._verify_post()
        return obj.__dict__[self.slot]

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class _Postings:
    """CSR postings by term: terms sorted, rows[ptr[i]:ptr[i+1]] hold term i. ``check``
    (a mapped snapshot's): ``check(lo, hi)`` before reading rows/tfs[lo:hi] verifies the
    chunks of both files that hold them (``_ChunkCheck``)."""

    terms: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    tfs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    check: "Callable[[int, int], None] | None" = None


class _Damaged(Exception):
    """A chunk of a mapped postings file did not match its checksum (the index was rebuilt
    from the directories: a search that was reading it starts again)."""


class _ChunkCheck:
    """The per-chunk BLAKE3 check of one mapped ``.npy`` file (opened at load: a later GC of
    its generation does not matter); ``on_damage`` is called once on a mismatch."""

    def __init__(self, path: str, fd: int, digests: list[str], offset: int, itemsize: int,
                 on_damage: "Callable[[str], None]") -> None:
        self.path, self.fd, self.digests = path, fd, digests
        self.offset, self.itemsize, self.on_damage = offset, itemsize, on_damage
        self.done = bytearray(len(digests))
        self.left = len(digests)

    def verify(self, lo: int, hi: int) -> None:
        """Verify the chunks holding elements [lo, hi) (each once)."""
        if hi <= lo or not self.left:
            return
        first = (self.offset + lo * self.itemsize) // _CHUNK
        last = (self.offset + hi * self.itemsize - 1) // _CHUNK
        for c in range(first, min(last, len(self.digests) - 1) + 1):
            if self.done[c]:
                continue
            data = os.pread(self.fd, _CHUNK, c * _CHUNK)
            if blake3.blake3(data).hexdigest() != self.digests[c]:
                self.on_damage(self.path)
                raise _Damaged(self.path)
            self.done[c] = 1
            self.left -= 1

    def verify_all(self) -> None:
        """Every chunk (a compaction or a save reads the whole file)."""
        if (os.fstat(self.fd).st_size + _CHUNK - 1) // _CHUNK != len(self.digests):
            self.on_damage(self.path)
            raise _Damaged(self.path)
        self.verify(0, (len(self.digests) * _CHUNK - self.offset) // self.itemsize + 1)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class IndexFiles:
    """Snapshot I/O of the index (a mixin of ``fsmem.search.index.Index``, which holds the arrays
    and provides ``_clear``, ``_compact`` and ``rebuild``)."""

    @property
    def dense(self) -> np.ndarray:
        """float32 [event rows, dim]; a mapped snapshot's is checksummed on first use. A
        snapshot saved without it (its saver's ranker was bm25): built on first use."""
        if self.dense_absent:
            log.info("%s: the index was saved without vectors (ranker bm25); reading them "
                     "from the units once for this ranker", self.dir)
            self.keep_dense = True
            self.rebuild()
        if self._dense_check is not None:
            self._verify_dense()
        return self._dense

    @dense.setter
    def dense(self, value: np.ndarray) -> None:
        self._dense = value

    def _verify_dense(self) -> None:
        """BLAKE3 of the dense array file (opened at load: a later GC of its generation does
        not matter); on a mismatch the index is rebuilt from the directories."""
        path, fd, digest = self._dense_check   # type: ignore[misc]
        self._dense_check = None
        try:
            ok = _fd_digest(fd) == digest
        except (OSError, ValueError):
            ok = False
        finally:
            os.close(fd)
        if not ok:
            log.warning("%s: checksum mismatch; rebuilding the index from the directories", path)
            self.rebuild()

    @property
    def post(self) -> "_Postings":
        """The postings; a mapped snapshot's four arrays are checksummed on first use (by a
        search or a compaction), not at open: a fresh process that opens and counts, or
        only adds, never pays for hashing them."""
        if self._post_check is not None:
            self._verify_post()
        return self._post

    @post.setter
    def post(self, value: "_Postings") -> None:
        self._post = value

    @property
    def row_of(self) -> "dict[str, int] | _RowLookup":
        """unit id -> row of the arrays: over a mapped snapshot, a binary search of its ids
        table (a dict of 100k ids costs ~100 ms to build, paid by a fresh process's first
        query or commit); otherwise a dict built on first use."""
        if self._row_of is None:
            ids = self.ids
            self._row_of = _RowLookup(ids) if isinstance(ids, StrTable) \
                and ids.order is not None else {u: i for i, u in enumerate(ids)}
        return self._row_of

    @row_of.setter
    def row_of(self, value: dict[str, int] | None) -> None:
        self._row_of = value

    # Every array but the dense one, and the string tables, of a mapped snapshot: checksummed
    # together with the postings on first use (an open that only counts reads none of them).
    inos, created, nevents, u_ptr = _Checked(), _Checked(), _Checked(), _Checked()
    mkeys = _Checked()
    ev_len, ev_time, ev_key, ev_kind = _Checked(), _Checked(), _Checked(), _Checked()
    ev_prev, ev_next = _Checked(), _Checked()
    ids, ev_ids, summaries = _Checked(), _Checked(), _Checked()

    @property
    def ev_unit(self) -> np.ndarray:
        """The unit row of each event row (from ``u_ptr``, worked out on first use)."""
        if self._ev_unit is None:
            self._ev_unit = np.repeat(np.arange(len(self.u_ptr) - 1), np.diff(self.u_ptr))
        return self._ev_unit

    @ev_unit.setter
    def ev_unit(self, value: np.ndarray | None) -> None:
        self._ev_unit = value

    def _as_lists(self) -> None:
        """Decode the mapped string tables into lists (before a compaction rewrites them)."""
        for name in _TABLES:
            value = getattr(self, name)
            if isinstance(value, StrTable):
                setattr(self, name, value.tolist())

    def _verify_post(self) -> None:
        """BLAKE3 of each postings and string-table file (opened at load, like the dense
        one); on a mismatch the index is rebuilt from the directories."""
        checks, self._post_check = self._post_check or [], None
        ok = True
        for path, fd, digest in checks:
            try:
                good = ok and _fd_digest(fd) == digest
            except (OSError, ValueError):
                good = False
            finally:
                os.close(fd)
            if ok and not good:
                log.warning("%s: checksum mismatch; rebuilding the index from the directories",
                            path)
            ok = good
        if ok and not np.all(np.diff(self.__dict__["_u_ptr"]) > 0):   # a unit without rows
            log.warning("%s: inconsistent index arrays; rebuilding", self.dir)
            ok = False
        if not ok:
            self.rebuild()

    def _close_post_check(self) -> None:
        checks, self._post_check = getattr(self, "_post_check", None) or [], None
        for _path, fd, _digest in checks:
            os.close(fd)
        for chunk in getattr(self, "_chunk_checks", None) or []:
            chunk.close()
        self._chunk_checks: list[_ChunkCheck] = []

    def _verify_chunks(self, lo: int, hi: int) -> None:
        """Before postings rows/tfs[lo:hi] of a mapped snapshot are read (``_Postings.check``)."""
        for chunk in self._chunk_checks:
            chunk.verify(lo, hi)

    def _verify_all_chunks(self) -> bool:
        """Every chunk, before the postings are read whole; False if the index was rebuilt."""
        try:
            for chunk in list(self._chunk_checks):
                chunk.verify_all()
        except _Damaged:
            return False
        return True

    def _chunk_damaged(self, path: str) -> None:
        log.warning("%s: checksum mismatch; rebuilding the index from the directories", path)
        self.rebuild()

    def __del__(self) -> None:
        check = getattr(self, "_dense_check", None)
        if check is not None:
            os.close(check[1])
        self._close_post_check()

    # -- lifecycle ----------------------------------------------------------------------
    def load(self) -> bool:
        """Map the current snapshot and apply its deltas; False (and an empty index) if it is
        missing or unusable.

        Arrays are memory-mapped read-only (open costs no copy); each file's BLAKE3 is
        checked against ``meta.json`` on first use, a delta's when it is read, so a damaged
        snapshot is never used. A generation replaced (and removed) while it was opened is
        retried."""
        for _ in range(3):
            try:
                if not self._load():
                    return False
                self._load_deltas()
            except _Replaced:
                continue
            return True
        return False

    def _load(self) -> bool:
        # lazy: start-up, loaded only when used (+format.blocks, format.media)
        from fsmem.format.unit import load_npy
        self._clear()
        gen_name = ""
        try:
            gen_name = read_small(os.path.join(self.dir, "CURRENT"), 4096).decode("ascii").strip()
            gen = os.path.join(self.dir, gen_name)
            meta = _read_meta(os.path.join(gen, "meta.json"))
            if meta.version != INDEX_VERSION or meta.embedder != self.fingerprint \
                    or meta.dim != self.dim:
                return False
            arrays = {}
            chunked: dict[str, tuple[str, int, list[str]]] = {}
            base_bytes = 0
            for name in _ARRAYS + _TABLE_FILES:
                path = os.path.join(gen, f"{name}.npy")
                if name in _OPTIONAL and not os.path.lexists(path):
                    arrays[name] = np.zeros(meta.units, np.int64 if name == "mkeys"
                                            else np.int32)
                    continue
                if name == "dense" and not meta.dense:
                    arrays[name] = None
                    continue
                fd = open_regular(path)   # never a FIFO (it would hang the mmap), a link
                base_bytes += os.fstat(fd).st_size
                if name == "dense":
                    # The largest array (154 MB at 100k units of 384-d vectors; unread by
                    # the bm25 ranker): checked on first use, by any ranker.
                    self._dense_check = (path, fd, meta.digests.get(name, ""))
                elif name in meta.chunks:   # chunk by chunk, as searches read them
                    chunked[name] = (path, fd, meta.chunks[name])
                else:   # all the others on first use too (see ``post`` and ``_Checked``)
                    self._post_check = (self._post_check or []) + [
                        (path, fd, meta.digests.get(name, ""))]
                arrays[name] = load_npy(path, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            if gen_name and _current(self.dir) not in ("", gen_name):
                raise _Replaced() from None
            return False
        except (OSError, ValueError, KeyError, msgspec.DecodeError, EOFError, FsmemError) as exc:
            log.warning("%s: unusable index (%s); rebuilding from the directories", self.dir, exc)
            return False
        n, n_ev = meta.units, meta.rows
        tables = {t: StrTable(arrays[f"{t}_ptr"], arrays[f"{t}_utf8"]) for t in _TABLES}
        tables["ids"].order = arrays["ids_order"]
        dense = arrays["dense"]
        if not ((dense is None or dense.shape == (n_ev, self.dim)) and len(arrays["inos"]) == n
                and len(arrays["mkeys"]) == n
                and len(tables["ids"]) == len(tables["summaries"]) == n
                and len(tables["ev_ids"]) == n_ev and len(arrays["ids_order"]) == n
                and all(t.ptr.ndim == 1 and len(t.ptr) and int(t.ptr[-1]) == len(t.data)
                        for t in tables.values())
                and arrays["created"].shape == (n, 3) and len(arrays["u_ptr"]) == n + 1
                and int(arrays["u_ptr"][0]) == 0 and int(arrays["u_ptr"][-1]) == n_ev
                and all(len(arrays[a]) == n_ev for a in _ARRAYS if a.startswith("ev_"))
                and len(arrays["p_ptr"]) == len(arrays["p_terms"]) + 1
                and len(arrays["p_rows"]) == len(arrays["p_tfs"])):
            log.warning("%s: inconsistent index arrays; rebuilding", self.dir)
            return False
        self.ids, self.summaries = tables["ids"], tables["summaries"]
        self.legacy = meta.legacy
        self.agents, self.supersedes = list(meta.agents or [""]), dict(meta.supersedes)
        self.moved_supersedes = dict(meta.moved_supersedes)
        self.legacy_idents = dict(meta.legacy_idents)
        self.row_of = None   # built on first use
        self.inos, self.mkeys = arrays["inos"], arrays["mkeys"]
        self.u_owner = arrays["u_owner"]
        self._dense, self.dense_absent = dense, dense is None
        self.created, self.nevents = arrays["created"], arrays["nevents"]
        self.alive = np.ones(n, bool)
        self._changes = getattr(self, "_changes", 0) + 1   # caches of the old arrays: stale
        self._chunk_checks = [
            _ChunkCheck(path, fd, digests, int(getattr(arrays[name], "offset", 0)),
                        arrays[name].dtype.itemsize, self._chunk_damaged)
            for name, (path, fd, digests) in chunked.items()]
        self.post = _Postings(arrays["p_terms"], arrays["p_ptr"], arrays["p_rows"],
                              arrays["p_tfs"],
                              self._verify_chunks if self._chunk_checks else None)
        self.ev_ids, self.keys = tables["ev_ids"], meta.keys
        self.key_of = {k: i for i, k in enumerate(self.keys)}
        for name in _ARRAYS:
            if name.startswith("ev_") or name == "u_ptr":
                setattr(self, name, arrays[name])
        self.ev_unit = None   # from u_ptr on first use
        self._gen, self._base_bytes, self._delta_bytes, self._deltas = gen_name, base_bytes, 0, 0
        self._base_dense = meta.dense
        self._feed_id, self._feed_pos, self._doc_stamp = meta.feed, meta.feed_pos, list(meta.stamp)
        return True

    def _load_deltas(self) -> None:
        """Apply the generation's deltas in order (a damaged one: the index is rebuilt)."""
        gen = os.path.join(self.dir, self._gen)
        try:
            names = sorted(n for n in os.listdir(gen) if n.startswith("delta-")
                           and n.endswith(".bin"))
        except FileNotFoundError:
            raise _Replaced() from None
        for name in names:
            path = os.path.join(gen, name)
            try:
                raw = read_small(path, 1 << 34)
                if len(raw) < 32 or blake3.blake3(raw[32:]).digest() != raw[:32]:
                    raise ValueError("checksum mismatch")
                delta = msgspec.msgpack.decode(raw[32:], type=_Delta)
                if delta.version != INDEX_VERSION or delta.embedder != self.fingerprint \
                        or delta.gen != self._gen:
                    raise ValueError("not of this generation")
            except FileNotFoundError:
                raise _Replaced() from None
            except (OSError, ValueError, msgspec.DecodeError, FsmemError) as exc:
                log.warning("%s: unusable index delta (%s); rebuilding from the directories",
                            path, exc)
                self.rebuild()
                return
            self._apply_delta(delta)
            self._delta_bytes += len(raw)
            self._deltas += 1
        self._dirty_added, self._dirty_removed, self._dirty_idents = {}, set(), {}

    def save(self) -> bool:
        """Write what changed since the last save under the writer lock; True if saved.

        A delta file of the changes when they are small beside the arrays, else one new
        generation (the arrays compacted), after which the old generation is removed at
        once (a reader that mapped it keeps its unlinked files): the index never holds much
        more than twice its live size on disk. The index is derived: a save that cannot be
        written (a full disk, a busy lock) is logged and left behind whole (nothing partial
        stays); the in-memory index goes on serving and a later save tries again."""
        try:
            if not os.path.isdir(self.dir):   # stablemem's, on its first save (index.Index)
                os.mkdir(self.dir)
            # never two savers, never a saver and a GC; then no search or change meanwhile
            with self.mem.store.locked(), self.mutex:
                if self._can_delta():
                    self._save_delta()
                else:
                    self._compact()
                    self._save_locked()
        except (OSError, StoreLocked) as exc:
            log.warning("%s: index not saved (it is derived; reads go on): %s", self.dir, exc)
            return False
        return True

    def _can_delta(self) -> bool:
        if not self._gen or _current(self.dir) != self._gen or self._deltas >= _DELTAS_MAX \
                or self._base_bytes < _DELTA_MIN_BASE or self.keep_dense != self._base_dense:
            return False
        size = sum(len(e.terms) * 12 + len(e.rows.ids) * (40 + (
            self.dim * 4 if self.keep_dense else 0)) for e in self._dirty_added.values())
        return self._delta_bytes + size <= self._base_bytes * _DELTA_SHARE

    def _save_delta(self) -> None:
        """One ``delta-<n>.bin`` in the current generation (temp file, then a rename)."""
        entries = []
        for e in self._dirty_added.values():
            r = e.rows
            entries.append(_EntryWire(
                e.unit_id, int(e.ino), int(e.mkey), e.summary, e.legacy_file, e.created_ns,
                e.created_off, e.events, np.ascontiguousarray(e.terms, np.uint64).tobytes(),
                np.ascontiguousarray(e.tfs, np.float32).tobytes(),
                np.ascontiguousarray(e.vector, np.float32).tobytes() if self.keep_dense
                else b"", list(r.ids), np.ascontiguousarray(r.ptr, np.int64).tobytes(),
                np.ascontiguousarray(r.time, np.int64).tobytes(), list(r.keys),
                np.ascontiguousarray(r.kind, np.int8).tobytes(), e.agent, e.private,
                e.supersedes))
        delta = _Delta(INDEX_VERSION, self.fingerprint, self._gen,
                       sorted(self._dirty_removed - set(self._dirty_added)), entries,
                       dict(self._dirty_idents), self._feed_id, self._feed_pos,
                       list(self._doc_stamp), dict(self.moved_supersedes),
                       dict(self.legacy_idents))
        payload = msgspec.msgpack.encode(delta)
        data = blake3.blake3(payload).digest() + payload
        gen = os.path.join(self.dir, self._gen)
        name = f"delta-{time.time_ns():020d}-{uuid.uuid4().hex[:6]}.bin"
        _write_renamed(os.path.join(gen, f"{name}.tmp"), os.path.join(gen, name), data)
        self._delta_bytes += len(data)
        self._deltas += 1
        self._dirty_added, self._dirty_removed, self._dirty_idents = {}, set(), {}
        self._unsaved, self._unsaved_pos = 0, False

    def _save_locked(self) -> None:
        """A new generation directory of ``.npy`` files plus ``meta.json`` (with each file's
        BLAKE3), then ``CURRENT`` switched to it by one rename, then every other generation
        removed (a reader that mapped one keeps its unlinked files; one that was opening it
        starts again: ``_Replaced``)."""
        # lazy: start-up, loaded only when used (+shutil, zlib)
        import shutil  # here: a reader (a CLI query) never saves, and skips its import
        gen_name = f"gen-{time.time_ns()}-{uuid.uuid4().hex[:6]}"
        gen = os.path.join(self.dir, gen_name)
        for old in os.listdir(self.dir):   # leftovers of a save that was killed
            if old.startswith("gen-") and old != self._gen and old != _current(self.dir):
                shutil.rmtree(os.path.join(self.dir, old), ignore_errors=True)
        os.makedirs(gen)
        try:
            self._write_gen(gen, gen_name)
        except BaseException:
            shutil.rmtree(gen, ignore_errors=True)
            raise
        self._gen = gen_name
        for old in os.listdir(self.dir):
            if old.startswith("gen-") and old != gen_name:
                shutil.rmtree(os.path.join(self.dir, old), ignore_errors=True)
            elif old == "SEEN":   # an older release's record: the feed replaces it
                try:
                    if not make_room(os.path.join(self.dir, old), self.mem.store.meta):
                        os.unlink(os.path.join(self.dir, old))
                except OSError:
                    pass
        self._base_bytes = sum(e.stat().st_size for e in os.scandir(gen))
        self._base_dense = self.keep_dense
        self._delta_bytes, self._deltas = 0, 0
        self._dirty_added, self._dirty_removed, self._dirty_idents = {}, set(), {}
        self._unsaved, self._unsaved_pos = 0, False

    def _write_gen(self, gen: str, gen_name: str) -> None:
        keep_dense = self.keep_dense
        arrays = {name: getattr(self, name) for name in _ARRAYS
                  if not name.startswith("p_") and (name != "dense" or keep_dense)}
        arrays.update({"p_terms": self.post.terms, "p_ptr": self.post.ptr,
                       "p_rows": self.post.rows, "p_tfs": self.post.tfs})
        for t in _TABLES:
            table = StrTable.encode(getattr(self, t))
            arrays[f"{t}_ptr"], arrays[f"{t}_utf8"] = table.ptr, table.data
            if t == "ids":
                arrays["ids_order"] = table.order if table.order is not None \
                    else table.sorted_order()
        digests, chunks = {}, {}
        for name, arr in arrays.items():
            path = os.path.join(gen, f"{name}.npy")
            np.save(path, np.ascontiguousarray(arr), allow_pickle=False)
            if name in _CHUNKED:
                chunks[name] = _chunk_digests(path)
            else:
                digests[name] = _file_digest(path)
        meta = _Meta(version=INDEX_VERSION, embedder=self.fingerprint, dim=self.dim,
                     units=len(self.ids), rows=len(self.ev_ids), legacy=self.legacy,
                     digests=digests, keys=self.keys, feed=self._feed_id,
                     feed_pos=self._feed_pos, stamp=list(self._doc_stamp), dense=keep_dense,
                     chunks=chunks, agents=list(self.agents), supersedes=dict(self.supersedes),
                     moved_supersedes=dict(self.moved_supersedes),
                     legacy_idents=dict(self.legacy_idents))
        with open(os.path.join(gen, "meta.json"), "wb") as fh:
            fh.write(msgspec.json.encode(meta))
        make_room(os.path.join(self.dir, "CURRENT"), self.mem.store.meta)   # never onto a dir
        _write_renamed(os.path.join(self.dir, f"CURRENT.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"),
                       os.path.join(self.dir, "CURRENT"), gen_name.encode("ascii"))


def _write_renamed(tmp: str, dst: str, data: bytes) -> None:
    """``data`` into a new temp file, then renamed over ``dst`` (derived: not fsynced); the
    temp file is removed if anything fails."""
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
        os.replace(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class _Replaced(Exception):
    """The generation named by CURRENT was replaced while it was being opened."""


def _current(index_dir: str) -> str:
    try:
        return read_small(os.path.join(index_dir, "CURRENT"), 4096).decode("ascii").strip()
    except (OSError, FsmemError, ValueError):
        return ""


def _fd_digest(fd: int) -> str:
    """BLAKE3 of an open file's bytes, read in 8 MiB chunks from offset 0 (a mapping of the
    whole file would add its size to the process's resident memory); all cores only for a
    big file: for small arrays the thread pool costs more than it saves."""
    size = os.fstat(fd).st_size
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO if size > _HASH_THREADS_FROM else 1)
    offset = 0
    while chunk := os.pread(fd, 8 << 20, offset):
        hasher.update(chunk)
        offset += len(chunk)
    return hasher.hexdigest()


def _read_meta(path: str) -> "_Meta":
    """meta.json decoded straight from a read-only mapping of it (opened safely: no symlink,
    no FIFO, under 1 GiB): no read-and-join copy of its megabytes (~7 MB at 100k units)."""
    fd = open_regular(path, cap=_META_CAP)
    try:
        if not os.fstat(fd).st_size:
            raise ValueError(f"{path}: empty")
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
            return msgspec.json.decode(mm, type=_Meta)
    finally:
        os.close(fd)


def _chunk_digests(path: str) -> list[str]:
    """BLAKE3 of each ``_CHUNK`` bytes of a file just written."""
    out = []
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        offset = 0
        while chunk := os.pread(fd, _CHUNK, offset):
            out.append(blake3.blake3(chunk).hexdigest())
            offset += len(chunk)
    finally:
        os.close(fd)
    return out


def _file_digest(path: str) -> str:
    """BLAKE3 of a file just written (see ``_fd_digest``)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _fd_digest(fd)
    finally:
        os.close(fd)


# -- arithmetic over the postings and the dense matrix (fsmem.search.index) ------------------

_BLAS_FROM = 8 << 20             # matrix elements (16k rows x 512) from which BLAS is used

def _term_postings(post: _Postings, q_terms: np.ndarray
                   ) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(query term index, rows, tfs) of each of the sorted ``q_terms`` found in ``post``:
    views of the CSR arrays (a term's postings are contiguous), nothing copied."""
    if not len(post.terms) or not len(q_terms):
        return []
    pos = np.searchsorted(post.terms, q_terms)
    ok = pos < len(post.terms)
    ok[ok] = post.terms[pos[ok]] == q_terms[ok]
    ptr, rows, tfs = np.asarray(post.ptr), np.asarray(post.rows), np.asarray(post.tfs)
    out = []
    for i in np.flatnonzero(ok):
        lo, hi = int(ptr[pos[i]]), int(ptr[pos[i] + 1])
        if post.check is not None:
            post.check(lo, hi)
        out.append((int(i), rows[lo:hi], tfs[lo:hi]))
    return out


def _row_cjk_share(post: _Postings, lens: np.ndarray) -> np.ndarray:
    """``ranking.cjk_share`` of every row of ``post`` (of lengths ``lens``): the counts of
    its CJK character terms, summed from the postings of those terms only (the sorted
    character table is looked up in the sorted terms; cached by ``Index._reach`` until the
    postings change)."""
    n = len(lens)
    terms, ptr = np.asarray(post.terms), np.asarray(post.ptr)
    if not n or not len(terms):
        return np.zeros(n, np.float32)
    table = cjk_unigram_hashes()
    pos = np.searchsorted(terms, table)
    ok = pos < len(terms)
    ok[ok] = terms[pos[ok]] == table[ok]
    k = pos[ok]   # the terms that are CJK characters (ascending, distinct)
    lo, cnt = ptr[k], ptr[k + 1] - ptr[k]
    if post.check is not None:
        for a, c in zip(lo.tolist(), cnt.tolist()):
            post.check(a, a + c)
    at = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()))
    uni = np.bincount(np.asarray(post.rows)[at], weights=np.asarray(post.tfs)[at],
                      minlength=n)[:n]
    return ranking.cjk_share(uni, np.asarray(lens, np.float64))


def _matvec(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``m @ v`` without BLAS for a matrix up to _BLAS_FROM elements: BLAS wakes its thread
    pool for a product that one core does faster (dense top-10 at 10k units: 18 ms with
    OpenBLAS threads, 9 ms without, fresh processes, interleaved)."""
    if m.size <= _BLAS_FROM:
        return np.einsum("ij,j->i", m, v)
    return m @ v
