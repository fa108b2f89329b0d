"""Durable commit of a 10-event unit, beside the same data written to SQLite in the same run.

Unit: 10 events, input and response of about 300 characters each, one 200 KB image.
fsmem durability full (fsync per file / one syncfs) vs SQLite WAL synchronous=FULL, one
transaction per unit; fsmem durability off vs SQLite synchronous=OFF. The five writers are
interleaved unit by unit (the order rotating), and each Memory has its search index loaded, so
a commit costs what it costs in a running agent (it also indexes its unit).
Usage: python benchmarks/bench_commit.py [--units N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import statistics
import tempfile
import time

from _data import sqlite_commit, ten_event_unit

from fsmem import Memory


def fsmem_writer(base: str, durability: str, strategy: str):
    """A Memory with its search index loaded (as in a running agent: every commit also
    indexes its unit), writing with the given durability and sync strategy."""
    mem = Memory.open(f"{base}/fsmem-{durability}-{strategy}", durability=durability,
                      auto_prune=False)
    mem.store.sync_strategy = strategy
    mem.index
    return mem, mem.commit_events


def sqlite_writer(base: str, sync: str):
    db = sqlite3.connect(f"{base}/sqlite-{sync}.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={sync}")
    return db, sqlite_commit(db)


def run(base: str, units) -> dict[str, list[float]]:
    """Every writer writes unit i before any writes unit i+1; the order rotates per unit."""
    writers = {
        "fsmem full (fsync per file)": fsmem_writer(base, "full", "fsync"),
        "fsmem full (one syncfs)": fsmem_writer(base, "full", "syncfs"),
        "sqlite WAL synchronous=FULL": sqlite_writer(base, "FULL"),
        "fsmem durability off": fsmem_writer(base, "off", "fsync"),
        "sqlite WAL synchronous=OFF": sqlite_writer(base, "OFF"),
    }
    names = list(writers)
    times: dict[str, list[float]] = {n: [] for n in names}
    for i, events in enumerate(units):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            t = time.perf_counter()
            writers[name][1](events)
            if i:   # the first unit of each writer is a warm-up
                times[name].append(time.perf_counter() - t)
    for name, (handle, _) in writers.items():
        if name.startswith("fsmem"):
            assert handle.fsck(read_data=False) == []
        handle.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=200)
    ap.add_argument("--dir", default=None, help="parent of the work directory (default: the "
                    "system temp dir); only the benchmark's own directory in it is removed")
    args = ap.parse_args()
    rng = random.Random(7)
    units = [ten_event_unit(rng) for _ in range(args.units + 1)]
    base = tempfile.mkdtemp(prefix="fsmem-bench-", dir=args.dir)
    try:
        times = run(base, units)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.units} units of 10 events (300+300 chars each, one 200 KB image), writers "
          "interleaved unit by unit, search index loaded")
    print(f"{'writer':<32}{'median ms':>10}{'p95 ms':>10}{'units/s':>10}")
    for name, t in times.items():
        p95 = sorted(t)[round(0.95 * (len(t) - 1))]
        print(f"{name:<32}{med[name] * 1000:>10.2f}{p95 * 1000:>10.2f}{len(t) / sum(t):>10.0f}")
    sq_full, sq_off = med["sqlite WAL synchronous=FULL"], med["sqlite WAL synchronous=OFF"]
    for name in ("fsmem full (fsync per file)", "fsmem full (one syncfs)"):
        print(f"ratio {name} / sqlite FULL: {med[name] / sq_full:.2f}x")
    print(f"ratio fsmem off / sqlite OFF: {med['fsmem durability off'] / sq_off:.2f}x")


if __name__ == "__main__":
    main()
