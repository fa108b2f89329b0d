"""Export and import throughput against tar on the same unit directories.

Builds a store of N units (default 10,000: one event of ~600 characters each, every tenth with
a 20 KB image block) in a temporary directory this script creates and removes. Then, for R
rounds (default 3), interleaved:

* ``export_archive`` (snapshot manifests, re-hash every block while copying, fsync the
  archive) against ``tar -cf`` of the same ``context/ documents/ stablemem/`` directories;
* ``import_archive`` into a fresh store (verify everything in staging, one journal entry;
  durability "full": one syncfs before the journal commit) against ``tar -xf`` into a fresh
  directory followed by ``sync -f`` (so both are durable), and ``import_archive`` with
  durability "off" against a bare ``tar -xf``.

Reports the median of each in units/s and MB/s (archive bytes) and the ratios.

Usage: python benchmarks/bench_archive.py [--units N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time

from _data import image, text

from fsmem import MediaAttachment, Memory
from fsmem.ingest.archive import export_archive, import_archive


def build(root: str, units: int) -> None:
    rng = random.Random(3)
    mem = Memory.open(root, durability="off", auto_prune=False)
    for i in range(units):
        atts = [MediaAttachment(data=image(rng, 20_000), mime="image/png")] if i % 10 == 0 else []
        mem.commit(text(rng, 600), summary=f"unit {i}", attachments=atts)
    mem.close()


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def one_round(base: str, src: str, i: int) -> dict[str, float]:
    out: dict[str, float] = {}
    mem = Memory.open(src)
    arc, tarball = f"{base}/a{i}.tar", f"{base}/t{i}.tar"
    out["export"] = timed(lambda: export_archive(mem.store, arc))
    out["tar -cf"] = timed(lambda: subprocess.run(
        ["tar", "-cf", tarball, "-C", src, "context", "documents", "stablemem"], check=True))
    full = Memory.open(f"{base}/full{i}")
    out["import (full)"] = timed(lambda: import_archive(full, arc))
    plain = f"{base}/x{i}"
    os.mkdir(plain)
    out["tar -xf + sync -f"] = timed(lambda: (
        subprocess.run(["tar", "-xf", tarball, "-C", plain], check=True),
        subprocess.run(["sync", "-f", plain], check=True)))
    off = Memory.open(f"{base}/off{i}", durability="off")
    out["import (off)"] = timed(lambda: import_archive(off, arc))
    bare = f"{base}/y{i}"
    os.mkdir(bare)
    out["tar -xf"] = timed(lambda: subprocess.run(["tar", "-xf", tarball, "-C", bare], check=True))
    out["_bytes"] = os.path.getsize(arc)
    out["_tarbytes"] = os.path.getsize(tarball)
    assert len(full.units("documents")) == len(mem.units("documents"))
    for path in (f"{base}/full{i}", f"{base}/off{i}", plain, bare, arc, tarball):
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--units", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="fsmem-bench-archive-")
    try:
        src = f"{base}/src"
        t = timed(lambda: build(src, args.units))
        print(f"built {args.units} units in {t:.1f} s")
        rounds = [one_round(base, src, i) for i in range(args.rounds)]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    mb = med["_bytes"] / 1e6
    print(f"{args.units} units, archive {mb:.1f} MB (tar of the directories "
          f"{med['_tarbytes'] / 1e6:.1f} MB), median of {args.rounds} interleaved rounds")
    for k in ("export", "tar -cf", "import (full)", "tar -xf + sync -f", "import (off)",
              "tar -xf"):
        print(f"{k:>18}: {med[k]:7.2f} s  {args.units / med[k]:8.0f} units/s  "
              f"{mb / med[k]:6.1f} MB/s")
    print(f"ratios: export/tar-cf {med['export'] / med['tar -cf']:.2f}x, "
          f"import full/(tar-xf+sync) {med['import (full)'] / med['tar -xf + sync -f']:.2f}x, "
          f"import off/tar-xf {med['import (off)'] / med['tar -xf']:.2f}x")


if __name__ == "__main__":
    main()
