"""The floor of an append into a full L1: the least filesystem work fsmem's format needs,
written in plain Python, beside the real ``Memory.append`` and SQLite, interleaved.

Same stream as the ``append`` row of ``python -m benchmarks`` (capacity 30/10, watermark 29:
every second append prunes). The floor does, per append: mkdir a staged unit, write its two
text blocks and its manifest, (barrier), rename it into context/, (barrier); per prune also:
mkdir a staged L2 unit, hard-link the evicted events' blocks into it, write its manifest,
write a journal entry (temp + rename), (barrier), rename the L2 unit into documents/, rename
the evicted L1 units into the trash, (barrier), unlink the entry. No hashing, tokenising,
ranking or epoch files: what is missing between it and SQLite is the format's own syscalls
and barriers; what is between fsmem and it is fsmem's CPU and extra calls.
Barrier = syncfs(2) (fsmem's default on Linux 5.8+) for durable, nothing for durability off.
Usage: python benchmarks/bench_append_floor.py [--reps N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

from _rows_write import CAPACITY, KEEP, PROTECTED, _sqlite, _sqlite_l1, _turn_events

from fsmem import Event, Memory
from fsmem import _fsops as fsops


class Floor:
    """L1 as unit directories, with the least work per append and per prune."""

    def __init__(self, root: str, durable: bool) -> None:
        self.root, self.durable = root, durable
        for d in ("staging", "journal", "trash", "context", "documents"):
            os.makedirs(os.path.join(root, d))
        self.l1: list[tuple[str, list[str]]] = []   # (unit dir, block names), arrival order

    def _barrier(self) -> None:
        if self.durable:
            fsops.syncfs(self.root)

    def _unit(self, blocks: dict[str, bytes], links: list[str], manifest: dict) -> str:
        path = os.path.join(self.root, "staging", uuid.uuid4().hex)
        os.mkdir(path)
        for name, data in blocks.items():
            fd = os.open(os.path.join(path, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            os.write(fd, data)
            os.close(fd)
        for src in links:
            os.link(src, os.path.join(path, os.path.basename(src)))
        with open(os.path.join(path, "manifest.json"), "w") as fh:
            json.dump(manifest, fh)
        return path

    def append(self, ev: Event) -> None:
        blocks = {uuid.uuid4().hex: ev.input.encode(), uuid.uuid4().hex: ev.response.encode()}
        staged = self._unit(blocks, [], {"events": [{"ts": ev.timestamp.ns}]})
        self._barrier()
        dst = os.path.join(self.root, "context", os.path.basename(staged))
        os.rename(staged, dst)
        if self.durable:
            fsops.fsync_dir(os.path.dirname(dst))
        self.l1.append((dst, list(blocks)))
        if len(self.l1) > CAPACITY:
            self.prune()

    def prune(self) -> None:
        evicted, self.l1 = self.l1[:len(self.l1) - KEEP], self.l1[len(self.l1) - KEEP:]
        links = [os.path.join(unit, b) for unit, names in evicted for b in names]
        staged = self._unit({}, links, {"events": len(evicted)})
        entry = os.path.join(self.root, "journal", "j.json")
        with open(entry + ".tmp", "w") as fh:
            json.dump({"publish": staged, "remove": [u for u, _ in evicted]}, fh)
        os.rename(entry + ".tmp", entry)
        self._barrier()
        os.rename(staged, os.path.join(self.root, "documents", os.path.basename(staged)))
        for unit, _ in evicted:
            os.rename(unit, os.path.join(self.root, "trash", os.path.basename(unit)))
        self._barrier()
        os.unlink(entry)


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
                     "floor": Floor(f"{base}/{durability}/floor", durability == "full").append,
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
