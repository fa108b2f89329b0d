"""What agents cost (issue 34): a query and an agent's turn in a store shared by several agents,
against the same store with one agent, in the same run.

Two stores of ``--units`` L2 units with the same texts: ``single`` (every unit the default
agent's, shared: no visibility mask) and ``agents`` (the units spread over 4 agents, 1 in 10
private: the mask applies). Rows, interleaved call by call:
  * query top-10 (index loaded) as one agent, against the same query on ``single``;
  * an append into a full L1 (auto prune) of agent ``a0`` while agent ``a1`` holds an L1 of
    ``--other-l1`` events, against the same append in a store where no other agent has an L1
    (the other agent's L1 must cost nothing: it is not listed, read or ranked).
Usage: python benchmarks/bench_agents.py [--units N] [--rounds N]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "benchmarks"))

from _data import english  # noqa: E402  (the fixtures' English sentences)

from fsmem import Memory, TextEvent  # noqa: E402


def _text(rng: random.Random, n: int = 24) -> str:
    """About ``n`` words of the fixtures' English."""
    return english(rng, n * 6)


def _build(root: Path, units: int, agents: int, seed: int) -> None:
    rng = random.Random(seed)
    mems = [Memory.open(root, agent=f"a{i}" if agents > 1 else None, durability="off")
            for i in range(agents)]
    for i in range(units):
        m = mems[i % agents]
        m.commit(_text(rng), private=agents > 1 and i % 10 == 0)
    for m in mems:
        m.close()


def _median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--other-l1", type=int, default=400)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="fsmem-bench-agents-"))
    try:
        _build(tmp / "single", args.units, 1, 7)
        _build(tmp / "agents", args.units, 4, 7)
        rng = random.Random(3)
        queries = [_text(rng, 3) for _ in range(args.rounds)]
        single = Memory.open(tmp / "single", readonly=True)
        multi = Memory.open(tmp / "agents", readonly=True, agent="a1")
        single.query(queries[0], 10, count=False)
        multi.query(queries[0], 10, count=False)
        t_single, t_multi = [], []
        for i, q in enumerate(queries):
            pair = [(single, t_single), (multi, t_multi)]
            for mem, out in (pair if i % 2 else pair[::-1]):
                t0 = time.perf_counter()
                mem.query(q, 10, count=False)
                out.append(time.perf_counter() - t0)
        # appends into a full L1 of a0, with and without another agent's big L1 beside it
        alone = tmp / "alone"
        crowded = tmp / "crowded"
        for root in (alone, crowded):
            m = Memory.open(root, agent="a0", context_capacity=30, context_protected=10,
                            durability="off")
            m.append_many([TextEvent(role="user", content=_text(rng, 12)) for _ in range(30)])
            m.close()
        other = Memory.open(crowded, agent="a1", context_capacity=args.other_l1 + 10,
                            durability="off")
        other.append_many([TextEvent(role="user", content=_text(rng, 12))
                           for _ in range(args.other_l1)])
        other.close()
        writers = {root: Memory.open(root, agent="a0", context_capacity=30,
                                     context_protected=10, durability="off")
                   for root in (alone, crowded)}
        t_alone, t_crowded = [], []
        for i in range(args.rounds):
            pair = [(writers[alone], t_alone), (writers[crowded], t_crowded)]
            for mem, out in (pair if i % 2 else pair[::-1]):
                t0 = time.perf_counter()
                mem.append(TextEvent(role="user", content=_text(rng, 12)))
                out.append(time.perf_counter() - t0)
        rows = [
            (f"query top-10, {args.units} units over 4 agents, 10% private (as agent a1)",
             _median_ms(t_multi), f"same store, one agent, no private unit",
             _median_ms(t_single)),
            (f"append into a full L1 of a0 (auto prune, durability off), another agent's "
             f"L1 of {args.other_l1} events beside it", _median_ms(t_crowded),
             "same append, no other L1", _median_ms(t_alone)),
        ]
        print("| operation | fsmem ms | anchor | anchor ms | ratio | n |")
        print("|---|---:|---|---:|---:|---:|")
        for op, ms, anchor, ams in rows:
            print(f"| {op} | {ms:.3g} | {anchor} | {ams:.3g} | {ms / ams:.2f}x | {args.rounds} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
