"""MCP round trip of a query against the in-process call.

On a store of N L2 units (default 2,000, ~600 characters each), Q queries (default 200) are
timed three ways, interleaved query by query so machine load hits all alike:

* ``mem.query(text, top_k=3)`` in process (the baseline);
* ``fsmem.interfaces.tools.call(mem, "coldcontext_query", ...)`` in process (validation, hit text, JSON);
* the same tool called through the MCP SDK's stdio client on a real ``fsmem mcp`` subprocess
  (client call -> JSON-RPC over pipes -> server -> result parsed by the client).

Reports p50 and p95 of each and the p50 ratios. The store is built in a temporary directory
this script creates and removes.

Usage: python benchmarks/bench_mcp.py [--units N] [--queries Q]
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

from _data import text

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from fsmem import Memory
from fsmem.interfaces.tools import call

REPO = Path(__file__).resolve().parent.parent


def build(root: str, units: int) -> list[str]:
    rng = random.Random(5)
    mem = Memory.open(root, durability="off", auto_prune=False)
    for i in range(units):
        mem.commit(text(rng, 600), summary=f"unit {i}")
    mem.close()
    return [" ".join(text(rng, 40).split()[:3]) for _ in range(10_000)]


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000


async def run(root: str, queries: list[str]) -> dict[str, list[float]]:
    mem = Memory.open(root)
    mem.query("warm", top_k=3)
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "fsmem.cli", "mcp", "--root", root],
                                   cwd=str(REPO), env={"PYTHONPATH": str(REPO)})
    times: dict[str, list[float]] = {"mem.query": [], "tools.call": [], "mcp": []}
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        await s.call_tool("coldcontext_query", {"query": "warm"})
        for q in queries:
            t = time.perf_counter()
            mem.query(q, top_k=3)
            times["mem.query"].append(time.perf_counter() - t)
            t = time.perf_counter()
            call(mem, "coldcontext_query", {"query": q, "top_k": 3})
            times["tools.call"].append(time.perf_counter() - t)
            t = time.perf_counter()
            res = await s.call_tool("coldcontext_query", {"query": q, "top_k": 3})
            times["mcp"].append(time.perf_counter() - t)
            assert not res.is_error, res.content
    mem.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--units", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="fsmem-bench-mcp-")
    try:
        queries = build(f"{base}/m", args.units)[:args.queries]
        times = anyio.run(run, f"{base}/m", queries)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    base_p50 = statistics.median(times["mem.query"])
    print(f"{args.units} units, {args.queries} queries, top_k 3, interleaved")
    for name, xs in times.items():
        print(f"{name:>11}: p50 {pct(xs, 0.5):7.3f} ms  p95 {pct(xs, 0.95):7.3f} ms  "
              f"ratio to mem.query (p50) {statistics.median(xs) / base_p50:5.2f}x")


if __name__ == "__main__":
    main()
