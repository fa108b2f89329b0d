"""Analyzer and ranking variants, side by side, on fixtures/conversations and fixtures/retrieval.

Conversations: every turn is an event (id = turn id, source "chat", role "user", text
"<speaker>: <text>", the turn's timestamp); a question is answered when one of its evidence
turns is among the top 5 results. ``direct``: one unit per turn (commit). ``lived``: the
turns are appended to L1 (capacity 30) and pruned into archive units; a hit counts when one of
its ``events_matched`` is an evidence turn (``lived-unit``: when the unit holds one).
Documents: fixtures/retrieval core queries, recall@5 of the expected document.

Usage: python benchmarks/bench_ranking.py [--variants NAME,...] [--embedder hash|e5|minilm]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _conversations import load_conversations  # noqa: E402
from eval_retrieval import build, is_translation, load_fixture  # noqa: E402

from fsmem import Memory, ranking  # noqa: E402
from fsmem.model import Event  # noqa: E402
from fsmem.timestamps import Timestamp  # noqa: E402

# name -> (ranking parameters, search keyword arguments)
VARIANTS: dict[str, dict] = {
    "b0.75 no-smooth": {"B": 0.75, "SMOOTH": 0.0},
    "b0.5 no-smooth": {"B": 0.5, "SMOOTH": 0.0},
    "b0.25 no-smooth": {"B": 0.25, "SMOOTH": 0.0},
    "b0.5 smooth0.25": {"B": 0.5, "SMOOTH": 0.25},
    "b0.5 smooth0.5": {"B": 0.5, "SMOOTH": 0.5},
    "b0.25 smooth0.5": {"B": 0.25, "SMOOTH": 0.5},
    "b0.5 smooth0.75": {"B": 0.5, "SMOOTH": 0.75},
    "b0.5 smooth0.5 k1=0.9": {"B": 0.5, "SMOOTH": 0.5, "K1": 0.9},
    "b0.5 smooth0.5 k1=1.5": {"B": 0.5, "SMOOTH": 0.5, "K1": 1.5},
}


class CachedEmbedder:
    """A real embedder with its vectors kept in a file by text (re-runs embed nothing new)."""

    def __init__(self, inner, path: str) -> None:
        self.inner, self.path = inner, path
        self.fingerprint, self.dim = inner.fingerprint, inner.dim
        self.cache: dict[tuple[bool, str], np.ndarray] = {}
        if os.path.exists(path):
            with open(path, "rb") as fh:
                self.cache = pickle.load(fh)

    def _get(self, texts, query: bool) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if (query, t) not in self.cache]
        if missing:
            fn = self.inner.embed_query if query and hasattr(self.inner, "embed_query") \
                else self.inner.embed
            for t, v in zip(missing, fn(missing)):
                self.cache[(query, t)] = v
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.cache[(query, t)] for t in texts]).astype(np.float32)

    def embed(self, texts):
        return self._get(list(texts), False)

    def embed_query(self, texts):
        return self._get(list(texts), True)

    def save(self) -> None:
        with open(self.path, "wb") as fh:
            pickle.dump(self.cache, fh)


def _events(sessions: list[dict]) -> list[Event]:
    return [Event(id=t["id"], timestamp=Timestamp.parse(t["timestamp"]), source="chat",
                  role="user", input=f"{t['speaker']}: {t['text']}")
            for s in sessions for t in s["turns"]]


def build_conversations(root: str, sessions: list[dict], lived: bool, embedder=None) -> Memory:
    mem = Memory.open(root, durability="off", embedder=embedder, auto_prune=lived,
                      context_capacity=30, context_protected=10)
    for ev in _events(sessions):
        if lived:
            mem.append(ev)
        else:
            mem.commit_events([ev], source="chat")
    if lived:   # what is still in L1 is not searchable by query: archive it too
        mem.context_capacity, mem.context_protected = 0, 0
        mem.prune()
    return mem


def eval_conversations(mem: Memory, questions: list[dict], ranker: str, lived: bool,
                       weight: float) -> dict:
    idx = mem.index
    found, found_unit, lat = [], [], []
    for q in questions:
        t = time.perf_counter()
        hits = idx.search_events(q["question"], 5, ranker, weight=weight)
        lat.append(time.perf_counter() - t)
        ev = set(q["evidence"])
        matched = {e for _, _, m in hits for e in m}
        held = set()
        for uid, _, _ in hits:
            row = idx.row_of.get(uid)
            if row is not None:
                held |= set(idx.ev_ids[idx.u_ptr[row]:idx.u_ptr[row + 1]])
            else:
                held |= set(idx.pending[uid].rows.ids)
        found.append(bool((matched if lived else held) & ev))
        found_unit.append(bool(held & ev))
    out = {"r@5": float(np.mean(found)), "p50_ms": statistics.median(lat) * 1000}
    if lived:
        out["unit_r@5"] = float(np.mean(found_unit))
    for kind in sorted({q["kind"] for q in questions}):
        out[kind] = float(np.mean([f for f, q in zip(found, questions) if q["kind"] == kind]))
    for lang in ("en", "zh"):
        out[lang] = float(np.mean([f for f, q in zip(found, questions) if q["lang"] == lang]))
    return out


def eval_documents(mem: Memory, unit_of: dict[str, str], queries: list[dict], ranker: str,
                   weight: float) -> float:
    ok = []
    for q in queries:
        hits = [unit_of[u] for u, _ in mem.index.search(q["query"], 5, ranker, weight=weight)]
        ok.append(q["expected"] in hits)
    return float(np.mean(ok))


def _set(params: dict) -> dict:
    old = {k: getattr(ranking, k) for k in params}
    for k, v in params.items():
        setattr(ranking, k, v)
    return old


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--embedder", default="hash", choices=["hash", "e5", "minilm"])
    ap.add_argument("--ranker", default="bm25")
    ap.add_argument("--cache", default="", help="file keeping the real embedder's vectors")
    ap.add_argument("--weights", default="0.5", help="dense weights of fusion, comma-separated")
    args = ap.parse_args()
    embedder = None
    if args.embedder == "e5":
        from fsmem.embedders import E5SmallEmbedder
        embedder = E5SmallEmbedder()
    elif args.embedder == "minilm":
        from fsmem.embedders import SentenceTransformerEmbedder
        embedder = SentenceTransformerEmbedder()
    if embedder is not None and args.cache:
        embedder = CachedEmbedder(embedder, args.cache)
    sessions, questions = load_conversations()
    docs, queries = load_fixture()
    lang = {d["id"]: d["lang"] for d in docs}
    core = [q for q in queries if not is_translation(q, lang)]
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        direct = build_conversations(f"{tmp}/direct", sessions, False, embedder)
        lived = build_conversations(f"{tmp}/lived", sessions, True, embedder)
        dmem, unit_of = build(f"{tmp}/docs", docs, embedder)
        for m in (direct, lived, dmem):
            m.index._compact()
        if isinstance(embedder, CachedEmbedder):
            embedder.save()
        print(f"built in {time.perf_counter() - t:.1f} s; {len(questions)} questions, "
              f"{len(core)} document queries; ranker {args.ranker}, embedder "
              f"{direct.embedder.fingerprint}")
        head = f"{'variant':<26}{'direct':>7}{'lived':>7}{'l-unit':>7}{'docs':>7}  " \
               f"{'1hop':>5}{'mhop':>5}{'temp':>5}{'open':>5}{'en':>5}{'zh':>5}{'p50ms':>7}"
        print(head)
        for name, w in ((n, float(w)) for w in args.weights.split(",")
                        for n in args.variants.split(",")):
            old = _set(VARIANTS[name])
            try:
                d = eval_conversations(direct, questions, args.ranker, False, w)
                li = eval_conversations(lived, questions, args.ranker, True, w)
                doc = eval_documents(dmem, unit_of, core, args.ranker, w)
            finally:
                _set(old)
            name = f"{name} w{w}" if args.ranker in ("fusion", "rrf") else name
            print(f"{name:<26}{d['r@5']:>7.3f}{li['r@5']:>7.3f}{li['unit_r@5']:>7.3f}"
                  f"{doc:>7.3f}  {d['single-hop']:>5.2f}{d['multi-hop']:>5.2f}"
                  f"{d['temporal']:>5.2f}{d['open']:>5.2f}{d['en']:>5.2f}{d['zh']:>5.2f}"
                  f"{d['p50_ms']:>7.2f}")


if __name__ == "__main__":
    main()
