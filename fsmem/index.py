"""The derived search index of L2: dense unit vectors and BM25 postings.

The unit directories are the only source of truth. ``.fsmem/index/CURRENT`` names the current
snapshot, a generation directory of ``.npy`` arrays and a ``meta.json`` with their checksums
(written whole, then switched to by one rename; never fsynced: it is derived), holding, per unit,
its id, the identity of its manifest (inode, size, mtime), its dense vector and its BM25 term
counts. On open the snapshot is checked against one listing of ``documents/``: units
added, removed or replaced with ``cp -a``, ``mv`` or ``rm -r`` are reconciled one by one,
without a rebuild. A missing, truncated or corrupt snapshot is rebuilt from the directories.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import blake3
import msgspec
import numpy as np

from .embed import HashEmbedder
from .errors import FsmemError
from .unit import block_path, read_manifest, read_vectors
from .timestamps import Timestamp

if TYPE_CHECKING:
    from .reader import Reader

__all__ = ["Index", "IndexEntry", "RANKERS", "DEFAULT_RANKER"]

log = logging.getLogger(__name__)

INDEX_VERSION = 2
RANKERS = ("bm25", "dense", "fusion", "rrf")
DEFAULT_RANKER = "bm25"     # the best on fixtures/retrieval (docs/BENCHMARKS.md)
DEFAULT_WEIGHT = 0.2    # weight of the dense signal in "fusion" (best with all-MiniLM-L6-v2)
K1, B = 1.2, 0.75
_LEXICAL = HashEmbedder()
_SAVE_EVERY = 64
_ARRAYS = ("inos", "dense", "doclen", "created", "nevents", "p_terms", "p_ptr", "p_rows",
           "p_tfs")
_PENDING_MAX = 256
_GEN_GRACE_S = 60.0


@dataclass
class IndexEntry:
    """What the index keeps of one unit (everything derivable from its directory)."""

    unit_id: str
    ino: int
    vector: np.ndarray            # float32 [dim], zero if the unit has no comparable vectors
    terms: np.ndarray             # uint64 unique term hashes
    tfs: np.ndarray               # float32 counts, aligned with terms
    summary: str = ""
    legacy_file: str = ""         # set for a HomeAgent JSON document
    created_ns: int = 0
    created_off: int = 0
    events: int = 0


class _Meta(msgspec.Struct):
    version: int
    embedder: str
    dim: int
    ids: list[str]
    summaries: list[str]
    legacy: dict[str, str] = {}   # unit id -> legacy JSON file name in documents/
    digests: dict[str, str] = {}  # array name -> BLAKE3 of its .npy file


@dataclass
class _Postings:
    """CSR postings by term: terms sorted, rows[ptr[i]:ptr[i+1]] hold term i."""

    terms: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    tfs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))


class Index:
    """The in-memory index of ``documents/`` for one Memory, kept in step with the directory."""

    def __init__(self, mem: "Reader") -> None:
        self.mem = mem
        self.layout = mem.layout
        self.writable = mem.writable   # a reader's index lives in memory only
        self.dir = mem.layout.index_dir
        self.dim = mem.embedder.dim
        self.fingerprint = mem.embedder.fingerprint
        self._clear()
        self._dir_mtime = -1
        self._unsaved = 0

    def _clear(self) -> None:
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.inos = np.zeros(0, np.int64)
        self.alive = np.zeros(0, bool)
        self.dense = np.zeros((0, self.dim), np.float32)
        self.doclen = np.zeros(0, np.float32)
        self.created = np.zeros((0, 3), np.int64)   # seconds, nanos, UTC offset
        self.nevents = np.zeros(0, np.int32)
        self.summaries: list[str] = []
        self.legacy: dict[str, str] = {}
        self.post = _Postings()
        self.pending: dict[str, IndexEntry] = {}   # added since the arrays were built

    # -- lifecycle ----------------------------------------------------------------------
    def load(self) -> bool:
        """Map the current snapshot; False (and an empty index) if it is missing or unusable.

        Arrays are memory-mapped read-only (open costs the checksum pass, not a copy); each
        file's BLAKE3 is checked against ``meta.json`` so a damaged snapshot is never used.
        A generation replaced (and removed) while it was opened is retried once."""
        for _ in range(3):
            try:
                return self._load()
            except _Replaced:
                continue
        return False

    def _load(self) -> bool:
        self._clear()
        gen_name = ""
        try:
            with open(os.path.join(self.dir, "CURRENT"), encoding="ascii") as fh:
                gen_name = fh.read().strip()
                gen = os.path.join(self.dir, gen_name)
            with open(os.path.join(gen, "meta.json"), "rb") as fh:
                meta = msgspec.json.decode(fh.read(), type=_Meta)
            if meta.version != INDEX_VERSION or meta.embedder != self.fingerprint \
                    or meta.dim != self.dim:
                return False
            arrays = {}
            for name in _ARRAYS:
                path = os.path.join(gen, f"{name}.npy")
                if _file_digest(path) != meta.digests.get(name):
                    raise ValueError(f"{path}: checksum mismatch")
                arrays[name] = np.load(path, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            if gen_name and _current(self.dir) not in ("", gen_name):
                raise _Replaced() from None
            return False
        except (OSError, ValueError, KeyError, msgspec.DecodeError, EOFError) as exc:
            log.warning("%s: unusable index (%s); rebuilding from the directories", self.dir, exc)
            return False
        n = len(meta.ids)
        if not (arrays["dense"].shape == (n, self.dim) and len(arrays["inos"]) == n
                and len(arrays["doclen"]) == n and arrays["created"].shape == (n, 3)
                and len(arrays["p_ptr"]) == len(arrays["p_terms"]) + 1
                and len(arrays["p_rows"]) == len(arrays["p_tfs"])):
            log.warning("%s: inconsistent index arrays; rebuilding", self.dir)
            return False
        self.ids, self.summaries, self.legacy = meta.ids, meta.summaries, meta.legacy
        self.row_of = {u: i for i, u in enumerate(self.ids)}
        self.inos, self.dense, self.doclen = arrays["inos"], arrays["dense"], arrays["doclen"]
        self.created, self.nevents = arrays["created"], arrays["nevents"]
        self.alive = np.ones(n, bool)
        self.post = _Postings(arrays["p_terms"], arrays["p_ptr"], arrays["p_rows"],
                              arrays["p_tfs"])
        return True

    def save(self) -> None:
        """Write a compacted snapshot as a new generation directory of ``.npy`` files plus
        ``meta.json`` (with each file's BLAKE3), then switch ``CURRENT`` to it by one rename.
        Older generations are removed; a reader that mapped one keeps its (unlinked) files."""
        self._compact()
        gen_name = f"gen-{time.time_ns()}-{uuid.uuid4().hex[:6]}"
        gen = os.path.join(self.dir, gen_name)
        os.makedirs(gen)
        arrays = {"inos": self.inos, "dense": self.dense, "doclen": self.doclen,
                  "created": self.created, "nevents": self.nevents, "p_terms": self.post.terms,
                  "p_ptr": self.post.ptr, "p_rows": self.post.rows, "p_tfs": self.post.tfs}
        digests = {}
        for name, arr in arrays.items():
            path = os.path.join(gen, f"{name}.npy")
            np.save(path, np.ascontiguousarray(arr), allow_pickle=False)
            digests[name] = _file_digest(path)
        meta = _Meta(version=INDEX_VERSION, embedder=self.fingerprint, dim=self.dim,
                     ids=self.ids, summaries=self.summaries, legacy=self.legacy, digests=digests)
        with open(os.path.join(gen, "meta.json"), "wb") as fh:
            fh.write(msgspec.json.encode(meta))
        tmp = os.path.join(self.dir, f"CURRENT.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(gen_name)
        os.replace(tmp, os.path.join(self.dir, "CURRENT"))
        # Older generations go after a grace period: a reader may be about to map one.
        for old in os.listdir(self.dir):
            if old.startswith("gen-") and old != gen_name and _age_s(old) > _GEN_GRACE_S:
                shutil.rmtree(os.path.join(self.dir, old), ignore_errors=True)
        self._unsaved = 0

    def sync(self, *, force: bool = False) -> dict[str, int]:
        """Bring the index in step with ``documents/``: cheap when the directory's mtime is
        unchanged; otherwise one listing (names and inodes) and per-unit add/remove."""
        base = self.layout.layer_dir("documents")
        mtime = os.stat(base).st_mtime_ns
        if mtime == self._dir_mtime and not force:
            return {"added": 0, "removed": 0}
        listing, legacy_files = self._listing()
        removed = [u for u, r in self.row_of.items() if self.alive[r]
                   and listing.get(u) != self.inos[r]]
        removed += [u for u, e in self.pending.items() if listing.get(u) != e.ino]
        for u in removed:
            self.remove(u)
        known = {u for u, r in self.row_of.items() if self.alive[r]} | set(self.pending)
        added = sum(self._add_listed(name, ino, legacy_files)
                    for name, ino in listing.items() if name not in known)
        self._dir_mtime = mtime
        if added or removed:
            self._unsaved += added + len(removed)
            if self.writable and self._unsaved >= max(_SAVE_EVERY, len(self.ids) // 20):
                with self.mem.store.locked():
                    self.save()
        return {"added": added, "removed": len(removed)}

    def rebuild(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Rebuild from the directories alone (``fsmem reindex``); returns the unit count."""
        self._clear()
        base = self.layout.layer_dir("documents")
        listing, legacy_files = self._listing()
        for i, (name, ino) in enumerate(sorted(listing.items())):
            self._add_listed(name, ino, legacy_files)
            if progress:
                progress(i + 1, len(listing))
        if self.writable:
            with self.mem.store.locked():
                self.save()
        else:
            self._compact()
        self._dir_mtime = os.stat(base).st_mtime_ns
        return len(self.ids)

    def _listing(self) -> tuple[dict[str, int], dict[str, str]]:
        """{id: inode} of unit directories and legacy JSON files in documents/, and
        {id: file name} for the legacy ones (a JSON whose unit already exists is left out:
        it is a leftover of an interrupted legacy recall)."""
        from .legacy import legacy_id
        base = self.layout.layer_dir("documents")
        listing: dict[str, int] = {}
        json_files: list[tuple[str, int]] = []
        with os.scandir(base) as it:   # one pass: unit directories and legacy JSON files
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    if _valid_name(e.name):
                        ident = unit_ident(e.path)
                        if ident is not None:
                            listing[e.name] = ident
                elif e.name.endswith(".json") and e.is_file(follow_symlinks=False):
                    json_files.append((e.name, _ident(e.stat(follow_symlinks=False))))
        legacy_files = {}
        for fname, ino in sorted(json_files):
            uid = legacy_id(fname)
            if uid in listing or any(os.path.isdir(self.layout.unit_dir(layer, uid))
                                     for layer in ("context", "stablemem")):
                continue
            listing[uid] = ino
            legacy_files[uid] = fname
        return listing, legacy_files

    # -- entries ------------------------------------------------------------------------
    def _add_listed(self, name: str, ino: int, legacy_files: dict[str, str]) -> bool:
        """Index one entry of a ``_listing``: a legacy JSON file or a unit directory."""
        if name in legacy_files:
            return self.add_legacy(legacy_files[name], ino)
        return self.add_unit(name, ino)

    def add_legacy(self, filename: str, ino: int) -> bool:
        """Index a HomeAgent JSON document (BM25 over its text; its own dense vector belongs
        to another space and is never compared)."""
        from .legacy import legacy_id, legacy_texts, read_legacy, report_unreadable
        path = os.path.join(self.layout.layer_dir("documents"), filename)
        try:
            doc = read_legacy(path)
        except (FsmemError, OSError, ValueError) as exc:
            report_unreadable(path, f"index: skipping legacy {path}: {exc}")  # once per store
            return False
        texts = [self.mem.plugins.source_text(doc.source, t) for t in legacy_texts(doc)]
        terms, tfs = term_counts(texts)
        self.add(IndexEntry(unit_id=legacy_id(filename), ino=ino,
                            vector=np.zeros(self.dim, np.float32), terms=terms, tfs=tfs,
                            summary=doc.summary, legacy_file=filename,
                            created_ns=doc.created_at.ns, created_off=doc.created_at.offset,
                            events=1))
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

    def add_unit(self, unit_id: str, ino: int | None = None) -> bool:
        """Index one unit of ``documents/`` from its directory; False if it is unreadable."""
        path = self.layout.unit_dir("documents", unit_id)
        try:
            if ino is None:
                ino = unit_ident(path)
                if ino is None:
                    raise FileNotFoundError(f"{path}: no manifest")
            entry = self.entry_for(path, unit_id, ino)
        except (FsmemError, OSError, ValueError) as exc:
            log.warning("index: skipping %s: %s", path, exc)
            return False
        self.add(entry)
        return True

    def entry_for(self, path: str, unit_id: str, ino: int) -> IndexEntry:
        """Dense vector from the unit's stored vectors (never re-embedded); BM25 terms from
        its compute-layer text (cleaners applied, no_memory left out) and media names."""
        manifest = read_manifest(path)
        vec = np.zeros(self.dim, np.float32)
        if manifest.vectors is not None and manifest.vectors.embedder == self.fingerprint:
            _, mat = read_vectors(path, manifest)  # type: ignore[misc]
            v = mat.sum(axis=0)
            n = float(np.linalg.norm(v))
            if n > 0:
                vec = (v / n).astype(np.float32)
        texts = unit_texts(self.mem, path, manifest)
        terms, tfs = term_counts(texts)
        return IndexEntry(unit_id=unit_id, ino=ino, vector=vec, terms=terms, tfs=tfs,
                          summary=manifest.summary, created_ns=manifest.created_at.ns,
                          created_off=manifest.created_at.offset, events=len(manifest.events))

    def add(self, entry: IndexEntry) -> None:
        """Queue an entry; it is searchable at once and folded into the arrays in batches."""
        self.remove(entry.unit_id)
        self.pending[entry.unit_id] = entry
        # Fold in geometrically (a quarter of the size), so bulk adds stay O(n log n).
        if len(self.pending) > max(_PENDING_MAX, len(self.ids) // 4):
            self._compact()

    def remove(self, unit_id: str) -> None:
        self.pending.pop(unit_id, None)
        row = self.row_of.get(unit_id)
        if row is not None:
            self.alive[row] = False

    def __len__(self) -> int:
        return int(self.alive.sum()) + len(self.pending)

    def _compact(self) -> None:
        """Fold pending entries into the arrays and postings; drop removed rows."""
        keep = np.flatnonzero(self.alive)
        if len(keep) == len(self.ids) and not self.pending:
            return
        new = list(self.pending.values())
        remap = np.full(len(self.ids), -1, np.int64)
        remap[keep] = np.arange(len(keep))
        rows = remap[self.post.rows.astype(np.int64)]
        terms, tfs = _expand_terms(self.post), self.post.tfs
        live = rows >= 0
        rows_parts, terms_parts, tfs_parts = [rows[live]], [terms[live]], [tfs[live]]
        for i, e in enumerate(new):
            rows_parts.append(np.full(len(e.terms), len(keep) + i, np.int64))
            terms_parts.append(e.terms)
            tfs_parts.append(e.tfs)
        rows, terms, tfs = (np.concatenate(rows_parts), np.concatenate(terms_parts),
                            np.concatenate(tfs_parts))
        order = np.lexsort((rows, terms))
        rows, terms, tfs = rows[order], terms[order], tfs[order]
        uniq, starts = np.unique(terms, return_index=True)
        self.post = _Postings(uniq, np.append(starts, len(terms)).astype(np.int64),
                              rows.astype(np.int32), tfs.astype(np.float32))
        kept_ids = {self.ids[i] for i in keep}
        self.legacy = {u: f for u, f in self.legacy.items() if u in kept_ids}
        self.legacy.update({e.unit_id: e.legacy_file for e in new if e.legacy_file})
        self.ids = [self.ids[i] for i in keep] + [e.unit_id for e in new]
        self.summaries = [self.summaries[i] for i in keep] + [e.summary for e in new]
        self.row_of = {u: i for i, u in enumerate(self.ids)}
        self.inos = np.concatenate([self.inos[keep], np.array([e.ino for e in new], np.int64)])
        self.dense = np.vstack([self.dense[keep]] + [e.vector[None, :] for e in new]) \
            if new else self.dense[keep]
        self.doclen = np.concatenate([self.doclen[keep],
                                      np.array([e.tfs.sum() for e in new], np.float32)])
        self.created = np.concatenate([self.created[keep], np.array(
            [[*divmod(e.created_ns, 1_000_000_000), e.created_off] for e in new],
            np.int64).reshape(-1, 3)])   # seconds + nanos: Go's years 1..9999 fit an int64
        self.nevents = np.concatenate([self.nevents[keep],
                                       np.array([e.events for e in new], np.int32)])
        self.alive = np.ones(len(self.ids), bool)
        self.pending = {}

    # -- search -------------------------------------------------------------------------
    def search(self, text: str, top_k: int, ranker: str = DEFAULT_RANKER, *,
               weight: float = DEFAULT_WEIGHT) -> list[tuple[str, float]]:
        """The ``top_k`` live units for ``text`` as (unit id, score), best first."""
        if ranker not in RANKERS:
            raise ValueError(f"ranker must be one of {', '.join(RANKERS)}")
        if top_k <= 0 or not text.strip() or not len(self):
            return []
        entries = list(self.pending.values())
        ids = self.ids + [e.unit_id for e in entries]
        if ranker == "bm25":
            scores = self.bm25(text, entries)
        elif ranker == "dense":
            scores = self.dense_scores(text, entries)
        else:
            scores = fuse(self.bm25(text, entries), self.dense_scores(text, entries), ranker,
                          weight=weight)
        alive = np.concatenate([self.alive, np.ones(len(entries), bool)])
        scores = np.where(alive, scores, -np.inf)
        k = min(top_k, int(np.count_nonzero(scores > 0)))
        if k <= 0:
            return []
        # Candidates at or above the k-th score (ties included), then a deterministic order:
        # score (to 6 decimals, so float summation order never decides) and unit id.
        kth = np.partition(-scores, k - 1)[k - 1]
        cand = np.flatnonzero(-scores <= kth + 1e-6)
        best = sorted(cand, key=lambda i: (-round(float(scores[i]), 6), ids[i]))[:k]
        return [(ids[i], float(scores[i])) for i in best]

    def dense_scores(self, text: str, entries: list[IndexEntry] = ()) -> np.ndarray:
        q = self.mem.embedder.embed([text])[0].astype(np.float32)
        base = self.dense @ q
        if not entries:
            return base
        return np.concatenate([base, np.array([e.vector @ q for e in entries], np.float32)])

    def bm25(self, text: str, entries: list[IndexEntry] = ()) -> np.ndarray:
        """Okapi BM25 (k1 1.2, b 0.75) over the feature hashes of ``text``."""
        n_base = len(self.ids)
        scores = np.zeros(n_base + len(entries), np.float32)
        q_terms = np.unique(lexical_features([text])[1])
        if not len(q_terms):
            return scores
        # Base postings of the query terms.
        pos = np.searchsorted(self.post.terms, q_terms)
        ok = pos < len(self.post.terms)
        ok[ok] = self.post.terms[pos[ok]] == q_terms[ok]
        starts = np.where(ok, self.post.ptr[np.minimum(pos, len(self.post.ptr) - 1)], 0)
        ends = np.where(ok, self.post.ptr[np.minimum(pos + 1, len(self.post.ptr) - 1)], 0)
        lens = ends - starts
        idx = np.repeat(starts - np.cumsum(np.concatenate(([0], lens[:-1]))), lens) \
            + np.arange(lens.sum())
        rows, tf = self.post.rows[idx].astype(np.int64), self.post.tfs[idx]
        live = self.alive[rows]
        df = np.bincount(np.repeat(np.arange(len(q_terms)), lens)[live],
                         minlength=len(q_terms)).astype(np.float32)
        # Pending entries: a small dense tf matrix [entries, query terms].
        ptf = np.zeros((len(entries), len(q_terms)), np.float32)
        for i, e in enumerate(entries):
            j = np.searchsorted(e.terms, q_terms)
            hit = j < len(e.terms)
            hit[hit] = e.terms[j[hit]] == q_terms[hit]
            ptf[i, hit] = e.tfs[j[hit]]
        df += (ptf > 0).sum(axis=0)
        n_live = int(self.alive.sum()) + len(entries)
        dl_p = np.array([e.tfs.sum() for e in entries], np.float32)
        total = float(self.doclen[self.alive].sum() + dl_p.sum())
        avgdl = max(total / max(n_live, 1), 1e-9)
        idf = np.log1p((n_live - df + 0.5) / (df + 0.5))
        w = np.repeat(idf, lens)[live]
        rows, tf = rows[live], tf[live]
        denom = tf + K1 * (1 - B + B * self.doclen[rows] / avgdl)
        np.add.at(scores, rows, w * tf * (K1 + 1) / denom)
        if entries:
            denom_p = ptf + K1 * (1 - B + B * dl_p[:, None] / avgdl)
            scores[n_base:] = (idf[None, :] * ptf * (K1 + 1) / denom_p).sum(axis=1)
        return scores


def fuse(bm25: np.ndarray, dense: np.ndarray, how: str, *, weight: float = 0.5,
         rrf_k: int = 60) -> np.ndarray:
    """Combine the two signals: ``fusion`` = weighted sum of max-normalised scores;
    ``rrf`` = reciprocal-rank fusion over each signal's positive scores."""
    if how == "rrf":
        out = np.zeros_like(bm25)
        for s in (bm25, dense):
            pos = np.flatnonzero(s > 0)
            order = pos[np.argsort(-s[pos], kind="stable")]
            out[order] += 1.0 / (rrf_k + np.arange(1, len(order) + 1))
        return out
    b = bm25 / bm25.max() if bm25.size and bm25.max() > 0 else bm25
    d = np.clip(dense, 0, None)
    d = d / d.max() if d.size and d.max() > 0 else d
    return (1 - weight) * b + weight * d


class _Replaced(Exception):
    """The generation named by CURRENT was replaced while it was being opened."""


def _current(index_dir: str) -> str:
    try:
        with open(os.path.join(index_dir, "CURRENT"), encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _ident(st: os.stat_result) -> int:
    """What identifies one version of a file: inode, size and mtime (an ``rm -r`` + ``cp -a``
    that reuses the inode still differs in mtime or size; a hard link, as in a snapshot, is
    the same file). Folded into one int64."""
    h = blake3.blake3(f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}".encode()).digest(8)
    return int.from_bytes(h, "little", signed=True)


def unit_ident(path: str) -> int | None:
    """The identity of a unit directory: that of its manifest (None if it has none)."""
    try:
        return _ident(os.stat(os.path.join(path, "manifest.json"), follow_symlinks=False))
    except OSError:
        return None


def _age_s(gen_name: str) -> float:
    stamp = gen_name.split("-")[1] if gen_name.count("-") >= 2 else ""
    return time.time() - int(stamp) / 1e9 if stamp.isdigit() else float("inf")


def _file_digest(path: str) -> str:
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    hasher.update_mmap(path)
    return hasher.hexdigest()


def _expand_terms(post: _Postings) -> np.ndarray:
    return np.repeat(post.terms, np.diff(post.ptr))


def lexical_features(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """BM25's tokens, whatever the embedder: the hashed features of ``fsmem.embed.tokenize``
    (CJK unigrams and bigrams, Latin words and word bigrams)."""
    return _LEXICAL.features(texts)


def term_counts(texts: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    """Unique feature hashes of ``texts`` and their counts (the BM25 document)."""
    texts = [t for t in texts if t]
    if not texts:
        return np.zeros(0, np.uint64), np.zeros(0, np.float32)
    _, feats = lexical_features(texts)
    terms, counts = np.unique(feats, return_counts=True)
    return terms, counts.astype(np.float32)


def unit_texts(mem: "Reader", path: str, manifest) -> list[str]:
    """The compute-layer texts of a unit: its summary and every event's (``event_texts``)."""
    out = [manifest.summary] if manifest.summary else []
    for ev in manifest.events:
        out += event_texts(mem, path, ev)
    return out


def event_texts(mem: "Reader", path: str, ev) -> list[str]:
    """One event's text blocks through the plugin declarations (cleaners applied, no_memory
    left out), plus the names and MIME types of its media blocks."""
    from .blocks import read_block
    out = []
    tool_of = {tr.block: tr.name for tr in ev.tool_results}
    for ref in ev.blocks:
        if ref.modality != "text":
            out.append(f"{ref.name} {ref.mime}".strip())
            continue
        text = read_block(block_path(path, ref), ref.digest).decode("utf-8", "replace")
        if ref.role == "tool_output":
            out.append(mem.plugins.tool_text(ev.source, tool_of.get(ref.digest, ""), text))
        else:
            out.append(mem.plugins.source_text(ev.source, text))
    return out


def bm25_scores(docs: list[tuple[np.ndarray, np.ndarray]], query: str) -> np.ndarray:
    """BM25 of ``query`` over a small in-memory collection of (terms, tfs) documents."""
    scores = np.zeros(len(docs), np.float32)
    if not docs or not query.strip():
        return scores
    q_terms = np.unique(lexical_features([query])[1])
    tf = np.zeros((len(docs), len(q_terms)), np.float32)
    for i, (terms, tfs) in enumerate(docs):
        j = np.searchsorted(terms, q_terms)
        hit = j < len(terms)
        hit[hit] = terms[j[hit]] == q_terms[hit]
        tf[i, hit] = tfs[j[hit]]
    dl = np.array([t.sum() for _, t in docs], np.float32)
    avgdl = max(float(dl.mean()), 1e-9)
    df = (tf > 0).sum(axis=0)
    idf = np.log1p((len(docs) - df + 0.5) / (df + 0.5))
    return (idf[None, :] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl[:, None] / avgdl))).sum(1)


def _valid_name(name: str) -> bool:
    from .model import NAME_RE
    return bool(NAME_RE.match(name))


def progress_bar(done: int, total: int) -> None:
    """A one-line progress bar on stderr (for ``fsmem reindex``)."""
    width = 40
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\rreindex [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()

