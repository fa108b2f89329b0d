"""A query's embedding, once per search.

Why: with a real embedder (e5: 10-18 ms a query here, most of a fused search), one search
over three layers would embed the same query three times, once per layer's index. Inside
:func:`one_query`, every index that asks for the vector of that text gets the same one. The
scope ends with the call: nothing is kept between searches (a repeated query is embedded
again). Embedding on a worker while BM25 runs was measured and dropped: the engine's OpenMP
threads then compete with BM25 for the two cores, and the fused search took 23 ms instead
of 16 (docs/BENCHMARKS-search.md).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

import numpy as np

__all__ = ["one_query", "query_vector"]

_SCOPE: ContextVar[dict | None] = ContextVar("fsmem_query_vectors", default=None)


def _embed(embedder: Any, text: str) -> np.ndarray:
    embed = getattr(embedder, "embed_query", None) or embedder.embed
    return np.asarray(embed([text])[0], np.float32)


@contextmanager
def one_query() -> Iterator[None]:
    """Within: the vector of a query text by an embedder is computed at most once."""
    token = _SCOPE.set({})
    try:
        yield
    finally:
        _SCOPE.reset(token)


def query_vector(embedder: Any, text: str) -> np.ndarray:
    """The query embedding of ``text``: the scope's (see :func:`one_query`), else computed."""
    memo = _SCOPE.get()
    if memo is None:
        return _embed(embedder, text)
    key = (id(embedder), text)
    got = memo.get(key)
    if got is None:
        got = memo[key] = _embed(embedder, text)
    return got
