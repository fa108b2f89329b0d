"""Retrieval quality of the default ranker on fixtures/retrieval (see docs/BENCHMARKS.md)."""

from __future__ import annotations

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from eval_retrieval import build, evaluate, is_translation, load_fixture  # noqa: E402

from fsmem.index import DEFAULT_RANKER  # noqa: E402


def test_default_ranker_recall_at_5(tmp_path):
    docs, queries = load_fixture()
    assert len(docs) >= 300 and len(queries) >= 60
    lang = {d["id"]: d["lang"] for d in docs}
    core = [q for q in queries if not is_translation(q, lang)]
    assert len(core) >= 60
    mem, unit_of = build(str(tmp_path / "m"), docs)
    result = evaluate(mem, unit_of, core, DEFAULT_RANKER)
    assert result["recall@5"] >= 0.85, result
    for kind in ("zh", "mixed", "detail", "partial", "paraphrase"):
        assert result["by_kind"][kind]["recall@5"] >= 0.8, (kind, result["by_kind"][kind])
