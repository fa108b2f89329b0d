"""Durable commit of a 10-event unit, beside the same data written to SQLite in the same run.

Unit: 10 events, input and response of about 300 characters each, one 200 KB image.
fsmem durability full (fsync per file / one syncfs) vs SQLite WAL synchronous=FULL, one
transaction per unit; fsmem durability off vs SQLite synchronous=OFF.
Usage: python benchmarks/bench_commit.py [--units N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import statistics
import tempfile
import time

from _data import ten_event_unit

from fsmem import Memory


def bench_fsmem(base: str, units, durability: str, strategy: str) -> list[float]:
    mem = Memory.open(f"{base}/fsmem-{durability}-{strategy}", durability=durability)
    mem.store.sync_strategy = strategy
    times = []
    for events in units:
        t = time.perf_counter()
        mem.commit_events(events)
        times.append(time.perf_counter() - t)
    assert mem.fsck(read_data=False) == []
    return times


def bench_sqlite(base: str, units, sync: str) -> list[float]:
    db = sqlite3.connect(f"{base}/sqlite-{sync}.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={sync}")
    db.executescript("""
        CREATE TABLE units(id INTEGER PRIMARY KEY, created_at TEXT);
        CREATE TABLE events(id INTEGER PRIMARY KEY, unit INT, ts TEXT, source TEXT,
                            input TEXT, response TEXT, tools TEXT);
        CREATE TABLE blobs(id INTEGER PRIMARY KEY, event INT, mime TEXT, data BLOB);
    """)
    times = []
    for events in units:
        t = time.perf_counter()
        db.execute("BEGIN")
        uid = db.execute("INSERT INTO units(created_at) VALUES (datetime())").lastrowid
        for ev in events:
            eid = db.execute("INSERT INTO events(unit, ts, source, input, response, tools) "
                             "VALUES (?,?,?,?,?,?)", (uid, ev.timestamp.isoformat(), ev.source,
                                                      ev.input, ev.response,
                                                      ",".join(ev.tools_used))).lastrowid
            for tr in ev.tool_results:
                db.execute("INSERT INTO blobs(event, mime, data) VALUES (?,?,?)",
                           (eid, "text/plain", tr.output.encode()))
            for att in ev.attachments:
                db.execute("INSERT INTO blobs(event, mime, data) VALUES (?,?,?)",
                           (eid, att.mime, att.data))
        db.execute("COMMIT")
        times.append(time.perf_counter() - t)
    db.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=200)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    rng = random.Random(7)
    units = [ten_event_unit(rng) for _ in range(args.units)]
    base = tempfile.mkdtemp(prefix="fsmem-bench-", dir=args.dir)
    try:
        rows = [
            ("fsmem full (fsync per file)", bench_fsmem(base, units, "full", "fsync")),
            ("fsmem full (one syncfs)", bench_fsmem(base, units, "full", "syncfs")),
            ("sqlite WAL synchronous=FULL", bench_sqlite(base, units, "FULL")),
            ("fsmem durability off", bench_fsmem(base, units, "off", "fsync")),
            ("sqlite WAL synchronous=OFF", bench_sqlite(base, units, "OFF")),
        ]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = {name: statistics.median(t) for name, t in rows}
    print(f"{args.units} units of 10 events (300+300 chars each, one 200 KB image)")
    print(f"{'writer':<32}{'median ms':>10}{'units/s':>10}")
    for name, t in rows:
        print(f"{name:<32}{med[name] * 1000:>10.2f}{len(t) / sum(t):>10.0f}")
    sq_full, sq_off = med["sqlite WAL synchronous=FULL"], med["sqlite WAL synchronous=OFF"]
    for name in ("fsmem full (fsync per file)", "fsmem full (one syncfs)"):
        print(f"ratio {name} / sqlite FULL: {med[name] / sq_full:.2f}x")
    print(f"ratio fsmem off / sqlite OFF: {med['fsmem durability off'] / sq_off:.2f}x")


if __name__ == "__main__":
    main()
