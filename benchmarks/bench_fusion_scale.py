"""Query p50 of the default ranker with the light embedder (fusion) on a large store, beside a
numpy brute-force bound over the same vectors and postings, interleaved query by query.

The store holds N synthetic one-event units (benchmarks/_data.text). Stored vectors are 384-d
hashed features under the light embedder's fingerprint (embedding N passages with e5 would
take N x ~10 ms; the values do not change the search's cost), queries go through the real
e5 ``embed_query``. Sides:
- ``fusion``: ``Index.search_events`` with the default ranker (BM25 + dense + coverage weight
  + neighbour smoothing + per-unit max + top 10), the query vector embedded inside;
- ``bound``: the same query embedding, then numpy BM25 over the same postings
  (benchmarks/_rows_read.bm25_bound) plus ``dense @ q``, a weighted sum and argpartition;
- the query embedding (e5, ~40 ms) is timed apart, once per query, and added to both.
Usage: python benchmarks/bench_fusion_scale.py [--units 10000,30000] [--queries 40]
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

from fsmem import Memory, ranking  # noqa: E402
from fsmem.embed import HashEmbedder  # noqa: E402

__all__ = ["LightShape", "measure", "main"]


class LightShape:
    """e5's fingerprint, dimension and query embedding; hashed passages (see the docstring)."""

    def __init__(self) -> None:
        from fsmem.embedders import E5SmallEmbedder
        self.e5 = E5SmallEmbedder()
        self.fingerprint, self.dim = self.e5.fingerprint, self.e5.dim
        self._hash = HashEmbedder(self.dim)
        self.memo: dict[str, np.ndarray] = {}

    def embed(self, texts):
        return self._hash.embed(texts)

    def embed_query(self, texts):
        """e5's query vectors, embedded once per text (both sides then compare the search
        alone; the embedding's own p50 is reported apart)."""
        todo = [t for t in texts if t not in self.memo]
        if todo:
            self.memo.update(zip(todo, self.e5.embed_query(todo)))
        return np.stack([self.memo[t] for t in texts])


def _bound(idx, emb, q: str) -> np.ndarray:
    """Top 10 rows of 0.5 x max-scaled BM25 + 0.5 x cosine, in plain numpy over the index's
    own postings and vectors (as benchmarks/_rows_read.bm25_bound scores BM25)."""
    from fsmem.analyze import term_hashes
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


def measure(n: int, n_queries: int, emb: LightShape, base: str) -> dict:
    rng = random.Random(11)
    root = tempfile.mkdtemp(prefix="fsmem-fscale-", dir=base)
    try:
        mem = Memory.open(root, durability="off", auto_prune=False, embedder=emb,
                          vectors="inline")
        t = time.perf_counter()
        for i in range(n):
            mem.commit(text(rng, 120) + f" item{i}")
        build_s = time.perf_counter() - t
        idx = mem.index
        idx._compact()
        queries = [text(rng, 12) for _ in range(n_queries + 1)]
        embed = []
        for q in queries:
            t = time.perf_counter()
            emb.embed_query([q])
            embed.append(time.perf_counter() - t)
        sides = {"fusion": lambda q: idx.search_events(q, 10, mem.ranker),
                 "bound": lambda q: _bound(idx, emb, q)}
        times: dict[str, list[float]] = {k: [] for k in sides}
        times["embed"] = embed[1:]
        names = list(sides)
        for i, q in enumerate(queries):   # interleaved, alternating; query 0 warms up
            for name in names[i % 2:] + names[:i % 2]:
                t = time.perf_counter()
                sides[name](q)
                if i:
                    times[name].append(time.perf_counter() - t)
        mem.close()
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        return {"units": n, "build_s": build_s, "ranker": mem.ranker, **med}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", default="10000,30000")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    emb = LightShape()
    print(f"load average {os.getloadavg()[0]:.2f}")
    for n in (int(x) for x in args.units.split(",")):
        r = measure(n, args.queries, emb, args.dir)
        e = r["embed"]
        print(f"{r['units']} units (built in {r['build_s']:.0f} s), ranker {r['ranker']}: search "
              f"p50 {r['fusion']:.2f} ms vs numpy bound {r['bound']:.2f} ms: "
              f"{r['fusion'] / r['bound']:.2f}x; with the query embedding (p50 {e:.1f} ms) "
              f"{r['fusion'] + e:.1f} vs {r['bound'] + e:.1f} ms: "
              f"{(r['fusion'] + e) / (r['bound'] + e):.2f}x", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
