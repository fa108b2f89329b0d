"""The floor of an append into a full L1: the least filesystem work fsmem's format needs,
written in plain Python, beside the real ``Memory.append`` and SQLite, interleaved.

Same stream as the ``append`` row of ``python -m benchmarks`` (capacity 30/10, watermark 29:
every second append prunes). The floor is ``_floor.AppendFloor``: fsmem's format and barriers
(the "batch" wave) with none of its CPU: what is between SQLite and it is the format's own
syscalls and barriers; what is between fsmem and it is fsmem's code.
Usage: python benchmarks/bench_append_floor.py [--reps N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from _floor import AppendFloor
from _rows_write import CAPACITY, KEEP, PROTECTED, _sqlite, _sqlite_l1, _turn_events

from fsmem import Memory


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--dir", help="parent of the temp dir (default: system temp)")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="fsmem-append-floor-", dir=args.dir)
    try:
        for durability, sync in (("full", "FULL"), ("off", "OFF")):
            stream = _turn_events(CAPACITY + args.reps + 1, 3)
            mem = Memory.open(f"{base}/{durability}/fsmem", durability=durability,
                              context_capacity=CAPACITY, context_protected=PROTECTED,
                              context_tokens=10**9)
            sides = {"fsmem": mem.append,
                     "floor": AppendFloor(f"{base}/{durability}/floor", durability == "full",
                                           CAPACITY, KEEP).append,
                     "sqlite": _sqlite_l1(_sqlite(f"{base}/{durability}/sqlite.db", sync))}
            times: dict[str, list[float]] = {k: [] for k in sides}
            for i, ev in enumerate(stream):
                names = list(sides)[i % 3:] + list(sides)[:i % 3]
                for name in names:
                    t = time.perf_counter()
                    sides[name](ev)
                    if i > CAPACITY:   # L1 full from here on
                        times[name].append(time.perf_counter() - t)
            mem.close()
            sq = statistics.median(times["sqlite"])
            print(f"durability {durability} (load {os.getloadavg()[0]:.1f}), n={args.reps}:")
            for name, ts in times.items():
                med, prune = statistics.median(ts), statistics.median(ts[1::2])
                print(f"  {name:7s} median {med * 1e3:7.3f} ms ({med / sq:5.1f}x SQLite)  "
                      f"appends that pruned {prune * 1e3:7.3f} ms")
    finally:
        shutil.rmtree(base)   # the temp dir this script made, nothing else


if __name__ == "__main__":
    sys.exit(main())
