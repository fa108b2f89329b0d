"""L3 stable memory: distillation throughput and graph neighbour queries.

1. Distil N cold units (default 1,000; 5 events each, input and response of a few sentences,
   some factual) with the default rule distiller, durability "full": units/s end to end
   (read the unit, extract, one graph transaction, one rename), and the same with
   durability "off".
2. On a graph of E relation edges (default 100,000 over 20,000 entities, HomeAgent schema),
   the neighbour query at depth 2: ``Graph.neighbors`` (breadth first, one indexed query per
   hop and side, names and provenance included) beside the same edge set from one plain
   recursive SQL CTE, in the same run; p50 and p95 over Q random names (default 300).

Usage: python benchmarks/bench_stablemem.py [--units N] [--edges E] [--queries Q] [--dir DIR]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time

from _data import text

from fsmem import Event, Memory, Timestamp
from fsmem.graph.distill import Triple
from fsmem.graph.graph import STRUCTURAL, Graph, triple_block_id
from fsmem.memory.stablemem import distill

NAMES = ["小雨", "阿橘", "王芳", "李雷", "张伟", "Alice", "Bob", "Sarah", "Tom", "Lisa"]
PLACES = ["杭州", "上海", "成都", "南京", "Berlin", "Boston", "Paris", "Lyon", "Madrid"]
THINGS = ["猫", "咖啡", "爬山", "钢琴", "jazz", "tennis", "chocolate", "football"]
FACTS = [
    lambda r: f"{r.choice(NAMES)}住在{r.choice(PLACES)}。",
    lambda r: f"{r.choice(NAMES)}喜欢{r.choice(THINGS)}。",
    lambda r: f"{r.choice(NAMES)}的生日是{r.randint(1, 12)}月{r.randint(1, 28)}日。",
    lambda r: f"{r.choice(NAMES)} lives in {r.choice(PLACES)}.",
    lambda r: f"{r.choice(NAMES)} likes {r.choice(THINGS)}.",
    lambda r: f"My favorite color is {r.choice(['green', 'blue', 'red'])}.",
]


def _unit(rng: random.Random, base_ns: int) -> list[Event]:
    return [Event(timestamp=Timestamp(base_ns + i * 1_000_000_007, 8 * 3600), source="qq",
                  input=rng.choice(FACTS)(rng) + " " + text(rng, 80),
                  response=text(rng, 120) + ". " + rng.choice(FACTS)(rng))
            for i in range(5)]


def bench_distill(base: str, units: int, durability: str) -> tuple[float, int, int]:
    rng = random.Random(7)
    root = f"{base}/distill-{durability}"
    mem = Memory.open(root, durability="off", auto_prune=False)
    for i in range(units):
        mem.commit_events(_unit(rng, 1_790_000_000_000_000_000 + i * 10**12), summary=f"u{i}")
    mem = Memory.open(root, durability=durability, auto_prune=False)  # type: ignore[arg-type]
    t = time.perf_counter()
    report = distill(mem, max_age_s=0)
    elapsed = time.perf_counter() - t
    assert len(report.distilled) == units, (len(report.distilled), report.no_facts[:3])
    return units / elapsed, report.triples, report.edges_added


def build_graph(path: str, edges: int, entities: int) -> float:
    rng = random.Random(11)
    names = [f"entity-{i:05d}" for i in range(entities)]
    rels = [f"rel{i}" for i in range(20)]
    triples: set[tuple[str, str, str]] = set()
    while len(triples) < edges:
        s, o = rng.choice(names), rng.choice(names)
        if s != o:
            triples.add((s, rng.choice(rels), o))
    t = time.perf_counter()
    with Graph(path, sync=False) as g:
        batch = [Triple(s, r, o) for s, r, o in sorted(triples)]
        for i in range(0, len(batch), 10_000):
            g.commit(batch[i:i + 10_000], session_id="bench")
    return edges / (time.perf_counter() - t)


CTE = f"""
WITH RECURSIVE walk(node, depth) AS (
  SELECT :seed, 0
  UNION
  SELECT e.target_id, w.depth + 1 FROM walk w JOIN memory_block_edges e
    ON e.source_kind = 'block' AND e.source_id = w.node
   WHERE w.depth < :depth - 1 AND e.target_kind = 'block' AND e.status = 'active'
     AND e.edge_type NOT IN {STRUCTURAL!r}
  UNION
  SELECT e.source_id, w.depth + 1 FROM walk w JOIN memory_block_edges e
    ON e.target_kind = 'block' AND e.target_id = w.node
   WHERE w.depth < :depth - 1 AND e.source_kind = 'block' AND e.status = 'active'
     AND e.edge_type NOT IN {STRUCTURAL!r}
),
near(node) AS (SELECT DISTINCT node FROM walk),
hits(id, s, t, type) AS (
  SELECT e.id, e.source_id, e.target_id, e.edge_type FROM near JOIN memory_block_edges e
    ON e.source_kind = 'block' AND e.source_id = near.node
   WHERE e.target_kind = 'block' AND e.status = 'active' AND e.edge_type NOT IN {STRUCTURAL!r}
  UNION
  SELECT e.id, e.source_id, e.target_id, e.edge_type FROM near JOIN memory_block_edges e
    ON e.target_kind = 'block' AND e.target_id = near.node
   WHERE e.source_kind = 'block' AND e.status = 'active' AND e.edge_type NOT IN {STRUCTURAL!r}
)
SELECT hits.id, a.text_content, hits.type, b.text_content FROM hits
  JOIN memory_blocks a ON a.id = hits.s JOIN memory_blocks b ON b.id = hits.t
"""


def bench_neighbors(path: str, queries: int, entities: int, depth: int = 2) -> dict[str, list]:
    rng = random.Random(5)
    picks = [f"entity-{rng.randrange(entities):05d}" for _ in range(queries)]
    out: dict[str, list] = {"api": [], "cte": [], "size": []}
    with Graph(path) as g:
        db = g.connection
        for name in picks[:5]:  # the two answer the same question
            api_ids = {r.edge_id for r in g.neighbors(name, depth).relations}
            cte_ids = {r[0] for r in db.execute(CTE, {"seed": triple_block_id(name),
                                                      "depth": depth})}
            assert api_ids == cte_ids, name
        for name in picks:
            t = time.perf_counter()
            rec = g.neighbors(name, depth)
            out["api"].append(time.perf_counter() - t)
            t = time.perf_counter()
            rows = db.execute(CTE, {"seed": triple_block_id(name), "depth": depth}).fetchall()
            out["cte"].append(time.perf_counter() - t)
            out["size"].append(len(rec.relations))
            assert len(rows) == len(rec.relations)
    return out


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=1000)
    ap.add_argument("--edges", type=int, default=100_000)
    ap.add_argument("--entities", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="fsmem-l3-", dir=args.dir)
    try:
        for durability in ("full", "off"):
            rate, triples, edges = bench_distill(base, args.units, durability)
            print(f"distil {args.units} cold units (5 events each), durability {durability}: "
                  f"{rate:.0f} units/s ({triples} triples, +{edges} edges)")
        path = f"{base}/graph.db"
        rate = build_graph(path, args.edges, args.entities)
        print(f"graph: {args.edges} relation edges over {args.entities} entities "
              f"(Graph.commit, 10k per transaction): {rate:.0f} edges/s")
        res = bench_neighbors(path, args.queries, args.entities)
        print(f"neighbours at depth 2, {args.queries} random names, "
              f"{statistics.mean(res['size']):.0f} relations per answer on average:")
        for label, key in (("Graph.neighbors (BFS, names + provenance)", "api"),
                           ("plain recursive CTE (edge ids + names)", "cte")):
            print(f"  {label:<44} p50 {_pct(res[key], 0.5):6.2f} ms   "
                  f"p95 {_pct(res[key], 0.95):6.2f} ms")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
