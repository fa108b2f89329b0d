"""Recall latency against unit size, beside SQLite row moves and HomeAgent's legacy consume.

Unit sizes: 1 KB of text; 1 MB of text; 100 MB of media. L1 is full (capacity 30/10, auto
prune on, as an agent runs), so each recall is followed by the prune it causes. For each size,
interleaved recall by recall: fsmem recall (search + one rename documents/ -> context/ + the
prune), the same as SQLite rows in the fair design (a layer column: the recalled unit and the
evicted ones change layer by UPDATE, no event or blob copied; one transaction, WAL FULL), and
HomeAgent's legacy consume (read, parse and delete one JSON document holding the text; media
stays in its CAS, as in HomeAgent). Usage: python benchmarks/bench_recall.py [--reps N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import time

from _data import text
from _harness import rotate

from fsmem import Event, MediaAttachment, Memory

SIZES = {"1 KB text": (1_000, 0), "1 MB text": (1_000_000, 0), "100 MB media": (1_000, 100 << 20)}


def make_events(rng: random.Random, text_chars: int, media_bytes: int, tag: str) -> list[Event]:
    atts = [MediaAttachment(data=rng.randbytes(media_bytes), mime="video/mp4")] if media_bytes else []
    return [Event(source="qq", input=f"{tag} unique marker", response=text(rng, text_chars),
                  attachments=atts)]


CAPACITY, PROTECTED, KEEP = 30, 10, 29   # L1 full; prune keeps 29 (unbounded token budget)


def l1_turns(n: int) -> list[Event]:
    rng = random.Random(9)
    return [Event(source="user", input=text(rng, 120), response=text(rng, 300)) for _ in range(n)]


def fsmem_recaller(base: str, events_by_rep: list[list[Event]]):
    """A store whose L1 is full (auto prune on, as by default): each recall is followed by the
    prune it causes, as in a running agent."""
    build = Memory.open(f"{base}/fsmem", durability="off", auto_prune=False)
    for events in events_by_rep:
        build.commit_events(events)
    build.close()
    mem = Memory.open(f"{base}/fsmem", context_capacity=CAPACITY, context_protected=PROTECTED,
                      context_tokens=10**9)
    for ev in l1_turns(CAPACITY):
        mem.append(ev)
    mem.index

    def recall(tag: str) -> None:
        moved = mem.recall(f"{tag} unique marker", top_k=1)
        assert len(moved) == 1
    return mem, recall


def sqlite_recaller(base: str, events_by_rep: list[list[Event]]):
    """The fair SQLite design: a layer column on units, so a recall (and the prune it causes)
    updates rows and copies no blob; WAL, synchronous=FULL, one transaction."""
    db = sqlite3.connect(f"{base}/rows.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript("""
        CREATE TABLE units(id INTEGER PRIMARY KEY, layer INT, arrival INT, tag TEXT);
        CREATE INDEX units_tag ON units(tag);
        CREATE INDEX units_layer ON units(layer, arrival);
        CREATE TABLE events(id INTEGER PRIMARY KEY, unit INT, ts TEXT, source TEXT, input TEXT,
                            response TEXT);
        CREATE TABLE blobs(id INTEGER PRIMARY KEY, unit INT, mime TEXT, data BLOB);""")
    db.execute("BEGIN")
    for layer, batch in ((2, events_by_rep), (1, [[e] for e in l1_turns(CAPACITY)])):
        for events in batch:
            uid = db.execute("INSERT INTO units(layer, arrival, tag) VALUES (?,?,?)",
                             (layer, time.time_ns(), events[0].input.split()[0])).lastrowid
            for ev in events:
                db.execute("INSERT INTO events(unit, ts, source, input, response) "
                           "VALUES (?,?,?,?,?)", (uid, "", ev.source, ev.input, ev.response))
                for att in ev.attachments:
                    db.execute("INSERT INTO blobs(unit, mime, data) VALUES (?,?,?)",
                               (uid, att.mime, att.data))
    db.execute("COMMIT")

    def recall(tag: str) -> None:
        db.execute("BEGIN")
        uid = db.execute("SELECT id FROM units WHERE tag=? AND layer=2", (tag,)).fetchone()[0]
        db.execute("UPDATE units SET layer=1, arrival=? WHERE id=?", (time.time_ns(), uid))
        n = db.execute("SELECT count(*) FROM events e JOIN units u ON u.id = e.unit "
                       "WHERE u.layer=1").fetchone()[0]
        if n > CAPACITY:
            db.execute("UPDATE units SET layer=2 WHERE id IN (SELECT id FROM units WHERE "
                       "layer=1 AND id != ? ORDER BY arrival LIMIT ?)", (uid, n - KEEP))
        db.execute("COMMIT")
    return db, recall


def legacy_consumer(base: str, events_by_rep: list[list[Event]], tags: list[str]):
    os.makedirs(f"{base}/legacy", exist_ok=True)
    for tag, events in zip(tags, events_by_rep):
        doc = {"id": f"doc_{tag}", "summary": "", "content": "\n".join(
            f"[08:00] {e.source}: {e.input} → {e.response}" for e in events), "tags": None,
            "created_at": "2026-10-04T08:04:00.123456789+08:00", "access_count": 1}
        with open(f"{base}/legacy/doc_{tag}.json", "w", encoding="utf-8") as fh:
            json.dump(doc, fh, ensure_ascii=False, indent=2)

    def consume(tag: str) -> None:
        path = f"{base}/legacy/doc_{tag}.json"
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        os.remove(path)
        assert doc["id"] == f"doc_{tag}"
    return None, consume


def run_size(base: str, units: list[list[Event]], tags: list[str]) -> dict[str, list[float]]:
    """The three recalls interleaved: recall i of each before recall i+1 of any, the order
    rotating; the first recall of each is a warm-up."""
    sides = {"fsmem": fsmem_recaller(base, units), "sqlite": sqlite_recaller(base, units),
             "legacy": legacy_consumer(base, units, tags)}
    times = rotate({name: run for name, (_h, run) in sides.items()}, tags)
    for handle, _ in sides.values():
        if handle is not None:
            handle.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    rng = random.Random(3)
    print(f"median of {args.reps - 1} interleaved recalls per size (after one warm-up; L2 holds "
          f"{args.reps} units of that size; L1 full at {CAPACITY}/{PROTECTED}, auto prune on)")
    print(f"{'unit':<14}{'fsmem ms':>10}{'sqlite ms':>11}{'legacy ms':>11}{'fsmem/sqlite':>14}")
    results = {}
    for label, (chars, media) in SIZES.items():
        tags = [f"tag{label[:3].replace(' ', '')}x{i}" for i in range(args.reps)]
        units = [make_events(rng, chars, media, tag) for tag in tags]
        base = tempfile.mkdtemp(prefix="fsmem-recall-", dir=args.dir)
        try:
            times = run_size(base, units, tags)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        f, s, g = (statistics.median(times[k]) for k in ("fsmem", "sqlite", "legacy"))
        results[label] = f
        print(f"{label:<14}{f * 1000:>10.2f}{s * 1000:>11.2f}{g * 1000:>11.2f}{f / s:>13.2f}x")
    print(f"fsmem 100 MB / 1 KB recall: {results['100 MB media'] / results['1 KB text']:.2f}x")


if __name__ == "__main__":
    main()
