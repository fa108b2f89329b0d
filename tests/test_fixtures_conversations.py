"""The conversation fixture and the paraphrase set are well-formed (schema in their README.md):
evidence turns exist, counts hold, every kind appears in both languages, times parse."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from _conversations import (KINDS, LANGS, content_words, load_conversations,  # noqa: E402
                            load_paraphrase, turn_index, validate_conversations,
                            validate_paraphrase)

from fsmem.format.timestamps import Timestamp  # noqa: E402


@pytest.fixture(scope="module")
def conv():
    return load_conversations()


@pytest.fixture(scope="module")
def para():
    return load_paraphrase()


def test_conversations_valid(conv):
    sessions, questions = conv
    assert validate_conversations(sessions, questions) == []


def test_conversation_counts(conv):
    sessions, questions = conv
    assert len(sessions) >= 20 and len(questions) >= 150
    for lang in LANGS:
        assert sum(s["lang"] == lang for s in sessions) >= 8, lang
        for kind in KINDS:
            assert any(q["lang"] == lang and q["kind"] == kind for q in questions), (lang, kind)


def test_times_parse_in_fsmem_and_keep_their_offset(conv):
    sessions, _ = conv
    for s in sessions:
        date = Timestamp.parse(s["date"])
        for t in s["turns"]:
            ts = Timestamp.parse(t["timestamp"])
            assert ts.offset == date.offset and ts.ns >= date.ns, t["id"]
    offsets = {Timestamp.parse(s["date"]).offset for s in sessions}
    assert len(offsets) >= 4   # several real offsets (summer time, travel), not one


def test_evidence_turns_exist_and_multi_hop_spans_sessions(conv):
    sessions, questions = conv
    turns = turn_index(sessions)
    for q in questions:
        assert q["evidence"] and all(e in turns for e in q["evidence"]), q["id"]
        if q["kind"] == "multi-hop":
            assert len({turns[e][0]["id"] for e in q["evidence"]}) >= 2, q["id"]


def test_questions_paraphrase_their_evidence(conv):
    """Questions are reworded, not copied: on average at most about half of a question's
    content words occur in its evidence turns."""
    sessions, questions = conv
    turns = turn_index(sessions)
    shares = []
    for q in questions:
        words = content_words(q["question"])
        ev = set().union(*(content_words(turns[e][1]["text"]) for e in q["evidence"]))
        if words:
            shares.append(len(words & ev) / len(words))
    assert sum(shares) / len(shares) < 0.5


def test_validator_catches_bad_fixtures(conv):
    sessions, questions = conv
    bad_s = copy.deepcopy(sessions)
    bad_q = copy.deepcopy(questions)
    bad_q[0]["evidence"] = ["no-such-turn"]
    bad_q[1]["kind"] = "trivia"
    bad_s[0]["turns"][3]["timestamp"] = "2025-01-12 19:05"
    bad_s[1]["date"] = "2025-02-03T20:30:00"          # no offset
    problems = "\n".join(validate_conversations(bad_s, bad_q))
    assert "no-such-turn" in problems and "trivia" in problems
    assert "2025-01-12 19:05" in problems and "2025-02-03T20:30:00" in problems
    few = validate_conversations(sessions[:5], [q for q in questions if q["lang"] == "en"])
    assert any("need at least 20" in p for p in few)
    assert any("need at least 150" in p for p in few)
    assert any("in zh" in p for p in few)


def test_build_is_reproducible():
    """The jsonl files are what build.py writes from the literals (no hand edits)."""
    before = [(REPO / "fixtures/conversations" / n).read_bytes()
              for n in ("sessions.jsonl", "questions.jsonl")]
    out = subprocess.run([sys.executable, str(REPO / "fixtures/conversations/build.py"),
                          "--check"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    from importlib import util
    spec = util.spec_from_file_location("conv_build", REPO / "fixtures/conversations/build.py")
    mod = util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sessions, questions = mod.build_rows()
    assert mod.encode(sessions) == before[0] and mod.encode(questions) == before[1]


def test_paraphrase_valid(para):
    docs, queries = para
    assert validate_paraphrase(docs, queries) == []
    assert len(docs) >= 60 and len(queries) >= 60


def test_paraphrase_queries_share_few_words(para):
    docs, queries = para
    text = {d["id"]: d["text"] for d in docs}
    shares = []
    for q in queries:
        words = content_words(q["query"])
        target = set().union(*(content_words(text[r]) for r in q["relevant"]))
        if words:
            shares.append(len(words & target) / len(words))
    assert sum(shares) / len(shares) < 0.35


# -- the evaluation's stores and scoring (benchmarks/eval_retrieval.py) ----------------------
import json  # noqa: E402

import eval_retrieval as ev  # noqa: E402


def test_direct_store_holds_one_unit_per_turn_with_its_time(conv, tmp_path):
    sessions, _ = conv
    one = sessions[:1]
    mem, answers = ev.build_direct(str(tmp_path / "m"), one)
    try:
        assert sorted(t for ids in answers.values() for t in ids) == \
            sorted(t["id"] for t in one[0]["turns"])
        turn = {t["id"]: t for t in one[0]["turns"]}
        for uid, (tid,) in answers.items():
            doc = mem.document(uid)
            assert doc.meta["session"] == one[0]["id"] and doc.meta["turn"] == tid
            (event,) = doc.events
            assert event.id == tid
            assert event.timestamp == Timestamp.parse(turn[tid]["timestamp"])
            assert event.input.endswith(turn[tid]["text"])
    finally:
        mem.close()


def test_lived_store_archives_every_turn_once(conv, tmp_path):
    sessions, _ = conv
    two = sessions[:2]                   # 40 turns: more than L1's default capacity of 30
    mem, answers, in_view = ev.build_lived(str(tmp_path / "m"), two)
    try:
        archived = [t for ids in answers.values() for t in ids]
        assert answers and 0 < len(in_view) <= mem.context_capacity
        assert len(archived) == len(set(archived))
        assert set(archived) | in_view == {t["id"] for s in two for t in s["turns"]}
        assert not set(archived) & in_view
    finally:
        mem.close()


def test_evaluate_items_ranks_and_in_view(conv, tmp_path):
    sessions, _ = conv
    mem, answers = ev.build_direct(str(tmp_path / "m"), sessions[:2])
    try:
        tid = "en-s02-t08"                      # the proposal on the bridge in Hebden Bridge
        items = [ev.Item("a", "Hebden Bridge proposal New Year's Eve", frozenset([tid]),
                         ("single-hop",), "en"),
                 ev.Item("b", "quantum chromodynamics lattice", frozenset([tid]),
                         ("open",), "en"),
                 ev.Item("c", "quantum chromodynamics lattice", frozenset(["x"]),
                         ("open",), "zh")]
        r = ev.evaluate_items(mem, answers, items, "bm25", in_view=frozenset(["x"]))
        assert r["by_kind"]["single-hop"]["recall@5"] == 1.0
        assert r["by_lang"]["en"]["recall@10"] == 0.5          # "b" is found nowhere
        assert r["by_lang"]["zh"]["mrr"] == 1.0 and r["in_view"] == 1
        assert r["latency_ms"]["p95"] >= r["latency_ms"]["p50"] > 0
    finally:
        mem.close()


def test_eval_cli_json(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks/eval_retrieval.py"),
                          "--sets", "paraphrase", "--rankers", "bm25,dense", "--json",
                          "--dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    res = report["sets"]["paraphrase"]["results"]
    assert set(res) == {"bm25", "dense"}
    for r in res.values():
        assert 0 <= r["recall@5"] <= r["recall@10"] <= 1 and r["n"] >= 60
        assert set(r["by_lang"]) == {"en", "zh"}
    assert list(tmp_path.iterdir()) == []      # the temporary stores are gone
