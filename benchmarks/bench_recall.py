"""Recall latency against unit size, beside SQLite row moves and HomeAgent's legacy consume.

Unit sizes: 1 KB of text; 1 MB of text; 100 MB of media. For each: fsmem recall (search +
one rename documents/ -> context/, both parents fsynced), the same move as SQLite rows
(DELETE + INSERT of the events and blobs in one transaction, synchronous=FULL), and HomeAgent's
legacy consume (read, parse and delete one JSON document holding the text; media stays in its
CAS, as in HomeAgent). Usage: python benchmarks/bench_recall.py [--reps N] [--dir DIR]
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

from fsmem import Event, MediaAttachment, Memory

SIZES = {"1 KB text": (1_000, 0), "1 MB text": (1_000_000, 0), "100 MB media": (1_000, 100 << 20)}


def make_events(rng: random.Random, text_chars: int, media_bytes: int, tag: str) -> list[Event]:
    atts = [MediaAttachment(data=rng.randbytes(media_bytes), mime="video/mp4")] if media_bytes else []
    return [Event(source="qq", input=f"{tag} unique marker", response=text(rng, text_chars),
                  attachments=atts)]


def bench_fsmem(base: str, events_by_rep: list[list[Event]], tags: list[str]) -> list[float]:
    mem = Memory.open(f"{base}/fsmem", auto_prune=False)
    for events in events_by_rep:
        mem.commit_events(events)
    times = []
    for tag in tags:
        t = time.perf_counter()
        moved = mem.recall(f"{tag} unique marker", top_k=1)
        times.append(time.perf_counter() - t)
        assert len(moved) == 1
    return times


def bench_sqlite(base: str, events_by_rep: list[list[Event]]) -> list[float]:
    db = sqlite3.connect(f"{base}/rows.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    for layer in ("l1", "l2"):
        db.execute(f"CREATE TABLE {layer}_events(id INTEGER PRIMARY KEY, unit INT, ts TEXT, "
                   "source TEXT, input TEXT, response TEXT)")
        db.execute(f"CREATE TABLE {layer}_blobs(id INTEGER PRIMARY KEY, unit INT, mime TEXT, data BLOB)")
    for unit, events in enumerate(events_by_rep):
        db.execute("BEGIN")
        for ev in events:
            db.execute("INSERT INTO l2_events(unit, ts, source, input, response) VALUES (?,?,?,?,?)",
                       (unit, ev.timestamp.isoformat() if ev.timestamp else "", ev.source, ev.input,
                        ev.response))
            for att in ev.attachments:
                db.execute("INSERT INTO l2_blobs(unit, mime, data) VALUES (?,?,?)",
                           (unit, att.mime, att.data))
        db.execute("COMMIT")
    times = []
    for unit in range(len(events_by_rep)):
        t = time.perf_counter()
        db.execute("BEGIN")
        db.execute("INSERT INTO l1_events SELECT * FROM l2_events WHERE unit=?", (unit,))
        db.execute("DELETE FROM l2_events WHERE unit=?", (unit,))
        db.execute("INSERT INTO l1_blobs SELECT * FROM l2_blobs WHERE unit=?", (unit,))
        db.execute("DELETE FROM l2_blobs WHERE unit=?", (unit,))
        db.execute("COMMIT")
        times.append(time.perf_counter() - t)
    db.close()
    return times


def bench_legacy(base: str, events_by_rep: list[list[Event]]) -> list[float]:
    os.makedirs(f"{base}/legacy", exist_ok=True)
    for i, events in enumerate(events_by_rep):
        doc = {"id": f"doc_{i}", "summary": "", "content": "\n".join(
            f"[08:00] {e.source}: {e.input} → {e.response}" for e in events), "tags": None,
            "created_at": "2026-10-04T08:04:00.123456789+08:00", "access_count": 1}
        with open(f"{base}/legacy/doc_{i}.json", "w", encoding="utf-8") as fh:
            json.dump(doc, fh, ensure_ascii=False, indent=2)
    times = []
    for i in range(len(events_by_rep)):
        t = time.perf_counter()
        path = f"{base}/legacy/doc_{i}.json"
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        os.remove(path)
        times.append(time.perf_counter() - t)
        assert doc["id"] == f"doc_{i}"
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    rng = random.Random(3)
    print(f"median of {args.reps} recalls per size (store holds {args.reps} units of that size)")
    print(f"{'unit':<14}{'fsmem ms':>10}{'sqlite ms':>11}{'legacy ms':>11}{'sqlite/fsmem':>14}")
    results = {}
    for label, (chars, media) in SIZES.items():
        tags = [f"tag{label[:3].strip()}x{i}" for i in range(args.reps)]
        units = [make_events(rng, chars, media, tag) for tag in tags]
        base = tempfile.mkdtemp(prefix="fsmem-recall-", dir=args.dir)
        try:
            f = statistics.median(bench_fsmem(base, units, tags))
            s = statistics.median(bench_sqlite(base, units))
            g = statistics.median(bench_legacy(base, units))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        results[label] = f
        print(f"{label:<14}{f * 1000:>10.2f}{s * 1000:>11.2f}{g * 1000:>11.2f}{s / f:>14.1f}x")
    print(f"fsmem 100 MB / 1 KB recall: {results['100 MB media'] / results['1 KB text']:.2f}x")


if __name__ == "__main__":
    main()
