"""The measuring instrument of ``python -m benchmarks``: interleaved timing, rows, the table.

Every side-by-side row times fsmem and its anchor *interleaved*: run i of both happens before
run i+1 of either, and the order alternates (AB, BA, AB ...), so a change in machine load hits
both sides alike. A row reports medians (and p95 where it matters) and the ratio fsmem/anchor
next to the issue's target, marked pass or miss. Nothing here asserts a timing.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = ["REPO", "CHILD_ENV", "Profile", "PROFILES", "Stat", "Row", "Workdir", "interleave",
           "timed", "run_child", "machine", "format_table", "markdown_table", "drop_caches"]

REPO = Path(__file__).resolve().parent.parent
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(REPO), str(REPO / "benchmarks"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
CACHE_MARK = ".fsmem-bench-cache"   # a directory holding this file belongs to the harness


@dataclass(frozen=True)
class Profile:
    """Sizes and repetitions of one run (``--quick``, the full run, and a tiny one for tests)."""

    name: str
    reps: int            # interleaved pairs per in-process row
    child_reps: int      # interleaved pairs per fresh-process row
    open_sizes: tuple[int, ...]
    render_events: int
    watch_files: int
    recall_docs: int
    scripts: bool        # also run the other benchmark scripts (full run only)


PROFILES = {
    "tiny": Profile("tiny", reps=3, child_reps=1, open_sizes=(100,), render_events=300,
                    watch_files=40, recall_docs=40, scripts=False),
    "quick": Profile("quick", reps=25, child_reps=5, open_sizes=(1_000, 5_000),
                     render_events=5_000, watch_files=1_000, recall_docs=300, scripts=False),
    "full": Profile("full", reps=120, child_reps=9, open_sizes=(1_000, 10_000, 100_000),
                    render_events=10_000, watch_files=10_000, recall_docs=2_000, scripts=True),
}


@dataclass
class Stat:
    """Median and p95 of a list of seconds, shown in milliseconds."""

    samples: list[float]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1000 if self.samples else float("nan")

    @property
    def p95_ms(self) -> float:
        if not self.samples:
            return float("nan")
        xs = sorted(self.samples)
        return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))] * 1000


@dataclass
class Row:
    """One line of the table: fsmem against its anchor, with the issue's target.

    ``target_ratio``: pass when median(fsmem)/median(anchor) <= it (``min_ratio``: >= it,
    for throughput rows expressed as anchor time / fsmem time); ``target_ms``: pass when
    fsmem's median is under it. Both may be absent (a row kept for regressions)."""

    group: str
    what: str
    fsmem: Stat
    anchor_what: str
    anchor: Stat | None
    target_ratio: float | None = None
    target_ms: float | None = None
    p95: bool = False
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.anchor is None or not self.anchor.samples or not self.fsmem.samples:
            return None
        return self.fsmem.median_ms / self.anchor.median_ms

    def verdict(self) -> str:
        parts, ok = [], True
        if self.target_ratio is not None:
            parts.append(f"<= {self.target_ratio:g}x")
            ok = ok and self.ratio is not None and self.ratio <= self.target_ratio
        if self.target_ms is not None:
            parts.append(f"< {self.target_ms:g} ms")
            ok = ok and self.fsmem.median_ms < self.target_ms
        if not parts:
            return "(no target)"
        return " and ".join(parts) + (": pass" if ok else ": MISS")


def interleave(sides: dict[str, Callable[[], float]], reps: int, warmup: int = 1
               ) -> dict[str, list[float]]:
    """Run each side ``reps`` times, alternating which goes first; each call returns the
    seconds of its measured part (setup outside it). Warm-up runs are discarded."""
    names = list(sides)
    out: dict[str, list[float]] = {n: [] for n in names}
    for i in range(warmup + reps):
        order = names if i % 2 == 0 else names[::-1]
        for n in order:
            s = sides[n]()
            if i >= warmup:
                out[n].append(s)
    return out


def rotate(sides: dict[str, Callable[[Any], object]], inputs: Iterable[Any]
           ) -> dict[str, list[float]]:
    """Time every side on each input in turn, the order rotating by one side each round (fair
    among many sides, where ``interleave``'s two orders keep the middle ones in the middle).
    The first input warms up and is not recorded."""
    names = list(sides)
    out: dict[str, list[float]] = {n: [] for n in names}
    for i, item in enumerate(inputs):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            t = time.perf_counter()
            sides[n](item)
            if i:
                out[n].append(time.perf_counter() - t)
    return out


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    """A side whose whole call is the measured part."""
    def run() -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    return run


def run_child(code: str, *args: str, timeout: float = 600) -> dict:
    """Run ``code`` in a fresh Python process; it prints one JSON object as its last line."""
    proc = subprocess.run([sys.executable, "-c", code, *args], env=CHILD_ENV, cwd=str(REPO),
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def drop_caches(root: str) -> int:
    """Evict the page cache of every regular file under ``root`` with
    posix_fadvise(POSIX_FADV_DONTNEED): no root privilege needed, but dentries and inodes
    stay cached (only /proc/sys/vm/drop_caches, which needs root, drops those)."""
    n = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | os.O_NOFOLLOW
                             | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += 1
            finally:
                os.close(fd)
    return n


class Workdir:
    """The harness's own directories: a temp dir it creates and removes itself, and, with
    ``--cache DIR``, built stores kept in DIR for the next run. DIR is marked with
    ``.fsmem-bench-cache`` when the harness creates it; a non-empty DIR without the mark is
    refused, and nothing in DIR is ever deleted except entries the harness made there."""

    def __init__(self, parent: str | None = None, cache: str | None = None) -> None:
        if parent:
            os.makedirs(parent, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="fsmem-bench-", dir=parent)
        # Child processes run from compiled bytecode, as an installed fsmem does: kept in the
        # temp dir (removed at the end), even where PYTHONDONTWRITEBYTECODE is set, so a
        # fresh-process row does not time compiling fsmem's lazily imported modules.
        CHILD_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        CHILD_ENV["PYTHONPYCACHEPREFIX"] = os.path.join(self.tmp, "pycache")
        self.cache = None
        if cache:
            cache = os.path.abspath(cache)
            if os.path.isdir(cache) and os.listdir(cache) \
                    and not os.path.isfile(os.path.join(cache, CACHE_MARK)):
                raise SystemExit(f"--cache {cache}: not empty and not marked "
                                 f"{CACHE_MARK}; not using it")
            os.makedirs(cache, exist_ok=True)
            Path(cache, CACHE_MARK).write_text("built stores of python -m benchmarks\n")
            self.cache = cache

    def path(self, name: str) -> str:
        """A fresh path inside the temp dir (removed at the end)."""
        p = os.path.join(self.tmp, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def store(self, name: str, build: Callable[[str], None]) -> str:
        """A built store: from the cache when there, else built (into the cache if any; a
        half-built store is never left under its final name)."""
        base = self.cache or self.tmp
        final = os.path.join(base, name)
        if os.path.isfile(os.path.join(final, ".built")):
            return final
        part = final + ".part"
        if os.path.isdir(part) and os.path.isfile(os.path.join(part, ".fsmem-bench-store")):
            shutil.rmtree(part)   # our own interrupted build
        os.makedirs(part)
        Path(part, ".fsmem-bench-store").write_text("built by python -m benchmarks\n")
        build(os.path.join(part, "mem"))
        Path(part, ".built").write_text("")
        os.rename(part, final)
        return final

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def _git_head() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "fsmem"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + (" (fsmem/ modified)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def _fs_type(path: str) -> str:
    try:
        best = ("", "?")
        with open("/proc/mounts") as fh:
            for line in fh:
                _dev, mnt, fstype = line.split()[:3]
                if path.startswith(mnt) and len(mnt) > len(best[0]):
                    best = (mnt, fstype)
        return best[1]
    except OSError:
        return "?"


def machine(workdir: str) -> dict[str, str]:
    """What the header of the generated document says about the run."""
    mem_gib = "?"
    try:
        with open("/proc/meminfo") as fh:
            mem_gib = f"{int(fh.readline().split()[1]) / 2**20:.0f} GiB"
    except OSError:
        pass
    import numpy
    return {"cpus": str(os.cpu_count()), "memory": mem_gib, "kernel": platform.release(),
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
            "numpy": numpy.__version__, "fs": _fs_type(os.path.realpath(workdir)),
            "commit": _git_head(), "load": " ".join(f"{x:.2f}" for x in os.getloadavg())}


def _fmt(ms: float) -> str:
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def _cells(r: Row) -> list[str]:
    f = _fmt(r.fsmem.median_ms) + (f" (p95 {_fmt(r.fsmem.p95_ms)})" if r.p95 else "")
    if r.anchor is not None:
        a = _fmt(r.anchor.median_ms) + (f" (p95 {_fmt(r.anchor.p95_ms)})" if r.p95 else "")
    else:
        a = "-"
    ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
    return [r.what, f, r.anchor_what, a, ratio, r.verdict(), str(len(r.fsmem.samples))]


HEAD = ["operation", "fsmem ms", "anchor", "anchor ms", "ratio", "target", "n"]


def format_table(rows: list[Row]) -> str:
    """The plain-text table printed on stdout."""
    lines = [_cells(r) for r in rows]
    widths = [max(len(x[i]) for x in [HEAD, *lines]) for i in range(len(HEAD))]
    out = ["  ".join(h.ljust(w) for h, w in zip(HEAD, widths))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(x, widths)) for x in lines]
    return "\n".join(out)


def markdown_table(rows: list[Row]) -> str:
    out = ["| " + " | ".join(HEAD) + " |", "|---|---:|---|---:|---:|---|---:|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |" for r in rows]
    notes = [f"- **{r.what}**: {r.note}" for r in rows if r.note]
    return "\n".join(out + ([""] + notes if notes else []))
