"""Shared synthetic data for the benchmarks (seeded, deterministic)."""

from __future__ import annotations

import json
import random
import sqlite3
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

from fsmem import Event, MediaAttachment, Timestamp, ToolOutput  # noqa: E402

_WORDS = ("记忆 咖啡机 猫粮 光伏板 体检 报告 钢琴 签证 memory coffee solar piano visa "
          "report cat food schedule 周末 计划 天气 rain sunny").split()


def text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(_WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:chars]


_sentences: list[str] = []


def english(rng: random.Random, chars: int) -> str:
    """About ``chars`` characters of varied English: hand-written sentences of the fixtures
    (the English conversation turns, retrieval and paraphrase documents: ~2,300 distinct
    words) drawn at random, cut at a word; unlike ``text``, a run of them keeps meeting words
    the analyzer has not stemmed yet."""
    if not _sentences:
        sessions = _FIXTURES / "conversations" / "sessions.jsonl"
        for line in sessions.read_text("utf-8").splitlines():
            session = json.loads(line)
            if session["lang"] == "en":
                _sentences.extend(t["text"] for t in session["turns"])
        for name in ("retrieval", "paraphrase"):
            for line in (_FIXTURES / name / "docs.jsonl").read_text("utf-8").splitlines():
                doc = json.loads(line)
                if doc["lang"] == "en":
                    _sentences.append(doc["text"])
    out = rng.choice(_sentences)
    while len(out) < chars:
        out += " " + rng.choice(_sentences)
    return out[:chars].rsplit(" ", 1)[0]


def image(rng: random.Random, size: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + rng.randbytes(size - 8)


def ten_event_unit(rng: random.Random, image_bytes: int = 200_000,
                   words: Callable[[random.Random, int], str] = text) -> list[Event]:
    """10 events, input and response of about 300 characters each (``words``), one 200 KB
    image."""
    base = 1_790_000_000_000_000_000 + rng.randrange(10**12)
    events = []
    for i in range(10):
        atts = [MediaAttachment(data=image(rng, image_bytes), mime="image/png")] if i == 0 else []
        events.append(Event(timestamp=Timestamp(base + i * 1_000_000_123, 8 * 3600), source="qq",
                            input=words(rng, 300), response=words(rng, 300), attachments=atts,
                            tools_used=["search"] if i % 3 == 0 else [],
                            tool_results=[ToolOutput(name="search", output=words(rng, 100))]
                            if i % 3 == 0 else []))
    return events


def sqlite_commit(db: sqlite3.Connection) -> Callable[[list[Event]], None]:
    """The SQLite anchor of a commit: one transaction inserting the unit, its events and
    their blobs (tool outputs, attachments) into a fresh schema on ``db``."""
    db.executescript("""
        CREATE TABLE units(id INTEGER PRIMARY KEY, created_at TEXT);
        CREATE TABLE events(id INTEGER PRIMARY KEY, unit INT, ts TEXT, source TEXT,
                            input TEXT, response TEXT, tools TEXT);
        CREATE TABLE blobs(id INTEGER PRIMARY KEY, event INT, mime TEXT, data BLOB);""")

    def commit(events: list[Event]) -> None:
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
    return commit
