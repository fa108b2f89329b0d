"""The BM25 analyzer: stop words, stemming, numbers, dates, CJK; and what it buys a query."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsmem import Event, Memory
from fsmem.search.analyze import (ANALYZER_VERSION, STOP_WORDS, ZH_QUESTION_WORDS, analyze,
                                  date_text, hash_terms, is_pair, term_hashes, unasked)
from fsmem.format.timestamps import Timestamp


def test_stop_words_are_dropped_and_words_stemmed():
    assert analyze("The and of which were being") == []
    assert "the" in STOP_WORDS
    assert analyze("Running runs ran") [:2] == ["run", "run"]
    assert analyze("stores") == analyze("store") == ["store"]
    assert analyze("It’s hiking") == ["hike"]   # curly apostrophe: the stop word "it's"


def _words(text: str) -> list[str]:
    """The terms of ``text`` without its word pair terms."""
    return [t for t in analyze(text) if " " not in t]


def test_numbers_are_normalised():
    assert _words("1,000 dollars") == ["1000", "dollar"]
    assert _words("room 07") == ["room", "7"]
    assert analyze("the 7th floor") == ["7", "floor", "7 floor"]


def test_written_dates_give_one_canonical_day_term():
    day = "@2023-05-07"
    for text in ("7 May 2023", "May 7th, 2023", "on 2023-05-07", "May 7 2023"):
        assert day in analyze(text), text
    assert "@2023-05" in analyze("in May 2023")
    assert not any(t.startswith("@") for t in analyze("you may go 2023 times"))
    assert not any(t.startswith("@") for t in analyze("31 February 2023"))   # no such day


def test_date_text_is_the_local_date_in_words():
    ts = Timestamp.parse("2023-05-07T23:30:00-07:00")   # 8 May in UTC, 7 May where written
    assert date_text(ts.ns, ts.offset) == "Sunday 7 May 2023"
    assert "@2023-05-07" in analyze(date_text(ts.ns, ts.offset))


def test_cjk_runs_give_unigrams_and_bigrams():
    assert analyze("猫粮") == ["猫", "粮", "猫粮"]
    terms = analyze("年糕的猫粮 royal canin")
    assert {"年糕", "猫粮", "royal", "canin"} <= set(terms)


def test_adjacent_words_give_one_pair_term_in_either_order():
    """Two words adjacent once stop words are dropped give a pair term (phrase evidence),
    the same for either order; only those terms are flagged as pairs."""
    assert analyze("the support group") == ["support", "group", "group support"]
    assert "group support" in analyze("a group that we support")
    assert "paint sunris" in analyze("Melanie: I'd paint a sunrise")
    assert "melani paint" in analyze("Melanie: I'd paint a sunrise")
    assert not any(" " in t for t in analyze("猫粮 group"))   # pairs of words only
    assert is_pair(hash_terms(["group support", "group", "support", "猫粮"])).tolist() == [
        True, False, False, False]
    assert not is_pair(term_hashes(["猫粮 7 May 2023 1,000"], pairs=False)).any()


def test_an_english_query_in_another_inflection_finds_the_document(tmp_path):
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    target = mem.commit("She was running the marathons in Boston every spring")
    for i in range(6):
        mem.commit(f"Notes about gardening and tomato plants, batch {i}")
        mem.commit(f"Budget for the kitchen renovation, estimate {i}")
    hits = mem.query("who runs a marathon", top_k=1)
    assert [h.unit_id for h in hits] == [target]


def test_a_date_question_finds_the_turn_of_that_date(tmp_path):
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    ids = {}
    for day in (5, 6, 7, 8, 9):
        ev = Event(id=f"turn-{day}", timestamp=f"2023-05-{day:02d}T18:00:00+02:00",
                   source="chat", role="user", input="We talked about the garden again")
        ids[day] = ev.id
        mem.commit_events([ev], source="chat")
    hits = mem.query("what did we talk about on 7 May 2023?", top_k=1)
    assert hits and hits[0].events_matched == [ids[7]]
    hits = mem.query("garden 2023-05-09", top_k=1)
    assert hits and hits[0].events_matched == [ids[9]]


# -- the fast hashing path (term_hashes) against the straightforward one --------------------

_PIECES = ["May", "may", "7th", "7", "2023", "2023-05-07", "1,000", "07", "the", "It’s",
           "don't", "running", "猫粮", "年糕的", "ｆｕｌｌ", "Ⅻ", "ｶﾞ", "がっこう", "한국어",
           "𠀀𠀁", "March 3, 2024", " ", "\n", "\t", ",", "-", "'", "_", "é", "İ", "ß"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=8), max_size=30).map("".join),
       st.lists(st.sampled_from(_PIECES), max_size=10).map(" ".join))
def test_term_hashes_are_exactly_the_hashes_of_the_analyzed_terms(text, other):
    """The fast path (token cache, CJK hashed by numpy over code points) gives the same
    multiset of hashes as hashing every term of ``analyze`` one by one."""
    for texts in ([text], [text, other], [other, text, ""]):
        want = sorted(h for t in texts for h in hash_terms(analyze(t)).tolist())
        assert sorted(term_hashes(texts).tolist()) == want
        assert term_hashes(texts).dtype == np.uint64


def test_long_texts_naming_a_month_give_date_terms_only_beside_a_day_or_year():
    """Past the memo's 64 characters a text that says "may" or names a month is checked for
    a digit first (no day or year, no date): the same terms as ``analyze`` either way."""
    filler = "we may walk to the market in march or june if the weather holds up "
    for text in (filler, filler + "on 7 May 2023", filler + "in August ٢٠٢٤"):
        want = sorted(hash_terms(analyze(text)).tolist())
        assert sorted(term_hashes([text]).tolist()) == want
    assert "@2023-05-07" in analyze(filler + "on 7 May 2023")
    assert "@2024-08" in analyze(filler + "in August ٢٠٢٤")
    assert not [t for t in analyze(filler) if t.startswith("@")]


PINNED = {"猫": 5959968923661296152, "猫粮": 6711262662057201202,
          "store": 5825295904943524116, "@2023-05-07": 2467867871673998363,
          "group support": 14136194214299777561}


def test_term_hashes_are_stable_across_processes_and_machines():
    """Pinned values: a change of the hash functions must bump ANALYZER_VERSION (saved
    indexes hold these hashes) and update these numbers."""
    assert ANALYZER_VERSION == 9
    assert hash_terms(list(PINNED)).tolist() == list(PINNED.values())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.lists(st.sampled_from(_PIECES) | st.text(max_size=8),
                                  max_size=12).map("".join), max_size=4), max_size=5))
def test_term_rows_are_each_rows_term_counts(rows):
    """The batched path of an index entry (one pass over all its event rows) gives each row
    exactly the unique hashes and counts of ``analyze`` over that row's texts alone."""
    from fsmem.search.index_entry import term_rows
    terms, tfs, ptr = term_rows(rows)
    assert len(ptr) == len(rows) + 1 and terms.dtype == np.uint64 and tfs.dtype == np.float32
    for i, texts in enumerate(rows):
        want = np.unique(np.array([h for t in texts for h in hash_terms(analyze(t)).tolist()],
                                  np.uint64), return_counts=True)
        assert terms[ptr[i]:ptr[i + 1]].tolist() == want[0].tolist()
        assert tfs[ptr[i]:ptr[i + 1]].tolist() == want[1].tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="猫粮a b7,'-\n。May", max_size=30) | st.sampled_from(_PIECES),
                max_size=5))
def test_term_counts_are_the_unique_terms_and_their_counts(texts):
    """``term_counts`` (a legacy document's row) is ``np.unique`` of the text's hashes."""
    from fsmem.search.index_entry import term_counts
    terms, tfs = term_counts(texts)
    kept = [t for t in texts if t]
    want = np.unique(term_hashes(kept), return_counts=True) if kept else (np.zeros(0), [])
    assert terms.tolist() == want[0].tolist() and tfs.tolist() == list(want[1])
    assert terms.dtype == np.uint64 and tfs.dtype == np.float32


@pytest.mark.parametrize("which", ["pure", "c"])
def test_stemming_from_many_threads_gives_the_stems_of_one_thread(which, monkeypatch):
    """A snowball stemmer object holds the word it is working on: the analyzer's stemmer is
    shared, so threads indexing at once (a query's catch-up beside a writer) must not stem
    through it at the same time. Every stem equals a private stemmer's, and nothing raises:
    with the pure-Python fallback (where the race shows without the lock) and PyStemmer."""
    import random
    import threading

    from snowballstemmer.english_stemmer import EnglishStemmer

    from conftest import run_racing
    from fsmem.search import analyze
    if which == "c":
        stemmer = pytest.importorskip("Stemmer")
        monkeypatch.setattr(analyze, "_stem_word", stemmer.Stemmer("english").stemWord)
    else:
        monkeypatch.setattr(analyze, "_stem_word", EnglishStemmer().stemWord)
    bases = ["connect", "relate", "organ", "nation", "run", "happy", "generous", "argue",
             "general", "operate", "condition", "author", "hope", "fish", "arm", "cloud"]
    suffixes = ["", "s", "ing", "ed", "ation", "ations", "ness", "ly", "ional", "izer",
                "fulness", "ousness", "iveness", "icate", "ement", "alism"]
    words = [b + s for b in bases for s in suffixes]
    alone = EnglishStemmer()
    want = {w: alone.stemWord(w) for w in words}
    errors: list[str] = []
    got: list[dict[str, str]] = []

    def stem_all(seed: int) -> None:
        order = random.Random(seed).sample(words, len(words))
        try:
            got.append({w: analyze._stem(w) for w in order})
        except Exception as exc:   # noqa: BLE001 - reported below
            errors.append(repr(exc))
    for round_ in range(5):
        analyze.trim_memos(0)   # every word a memo miss again
        run_racing([threading.Thread(target=stem_all, args=(round_ * 8 + k,))
                    for k in range(8)])
    assert errors == []
    assert all(g == want for g in got) and len(got) == 40


def test_a_word_waits_for_the_stemmer_another_thread_is_using(monkeypatch):
    """The race above, shown without racing: while one thread is inside the shared stemmer
    (held there), a second thread's memo miss waits for it and never enters the stemmer
    meanwhile; it stems once the first is done."""
    import sys
    import threading
    import time

    from fsmem.search import analyze
    inside: list[str] = []
    first_in, go = threading.Event(), threading.Event()

    def stem_word(word: str) -> str:
        inside.append(word)
        if len(inside) == 1:
            first_in.set()
            go.wait(60)
        return word[:4]
    monkeypatch.setattr(analyze, "_stem_word", stem_word)
    analyze.trim_memos(0)
    got: dict[str, str] = {}
    one = threading.Thread(target=lambda: got.setdefault("a", analyze._stem("lanterns")))
    two = threading.Thread(target=lambda: got.setdefault("b", analyze._stem("bicycles")))
    one.start()
    try:
        assert first_in.wait(60)
        two.start()
        deadline = time.monotonic() + 60   # the second thread is in _stem, then given 1 s more
        while time.monotonic() < deadline:
            frame = sys._current_frames().get(two.ident)
            names = []
            while frame is not None:
                names.append(frame.f_code.co_name)
                frame = frame.f_back
            if "_stem" in names or len(inside) > 1 or not two.is_alive():
                break
            time.sleep(0.001)
        time.sleep(1.0)
        assert inside == ["lanterns"], "a second word entered the stemmer another thread held"
    finally:
        go.set()
        one.join(60)
        if two.ident is not None:
            two.join(60)
        analyze.trim_memos(0)   # the made-up stems leave with the test
    assert inside == ["lanterns", "bicycles"] and got == {"a": "lant", "b": "bicy"}


STEM_WORDS = Path(__file__).with_name("stem_words.txt")


def _stem_table() -> dict[str, str]:
    """tests/stem_words.txt: word -> its Snowball 3.1 English stem (the index's terms)."""
    lines = STEM_WORDS.read_text("utf-8").splitlines()
    return dict(ln.split(" ") for ln in lines if ln and not ln.startswith("#"))


def test_the_c_and_the_pure_python_stemmer_give_the_stems_the_index_holds():
    """PyStemmer (C, the analyzer's stemmer) and snowballstemmer (pure Python, its fallback
    where PyStemmer cannot be imported) give exactly the stems of tests/stem_words.txt: ~970
    words, irregular forms, suffix families, Snowball's exceptions, non-ASCII letters. A
    stemmer release that changes one (Snowball 3.0 -> 3.1 changed "internal", "interval",
    "skis") fails here: bump ANALYZER_VERSION with the new stems."""
    stemmer = pytest.importorskip("Stemmer")
    from snowballstemmer.english_stemmer import EnglishStemmer   # the pure one, always
    want = _stem_table()
    assert len(want) > 900
    c, pure = stemmer.Stemmer("english"), EnglishStemmer()
    assert {w: c.stemWord(w) for w in want} == want
    assert {w: pure.stemWord(w) for w in want} == want
    assert sum(w != s for w, s in want.items()) > 800   # the list exercises the stemmer


def test_the_analyzer_stems_with_pystemmer_and_falls_back_to_snowballstemmer(monkeypatch):
    """With PyStemmer importable the analyzer's stemmer is PyStemmer's (50x faster than the
    pure one: issue 27); without it, snowballstemmer's pure Python, with the same stems."""
    import sys

    from fsmem.search import analyze as analyzer
    stemmer = pytest.importorskip("Stemmer")
    want = _stem_table()
    c = analyzer._load_stemmer()
    assert isinstance(c.__self__, stemmer.Stemmer)
    monkeypatch.setitem(sys.modules, "Stemmer", None)   # import Stemmer -> ImportError
    pure = analyzer._load_stemmer()
    assert not isinstance(pure.__self__, stemmer.Stemmer)
    assert type(pure.__self__).__module__.startswith("snowballstemmer.")
    assert {w: c(w) for w in want} == {w: pure(w) for w in want} == want


def test_the_analyzers_stems_are_the_tables():
    """Through the analyzer's memo and lock: ``_stem`` of every word is its stem, an
    irregular form's the stem of its base word (``analyze._IRREGULAR``)."""
    from fsmem.search import analyze as analyzer
    want = _stem_table()
    raw = analyzer._load_stemmer()
    base = {w: raw(analyzer._BASE[w]) for w in want if w in analyzer._BASE}
    assert len(base) > 20   # the table's irregular forms
    analyzer.trim_memos(0)
    assert {w: analyzer._stem(w) for w in want} == {**want, **base}


IRREGULAR = [("bought", "buy"), ("brought", "bring"), ("found", "find"), ("caught", "catch"),
             ("flew", "fly"), ("ate", "eat"), ("sold", "sell"), ("left", "leave"),
             ("children", "child"), ("people", "person"), ("wives", "wife"), ("feet", "foot")]
APART = [("bit", "bite"), ("rose", "rise"), ("led", "lead"), ("shot", "shoot"),
         ("ground", "grind"), ("lives", "life"), ("went", "go"), ("said", "say"), ("got", "get")]


def test_an_irregular_english_form_is_its_base_word_unless_it_is_a_word_of_its_own():
    """"I bought" answers "what did she buy": a form no suffix rule reaches is taken as its
    base word. A form that is a common word of its own ("a bit", a rose, LED) and the light
    verbs' forms (went, said, got: in every other turn) stay apart."""
    for form, base in IRREGULAR:
        assert analyze(form) == analyze(base), form
    for form, other in APART:
        assert analyze(form) != analyze(other), form


def test_one_things_two_words_are_one_term():
    """Family words, British and American words, short forms: "Mum" answers "mother"."""
    for variant, word in (("mum", "mother"), ("Mom", "mother"), ("dad", "father"),
                          ("kids", "children"), ("grandma", "grandmother"), ("sofa", "couch"),
                          ("fridge", "refrigerator"), ("bikes", "bicycle"), ("TV", "television")):
        assert analyze(variant) == analyze(word), variant


def test_a_question_saying_mother_finds_the_turn_saying_mum(tmp_path):
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    mem.commit("My flight lands at nine")
    target = mem.commit("Mum's flight from Chengdu lands at six on Friday evening, gate B")
    mem.commit("The flight school sends the invoice on Monday")
    assert [h.unit_id for h in mem.query("When does my mother's flight land?", top_k=1)] \
        == [target]


def test_a_practitioner_is_stemmed_as_the_field():
    """A pediatrician's note answers a question about pediatrics, a dermatologist's about
    dermatology, a musician's about music; a physician is not physics, and a word in "-ist"
    of no such field is as the stemmer leaves it."""
    for one, field in (("pediatrician", "pediatrics"), ("musicians", "music"),
                       ("electrician", "electric"), ("politician", "politics"),
                       ("dermatologists", "dermatology"), ("therapist", "therapy"),
                       ("physiotherapists", "physiotherapy"),
                       ("orthodontist", "orthodontics"), ("orthodontists", "orthodontics")):
        assert analyze(one) == analyze(field), one
    assert analyze("physician") != analyze("physics")
    from fsmem.search.analyze import _load_stemmer
    raw = _load_stemmer()
    for word in ("dentist", "artist", "pianist", "list", "exist", "ician"):
        assert analyze(word) == [raw(word)], word


def test_a_question_in_the_present_finds_the_turn_in_the_past(tmp_path):
    """A plain turn store: the turn that says what was bought ranks above the one that says
    "bike" twice."""
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    mem.commit("The bike shop on Alberta Street fixes any bike in a day", source="Dan")
    target = mem.commit("I bought an electric cargo bike instead of a second car",
                        source="Maya")
    mem.commit("Buses to the airport leave every twenty minutes", source="Dan")
    assert [h.unit_id for h in mem.query("Which bike did Maya buy?", top_k=1)] == [target]
    assert [h.unit_id for h in mem.query("她买了什么？", top_k=1)] == [target]   # 买: to buy


def test_a_text_longer_than_the_pair_bound_gives_no_pair_terms():
    """Pair terms grow with a text's length (nearly one per word), words with its vocabulary:
    a 100 MB file ingested in 1 MB parts made the index ~8x the RSS bound (tests/test_hostile
    stress). A text of more than PAIR_MAX_WORDS words gives word terms only; up to it, pairs
    as before. The reference analyzer and the hashed terms agree on both sides of the bound."""
    from fsmem.search.analyze import PAIR_MAX_WORDS
    words = [f"w{i}x" for i in range(PAIR_MAX_WORDS + 1)]
    at, over = " ".join(words[:PAIR_MAX_WORDS]), " ".join(words)
    assert sum(" " in t for t in analyze(at)) == PAIR_MAX_WORDS - 1
    assert is_pair(term_hashes([at])).sum() == PAIR_MAX_WORDS - 1
    assert not any(" " in t for t in analyze(over))
    assert not is_pair(term_hashes([over])).any()
    assert sorted(term_hashes([over]).tolist()) == sorted(hash_terms(analyze(over)).tolist())
    # a row's other texts keep theirs: the bound is per text
    assert is_pair(term_hashes([over, "group support"])).sum() == 1


def test_a_non_ascii_digit_beside_a_month_is_text_not_a_crash():
    """'፩' and '²' are digits to str.isdigit but not to int: a date is read from decimal
    digits only, and such text is indexed like any other (it raised ValueError before)."""
    from fsmem.search.analyze import term_hashes
    for text in ("፩ may", "may ፩ 2023", "12 may ²⁰²³", "7 May ٢٠٢٣"):
        assert len(term_hashes([text])) > 0
    assert set(term_hashes(["7 May 2023"])) > set(term_hashes(["7 May"]))


# -- Chinese text: its CJK characters never reach the token memo; the same terms -------------

def test_chinese_clauses_do_not_fill_the_token_memo():
    """A Chinese clause has no space in it: split at whitespace alone, each would be a token
    of its own, a memo miss and a regex run each (most of a 1,000-document HomeAgent store's
    first index build). Its CJK characters are hashed apart; the token memo sees the rest."""
    from fsmem.search import analyze as an
    rng = random.Random(2)
    clauses = ["".join(rng.choice("签证材料照片背景色咖啡机除垢猫粮光伏板发电") for _ in range(12))
               for _ in range(400)]
    an.trim_memos(0)
    text = "\n".join(f"[09:{i % 10:02d}] qq: {c}，好的" for i, c in enumerate(clauses))
    assert sorted(term_hashes([text]).tolist()) == sorted(hash_terms(analyze(text)).tolist())
    assert an.memo_sizes()["tokens"] <= 13   # 10 times, "qq:", "，" (not 400 clauses)


@pytest.mark.parametrize("text", [
    "May猫7 2023", "猫May 7th, 2023狗", "group猫support", "don't猫", "1,000猫2,000", "猫'a'b",
    "2023-05-07猫", "ｶﾞ猫ｆｕｌｌ", "猫\u3000May 7 2023", "𠀀a𠀁", "é猫İ猫ß", "猫", "",
])
def test_text_glued_to_cjk_gives_the_analyzers_terms(text):
    """Words, numbers, dates and pairs on either side of CJK characters, alone and in rows
    (an empty row and an empty text among them: the rows' texts are cut back by length)."""
    from fsmem.search.analyze import term_hashes_rows
    want = sorted(hash_terms(analyze(text)).tolist())
    assert sorted(term_hashes([text]).tolist()) == want
    hashes, rows = term_hashes_rows([[text], [], ["猫 plain"], [text, ""], ["May 7 2023", text]])
    assert sorted(hashes[rows == 0].tolist()) == want
    assert (rows == 1).sum() == 0
    assert sorted(hashes[rows == 2].tolist()) == sorted(hash_terms(analyze("猫 plain")).tolist())
    assert sorted(hashes[rows == 3].tolist()) == want
    assert sorted(hashes[rows == 4].tolist()) == sorted(
        hash_terms(analyze("May 7 2023") + analyze(text)).tolist())


_ASKING_TURNS = [("周宇", "什么时候搬的？"), ("林晓", "上周六搬的，东西比想象的多一倍。"),
                 ("周宇", "去了，我们登了大峰，雪山上风很大，头疼得厉害。"),
                 ("林晓", "你们什么时候回来？"), ("周宇", "店里什么时候都忙。")]


def test_a_chinese_questions_interrogative_words_are_not_its_terms():
    """什么时候 is three bigram terms that every turn asking "when" holds: a query's
    interrogative words are left out of its own terms (and the bigrams across them); what
    it asks about stays; an English query is as it was (its question words are stop words)."""
    asked = set(hash_terms(analyze(unasked("周宇是什么时候去爬雪山的？"))).tolist())
    for word in ("什么", "么时", "时候", "是什", "候去"):
        assert hash_terms([word])[0] not in asked, word
    for word in ("周宇", "雪山", "爬雪"):
        assert hash_terms([word])[0] in asked, word
    assert unasked("为什么不去？") == " 不去？" and unasked("When did Dan go?") == "When did Dan go?"
    assert "什么时候" in ZH_QUESTION_WORDS and "哪天" in ZH_QUESTION_WORDS


def test_a_turn_that_only_asks_when_does_not_answer_when(tmp_path):
    """周宇's "什么时候搬的？" is short and shares 什么时候 with the question; his turn about
    the mountain answers it and ranks first: through an index (L2), the BM25 of a unit's
    events that prune uses, and the BM25 of the facts (L3) in a search of every layer."""
    from fsmem.memory.search_all import _fact_scores
    from fsmem.search.index_entry import bm25_scores, term_counts
    mem = Memory.open(str(tmp_path / "m"), durability="off", auto_prune=False)
    try:
        ids = [mem.commit(text, source=who,
                          timestamp=Timestamp.parse(f"2025-10-0{i + 1}T20:00:00+08:00"))
               for i, (who, text) in enumerate(_ASKING_TURNS)]
        hits = mem.query("周宇是什么时候去爬雪山的？", top_k=2)
    finally:
        mem.close()
    assert [h.unit_id for h in hits][:1] == [ids[2]], hits
    events = ["什么时候搬的？", "去了，我们登了大峰，雪山上风很大，头疼得厉害，吸了两罐氧气。", "好的。"]
    scores = bm25_scores([term_counts([t]) for t in events], "周宇是什么时候去爬雪山的？")
    assert int(np.argmax(scores)) == 1, scores
    facts = _fact_scores("周宇是什么时候去爬雪山的？", ["什么时候搬家", "登上了雪山"], [])
    assert facts[1] > facts[0], facts
