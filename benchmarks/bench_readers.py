"""Readers and snapshots (issue 11), each beside its baseline in the same run.

1. Query latency of a lock-free reader process (``Reader.query``) while the store is idle and
   while a writer process appends (every append prunes), recalls and commits; idle and busy
   blocks are interleaved, medians reported with their ratio.
2. ``fsmem snapshot`` of a store of N units / about S bytes against ``cp -a`` of the same
   store: wall time and bytes written to the filesystem (from ``df`` before/after; blocks
   are hard links in the snapshot).

Usage: python benchmarks/bench_readers.py [--units 10000] [--mb 1000] [--queries 200] [--dir D]
Everything is made inside a temporary directory this script creates and removes (``--dir``:
a parent directory to create it in; the script deletes only what it made).
"""

from __future__ import annotations

import argparse
import json
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

from benchmarks._data import image, text  # noqa: E402
from fsmem import Event, MediaAttachment, Memory, Reader  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

WRITER = r"""
import sys, time
from fsmem import Memory, Event
root, stop = sys.argv[1], sys.argv[2]
import os
mem = Memory.open(root, context_capacity=30, context_protected=10)
i = 0
while not os.path.exists(stop):
    mem.append(Event(source="qq", input=f"busy writer note {i} about the garden", response="ok"))
    if i % 5 == 0:
        mem.recall("garden note", top_k=1)
    if i % 7 == 0:
        mem.commit(f"writer document {i} coffee solar")
    i += 1
print(i)
"""


def build(root: Path, units: int, total_bytes: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    per = max(total_bytes // max(units, 1) - 2000, 0)
    mem = Memory.open(root, durability="off", auto_prune=False)
    for i in range(units):
        atts = [MediaAttachment(data=image(rng, per), mime="image/png")] if per > 64 else []
        mem.commit(text(rng, 400), summary=f"doc {i}", attachments=atts)
    mem.reindex()
    mem.close()


def query_latencies(root: Path, n: int, rng: random.Random) -> list[float]:
    reader = Reader.open(root)
    reader.query("warm up coffee", top_k=10, count=False)
    out = []
    for _ in range(n):
        q = text(rng, 30)
        t0 = time.perf_counter()
        reader.query(q, top_k=10)
        out.append(time.perf_counter() - t0)
    return out


def bench_query(tmp: Path, units: int, queries: int, rounds: int = 3) -> dict:
    root = tmp / "q"
    build(root, units, 0)
    rng = random.Random(3)
    idle, busy, writes = [], [], 0
    for r in range(rounds):
        idle += query_latencies(root, queries, rng)
        stop = tmp / f"stop{r}"
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(stop)],
                                  env={**os.environ, "PYTHONPATH": str(REPO)},
                                  stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        busy += query_latencies(root, queries, rng)
        stop.write_text("")
        out, _ = writer.communicate(timeout=120)
        writes += int(out.strip() or 0)
    shutil.rmtree(root)
    p50_idle, p50_busy = statistics.median(idle), statistics.median(busy)
    return {"units": units, "queries": len(idle), "writer_ops": writes,
            "idle_p50_ms": round(p50_idle * 1e3, 3), "busy_p50_ms": round(p50_busy * 1e3, 3),
            "idle_p95_ms": round(sorted(idle)[int(len(idle) * .95)] * 1e3, 3),
            "busy_p95_ms": round(sorted(busy)[int(len(busy) * .95)] * 1e3, 3),
            "busy_over_idle": round(p50_busy / p50_idle, 2)}


def _used(path: Path) -> int:
    os.sync()
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def bench_snapshot(tmp: Path, units: int, mb: int, rounds: int = 3) -> dict:
    root = tmp / "s"
    build(root, units, mb << 20)
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    snap_t, cp_t, snap_b, cp_b, paused = [], [], [], [], []
    for r in range(rounds):   # interleaved: snapshot, cp -a, snapshot, cp -a, ...
        dest = tmp / f"snap{r}"
        used = _used(tmp)
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "fsmem.cli", "snapshot", "--root",
                              str(root), "--json", str(dest)], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, check=True).stdout
        snap_t.append(time.perf_counter() - t0)
        snap_b.append(_used(tmp) - used)
        paused.append(json.loads(out)["paused_s"])
        copy = tmp / f"cp{r}"
        used = _used(tmp)
        t0 = time.perf_counter()
        subprocess.run(["cp", "-a", str(root), str(copy)], check=True)
        cp_t.append(time.perf_counter() - t0)
        cp_b.append(_used(tmp) - used)
        shutil.rmtree(dest)
        shutil.rmtree(copy)
    shutil.rmtree(root)
    return {"units": units, "store_mb": round(size / 2**20, 1),
            "snapshot_s": round(statistics.median(snap_t), 3),
            "cp_a_s": round(statistics.median(cp_t), 3),
            "snapshot_over_cp": round(statistics.median(snap_t) / statistics.median(cp_t), 3),
            "writer_pause_ms": round(statistics.median(paused) * 1e3, 2),
            "snapshot_mb_written": round(statistics.median(snap_b) / 2**20, 1),
            "cp_a_mb_written": round(statistics.median(cp_b) / 2**20, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=10_000)
    ap.add_argument("--mb", type=int, default=1000)
    ap.add_argument("--query-units", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="fsmem-bench-readers-", dir=args.dir))
    try:
        q = bench_query(tmp, args.query_units, args.queries)
        print(json.dumps({"query": q}), flush=True)
        s = bench_snapshot(tmp, args.units, args.mb)
        print(json.dumps({"snapshot": s}), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
