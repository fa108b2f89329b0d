"""CPU per turn: fsmem's append into a full L1 (durability off and full) and its durable commit
(10 events + 200 KB image), beside SQLite WAL (synchronous OFF and FULL) writing the same rows,
interleaved; process CPU (every thread's: the flush pool's too) and wall time, medians and
ratios to SQLite.

Appends: L1 at the default capacity (30, 10 protected), pruned to the default watermark (11:
``--keep`` sets another; 29 is the table's "prune every second append"), text ~250 characters
of varied English per input and per response (``_data.english``). A sample is one prune cycle
(capacity + 1 - keep appends, one of them prunes), given per append: every sample holds the
same mix. SQLite inserts the same rows in one transaction per append and moves the oldest
rows to layer 2 at the same watermark. Commits: 10 events of varied English, one 200 KB image,
the search index loaded (each commit also indexes its unit), one SQLite transaction per unit.
Beside them the format's floor (``_floor``: fsmem's files, directories, renames and barriers
written in plain Python, none of fsmem's CPU): between SQLite and the floor is the price of a
file per block; between the floor and fsmem is fsmem's code.
Sides run in turn, the order rotating by one each round, so load hits them alike.
``--profile`` then prints cProfile's top entries of each fsmem side (run apart, not timed).
``--cold-memo`` empties the analyzer's memos before each fsmem append sample (untimed), so
every word is stemmed again: the cost of new words, which the stemmer dominates.
Usage: python benchmarks/bench_turn_cpu.py [--reps N] [--dir DIR] [--keep K] [--profile]
       [--cold-memo]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

# Its siblings by their own directory: run as a script under PYTHONSAFEPATH (the suite's
# children against an installed fsmem), the script's directory is not on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import english, sqlite_commit, ten_event_unit  # noqa: E402
from _floor import AppendFloor, CommitFloor  # noqa: E402

from fsmem import Event, Memory, Timestamp
from fsmem.memory.prune import AVG_EVENT_TOKENS, watermark
from fsmem.search import analyze
from fsmem.store.config import DEFAULTS

CAPACITY, PROTECTED = DEFAULTS["context_capacity"], DEFAULTS["context_protected"]

Sample = tuple[float, float]   # (process CPU s, wall s) of one sample, per operation


def events(n: int, seed: int) -> list[Event]:
    rng = random.Random(seed)
    t0 = 1_790_000_000_000_000_000
    return [Event(timestamp=Timestamp(t0 + i * 60_000_000_000, 0), source="user",
                  input=english(rng, 250), response=english(rng, 250)) for i in range(n)]


def sqlite_db(path: str, sync: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={sync}")
    return db


def sqlite_l1(db: sqlite3.Connection, keep: int) -> Callable[[Event], None]:
    """Insert an event into layer 1 (one transaction); when layer 1 holds more than the
    capacity, move its oldest rows to layer 2 down to ``keep``, in the same transaction."""
    db.executescript("""
        CREATE TABLE events(id INTEGER PRIMARY KEY, layer INT, ts INT, source TEXT,
                            input TEXT, response TEXT);
        CREATE INDEX ev_layer ON events(layer, ts);""")

    def append(ev: Event) -> None:
        db.execute("BEGIN")
        db.execute("INSERT INTO events(layer, ts, source, input, response) VALUES (1,?,?,?,?)",
                   (ev.timestamp.ns, ev.source, ev.input, ev.response))
        n = db.execute("SELECT count(*) FROM events WHERE layer=1").fetchone()[0]
        if n > CAPACITY:
            db.execute("UPDATE events SET layer=2 WHERE id IN (SELECT id FROM events "
                       "WHERE layer=1 ORDER BY ts LIMIT ?)", (n - keep,))
        db.execute("COMMIT")
    return append


COLD = False   # --cold-memo: the analyzer's memos emptied before each fsmem sample


def block(fn: Callable[[object], object], items: list[object], cold: bool = False) -> Sample:
    """Process CPU and wall time of ``fn`` over ``items``, per item (``cold``: the analyzer's
    memos emptied first, untimed: every word of the sample is stemmed and hashed again)."""
    if cold:
        analyze.trim_memos(0)
    c, w = time.process_time(), time.perf_counter()
    for item in items:
        fn(item)
    return (time.process_time() - c) / len(items), (time.perf_counter() - w) / len(items)


def rotate(sides: dict[str, Callable[[int], Sample]], reps: int) -> dict[str, list[Sample]]:
    """Sample i of every side before sample i+1 of any, the order rotating by one side a
    round; one warm-up round, not recorded."""
    names = list(sides)
    out: dict[str, list[Sample]] = {n: [] for n in names}
    for i in range(reps + 1):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            s = sides[n](i)
            if i:
                out[n].append(s)
    return out


def append_sides(base: str, keep: int, tokens: int | None, reps: int
                 ) -> tuple[dict[str, Callable[[int], Sample]], list[Memory], int]:
    """Each side appends the same stream, in blocks of one prune cycle."""
    cycle = CAPACITY + 1 - keep
    stream = events(CAPACITY + cycle * (reps + 1), 3)
    sides: dict[str, Callable[[int], Sample]] = {}
    mems = []
    for durability, sync in (("off", "OFF"), ("full", "FULL")):
        mem = Memory.open(f"{base}/append-{durability}", durability=durability,
                          context_capacity=CAPACITY, context_protected=PROTECTED,
                          context_tokens=tokens)
        sq = sqlite_l1(sqlite_db(f"{base}/append-{sync}.db", sync), keep)
        floor = AppendFloor(f"{base}/append-floor-{durability}", durability == "full",
                            CAPACITY, keep)
        for ev in stream[:CAPACITY]:   # L1 full before the first sample
            mem.append(ev)
            sq(ev)
            floor.append(ev)
        mems.append(mem)
        for name, fn in ((f"fsmem append, durability {durability}", mem.append),
                         (f"floor append, durability {durability}", floor.append),
                         (f"SQLite append, synchronous={sync}", sq)):
            sides[name] = (lambda fn, cold: lambda i: block(
                fn, stream[CAPACITY + i * cycle:CAPACITY + (i + 1) * cycle], cold))(
                    fn, COLD and name.startswith("fsmem"))
    return sides, mems, cycle


def commit_sides(base: str, reps: int) -> tuple[dict[str, Callable[[int], Sample]], list[Memory]]:
    rng = random.Random(7)
    units = [ten_event_unit(rng, words=english) for _ in range(reps + 1)]
    sides: dict[str, Callable[[int], Sample]] = {}
    mems = []
    for durability, sync in (("off", "OFF"), ("full", "FULL")):
        mem = Memory.open(f"{base}/commit-{durability}", durability=durability,
                          auto_prune=False)
        mem.index   # loaded, as in a running agent: each commit also indexes its unit
        mems.append(mem)
        sq = sqlite_commit(sqlite_db(f"{base}/commit-{sync}.db", sync))
        floor = CommitFloor(f"{base}/commit-floor-{durability}", durability == "full")
        for name, fn in ((f"fsmem commit, durability {durability}", mem.commit_events),
                         (f"floor commit, durability {durability}", floor.commit),
                         (f"SQLite commit, synchronous={sync}", sq)):
            sides[name] = (lambda fn: lambda i: block(fn, [units[i]]))(fn)
    return sides, mems


def report(title: str, res: dict[str, list[Sample]], pairs: list[tuple[str, str]]) -> None:
    print(title)
    print(f"  {'side':<36}{'CPU ms':>9}{'wall ms':>9}{'CPU/wall':>9}")
    med = {n: (statistics.median(c for c, _ in s), statistics.median(w for _, w in s))
           for n, s in res.items()}
    for n, (c, w) in med.items():
        print(f"  {n:<36}{c * 1e3:>9.3f}{w * 1e3:>9.3f}{c / w if w else 0:>9.2f}")
    for a, b in pairs:
        print(f"  {a} / {b}: CPU {med[a][0] / med[b][0]:.1f}x, wall {med[a][1] / med[b][1]:.1f}x")


def profile(title: str, run: Callable[[], object], top: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    run()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print(f"cProfile, {title} (tottime, top {top}):")
    print("\n".join(ln for ln in out.getvalue().splitlines()[6:] if ln.strip()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=30, help="samples per side (default 30)")
    ap.add_argument("--dir", help="parent of the temp dir (default: the system temp dir); "
                    "only the benchmark's own directory in it is removed")
    ap.add_argument("--keep", type=int, default=None,
                    help="prune watermark (default: fsmem's default, 11 at 30/10)")
    ap.add_argument("--profile", action="store_true",
                    help="also print cProfile's top entries of each fsmem side (not timed)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--cold-memo", action="store_true",
                    help="empty the analyzer's memos before each fsmem append sample (every "
                    "word stemmed again: a fresh process, or text of new words)")
    args = ap.parse_args()
    global COLD
    COLD = args.cold_memo
    tokens = None if args.keep is None else args.keep * AVG_EVENT_TOKENS
    keep = watermark(CAPACITY, PROTECTED, context_tokens=tokens)
    base = tempfile.mkdtemp(prefix="fsmem-turn-cpu-", dir=args.dir)
    try:
        stems0 = analyze.memo_sizes()["stems"]
        sides, mems, cycle = append_sides(base, keep, tokens, args.reps)
        res = rotate(sides, args.reps)
        stems = analyze.memo_sizes()["stems"] - stems0
        appended = 2 * (CAPACITY + cycle * (args.reps + 1))
        report(f"append into a full L1 ({CAPACITY}/{PROTECTED}, watermark {keep}: one prune "
               f"per {cycle} appends), per append, n={args.reps} blocks of {cycle} "
               f"(load {os.getloadavg()[0]:.1f}; " + ("the memos emptied before each fsmem "
               "sample" if COLD else f"{stems * 100 / appended:.0f} words stemmed per 100 "
               "appends, the rest from the memo") + "):", res,
               [("fsmem append, durability off", "SQLite append, synchronous=OFF"),
                ("fsmem append, durability full", "SQLite append, synchronous=FULL"),
                ("floor append, durability off", "SQLite append, synchronous=OFF"),
                ("floor append, durability full", "SQLite append, synchronous=FULL")])
        csides, cmems = commit_sides(base, args.reps)
        cres = rotate(csides, args.reps)
        report(f"commit of 10 events + 200 KB image, per commit, n={args.reps} "
               f"(load {os.getloadavg()[0]:.1f}):", cres,
               [("fsmem commit, durability off", "SQLite commit, synchronous=OFF"),
                ("fsmem commit, durability full", "SQLite commit, synchronous=FULL"),
                ("floor commit, durability off", "SQLite commit, synchronous=OFF"),
                ("floor commit, durability full", "SQLite commit, synchronous=FULL")])
        if args.profile:
            more = events(cycle * 20, 11)
            for mem, label in zip(mems, ("durability off", "durable")):
                profile(f"{len(more)} appends, {label}", lambda: [mem.append(e) for e in more],
                        args.top)
            rng = random.Random(8)
            units = [ten_event_unit(rng, words=english) for _ in range(40)]
            profile("40 durable commits", lambda: [cmems[1].commit_events(u) for u in units],
                    args.top)
        for mem in mems + cmems:
            mem.close()
    finally:
        shutil.rmtree(base)   # the temp dir this script made, nothing else


if __name__ == "__main__":
    sys.exit(main())
