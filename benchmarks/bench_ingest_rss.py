"""Peak memory of ingesting one huge text file through ``fsmem watch --once``.

Issue 16 item 5: ingesting text used to cost ~45x its size in RAM (100 MB -> 4.7 GB). The inbox
now streams a text file (a scan pass for the digest, UTF-8 and the title; a store pass that
cuts it into units of at most ``fsmem.ingest.inbox.TEXT_PART`` bytes), and between parts it trims the
per-term memo tables (``fsmem.ingest.inbox.trim_term_memos``: a file of distinct tokens, like this one's
numbered paragraphs, filled them to a million entries each), so the working set is bounded
regardless of the file's size; what still grows is the store's in-memory search index (~75 KB
per stored MiB of this text: the index of what is stored, not of the file being read). This benchmark generates a text file (default 500 MB) in a temp directory
it creates and deletes, and measures in the same run, each in a fresh child process:

- ``idle``:   ``watch --once`` on an empty inbox (the same daemon with nothing to do);
- ``cp``:     ``cp`` of the file (what reading and writing the bytes costs at the least);
- ``ingest``: ``watch --once`` ingesting the file.

Peak RSS is ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` read by a small wrapper that
runs only that one child. It checks the stored parts' bytes are the file, and states the bound.

    python benchmarks/bench_ingest_rss.py [--mb 500] [--runs 1] [--dir /tmp/x] [--bound-mb 300]
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

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
BOUND_MB = 300
_WRAP = ("import resource, subprocess, sys, time\n"
         "t = time.perf_counter()\n"
         "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
         "t = time.perf_counter() - t\n"
         "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, t)\n")


def make_text(path: Path, size: int, seed: int = 16) -> None:
    """``size`` bytes of Markdown-ish text: numbered paragraphs from a 3,000-word vocabulary
    (so the index sees realistic term counts), blank lines between paragraphs."""
    rng = random.Random(seed)
    vocab = [f"{rng.choice('bcdfghklmnprstvz')}{rng.choice('aeiou')}"
             f"{rng.choice('bcdfghklmnprstvz')}{rng.choice('aeiou')}{i % 97}" for i in range(3000)]
    pool = [" ".join(rng.choices(vocab, k=rng.randint(20, 80))) for _ in range(4096)]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("# a very large note\n\n")
        written, i = 0, 0
        while written < size:
            para = f"paragraph {i}: {pool[i % len(pool)]}.\n\n"
            fh.write(para)
            written += len(para)
            i += 1


def measure(cmd: list[str]) -> tuple[int, float, float]:
    """(exit code, peak RSS in MB, seconds) of ``cmd`` run as the only child of a wrapper."""
    out = subprocess.run([sys.executable, "-c", _WRAP, *cmd], env=ENV, cwd=str(REPO),
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1]) / 1024, float(out[2])


def new_store(path: Path) -> None:
    subprocess.run([sys.executable, "-c", f"from fsmem import Memory; Memory.open({str(path)!r})"],
                   env=ENV, cwd=str(REPO), check=True)


def check_parts(root: Path, data_path: Path) -> tuple[int, bool]:
    """Number of units, and whether their text blocks in part order are the file's bytes."""
    sys.path.insert(0, str(REPO))
    import blake3
    from fsmem.format.unit import read_manifest
    parts = {}
    for unit in os.listdir(root / "documents"):
        m = read_manifest(str(root / "documents" / unit))
        (ev,) = m.events
        parts[int(ev.id.rsplit("-", 1)[1])] = root / "documents" / unit / (
            ev.blocks[0].digest + ".txt")
    hasher = blake3.blake3()
    for n in sorted(parts):
        hasher.update(parts[n].read_bytes())
    with open(data_path, "rb") as fh:
        want = blake3.blake3()
        while chunk := fh.read(1 << 20):
            want.update(chunk)
    return len(parts), hasher.hexdigest() == want.hexdigest()


def run(base: Path, mb: int, runs: int, bound_mb: int) -> dict:
    data = base / "huge.md"
    t0 = time.perf_counter()
    make_text(data, mb << 20)
    print(f"generated {data.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s",
          flush=True)
    watch = [sys.executable, "-m", "fsmem.watch", "--once", "--json"]
    res: dict[str, list[tuple[float, float]]] = {"idle": [], "cp": [], "ingest": []}
    ok = True
    for r in range(runs):
        idle = base / f"idle-{r}"
        new_store(idle)
        rc, rss, t = measure([*watch, "--root", str(idle)])
        res["idle"].append((rss, t))
        rc, rss, t = measure(["cp", str(data), str(base / "copy.md")])
        os.unlink(base / "copy.md")
        res["cp"].append((rss, t))
        root = base / f"store-{r}"
        new_store(root)
        shutil.copyfile(data, root / "inbox" / "huge.md")  # a file with one name
        rc, rss, t = measure([*watch, "--root", str(root)])
        res["ingest"].append((rss, t))
        units, same = check_parts(root, data)
        ok = ok and rc == 0 and same
        print(f"run {r}: ingest rc={rc} peak {rss:.0f} MB in {t:.1f} s -> {units} units, "
              f"bytes {'identical' if same else 'DIFFER'}", flush=True)
        shutil.rmtree(root)
        shutil.rmtree(idle)
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
           for k, v in res.items()}
    peak = med["ingest"][0]
    return {"file_mb": mb, "runs": runs,
            "peak_rss_mb": {k: round(v[0], 1) for k, v in med.items()},
            "seconds": {k: round(v[1], 2) for k, v in med.items()},
            "ingest_over_idle": round(peak / med["idle"][0], 2),
            "ingest_mb_per_s": round(mb / med["ingest"][1], 1),
            "bound_mb": bound_mb, "within_bound": peak < bound_mb, "stored_bytes_ok": ok}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=500, help="size of the generated text file")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--dir", help="work directory (default: a new temp dir, deleted after)")
    p.add_argument("--bound-mb", type=int, default=BOUND_MB)
    args = p.parse_args()
    made = args.dir is None
    base = Path(tempfile.mkdtemp(prefix="fsmem-rss-")) if made else Path(args.dir)
    if not made:
        base.mkdir(parents=True, exist_ok=False)  # never reuse (or delete) what we did not make
    try:
        result = run(base, args.mb, args.runs, args.bound_mb)
    finally:
        shutil.rmtree(base)  # ours: created above (mkdtemp, or mkdir with exist_ok=False)
    print(json.dumps(result, indent=2))
    print(f"peak RSS ingesting {args.mb} MB of text: {result['peak_rss_mb']['ingest']} MB "
          f"(idle daemon {result['peak_rss_mb']['idle']} MB, cp {result['peak_rss_mb']['cp']} MB); "
          f"bound {args.bound_mb} MB: {'PASS' if result['within_bound'] else 'FAIL'}")
    return 0 if result["within_bound"] and result["stored_bytes_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
