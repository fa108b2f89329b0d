"""A query's embedding, once per search, computed while the lexical side runs.

Why: with a real embedder (e5: ~10 ms a query on this machine, most of a fused search), one
search over three layers would embed the same query three times, and the BM25 scoring would
wait for the model although it needs nothing from it. Inside :func:`one_query`, every index
that asks for the vector of that text gets the same one, and an expensive embedder (not
``on_demand``) starts on a worker thread the moment the search starts, so BM25 over every
layer runs meanwhile (the engine leaves the GIL while it computes). The scope ends with the
call: nothing is kept between searches (a repeated query is embedded again).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

import numpy as np

__all__ = ["one_query", "query_vector"]

_SCOPE: ContextVar[dict | None] = ContextVar("fsmem_query_vectors", default=None)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _embed(embedder: Any, text: str) -> np.ndarray:
    embed = getattr(embedder, "embed_query", None) or embedder.embed
    return np.asarray(embed([text])[0], np.float32)


def _worker() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsmem-query-embed")
        return _pool


@contextmanager
def one_query(embedder: Any, text: str, *, dense: bool) -> Iterator[None]:
    """Within: the vector of ``text`` by ``embedder`` is computed at most once. ``dense``:
    the ranker reads vectors, so an expensive embedder starts on it now, on a worker."""
    memo: dict = {}
    if dense and text.strip() and not getattr(embedder, "on_demand", False):
        memo[(id(embedder), text)] = _worker().submit(_embed, embedder, text)
    token = _SCOPE.set(memo)
    try:
        yield
    finally:
        _SCOPE.reset(token)
        for fut in memo.values():   # a search that never read it (no rows): let it finish
            if isinstance(fut, Future):
                fut.cancel()


def query_vector(embedder: Any, text: str) -> np.ndarray:
    """The query embedding of ``text``: the scope's (see :func:`one_query`), else computed."""
    memo = _SCOPE.get()
    if memo is None:
        return _embed(embedder, text)
    key = (id(embedder), text)
    got = memo.get(key)
    if got is None:
        got = memo[key] = _embed(embedder, text)
    return got.result() if isinstance(got, Future) else got
