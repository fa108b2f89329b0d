"""Analyzer and ranking variants, side by side, on fixtures/conversations and fixtures/retrieval.

The sets, stores and scoring are eval_retrieval.py's (docs core, conv-direct, conv-lived over
L2 alone, paraphrase); each store is built once and every variant of the ranking parameters
(fsmem.search.ranking: K1, B, SMOOTH) is evaluated on it. Neighbour links are made with WINDOW_NS as
it is when the stores are compacted.

Usage: python benchmarks/bench_ranking.py [--variants NAME,...] [--embedder hash|e5|minilm]
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_retrieval import _build_set, evaluate_items  # noqa: E402

from fsmem.search import ranking  # noqa: E402

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
    "b0.35 smooth0.5": {"B": 0.35, "SMOOTH": 0.5},
    "b0.35 smooth0.75": {"B": 0.35, "SMOOTH": 0.75},
    "b0.25 smooth0.75": {"B": 0.25, "SMOOTH": 0.75},
    "b0.75 smooth0.5": {"B": 0.75, "SMOOTH": 0.5},
    "b0.35 smooth1.0": {"B": 0.35, "SMOOTH": 1.0},
    "b0.35 smooth0.5 fused": {"B": 0.35, "SMOOTH": 0.5, "SMOOTH_FUSED": True},
    "b0.35 smooth0.25 fused": {"B": 0.35, "SMOOTH": 0.25, "SMOOTH_FUSED": True},
    "b0.35 no-smooth": {"B": 0.35, "SMOOTH": 0.0},
    "b0.35 smooth0.5 win10": {"B": 0.35, "SMOOTH": 0.5, "WINDOW_NS": 10 * 60 * 10**9},
    "b0.35 smooth0.5 win120": {"B": 0.35, "SMOOTH": 0.5, "WINDOW_NS": 120 * 60 * 10**9},
}


class CachedEmbedder:
    """A real embedder with its vectors kept in a file by text (re-runs embed nothing new)."""

    def __init__(self, inner, path: str) -> None:
        self.inner, self.path = inner, path
        self.fingerprint, self.dim = inner.fingerprint, inner.dim
        if hasattr(inner, "fusion_weight"):
            self.fusion_weight = inner.fusion_weight
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


def _set(params: dict) -> dict:
    old = {k: getattr(ranking, k) for k in params}
    for k, v in params.items():
        setattr(ranking, k, v)
    return old


def _relink(built: dict) -> None:
    """Neighbours again, with the current WINDOW_NS (they are made when arrays compact)."""
    for mem, *_ in built.values():
        idx = mem.index
        idx.ev_prev, idx.ev_next = ranking.link_neighbours(idx.ev_unit, idx.ev_key,
                                                           idx.ev_time, idx.ev_kind)


SETS = ("docs", "conv-direct", "conv-lived", "paraphrase")


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
        from fsmem.search.embedders import E5SmallEmbedder
        embedder = E5SmallEmbedder()
    elif args.embedder == "minilm":
        from fsmem.search.embedders import SentenceTransformerEmbedder
        embedder = SentenceTransformerEmbedder()
    if embedder is not None and args.cache:
        embedder = CachedEmbedder(embedder, args.cache)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        built = {name: _build_set(name, os.path.join(tmp, name), embedder) for name in SETS}
        for mem, *_ in built.values():
            mem.index._compact()
        if isinstance(embedder, CachedEmbedder):
            embedder.save()
        print(f"built in {time.perf_counter() - t:.1f} s; ranker {args.ranker}, embedder "
              f"{embedder.fingerprint if embedder else 'hash'}; recall@5 (lived: L2 alone)")
        print(f"{'variant':<30}" + "".join(f"{n:>12}" for n in SETS) + f"{'p50 ms':>8}")
        for name, w in ((n, float(w)) for w in args.weights.split(",")
                        for n in args.variants.split(",")):
            old = _set(VARIANTS[name])
            _relink(built)
            try:
                res = {n: evaluate_items(mem, answers, items, args.ranker, w, in_view)
                       for n, (mem, answers, items, in_view, _f) in built.items()}
            finally:
                _set(old)
                _relink(built)
            label = f"{name} w{w}" if args.ranker in ("fusion", "rrf") else name
            print(f"{label:<30}" + "".join(
                f"{r.get('l2_only', r)['recall@5']:>12.3f}" for r in res.values())
                + f"{res['conv-direct']['latency_ms']['p50']:>8.2f}")


if __name__ == "__main__":
    main()


def cached_e5() -> CachedEmbedder:
    """E5SmallEmbedder behind the vector cache /tmp/fsmem-e5-cache.pkl (FSMEM_E5_CACHE), for
    ``eval_retrieval.py --embedder bench_ranking:cached_e5``."""
    from fsmem.search.embedders import E5SmallEmbedder
    return CachedEmbedder(E5SmallEmbedder(),
                          os.environ.get("FSMEM_E5_CACHE", "/tmp/fsmem-e5-cache.pkl"))
