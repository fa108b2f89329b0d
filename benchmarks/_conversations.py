"""Load and validate the conversation fixture (fixtures/conversations) and the paraphrase set
(fixtures/paraphrase). One module, imported by benchmarks/eval_retrieval.py, by the fixtures'
build scripts and by tests/test_fixtures_conversations.py, so all of them read the same thing.

Stdlib only. The schemas are documented in each fixture's README.md.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

__all__ = ["CONVERSATIONS", "PARAPHRASE", "KINDS", "LANGS", "load_conversations",
           "load_paraphrase", "validate_conversations", "validate_paraphrase", "parse_time",
           "turn_index", "script_lang", "content_words"]

ROOT = Path(__file__).resolve().parent.parent
CONVERSATIONS = ROOT / "fixtures" / "conversations"
PARAPHRASE = ROOT / "fixtures" / "paraphrase"
KINDS = ("single-hop", "multi-hop", "temporal", "open")
LANGS = ("en", "zh")
ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$")   # also valid as an fsmem event id
_CJK = re.compile(r"[\u3400-\u9fff]")
_LATIN = re.compile(r"[A-Za-z]")
_STOP = set("a an the of to in on at for and or is are was were be been do does did i you he "
            "she it we they my your his her our their me him us them what which who whom when "
            "where why how that this these those with from by as about after before did any "
            "s t can could would should will has have had not no".split())


def _jsonl(path: Path) -> list[dict]:
    out = []
    for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not JSON: {exc}") from exc
    return out


def load_conversations(folder: Path = CONVERSATIONS) -> tuple[list[dict], list[dict]]:
    """(sessions, questions) as stored in sessions.jsonl and questions.jsonl."""
    return _jsonl(folder / "sessions.jsonl"), _jsonl(folder / "questions.jsonl")


def load_paraphrase(folder: Path = PARAPHRASE) -> tuple[list[dict], list[dict]]:
    """(documents, queries) as stored in docs.jsonl and queries.jsonl."""
    return _jsonl(folder / "docs.jsonl"), _jsonl(folder / "queries.jsonl")


def parse_time(text: object, where: str) -> datetime:
    """An RFC 3339 time with an explicit UTC offset, else ValueError naming ``where``."""
    if not isinstance(text, str) or not re.match(
            r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)$", text):
        raise ValueError(f"{where}: not an RFC 3339 time with an offset: {text!r}")
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def turn_index(sessions: list[dict]) -> dict[str, tuple[dict, dict]]:
    """turn id -> (session, turn)."""
    return {t["id"]: (s, t) for s in sessions for t in s.get("turns", [])}


def script_lang(text: str) -> str:
    """zh when the text has CJK characters, else en."""
    return "zh" if _CJK.search(text) else "en"


def content_words(text: str) -> set[str]:
    """Lower-cased Latin words without stop words, plus CJK bigrams: a crude overlap measure."""
    words = {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP}
    for run in re.findall(r"[\u3400-\u9fff]+", text):
        words |= {run[i:i + 2] for i in range(len(run) - 1)} or {run}
    return words


def _check_session(s: dict, seen: set[str]) -> list[str]:
    sid = s.get("id")
    bad: list[str] = []
    if not isinstance(sid, str) or not ID_RE.match(sid) or sid in seen:
        return [f"session id {sid!r}: missing, invalid or duplicate"]
    seen.add(sid)
    if s.get("lang") not in LANGS:
        bad.append(f"session {sid}: lang {s.get('lang')!r} not in {LANGS}")
    try:
        start = parse_time(s.get("date"), f"session {sid} date")
    except ValueError as exc:
        return bad + [str(exc)]
    speakers, turns = s.get("speakers"), s.get("turns")
    if not isinstance(speakers, list) or len(speakers) < 2:
        bad.append(f"session {sid}: speakers must list two or more names")
    if not isinstance(turns, list) or not 15 <= len(turns) <= 40:
        return bad + [f"session {sid}: needs 15-40 turns"]
    prev = None
    for t in turns:
        tid = t.get("id")
        where = f"session {sid} turn {tid!r}"
        if not isinstance(tid, str) or not ID_RE.match(tid) or tid in seen:
            bad.append(f"{where}: id missing, invalid or duplicate")
            continue
        seen.add(tid)
        if t.get("speaker") not in (speakers or []):
            bad.append(f"{where}: speaker {t.get('speaker')!r} not among the session's speakers")
        if not isinstance(t.get("text"), str) or not t["text"].strip():
            bad.append(f"{where}: empty text")
        elif script_lang(t["text"]) != s.get("lang"):
            bad.append(f"{where}: text is not in the session's language")
        try:
            at = parse_time(t.get("timestamp"), where)
        except ValueError as exc:
            bad.append(str(exc))
            continue
        if at.utcoffset() != start.utcoffset():
            bad.append(f"{where}: offset differs from the session date's")
        if prev is not None and not 0 < (at - prev).total_seconds() <= 1800:
            bad.append(f"{where}: not 1 s - 30 min after the previous turn")
        if prev is None and at != start:
            bad.append(f"{where}: the first turn is not at the session date")
        prev = at
    return bad


def validate_conversations(sessions: list[dict], questions: list[dict]) -> list[str]:
    """Every problem found, as readable lines (empty when the fixture is valid)."""
    bad: list[str] = []
    seen: set[str] = set()
    for s in sessions:
        bad += _check_session(s, seen)
    turns = turn_index(sessions)
    for lang in LANGS:
        dates = []
        for s in sessions:
            if s.get("lang") == lang:
                try:
                    dates.append(parse_time(s.get("date"), str(s.get("id"))))
                except ValueError:
                    pass   # reported by _check_session
        if dates != sorted(dates):
            bad.append(f"{lang} sessions are not in date order")
        if len(dates) >= 2 and (dates[-1] - dates[0]).days < 90:
            bad.append(f"{lang} sessions span less than three months")
    qids: set[str] = set()
    texts: set[str] = set()
    for q in questions:
        bad += _check_question(q, turns, qids, texts)
    if len(sessions) < 20:
        bad.append(f"{len(sessions)} sessions, need at least 20")
    if len(questions) < 150:
        bad.append(f"{len(questions)} questions, need at least 150")
    for lang in LANGS:
        for kind in KINDS:
            if not any(q.get("lang") == lang and q.get("kind") == kind for q in questions):
                bad.append(f"no {kind} question in {lang}")
    return bad


def _check_question(q: dict, turns: dict, qids: set[str], texts: set[str]) -> list[str]:
    qid = q.get("id")
    where = f"question {qid!r}"
    if not isinstance(qid, str) or not ID_RE.match(qid) or qid in qids:
        return [f"{where}: id missing, invalid or duplicate"]
    qids.add(qid)
    bad = []
    if q.get("lang") not in LANGS:
        bad.append(f"{where}: lang {q.get('lang')!r} not in {LANGS}")
    if q.get("kind") not in KINDS:
        bad.append(f"{where}: kind {q.get('kind')!r} not in {KINDS}")
    text = q.get("question")
    if not isinstance(text, str) or not text.strip() or text in texts:
        bad.append(f"{where}: question text empty or repeated")
    else:
        texts.add(text)
        if script_lang(text) != q.get("lang"):
            bad.append(f"{where}: question is not written in its lang")
    if not isinstance(q.get("answer"), str) or not q["answer"].strip():
        bad.append(f"{where}: empty answer")
    ev = q.get("evidence")
    if not isinstance(ev, list) or not ev:
        return bad + [f"{where}: evidence must be a non-empty list of turn ids"]
    missing = [e for e in ev if e not in turns]
    if missing:
        return bad + [f"{where}: evidence turns not found: {missing}"]
    if any(turns[e][0].get("lang") != q.get("lang") for e in ev):
        bad.append(f"{where}: evidence in a conversation of another language")
    if q.get("kind") == "multi-hop" and len({turns[e][0]["id"] for e in ev}) < 2:
        bad.append(f"{where}: multi-hop evidence must span two or more sessions")
    return bad


def validate_paraphrase(docs: list[dict], queries: list[dict]) -> list[str]:
    """Every problem found in the paraphrase set (empty when valid)."""
    bad: list[str] = []
    ids: set[str] = set()
    for d in docs:
        did = d.get("id")
        if not isinstance(did, str) or not ID_RE.match(did) or did in ids:
            bad.append(f"document id {did!r}: missing, invalid or duplicate")
            continue
        ids.add(did)
        if d.get("lang") not in LANGS or not isinstance(d.get("text"), str) \
                or script_lang(d["text"]) != d["lang"]:
            bad.append(f"document {did}: lang missing or not the text's script")
    qids: set[str] = set()
    for q in queries:
        qid = q.get("id")
        if not isinstance(qid, str) or not ID_RE.match(qid) or qid in qids:
            bad.append(f"query id {qid!r}: missing, invalid or duplicate")
            continue
        qids.add(qid)
        if q.get("lang") not in LANGS or not isinstance(q.get("query"), str) \
                or script_lang(q["query"]) != q["lang"]:
            bad.append(f"query {qid}: lang missing or not the query's script")
        rel = q.get("relevant")
        if not isinstance(rel, list) or not rel or any(r not in ids for r in rel):
            bad.append(f"query {qid}: relevant must list existing document ids")
    for lang in LANGS:
        if sum(d.get("lang") == lang for d in docs) < 25:
            bad.append(f"fewer than 25 {lang} documents")
        if sum(q.get("lang") == lang for q in queries) < 25:
            bad.append(f"fewer than 25 {lang} queries")
    if len(docs) < 60 or len(queries) < 60:
        bad.append(f"{len(docs)} documents, {len(queries)} queries: need 60 of each")
    return bad
