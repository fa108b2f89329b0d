"""Retrieval quality of the default ranker on fixtures/retrieval (see docs/BENCHMARKS.md)."""

from __future__ import annotations

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from eval_retrieval import build, evaluate, is_translation, load_fixture  # noqa: E402

from fsmem.search.index import DEFAULT_RANKER  # noqa: E402


def test_default_ranker_recall_at_5(tmp_path):
    docs, queries = load_fixture()
    assert len(docs) >= 300 and len(queries) >= 60
    lang = {d["id"]: d["lang"] for d in docs}
    core = [q for q in queries if not is_translation(q, lang)]
    assert len(core) >= 60
    mem, unit_of = build(str(tmp_path / "m"), docs)
    result = evaluate(mem, unit_of, core, DEFAULT_RANKER)
    assert result["recall@5"] >= 0.92, result   # 0.875 before the word bridge, 0.938 with it
    for kind in ("zh", "mixed", "detail", "partial", "paraphrase"):
        assert result["by_kind"][kind]["recall@5"] >= 0.8, (kind, result["by_kind"][kind])
    # an English question for a Chinese note or the reverse, lexically: through the
    # dictionary (fsmem.search.bridge): 0.391 without it, 0.826 with it
    assert result["by_kind"]["cross_script"]["recall@5"] >= 0.75, result["by_kind"]["cross_script"]


class RecordedE5:
    """The light embedder's vectors of the conversation fixture, as recorded by
    fixtures/conversations/record_e5.py (int8): real model output without the extra. A text
    that was not recorded is an error (the fixture changed: record again). ``fixture``:
    conversations or retrieval (fixtures/retrieval/record_e5.py)."""

    dim = 384
    multilingual = True   # e5's own output (ranking.balance_scripts)

    def __init__(self, fixture: str = "conversations") -> None:
        import numpy as np
        data = np.load(REPO / "fixtures" / fixture / "e5_vectors.npz")
        self.fingerprint = "recorded:" + str(data["fingerprint"])
        vecs = data["vectors"].astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        self.rows = dict(zip((str(k) for k in data["keys"]), vecs))

    def _get(self, side: str, texts):
        import numpy as np
        from fsmem.format.blocks import hash_bytes
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.rows[hash_bytes(f"{side}:{t}".encode("utf-8"))] for t in texts])

    def embed(self, texts):
        return self._get("p", texts)

    def embed_query(self, texts):
        return self._get("q", texts)


def test_default_fusion_is_not_worse_than_lexical_on_conversations(tmp_path):
    """On the conversation fixture, the default fusion (with recorded e5 vectors) is at least
    as good as lexical ranking both on the fixture's questions (paraphrase-heavy: dense helps
    most) and on keyword questions (lexical-friendly: a fixed dense-heavy fusion lost there)."""
    from _conversations import load_conversations
    from eval_retrieval import build_direct, conversation_items, evaluate_items, keyword_items
    sessions, questions = load_conversations()
    mem, answers = build_direct(str(tmp_path / "m"), sessions, RecordedE5())
    mem.flush_vectors()
    assert mem.ranker == "fusion"
    floors = (0.79, 0.99)  # what is reached with the recorded vectors (0.797, 0.994).
    #                        Issue 31 lowered 0.77 to 0.76: the speaker field terms
    #                        (ranking.SPEAKER_WEIGHT) cost one question ("What is Priya's
    #                        mother cooking for Maya?"); then the answer to a question taking
    #                        more of its score (ranking.REPLY_WEIGHT) raised the questions
    #                        0.775 -> 0.797 (lexical 0.621 -> 0.648) and cost one keyword
    #                        question of 176 ("When did Maya mention week and sunday?": a
    #                        reply about "two weeks in" now ranks above it), 1.000 -> 0.994
    for items, floor in zip((conversation_items(questions), keyword_items(sessions, questions)),
                            floors):
        lexical = evaluate_items(mem, answers, items, "bm25")["recall@5"]
        fused = evaluate_items(mem, answers, items, "fusion")["recall@5"]
        assert fused >= lexical, (fused, lexical)
        assert fused >= floor, (fused, floor)
    fixed = evaluate_items(mem, answers, keyword_items(sessions, questions), "fusion",
                           weight=0.85)["recall@5"]
    assert fixed < lexical     # the effect the per-query weight answers is still there
    # Fusion keeps a Chinese question's interrogative words (docs/DECISIONS.md "Search"):
    # its coverage rule was calibrated on whole questions; without them this answer is 6th
    asked = [it for it in conversation_items(questions) if it.text == "咖啡馆哪天开张？"]
    assert len(asked) == 1
    assert evaluate_items(mem, answers, asked, "fusion")["recall@5"] == 1.0
    mem.close()


def test_default_fusion_on_documents_with_recorded_e5(tmp_path):
    """The zh/en document fixture with the light embedder (recorded vectors): the default
    fusion reaches the issue's 0.95 (0.966 measured; the floor is what is reached), and
    beats both signals alone, through the cross-script questions (an English question for a
    Chinese note or the reverse), where lexical evidence cannot reach the note and the
    script reach hands it to the embedder (docs/DECISIONS.md "Search")."""
    docs, queries = load_fixture()
    lang = {d["id"]: d["lang"] for d in docs}
    core = [q for q in queries if not is_translation(q, lang)]
    mem, unit_of = build(str(tmp_path / "m"), docs, RecordedE5("retrieval"))
    mem.flush_vectors()
    assert mem.ranker == "fusion"
    fused = evaluate(mem, unit_of, core, "fusion")
    alone = [evaluate(mem, unit_of, core, r)["recall@5"] for r in ("bm25", "dense")]
    mem.close()
    assert fused["recall@5"] >= 0.97, fused   # 0.983 (0.977 before the translated words
    #                                            could stand in for an other-script row)
    assert fused["recall@5"] > max(alone), (fused["recall@5"], alone)
    assert fused["by_kind"]["cross_script"]["recall@5"] >= 0.93, fused["by_kind"]["cross_script"]


def test_a_note_in_the_other_language_is_found_despite_the_embedders_script_bias(tmp_path):
    """A question in one language whose note is wholly in the other (docs-translation, 73
    questions, recorded e5 vectors): e5's cosines across scripts sit lower as a whole, so
    before the script balance the note ranked below most notes in the question's language
    (fused 0.205, dense 0.110 at recall@5; 93 of 96 cross-script notes are in the top 5 of
    their own language's notes). Per query each script's rows are shifted by a share of
    their median (ranking.balance_scripts): measured 0.795 fused, 0.767 dense. Lexical alone
    reaches these notes only through the dictionary bridge (fsmem.search.bridge: 0.014 ->
    0.644); fusion stays above it."""
    docs, queries = load_fixture()
    lang = {d["id"]: d["lang"] for d in docs}
    translated = [q for q in queries if is_translation(q, lang)]
    assert len(translated) >= 60
    mem, unit_of = build(str(tmp_path / "m"), docs, RecordedE5("retrieval"))
    mem.flush_vectors()
    full = {r: evaluate(mem, unit_of, translated, r) for r in ("bm25", "dense", "fusion")}
    mem.close()
    got = {r: f["recall@5"] for r, f in full.items()}
    # fusion: 0.781 while it left the other script to the embedder alone; 0.945 with the
    # better of the embedder's stand-in and the translated words' score there (ranking.fuse)
    assert got["fusion"] >= 0.93 and got["dense"] >= 0.7, got
    # the word bridge: 0.014 without it, 0.466 with glosses counted as one English stem, 0.616
    # at ranking.GLOSS_WEIGHT, 0.644 with overlapping words segmented both ways, 0.671 with
    # British spellings, 0.781 with the meanings of characters no word holds
    assert got["bm25"] >= 0.76, got
    # a Chinese question for an English note: its words' glosses at ranking.GLOSS_WEIGHT
    # (a Chinese word matches its own script as characters and a bigram): 0.358 at 1.0, 0.566,
    # then 0.604 (荣放下次 read as 放下 and as 下次), 0.623, then 0.774 (鞋, 旧, 捐)
    zh = full["bm25"]["by_kind"]["zh"]["recall@5"]
    assert zh >= 0.75, full["bm25"]["by_kind"]["zh"]
    # fusion never below lexical here (0.945 against 0.781 with these recorded vectors)
    assert got["fusion"] > got["bm25"], got
