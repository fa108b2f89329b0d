"""Retrieval quality on fixtures/retrieval: recall@5 and MRR of BM25, the hashed dense signal,
and their fusions (weighted sum at several weights, reciprocal-rank fusion).

Usage: python benchmarks/eval_retrieval.py [--embedder hash|minilm] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fsmem import Memory  # noqa: E402
from fsmem import index as index_mod  # noqa: E402

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "retrieval"


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


def build(root: str, docs: list[dict], embedder=None) -> tuple[Memory, dict[str, str]]:
    mem = Memory.open(root, durability="off", embedder=embedder, auto_prune=False)
    unit_of = {}
    for d in docs:
        unit_of[mem.commit(d["text"], source="fixture", meta={"fixture_id": d["id"]})] = d["id"]
    return mem, unit_of


def evaluate(mem: Memory, unit_of: dict[str, str], queries: list[dict], ranker: str,
             weight: float | None = None) -> dict:
    idx = mem.index
    ranks, by_kind = [], {}
    for q in queries:
        hits = [unit_of[u] for u, _ in idx.search(
            q["query"], 10, ranker, weight=index_mod.DEFAULT_WEIGHT if weight is None else weight)]
        rank = hits.index(q["expected"]) + 1 if q["expected"] in hits else 0
        ranks.append(rank)
        for kind in q.get("kind", "").split("+"):
            by_kind.setdefault(kind, []).append(rank)

    def summary(rs: list[int]) -> dict:
        rs_a = np.array(rs)
        return {"n": len(rs), "recall@5": float(np.mean((rs_a > 0) & (rs_a <= 5))),
                "mrr": float(np.mean([1 / r if r else 0 for r in rs]))}
    out = summary(ranks)
    out["by_kind"] = {k: summary(v) for k, v in sorted(by_kind.items())}
    return out


def configs() -> list[tuple[str, str, float | None]]:
    out = [("bm25", "bm25", None), ("dense", "dense", None), ("rrf", "rrf", None)]
    out += [(f"fusion w={w}", "fusion", w) for w in (0.2, 0.3, 0.4, 0.5, 0.6)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--embedder", default="hash", choices=["hash", "minilm"])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dir", default=None, help="where to build the store (default: a temp dir)")
    args = ap.parse_args()
    embedder = None
    if args.embedder == "minilm":
        from fsmem.embedders import SentenceTransformerEmbedder
        embedder = SentenceTransformerEmbedder()
    docs, queries = load_fixture()
    lang = {d["id"]: d["lang"] for d in docs}
    core = [q for q in queries if not is_translation(q, lang)]
    trans = [q for q in queries if is_translation(q, lang)]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        mem, unit_of = build(tmp, docs, embedder)
        results = {name: evaluate(mem, unit_of, core, ranker, w)
                   for name, ranker, w in configs()}
        extra = {name: evaluate(mem, unit_of, trans, ranker, w)
                 for name, ranker, w in configs()}
        whole = {name: evaluate(mem, unit_of, queries, ranker, w)
                 for name, ranker, w in configs()}
    if args.json:
        print(json.dumps({"core": results, "translation": extra, "all": whole}, indent=2))
        return
    print(f"{len(docs)} documents, {len(queries)} queries ({len(core)} core, {len(trans)} "
          f"translation), embedder {mem.embedder.fingerprint}")
    print("core set (paraphrase, partial, name in one script, detail; zh, en, mixed):")
    kinds = sorted(next(iter(results.values()))["by_kind"])
    print(f"{'ranker':<14}{'recall@5':>9}{'MRR':>7}  " + "  ".join(f"{k[:9]:>9}" for k in kinds))
    for name, r in results.items():
        print(f"{name:<14}{r['recall@5']:>9.3f}{r['mrr']:>7.3f}  "
              + "  ".join(f"{r['by_kind'][k]['recall@5']:>9.3f}" for k in kinds))
    print("translation queries (zh query, en document or the reverse) and the whole set:")
    print(f"{'ranker':<14}{'tr r@5':>9}{'tr MRR':>7}  {'all r@5':>8}{'all MRR':>8}")
    for name in results:
        print(f"{name:<14}{extra[name]['recall@5']:>9.3f}{extra[name]['mrr']:>7.3f}  "
              f"{whole[name]['recall@5']:>8.3f}{whole[name]['mrr']:>8.3f}")


if __name__ == "__main__":
    main()
