"""Search is safe to run from many threads on one shared Memory: every result equals the same
query run alone (per-query state, such as the lexical coverage that sets the fusion weight,
lives in the query, never on the shared index)."""

from __future__ import annotations

import threading
import traceback

import pytest

from conftest import run_racing
from fsmem import Event, Memory

_TOPICS = [
    "The boiler was serviced by Henrik on Tuesday and the pressure valve replaced",
    "Recipe: lentil soup with cumin, lemon and a pinch of smoked paprika",
    "Passport renewal needs two photos and the old passport",
    "Maya booked the train to Lisbon for the conference in June",
    "The dentist moved the appointment to Thursday morning at nine",
    "Bought a second-hand road bike, the gears need a new cable",
    "Grandma's birthday dinner is at the Italian place on Friday",
    "The landlord will fix the leaking kitchen tap next week",
    "Started learning Portuguese with an app, twenty minutes a day",
    "The car insurance renewal costs more this year than last",
    "Planted tomatoes and basil on the balcony in big pots",
    "Tom lent me his tent for the camping trip in the Alps",
]
QUERIES = [
    "boiler pressure valve",                       # all words in one event: high coverage
    "when is the dentist appointment",
    "lentil soup recipe cumin",
    "train Lisbon conference",
    "bike gears cable repair shop",                # partly covered
    "who lent the tent",
    "insurance renewal price",
    "what does grandma want for her birthday present",   # little coverage
]


def _build(root) -> None:
    """A store of documents and conversation turns, written with the fusion ranker (so
    vectors are stored), its index saved: a fresh Memory maps the snapshot."""
    mem = Memory.open(root, durability="off", auto_prune=False, ranker="fusion")
    for i, text in enumerate(_TOPICS):
        mem.commit(text, source="notes")
        mem.commit_events([Event(id=f"t{i:02d}", source="chat", role="user",
                                 timestamp=f"2023-05-07T10:{i * 3:02d}:00+00:00",
                                 input=f"Did you hear? {text.lower()}")], source="chat")
    mem.close()


def _run(mem: Memory, text: str, ranker: str) -> list[tuple[str, float, list[str]]]:
    return [(u, round(s, 5), tuple(m)) for u, s, m in mem.index.search_events(text, 5, ranker)]


@pytest.fixture
def store(tmp_path):
    _build(tmp_path / "m")
    return tmp_path / "m"


def _alone(root) -> dict[tuple[str, str], list]:
    mem = Memory.open(root, auto_prune=False, ranker="fusion")
    try:
        return {(q, r): _run(mem, q, r) for q in QUERIES for r in ("fusion", "bm25")}
    finally:
        mem.close()


def test_queries_from_many_threads_match_the_same_query_alone(store):
    expected = _alone(store)
    assert len({tuple(v) for v in expected.values()}) == len(expected)   # all distinct
    mem = Memory.open(store, auto_prune=False, ranker="fusion")   # fresh: first use in threads
    wrong: list[tuple] = []
    start = threading.Barrier(len(QUERIES))

    def worker(text: str) -> None:
        start.wait()
        for i in range(40):
            ranker = ("fusion", "bm25")[i % 2]
            got = _run(mem, text, ranker)
            if got != expected[text, ranker]:
                wrong.append((text, ranker, got))
    try:
        run_racing([threading.Thread(target=worker, args=(q,)) for q in QUERIES])
    finally:
        mem.close()
    assert not wrong, wrong[:3]


def test_two_queries_interleaved_between_lexical_and_fusion_steps(store):
    """The racy order made deterministic: query A's lexical step runs, then query B's whole
    lexical step, then A goes on to fuse. A must still get its own result (before the fix,
    A was fused with B's lexical coverage, stored on the index)."""
    a, b = QUERIES[0], QUERIES[-1]
    expected = _alone(store)
    mem = Memory.open(store, auto_prune=False, ranker="fusion")
    idx = mem.index
    real = idx.bm25_rows
    a_scored, b_scored = threading.Event(), threading.Event()

    def ordered(text, pend=None, others=(), **kw):   # the index's own step, only its
        if text == b:                                  # timing is arranged
            assert a_scored.wait(10)
        out = real(text, pend, others, **kw)
        if text == a:
            a_scored.set()
            assert b_scored.wait(10)
        else:
            b_scored.set()
        return out
    idx.bm25_rows = ordered
    got: dict[str, list] = {}
    threads = [threading.Thread(target=lambda q=q: got.__setitem__(q, _run(mem, q, "fusion")))
               for q in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mem.close()
    assert got[a] == expected[a, "fusion"]
    assert got[b] == expected[b, "fusion"]


def test_a_cache_built_while_a_writer_changes_the_index_is_not_kept(store):
    """A query builds the pending rows' arrays (a cache) from the entries as they are; a writer
    thread adds an entry meanwhile and clears the cache; the query then stores what it built.
    That build misses the new entry: taken for current, every later query would rank without
    it (the divergence the concurrent-writes test below saw, 1 run in ~10). Arranged here in
    that order: since the index's changes wait for the searches in progress (Index.mutex),
    the commit cannot land inside the build (it waits until the query is done); afterwards
    every query equals a fresh Memory's."""
    from fsmem.search import index as index_mod
    mem = Memory.open(store, auto_prune=False, ranker="fusion", durability="off")
    idx = mem.index
    mem.commit("The boiler pressure dropped again after the valve was replaced", source="notes")
    real = index_mod._PendingRows.build.__func__
    built, added = threading.Event(), threading.Event()
    overlapped: list[bool] = []

    def slow_build(cls, i):   # the index's own build, only its timing is arranged
        out = real(cls, i)
        if threading.current_thread().name == "query":
            built.set()
            overlapped.append(added.wait(2))   # did the commit land inside the build?
        return out
    index_mod._PendingRows.build = classmethod(slow_build)
    try:
        t = threading.Thread(target=lambda: _run(mem, QUERIES[0], "fusion"), name="query")
        t.start()
        assert built.wait(10)
        uid = mem.commit("Henrik checked the boiler pressure valve twice", source="notes")
        added.set()
        t.join()
    finally:
        index_mod._PendingRows.build = classmethod(real)
    assert overlapped == [False]   # the change waited for the search
    assert uid in {e.unit_id for e in idx._pending_rows().entries}
    got = {q: _run(mem, q, "fusion") for q in QUERIES}
    mem.close()
    fresh = Memory.open(store, auto_prune=False, ranker="fusion", readonly=True)
    assert got == {q: _run(fresh, q, "fusion") for q in QUERIES}


def test_queries_while_other_threads_append_commit_and_prune(store):
    """Two threads write (append into a small L1, so the prunes archive into documents/, and
    commit) while four threads query, list and render the same Memory: nothing raises, L1
    holds whole events only, every hit names a unit of documents/ (which only grows here),
    and once the writers stop every query equals the same query on a fresh Memory."""
    from fsmem.search.analyze import trim_memos
    trim_memos(0)   # every word is stemmed again, whatever ran before in this process
    mem = Memory.open(store, auto_prune=True, ranker="fusion", durability="off",
                      context_capacity=6, context_protected=2)
    errors: list[str] = []
    seen: set[str] = set()
    done = threading.Event()
    lock = threading.Lock()

    writers_left = [2]

    def writer(w: int) -> None:   # two writers: their writes take turns on the writer lock
        try:
            for i in range(30):
                text = _TOPICS[i % len(_TOPICS)]
                mem.append(Event(id=f"w{w}-{i:03d}", source="chat", role="user",
                                 timestamp=f"2023-06-01T1{w}:{i:02d}:00+00:00",
                                 input=f"again: {text}"))
                if i % 5 == 0:
                    mem.commit(f"note {w} {i}: {text}", source="notes")
        except BaseException:   # noqa: BLE001 - reported by the main thread
            errors.append(traceback.format_exc())
        finally:
            with lock:
                writers_left[0] -= 1
                if not writers_left[0]:
                    done.set()

    def reader(k: int) -> None:
        try:
            i = k
            while not done.is_set():
                for ranker in ("fusion", "bm25"):
                    for unit, _s, _m in mem.index.search_events(QUERIES[i % len(QUERIES)],
                                                                5, ranker):
                        seen.add(unit)
                    mem.query(QUERIES[i % len(QUERIES)], top_k=5)
                events = mem.timeline()   # L1 as the writer changes it: whole events only
                assert all(e.id.startswith("w") for e in events), [e.id for e in events]
                mem.render(2000)
                i += 1
        except BaseException:   # noqa: BLE001 - reported by the main thread
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=writer, args=(w,)) for w in (1, 2)] + [
        threading.Thread(target=reader, args=(k,)) for k in range(4)]
    run_racing(threads, switch=1e-5, timeout=120)   # many switches inside each search and write
    assert not errors, "\n".join(errors)
    assert all(not t.is_alive() for t in threads)
    docs = set(mem.units("documents"))
    assert seen <= docs   # nothing here takes a unit out of documents/
    assert len(docs) > 2 * len(_TOPICS)   # the prunes and commits reached documents/
    got = {(q, r): _run(mem, q, r) for q in QUERIES for r in ("fusion", "bm25")}
    mem.close()
    assert got == _alone(store)


def test_a_unit_indexed_while_vectors_are_computed_is_kept_for_the_next_call(tmp_path):
    """``embed_index`` takes the units indexed without vectors; one another thread indexes
    while it runs (here: inside its scan) stays queued for the next call. It was cleared with
    the rest, left with zero vectors, and fusion scores drifted from a rebuilt index's."""
    from fsmem.search import index as index_mod
    from fsmem.search.lazy_vectors import on_demand
    mem = Memory.open(tmp_path / "s", auto_prune=False)
    mem.commit("a note on the pressure valve")
    idx = mem.index
    assert on_demand(mem)
    idx.dense_scanned = False
    real = idx.zero_vector_units

    def racing():
        idx.unembedded.add("u-indexed-meanwhile")   # as another thread's add_unit does
        return real()
    idx.zero_vector_units = racing
    index_mod.embed_index(idx)
    assert "u-indexed-meanwhile" in idx.unembedded


def test_a_change_of_the_index_waits_for_the_search_under_way(tmp_path):
    """A search in progress holds the index: a change another thread asks for (here a unit
    leaving documents/) waits until the search ends, then runs. Shown without a race: the
    search is held inside its reading, and the change is seen waiting on the index's lock,
    not finished (as it was when changes ran beside searches)."""
    import time
    mem = Memory.open(tmp_path / "s", durability="off", ranker="bm25", auto_prune=False)
    uid = mem.commit("a note on the boiler pressure valve")
    idx = mem.index
    assert idx.search_events("boiler", 5, "bm25")   # prepared: the next search only reads
    inside, go, changed = threading.Event(), threading.Event(), threading.Event()
    real = idx._visible

    def held(*args, **kw):
        inside.set()
        go.wait(60)
        return real(*args, **kw)
    idx._visible = held
    got: list = []
    search = threading.Thread(target=lambda: got.append(idx.search_events("boiler", 5, "bm25")))
    change = threading.Thread(target=lambda: (idx.remove(uid), changed.set()))
    search.start()
    try:
        assert inside.wait(60)
        change.start()
        deadline = time.monotonic() + 60
        while not changed.is_set() and not idx.mutex._waiting and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not changed.is_set(), "the unit left the index while a search was reading it"
        assert idx.mutex._waiting == 1
    finally:
        go.set()
        search.join(60)
        if change.ident is not None:
            change.join(60)
    assert changed.is_set()
    assert [u for u, *_ in got[0]] == [uid]   # the search saw the index as it began
    assert idx.search_events("boiler", 5, "bm25") == []
    mem.close()
