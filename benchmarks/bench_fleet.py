"""The fleet index (fsmem.fleet) at fleet scale: many stores searched as one in PostgreSQL.

Builds ``--stores`` stores of ``--units`` units each (conversation turns and short notes from
the fixtures' en and zh sessions, 1 in 5 in Chinese; cached under ``--cache``, built once with
durability off), then in the same run:
  * sync throughput: a full initial sync (tables dropped first) and an incremental sync after
    1% of each store's units changed (commits, removes, recalls), in units/s;
  * query latency: ``FleetIndex.search`` (one PostgreSQL query across every store) against
    fsmem's own search summed over the stores (``Memory.open(p, readonly=True).query(text,
    10)`` on each, indexes loaded beforehand), interleaved query by query, median and p95;
  * the size of the units table and its indexes, bytes per unit.
A throw-away PostgreSQL server is started (tests/pg_server.py) unless ``--dsn`` names one.
Usage: python benchmarks/bench_fleet.py [--stores N] [--units N] [--queries N] [--cache DIR]
       [--dsn DSN] [--out docs/BENCHMARKS-fleet.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "tests"))

from fsmem import Event, Memory  # noqa: E402
from fsmem.format.errors import MissingDependency  # noqa: E402

_MARK = ".fsmem-bench-fleet"   # a cache directory holding this file was made by this script
_FIXTURES = REPO / "fixtures"


def _sentences() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"en": [], "zh": []}
    for line in (_FIXTURES / "conversations" / "sessions.jsonl").read_text("utf-8").splitlines():
        s = json.loads(line)
        out.setdefault(s["lang"], []).extend(t["text"] for t in s["turns"])
    for name in ("retrieval", "paraphrase"):
        for line in (_FIXTURES / name / "docs.jsonl").read_text("utf-8").splitlines():
            d = json.loads(line)
            out.setdefault(d["lang"], []).append(d["text"])
    return out


def _unit(rng: random.Random, said: dict[str, list[str]]) -> tuple[list[Event], str]:
    """A conversation turn (input + response) or a short note; 1 in 5 in Chinese."""
    lang = "zh" if rng.random() < 0.2 else "en"
    pick = said[lang]
    if rng.random() < 0.6:
        return [Event(source="user", input=rng.choice(pick)),
                Event(source="agent", role="assistant", response=rng.choice(pick))], ""
    return [Event(source="user", input=rng.choice(pick))], rng.choice(["note", "todo", ""])


def build(cache: Path, stores: int, units: int) -> list[Path]:
    """The stores (built once, kept in ``cache``)."""
    cache.mkdir(parents=True, exist_ok=True)
    (cache / _MARK).touch()
    said = _sentences()
    paths = []
    for i in range(stores):
        path = cache / f"s{units}-{i:04d}"
        done = path / ".built"
        paths.append(path)
        if done.exists():
            continue
        if path.exists():       # a build this script began and did not finish
            shutil.rmtree(path)
        rng = random.Random(i)
        mem = Memory.open(path, durability="off", auto_prune=False)
        for _ in range(units):
            events, summary = _unit(rng, said)
            mem.commit_events(events, summary=summary)
        mem.close()
        done.touch()
        print(f"built {i + 1}/{stores}", file=sys.stderr, flush=True)
    return paths


def change(paths: list[Path], share: float, seed: int) -> int:
    """Change ``share`` of each store's units: half new commits, a quarter removed, a quarter
    recalled into L1. Returns the number of changes."""
    said = _sentences()
    n = 0
    for i, path in enumerate(paths):
        rng = random.Random(seed * 100_003 + i)
        mem = Memory.open(path, durability="off", auto_prune=False)
        docs = mem.units("documents")
        k = max(4, int(len(docs) * share))
        for _ in range(k // 2):
            mem.commit_events(_unit(rng, said)[0])
        for uid in rng.sample(docs, k // 4):
            mem.remove(uid)
        n += k // 2 + k // 4
        for uid in mem.recall(rng.choice(said["en"]), top_k=k - k // 2 - k // 4):
            n += 1
        mem.close()
    return n


def _queries(n: int, seed: int) -> list[str]:
    said = _sentences()
    rng = random.Random(seed)
    out = []
    for i in range(n):
        lang = "zh" if i % 4 == 3 else "en"
        s = rng.choice(said[lang])
        if lang == "zh":
            run = "".join(c for c in s if "\u4e00" <= c <= "\u9fff")
            at = rng.randrange(max(1, len(run) - 4))
            out.append(run[at:at + 4] or "咖啡")
        else:
            words = [w.strip(".,?!;:'\"").lower() for w in s.split() if len(w) > 3]
            out.append(" ".join(rng.sample(words, min(3, len(words)))) or "coffee")
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def run(args: argparse.Namespace) -> tuple[list[str], dict]:
    from fsmem.fleet import FleetIndex
    from fsmem.fleet.schema import UNITS
    paths = build(Path(args.cache), args.stores, args.units)
    server = None
    if not args.dsn:
        from pg_server import PgServer, find_bindir
        bindir = find_bindir()
        if bindir is None:
            raise MissingDependency("no PostgreSQL server installed (initdb not found): "
                                    "apt-get install postgresql, or give --dsn")
        server = PgServer(bindir)
    dsn = args.dsn or server.dsn
    try:
        with FleetIndex(dsn) as idx:
            idx.drop()
            t = time.perf_counter()
            full = idx.sync(paths)
            full_s = time.perf_counter() - t
            rows = full.total("upserted")
            conn = idx.conn
            size = {k: conn.execute(q, (UNITS,)).fetchone()[0] for k, q in (
                ("table", "SELECT pg_table_size(%s)"), ("indexes", "SELECT pg_indexes_size(%s)"),
                ("total", "SELECT pg_total_relation_size(%s)"))}
            gin = dict(conn.execute("SELECT indexrelname, pg_relation_size(indexrelid) FROM "
                                    "pg_stat_user_indexes WHERE relname = %s", (UNITS,)))
            n_changes = change(paths, 0.01, seed=int(time.time()))
            t = time.perf_counter()
            inc = idx.sync(paths)
            inc_s = time.perf_counter() - t
            again_t = time.perf_counter()
            idle = idx.sync(paths)
            idle_s = time.perf_counter() - again_t
            readers = [Memory.open(p, readonly=True) for p in paths]
            t = time.perf_counter()
            for r in readers:
                r.query("warm up", 10, count=False)
            load_s = time.perf_counter() - t
            queries = _queries(args.queries + 1, seed=7)
            lat: dict[str, list[float]] = {"fleet": [], "fsmem": []}
            found = {"fleet": 0, "fsmem": 0}

            def fleet_side(q: str) -> int:
                return len(idx.search(q, limit=10))

            def fsmem_side(q: str) -> int:
                return sum(len(r.query(q, 10, count=False)) for r in readers)
            sides = {"fleet": fleet_side, "fsmem": fsmem_side}
            for i, q in enumerate(queries):
                order = ["fleet", "fsmem"] if i % 2 == 0 else ["fsmem", "fleet"]
                for name in order:
                    t = time.perf_counter()
                    got = sides[name](q)
                    if i:   # the first query warms up
                        lat[name].append(time.perf_counter() - t)
                        found[name] += bool(got)
            for r in readers:
                r.close()
    finally:
        if server is not None:
            server.close()
    units = rows
    res = {
        "stores": len(paths), "units": units, "full_s": full_s, "full_rate": units / full_s,
        "changes": n_changes, "inc_records": inc.total("records"),
        "inc_upserted": inc.total("upserted"), "inc_deleted": inc.total("deleted"),
        "inc_s": inc_s, "idle_s": idle_s, "load_s": load_s,
        "size": size, "gin": gin, "queries": len(queries) - 1, "found": found,
        "lat": {k: (statistics.median(v) * 1e3, _pct(v, 0.95) * 1e3) for k, v in lat.items()},
    }
    return _table(res), res


def _table(r: dict) -> list[str]:
    per = r["size"]["total"] / max(1, r["units"])
    fl, fs = r["lat"]["fleet"], r["lat"]["fsmem"]
    gin = ", ".join(f"{k.replace('fsmem_fleet_units_', '')} {v / 2**20:.1f} MiB"
                    for k, v in sorted(r["gin"].items()))
    touched = r["inc_upserted"] + r["inc_deleted"]
    return [
        f"{r['stores']} stores x {r['units'] // max(1, r['stores'])} units "
        f"({r['units']:,} units); {r['queries']} queries (3 in 4 en, 1 in 4 zh), limit 10.",
        "",
        "| measure | fleet index (PostgreSQL) | fsmem per store, summed | ratio |",
        "|---|---|---|---|",
        f"| full initial sync | {r['full_s']:.1f} s, **{r['full_rate']:,.0f} units/s** | | |",
        f"| incremental sync after 1% changed ({r['changes']:,} changes: "
        f"{r['inc_records']:,} feed records read, {r['inc_upserted']:,} upserted, "
        f"{r['inc_deleted']:,} deleted) | {r['inc_s']:.2f} s, "
        f"**{touched / r['inc_s']:,.0f} units/s** | | |",
        f"| sync with nothing new ({r['stores']} stores) | {r['idle_s'] * 1e3:.0f} ms | | |",
        f"| query, median | **{fl[0]:.2f} ms** | {fs[0]:.2f} ms | {fl[0] / fs[0]:.3f}x |",
        f"| query, p95 | **{fl[1]:.2f} ms** | {fs[1]:.2f} ms | {fl[1] / fs[1]:.3f}x |",
        f"| queries with a hit | {r['found']['fleet']} | {r['found']['fsmem']} | |",
        f"| loading the {r['stores']} per-store indexes first | | {r['load_s']:.1f} s | |",
        f"| units table + indexes | {r['size']['total'] / 2**20:.1f} MiB, "
        f"**{per:,.0f} bytes/unit** (table {r['size']['table'] / 2**20:.1f} MiB; {gin}) | | |",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stores", type=int, default=100)
    ap.add_argument("--units", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "fsmem-bench-fleet"))
    ap.add_argument("--dsn", default="")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    lines, res = run(args)
    print("\n".join(lines))
    if args.out:
        cmd = "python benchmarks/bench_fleet.py " + " ".join(argv if argv is not None
                                                             else sys.argv[1:])
        import platform
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        head = [
            "# Benchmarks: the fleet index (issue 34)", "",
            f"<!-- Generated by `{cmd.strip()}`: do not edit by hand, re-run it. -->", "",
            f"**Generated** by `{cmd.strip()}` on "
            f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC in "
            f"{(time.perf_counter() - t0) / 60:.1f} min.  ",
            f"**Machine:** {os.cpu_count()} CPUs, {mem_gb:.1f} GiB, Linux "
            f"{platform.release()}, Python {platform.python_version()}, PostgreSQL "
            f"{'15 (throw-away server: fsync off, tests/pg_server.py)' if not args.dsn else 'given by --dsn'}.  ",
            f"**Load average** at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}.", "",
            "Both sides in the same run, queries interleaved (the order flips every query). "
            "The fleet side is one SQL query over every store's rows (GIN indexes on the "
            "english tsvector and the CJK bigram tsvector); the fsmem side asks each store's "
            "own index (BM25, in memory after loading) and sums the time, as a caller "
            "searching N stores without a fleet index would. The hit sets differ (tsvector "
            "OR-match ranked by ts_rank against BM25 per store, top 10 over all vs top 10 of "
            "each): this compares cost, not ranking quality. No timing is asserted by any "
            "test.", "", *lines, ""]
        Path(args.out).write_text("\n".join(head), encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
