"""Search at scale: 100,000 synthetic units.

Reports top-10 p50, all interleaved query by query: ``Memory.query`` (the public API) beside
the index search inside it; BM25 beside a numpy BM25 bound over the same postings (idf, tf
saturation, length normalisation); the dense signal beside a numpy product + argpartition.
Also open time with a valid index, full reindex time, peak RSS against the index's raw size.
Usage: python benchmarks/bench_index.py [--units N] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from _data import text
from _harness import rotate

from fsmem import Memory


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(root: str, n_queries: int) -> None:
    from _rows_read import bm25_bound

    from fsmem.search import ranking
    rng = random.Random(12)
    t = time.perf_counter()
    mem = Memory.open(root, auto_prune=False)
    idx = mem.index
    open_s = time.perf_counter() - t
    queries = [text(rng, 12) for _ in range(n_queries + 1)]
    sides = {
        "query": lambda q: mem.query(q, 10),                       # the public API
        "search": lambda q: idx.search_events(q, 10, mem.ranker),  # the search inside it
        "bm25": lambda q: idx.search_events(q, 10, "bm25"),
        "bm25 bound": lambda q: bm25_bound(idx, q, ranking.K1, ranking.B),
        "dense": lambda q: idx.search_events(q, 10, "dense"),
        "dense bound": lambda q: _dense_bound(idx, mem.embedder.embed([q])[0]),
    }
    times = rotate(sides, queries)   # interleaved, the order rotating; query 0 warms up
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    raw_mb = (idx.dense.nbytes + idx.post.rows.nbytes + idx.post.tfs.nbytes
              + idx.post.terms.nbytes + idx.post.ptr.nbytes) / 2**20
    print(f"open with a valid index (to the first usable index): {open_s * 1000:.0f} ms")
    print(f"top-10 p50: Memory.query {med['query']:.2f} ms vs the index search inside it "
          f"({mem.ranker}) {med['search']:.2f} ms: {med['query'] / med['search']:.2f}x")
    print(f"top-10 p50: BM25 {med['bm25']:.2f} ms vs numpy BM25 bound over the same postings "
          f"{med['bm25 bound']:.2f} ms: {med['bm25'] / med['bm25 bound']:.2f}x")
    print(f"top-10 p50: dense {med['dense']:.2f} ms vs numpy dense bound (embed, product, "
          f"argpartition) {med['dense bound']:.2f} ms: {med['dense'] / med['dense bound']:.2f}x")
    print(f"peak RSS of the querying process {rss_mb():.0f} MB; index arrays {raw_mb:.0f} MB")
    mem.close()


def _dense_bound(idx, qv: np.ndarray) -> np.ndarray:
    s = idx.dense @ qv
    k = min(10, len(s))
    top = np.argpartition(-s, k - 1)[:k]
    return top[np.argsort(-s[top])]


def reindex(root: str) -> None:
    from fsmem.interfaces.cli.progress import progress_bar
    mem = Memory.open(root, auto_prune=False)
    t = time.perf_counter()
    n = mem.reindex(progress=progress_bar)
    print(f"full reindex of {n} units: {time.perf_counter() - t:.1f} s "
          f"(peak RSS {rss_mb():.0f} MB)")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--measure":
        return measure(sys.argv[2], int(sys.argv[4]))
    if len(sys.argv) > 2 and sys.argv[1] == "--reindex":
        return reindex(sys.argv[2])
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=100_000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--queries", type=int, default=50)
    args = ap.parse_args()
    rng = random.Random(11)
    root = tempfile.mkdtemp(prefix="fsmem-index-", dir=args.dir)
    try:
        mem = Memory.open(root, durability="off", auto_prune=False)
        t = time.perf_counter()
        for i in range(args.units):
            mem.commit(text(rng, 120) + f" item{i}")
        build_s = time.perf_counter() - t
        mem.reindex()   # writes the index snapshot that the next open finds valid
        del mem
        # Open, query and reindex each in a fresh process, so RSS is theirs alone.
        proc = subprocess.run([sys.executable, __file__, "--measure", root, "--queries",
                               str(args.queries)], capture_output=True, text=True, check=True)
        print(f"{args.units} units (built in {build_s:.0f}s with durability off)")
        print(proc.stdout, end="")
        proc = subprocess.run([sys.executable, __file__, "--reindex", root], capture_output=True,
                              text=True, check=True)
        print(proc.stdout, end="")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
