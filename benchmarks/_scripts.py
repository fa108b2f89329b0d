"""The other benchmark scripts, run by the full ``python -m benchmarks`` at moderate sizes.

Each script is its own side-by-side benchmark with its own baseline (readers, agent loop, MCP,
archive, ranking, stable memory, HomeAgent drop-in, the per-size recall table, ...). The
harness runs each in a child process with a time limit and puts its output, verbatim, in the
generated document, so every figure there comes from a script. Scripts owned by other
helpers (eval_heldout.py, bench_embed_commit.py, bench_ingest_rss.py) are run when present.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

from _harness import CHILD_ENV, REPO, Workdir

__all__ = ["SCRIPTS", "Script", "ScriptResult", "run_scripts", "scripts_markdown"]


@dataclass(frozen=True)
class Script:
    name: str
    args: tuple[str, ...]
    what: str
    timeout: float = 360


SCRIPTS = (
    Script("eval_retrieval.py", ("--rankers", "bm25,dense,fusion"),
           "retrieval quality (recall@k, MRR) and Index.search latency on the fixtures"),
    Script("eval_heldout.py", (), "held-out retrieval evaluation", timeout=300),
    Script("bench_ranking.py", (), "analyzer and ranking variants on the fixtures"),
    Script("bench_commit.py", ("--units", "60"), "durable commit under each sync strategy "
           "(batch, syncfs, fsync per file) against SQLite, six writers interleaved"),
    Script("bench_turn_cpu.py", ("--reps", "20"), "CPU per append (durability off and full) "
           "and per durable commit against SQLite WAL OFF/FULL, interleaved (issue 27)"),
    Script("bench_sync.py", ("--reps", "30"), "the barrier protocols a unit's files could use "
           "(raw syscalls) against SQLite, quiet and beside a noisy neighbour"),
    Script("bench_index.py", ("--units", "5000", "--queries", "40"),
           "search at scale: Memory.query, BM25 and dense against their numpy bounds; reindex"),
    Script("bench_recall.py", ("--reps", "5"), "recall against unit size (1 KB / 1 MB / 100 MB)"),
    Script("bench_render.py", ("--runs", "5", "--no-store"),
           "render() against a naive renderer, 10k events (Memory.render: the table above)"),
    Script("bench_readers.py", ("--units", "2000", "--mb", "200", "--query-units", "1000",
                                "--queries", "60"),
           "lock-free query while a writer works; snapshot against cp -a"),
    Script("bench_agent_loop.py", ("--turns", "600"), "the agent loop against the package "
           "before issue 12"),
    Script("bench_mcp.py", ("--units", "500", "--queries", "60"), "MCP round trip of a query"),
    Script("bench_archive.py", ("--units", "1000", "--rounds", "1"), "export/import against tar"),
    Script("bench_stablemem.py", ("--units", "200", "--edges", "30000", "--entities", "6000",
                                  "--queries", "100"), "distillation; graph neighbours vs CTE"),
    Script("bench_legacy.py", ("--docs", "300", "--blobs", "100", "--blob-kb", "200",
                               "--reps", "1"), "HomeAgent drop-in: open and recall"),
    Script("bench_watch.py", ("--files", "2000"), "the watch daemon against the API loop"),
    Script("bench_agents.py", ("--units", "5000", "--rounds", "40"), "a query and an append "
           "in a store of several agents against one agent's store (issue 34)"),
    Script("bench_fleet.py", ("--stores", "100", "--units", "1000", "--queries", "40"),
           "the fleet index in PostgreSQL: sync throughput, fleet search against per-store "
           "search summed over 100 stores (docs/BENCHMARKS-fleet.md; stores cached in /tmp)",
           timeout=900),
    Script("bench_web.py", ("--units", "10000", "--rounds", "20"), "the web view (fsmem "
           "serve): each page over HTTP against the page built in process, the bare Reader "
           "call and a static file of the same size, 10k units", timeout=600),
    Script("bench_embed_commit.py", (), "commit cost with the light embedder", timeout=300),
    Script("bench_ingest_rss.py", (), "ingest memory use", timeout=300),
)
QUICK = ("eval_retrieval.py",)


@dataclass
class ScriptResult:
    name: str
    command: str
    what: str
    status: str
    seconds: float
    output: str


def _run(script: Script) -> ScriptResult:
    cmd = [sys.executable, f"benchmarks/{script.name}", *script.args]
    shown = "python " + " ".join(cmd[1:])
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=str(REPO), env=CHILD_ENV, capture_output=True,
                              text=True, timeout=script.timeout)
        status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
        out = proc.stdout if proc.returncode == 0 else proc.stdout + "\n" + proc.stderr[-3000:]
        if proc.returncode and "MissingDependency" in proc.stderr:   # an optional extra
            status = "skipped: " + proc.stderr.strip().splitlines()[-1].split(": ", 1)[-1]
            out = proc.stdout
    except subprocess.TimeoutExpired as exc:
        status = f"timed out after {script.timeout:.0f} s"
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else \
            (exc.stdout or "")
    return ScriptResult(script.name, shown, script.what, status, time.perf_counter() - t,
                        out.strip())


def run_scripts(wd: Workdir, quick: bool = False) -> list[ScriptResult]:
    """Run every script present (only eval_retrieval.py when ``quick``), one at a time."""
    out = []
    for s in SCRIPTS:
        if quick and s.name not in QUICK:
            continue
        if not os.path.isfile(REPO / "benchmarks" / s.name):
            continue
        print(f"[script {s.name}] ...", file=sys.stderr, flush=True)
        r = _run(s)
        print(f"[script {s.name}] {r.status}, {r.seconds:.0f} s", file=sys.stderr, flush=True)
        out.append(r)
    return out


def scripts_markdown(results: list[ScriptResult]) -> str:
    lines = ["## The other benchmark scripts", "",
             "Run by the same command, one after another, at the sizes shown (smaller than "
             "their defaults so the whole run stays near 20 minutes); their output verbatim. "
             "Each compares against its own baseline in the same run.", ""]
    for r in results:
        lines += [f"### {r.name}: {r.what}", "",
                  f"`{r.command}`: {r.status}, {r.seconds:.0f} s.", "", "```",
                  _tail(r.output, 80), "```", ""]
    return "\n".join(lines)


def _tail(text: str, n: int) -> str:
    lines = text.splitlines()
    if len(lines) <= n:
        return text
    return f"[... {len(lines) - n} earlier lines not shown ...]\n" + "\n".join(lines[-n:])
