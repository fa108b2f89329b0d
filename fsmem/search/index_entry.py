"""What the index keeps of one unit, and how it is worked out: the entry (event rows, term
counts, vectors), the unit's identity on disk, its compute-layer texts, and BM25 over a few
in-memory documents (L1). Split from ``fsmem.search.index`` (the arrays, sync and search)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import blake3
import numpy as np

from fsmem.format import blocks as blockfiles  # module attribute: tests count its reads
from fsmem.format.errors import FsmemError
from fsmem.format.model import NAME_RE
from fsmem.format.unit import MANIFEST, block_path, read_manifest_key
from fsmem.search import ranking
from fsmem.search.analyze import is_pair, term_hashes, term_hashes_rows, unasked
from fsmem.search.index_files import _Postings

if TYPE_CHECKING:
    from fsmem.format.plugins import Plugins

__all__ = ["IndexEntry", "unit_ident", "clamp_ns", "term_counts", "term_rows", "add_row_terms",
           "event_texts", "bm25_scores", "fold_postings", "dir_names", "whole_second"]

_I64 = (-(1 << 63), (1 << 63) - 1)
K1, B = ranking.K1, ranking.B


@dataclass
class IndexEntry:
    """What the index keeps of one unit (everything derivable from its directory)."""

    unit_id: str
    ino: int
    vector: np.ndarray            # float32 [rows, dim], per event row; zero rows if the unit
                                  # has no comparable vectors (or 1-d [dim]: one row)
    terms: np.ndarray             # uint64 term hashes, unique within each row, rows concatenated
    tfs: np.ndarray               # float32 counts, aligned with terms
    summary: str = ""
    legacy_file: str = ""         # set for a HomeAgent JSON document
    created_ns: int = 0
    created_off: int = 0
    events: int = 0
    rows: "_Rows | None" = None   # the event rows; None: one pseudo row holding every term
    mkey: int = 0                 # manifest_key of the unit indexed (0: none, e.g. legacy)
    agent: str = ""               # format 4: whose unit ("" = the default agent)
    private: bool = False         # format 4: seen by its agent only
    supersedes: str = ""          # the unit this one updates (meta "supersedes"): hidden

    def __post_init__(self) -> None:
        if self.rows is None:
            self.rows = _Rows.single(len(self.terms), self.created_ns)
        if self.vector.ndim == 1:
            self.vector = np.repeat(self.vector[None, :], len(self.rows.ids), axis=0)


@dataclass
class _Rows:
    """The event rows of one entry: row i holds terms[ptr[i]:ptr[i+1]] of its IndexEntry."""

    ids: list[str]                # event id; "" for a summary or legacy row
    ptr: np.ndarray               # int64 [n + 1]
    time: np.ndarray              # int64 ns
    keys: list[str]               # conversation key (ranking.conversation_key)
    kind: np.ndarray              # int8 ranking.KIND_*

    @classmethod
    def single(cls, n_terms: int, time_ns: int) -> "_Rows":
        return cls([""], np.array([0, n_terms], np.int64), np.array([clamp_ns(time_ns)], np.int64),
                   [""], np.array([ranking.KIND_PSEUDO], np.int8))


_SECOND = 1_000_000_000


def whole_second(ns: int) -> bool:
    """A time with no sub-second part: from a filesystem that keeps whole seconds (sshfs
    reports them so), where two versions written within one second look alike."""
    return ns % _SECOND == 0


def _ident(st: os.stat_result, dir_st: os.stat_result | None = None, mkey: int = 0) -> int:
    """What identifies one version of a file: inode, size and mtime (a hard link, as in a
    snapshot, is the same file), plus for a unit its directory's inode and ctime, and
    ``mkey`` (the manifest key) where the times are whole seconds. ``cp -a`` preserves mtime
    and ext4 reuses a freed inode at once, so inode+size+mtime can collide after ``rm -r`` +
    ``cp -a``; a directory's ctime cannot be set from user space and is fresh whenever the
    directory is created or renamed, unless the filesystem keeps whole seconds only. Never
    the device: two mounts of one shared volume (JuiceFS) are two devices for one unit.
    Folded into one int64."""
    text = f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
    if dir_st is not None:
        text += f":{dir_st.st_ino}:{dir_st.st_ctime_ns}"
    if mkey:
        text += f":{mkey}"
    h = blake3.blake3(text.encode()).digest(8)
    return int.from_bytes(h, "little", signed=True)


def unit_ident(path: str) -> int | None:
    """The identity of a unit directory: its own and its manifest's (None if it has none, or
    it cannot be read). Where the manifest's mtime or the directory's ctime is a whole second
    the times cannot tell two versions apart, so the manifest's key (BLAKE3 of its bytes, read
    through the safe-open helper) is part of it."""
    try:
        dir_st = os.stat(path, follow_symlinks=False)
        st = os.stat(os.path.join(path, MANIFEST), follow_symlinks=False)
        mkey = read_manifest_key(path) \
            if whole_second(st.st_mtime_ns) or whole_second(dir_st.st_ctime_ns) else 0
        return _ident(st, dir_st, mkey)
    except (OSError, FsmemError):
        return None


def clamp_ns(ns: int) -> int:
    """A time in ns as an int64 (Go's year 1 and year 9999 do not fit): only for ordering
    and neighbour windows in the derived index; the exact time stays in the manifest."""
    return min(max(ns, _I64[0]), _I64[1])


def _row_lengths(e: IndexEntry) -> np.ndarray:
    """BM25 document length of each event row of an entry: its words (pair terms left out)."""
    n = len(e.rows.ids)
    if n == 1:   # a legacy document or a one-row unit: the sum (of integer counts: exact)
        return np.array([e.tfs[~is_pair(e.terms)].sum(dtype=np.float64)], np.float32)
    words = np.where(is_pair(e.terms), np.float32(0), e.tfs)
    return np.bincount(np.repeat(np.arange(n), np.diff(e.rows.ptr)), weights=words,
                       minlength=n).astype(np.float32)


def term_counts(texts: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    """Unique BM25 term hashes of ``texts`` (``fsmem.search.analyze``) and their counts."""
    texts = [t for t in texts if t]
    feats = term_hashes(texts) if texts else np.zeros(0, np.uint64)
    if not len(feats):
        return np.zeros(0, np.uint64), np.zeros(0, np.float32)
    # np.unique(feats, return_counts=True), a third of its time (numpy 2's unique is
    # several calls deep): one sort in place (feats is ours), the first of each run
    feats.sort()
    first = np.empty(len(feats), bool)
    first[0] = True
    np.not_equal(feats[1:], feats[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return feats[starts], np.diff(np.append(starts, len(feats))).astype(np.float32)


def term_rows(rows: list[list[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``term_counts`` of each row of texts in one pass: (terms, tfs, ptr), row i's unique
    term hashes (ascending) and counts being terms[ptr[i]:ptr[i+1]] (one sort for a whole
    unit instead of one ``np.unique`` per event)."""
    hashes, row = term_hashes_rows([[t for t in texts if t] for texts in rows])
    if not len(hashes):
        return np.zeros(0, np.uint64), np.zeros(0, np.float32), np.zeros(len(rows) + 1,
                                                                          np.int64)
    order = np.lexsort((hashes, row))
    hashes, row = hashes[order], row[order]
    first = np.empty(len(hashes), bool)
    first[0] = True
    np.not_equal(hashes[1:], hashes[:-1], out=first[1:])
    first[1:] |= row[1:] != row[:-1]
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, len(hashes))).astype(np.float32)
    ptr = np.searchsorted(row[starts], np.arange(len(rows) + 1)).astype(np.int64)
    return hashes[starts], counts, ptr


def add_row_terms(terms: np.ndarray, tfs: np.ndarray, ptr: np.ndarray,
                  extra: "list[np.ndarray | None]") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``term_rows``' arrays with ``extra[i]`` (unique hashes, count 1 each; None: none) added
    to row i, each row's terms still ascending and unique (an extra term a row holds already
    keeps its count)."""
    rows = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    add = [(i, x) for i, x in enumerate(extra) if x is not None and len(x)]
    if not add:
        return terms, tfs, ptr
    x_terms = np.concatenate([x for _i, x in add]).astype(np.uint64)
    x_rows = np.concatenate([np.full(len(x), i, np.int64) for i, x in add])
    all_terms = np.concatenate([terms, x_terms])
    all_rows = np.concatenate([rows, x_rows])
    all_tfs = np.concatenate([tfs, np.ones(len(x_terms), np.float32)])
    order = np.lexsort((np.arange(len(all_terms)), all_terms, all_rows))
    all_terms, all_rows, all_tfs = all_terms[order], all_rows[order], all_tfs[order]
    keep = np.ones(len(all_terms), bool)
    keep[1:] = (all_terms[1:] != all_terms[:-1]) | (all_rows[1:] != all_rows[:-1])
    all_terms, all_rows, all_tfs = all_terms[keep], all_rows[keep], all_tfs[keep]
    new_ptr = np.searchsorted(all_rows, np.arange(len(ptr))).astype(np.int64)
    return all_terms, all_tfs.astype(np.float32), new_ptr


def event_texts(plugins: "Plugins", path: str, ev,
                text_of: "dict[str, str] | None" = None) -> list[str]:
    """One event's text blocks through the plugin declarations (cleaners applied, no_memory
    left out), plus the names and MIME types of its media blocks. ``text_of`` (digest ->
    text) holds blocks this process just wrote: they are not read back."""
    out = []
    tool_of = {tr.block: tr.name for tr in ev.tool_results}
    for ref in ev.blocks:
        if ref.modality != "text":
            out.append(f"{ref.name} {ref.mime}".strip())
            continue
        text = text_of.get(ref.digest) if text_of else None
        if text is None:
            data = blockfiles.read_block(block_path(path, ref), ref.digest)
            text = data.decode("utf-8", "replace")
        if ref.role == "tool_output":
            out.append(plugins.tool_text(ev.source, tool_of.get(ref.digest, ""), text))
        else:
            out.append(plugins.source_text(ev.source, text))
    return out


def query_terms(query: str) -> np.ndarray:
    """The unique hashed terms ``query`` is scored by: its Chinese interrogative words left
    out (``analyze.unasked``), as every lexical scorer of a query takes it."""
    return term_counts([unasked(query)])[0]


def bm25_scores(docs: list[tuple[np.ndarray, np.ndarray]], query: str) -> np.ndarray:
    """BM25 of ``query`` over a small in-memory collection of (terms, tfs) documents."""
    scores = np.zeros(len(docs), np.float32)
    if not docs or not query.strip():
        return scores
    q_terms = query_terms(query)
    if not len(q_terms):
        return scores
    # every document's terms at once (terms are unique within a document): no per-doc loop
    terms = np.concatenate([t for t, _ in docs])
    tfs = np.concatenate([f for _, f in docs]).astype(np.float32, copy=False)
    doc = np.repeat(np.arange(len(docs)), [len(t) for t, _ in docs])
    j = np.minimum(np.searchsorted(q_terms, terms), len(q_terms) - 1)
    hit = q_terms[j] == terms
    tf = np.zeros((len(docs), len(q_terms)), np.float32)
    tf[doc[hit], j[hit]] = tfs[hit]
    dl = np.bincount(doc, weights=np.where(is_pair(terms), 0, tfs),
                     minlength=len(docs)).astype(np.float32)   # words: pairs left out
    avgdl = max(float(dl.mean()), 1e-9)
    df = (tf > 0).sum(axis=0)
    idf = np.log1p((len(docs) - df + 0.5) / (df + 0.5))
    idf[is_pair(q_terms)] *= ranking.PAIR_WEIGHT
    return (idf[None, :] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl[:, None] / avgdl))).sum(1)


def dir_names(path: str) -> set[str] | None:
    """The names in a directory (none if it does not exist); None when it cannot be listed
    (then only a lookup of each name can tell)."""
    try:
        return set(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return set()
    except OSError:
        return None


def _valid_name(name: str) -> bool:
    return bool(NAME_RE.match(name))


def fold_postings(post: _Postings, remap: np.ndarray, base: int,
                   new: list[IndexEntry]) -> _Postings:
    """The postings of the kept event rows (``remap``: old row -> new row, -1 dropped) plus
    those of ``new`` (rows from ``base`` on), in (term, row) order. The kept postings are in
    that order already and every new row is above every kept one, so only the new postings
    are sorted (stably, by term: rows ascend within an entry, each term once per row) and
    then merged in after the kept ones of the same term. No sort over everything and no
    lexsort copies of every key: a compaction's peak stays near the size of its result."""
    rows = remap[post.rows]
    live = rows >= 0
    whole = bool(live.all())
    o_terms = _expand_terms(post) if whole else _expand_terms(post)[live]
    o_rows = rows.astype(np.int32) if whole else rows[live].astype(np.int32)
    o_tfs = post.tfs if whole else post.tfs[live]
    del rows, live
    n_terms = np.concatenate([np.zeros(0, np.uint64)] + [e.terms for e in new])
    order = np.argsort(n_terms, kind="stable")
    n_terms = n_terms[order]
    parts = []
    for e in new:
        parts.append((base + np.repeat(np.arange(len(e.rows.ids)), np.diff(e.rows.ptr))
                      ).astype(np.int32))
        base += len(e.rows.ids)
    n_rows = np.concatenate([np.zeros(0, np.int32)] + parts)[order]
    n_tfs = np.concatenate([np.zeros(0, np.float32)] + [e.tfs for e in new]
                           ).astype(np.float32)[order]
    del parts, order
    at = np.searchsorted(o_terms, n_terms, side="right")   # after the kept, same term
    at += np.arange(len(at))                                 # positions in the result
    old_at = np.ones(len(o_terms) + len(n_terms), bool)
    old_at[at] = False
    out = []
    for o, n in ((o_terms, n_terms), (o_rows, n_rows), (o_tfs, n_tfs)):
        merged = np.empty(len(old_at), o.dtype)
        merged[at] = n
        merged[old_at] = o
        out.append(merged)
    del o_terms, n_terms, o_rows, n_rows, o_tfs, n_tfs, at, old_at
    terms, rows, tfs = out
    is_first = np.ones(len(terms), bool)
    np.not_equal(terms[1:], terms[:-1], out=is_first[1:])
    first = np.flatnonzero(is_first)
    del is_first
    return _Postings(terms[first], np.append(first, len(terms)), rows, tfs)


def _expand_terms(post: _Postings) -> np.ndarray:
    return np.repeat(post.terms, np.diff(post.ptr))
