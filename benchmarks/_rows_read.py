"""Read-side rows of ``python -m benchmarks``: query, BM25, open (warm and cold), render,
CLI start-up.

Stores of 1k/10k/100k L2 units are built once per run (or kept in ``--cache``) by
benchmarks/_store100k.py (durability off, indexed as committed, one index save);
fresh-process rows spawn one child per measurement, fsmem's and the anchor's alternately, and
time inside the child after its imports.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from typing import Callable

import msgspec
import numpy as np
from _data import text
from _harness import (CHILD_ENV, REPO, Profile, Row, Stat, Workdir, drop_caches, interleave,
                      rotate, run_child, timed)

from fsmem import Event, Memory, Timestamp

__all__ = ["build_store", "store_of", "query_rows", "open_rows", "cold_open_rows",
           "restore_open_rows",
           "render_rows", "render_pair", "cli_rows", "bm25_bound"]


def build_store(root: str, n: int) -> None:
    """n L2 units of ~120 characters (one event each), durability off, the index loaded
    before the commits and saved once (benchmarks/_store100k.py: 100k in ~9 min here)."""
    from _store100k import build
    build(root, n)


def store_of(wd: Workdir, n: int) -> str:
    return os.path.join(wd.store(f"store-{n}", lambda root: build_store(root, n)), "mem")


def bm25_bound(idx, q: str, k1: float, b: float) -> np.ndarray:
    """Top-10 event rows by Okapi BM25 (idf, tf saturation, length normalisation) over the
    index's own postings, in plain numpy: the floor an index search could reach."""
    from fsmem.search.analyze import term_hashes
    post = idx.post
    q_terms = np.unique(term_hashes([q]))
    pos = np.searchsorted(post.terms, q_terms)
    ok = pos < len(post.terms)
    ok[ok] = post.terms[pos[ok]] == q_terms[ok]
    pos = pos[ok]
    dl = idx.ev_len
    n = len(dl)
    avgdl = float(dl.mean()) if n else 1.0
    acc = np.zeros(n, np.float32)
    for p in pos:
        lo, hi = int(post.ptr[p]), int(post.ptr[p + 1])
        rows, tf = post.rows[lo:hi], post.tfs[lo:hi]
        idf = np.log1p((n - (hi - lo) + 0.5) / ((hi - lo) + 0.5))
        acc[rows] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl[rows] / avgdl))
    k = min(10, n)
    top = np.argpartition(-acc, k - 1)[:k] if n else acc[:0].astype(np.int64)
    return top[np.argsort(-acc[top])]


def query_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """``Memory.query`` top-10 vs the index search inside it; BM25 top-10 vs the numpy bound."""
    from fsmem.search import ranking
    n = prof.open_sizes[-1]
    mem = Memory.open(store_of(wd, n), auto_prune=False)
    idx = mem.index
    rng = random.Random(12)
    qs = [text(rng, 24) for _ in range(prof.reps + 1)]
    mine = {"a": iter(qs), "b": iter(qs), "c": iter(qs), "d": iter(qs)}

    def side(key: str, fn: Callable[[str], object]) -> Callable[[], float]:
        def run() -> float:
            q = next(mine[key])
            t = time.perf_counter()
            fn(q)
            return time.perf_counter() - t
        return run
    res = interleave({"query": side("a", lambda q: mem.query(q, 10)),
                      "search": side("b", lambda q: mem.index.search_events(q, 10, mem.ranker))},
                     prof.reps)
    res2 = interleave({"bm25": side("c", lambda q: idx.search_events(q, 10, "bm25")),
                       "bound": side("d", lambda q: bm25_bound(idx, q, ranking.K1, ranking.B))},
                      prof.reps)
    mem.close()
    return [
        Row("read", f"Memory.query top-10, {n} units (index loaded)", Stat(res["query"]),
            f"Index.search_events inside it ({mem.ranker})", Stat(res["search"]),
            target_ratio=1.5, p95=True),
        Row("read", f"BM25 top-10, {n} units", Stat(res2["bm25"]),
            "numpy BM25 bound, same postings", Stat(res2["bound"]), target_ratio=2, p95=True,
            note="the bound: idf, tf saturation (k1), length normalisation (b) over the "
                 "index's postings and row lengths, accumulated per event row, argpartition; "
                 "no live-row mask, no neighbour smoothing, no per-unit max"),
    ]


#: the first query of the open rows: two words of benchmarks/_data.py's vocabulary
FIRST_QUERY = "solar piano"

OPEN_FSMEM = """
import json, sys, time
from fsmem import Memory
import numpy, msgspec
t = time.perf_counter()
mem = Memory.open(sys.argv[1], auto_prune=False)
hits = mem.query(sys.argv[2], top_k=10)
s = time.perf_counter() - t
print(json.dumps({"s": s, "n": len(mem.index), "hits": len(hits)}))
"""

OPEN_MMAP = """
import json, os, sys, time
import numpy as np, msgspec
t = time.perf_counter()
d = sys.argv[1]
with open(os.path.join(d, "CURRENT")) as fh:
    gen = os.path.join(d, fh.read().strip())
with open(os.path.join(gen, "meta.json"), "rb") as fh:
    meta = msgspec.json.decode(fh.read())
arrays = [np.load(os.path.join(gen, f), mmap_mode="r") for f in sorted(os.listdir(gen))
          if f.endswith(".npy")]
s = time.perf_counter() - t
print(json.dumps({"s": s, "n": meta["units"]}))
"""


def _index_dir(root: str) -> str:
    mem = Memory.open(root, readonly=True)
    try:
        return mem.layout.index_dir
    finally:
        mem.close()


def _settle(root: str) -> None:
    """A valid saved index in step with documents/: open, query (the index loaded, synced,
    saved if it had to change), close. A bare open + close would not touch the index."""
    mem = Memory.open(root, auto_prune=False)
    try:
        mem.query(FIRST_QUERY, 3, count=False)
        if getattr(mem.index, "_unsaved", 0):   # (a private count: absent, nothing owed)
            mem.index.save()
    finally:
        mem.close()


def _open_pair(root: str, reps: int, cold: bool) -> dict[str, list[float]]:
    _settle(root)   # the next opens find a valid index
    idx_dir = _index_dir(root)

    def child(code: str, arg: tuple[str, ...]) -> Callable[[], float]:
        def run() -> float:
            if cold:
                drop_caches(root)
            return run_child(code, *arg)["s"]
        return run
    return interleave({"fsmem": child(OPEN_FSMEM, (root, FIRST_QUERY)),
                       "mmap": child(OPEN_MMAP, (idx_dir,))}, reps)


def open_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """Open + first query with a valid index in a fresh process, per store size, vs mmap +
    read meta."""
    rows: list[Row] = []
    for n in prof.open_sizes:
        res = _open_pair(store_of(wd, n), prof.child_reps, cold=False)
        if rows and n == prof.open_sizes[-1]:
            first = rows[0].fsmem.median_ms
            growth = np.log(Stat(res["fsmem"]).median_ms / first) / np.log(n / prof.open_sizes[0])
            rows[0].note += (f"; open + first query grows as size^{growth:.2f} from "
                             f"{prof.open_sizes[0]} to {n} units")
        rows.append(Row("open", f"open with a valid index, {n} units, and first query, "
                        "fresh process",
                        Stat(res["fsmem"]), "mmap the index arrays + read meta",
                        Stat(res["mmap"]), target_ms=100 if n >= 100_000 else None,
                        note="timed inside the child after its imports: Memory.open and the "
                             f"first Memory.query({FIRST_QUERY!r}, top_k=10) (before: the "
                             "first len(mem.index), which checks no postings)"
                             if n == prof.open_sizes[0]
                        else ""))
    return rows


def cold_open_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """The same open with the store's files evicted from the page cache before each run."""
    n = prof.open_sizes[min(1, len(prof.open_sizes) - 1)]
    res = _open_pair(store_of(wd, n), max(3, prof.child_reps // 2), cold=True)
    return [Row("open", f"cold-cache open + first query, {n} units, fresh process",
                Stat(res["fsmem"]),
                "cold mmap + read meta", Stat(res["mmap"]),
                note="before every run each file of the store gets "
                     "posix_fadvise(POSIX_FADV_DONTNEED) (no root needed); dentries and inodes "
                     "stay cached, which only a root drop_caches would evict")]


def restore_open_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """The first open after a backup is restored with ``cp -a`` (every directory a new inode
    and ctime, nothing changed) vs an open with a valid index of the original."""
    n = prof.open_sizes[min(1, len(prof.open_sizes) - 1)]
    root = store_of(wd, n)
    _settle(root)   # a valid index
    count = iter(range(1 << 30))

    def restored() -> float:
        dst = wd.path(f"restored-{next(count)}")
        shutil.copytree(root, dst, symlinks=True)   # cp -a (not timed)
        try:
            return run_child(OPEN_FSMEM, dst, FIRST_QUERY)["s"]
        finally:
            shutil.rmtree(dst)   # our own copy
    res = interleave({"fsmem": restored,
                      "valid": lambda: run_child(OPEN_FSMEM, root, FIRST_QUERY)["s"]},
                     max(3, prof.child_reps // 2))
    return [Row("open", f"first open + first query after a cp -a restore, {n} units, fresh "
                "process", Stat(res["fsmem"]), "open + first query, valid index, same store",
                Stat(res["valid"]),
                note="every unit has a new identity (inode, ctime); the open reads each "
                     "manifest once to confirm it is the one indexed, keeps the rows and saves "
                     "the new identities (before: every unit indexed again)")]


def _render_events(n: int) -> list[Event]:
    from bench_render import make_events
    return [msgspec.structs.replace(e, blocks=[]) for e in make_events(n, 7)]


def render_pair(base: str, events: list[Event], budgets: tuple[int, ...], reps: int
                ) -> dict[int, dict[str, list[float]]]:
    """``Memory.render`` of ``events`` appended to L1 (a Memory kept open, as the agent's
    process keeps it) vs SQLite load of the same events + the same ``render()``, interleaved."""
    from fsmem.memory.render import render
    mem = Memory.open(os.path.join(base, "fsmem"), durability="off", auto_prune=False,
                      context_capacity=10**9)
    for ev in events:
        mem.append(ev)
    db = sqlite3.connect(os.path.join(base, "sqlite.db"))
    db.execute("CREATE TABLE events(id INTEGER PRIMARY KEY, ts INT, off INT, source TEXT, "
               "input TEXT, response TEXT, tools BLOB)")
    with db:
        db.executemany("INSERT INTO events(ts, off, source, input, response, tools) "
                       "VALUES (?,?,?,?,?,?)",
                       [(e.timestamp.ns, e.timestamp.offset, e.source, e.input, e.response,
                         msgspec.json.encode(e.tool_results)) for e in events])
    tools_dec = msgspec.json.Decoder(list[_tool_type()])

    def sqlite_render(budget: int) -> str:
        rows = db.execute("SELECT ts, off, source, input, response, tools FROM events "
                          "ORDER BY ts, id").fetchall()
        evs = [Event(timestamp=Timestamp(ts, off), source=src, input=inp, response=resp,
                     tool_results=tools_dec.decode(tools)) for ts, off, src, inp, resp, tools
               in rows]
        return render(evs, budget)
    try:
        return {b: interleave({"fsmem": timed(lambda: mem.render(b)),
                               "sqlite": timed(lambda: sqlite_render(b))}, reps)
                for b in budgets}
    finally:
        mem.close()
        db.close()


def render_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """``Memory.render`` of N L1 events vs SQLite load of the same events + the same render."""
    events = _render_events(prof.render_events)
    budget = 32_000
    res = render_pair(os.path.dirname(wd.path("render/x")), events, (budget,),
                      max(3, prof.child_reps))[budget]
    return [Row("read", f"Memory.render, {len(events)} L1 events, budget {budget}",
                Stat(res["fsmem"]), "SQLite load + the same render()", Stat(res["sqlite"]),
                target_ratio=2, p95=True,
                note="the events of bench_render.py (heavy-tailed bodies), appended to L1; "
                     "SQLite stores the same fields and rebuilds the Event objects")]


def _tool_type():
    from fsmem import ToolOutput
    return ToolOutput


def _fsmem_cmd() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "fsmem")
    return [exe] if os.path.isfile(exe) else [sys.executable, "-m", "fsmem.cli"]


def cli_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """CLI start-up: ``fsmem --version`` and the everyday verbs on a small store (5 L2 units,
    3 L1 events) vs ``python -c pass``, each a fresh process (what an agent scripting the CLI
    pays per call). The verbs and the anchor rotate in one loop, so every verb's ratio is to
    the same anchor samples."""
    root = wd.path("cli/fsmem")
    mem = Memory.open(root)
    for i in range(5):
        mem.commit(f"note {i}")
    for i in range(3):
        mem.append(Event(timestamp=Timestamp.now(), source="cli", input=f"question {i}",
                         response=f"answer {i}"))
    doc = mem.units("documents")[0]
    mem.close()
    fs = _fsmem_cmd()
    rc = subprocess.run([*fs, "--version"], env=CHILD_ENV, capture_output=True).returncode

    def proc(argv: list[str]) -> Callable[[], float]:
        return timed(lambda: subprocess.run(argv, env=CHILD_ENV, cwd=str(REPO),
                                            capture_output=True, timeout=60))
    reps = max(3, min(15, prof.reps // 3))
    res = interleave({"version": proc([*fs, "--version"]), "pass": proc([sys.executable, "-c",
                                                                          "pass"])}, reps)
    rows = [Row("cli", "fsmem --version (process wall time)", Stat(res["version"]),
                "python -c pass", Stat(res["pass"]), target_ms=100,
                note="" if rc == 0 else f"`fsmem --version` exits {rc} on this build (no such "
                                        "option yet): the time is argparse's error path")]
    return rows + _verb_rows(fs, root, wd.path("cli/append"), doc, reps)


#: (row, argv after ``--root ROOT``, target ratio to ``python -c pass``, note)
_VERBS: list[tuple[str, list[str], float | None, str]] = [
    ("fsmem ls, small store", ["ls"], 3, "lists L2 and L1 units; no numpy, index or embedder"),
    ("fsmem show UNIT", ["show", "UNIT"], 3, "one L2 unit as a transcript"),
    ("fsmem timeline", ["timeline"], None, "the L1 events"),
    ("fsmem stats", ["stats"], None, "counts per layer (and legacy documents: fsmem.homeagent.documents)"),
    ("fsmem fsck", ["fsck"], None, "re-hashes every block; no graph.db, nothing quarantined: "
     "none of the writer's modules, no sqlite3"),
    ("fsmem render --budget 2000", ["render", "--budget", "2000"], None,
     "a small L1 is weighed without numpy"),
    ("fsmem query (bm25)", ["query", "note"], None, "numpy, the index and the stemmer: needed; "
     "no saved index (only commits so far), so the reader builds one in memory"),
    ("fsmem append (durable)", ["append", "--input", "hi", "--response", "ok"], None,
     "the write path with numpy (hashed embedder, prune), not the index or analyzer (L1 has "
     "room: nothing ranked); a store of its own"),
]


def _verb_rows(fs: list[str], root: str, append_root: str, doc: str, reps: int) -> list[Row]:
    """One row per everyday verb, each a fresh ``fsmem`` process, rotating with the anchor."""
    Memory.open(append_root).close()
    sides: dict[str, Callable[[object], object]] = {}
    for what, argv, _, _ in _VERBS:
        r = append_root if argv[0] == "append" else root
        cmd = [*fs, "--root", r, *[doc if a == "UNIT" else a for a in argv]]
        check = subprocess.run(cmd, env=CHILD_ENV, cwd=str(REPO), capture_output=True, timeout=60)
        if check.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {check.returncode}: {check.stderr[-500:]}")
        sides[what] = lambda _, cmd=cmd: subprocess.run(cmd, env=CHILD_ENV, cwd=str(REPO),
                                                         capture_output=True, timeout=60)
    sides["pass"] = lambda _: subprocess.run([sys.executable, "-c", "pass"], env=CHILD_ENV,
                                             cwd=str(REPO), capture_output=True, timeout=60)
    res = rotate(sides, range(reps + 1))
    return [Row("cli", f"{what} (process wall time)", Stat(res[what]), "python -c pass",
                Stat(res["pass"]), target_ratio=target, note=note)
            for what, _, target, note in _VERBS]
