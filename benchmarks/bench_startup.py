"""CLI start-up time of the working tree beside the tree of an older commit, in one run.

Three commands, each a fresh process, as the installed console script runs them
(``python -c "from <entry> import main; sys.exit(main())" ARGS``, ``PYTHONPATH=<tree>``):
``fsmem --version``, ``fsmem ls --root STORE`` and ``fsmem query --root STORE WORDS`` on one
store of ``--units`` chat-like L2 units built with the working tree (the on-disk format is the
same for both trees). Runs are interleaved (AB, BA, ...) so machine load hits both trees alike;
per command the table shows median and p95 wall time, the ratio new/base of the medians, and
the modules loaded (``fsmem*`` and all, from one untimed ``-X importtime`` run). Nothing here
asserts a timing.

Usage: python benchmarks/bench_startup.py --base REF [--reps 40] [--units 2000] [--json]
REF is extracted with ``git archive`` into a temporary directory (the repository is not
touched) that also holds the store and both trees' bytecode (``PYTHONPYCACHEPREFIX``, so each
tree compiles once, untimed); the script removes only that directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fsmem import Memory  # the working tree's fsmem builds the store

QUERY = "coffee machine descaling weekend"   # every word occurs in the generated text
TOPICS = ["coffee machine descaling filter beans grinder espresso milk",
          "solar panel inverter battery roof output kilowatt",
          "piano lesson teacher scales practice recital",
          "visa appointment embassy passport photo form",
          "cat food vet vaccine litter kitten",
          "weekend plan hiking trail picnic rain forecast",
          "health report blood pressure doctor checkup",
          "train ticket platform delay refund station"]
FILLER = ("the a my your we should could maybe please remind me about tomorrow next week "
          "yesterday again still already done need want check book call buy fix ask").split()


def chat_text(rng: random.Random, chars: int = 250) -> str:
    """A user/assistant exchange of about ``chars`` characters: topic words mixed with filler
    and a few rare tokens, so the index has a skewed vocabulary like real chat."""
    topic = rng.choice(TOPICS).split()
    words: list[str] = ["user:"]
    while sum(len(w) + 1 for w in words) < chars:
        if len(words) == 14:
            words.append("assistant:")
        r = rng.random()
        words.append(rng.choice(topic) if r < 0.45 else rng.choice(FILLER) if r < 0.9
                     else f"{rng.choice(topic)}{rng.randrange(500)}")
    return " ".join(words)[:chars]


def build_store(root: Path, units: int, seed: int = 11) -> None:
    rng = random.Random(seed)
    mem = Memory.open(root, durability="off")
    for i in range(units):
        mem.commit(chat_text(rng), summary=f"chat {i}")
    # Commits do not build the search index, and a read-only `fsmem query` builds a missing
    # one in memory without saving it: without this, every timed query would rebuild the
    # index of all units and the row would measure that, not start-up.
    mem.reindex()
    mem.close()
    if not (root / ".fsmem/index/CURRENT").exists():
        raise SystemExit(f"{root}: no saved search index after reindex")


def entry_module(tree: Path) -> str:
    # the refactor moved the console script's target; the old tree has the flat module
    return ("fsmem.interfaces.cli.main" if (tree / "fsmem/interfaces/cli/main.py").exists()
            else "fsmem.cli")


def run(tree: Path, args: list[str], cwd: Path, importtime: bool = False) -> tuple[float, str]:
    """Run one command of ``tree`` in a fresh process: wall seconds and its stderr."""
    code = f"import sys; from {entry_module(tree)} import main; sys.exit(main())"
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-c", code, *args]
    # Bytecode of both trees (and the stdlib) is cached under the temp dir: the extracted tree
    # has no __pycache__, and with PYTHONDONTWRITEBYTECODE set it would be compiled from source
    # on every run while the working tree reused its own .pyc files. The untimed warm-up runs
    # fill the cache; the repository's __pycache__ is neither read nor written.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(tree), PYTHONPYCACHEPREFIX=str(cwd / "pycache"))
    t0 = time.perf_counter()
    p = subprocess.run(cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{tree}: fsmem {' '.join(args)} exited {p.returncode}\n{p.stderr}")
    return dt, p.stderr


def modules(tree: Path, args: list[str], cwd: Path) -> list[str]:
    """Names of the modules one run imports, from ``-X importtime`` (header line skipped)."""
    _, err = run(tree, args, cwd, importtime=True)
    rows = [ln.rsplit("|", 1)[1].strip() for ln in err.splitlines()
            if ln.startswith("import time:") and "|" in ln]
    return [name for name in rows if name != "imported package"]


def stat(samples: list[float]) -> dict[str, float]:
    xs = sorted(samples)
    return {"median_ms": statistics.median(xs) * 1000,
            "p95_ms": xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))] * 1000}


def extract(ref: str, dest: Path) -> str:
    """``git archive REF | tar -x`` into ``dest``; returns REF's short commit id."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", f"{ref}^{{commit}}"],
                         check=True, capture_output=True, text=True).stdout.strip()
    dest.mkdir()
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", sha], stdout=subprocess.PIPE)
    tar = subprocess.run(["tar", "-x", "-C", str(dest)], check=False, stdin=archive.stdout)
    archive.stdout.close()
    if archive.wait() != 0 or tar.returncode != 0:
        raise SystemExit(f"git archive {ref} | tar -x failed")
    return sha


def bench(ref: str, reps: int, units: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="fsmem-bench-startup-"))
    try:
        base, new, store = tmp / "base", REPO, tmp / "store"
        sha = extract(ref, base)
        build_store(store, units)
        commands = {"--version": ["--version"], "ls": ["ls", "--root", str(store)],
                    "query": ["query", "--root", str(store), QUERY]}
        trees = {"base": base, "new": new}
        # Untimed: each tree's query twice round, so a search index saved by either tree is
        # in step before timing; these and the -X importtime runs below fill the bytecode cache.
        for _ in range(2):
            for tree in trees.values():
                run(tree, commands["query"], tmp)
        loaded = {c: {k: modules(t, a, tmp) for k, t in trees.items()}
                  for c, a in commands.items()}
        samples: dict[str, dict[str, list[float]]] = {c: {"base": [], "new": []}
                                                      for c in commands}
        for i in range(reps):
            order = ("base", "new") if i % 2 == 0 else ("new", "base")
            for c, args in commands.items():
                for k in order:
                    samples[c][k].append(run(trees[k], args, tmp)[0])
        rows = {}
        for c in commands:
            b, n = stat(samples[c]["base"]), stat(samples[c]["new"])
            rows[c] = {"base": b, "new": n, "ratio": n["median_ms"] / b["median_ms"],
                       "modules": {k: {"fsmem": sum(m.startswith("fsmem") for m in ms),
                                       "total": len(ms)} for k, ms in loaded[c].items()}}
        return {"python": platform.python_version(), "base": f"{ref} ({sha})",
                "new": "working tree", "reps": reps, "units": units, "query": QUERY,
                "commands": rows}
    finally:
        shutil.rmtree(tmp)   # only what this run made: the extracted tree, store, bytecode


def table(r: dict) -> str:
    head = ("command", "base med", "base p95", "new med", "new p95", "new/base",
            "fsmem mods b/n", "all mods b/n")
    title = (f"python {r['python']}; base = {r['base']}, new = {r['new']}; "
             f"{r['reps']} interleaved reps, store of {r['units']} units; times in ms")
    lines = [title,
             "  ".join(f"{h:>14}" if i else f"{h:<10}" for i, h in enumerate(head))]
    for c, row in r["commands"].items():
        m = row["modules"]
        cells = [f"{row['base']['median_ms']:.1f}", f"{row['base']['p95_ms']:.1f}",
                 f"{row['new']['median_ms']:.1f}", f"{row['new']['p95_ms']:.1f}",
                 f"{row['ratio']:.2f}", f"{m['base']['fsmem']}/{m['new']['fsmem']}",
                 f"{m['base']['total']}/{m['new']['total']}"]
        lines.append(f"{c:<10}  " + "  ".join(f"{x:>14}" for x in cells))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git commit to compare against")
    ap.add_argument("--reps", type=int, default=40, help="interleaved runs per command and tree")
    ap.add_argument("--units", type=int, default=2000, help="L2 units in the store")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    a = ap.parse_args()
    r = bench(a.base, a.reps, a.units)
    print(json.dumps(r, indent=2) if a.json else table(r))


if __name__ == "__main__":
    main()
