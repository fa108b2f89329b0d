"""First open of a HomeAgent memory directory of 1,000 documents, against its anchor.

The store (``benchmarks/_homeagent.py``: v1/v2/v3 documents in Go's ``MarshalIndent`` with
their sparse and dense vectors, about 46 MB) is written once. Each side runs in a fresh
process; the time is the child's wall time from the parent (interpreter start included, on
both sides alike):

* ``fsmem open+query``: ``Memory.open(copy)`` + ``mem.query("marker<i>")`` + ``close`` on a
  fresh copy of the bare HomeAgent directory (no ``.fsmem/``: the index is built and saved);
* ``fsmem query (CLI, read-only)``: ``fsmem query --root copy marker<i>`` on a fresh copy
  that ``fsmem init`` made a store (untimed); a read-only query builds the index in memory;
* the anchors: a child that loads the 1,000 JSON files (stdlib ``json``, or ``msgspec``)
  and ranks summary + content + tags + entities + block texts with ``bm25s``.

With ``--base REF`` the same fsmem rows also run on the tree of an older commit (``git
archive`` into the temp dir): before and after in one run; ``--tree NAME=DIR`` adds any
other fsmem tree (a merge, a variant). Rounds are interleaved, the order
of the sides rotating by one each round (one warm-up round untimed); every side must return
the marker's document first, so a broken side cannot look fast. The table gives wall-time
medians (p95), the children's CPU time (user + system: steadier on a shared machine), and the
ratio of each row to each anchor. Nothing here asserts a timing.

Usage: python benchmarks/bench_legacy_open.py [--docs 1000] [--reps 7] [--base REF]
                                              [--tree NAME=DIR ...] [--no-cli]
                                              [--dir PARENT] [--json]
Needs ``bm25s`` (a benchmark-only dependency: ``pip install bm25s``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _homeagent import make_homeagent_store, marker  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

API = """\
import json, sys, time
t0 = time.perf_counter()
from fsmem import Memory
mem = Memory.open(sys.argv[1])
hits = mem.query(sys.argv[2], top_k=3)
mem.close()
print(json.dumps({"top": hits[0].unit_id if hits else "", "child_s": time.perf_counter() - t0}))
"""

CLI = "import sys; from {entry} import main; sys.exit(main())"

ANCHOR = """\
import json, os, sys, time
t0 = time.perf_counter()
import bm25s
if sys.argv[3] == "msgspec":
    import msgspec
    loads = msgspec.json.decode
else:
    loads = json.loads
base = os.path.join(sys.argv[1], "documents")
ids, corpus = [], []
for name in sorted(os.listdir(base)):
    if name.endswith(".json"):
        with open(os.path.join(base, name), "rb") as fh:
            d = loads(fh.read())
        ids.append(d["id"])
        corpus.append(" ".join([d.get("summary") or "", d.get("content") or "",
                                " ".join(d.get("tags") or []), " ".join(d.get("entities") or [])]
                               + [b.get("text") or "" for b in d.get("blocks") or []]))
retriever = bm25s.BM25()
retriever.index(bm25s.tokenize(corpus, show_progress=False), show_progress=False)
docs, _ = retriever.retrieve(bm25s.tokenize([sys.argv[2]], show_progress=False), k=3,
                             show_progress=False)
print(json.dumps({"top": ids[int(docs[0][0])], "child_s": time.perf_counter() - t0}))
"""


def entry_module(tree: Path) -> str:
    return ("fsmem.interfaces.cli.main" if (tree / "fsmem/interfaces/cli/main.py").exists()
            else "fsmem.cli")


class Bench:
    def __init__(self, tmp: Path, pristine: Path, ids: list[str]) -> None:
        self.tmp, self.pristine, self.ids = tmp, pristine, ids
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        # both trees' bytecode (and the stdlib's) cached here, filled by the warm-up round
        self.env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        self.n = 0
        self.cpu = 0.0

    def _child(self, tree: Path | None, argv: list[str]) -> tuple[float, dict, str]:
        """Run one child: its wall time (and, in ``self.cpu``, its user + system CPU time:
        steadier than wall time on a shared machine), its last stdout line as JSON."""
        env = dict(self.env)
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, *argv], env=env, cwd=self.tmp,
                           capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
        if p.returncode != 0:
            raise SystemExit(f"child {argv[:2]} exited {p.returncode}:\n{p.stderr[-3000:]}")
        return wall, json.loads(p.stdout.strip().splitlines()[-1]), p.stderr

    def _copy(self) -> Path:
        self.n += 1
        dst = self.tmp / f"run-{self.n}"
        shutil.copytree(self.pristine, dst, symlinks=True)
        return dst

    def api(self, tree: Path, i: int) -> float:
        work = self._copy()
        try:
            wall, out, _ = self._child(tree, ["-c", API, str(work), marker(i)])
        finally:
            shutil.rmtree(work)
        return self._check(wall, out["top"], i)

    def cli(self, tree: Path, i: int) -> float:
        work = self._copy()
        code = CLI.format(entry=entry_module(tree))
        try:
            self._child(tree, ["-c", code, "init", "--root", str(work), "--json"])
            wall, out, _ = self._child(tree, ["-c", code, "query", "--root", str(work),
                                              "--json", marker(i)])
        finally:
            shutil.rmtree(work)
        hits = out if isinstance(out, list) else out.get("hits", [])
        return self._check(wall, hits[0]["unit_id"] if hits else "", i)

    def anchor(self, decoder: str, i: int) -> float:
        wall, out, _ = self._child(None, ["-c", ANCHOR, str(self.pristine), marker(i), decoder])
        return self._check(wall, out["top"], i)

    def _check(self, wall: float, top: str, i: int) -> float:
        if top != self.ids[i]:
            raise SystemExit(f"{marker(i)}: top hit {top!r}, expected {self.ids[i]!r}")
        return wall


def table(stats: dict[str, dict], anchors: list[str]) -> str:
    """Per side: wall median (p95) and CPU median, each with its ratio to each anchor's."""
    short = [a.split(": ")[1].split(" ")[0] for a in anchors]
    width = max(40, *(len(n) + 1 for n in stats))
    head = (f"{'side':<{width}}{'wall ms':>8}{'p95':>7}" + "".join(f"{'/' + s:>9}" for s in short)
            + f"{'cpu ms':>9}" + "".join(f"{'/' + s:>9}" for s in short))
    lines = [head]
    for n, s in stats.items():
        w, c = s["wall"], s["cpu"]
        lines.append(f"{n:<{width}}{w['median_ms']:>8.0f}{w['p95_ms']:>7.0f}"
                     + "".join(f"{w['median_ms'] / stats[a]['wall']['median_ms']:>8.2f}x"
                               for a in anchors)
                     + f"{c['median_ms']:>9.0f}"
                     + "".join(f"{c['median_ms'] / stats[a]['cpu']['median_ms']:>8.2f}x"
                               for a in anchors))
    return "\n".join(lines)


def stat(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"median_ms": statistics.median(s) * 1000,
            "p95_ms": s[min(len(s) - 1, round(0.95 * (len(s) - 1)))] * 1000, "n": len(s)}


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=7, help="timed rounds (after one warm-up)")
    ap.add_argument("--base", default=None, help="also run the fsmem rows on this commit")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                    help="also run the fsmem rows on the fsmem tree in DIR (repeatable)")
    ap.add_argument("--no-cli", action="store_true", help="leave out the CLI rows")
    ap.add_argument("--dir", default=None, help="parent of the temp dir")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        import bm25s  # noqa: F401  (the anchor's; checked before anything is built)
    except ImportError:
        raise SystemExit("the anchor needs bm25s: pip install bm25s") from None
    tmp = Path(tempfile.mkdtemp(prefix="fsmem-bench-legacy-open-", dir=args.dir))
    try:
        ids, size = make_homeagent_store(str(tmp / "homeagent"), args.docs)
        bench = Bench(tmp, tmp / "homeagent", ids)
        trees = {"": REPO}
        if args.base:
            trees[f" @{extract(args.base, tmp / 'base')}"] = tmp / "base"
        for spec in args.tree:
            name, _, where = spec.partition("=")
            if not where or not (Path(where) / "fsmem").is_dir():
                raise SystemExit(f"--tree {spec}: expected NAME=DIR, DIR holding fsmem/")
            trees[f" [{name}]"] = Path(where).resolve()
        sides = {}
        for tag, tree in trees.items():
            sides[f"fsmem open+query{tag}"] = lambda i, t=tree: bench.api(t, i)
            if not args.no_cli:
                sides[f"fsmem query (CLI, read-only){tag}"] = lambda i, t=tree: bench.cli(t, i)
        anchors = {"anchor: json + bm25s": lambda i: bench.anchor("json", i),
                   "anchor: msgspec + bm25s": lambda i: bench.anchor("msgspec", i)}
        sides.update(anchors)
        names = list(sides)
        times: dict[str, list[float]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        load0 = os.getloadavg()
        for r in range(args.reps + 1):   # round 0: warm-up (bytecode, page cache), untimed
            k = r % len(names)
            for j, name in enumerate(names[k:] + names[:k]):
                wall = sides[name]((r * len(names) + j) * 7 % args.docs)
                if r:
                    times[name].append(wall)
                    cpu[name].append(bench.cpu)
        load1 = os.getloadavg()
        stats = {n: {"wall": stat(times[n]), "cpu": stat(cpu[n])} for n in names}
        result = {"docs": args.docs, "mb": round(size / 2**20, 1), "reps": args.reps,
                  "cpus": os.cpu_count(), "load": [round(x, 2) for x in load0 + load1],
                  "python": sys.version.split()[0], "rows": stats}
        if args.json:
            print(json.dumps(result, indent=2))
            return
        print(f"{args.docs} HomeAgent documents, {size / 2**20:.1f} MB of documents/; "
              f"{args.reps} interleaved rounds; load {load0[0]:.2f} -> {load1[0]:.2f} "
              f"on {os.cpu_count()} CPUs")
        print(table(stats, list(anchors)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
