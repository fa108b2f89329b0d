"""Search at scale: 100,000 synthetic units.

Reports top-10 query p50 of the default ranker (BM25) and of the dense signal beside the raw
numpy lower bound (matrix-vector product plus argpartition over the same matrix) in the same
run; open time with a valid index; full reindex time; peak RSS against the index's raw size.
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

from fsmem import Memory


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(root: str, n_queries: int) -> None:
    rng = random.Random(12)
    t = time.perf_counter()
    mem = Memory.open(root, auto_prune=False)
    idx = mem.index
    open_s = time.perf_counter() - t
    queries = [text(rng, 12) for _ in range(n_queries)]
    times: dict[str, list[float]] = {"bm25": [], "dense": [], "numpy": []}
    for q in queries:
        for ranker in ("bm25", "dense"):
            t = time.perf_counter()
            idx.search(q, 10, ranker)
            times[ranker].append(time.perf_counter() - t)
        qv = mem.embedder.embed([q])[0]
        t = time.perf_counter()
        s = idx.dense @ qv
        top = np.argpartition(-s, 9)[:10]
        top[np.argsort(-s[top])]
        times["numpy"].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    raw_mb = (idx.dense.nbytes + idx.post.rows.nbytes + idx.post.tfs.nbytes
              + idx.post.terms.nbytes + idx.post.ptr.nbytes) / 2**20
    print(f"open with a valid index (to the first usable index): {open_s * 1000:.0f} ms")
    print(f"top-10 query p50: bm25 {med['bm25']:.1f} ms, dense {med['dense']:.1f} ms, "
          f"numpy lower bound {med['numpy']:.1f} ms (dense/bound "
          f"{med['dense'] / med['numpy']:.2f}x, bm25/bound {med['bm25'] / med['numpy']:.2f}x)")
    print(f"peak RSS of the querying process {rss_mb():.0f} MB; index arrays {raw_mb:.0f} MB")


def reindex(root: str) -> None:
    from fsmem.index import progress_bar
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
