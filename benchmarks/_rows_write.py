"""Write-side rows of ``python -m benchmarks``: commit, append with L1 full, recall, watch.

Each function builds what it needs under the harness's work directory, times fsmem and its
SQLite (or API-loop) anchor interleaved, and returns table rows. Anchors do the same logical
work at the same durability, and no more: the recall anchor moves rows by updating a layer
column (no blob is copied), as a fair SQLite design would.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from typing import Callable

from _data import sqlite_commit, ten_event_unit, text
from _floor import AppendFloor, CommitFloor
from _harness import CHILD_ENV, REPO, Profile, Row, Stat, Workdir, interleave

from fsmem import Event, MediaAttachment, Memory, Timestamp

__all__ = ["commit_rows", "append_rows", "turn_rows", "recall_rows", "watch_rows", "CAPACITY", "KEEP"]

CAPACITY, PROTECTED = 30, 10
KEEP = CAPACITY - 1        # the prune watermark with an unbounded token budget: prune often
NOISE_MB_S = 40


def _sqlite(path: str, sync: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={sync}")
    return db


NOISE = """
import os, sys, time
path, rate = sys.argv[1], int(sys.argv[2]) << 20
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
chunk, off = os.urandom(4 << 20), 0
nxt = time.monotonic()
while True:
    os.pwrite(fd, chunk, off)
    os.fsync(fd)
    off = (off + len(chunk)) % (64 << 20)
    nxt += len(chunk) / rate
    time.sleep(max(0.0, nxt - time.monotonic()))
"""


def _commit_sides(wd: Workdir, name: str, reps: int) -> dict[str, list[float]]:
    """fsmem, its format's floor and SQLite committing the same units, interleaved."""
    rng = random.Random(7)
    data = [ten_event_unit(rng) for _ in range(reps + 1)]
    mem = Memory.open(wd.path(f"{name}/fsmem"), auto_prune=False)
    mem.index   # loaded, as in a running agent: each commit also indexes its unit
    sq = sqlite_commit(_sqlite(wd.path(f"{name}/sqlite.db"), "FULL"))
    floor = CommitFloor(wd.path(f"{name}/floor"), durable=True)

    def side(fn: Callable[[list[Event]], object]) -> Callable[[], float]:
        units = iter(data)   # every side writes the same units in the same order

        def run() -> float:
            ev = next(units)
            t = time.perf_counter()
            fn(ev)
            return time.perf_counter() - t
        return run
    try:
        return interleave({"fsmem": side(mem.commit_events), "floor": side(floor.commit),
                           "sqlite": side(sq)}, reps)
    finally:
        mem.close()


def commit_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """Durable commit of a 10-event unit with a 200 KB image, quiet and beside a writer."""
    quiet = _commit_sides(wd, "commit", prof.reps)
    noise = subprocess.Popen([sys.executable, "-c", NOISE, wd.path("noise/data"),
                              str(NOISE_MB_S)], env=CHILD_ENV)
    t0 = time.perf_counter()
    try:
        time.sleep(0.5)
        noisy = _commit_sides(wd, "commit-noisy", prof.reps)
        rate = _written(noise.pid) / (time.perf_counter() - t0) / 2**20
    finally:
        noise.send_signal(signal.SIGTERM)
        noise.wait(timeout=30)
    unit = "10 events + 200 KB image"
    return [
        Row("write", f"durable commit ({unit})", Stat(quiet["fsmem"]), "SQLite WAL FULL",
            Stat(quiet["sqlite"]), target_ratio=2, p95=True,
            note=f"sync strategy {_default_strategy()} (the default; FSMEM_SYNC chooses; "
                 "every strategy side by side: bench_commit.py); "
                 + _floor_note(quiet)),
        _floor_row(f"durable commit ({unit})", quiet, "SQLite WAL FULL",
                   "25 block files + a manifest in a staged directory, the batch barrier, "
                   "the publish rename, the barrier of documents/ (benchmarks/_floor.py)"),
        Row("write", f"durable commit, noisy neighbour ({NOISE_MB_S} MB/s + fsync)",
            Stat(noisy["fsmem"]), "SQLite WAL FULL, same neighbour", Stat(noisy["sqlite"]),
            target_ratio=3, p95=True,
            note=f"a child process rewrites a 64 MB file on the same filesystem at "
                 f"{NOISE_MB_S} MB/s, fsync after every 4 MB (it achieved {rate:.0f} MB/s "
                 "written to disk, /proc/PID/io); " + _floor_note(noisy)),
        _floor_row(f"durable commit, noisy neighbour ({NOISE_MB_S} MB/s + fsync)", noisy,
                   "SQLite WAL FULL, same neighbour", "as above, beside the same neighbour"),
    ]


def _floor_note(res: dict[str, list[float]]) -> str:
    f, fl = Stat(res["fsmem"]).median_ms, Stat(res["floor"]).median_ms
    return f"fsmem / its format's floor (interleaved with both): {f / fl:.2f}x"


def _floor_row(what: str, res: dict[str, list[float]], anchor: str, how: str) -> Row:
    """The format's floor of a row (``_floor``: plain Python, fsmem's files and barriers,
    none of its CPU) against the same anchor, from the same interleaved run."""
    return Row("write", f"floor of the format (not fsmem): {what}", Stat(res["floor"]), anchor,
               Stat(res["sqlite"]), p95=True,
               note=f"not fsmem: the least its on-disk format needs, in plain Python: {how}")


def _default_strategy() -> str:
    from fsmem.store.store import _default_sync_strategy
    return _default_sync_strategy()


def _written(pid: int) -> int:
    """Bytes a process has caused to be written to storage (0 where /proc has no io file)."""
    try:
        with open(f"/proc/{pid}/io") as fh:
            for line in fh:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _turn_events(n: int, seed: int) -> list[Event]:
    rng = random.Random(seed)
    t0 = 1_790_000_000_000_000_000
    return [Event(timestamp=Timestamp(t0 + i * 60_000_000_000, 0), source="user",
                  input=text(rng, 120), response=text(rng, 300)) for i in range(n)]


def _sqlite_l1(db: sqlite3.Connection) -> Callable[..., None]:
    """Insert events into L1; when L1 is over capacity, move the oldest down to the same
    watermark fsmem keeps (a layer column update; all in one transaction)."""
    db.executescript("""
        CREATE TABLE events(id INTEGER PRIMARY KEY, layer INT, ts INT, source TEXT,
                            input TEXT, response TEXT);
        CREATE INDEX ev_layer ON events(layer, ts);""")

    def append(*events: Event) -> None:
        db.execute("BEGIN")
        for ev in events:
            db.execute("INSERT INTO events(layer, ts, source, input, response) "
                       "VALUES (1,?,?,?,?)", (ev.timestamp.ns, ev.source, ev.input, ev.response))
        n = db.execute("SELECT count(*) FROM events WHERE layer=1").fetchone()[0]
        if n > CAPACITY:
            db.execute("UPDATE events SET layer=2 WHERE id IN (SELECT id FROM events "
                       "WHERE layer=1 ORDER BY ts LIMIT ?)", (n - KEEP,))
        db.execute("COMMIT")
    return append


def append_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """``Memory.append`` into a full L1 (auto prune on), durable and not, vs SQLite and the
    format's floor. Every second append prunes, so a sample is two appends in a row (one
    prunes) and the row gives its time per append: a median over single appends would land
    on one mode or the other."""
    rows = []
    for durability, sync in (("full", "FULL"), ("off", "OFF")):
        stream = _turn_events(CAPACITY + 2 * (prof.reps + 1), 3)
        mem = Memory.open(wd.path(f"append-{durability}/fsmem"), durability=durability,
                          context_capacity=CAPACITY, context_protected=PROTECTED,
                          context_tokens=10**9)
        sq = _sqlite_l1(_sqlite(wd.path(f"append-{durability}/sqlite.db"), sync))
        floor = AppendFloor(wd.path(f"append-{durability}/floor"), durability == "full",
                            CAPACITY, KEEP)
        for ev in stream[:CAPACITY]:
            for fn in (mem.append, sq, floor.append):
                fn(ev)

        def side(fn: Callable[[Event], object]) -> Callable[[], float]:
            events = iter(stream[CAPACITY:])   # every side appends the same stream in order

            def run() -> float:
                a, b = next(events), next(events)
                t = time.perf_counter()
                fn(a)
                fn(b)
                return (time.perf_counter() - t) / 2
            return run
        res = interleave({"fsmem": side(mem.append), "floor": side(floor.append),
                          "sqlite": side(sq)}, prof.reps)
        mem.close()
        label = "durable" if durability == "full" else "durability off"
        what = f"append, L1 full (auto prune), {label}"
        anchor = f"SQLite WAL {sync} insert + move oldest"
        rows.append(Row("write", what, Stat(res["fsmem"]), anchor, Stat(res["sqlite"]),
                        target_ratio=3, p95=True,
                        note=(f"capacity {CAPACITY}/{PROTECTED}, watermark {KEEP} (the "
                              "highest the policy allows): every second append prunes; SQLite "
                              "keeps the same watermark; a sample is two appends in a row "
                              "(one prunes), given per append. " if durability == "full"
                              else "") + _floor_note(res)))
        rows.append(_floor_row(what, res, anchor, "per append a staged unit (2 blocks + "
                               "manifest); per prune also an L2 unit of hard links and one "
                               "journal entry; the batch barrier, the renames (into context/, "
                               "documents/, the trash), the barrier; the trash emptied"
                               if durability == "full" else "the same, no barrier"))
    return rows


def turn_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """``Memory.turn`` (input + response, context policy prune, no recall) into a full L1,
    durable, vs SQLite inserting both and moving the oldest in one transaction."""
    from fsmem.memory.turn import InjectOptions
    stream = _turn_events(CAPACITY + 2 * (prof.reps + 1), 4)
    mem = Memory.open(wd.path("turn/fsmem"), context_capacity=CAPACITY,
                      context_protected=PROTECTED, context_tokens=10**9)
    sq = _sqlite_l1(_sqlite(wd.path("turn/sqlite.db"), "FULL"))
    for ev in stream[:CAPACITY]:
        mem.append(ev)
        sq(ev)
    pairs = list(zip(stream[CAPACITY::2], stream[CAPACITY + 1::2]))
    opts = InjectOptions(context_policy="prune", recall_policy="none")

    def side(fn: Callable[[Event, Event], object]) -> Callable[[], float]:
        it = iter(pairs)   # both sides live the same turns in order

        def run() -> float:
            q, a = next(it)
            t = time.perf_counter()
            fn(q, a)
            return time.perf_counter() - t
        return run
    res = interleave({"fsmem": side(lambda q, a: mem.turn(q, a, options=opts)),
                      "sqlite": side(sq)}, prof.reps)
    mem.close()
    return [Row("write", "agent turn (input + response, policy prune), L1 full, durable",
                Stat(res["fsmem"]), "SQLite WAL FULL: both inserts + move oldest, one "
                "transaction", Stat(res["sqlite"]), p95=True,
                note=f"capacity {CAPACITY}/{PROTECTED}, watermark {KEEP}: every turn prunes; "
                     "no recall (recall_policy none): the write path of a turn")]


def _word(i: int) -> str:
    """A letters-only token unique to document i (the analyzers keep it whole)."""
    s = ""
    for _ in range(4):
        s += chr(97 + i % 26)
        i //= 26
    return "zq" + s


def _recall_docs(n: int) -> list[list[Event]]:
    rng = random.Random(5)
    t0 = 1_780_000_000_000_000_000
    return [[Event(timestamp=Timestamp(t0 + i * 1_000_000_000, 0), source="user",
                   input=f"{_word(i)} " + text(rng, 200), response=text(rng, 400),
                   attachments=[MediaAttachment(data=rng.randbytes(20_000), mime="image/png")])]
            for i in range(n)]


def _sqlite_recall(db: sqlite3.Connection, docs: list[list[Event]], l1: list[Event]
                   ) -> Callable[[str], None]:
    db.executescript("""
        CREATE TABLE units(id INTEGER PRIMARY KEY, layer INT, arrival INT);
        CREATE TABLE events(id INTEGER PRIMARY KEY, unit INT, ts INT, input TEXT, response TEXT);
        CREATE TABLE blobs(id INTEGER PRIMARY KEY, unit INT, mime TEXT, data BLOB);
        CREATE VIRTUAL TABLE fts USING fts5(body, unit UNINDEXED);
        CREATE INDEX units_layer ON units(layer, arrival);""")
    db.execute("BEGIN")
    for layer, batch in ((2, docs), (1, [[e] for e in l1])):
        for evs in batch:
            uid = db.execute("INSERT INTO units(layer, arrival) VALUES (?, ?)",
                             (layer, time.time_ns())).lastrowid
            for ev in evs:
                db.execute("INSERT INTO events(unit, ts, input, response) VALUES (?,?,?,?)",
                           (uid, ev.timestamp.ns, ev.input, ev.response))
                db.execute("INSERT INTO fts(body, unit) VALUES (?, ?)",
                           (ev.input + " " + ev.response, uid))
                for att in ev.attachments:
                    db.execute("INSERT INTO blobs(unit, mime, data) VALUES (?,?,?)",
                               (uid, att.mime, att.data))
    db.execute("COMMIT")

    def recall(word: str) -> None:
        db.execute("BEGIN")
        hit = db.execute("SELECT f.unit FROM fts f JOIN units u ON u.id = f.unit WHERE fts "
                         "MATCH ? AND u.layer = 2 ORDER BY rank LIMIT 1", (word,)).fetchone()
        db.execute("UPDATE units SET layer=1, arrival=? WHERE id=?", (time.time_ns(), hit[0]))
        n = db.execute("SELECT count(*) FROM events e JOIN units u ON u.id = e.unit "
                       "WHERE u.layer=1").fetchone()[0]
        if n > CAPACITY:   # one event per unit here: move the oldest units down
            db.execute("UPDATE units SET layer=2 WHERE id IN (SELECT id FROM units WHERE "
                       "layer=1 AND id != ? ORDER BY arrival LIMIT ?)", (hit[0], n - KEEP))
        db.execute("COMMIT")
    return recall


def recall_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """Recall one L2 unit into a full L1 with auto prune on, vs SQLite FTS5 + row moves."""
    docs = _recall_docs(prof.recall_docs)
    l1 = _turn_events(CAPACITY, 9)
    root = wd.path("recall/fsmem")
    build = Memory.open(root, durability="off", auto_prune=False)
    for evs in docs:
        build.commit_events(evs)
    build.close()
    mem = Memory.open(root, context_capacity=CAPACITY, context_protected=PROTECTED,
                      context_tokens=10**9)
    for ev in l1:
        mem.append(ev)
    mem.index
    sq = _sqlite_recall(_sqlite(wd.path("recall/sqlite.db"), "FULL"), docs, l1)
    order = random.Random(2).sample(range(len(docs)), min(len(docs), prof.reps + 1))
    todo = {"f": list(order), "s": list(order)}

    def side(fn: Callable[[str], object], key: str) -> Callable[[], float]:
        def run() -> float:
            word = _word(todo[key].pop(0))
            t = time.perf_counter()
            fn(word)
            return time.perf_counter() - t
        return run
    res = interleave({"fsmem": side(lambda w: mem.recall(w, top_k=1), "f"),
                      "sqlite": side(sq, "s")}, len(order) - 1)
    mem.close()
    return [Row("write", "recall into a full L1 (auto prune on)", Stat(res["fsmem"]),
                "SQLite FTS5 top-1 + layer update + move oldest", Stat(res["sqlite"]), p95=True,
                note=f"{len(docs)} L2 units (one event, 20 KB image each); SQLite moves rows "
                     "by a layer column, no blob copied; WAL FULL")]


API_LOOP = """
import json, os, sys, time
t0 = time.perf_counter()
from fsmem import Memory
from fsmem.format import fsops as _fsops
root, src = sys.argv[1], sys.argv[2]
mem = Memory.open(root, durability="off")
mem.index   # each commit also indexes its unit, as the daemon does
done = []

def sync_then_remove():   # the daemon's group commit: a source goes once its unit is durable
    _fsops.syncfs(root)
    for path in done:
        os.unlink(path)
    done.clear()

n = 0
for name in sorted(os.listdir(src)):
    path = os.path.join(src, name)
    with open(path, "rb") as fh:
        mem.commit(fh.read().decode(), summary=name, source="inbox")
    done.append(path)
    n += 1
    if n % 256 == 0:
        sync_then_remove()   # one syncfs per 256 files, the daemon's largest batch
sync_then_remove()
mem.close()
print(json.dumps({"n": n, "s": time.perf_counter() - t0}))
"""


def _drop(dest: str, stage: str, rep: int, n: int) -> None:
    os.makedirs(stage, exist_ok=True)
    os.makedirs(dest, exist_ok=True)
    for i in range(n):
        name = f"note-{rep:03d}-{i:06d}.txt"
        with open(os.path.join(stage, name), "w") as fh:
            fh.write(f"note {rep}.{i}: the solar panel made {i % 97}.{i % 10} kWh; "
                     f"the coffee machine valve {i % 13}\n")
        os.rename(os.path.join(stage, name), os.path.join(dest, name))


def _watch_sizes(prof: Profile) -> tuple[int, int]:
    """(files per run, interleaved pairs): at least 3 pairs in --quick (500 files, so the
    row costs ~25 s on an idle machine) and 5 in the full run."""
    if prof.name == "quick":
        return 500, 3
    return prof.watch_files, (1 if prof.name == "tiny" else 5)


def _spread(fs: list[float], api: list[float]) -> str:
    """The per-pair time ratios (each pair ran back to back): median and range."""
    pairs = sorted(f / a for f, a in zip(fs, api))
    mid = pairs[len(pairs) // 2] if len(pairs) % 2 else sum(pairs[len(pairs) // 2 - 1:
                                                                 len(pairs) // 2 + 1]) / 2
    return f"pair ratios {mid:.2f}x median, {pairs[0]:.2f}-{pairs[-1]:.2f}x range (n={len(pairs)})"


def watch_rows(wd: Workdir, prof: Profile) -> list[Row]:
    """``fsmem watch --once`` over N waiting files vs a Python API loop, each a whole process,
    alternating which goes first, with the spread of the per-pair ratios."""
    (n, reps), root = _watch_sizes(prof), wd.path("watch/fsmem")
    Memory.open(root).close()
    api_root, src = wd.path("watch/api"), wd.path("watch/src")
    Memory.open(api_root).close()
    drops = {"f": 0, "s": 0}

    def daemon(count: int = n) -> float:
        drops["f"] += 1
        _drop(os.path.join(root, "inbox"), wd.path("watch/stage"), drops["f"], count)
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "fsmem.watch", "--root", root, "--once",
                              "--json"], env=CHILD_ENV, cwd=str(REPO), capture_output=True,
                             text=True, check=True, timeout=3600).stdout
        s = time.perf_counter() - t
        done = out.count('"status":"ingested"')
        if done != count:
            raise RuntimeError(f"watch --once ingested {done} of {count} files")
        return s

    def loop(count: int = n) -> float:
        drops["s"] += 1
        _drop(src, wd.path("watch/stage"), drops["s"], count)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", textwrap.dedent(API_LOOP), api_root, src],
                       env=CHILD_ENV, cwd=str(REPO), capture_output=True, check=True,
                       timeout=3600)
        return time.perf_counter() - t
    # warm-up, unmeasured: a few files each, so neither side pays for compiling bytecode
    # into the harness's cache (the first child would) or for its store's first index
    daemon(5), loop(5)
    res = interleave({"fsmem": daemon, "api": loop}, reps, warmup=0)
    f_rate = n / Stat(res["fsmem"]).median_ms * 1000
    a_rate = n / Stat(res["api"]).median_ms * 1000
    return [Row("write", f"watch --once, {n} files (whole process)", Stat(res["fsmem"]),
                "API loop, same durability (syncfs per 256, source removed after it)",
                Stat(res["api"]), target_ratio=1.0,
                note=f"{f_rate:.0f} files/s against {a_rate:.0f} files/s; "
                     f"{_spread(res['fsmem'], res['api'])}; both are fresh processes timed "
                     "from spawn to exit on stores that grow by N units a run, both index "
                     "every unit, both remove a source only after the syncfs that made its "
                     "unit durable; watch also claims each file (one rename) and writes a "
                     "durable run mark (2 fsyncs), and makes each batch durable and "
                     "releases it in a second thread while it ingests on (a batch of at "
                     "least 32 goes as soon as that thread is free); target: time ratio "
                     "<= 1; after one small "
                     "unmeasured warm-up run each (bytecode compiled, indexes built)",
                extra={"pair_ratios": [f / a for f, a in zip(res["fsmem"], res["api"])]})]
