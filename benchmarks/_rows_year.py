"""The rows of ``python -m benchmarks --only year`` (issue 27, point 5: honest benchmarks at
scale), on the year fixture (benchmarks/_year.py), each interleaved with its anchor in one run.

Stores come from ``Workdir.store`` (kept under ``--cache``): ``year1-units-N`` (N one-turn L2
units) and ``year1-events-N`` (N events in units of one session each). Rows that change a
cached store (the "after K changes" rows) undo their change afterwards (the units removed,
the index directory put back as it was), so the cache stays the store it was built as.
Besides the rows, ``SECTIONS`` collects Markdown for the document: build times, disk use,
the first query's hits, and a profile of the open after one change.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import _year
from _harness import (CHILD_ENV, REPO, Profile, Row, Stat, Workdir, interleave, rotate,
                      run_child)

__all__ = ["year_rows", "SECTIONS", "SIZES"]

#: sizes per profile: (unit stores, events store or 0 for none)
SIZES = {"tiny": ((300, 1_000), 3_000), "quick": ((1_000, 10_000), 50_000),
         "full": ((10_000, 100_000), 1_000_000)}
#: fresh-process pairs per row (the harness's child_reps is 9: these rows are noisier, at
#: seconds per pair on a shared machine), and append cycles / commits per in-process row
CHILD_REPS = {"tiny": 1, "quick": 5, "full": 15}
LOOP_REPS = {"tiny": 3, "quick": 25, "full": 60}
SECTIONS: list[str] = []
CAPACITY, PROTECTED = 30, 10     # HomeAgent's defaults (max_context_size, protected count)
CHANGES = (1, 1_000)


# -- stores --------------------------------------------------------------------------------

def _name(what: str, n: int) -> str:
    return f"year{_year.FIXTURE_VERSION}-{what}-{n}"


def units_store(wd: Workdir, n: int) -> str:
    return os.path.join(wd.store(_name("units", n), lambda root: _year._record(
        root, _year.build_units(root, n))), "mem")


def events_store(wd: Workdir, n: int) -> str:
    return os.path.join(wd.store(_name("events", n), lambda root: _year._record(
        root, *_year.build_events(root, n))), "mem")


def _build_seconds(root: str) -> str:
    try:
        return Path(os.path.dirname(root), "build-seconds").read_text().split()[0]
    except (OSError, IndexError):
        return "?"


def _stored(wd: Workdir, what: str, n: int) -> str:
    """The store, built now if it is not cached; the build time goes into the document."""
    name = _name(what, n)
    cached = os.path.isfile(os.path.join(wd.cache or wd.tmp, name, ".built"))
    root = units_store(wd, n) if what == "units" else events_store(wd, n)
    _BUILDS[(what, n)] = (_build_seconds(root), not cached)
    return root


_BUILDS: dict[tuple[str, int], tuple[str, bool]] = {}


def _settle(root: str, query: str = _year.FIRST_QUERY) -> None:
    """A valid saved index, in step with documents/ (SEEN written): open, query, close."""
    from fsmem import Memory
    time.sleep(0.1)   # SEEN needs the listing to start well after the last change's mtime
    mem = Memory.open(root, auto_prune=False)
    try:
        mem.query(query, 3, count=False)
        if getattr(mem.index, "_unsaved", 0):   # (a private count: absent, nothing owed)
            mem.index.save()
    finally:
        mem.close()


# -- open + first query -------------------------------------------------------------------------

OPEN_QUERY = """
import json, os, sys, time
from fsmem import Memory
import numpy, msgspec
t = time.perf_counter()
c = time.process_time()
mem = Memory.open(sys.argv[1])
hits = mem.query(sys.argv[2], top_k=10)
s, cpu = time.perf_counter() - t, time.process_time() - c
top = []
words = [w.lower() for w in sys.argv[2].split()]
for h in hits[:3]:   # the best matching event of each hit, around the first query word in it
    doc = mem.document(h.unit_id)
    evs = [e for e in doc.events if e.id in h.events_matched[:1]] or doc.events[:1]
    text = evs[0].input if evs else ""
    at = min([i for i in (text.lower().find(w) for w in words) if i >= 0] or [0])
    top.append([h.unit_id, round(h.score, 3), text[max(0, at - 40):at + 60]])
print(json.dumps({"s": s, "cpu": cpu, "n": len(hits), "top": top}))
sys.stdout.flush()
os._exit(0)   # no close: an index save at close would change the state the next run sees
"""

OPEN_MMAP = """
import json, os, sys, time
import numpy as np, msgspec
t = time.perf_counter()
d = sys.argv[1]
with open(os.path.join(d, "CURRENT")) as fh:
    gen = os.path.join(d, fh.read().strip())
with open(os.path.join(gen, "meta.json"), "rb") as fh:
    meta = msgspec.json.decode(fh.read())
arrays = [np.load(os.path.join(gen, f), mmap_mode="r") for f in sorted(os.listdir(gen))
          if f.endswith(".npy")]
s = time.perf_counter() - t
print(json.dumps({"s": s, "n": meta["units"]}))
"""

PROFILE = """
import cProfile, io, json, os, pstats, sys, time
from fsmem import Memory
import numpy, msgspec
pr = cProfile.Profile()
t = time.perf_counter()
pr.enable()
mem = Memory.open(sys.argv[1])
hits = mem.query(sys.argv[2], top_k=10)
pr.disable()
s = time.perf_counter() - t
out = io.StringIO()
st = pstats.Stats(pr, stream=out)
st.sort_stats("cumulative").print_stats(32)
tot = io.StringIO()
pstats.Stats(pr, stream=tot).sort_stats("tottime").print_stats(15)
print(json.dumps({"s": s, "cum": out.getvalue(), "tot": tot.getvalue()}))
sys.stdout.flush()
os._exit(0)
"""


def _index_dir(root: str) -> str:
    return os.path.join(root, ".fsmem", "index")


def _open_pair(root: str, query: str, reps: int, before: Callable[[], None] = lambda: None
               ) -> tuple[dict[str, list[float]], dict]:
    """Fresh-process open + first query vs mmap + meta, interleaved; ``before`` runs (not
    timed) before every fsmem child. Returns the samples and the last child's output."""
    idx = _index_dir(root)
    last: dict = {}

    def fsmem() -> float:
        before()
        out = run_child(OPEN_QUERY, root, query)
        last.update(out)
        return out["s"]
    res = interleave({"fsmem": fsmem, "mmap": lambda: run_child(OPEN_MMAP, idx)["s"]}, reps)
    return res, last


def _hits_line(what: str, query: str, out: dict) -> str:
    top = "; ".join(f"`{u}` {sc}: {txt!r}" for u, sc, txt in out.get("top", []))
    return f"- {what}: query {query!r}, {out.get('n', 0)} hits; top 3: {top}"


class _Pinned:
    """The index directory of a store as it is now, kept aside and put back before every
    measured run (and at the end): each run then finds the same saved index."""

    def __init__(self, root: str, aside: str) -> None:
        self.idx, self.aside = _index_dir(root), aside
        shutil.copytree(self.idx, aside, symlinks=True)
        self.sig = self._sig(aside)

    @staticmethod
    def _sig(d: str) -> tuple:
        return tuple(sorted((n, os.stat(os.path.join(d, n)).st_mtime_ns) for n in os.listdir(d)))

    restored = 0   # runs after which the index directory had changed (a save)

    def restore(self) -> None:
        if self._sig(self.idx) != self.sig:
            self.restored += 1
            shutil.rmtree(self.idx)   # the store's derived index (ours): put back as pinned
            shutil.copytree(self.aside, self.idx, symlinks=True)
            self.sig = self._sig(self.idx)

    def drop(self) -> None:
        shutil.rmtree(self.aside, ignore_errors=True)


CHANGE = """
import json, sys
sys.path.insert(0, sys.argv[3])
import _year
from fsmem import Memory
root, k = sys.argv[1], int(sys.argv[2])
mem = Memory.open(root, durability="off", auto_prune=False)   # never loads the index
ids = [mem.commit_events([_year._event(t)], meta={"session": t.session})
       for t in _year.turns(k, seed=_year.SEED + 99)]
mem.close()
print(json.dumps({"ids": ids}))
"""

UNDO = """
import json, sys
from fsmem import Memory
mem = Memory.open(sys.argv[1], durability="off", auto_prune=False)
for uid in json.loads(open(sys.argv[2]).read()):
    mem.remove(uid)
mem.close()
print(json.dumps({"ok": 1}))
"""


def _with_changes(wd: Workdir, root: str, k: int, run: Callable[[_Pinned], None]) -> None:
    """``k`` commits by another process (one that never loads the index, so the saved one
    is left as it was), ``run`` measured on that state, then undone: the units removed by
    another such process, the index put back, settled."""
    _settle(root)
    pin = _Pinned(root, wd.path(f"pinned-{k}-{time.time_ns()}"))
    bench = str(Path(__file__).resolve().parent)
    ids = run_child(CHANGE, root, str(k), bench, timeout=3600)["ids"]
    try:
        if pin._sig(pin.idx) != pin.sig:
            raise RuntimeError("the changing process touched the index")
        run(pin)
    finally:
        listing = wd.path(f"undo-{k}-{time.time_ns()}.json")
        Path(listing).write_text(json.dumps(ids))
        run_child(UNDO, root, listing, timeout=3600)
        pin.restore()
        pin.drop()
        _settle(root)


def open_rows(wd: Workdir, prof: Profile, sizes: tuple[int, ...], events: int) -> list[Row]:
    reps = CHILD_REPS[prof.name]
    q = _year.FIRST_QUERY
    rows: list[Row] = []
    hits: list[str] = []
    stores = [(f"{n} units", n, _stored(wd, "units", n)) for n in sizes]
    if events:
        stores.append((f"{events} events in session units", events,
                       _stored(wd, "events", events)))
    one_change: dict[int, float] = {}
    noted = False
    for label, n, root in stores:
        _settle(root)
        res, out = _open_pair(root, q, reps)
        hits.append(_hits_line(f"valid index, {label}", q, out))
        if n == sizes[-1] or "events" in label:
            SECTIONS.append(_profile_section(root, q, label, "with a valid index"))
        rows.append(Row("year", f"open + first query, valid index, {label}, fresh process",
                        Stat(res["fsmem"]), "mmap the index arrays + read meta",
                        Stat(res["mmap"]), target_ms=100,
                        note="timed inside the child after its imports: Memory.open(root) "
                             "and the first Memory.query(top_k=10) (its hits are listed "
                             "below the table); the anchor maps every .npy of the current "
                             "generation and decodes meta.json" if not rows else ""))
        for k in CHANGES:
            if k > 1 and "events" in label:
                continue   # the events store: the 1-change row only
            got: dict = {}

            def measure(pin: _Pinned, root=root, got=got) -> None:
                before = pin.restored
                r, o = _open_pair(root, q, reps, before=pin.restore)
                pin.restore()
                got.update(res=r, out=o, saved=pin.restored - before)
                if k == 1 and n == sizes[-1]:
                    SECTIONS.append(_profile_section(root, q, label, "after 1 change"))
            _with_changes(wd, root, k, measure)
            r = got["res"]
            if k == 1 and "units" in label:
                one_change[n] = Stat(r["fsmem"]).median_ms
            hits.append(_hits_line(f"after {k} change(s), {label}", q, got["out"]))
            last = k == 1 and n == sizes[-1] and "units" in label
            rows.append(Row("year", f"open + first query after {k} change{'s' * (k > 1)} by "
                            f"another process, {label}, fresh process", Stat(r["fsmem"]),
                            "mmap the index arrays + read meta", Stat(r["mmap"]),
                            target_ratio=2 if last else None,
                            note=(f"{k} commits by another process since the index was saved "
                                  "(that process never loaded the index); before each run "
                                  "the saved index is put back as it was, so every run sees "
                                  f"the same {k} unindexed unit(s)" if not noted else "")
                            + (f"{'; ' if not noted else ''}the first query also saved a new "
                               f"index generation in {got['saved']} of {reps + 1} runs (the "
                               f"save threshold: max(64, units / 20) unsaved changes)"
                               if got["saved"] else "")))
            noted = True
    if len(sizes) >= 2 and sizes[0] in one_change and sizes[-1] in one_change:
        a, b = one_change[sizes[0]], one_change[sizes[-1]]
        g = math.log(b / a) / math.log(sizes[-1] / sizes[0])
        verdict = "pass" if g <= 0.1 else "MISS"
        line = (f"growth exponent of open + first query after 1 change, {sizes[0]} -> "
                f"{sizes[-1]} units: log({b:.1f} ms / {a:.1f} ms) / log({sizes[-1]} / "
                f"{sizes[0]}) = {g:.2f} (target <= 0.1: {verdict})")
        print(line, file=sys.stderr, flush=True)
        for r in rows:
            if f"after 1 change by another process, {sizes[-1]} units" in r.what:
                r.note = (r.note + "; " if r.note else "") + line
    SECTIONS.append("## The first query's hits\n\n" + "\n".join(hits))
    return rows


def _profile_section(root: str, q: str, label: str, state: str) -> str:
    out = run_child(PROFILE, root, q)
    return (f"## Profile: open + first query {state}, {label}\n\n"
            f"cProfile in a fresh child process (its imports done first), in the state of "
            f"the row; {out['s'] * 1000:.0f} ms under the "
            "profiler. Top functions by cumulative time, then by own time:\n\n"
            "```\n" + _trim(out["cum"]) + "\n```\n\n```\n" + _trim(out["tot"]) + "\n```")


def _trim(stats: str) -> str:
    lines = [ln.rstrip() for ln in stats.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.lstrip().startswith(("Ordered by", "List reduced"))]
    return "\n".join(ln.replace(str(REPO) + "/", "") for ln in keep)


# -- query CPU vs bm25s -------------------------------------------------------------------------

def _bm25s_index(texts: list[str]):
    import bm25s
    import snowballstemmer   # the stemmer fsmem's analyzer uses (PyStemmer's C code if there)
    stem = snowballstemmer.stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False),
                    show_progress=False)

    def search(q: str):
        toks = bm25s.tokenize([q], stopwords="en", stemmer=stem, return_ids=False,
                              show_progress=False)
        if not toks[0]:
            return None
        return retriever.retrieve(toks, k=10, show_progress=False, n_threads=1)
    return search


def query_rows(wd: Workdir, prof: Profile, n: int) -> list[Row]:
    from fsmem import Memory
    root = _stored(wd, "units", n)
    _settle(root)
    texts = [_year.unit_text(t) for t in _year.turns(n)]
    t = time.perf_counter()
    bm = _bm25s_index(texts)
    built = time.perf_counter() - t
    del texts
    qs = _year.queries(prof.reps + 1)
    mem = Memory.open(root)
    mem.query(qs[0], 10)   # the index loaded and its arrays checked: a running agent's state
    cpu: dict[str, list[float]] = {"fsmem": [], "bm25s": []}

    def side(name: str, fn: Callable[[str], object]) -> Callable[[], float]:
        it = iter(qs)

        def run() -> float:
            q = next(it)
            t, c = time.perf_counter(), time.process_time()
            fn(q)
            cpu[name].append(time.process_time() - c)
            return time.perf_counter() - t
        return run
    try:
        wall = interleave({"fsmem": side("fsmem", lambda q: mem.query(q, 10)),
                           "bm25s": side("bm25s", bm)}, prof.reps)
    finally:
        mem.close()
    cpu = {k: v[1:] for k, v in cpu.items()}   # the warm-up pair out, as interleave does
    note = (f"{len(qs) - 1} queries of 2-4 fixture words (1 in 8 Chinese); fsmem: "
            "Memory.query top-10 (bm25, its access logged) on a Memory kept open; bm25s "
            f"{_version('bm25s')}: tokenize (stop words en, the same Snowball stemmer) + "
            f"retrieve k=10, one thread, index built once in {built:.0f} s from the same "
            "texts; CPU = time.process_time() around each call (all threads)")
    return [Row("year", f"query CPU, {n} units", Stat(cpu["fsmem"]), "bm25s CPU, same texts",
                Stat(cpu["bm25s"]), target_ratio=1.5, p95=True, note=note),
            Row("year", f"query wall time, {n} units", Stat(wall["fsmem"]),
                "bm25s wall time, same queries", Stat(wall["bm25s"]), p95=True)]


def _version(mod: str) -> str:
    try:
        from importlib.metadata import version
        return version(mod)
    except Exception:   # noqa: BLE001 - only a label
        return "?"


# -- per-turn append and durable commit -----------------------------------------------------------

def _sqlite(path: str, sync: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={sync}")
    return db


def _sqlite_l1(db: sqlite3.Connection, keep: int) -> Callable[[object], None]:
    """Insert one event into L1; over capacity, move the oldest down to ``keep`` (a layer
    column update), one transaction."""
    db.executescript("""
        CREATE TABLE events(id INTEGER PRIMARY KEY, layer INT, ts INT, session TEXT,
                            source TEXT, input TEXT);
        CREATE INDEX ev_layer ON events(layer, ts);""")

    def append(ev) -> None:
        db.execute("BEGIN")
        db.execute("INSERT INTO events(layer, ts, session, source, input) VALUES (1,?,?,?,?)",
                   (ev.timestamp.ns, "", ev.source, ev.input))
        n = db.execute("SELECT count(*) FROM events WHERE layer=1").fetchone()[0]
        if n > CAPACITY:
            db.execute("UPDATE events SET layer=2 WHERE id IN (SELECT id FROM events "
                       "WHERE layer=1 ORDER BY ts LIMIT ?)", (n - keep,))
        db.execute("COMMIT")
    return append


def append_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """``Memory.append`` of one fixture turn into a full L1 (HomeAgent's capacity 30/10, the
    default watermark), durable and off, vs SQLite WAL FULL/OFF; wall and process CPU. A
    sample is one prune cycle of appends (capacity - watermark + 1... ), given per append."""
    from fsmem import Memory
    from fsmem.memory.prune import watermark
    keep = watermark(CAPACITY, PROTECTED, context_tokens=None)
    cycle = CAPACITY + 1 - keep          # appends from one prune to the next
    reps = LOOP_REPS[prof.name]
    stream = [_year._event(t) for t in _year.turns(CAPACITY + cycle * (reps + 1), seed=31)]
    rows = []
    for durability, sync in (("full", "FULL"), ("off", "OFF")):
        base = os.path.dirname(wd.path(f"year-append-{durability}/x"))
        mem = Memory.open(os.path.join(base, "fsmem"), durability=durability,
                          context_capacity=CAPACITY, context_protected=PROTECTED)
        sq = _sqlite_l1(_sqlite(os.path.join(base, "sqlite.db"), sync), keep)
        for ev in stream[:CAPACITY]:
            mem.append(ev)
            sq(ev)
        cpu: dict[str, list[float]] = {"fsmem": [], "sqlite": []}

        def side(name: str, fn) -> Callable[[], float]:
            events = iter(stream[CAPACITY:])

            def run() -> float:
                batch = [next(events) for _ in range(cycle)]
                t, c = time.perf_counter(), time.process_time()
                for ev in batch:
                    fn(ev)
                cpu[name].append((time.process_time() - c) / cycle)
                return (time.perf_counter() - t) / cycle
            return run
        try:
            wall = interleave({"fsmem": side("fsmem", mem.append),
                               "sqlite": side("sqlite", sq)}, reps)
        finally:
            mem.close()
        cpu = {k: v[1:] for k, v in cpu.items()}
        label = "durable" if durability == "full" else "durability off"
        note = (f"capacity {CAPACITY}/{PROTECTED}, watermark {keep} (the default token "
                f"budget): L1 full, every {cycle}th append prunes {cycle} events into L2 "
                "(ranked by relevance); a sample is one such cycle of "
                f"{cycle} appends, given per append; SQLite inserts the same text and moves "
                "the oldest rows down to the same watermark (a layer column), one "
                "transaction per append" if durability == "full" else "")
        rows.append(Row("year", f"per-turn append, L1 full, {label}: wall", Stat(wall["fsmem"]),
                        f"SQLite WAL synchronous={sync}: wall", Stat(wall["sqlite"]),
                        target_ratio=3 if durability == "full" else None, p95=True,
                        note=note))
        rows.append(Row("year", f"per-turn append, L1 full, {label}: process CPU",
                        Stat(cpu["fsmem"]), f"SQLite WAL synchronous={sync}: process CPU",
                        Stat(cpu["sqlite"]), target_ratio=5 if durability == "off" else None,
                        p95=True))
    return rows


def commit_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """Durable commit of 10 fixture events + one 200 KB image vs SQLite FULL, one transaction."""
    import random

    from _data import image, sqlite_commit

    from fsmem import MediaAttachment, Memory
    reps = 2 * LOOP_REPS[prof.name]
    rng = random.Random(17)
    evs = [_year._event(t) for t in _year.turns(10 * (reps + 1), seed=41)]
    units = []
    for i in range(reps + 1):
        ten = evs[10 * i:10 * i + 10]
        ten[0] = type(ten[0])(timestamp=ten[0].timestamp, source=ten[0].source,
                              input=ten[0].input, attachments=[
                                  MediaAttachment(data=image(rng, 200_000), mime="image/png")])
        units.append(ten)
    base = os.path.dirname(wd.path("year-commit/x"))
    mem = Memory.open(os.path.join(base, "fsmem"), auto_prune=False)
    mem.index   # loaded, as in a running agent: each commit also indexes its unit
    sq = sqlite_commit(_sqlite(os.path.join(base, "sqlite.db"), "FULL"))

    def side(fn) -> Callable[[], float]:
        it = iter(units)

        def run() -> float:
            u = next(it)
            t = time.perf_counter()
            fn(u)
            return time.perf_counter() - t
        return run
    try:
        res = interleave({"fsmem": side(mem.commit_events), "sqlite": side(sq)}, reps)
    finally:
        mem.close()
    return [Row("year", "durable commit, 10 events + 200 KB image", Stat(res["fsmem"]),
                "SQLite WAL FULL, one transaction", Stat(res["sqlite"]), target_ratio=2,
                p95=True, note="Memory.commit_events (index loaded) of 10 fixture turns, the "
                "first with a 200 KB PNG attachment; SQLite inserts the unit, its events and "
                "the blob (benchmarks/_data.sqlite_commit)")]


# -- CLI --------------------------------------------------------------------------------------

def _fsmem_cmd() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "fsmem")
    return [exe] if os.path.isfile(exe) else [sys.executable, "-m", "fsmem.cli"]


def cli_rows(wd: Workdir, prof: Profile, n: int) -> list[Row]:
    root = _stored(wd, "units", n)
    _settle(root)
    fs = _fsmem_cmd()
    q = _year.FIRST_QUERY

    def ok(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=CHILD_ENV, cwd=str(REPO), capture_output=True,
                              timeout=600)
    query = [*fs, "--root", root, "query", q, "--top-k", "10"]
    ls = [*fs, "--root", root, "ls", "--limit", "20"]
    ls_what, ls_note = "fsmem ls --limit 20", "the first 20 units"
    if ok(ls).returncode != 0:   # no --limit on this build: the whole listing, named so
        ls, ls_what, ls_note = [*fs, "--root", root, "ls"], "fsmem ls (all units)", (
            "`fsmem ls --limit 20` is a usage error on this build (no such option): this "
            f"row times `fsmem ls`, which lists all {n} units; the row becomes `ls --limit "
            "20` on a build that has the option")
    chk = ok(query)
    if chk.returncode != 0:
        raise RuntimeError(f"fsmem query: exit {chk.returncode}: {chk.stderr[-500:]!r}")
    sides = {"query": lambda _: ok(query), "ls": lambda _: ok(ls),
             "pass": lambda _: ok([sys.executable, "-c", "pass"])}
    res = rotate(sides, range(CHILD_REPS[prof.name] + 1))
    return [Row("year", f"fsmem query (CLI, process wall time), {n} units", Stat(res["query"]),
                "python -c pass", Stat(res["pass"]),
                note="a fresh `fsmem --root R query TEXT --top-k 10` (read-only: the saved "
                     "index, valid)"),
            Row("year", f"{ls_what} (CLI, process wall time), {n} units",
                Stat(res["ls"]), "python -c pass", Stat(res["pass"]), note=ls_note)]


# -- disk use ---------------------------------------------------------------------------------

def _du(path: str) -> tuple[int, int, int]:
    """(allocated bytes, apparent bytes, files) under ``path``, directories included."""
    alloc = size = files = 0
    for d, dirs, fs in os.walk(path):
        for name in fs + dirs:
            try:
                st = os.lstat(os.path.join(d, name))
            except OSError:
                continue
            alloc += st.st_blocks * 512
            size += st.st_size
            files += name in fs
    return alloc, size, files


def disk_section(wd: Workdir, n: int, events: int) -> None:
    root = _stored(wd, "units", n)
    _settle(root)
    idx = _du(_index_dir(root))
    gens = [g for g in os.listdir(_index_dir(root)) if g.startswith("gen-")]
    whole = _du(root)
    texts = [_year.unit_text(t) for t in _year.turns(n)]
    text_bytes = sum(len(t.encode()) for t in texts)
    db_path = wd.path("year-fts5/fts.db")
    db = sqlite3.connect(db_path)
    db.executescript("""
        CREATE TABLE content(id INTEGER PRIMARY KEY, session TEXT, ts INTEGER, body TEXT);
        CREATE VIRTUAL TABLE fts USING fts5(body, content='content', content_rowid='id',
                                            tokenize='porter unicode61');""")
    with db:
        for t, body in zip(_year.turns(n), texts):
            cur = db.execute("INSERT INTO content(session, ts, body) VALUES (?,?,?)",
                             (t.session, t.ts_ns, body))
            db.execute("INSERT INTO fts(rowid, body) VALUES (?, ?)", (cur.lastrowid, body))
    db.execute("INSERT INTO fts(fts) VALUES('optimize')")
    db.commit()
    db.execute("VACUUM")
    fts_idx = sum(r[0] for r in db.execute(
        "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'fts%'")) if _has_dbstat(db) else None
    db.close()
    sq = os.path.getsize(db_path)
    lines = [f"## Disk use, {n} one-turn units ({n} events, {text_bytes / 2**20:.1f} MB of "
             "text as UTF-8)", "",
             "Allocated bytes (st_blocks; what `du` counts, 4 KB per small file on this "
             "filesystem) and apparent bytes (file sizes), per event.", "",
             "| what | allocated | per event | apparent | per event | files |",
             "|---|---:|---:|---:|---:|---:|",
             _du_row(f"fsmem `.fsmem/index/` ({len(gens)} generation(s) present)", idx, n),
             _du_row("fsmem whole store (units, blocks, manifests, index, logs)", whole, n),
             _du_row("SQLite: content table + FTS5 (external content, porter unicode61), "
                     "one file after optimize + VACUUM", (sq, sq, 1), n)]
    if fts_idx is not None:
        lines.append(_du_row("SQLite: of which the FTS5 index tables", (fts_idx, fts_idx, 0), n))
    cur = Path(_index_dir(root), "CURRENT").read_text().strip()
    files = sorted(((os.path.getsize(os.path.join(_index_dir(root), cur, f)), f)
                    for f in os.listdir(os.path.join(_index_dir(root), cur))), reverse=True)
    lines += ["", f"The current generation `{cur}` by file (bytes per event): " + ", ".join(
        f"`{f}` {b / n:.0f}" for b, f in files if b / n >= 1) + "."]
    lines += ["", "SQLite's unicode61 tokenizer keeps a run of CJK characters as one token; "
              "fsmem indexes CJK unigrams and bigrams, adjacent word pairs, numbers and "
              "dates (README, Search), so the two indexes do not hold the same terms."]
    lines += ["", f"Ratios: fsmem index / SQLite file {idx[0] / sq:.2f}x allocated, "
              f"{idx[1] / sq:.2f}x apparent; fsmem whole store / SQLite file "
              f"{whole[0] / sq:.2f}x allocated, {whole[1] / sq:.2f}x apparent."]
    if events:
        er = _stored(wd, "events", events)
        e_idx, e_whole = _du(_index_dir(er)), _du(er)
        lines += ["", f"The {events}-event store (units of one session each):", "",
                  "| what | allocated | per event | apparent | per event | files |",
                  "|---|---:|---:|---:|---:|---:|",
                  _du_row("fsmem `.fsmem/index/`", e_idx, events),
                  _du_row("fsmem whole store", e_whole, events)]
    SECTIONS.append("\n".join(lines))


def _has_dbstat(db: sqlite3.Connection) -> bool:
    try:
        db.execute("SELECT 1 FROM dbstat LIMIT 1").fetchall()
        return True
    except sqlite3.Error:
        return False


def _du_row(what: str, du: tuple[int, int, int], n: int) -> str:
    a, s, f = du
    return (f"| {what} | {a / 2**20:.1f} MB | {a / n:.0f} B | {s / 2**20:.1f} MB | "
            f"{s / n:.0f} B | {f} |")


# -- HomeAgent first open -------------------------------------------------------------------------

HA_FSMEM = """
import json, sys, time
from fsmem import Memory
import numpy, msgspec
t = time.perf_counter()
mem = Memory.open(sys.argv[1])
hits = mem.query(sys.argv[2], top_k=10)
s = time.perf_counter() - t
print(json.dumps({"s": s, "n": len(hits), "top": [h.unit_id for h in hits[:3]]}))
"""

HA_BM25S = """
import glob, json, os, sys, time
import bm25s, snowballstemmer
t = time.perf_counter()
stem = snowballstemmer.stemmer("english")
docs = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "documents", "*.json"))):
    with open(path, encoding="utf-8") as fh:
        docs.append(json.load(fh))
texts = [d.get("summary", "") + "\\n" + d.get("content", "") for d in docs]
r = bm25s.BM25()
r.index(bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False),
        show_progress=False)
q = bm25s.tokenize([sys.argv[2]], stopwords="en", stemmer=stem, return_ids=False,
                   show_progress=False)
res, scores = r.retrieve(q, k=10, show_progress=False, n_threads=1)
s = time.perf_counter() - t
print(json.dumps({"s": s, "n": int(res.shape[1]), "top": [docs[i]["id"] for i in res[0][:3]]}))
"""


def make_homeagent(root: str, docs: int) -> None:
    """``docs`` HomeAgent v1-style documents (Go's MarshalIndent layout, archived-context
    form: ``[HH:MM] source: input`` lines), from consecutive sessions of the fixture."""
    os.makedirs(os.path.join(root, "documents"))
    stream = _year.sessions(seed=_year.SEED + 5)
    for i in range(docs):
        sess = next(stream)
        lines = [f"[{time.strftime('%H:%M', time.gmtime(t.ts_ns // 10**9 + t.offset_s))}] "
                 f"chat: {t.input}" for t in sess]
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sess[0].ts_ns // 10**9 + 8 * 3600))
        ts += f".{sess[0].ts_ns % 10**9:09d}+08:00"
        doc = {"id": f"doc_{sess[0].ts_ns + i}", "summary": f"来自 1 个来源的 {len(sess)} 条对话",
               "content": "\n".join(lines), "tags": None, "entities": None,
               "created_at": ts, "updated_at": ts, "source": "context_archived",
               "meta": {"is_archived_context": "true"}, "access_count": 1, "last_access": ts}
        with open(os.path.join(root, "documents", f"{doc['id']}.json"), "w",
                  encoding="utf-8") as fh:
            json.dump(doc, fh, ensure_ascii=False, indent=2)


def homeagent_rows(wd: Workdir, prof: Profile, docs: int = 1_000) -> list[Row]:
    base = wd.path("year-homeagent/base")
    make_homeagent(base, docs)
    q = _year.FIRST_QUERY
    count = iter(range(1 << 30))
    wall: dict[str, list[float]] = {"fsmem": [], "bm25s": []}
    tops: dict[str, list] = {}

    def fsmem() -> float:
        work = wd.path(f"year-homeagent/run-{next(count)}")
        shutil.copytree(base, work)   # a HomeAgent directory fsmem has never opened
        try:
            t = time.perf_counter()
            out = run_child(HA_FSMEM, work, q)
            wall["fsmem"].append(time.perf_counter() - t)
            tops["fsmem"] = out["top"]
            return out["s"]
        finally:
            shutil.rmtree(work)   # our own copy

    def anchor() -> float:
        t = time.perf_counter()
        out = run_child(HA_BM25S, base, q)
        wall["bm25s"].append(time.perf_counter() - t)
        tops["bm25s"] = out["top"]
        return out["s"]
    res = interleave({"fsmem": fsmem, "bm25s": anchor}, CHILD_REPS[prof.name])
    wall = {k: v[1:] for k, v in wall.items()}
    return [Row("year", f"HomeAgent first open + query, {docs} JSON documents, fresh process",
                Stat(res["fsmem"]), "load the JSON + bm25s index + query, fresh process",
                Stat(res["bm25s"]), target_ratio=1,
                note="timed inside each child after its imports; fsmem: Memory.open on a copy "
                     "of the directory it has never opened (the index built from the legacy "
                     "JSON, legacy documents reported by logging) + the first query top-10; "
                     f"anchor: json.load every file, bm25s tokenize/index/retrieve k=10. "
                     f"Top 3: fsmem {tops.get('fsmem')}, bm25s {tops.get('bm25s')}"),
            Row("year", f"HomeAgent first open + query, {docs} JSON documents, whole process",
                Stat(wall["fsmem"]), "the same anchor, whole process", Stat(wall["bm25s"]),
                note="spawn to exit, imports included (fsmem: numpy, msgspec, blake3; "
                     "bm25s: numpy, scipy where present)")]


# -- the group ---------------------------------------------------------------------------------

def year_rows(wd: Workdir, prof: Profile) -> list[Row]:
    SECTIONS.clear()
    sizes, events = SIZES[prof.name]
    rows: list[Row] = []
    t0 = time.perf_counter()
    steps: list[tuple[str, Callable[[], list[Row] | None]]] = [
        ("open", lambda: open_rows(wd, prof, sizes, events)),
        ("query vs bm25s", lambda: query_rows(wd, prof, sizes[-1])),
        ("append", lambda: append_rows(wd, prof)),
        ("commit", lambda: commit_rows(wd, prof)),
        ("cli", lambda: cli_rows(wd, prof, sizes[0])),
        ("homeagent", lambda: homeagent_rows(wd, prof)),
        ("disk", lambda: disk_section(wd, sizes[-1], events)),
    ]
    timing, failed = [], []
    for name, step in steps:
        t = time.perf_counter()
        print(f"[year/{name}] ...", file=sys.stderr, flush=True)
        try:
            got = step() or []
        except Exception:   # one broken step must not lose the others
            import traceback
            traceback.print_exc()
            failed.append(f"- {name}: {traceback.format_exc(limit=3).strip().splitlines()[-1]}")
            got = []
        rows += got
        timing.append(f"{name} {time.perf_counter() - t:.0f} s")
        print(f"[year/{name}] {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    SECTIONS.insert(0, _fixture_section(sizes, events, timing, time.perf_counter() - t0))
    if failed:
        SECTIONS.insert(1, "## Steps that failed in this run\n\n" + "\n".join(failed))
    return rows


def _fixture_section(sizes: tuple[int, ...], events: int, timing: list[str], secs: float) -> str:
    sample = _year.turns(20_000)
    mean = sum(len(_year.unit_text(t)) for t in sample) / len(sample)
    zh = sum(any("\u4e00" <= c <= "\u9fff" for c in t.text) for t in sample) / len(sample)
    builds = []
    for (what, n), (secs_b, now) in sorted(_BUILDS.items()):
        builds.append(f"{_name(what, n)}: built in "
                      f"{secs_b} s ({'this run' if now else 'cached from an earlier run'})")
    try:
        import Stemmer  # noqa: F401
        stem = "PyStemmer present (snowballstemmer runs its C code, for fsmem and bm25s alike)"
    except ImportError:
        stem = "PyStemmer absent (pure-Python snowballstemmer for fsmem and bm25s alike)"
    return "\n".join([
        "## The fixture and the stores", "",
        f"benchmarks/_year.py: a seeded year of generated two-person conversations (templates "
        f"and word lists written for it, benchmarks/_yearwords.py; no public benchmark's "
        f"text): {_year.vocabulary_size()} English word forms drawn Zipf-like, names, places, "
        f"dates, times, numbers, prices, short replies; {mean:.0f} characters per one-turn "
        f"unit on average, {zh:.0%} of turns with Chinese. Unit stores: "
        f"{', '.join(str(n) for n in sizes)} one-turn L2 units; events store: "
        f"{events} events in units of one session each." if events else
        "", "",
        "Built through the public API (`Memory.open(root, durability=\"off\", "
        "auto_prune=False)`, the index loaded before the first `commit_events`, so each unit "
        "is indexed as written and the index saved once at `close()`): durability off is the "
        "build's only shortcut (no fsync; the same files a durable build writes). "
        + "; ".join(builds) + ".", "",
        f"Search stemmer: {stem}. Time of this group's steps: {', '.join(timing)} "
        f"({secs / 60:.1f} min in all)."])
