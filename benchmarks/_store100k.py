"""A fast builder of large fsmem stores (100k L2 units) for the scale benchmarks.

The store is a real one, written through the public API in its fastest honest form:
``Memory.open(durability="off")``, the search index loaded *before* the commits, so each
``commit`` hands its unit to the index as written (nothing is read back, no ``reindex``
pass over 100k directories afterwards), and one index save at ``close()``. Each unit holds
one event of ~120 characters of mixed zh/en text (benchmarks/_data.text) plus ``item<i>``.

``kind`` picks the vectors stored in each unit (inline, as ``vectors="inline"`` writes them):
- ``hashed``: the default ``HashEmbedder`` (512-d): the store ``Memory.open(root)`` opens
  with a valid index (the open rows);
- ``shape384``: 384-d float32 unit vectors under a fixed fingerprint (:class:`Shape384`),
  the shape and dtype of multilingual-e5-small's, pseudo-random per text: embedding 100k
  passages with the real model would take ~20 minutes here, and the values do not change
  the cost of a search (a matrix-vector product and the same fusion arithmetic).

Stores are cached under a directory the caller gives: ``<dir>/store-<kind>-<n>/mem``, built
in ``<name>.part`` (marked ``.fsmem-bench-store``) and renamed when whole; a finished one is
reused. Only a ``.part`` this builder marked is ever removed (an interrupted build).

    python benchmarks/_store100k.py --dir DIR [--units 100000] [--kind hashed|shape384]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import text  # noqa: E402

from fsmem import Memory  # noqa: E402

__all__ = ["Shape384", "KINDS", "build", "cached_store", "cached_build", "main"]

MARK = ".fsmem-bench-store"
BUILT = ".built"


class Shape384:
    """384-d float32 unit vectors, deterministic per text (seeded by its BLAKE2 digest): the
    shape and dtype of e5-small's, for latency measurements only (no meaning)."""

    dim = 384
    fingerprint = "bench-shape:unit-random:d384"
    thread_safe = True

    def __init__(self) -> None:
        self.calls = 0

    def _vec(self, t: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
        v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        return v / np.float32(np.linalg.norm(v))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._vec(t) for t in texts])

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


KINDS: dict[str, Callable[[], object | None]] = {"hashed": lambda: None, "shape384": Shape384}


def build(root: str, n: int, kind: str = "hashed", *, seed: int = 11,
          progress: Callable[[int], None] | None = None) -> float:
    """Write ``n`` one-event L2 units into a new store at ``root``; seconds taken."""
    embedder = KINDS[kind]()
    rng = random.Random(seed)
    t = time.perf_counter()
    mem = Memory.open(root, durability="off", auto_prune=False, embedder=embedder,
                      vectors="inline")
    try:
        len(mem.index)   # loaded (empty) first: every commit is indexed as written
        for i in range(n):
            mem.commit(text(rng, 120) + f" item{i}")
            if progress and (i + 1) % 10_000 == 0:
                progress(i + 1)
    finally:
        mem.close()      # one index save
    return time.perf_counter() - t


def cached_store(parent: str, n: int, kind: str = "hashed",
                 progress: Callable[[int], None] | None = None) -> str:
    """The store root of ``n`` units of ``kind`` under ``parent``, built if not there."""
    return cached_build(parent, f"store-{kind}-{n}", f"{n} units of {kind}",
                        lambda root: build(root, n, kind, progress=progress))[0]


def cached_build(parent: str, name: str, what: str, make: Callable[[str], float]
                 ) -> tuple[str, float | None]:
    """``<parent>/<name>/mem``, made by ``make(root)`` (seconds taken) unless a finished one
    is there: built in ``<name>.part`` (marked as ours) and renamed when whole; only a
    ``.part`` this marker names is ever removed. Returns (root, seconds, or None if reused)."""
    final = os.path.join(os.path.abspath(parent), name)
    if os.path.isfile(os.path.join(final, BUILT)):
        return os.path.join(final, "mem"), None
    part = final + ".part"
    if os.path.isdir(part):
        if not os.path.isfile(os.path.join(part, MARK)):
            raise SystemExit(f"{part}: exists and was not made by this builder; not touching it")
        shutil.rmtree(part)   # our own interrupted build
    os.makedirs(part)
    Path(part, MARK).write_text("built by benchmarks (benchmarks/_store100k.py)\n")
    secs = make(os.path.join(part, "mem"))
    Path(part, BUILT).write_text(f"{what} in {secs:.1f} s\n")
    os.rename(part, final)
    return os.path.join(final, "mem"), secs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="parent directory of the cached stores")
    ap.add_argument("--units", type=int, default=100_000)
    ap.add_argument("--kind", choices=sorted(KINDS), default="hashed")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)

    def tick(done: int) -> None:
        print(f"  {done} units, {time.perf_counter() - t:.0f} s", flush=True)
    root = cached_store(args.dir, args.units, args.kind, tick)
    built = Path(os.path.dirname(root), BUILT).read_text().strip()
    print(f"{root}: {built}; load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
