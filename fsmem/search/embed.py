"""Embedders: the protocol, and the offline default (signed feature hashing, CJK-aware).

Tokens: text is NFKC-normalised and lowercased; each run of CJK characters gives its
character unigrams and bigrams, each run of Latin letters/digits gives word unigrams and
bigrams. Each token is hashed (CRC-32, stable across processes) to a bucket and a sign.
These are the hashed embedder's dense features only; BM25's terms come from
``fsmem.search.analyze``.
"""

from __future__ import annotations

import unicodedata
import zlib
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from fsmem.search.lazyre import lazy_compile

__all__ = ["Embedder", "HashEmbedder", "tokenize"]

_CJK = (r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
        r"\U00020000-\U0002ffff")
_TOKEN_RE = lazy_compile(__name__, "_TOKEN_RE", rf"([{_CJK}]+)|([^\W_{_CJK}]+)")  # on first use


@runtime_checkable
class Embedder(Protocol):
    """What fsmem needs of an embedding model: vectors of one space, named by ``fingerprint``.

    An asymmetric model (e5: "query: " / "passage: ") may also define
    ``embed_query(texts) -> np.ndarray`` (same shape and space); queries then go through it
    and stored content through ``embed``. One that may be called from two threads at once
    says so with ``thread_safe = True`` (else deferred vectors serialise every call)."""

    fingerprint: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape (len(texts), dim), rows L2-normalised (or all zero)."""
        ...


def tokenize(text: str) -> list[str]:
    """CJK character unigrams+bigrams and Latin word unigrams+bigrams, in text order.

    A word bigram joins consecutive Latin words not separated by CJK text.
    """
    norm = unicodedata.normalize("NFKC", text).lower()
    out: list[str] = []
    prev_word = ""
    for cjk, word in _TOKEN_RE.findall(norm):
        if cjk:
            prev_word = ""
            out.extend(cjk)
            if len(cjk) > 1:
                out.extend(map(str.__add__, cjk[:-1], cjk[1:]))
        else:
            out.append(word)
            if prev_word:
                out.append(prev_word + " " + word)
            prev_word = word
    return out


_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)
_UNI = np.uint64(0x165667B19E3779F9)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, vectorised (uint64 arithmetic wraps)."""
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


class HashEmbedder:
    """Deterministic, offline, no model: signed feature hashing of ``tokenize``'s features.

    Each feature (CJK character, CJK bigram, Latin word, Latin word bigram) hashes to a
    64-bit value; its low bits pick one of ``dim`` buckets and its top bit the sign. Hashing
    runs vectorised in numpy, so a unit's texts embed in well under a millisecond.
    """

    thread_safe = True   # pure numpy, no state: the vector filler may call it concurrently
    on_demand = True     # cheap and deterministic: vectors need not be stored (lazy_vectors)

    def __init__(self, dim: int = 512) -> None:
        if dim < 16:
            raise ValueError("dim must be at least 16")
        self.dim = dim
        self.fingerprint = f"fsmem-hash-v1:d{dim}"
        self.calls = 0
        self._words: dict[str, int] = {}
        self._tokens: dict[str, tuple[list[int], list[str]]] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        n = len(texts)
        rows, feats = self.features(texts)
        buckets = rows * self.dim + (feats % np.uint64(self.dim)).astype(np.int64)
        signs = np.where(feats >> np.uint64(63), 1.0, -1.0)
        out = np.bincount(buckets, weights=signs, minlength=n * self.dim)
        out = out.reshape(n, self.dim).astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    def trim_memos(self, limit: int) -> None:
        """Empty the word and token memo tables if one holds more than ``limit`` entries
        (speed memos only; see fsmem.search.analyze.trim_memos)."""
        for table in (self._words, self._tokens):
            if len(table) > limit:
                table.clear()

    def features(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(row, 64-bit hash) of every feature of every text (see ``tokenize``), computed in
        one vectorised pass for the whole batch."""
        cjk_runs: list[str] = []
        cjk_rows: list[int] = []
        words: list[int] = []    # word hashes; 0 marks a break (CJK run or text end)
        word_counts: list[int] = []
        get, miss = self._tokens.get, self._token
        for row, text in enumerate(texts):
            start = len(words)
            for token in unicodedata.normalize("NFKC", text).lower().split():
                hashes, runs = get(token) or miss(token)
                words += hashes
                if runs:
                    cjk_runs += runs
                    cjk_rows += [row] * len(runs)
            words.append(0)
            word_counts.append(len(words) - start)
        word_rows = np.repeat(np.arange(len(texts), dtype=np.int64), word_counts)
        out_rows, out_feats = [], []
        if cjk_runs:
            cps = np.frombuffer("\0".join(cjk_runs).encode("utf-32-le") + b"\0\0\0\0",
                                dtype=np.uint32).astype(np.uint64)
            lens = np.fromiter(map(len, cjk_runs), dtype=np.int64, count=len(cjk_runs)) + 1
            rows = np.repeat(np.array(cjk_rows, dtype=np.int64), lens)
            live = cps != 0
            out_rows.append(rows[live])
            out_feats.append(_mix(cps[live] * _M1 + _UNI))
            both = live[:-1] & live[1:]
            out_rows.append(rows[:-1][both])
            out_feats.append(_mix(cps[:-1][both] * _M1 ^ cps[1:][both] * _M2))
        if words:
            w = np.array(words, dtype=np.uint64)
            rows = word_rows
            live = w != 0
            out_rows.append(rows[live])
            out_feats.append(_mix(w[live] * _M2 + _UNI))
            both = live[:-1] & live[1:]
            out_rows.append(rows[:-1][both])
            out_feats.append(_mix(w[:-1][both] * _M2 ^ w[1:][both] * _M1 + _M1))
        if not out_rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
        return np.concatenate(out_rows), np.concatenate(out_feats)

    def _token(self, token: str) -> tuple[list[int], list[str]]:
        """One whitespace-free token's word hashes (0 for a CJK run) and CJK runs, cached:
        no match of ``_TOKEN_RE`` spans whitespace, so a text's matches are its tokens'."""
        pairs = _TOKEN_RE.findall(token)
        cache = self._words
        out = ([(cache.get(w) or self._word_hash(w)) if w else 0 for _, w in pairs],
               [c for c, _ in pairs if c])
        if len(self._tokens) > 1_000_000:
            self._tokens.clear()
        self._tokens[token] = out
        return out

    def _word_hash(self, word: str) -> int:
        h = zlib.crc32(word.encode("utf-8")) | (len(word) << 32) | (1 << 48)
        if len(self._words) > 1_000_000:
            self._words.clear()
        self._words[word] = h
        return h
