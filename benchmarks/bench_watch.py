"""Benchmark of ``fsmem watch``: N small files dropped into the inbox at once.

Measures files/s ingested by the daemon (from the first drop to the last acknowledged file)
and the daemon's peak RSS (VmHWM from /proc/<pid>/status), beside a plain loop committing the
same files through the Python API in one process (durable per commit, and with
``durability="off"`` plus one ``syncfs`` at the end), each with the search index loaded so that
every commit also indexes its unit, as in the daemon.

    python benchmarks/bench_watch.py [--files 10000] [--dir /tmp/bench-watch] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def make_files(n: int) -> dict[str, bytes]:
    return {f"note-{i:06d}.txt": (f"note {i}: the solar panel made {i % 97}.{i % 10} kWh; "
                                  f"the coffee machine valve {i % 13}\n").encode()
            for i in range(n)}


def vm_hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def bench_daemon(base: Path, files: dict[str, bytes]) -> dict:
    root = base / "daemon" / "mem"
    subprocess.run([sys.executable, "-c", f"from fsmem import Memory; Memory.open({str(root)!r})"],
                   env=ENV, cwd=str(REPO), check=True)
    outside = base / "daemon" / "drop"
    outside.mkdir()
    for name, data in files.items():
        (outside / name).write_bytes(data)
    out_path = base / "daemon" / "watch.out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fsmem.watch", "--root", str(root),
                                 "--json"], env=ENV, cwd=str(REPO), stdout=out,
                                stderr=subprocess.DEVNULL)
    while "watching" not in out_path.read_text():
        time.sleep(0.05)
    idle_kib = vm_hwm_kib(proc.pid)
    t0 = time.perf_counter()
    for name in files:  # complete files renamed in: the way a careful writer drops them
        os.rename(outside / name, root / "inbox" / name)
    dropped = time.perf_counter() - t0
    done = 0
    while done < len(files):
        time.sleep(0.1)
        with open(out_path, "rb") as fh:
            done = sum(1 for line in fh if b'"status":"ingested"' in line)
        if proc.poll() is not None:
            raise SystemExit(f"daemon exited with {proc.returncode}")
    elapsed = time.perf_counter() - t0
    hwm = vm_hwm_kib(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    return {"what": "fsmem watch (daemon, group commit)", "files": len(files),
            "seconds": elapsed, "files_per_s": len(files) / elapsed, "peak_rss_mib": hwm / 1024,
            "idle_rss_mib": idle_kib / 1024, "drop_seconds": dropped}


API_LOOP = """
import json, os, sys, time
from fsmem import Memory
from fsmem.format import fsops as _fsops
root, src, durability = sys.argv[1], sys.argv[2], sys.argv[3]
mem = Memory.open(root, durability=durability)
if hasattr(mem, "reconcile"):
    mem.reconcile()  # load the index, so each commit also indexes its unit, as the daemon does
names = sorted(os.listdir(src))
t0 = time.perf_counter()
for name in names:
    with open(os.path.join(src, name), "rb") as fh:
        text = fh.read().decode()
    mem.commit(text, summary=name, source="inbox")
if durability == "off":
    _fsops.syncfs(root)
elapsed = time.perf_counter() - t0
mem.close()
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(json.dumps({"seconds": elapsed, "hwm_kib": hwm}))
"""


def bench_api(base: Path, files: dict[str, bytes], durability: str) -> dict:
    src = base / f"api-{durability}" / "src"
    src.mkdir(parents=True)
    for name, data in files.items():
        (src / name).write_bytes(data)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(API_LOOP),
                        str(base / f"api-{durability}" / "mem"), str(src), durability],
                       env=ENV, cwd=str(REPO), capture_output=True, text=True, check=True)
    res = json.loads(r.stdout)
    what = ("Python API loop, durable per commit" if durability == "full" else
            "Python API loop, durability=off + one syncfs")
    return {"what": what, "files": len(files), "seconds": res["seconds"],
            "files_per_s": len(files) / res["seconds"], "peak_rss_mib": res["hwm_kib"] / 1024}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--dir", help="parent of the work directory (default: the system temp "
                   "directory); the benchmark works in a new directory inside it and removes "
                   "only that")
    p.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    p.add_argument("--skip-api-full", action="store_true",
                   help="skip the slow durable-per-commit API loop")
    args = p.parse_args(argv)
    # Always a fresh directory of our own (inside --dir when given): only it is removed at
    # the end, never --dir itself or anything else in it.
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="bench-watch-", dir=args.dir))
    files = make_files(args.files)
    rows = [bench_daemon(base, files), bench_api(base, files, "off")]
    if not args.skip_api_full:
        rows.append(bench_api(base, files, "full"))
    print(f"\n{args.files} small files ({sum(map(len, files.values())) // args.files} bytes "
          f"each on average), {os.cpu_count()} CPUs, {sys.platform}\n")
    print("| run | files/s | seconds | peak RSS (MiB) |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['what']} | {r['files_per_s']:.0f} | {r['seconds']:.1f} | "
              f"{r['peak_rss_mib']:.0f} |")
    d = rows[0]
    print(f"\ndaemon: idle RSS {d['idle_rss_mib']:.0f} MiB before the drop; the {args.files} "
          f"renames into the inbox took {d['drop_seconds']:.2f} s")
    if args.keep:
        print(f"stores kept in {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
