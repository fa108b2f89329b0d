"""Durable commit of a 10-event unit, beside the same data written to SQLite in the same run.

Unit: 10 events, input and response of about 300 characters each, one 200 KB image.
fsmem durability full under each sync strategy (batch: one wave of fdatasyncs; one syncfs;
fsync per file) vs SQLite WAL synchronous=FULL, one transaction per unit; fsmem durability off
vs SQLite synchronous=OFF. The writers are interleaved unit by unit (the order rotating), and
each Memory has its search index loaded, so a commit costs what it costs in a running agent
(it also indexes its unit). ``--noise`` runs it beside the benchmark table's noisy neighbour (a
process rewriting a file at 40 MB/s with an fsync every 4 MB on the same filesystem).
Usage: python benchmarks/bench_commit.py [--units N] [--dir DIR] [--noise]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from _data import sqlite_commit, ten_event_unit
from _harness import rotate
from _rows_write import NOISE

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
        "fsmem full (batch)": fsmem_writer(base, "full", "batch"),
        "fsmem full (fsync per file)": fsmem_writer(base, "full", "fsync"),
        "fsmem full (one syncfs)": fsmem_writer(base, "full", "syncfs"),
        "sqlite WAL synchronous=FULL": sqlite_writer(base, "FULL"),
        "fsmem durability off": fsmem_writer(base, "off", "fsync"),
        "sqlite WAL synchronous=OFF": sqlite_writer(base, "OFF"),
    }
    times = rotate({name: write for name, (_h, write) in writers.items()}, units)
    for name, (handle, _) in writers.items():
        if name.startswith("fsmem"):
            assert handle.fsck(read_data=False) == []
        handle.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=200)
    ap.add_argument("--noise", action="store_true", help="beside a 40 MB/s + fsync writer")
    ap.add_argument("--dir", default=None, help="parent of the work directory (default: the "
                    "system temp dir); only the benchmark's own directory in it is removed")
    args = ap.parse_args()
    rng = random.Random(7)
    units = [ten_event_unit(rng) for _ in range(args.units + 1)]
    base = tempfile.mkdtemp(prefix="fsmem-bench-", dir=args.dir)
    noise = subprocess.Popen([sys.executable, "-c", NOISE, os.path.join(base, "noise"), "40"]
                             ) if args.noise else None
    try:
        time.sleep(0.5 if noise else 0)
        times = run(base, units)
    finally:
        if noise is not None:
            noise.send_signal(signal.SIGTERM)
            noise.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"{args.units} units of 10 events (300+300 chars each, one 200 KB image), writers "
          f"interleaved unit by unit, search index loaded{', noisy neighbour' if noise else ''}"
          f" (load {os.getloadavg()[0]:.1f})")
    print(f"{'writer':<32}{'median ms':>10}{'p95 ms':>10}{'units/s':>10}")
    for name, t in times.items():
        p95 = sorted(t)[round(0.95 * (len(t) - 1))]
        print(f"{name:<32}{med[name] * 1000:>10.2f}{p95 * 1000:>10.2f}{len(t) / sum(t):>10.0f}")
    sq_full, sq_off = med["sqlite WAL synchronous=FULL"], med["sqlite WAL synchronous=OFF"]
    for name in ("fsmem full (batch)", "fsmem full (fsync per file)", "fsmem full (one syncfs)"):
        print(f"ratio {name} / sqlite FULL: {med[name] / sq_full:.2f}x")
    print(f"ratio fsmem off / sqlite OFF: {med['fsmem durability off'] / sq_off:.2f}x")


if __name__ == "__main__":
    main()
