"""Which barrier protocol makes a staged unit durable fastest? Raw syscalls, no fsmem CPU.

Each candidate writes the same files a durable commit of the benchmark's unit writes (20 text
blocks of the events' input and response, 4 tool outputs, one 200 KB image, the manifest) into
a fresh staging directory, makes them durable its way, renames the directory into a layer
directory and makes the name durable; SQLite WAL synchronous=FULL commits the same bytes in the
same run. Candidates and SQLite are interleaved rep by rep (the order rotating), quiet and with
a neighbour process rewriting a file at 40 MB/s with an fsync every 4 MB on the same filesystem.
Usage: python benchmarks/bench_sync.py [--reps N] [--dir DIR] [--no-noise]
Prints medians, p95 and the ratio to SQLite of each; counts barriers per candidate.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from _harness import rotate
from _rows_write import NOISE

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
_libc.syncfs.argtypes = [ctypes.c_int]
SFR_WRITE = 2



def unit_files(rng: random.Random) -> list[tuple[str, bytes]]:
    """The files of one benchmark unit: name -> bytes (sizes as fsmem writes them)."""
    files = [(f"{rng.getrandbits(128):032x}.txt", rng.randbytes(600)) for _ in range(24)]
    files.append((f"{rng.getrandbits(128):032x}.png", rng.randbytes(200_000)))
    files.append(("manifest.json", rng.randbytes(12_000)))
    return files


def dsync(path: str, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Proto:
    """One candidate: ``run(files)`` stages, flushes, publishes, flushes the name."""

    def __init__(self, base: str, name: str, threads: int = 0) -> None:
        self.name = name
        self.staging = os.path.join(base, name, "staging")
        self.layer = os.path.join(base, name, "layer")
        os.makedirs(self.staging)
        os.makedirs(self.layer)
        self.n = 0
        self.pool = ThreadPoolExecutor(threads) if threads else None

    def _write(self, d: str, files, keep: bool, sync_each: bool) -> list[int]:
        fds = []
        for fname, data in files:
            fd = os.open(os.path.join(d, fname), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            os.write(fd, data)
            if sync_each:
                os.fsync(fd)
            if keep:
                fds.append(fd)
            else:
                os.close(fd)
        return fds

    def run(self, files) -> None:
        self.n += 1
        d = os.path.join(self.staging, f"u{self.n}")
        os.mkdir(d)
        kind = self.name
        if kind.startswith("one-barrier"):   # rename first, then one wave (not a protocol
            # fsmem uses: shows what the second barrier costs)
            fds = self._write(d, files, True, False)
            for fd in fds:
                _libc.sync_file_range(fd, 0, 0, SFR_WRITE)
            dst = os.path.join(self.layer, f"u{self.n}")
            os.rename(d, dst)
            dfds = [os.open(p, os.O_RDONLY | os.O_DIRECTORY) for p in (dst, self.layer)]
            list(self.pool.map(os.fsync, fds + dfds))
            for fd in fds + dfds:
                os.close(fd)
            return
        if kind == "syncfs":
            self._write(d, files, False, False)
            fd = os.open(self.staging, os.O_RDONLY | os.O_DIRECTORY)
            _libc.syncfs(fd)
            os.close(fd)
        elif kind == "fsync-each":
            self._write(d, files, False, True)
            dsync(d)
            dsync(self.staging)
        else:
            fds = self._write(d, files, True, False)
            if "sfr" in kind:
                for fd in fds:
                    _libc.sync_file_range(fd, 0, 0, SFR_WRITE)
            if "dirs" in kind:   # the directories' fsyncs in the same parallel wave
                dfds = [os.open(p, os.O_RDONLY | os.O_DIRECTORY) for p in (d, self.staging)]
                list(self.pool.map(os.fsync, fds + dfds))
                for fd in fds + dfds:
                    os.close(fd)
            else:
                if self.pool is not None:
                    list(self.pool.map(os.fdatasync, fds))
                else:
                    for fd in fds:
                        os.fdatasync(fd)
                for fd in fds:
                    os.close(fd)
                dsync(d)
                if "nostaging" not in kind:
                    dsync(self.staging)
        os.rename(d, os.path.join(self.layer, f"u{self.n}"))
        dsync(self.layer)


def sqlite_side(base: str) -> Callable[[list[tuple[str, bytes]]], None]:
    db = sqlite3.connect(os.path.join(base, "sqlite.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, name TEXT, data BLOB)")

    def commit(files) -> None:
        db.execute("BEGIN")
        for name, data in files:
            db.execute("INSERT INTO blobs(name, data) VALUES (?,?)", (name, data))
        db.execute("COMMIT")
    return commit


CANDIDATES = ["syncfs", "fsync-each", "batch", "batch-sfr", "batch-sfr-nostaging",
              "batch-threads8", "batch-sfr-threads4", "batch-sfr-threads8",
              "batch-sfr-threads8-dirs", "batch-sfr-threads32-dirs", "one-barrier-threads32"]


def _threads(name: str) -> int:
    m = re.search(r"threads(\d+)", name)
    return int(m.group(1)) if m else 0


def measure(base: str, reps: int) -> dict[str, list[float]]:
    rng = random.Random(7)
    sides: dict[str, Callable] = {"sqlite WAL FULL": sqlite_side(base)}
    for name in CANDIDATES:
        sides[name] = Proto(base, name, threads=_threads(name)).run
    return rotate(sides, (unit_files(rng) for _ in range(reps + 1)))


def report(title: str, times: dict[str, list[float]]) -> None:
    sq = statistics.median(times["sqlite WAL FULL"])
    print(f"\n{title} (load {os.getloadavg()[0]:.1f})")
    print(f"{'candidate':<24}{'median ms':>10}{'p95 ms':>10}{'x sqlite':>10}")
    for name, t in times.items():
        med = statistics.median(t)
        p95 = sorted(t)[round(0.95 * (len(t) - 1))]
        print(f"{name:<24}{med * 1000:>10.2f}{p95 * 1000:>10.2f}{med / sq:>10.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--no-noise", action="store_true")
    ap.add_argument("--only", default="", help="comma list of candidates (default: all)")
    args = ap.parse_args()
    if args.only:
        CANDIDATES[:] = args.only.split(",")
    base = tempfile.mkdtemp(prefix="fsmem-bench-sync-", dir=args.dir)
    try:
        os.mkdir(os.path.join(base, "quiet"))
        report("quiet", measure(os.path.join(base, "quiet"), args.reps))
        if args.no_noise:
            return
        os.mkdir(os.path.join(base, "noisy"))
        noise = subprocess.Popen([sys.executable, "-c", NOISE, os.path.join(base, "noise"),
                                  "40"])
        try:
            time.sleep(0.5)
            report("noisy neighbour (40 MB/s + fsync every 4 MB)",
                   measure(os.path.join(base, "noisy"), args.reps))
        finally:
            noise.send_signal(signal.SIGTERM)
            noise.wait(timeout=30)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
