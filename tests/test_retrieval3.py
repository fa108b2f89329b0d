"""Retrieval round three (issue 31): speaker, time and conversation structure as evidence on
every path, and fusion that never loses to lexical on fixtures/retrieval3."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import REPO

from fsmem import Event, Memory, Timestamp

sys.path.insert(0, str(REPO / "benchmarks"))

T0 = "2025-03-02T19:00:00+00:00"


def _at(day: int, minute: int = 0) -> str:
    """A time ``day`` days and ``minute`` minutes after T0 (March 2025)."""
    from datetime import datetime, timedelta
    return (datetime.fromisoformat(T0) + timedelta(days=day, minutes=minute)).isoformat()


def _plain(tmp_path, turns, **kw) -> tuple[Memory, dict[str, str]]:
    """One plain ``commit(text, source=speaker)`` per turn; (memory, label -> unit id)."""
    mem = Memory.open(str(tmp_path / "m"), durability="off", auto_prune=False, **kw)
    units = {}
    for label, speaker, text, when in turns:
        units[label] = mem.commit(text, source=speaker, **({"timestamp": when} if when else {}))
    return mem, units


def test_a_plain_turn_of_the_speaker_ranks_first_for_what_they_said(tmp_path):
    turns = [
        ("a", "Tom", "Priya, how is the knee after the long run?", None),
        ("own", "Priya",
         "It aches going down stairs, so I'm icing my knee and skipping the track.", None),
        ("b", "Lena", "Priya, your knee needs rest, please see a physio about the knee.", None),
        ("c", "Tom", "My knee was fine after the football, Priya, you should stretch more.", None),
        ("d", "Lena", "Anyway, I booked flights to Lisbon for April.", None),
    ]
    mem, units = _plain(tmp_path, turns)
    hits = mem.index.search("What did Priya say about her knee?", 5)
    assert hits[0][0] == units["own"], (hits, units)
    mem.close()


def test_a_relative_date_finds_the_turn_by_its_time(tmp_path):
    turns = [
        ("r1", "Priya", "Long run today: 8 km along the canal.", _at(0)),
        ("r2", "Priya", "Long run today: 12 km, the last two were painful.", _at(13)),
        ("r3", "Priya", "Long run today: 15 km, my longest so far.", _at(21)),
        ("x", "Lena", "Greetings from Lisbon, the trip is off to a great start!", _at(34)),
        ("r4", "Priya", "Long run today: 5 km with no pain at all.", _at(41)),
        ("r5", "Priya", "Long run today: 10 km, still no pain.", _at(49)),
    ]
    mem, units = _plain(tmp_path, turns)
    q = "How long was Priya's run two weeks before the Lisbon trip?"
    assert mem.index.search(q, 1)[0][0] == units["r3"]
    # and from the conversation's "now" (its newest turn, day 49, a Sunday)
    assert mem.index.search("How far did Priya run last week?", 1)[0][0] == units["r4"]
    assert mem.index.search("How far did Priya run about five weeks ago?", 1)[0][0] == units["r2"]
    mem.close()


def test_a_relative_date_in_chinese(tmp_path):
    turns = [
        ("m1", "王芳", "第一次模考只考了五十二分。", _at(0)),
        ("m2", "王芳", "第二次模考七十一分，终于及格了。", _at(14)),
        ("m3", "王芳", "第三次模考八十分。", _at(28)),
    ]
    mem, units = _plain(tmp_path, turns)
    assert mem.index.search("王芳两周前模考多少分？", 1)[0][0] == units["m2"]
    mem.close()


def _stored(tmp_path, turns, path: str) -> tuple[Memory, dict[str, str]]:
    """One unit per turn through ``path``: ``commit``; ``commit_events`` (an Event with the
    speaker as source); ``watch`` (a dropped .jsonl record per turn, ingested by watch);
    (memory, label -> unit id)."""
    if path == "commit":
        return _plain(tmp_path, turns)
    import json

    mem = Memory.open(str(tmp_path / "m"), durability="off", auto_prune=False)
    units = {}
    if path == "commit_events":
        for label, speaker, text, when in turns:
            units[label] = mem.commit_events([Event(source=speaker, input=text,
                                                    timestamp=Timestamp.parse(when))])
        return mem, units
    from fsmem.ingest.watch import Watcher
    inbox = tmp_path / "m" / "inbox"
    for i, (label, speaker, text, when) in enumerate(turns):
        (inbox / f"{i:02d}-{label}.jsonl").write_text(json.dumps(
            {"input": text, "source": speaker, "timestamp": when}) + "\n")
    Watcher(mem).run(once=True)
    by_text = {mem.document(u).events[0].input: u for u in mem.units("documents")}
    return mem, {label: by_text[text] for label, _s, text, _w in turns}


@pytest.mark.parametrize("path", ["commit", "commit_events", "watch"])
def test_a_topic_less_reply_is_found_through_its_question(tmp_path, path):
    """Per-turn units (no session, no role), whichever way they came in: the reply holds no
    topic word; it is found because it answers the turn before it, said by another
    speaker."""
    turns = [
        ("q", "Tom", "Lena, did you ever get the deposit back from your old landlord in Leeds?",
         _at(0)),
        ("reply", "Lena", "Eventually, yes, every penny, after three angry emails.", _at(0, 2)),
        ("c", "Tom", "Good. Keep the emails.", _at(0, 4)),
        ("d", "Lena", "I have a folder for them now.", _at(0, 5)),
        ("e", "Priya", "Lena, landlords are the worst, my deposit is still stuck.", _at(2)),
        ("f", "Lena", "Eventually, yes, I will visit, once the move is done.", _at(5)),
        ("g", "Lena", "Yes, the new flat has huge windows.", _at(9)),
    ]
    mem, units = _stored(tmp_path, turns, path)
    q = "Did Lena get her deposit back?"
    top = [u for u, _s in mem.index.search(q, 2)]
    assert units["reply"] in top, (top, units)
    alone = [u for u, _s, _m in mem.index.search_events(q, 5, "bm25", smooth=0)]
    assert units["reply"] not in alone[:2]   # by its own words it is not found
    mem.close()


_BAKERY_Q = "Did Tom get the job after the bakery interview?"


def _bakery(mark: str) -> list:
    """Plain turns where the question ("Tom, any news from the bakery interview?", or told as
    a statement with ``mark`` ".") holds the asked words and the turn after it the fact."""
    return [
        ("s", "Priya", "Lena, the bakery interview news: Marek's bakery is hiring again.", _at(0)),
        ("after_s", "Lena", "Then I start looking at the job ads on Monday.", _at(0, 2)),
        ("s2", "Priya", "Good plan.", _at(0, 4)),
        ("q", "Lena", "Tom, any news from the bakery interview" + mark, _at(3)),
        ("reply", "Tom", "Got the job! I start on the 17th, early shifts.", _at(3, 2)),
        ("z", "Lena", "Amazing.", _at(3, 4)),
    ]


@pytest.mark.parametrize("path", ["commit", "session"])
def test_an_answer_holding_part_of_what_is_asked_ranks_above_the_question(tmp_path, path):
    """The turn after a question is its answer: it takes more of the question's score than
    a neighbour does (ranking.REPLY_WEIGHT), so an answer holding part of the asked words
    ranks above the question, which only asks; a turn after a statement does not. Plain
    turns (spoken rows) and turns of one session (each its own unit) alike."""
    if path == "commit":
        mem, units = _plain(tmp_path, _bakery("?"))
    else:
        mem = Memory.open(str(tmp_path / "m"), durability="off", auto_prune=False)
        units = {label: mem.commit_events([Event(source=speaker, input=text,
                                                 timestamp=Timestamp.parse(when))],
                                          meta={"session": "chat-1"})
                 for label, speaker, text, when in _bakery("?")}
    top = [u for u, _s in mem.index.search(_BAKERY_Q, 3)]
    assert top[:2] == [units["reply"], units["q"]], (top, units)
    mem.close()


@pytest.mark.parametrize("ranker", ["dense", "rrf"])
def test_dense_and_rrf_do_not_weigh_an_answer_more(tmp_path, ranker):
    """Cosines alone and rrf's reciprocal ranks sit close together: the answer's larger share
    of its question is fusion's and the lexical ranker's only. The same turns with the
    question told as a statement rank alike (the hashed embedder reads no "?"); under fusion
    the answer rises."""
    seen = {}
    for rk in (ranker, "fusion"):
        for mark in ("?", "."):
            mem, units = _plain(tmp_path / f"{rk}{mark}", _bakery(mark), ranker=rk)
            label = {u: k for k, u in units.items()}
            seen[rk, mark] = [(label[u], round(s, 5))
                              for u, s in mem.index.search(_BAKERY_Q, 5, rk)]
            mem.close()
    assert seen[ranker, "?"] == seen[ranker, "."]
    assert seen["fusion", "?"][0][0] == "reply" and seen["fusion", "."][0][0] == "q", seen


def test_which_turns_ask():
    from fsmem.search import ranking
    assert ranking.asks(["Tom, any news from the bakery interview?"])
    assert ranking.asks(["周宇，面包店的面试有消息了吗？ "])
    assert ranking.asks(["Look at this:", "Is it a heron?", ""])   # its last text
    assert ranking.asks(["Wow. Really? When?"])
    assert ranking.asks(["Congratulations Uncle Dan! How's Ruth?"])   # a reaction, then asks
    assert not ranking.asks(["Who's watching the animals, you ask? Gloria again."])
    assert not ranking.asks(["Is it a heron?", "It is a heron."])
    assert not ranking.asks([])
    kind = ranking.event_kind("", "", "Tom", True)
    assert ranking.base_kind(np.array([kind], np.int8))[0] == ranking.KIND_SPOKEN
    assert ranking.asking(np.array([kind, ranking.KIND_SPOKEN, ranking.KIND_PSEUDO],
                                   np.int8)).tolist() == [True, False, False]


def test_a_burst_of_documents_from_one_source_are_not_neighbours(tmp_path):
    """Spoken rows neighbour only in a dialogue: notes committed in a burst by one named
    source do not lend each other their scores."""
    mem, units = _plain(tmp_path, [
        ("a", "Alice", "The boiler service is booked for Tuesday.", _at(0)),
        ("b", "Alice", "Buy more coffee filters.", _at(0, 1)),
    ])
    smoothed = dict(mem.index.search("boiler service", 2))
    assert units["b"] not in smoothed
    mem.close()


def _recall_at_5(mem: Memory, answers: dict, questions: list[dict], ranker: str) -> float:
    from eval_retrieval3 import ranks
    found = [ranks([u for u, _s in mem.index.search(q["question"], 5, ranker)], answers,
                   set(q["evidence"])) > 0 for q in questions]
    return sum(found) / len(found)


@pytest.mark.parametrize("path", ["plain", "untimed", "rich"])
def test_fused_is_not_worse_than_lexical_on_any_fixture_conversation(tmp_path, path):
    """fixtures/retrieval3, every conversation, every way in: the default fusion (recorded e5
    vectors) finds at least as many questions' evidence in its top 5 as lexical ranking."""
    from eval_retrieval3 import build_store, load_fixture
    from test_retrieval import RecordedE5
    convs, questions = load_fixture()
    emb = RecordedE5("retrieval3")
    for conv in convs:
        qs = [q for q in questions if q["conversation"] == conv["id"]]
        mem, answers = build_store(str(tmp_path / f"{conv['id']}-{path}"), conv, path, emb)
        assert mem.ranker == "fusion"
        lexical = _recall_at_5(mem, answers, qs, "bm25")
        fused = _recall_at_5(mem, answers, qs, "fusion")
        assert fused >= lexical, (conv["id"], path, fused, lexical)
        mem.close()


def test_relative_dates_resolve_to_days():
    """fsmem.search.when.resolve, pure: from the conversation's "now" (Sunday 20 April 2025)
    or from an anchor; an anchor's words are left out of the query."""
    from fsmem.format.timestamps import Timestamp
    from fsmem.search.when import may_name_dates, resolve
    now = Timestamp.parse("2025-04-20T18:00:00+00:00").ns
    week = [f"@2025-04-{d:02d}" for d in range(7, 14)]
    assert resolve("How far did Priya run last week?", now) == (
        week, "How far did Priya run last week?")
    assert resolve("王芳上周说了什么？", now)[0] == week
    assert resolve("what happened last month", now)[0] == ["@2025-03"]
    assert resolve("去年的旅行", now)[0] == ["2024"]
    assert resolve("three days ago", now)[0] == ["@2025-04-16", "@2025-04-17", "@2025-04-18"]
    trip = Timestamp.parse("2025-04-05T20:00:00+00:00").ns
    dates, rest = resolve("How long was the run two weeks before the Lisbon trip?", now,
                          anchor=lambda words: trip if "lisbon" in words.lower() else None)
    assert "@2025-03-22" in dates and "@2025-04-05" not in dates
    assert rest == "How long was the run two weeks before"
    assert resolve("two weeks before the trip", now, anchor=lambda _w: None) == (
        [], "two weeks before the trip")   # no anchor found: nothing
    assert not may_name_dates("What did Priya say about her knee?")
    assert resolve("What did Priya say about her knee?", now) == (
        [], "What did Priya say about her knee?")


def test_which_sources_are_speakers():
    from fsmem.search.speakers import speaker_of, spoken_text
    assert speaker_of("Caroline") == "Caroline"
    assert speaker_of("小林") == "小林"
    assert speaker_of("Mary Ann") == "Mary Ann"
    for generic in ("manual", "user", "agent", "inbox", "fixture", "telegram", "",
                    "notes/today.md", "https://x.y", "a@b.c", "Report.pdf"):
        assert speaker_of(generic) == "", generic
    assert spoken_text("Caroline", "I went to the support group") == \
        "Caroline: I went to the support group"
    assert spoken_text("Caroline", "Caroline: hi") == "Caroline: hi"
    assert spoken_text("manual", "a note") == "a note"
