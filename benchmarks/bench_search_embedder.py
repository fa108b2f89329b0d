"""The store's own embedder, timed where an agent meets it (issue 30 item 2): on a store made
with ``fsmem init --embedder e5-small`` and 10k one-event L2 units of English (real
multilingual-e5-small vectors, from the ``embed-lite`` extra), the fused query (the query
embedded by e5, BM25 + dense cosine fused) against the lexical query (BM25 alone) on the same
open Reader, queries interleaved, the order flipping every query. Target: fused <= 5x lexical.

Sides, per query (top 5, nothing counted in the access log):
- ``search fusion`` / ``search bm25``: ``Reader.search`` over every layer (``fsmem search``,
  MCP ``memory_search``), the Reader's ranker switched between the two;
- ``query fusion`` / ``query bm25``: ``Reader.query`` (L2 only, ``coldcontext_query``);
- ``e5 query embedding``: ``embed_query`` of the same text alone (what fusion adds).
Then over MCP, the interactive tool an agent host uses: ``memory_search`` through the SDK's
stdio client on two real ``fsmem mcp`` servers of the store, one with ``FSMEM_RANKER=bm25``,
queries interleaved between them (JSON-RPC round trip, validation, hit texts included).
Then the one-shot CLI, wall time of a fresh ``fsmem search`` process per query (its start-up
loads the model): ``ranker fusion`` against ``FSMEM_RANKER=bm25``, interleaved.

Queries are paraphrase-like English questions written for this benchmark (not any public
benchmark's), half with words the store holds, half without.

    python benchmarks/bench_search_embedder.py [--units 10000] [--queries 39] [--cli 8] [--no-mcp]
        [--cache DIR] [--out docs/BENCHMARKS-search.md]
The store is built once (about 4 minutes at 10k units: each commit embeds its passage) and
kept under --cache when given, else in a temp dir removed at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import english  # noqa: E402
from _store100k import cached_build  # noqa: E402

from fsmem import Memory  # noqa: E402
from fsmem.memory.reader import Reader  # noqa: E402

__all__ = ["build", "measure", "main"]

QUERIES = [
    "when did the coffee maker start leaking", "what did we plan for the weekend",
    "who is allergic to peanuts", "where are the spare house keys",
    "how much did the solar panels cost", "what time is the piano lesson",
    "which visa documents are still missing", "what food does the cat eat",
    "is it going to rain on saturday", "what did the doctor say at the checkup",
    "the wifi password for the guest network", "remind me about the dentist appointment",
    "what was the name of the plumber", "how long does the train to the airport take",
    "what gift did we buy for grandma", "the budget for the kitchen renovation",
    "which bakery has the sourdough bread", "when is the car insurance renewal due",
    "what book was recommended last month", "how do I reset the thermostat schedule",
    "did anyone water the tomato plants", "the serial number of the washing machine",
    "what is my sister's new address", "which medicine do I take in the morning",
    "when does the library close on sundays", "how many eggs are left in the fridge",
    "the recipe for the lemon cake", "who fixed the leaking roof last winter",
    "what colour did we choose for the bedroom", "where did we park at the stadium",
    "the login for the electricity account", "what did the landlord say about the heating",
    "how far is the nearest hospital", "which train platform for the night train",
    "what is the dog's vaccination date", "the name of the new neighbour upstairs",
    "when is the school holiday this spring", "how do I descale the kettle",
    "what songs did we pick for the wedding", "the password for the printer setup",
]


def build(root: str, n: int, seed: int = 7) -> float:
    """``fsmem init --embedder e5-small`` (a real subprocess), then ``n`` commits through the
    Python API, which opens with the store's configured embedder; seconds taken."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fsmem", "--root", root, "init",
                    "--embedder", "e5-small"], check=True, capture_output=True)
    rng = random.Random(seed)
    mem = Memory.open(root, durability="off", auto_prune=False, vectors="inline")
    try:
        assert mem.search_settings()["embedder"] == "e5-small", mem.search_settings()
        len(mem.index)   # loaded first: each commit is indexed as written
        for i in range(n):
            mem.commit(english(rng, 160) + f" (note {i})")
            if (i + 1) % 1000 == 0:
                print(f"  {i + 1} units, {time.perf_counter() - t:.0f} s", flush=True)
    finally:
        mem.close()
    return time.perf_counter() - t


def cached(parent: str, n: int) -> tuple[str, float | None]:
    """The e5 store of ``n`` units under ``parent`` (benchmarks/_store100k.cached_build)."""
    return cached_build(parent, f"store-e5-{n}", f"{n} e5 units", lambda root: build(root, n))


def _stats(v: list[float]) -> tuple[float, float]:
    s = sorted(v)
    return statistics.median(s) * 1000, s[round(0.95 * (len(s) - 1))] * 1000


def measure(root: str, n_queries: int) -> dict:
    t = time.perf_counter()
    r = Reader.open(root)
    open_s = time.perf_counter() - t
    settings = r.search_settings()
    emb = r.embedder
    qs = [QUERIES[i % len(QUERIES)] for i in range(n_queries + 1)]   # distinct up to 40

    def side(fn, ranker):
        def run(q):
            r.ranker = ranker
            return fn(q)
        return run
    sides = {
        "search fusion": side(lambda q: r.search(q, 5, count=False), "fusion"),
        "search bm25": side(lambda q: r.search(q, 5, count=False), "bm25"),
        "query fusion": side(lambda q: r.query(q, 5, count=False), "fusion"),
        "query bm25": side(lambda q: r.query(q, 5, count=False), "bm25"),
        "e5 query embedding": lambda q: emb.embed_query([q]),
    }
    t = time.perf_counter()
    r.ranker = "fusion"
    r.search("warm up", 5, count=False)   # loads the index, the vectors and the model once
    warm_s = time.perf_counter() - t
    settle = getattr(emb, "settle", None)   # e5: its ONNX Runtime query path built and checked
    engine = settle(60) if settle else "-"
    names = list(sides)
    times: dict[str, list[float]] = {k: [] for k in names}
    for i, q in enumerate(qs):
        order = names if i % 2 else names[::-1]
        for name in order:
            t = time.perf_counter()
            sides[name](q)
            if i:
                times[name].append(time.perf_counter() - t)
    same = sum(1 for q in QUERIES
               if [h.unit_id for h in side(lambda x: r.search(x, 5, count=False), "fusion")(q)]
               != [h.unit_id for h in side(lambda x: r.search(x, 5, count=False), "bm25")(q)])
    return {"open_s": open_s, "warm_s": warm_s, "settings": settings, "engine": engine,
            "stats": {k: _stats(v) for k, v in times.items()}, "n": len(times[names[0]]),
            "units": len(r.index), "differ": same}


def measure_cli(root: str, n: int) -> dict:
    env = dict(os.environ)
    times: dict[str, list[float]] = {"fusion": [], "bm25": []}
    for i in range(n + 1):
        q = QUERIES[i % len(QUERIES)]
        for ranker in (("fusion", "bm25") if i % 2 else ("bm25", "fusion")):
            e = {**env, "FSMEM_RANKER": ranker}
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "fsmem", "--root", root, "search", q],
                           check=True, capture_output=True, env=e)
            if i:
                times[ranker].append(time.perf_counter() - t)
    return {k: _stats(v) for k, v in times.items()} | {"n": n}


def measure_mcp(root: str, n: int) -> dict:
    """p50/p95 of ``memory_search`` over MCP: a fused server and a lexical one, alternating."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    repo = str(Path(__file__).resolve().parent.parent)

    def params(ranker: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable, args=["-m", "fsmem.cli", "--root", root, "mcp"], cwd=repo,
            env={**os.environ, "PYTHONPATH": repo, "FSMEM_RANKER": ranker})
    times: dict[str, list[float]] = {"fusion": [], "bm25": []}

    async def main() -> None:
        async with stdio_client(params("fusion")) as (r1, w1), \
                ClientSession(r1, w1) as fused, stdio_client(params("bm25")) as (r2, w2), \
                ClientSession(r2, w2) as lexical:
            sessions = {"fusion": fused, "bm25": lexical}
            for s in sessions.values():
                await s.initialize()
                await s.call_tool("memory_search", {"query": "warm up"})
            for i in range(n):
                q = QUERIES[i % len(QUERIES)]
                for name in (("fusion", "bm25") if i % 2 else ("bm25", "fusion")):
                    t = time.perf_counter()
                    res = await sessions[name].call_tool("memory_search", {"query": q})
                    times[name].append(time.perf_counter() - t)
                    assert not res.is_error, res.content
    anyio.run(main)
    return {k: _stats(v) for k, v in times.items()} | {"n": n}


def report(res: dict, cli: dict | None, argv: list[str], built: str,
           mcp: dict | None = None) -> str:
    st = res["stats"]
    sf, sb = st["search fusion"][0], st["search bm25"][0]
    qf, qb = st["query fusion"][0], st["query bm25"][0]
    lines = [
        "# The store's embedder at 10k units",
        "",
        f"**Generated** by `python benchmarks/bench_search_embedder.py {' '.join(argv)}` on "
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
        f"{os.getloadavg()[0]:.2f} at the end.",
        "",
        f"{res['units']} L2 units of English (~160 characters each), a store made with "
        f"`fsmem init --embedder e5-small` ({built}); the Reader opens with the store's "
        f"settings: embedder {res['settings']['embedder']} (queries embedded on "
        f"{res['engine']}), ranker {res['settings']['ranker']}. "
        f"Open {res['open_s'] * 1000:.0f} ms, first search (index, vectors, model) "
        f"{res['warm_s']:.1f} s. {res['n']} queries, every side interleaved per query, top 5. "
        f"Fused and lexical top 5 differ on {res['differ']} of {len(QUERIES)} queries.",
        "",
        "| operation | p50 ms | p95 ms |",
        "|---|---|---|",
        *(f"| {k} | {v[0]:.2f} | {v[1]:.2f} |" for k, v in st.items()),
        "",
        f"**Fused / lexical: search {sf / sb:.2f}x, query {qf / qb:.2f}x** (target <= 5x: "
        f"{'pass' if max(sf / sb, qf / qb) <= 5 else 'MISS'}). The floor is e5's own forward "
        f"pass: the query embedding alone is {st['e5 query embedding'][0] / sb:.2f}x the "
        f"lexical search; what the fused search adds to it (BM25, the dense score of every "
        f"row, the fusion) is {max(sf - st['e5 query embedding'][0], 0):.2f} "
        f"ms, {max(sf - st['e5 query embedding'][0], 0) / sb:.2f}x the lexical search.",
    ]
    if mcp:
        mf, mb = mcp["fusion"][0], mcp["bm25"][0]
        lines += ["", f"Over MCP (`memory_search`, the SDK's stdio client, two servers of the "
                  f"store, {mcp['n']} queries interleaved): fusion p50 {mf:.1f} ms (p95 "
                  f"{mcp['fusion'][1]:.1f}), bm25 p50 {mb:.1f} ms (p95 {mcp['bm25'][1]:.1f}): "
                  f"**{mf / mb:.2f}x** (target <= 5x: {'pass' if mf / mb <= 5 else 'MISS'})."]
    if cli:
        cf, cb = cli["fusion"][0], cli["bm25"][0]
        lines += ["", f"One-shot CLI (`fsmem search`, a fresh process per query, {cli['n']} "
                  f"pairs): fusion p50 {cf:.0f} ms (p95 {cli['fusion'][1]:.0f}), bm25 p50 "
                  f"{cb:.0f} ms (p95 {cli['bm25'][1]:.0f}): {cf / cb:.2f}x; the difference "
                  f"is loading the model once per process. A host that searches often keeps "
                  f"one process (MCP, `fsmem serve`, the Python API)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=39)
    ap.add_argument("--cli", type=int, default=8, help="CLI process pairs (0: none)")
    ap.add_argument("--no-mcp", dest="mcp", action="store_false", help="skip the MCP side")
    ap.add_argument("--cache", default=None, help="keep the built store here (reused)")
    ap.add_argument("--out", default=None, help="write the Markdown report here")
    args = ap.parse_args()
    argv = sys.argv[1:]
    parent = args.cache or tempfile.mkdtemp(prefix="fsmem-bench-e5-")
    try:
        root, secs = cached(parent, args.units)
        built = f"built in {secs:.0f} s" if secs else "built earlier, reused"
        res = measure(root, args.queries)
        mcp = measure_mcp(root, args.queries) if args.mcp else None
        cli = measure_cli(root, args.cli) if args.cli else None
        doc = report(res, cli, argv, built, mcp)
        print(doc)
        if args.out:
            Path(args.out).write_text(doc, encoding="utf-8")
    finally:
        if not args.cache:
            shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
