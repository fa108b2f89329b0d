"""Retrieval quality and query latency on four sets, for each ranker:

- ``docs``: fixtures/retrieval (zh/en/mixed documents, one expected document a query); the core
  queries, and apart ``docs-translation`` (a query in the other language from its document);
- ``conv-direct``: fixtures/conversations, one L2 unit per turn (committed with the turn's
  timestamp and its event id = turn id; source = the speaker, session/turn/speaker in meta);
- ``conv-lived``: the same turns appended through ``Memory.append`` in time order at the default
  L1 capacity, so prune archives them into L2; queried over L2, with the events still in L1
  counted as in the model's view (answered at rank 1, reported as ``in_view``);
- ``paraphrase``: fixtures/paraphrase (queries that share few words with their document);
- ``conv-keywords``: the conv-direct store, asked keyword questions derived from each English
  question's evidence turn ("When did Maya mention card and deadline?": two of its content
  words, at the median document frequency, or the two most frequent), the lexical-friendly
  kind of question a held-out conversation benchmark is rich in, where a fixed dense-heavy
  fusion loses to lexical (docs/DECISIONS.md "Fusion").

A question counts as answered at k when any evidence turn (or relevant document) is held by one
of the top k units. Prints recall@5, recall@10 and MRR (over the top 10) per set, per kind and
per language, and query latency p50/p95 (``Index.search`` only, after one warm-up query).

Usage: python benchmarks/eval_retrieval.py [--embedder hash|minilm|module:factory]
           [--rankers bm25,dense,fusion] [--fusion-weights 0.2,0.5] [--sets ...] [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _conversations import load_conversations, load_paraphrase  # noqa: E402

from fsmem import Event, Memory, Timestamp  # noqa: E402
from fsmem.search import index as index_mod  # noqa: E402

__all__ = ["Item", "load_fixture", "is_translation", "build", "build_direct", "build_lived",
           "build_paraphrase", "keyword_items", "evaluate", "evaluate_items", "main"]

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "retrieval"
SETS = ("docs", "docs-translation", "conv-direct", "conv-lived", "paraphrase", "conv-keywords")
KS = (5, 10)


@dataclass(frozen=True)
class Item:
    """One query of a set: its text, the answer ids that satisfy it, its kinds and language."""

    qid: str
    text: str
    relevant: frozenset[str]
    kinds: tuple[str, ...]
    lang: str


# -- fixtures/retrieval ---------------------------------------------------------------------
def load_fixture() -> tuple[list[dict], list[dict]]:
    docs = [json.loads(line) for line in (FIXTURE / "docs.jsonl").read_text("utf-8").splitlines()
            if line.strip()]
    queries = [json.loads(line) for line in
               (FIXTURE / "queries.jsonl").read_text("utf-8").splitlines() if line.strip()]
    return docs, queries


def is_translation(q: dict, doc_lang: dict[str, str]) -> bool:
    """A query in one language whose document is wholly in the other (zh <-> en): it needs
    translation, which no lexical or hashed signal can do. Reported apart from the set the
    search issue defines (paraphrase, partial, name-in-one-script, detail)."""
    qlang = next((k for k in q.get("kind", "").split("+") if k in ("zh", "en", "mixed")), "")
    return {qlang, doc_lang[q["expected"]]} == {"zh", "en"}


def build(root: str, docs: list[dict], embedder: object | None = None) -> tuple[Memory, dict[str, str]]:
    """One unit per document of fixtures/retrieval; returns (memory, unit id -> document id)."""
    mem = Memory.open(root, durability="off", embedder=embedder, auto_prune=False)
    unit_of = {}
    for d in docs:
        unit_of[mem.commit(d["text"], source="fixture", meta={"fixture_id": d["id"]})] = d["id"]
    return mem, unit_of


def docs_items(queries: list[dict]) -> list[Item]:
    out = []
    for q in queries:
        tags = q.get("kind", "").split("+")
        lang = next((t for t in tags if t in ("zh", "en", "mixed")), "")
        out.append(Item(q["id"], q["query"], frozenset([q["expected"]]),
                        tuple(t for t in tags if t != lang), lang))
    return out


# -- fixtures/conversations -----------------------------------------------------------------
def _turns_in_time_order(sessions: list[dict]) -> list[tuple[dict, dict]]:
    """Every turn of every session, by absolute time (both conversations interleaved)."""
    pairs = [(s, t) for s in sessions for t in s["turns"]]
    pairs.sort(key=lambda p: (Timestamp.parse(p[1]["timestamp"]).ns, p[1]["id"]))
    return pairs


def _turn_event(t: dict) -> Event:
    """A turn as an event: its id, time and speaker (as source); the text names the speaker,
    as a chat transcript line does."""
    return Event(id=t["id"], timestamp=Timestamp.parse(t["timestamp"]), source=t["speaker"],
                 input=f"{t['speaker']}: {t['text']}")


def build_direct(root: str, sessions: list[dict], embedder: object | None = None
                 ) -> tuple[Memory, dict[str, list[str]]]:
    """One L2 unit per turn; returns (memory, unit id -> [turn id])."""
    mem = Memory.open(root, durability="off", embedder=embedder, auto_prune=False)
    answers = {}
    for s, t in _turns_in_time_order(sessions):
        uid = mem.commit_events([_turn_event(t)], source=t["speaker"],
                                meta={"session": s["id"], "turn": t["id"],
                                      "speaker": t["speaker"], "session_date": s["date"]})
        answers[uid] = [t["id"]]
    return mem, answers


def build_lived(root: str, sessions: list[dict], embedder: object | None = None
                ) -> tuple[Memory, dict[str, list[str]], frozenset[str]]:
    """Every turn appended to L1 in time order at the default capacity (prune archives the
    overflow into L2 units); returns (memory, L2 unit id -> its turn ids, turn ids still in L1).
    """
    mem = Memory.open(root, durability="off", embedder=embedder)
    for _s, t in _turns_in_time_order(sessions):
        mem.append(_turn_event(t))
    answers = {uid: [e.id for e in mem.document(uid).events] for uid in mem.units("documents")}
    in_view = frozenset(e.id for e in mem.timeline())
    return mem, answers, in_view


def conversation_items(questions: list[dict]) -> list[Item]:
    return [Item(q["id"], q["question"], frozenset(q["evidence"]), (q["kind"],), q["lang"])
            for q in questions]


_WORD_RE = re.compile(r"[a-z]+")


def keyword_items(sessions: list[dict], questions: list[dict]) -> list[Item]:
    """Keyword questions from the English questions' first evidence turns: two content words
    of the turn (longer than 3 letters, no stop word, no speaker name), either those at the
    median document frequency over the English turns ("mid-df") or the two most frequent
    ("common-df"). Derived from the fixture alone; deterministic."""
    from fsmem.search.analyze import STOP_WORDS
    turns = {t["id"]: t for s in sessions for t in s["turns"]}
    names = {t["speaker"].lower() for t in turns.values()}

    def words(text: str) -> list[str]:
        return list(dict.fromkeys(w for w in _WORD_RE.findall(text.lower())
                                  if len(w) > 3 and w not in STOP_WORDS and w not in names))
    df: dict[str, int] = {}
    for s in sessions:
        if s["lang"] == "en":
            for t in s["turns"]:
                for w in words(t["text"]):
                    df[w] = df.get(w, 0) + 1
    out = []
    for q in questions:
        turn = turns[q["evidence"][0]]
        ws = sorted(words(turn["text"]), key=lambda w: (-df.get(w, 0), w))
        if q["lang"] != "en" or len(ws) < 4:
            continue
        mid = len(ws) // 2
        for kind, pick in (("mid-df", ws[mid - 1:mid + 1]), ("common-df", ws[:2])):
            out.append(Item(f"{q['id']}-{kind}", f"When did {turn['speaker']} mention "
                            f"{pick[0]} and {pick[1]}?", frozenset(q["evidence"]), (kind,), "en"))
    return out


# -- fixtures/paraphrase --------------------------------------------------------------------
def build_paraphrase(root: str, docs: list[dict], embedder: object | None = None
                     ) -> tuple[Memory, dict[str, list[str]]]:
    mem = Memory.open(root, durability="off", embedder=embedder, auto_prune=False)
    answers = {}
    for d in docs:
        answers[mem.commit(d["text"], source="fixture", meta={"fixture_id": d["id"]})] = [d["id"]]
    return mem, answers


def paraphrase_items(queries: list[dict]) -> list[Item]:
    return [Item(q["id"], q["query"], frozenset(q["relevant"]), ("paraphrase",), q["lang"])
            for q in queries]


# -- scoring --------------------------------------------------------------------------------
def _summary(ranks: list[int]) -> dict:
    r = np.array(ranks)
    out: dict = {"n": len(ranks)}
    for k in KS:
        out[f"recall@{k}"] = float(np.mean((r > 0) & (r <= k))) if len(r) else 0.0
    out["mrr"] = float(np.mean([1 / x if x else 0 for x in ranks])) if ranks else 0.0
    return out


def _search(mem: Memory, text: str, ranker: str, weight: float | None) -> list[tuple[str, float]]:
    if weight is None:
        return mem.index.search(text, max(KS), ranker)
    return mem.index.search(text, max(KS), ranker, weight=weight)


def evaluate_items(mem: Memory, answers: dict[str, list[str]], items: list[Item], ranker: str,
                   weight: float | None = None, in_view: frozenset[str] = frozenset()) -> dict:
    """Ranks (1-based, 0 = not in the top 10) of the first unit holding an answer; recall@k,
    MRR, per kind and per language, query latency."""
    _search(mem, "warm up", ranker, weight)
    ranks, l2_ranks, times, by_kind, by_lang, seen = [], [], [], {}, {}, 0
    for it in items:
        t0 = time.perf_counter()
        hits = _search(mem, it.text, ranker, weight)
        times.append(time.perf_counter() - t0)
        rank = next((i for i, (uid, _s) in enumerate(hits, 1)
                     if it.relevant.intersection(answers.get(uid, ()))), 0)
        l2_ranks.append(rank)
        if it.relevant & in_view:
            rank, seen = 1, seen + 1
        ranks.append(rank)
        for kind in it.kinds:
            by_kind.setdefault(kind, []).append(rank)
        by_lang.setdefault(it.lang, []).append(rank)
    out = _summary(ranks)
    out["by_kind"] = {k: _summary(v) for k, v in sorted(by_kind.items())}
    out["by_lang"] = {k: _summary(v) for k, v in sorted(by_lang.items())}
    ms = np.array(times) * 1000
    out["latency_ms"] = {"p50": float(np.percentile(ms, 50)) if len(ms) else 0.0,
                         "p95": float(np.percentile(ms, 95)) if len(ms) else 0.0}
    if in_view:
        out["in_view"] = seen
        out["l2_only"] = _summary(l2_ranks)   # without the credit for events in L1
    return out


def evaluate(mem: Memory, unit_of: dict[str, str], queries: list[dict], ranker: str,
             weight: float | None = None) -> dict:
    """fixtures/retrieval queries: recall@5/@10, MRR; ``by_kind`` holds the kinds and the
    language tags (as the query's ``kind`` string does)."""
    out = evaluate_items(mem, {u: [d] for u, d in unit_of.items()}, docs_items(queries),
                         ranker, getattr(index_mod, "DEFAULT_WEIGHT", None) if weight is None
                         else weight)
    out["by_kind"] = {**out["by_kind"], **out["by_lang"]}
    return out


# -- running --------------------------------------------------------------------------------
def make_embedder(spec: str) -> object | None:
    """``hash`` (the default, None), ``minilm`` (the fsmem[embed] extra) or ``module:factory``
    (any embedder class or function taking no arguments, e.g. one a later extra ships)."""
    if spec == "hash":
        return None
    if spec == "minilm":
        from fsmem.search.embedders import SentenceTransformerEmbedder
        return SentenceTransformerEmbedder()
    module, _, attr = spec.partition(":")
    if not attr:
        raise SystemExit(f"--embedder: expected hash, minilm or module:factory, got {spec!r}")
    return getattr(importlib.import_module(module), attr)()


def configs(rankers: list[str], weights: list[float]) -> list[tuple[str, str, float | None]]:
    """(row name, ranker, fusion weight or None for the index default), for the rankers this
    fsmem offers."""
    available = getattr(index_mod, "RANKERS", ("bm25", "dense", "fusion"))
    out = []
    for r in rankers:
        if r not in available:
            print(f"(ranker {r!r} not offered by this fsmem: skipped)", file=sys.stderr)
            continue
        if r == "fusion" and weights:
            out += [(f"fusion w={w}", "fusion", w) for w in weights]
        else:
            out.append((r, r, None))
    return out


def _build_set(name: str, root: str, embedder: object | None
               ) -> tuple[Memory, dict[str, list[str]], list[Item], frozenset[str], dict]:
    """(memory, unit id -> answer ids, items, turn ids in L1, facts) of one set."""
    in_view: frozenset[str] = frozenset()
    if name in ("docs", "docs-translation"):
        docs, queries = load_fixture()
        lang = {d["id"]: d["lang"] for d in docs}
        want = name == "docs-translation"
        mem, unit_of = build(root, docs, embedder)
        answers = {u: [d] for u, d in unit_of.items()}
        items = docs_items([q for q in queries if is_translation(q, lang) == want])
        facts = {"units": len(docs)}
    elif name in ("conv-direct", "conv-lived", "conv-keywords"):
        sessions, questions = load_conversations()
        items = keyword_items(sessions, questions) if name == "conv-keywords" \
            else conversation_items(questions)
        if name != "conv-lived":
            mem, answers = build_direct(root, sessions, embedder)
        else:
            mem, answers, in_view = build_lived(root, sessions, embedder)
        facts = {"turns": sum(len(s["turns"]) for s in sessions), "units": len(answers),
                 "in_l1": len(in_view)}
    else:
        docs, queries = load_paraphrase()
        mem, answers = build_paraphrase(root, docs, embedder)
        items = paraphrase_items(queries)
        facts = {"units": len(docs)}
    flush = getattr(mem, "flush_vectors", None)   # deferred vectors: all in before queries
    if flush is not None:
        flush()
    return mem, answers, items, in_view, facts


def run_set(name: str, tmp: str, embedder: object | None,
            cfgs: list[tuple[str, str, float | None]]) -> tuple[dict, dict]:
    """Build the store of one set and evaluate every config; returns (results, facts)."""
    t0 = time.perf_counter()
    mem, answers, items, in_view, facts = _build_set(name, os.path.join(tmp, name), embedder)
    facts["build_s"] = round(time.perf_counter() - t0, 2)
    facts["queries"] = len(items)
    try:
        results = {row: evaluate_items(mem, answers, items, ranker, w, in_view)
                   for row, ranker, w in cfgs}
    finally:
        mem.close()
    return results, facts


def print_set(name: str, facts: dict, results: dict) -> None:
    print(f"\n== {name}: {facts['queries']} queries over {facts['units']} units "
          + (f"({facts['turns']} turns, {facts['in_l1']} left in L1) " if "turns" in facts
             else "") + f"[built in {facts['build_s']} s]")
    first = next(iter(results.values()))
    langs, kinds = list(first["by_lang"]), list(first["by_kind"])
    head = f"{'ranker':<14}{'r@5':>6}{'r@10':>6}{'MRR':>6}{'p50ms':>7}{'p95ms':>7}  "
    head += "".join(f"{k[:10]:>11}" for k in langs + kinds)
    print(head + ("   in view  L2 r@5" if "in_view" in first else ""))
    print(f"{'':<46}  " + "".join(f"{'(r@5)':>11}" for _ in langs + kinds))
    for row, r in results.items():
        line = (f"{row:<14}{r['recall@5']:>6.3f}{r['recall@10']:>6.3f}{r['mrr']:>6.3f}"
                f"{r['latency_ms']['p50']:>7.2f}{r['latency_ms']['p95']:>7.2f}  ")
        line += "".join(f"{r['by_lang'][k]['recall@5']:>11.3f}" for k in langs)
        line += "".join(f"{r['by_kind'][k]['recall@5']:>11.3f}" for k in kinds)
        print(line + (f"{r['in_view']:>10}{r['l2_only']['recall@5']:>9.3f}" if "in_view" in r
                      else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--embedder", default="hash",
                    help="hash (default), minilm, or module:factory for another embedder")
    ap.add_argument("--rankers", default="bm25,dense,fusion")
    ap.add_argument("--fusion-weights", default="",
                    help="comma-separated dense weights for fusion rows (default: the index's)")
    ap.add_argument("--sets", default=",".join(SETS), help=f"any of {', '.join(SETS)}")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dir", default=None, help="where to build the stores (default: a temp dir)")
    args = ap.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise SystemExit(f"--sets: unknown {unknown}; choose from {', '.join(SETS)}")
    weights = [float(w) for w in args.fusion_weights.split(",") if w]
    cfgs = configs([r for r in args.rankers.split(",") if r], weights)
    embedder = make_embedder(args.embedder)
    t0 = time.perf_counter()
    report = {"embedder": getattr(embedder, "fingerprint", "hash (default)"),
              "loadavg_before": os.getloadavg()[0], "sets": {}}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for name in sets:
            results, facts = run_set(name, tmp, embedder, cfgs)
            report["sets"][name] = {"facts": facts, "results": results}
            if not args.json:
                print_set(name, facts, results)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["loadavg_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print(f"\nembedder {report['embedder']}; {report['seconds']} s; load average "
              f"{report['loadavg_before']:.2f} before, {report['loadavg_after']:.2f} after")


if __name__ == "__main__":
    main()
