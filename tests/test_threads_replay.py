"""Threaded hosts are safe (issue 28 item 6): one Memory shared by a writer thread (appends
into a small L1, so prunes archive into documents/; commits; removals) and reader threads
searching it, with the index folding its pending rows every few changes. Every answer a
reader got equals the answer of the same query in a single-threaded replay of the same writes
after some number of them: at least the writes done when the query started, at most those
begun when it ended (each answer is one state the writer passed through).

Answers are compared by content (the ids of the events each hit matched, and the score), since
unit ids are random. ``FSMEM_THREADS_RUNS=50`` repeats the whole run (the issue's 50 runs)."""

from __future__ import annotations

import os
import threading
import traceback

import pytest

from conftest import run_racing
from fsmem import Event, Memory

TOPICS = ["boiler pressure valve", "lentil soup with cumin", "train to lisbon in june",
          "dentist on thursday", "road bike gear cable", "tent for the alps",
          "tomatoes on the balcony", "car insurance renewal"]
QUERIES = ["boiler valve", "soup cumin", "lisbon train", "dentist", "bike cable", "alps tent",
           "balcony tomatoes", "insurance"]
N = 36


def _writes() -> list[tuple]:
    out: list[tuple] = []
    for i in range(N):
        out.append(("append", f"a{i:03d}", f"{TOPICS[i % 8]} talk {i}", f"2024-05-01T09:{i:02d}:00Z"))
        if i % 3 == 0:
            out.append(("commit", f"c{i:03d}", f"note: {TOPICS[(i * 5) % 8]}",
                        f"2024-05-02T09:{i:02d}:00Z"))
        if i % 7 == 6:
            out.append(("remove",))   # the oldest commit still there
    return out


def _open(root) -> Memory:
    return Memory.open(root, durability="off", ranker="bm25", context_capacity=5,
                       context_protected=1)


def _do(mem: Memory, w: tuple, owner: dict[str, str]) -> None:
    if w[0] == "append":
        mem.append(Event(id=w[1], source="chat", role="user", input=w[2], timestamp=w[3]))
    elif w[0] == "commit":
        owner[w[1]] = mem.commit_events([Event(id=w[1], source="notes", input=w[2],
                                               timestamp=w[3])], source="notes")
    else:
        mem.remove(owner.pop(next(iter(owner))))


def _answer(mem: Memory, q: str) -> list[tuple]:
    """Each hit as the ids of the events that matched (ids are given by the writes) and its
    score: one search call, nothing read after it."""
    return sorted((tuple(sorted(matched)), round(score, 4))
                  for _unit, score, matched in mem.index.search_events(q, 100, "bm25"))


def _replay(root) -> list[dict[str, list]]:
    """answers[k]: every query's answer after the first k writes, single-threaded."""
    mem = _open(root)
    owner: dict[str, str] = {}
    answers = [{q: _answer(mem, q) for q in QUERIES}]
    for w in _writes():
        _do(mem, w, owner)
        answers.append({q: _answer(mem, q) for q in QUERIES})
    mem.close()
    return answers


def _threaded(root) -> list[tuple[int, int, str, list]]:
    mem = _open(root)
    mem.query("warm", 1, count=False)
    writes = _writes()
    started, done = [0], [0]
    errors: list[str] = []
    got: list[tuple[int, int, str, list]] = []
    stop = threading.Event()

    def writer() -> None:
        owner: dict[str, str] = {}
        try:
            for w in writes:
                started[0] += 1
                _do(mem, w, owner)
                done[0] += 1
        except BaseException:   # noqa: BLE001 - reported by the main thread
            errors.append(traceback.format_exc())
        finally:
            stop.set()

    def reader(k: int) -> None:
        try:
            i = k
            while not stop.is_set():
                q = QUERIES[i % len(QUERIES)]
                lo = done[0]
                ans = _answer(mem, q)
                got.append((lo, started[0], q, ans))
                i += 1
        except BaseException:   # noqa: BLE001 - reported by the main thread
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader, args=(k,)) for k in range(3)]
    run_racing(threads, switch=1e-5, timeout=300)
    mem.close()
    assert not errors, "\n".join(errors)
    assert done[0] == len(writes)
    return got


@pytest.fixture
def small_batches(monkeypatch):
    """The index folds its pending rows every 4 changes (compaction during the run)."""
    import fsmem.search.index as index
    monkeypatch.setattr(index, "_PENDING_MAX", 4)


def test_every_threaded_answer_is_one_the_single_threaded_replay_gave(tmp_path, small_batches):
    answers = _replay(tmp_path / "replay")
    runs = int(os.environ.get("FSMEM_THREADS_RUNS", "2"))
    for run in range(runs):
        got = _threaded(tmp_path / f"threads{run}")
        assert len(got) > 20, f"run {run}: the readers ran only {len(got)} queries"
        wrong = [(lo, hi, q) for lo, hi, q, ans in got
                 if not any(answers[k][q] == ans for k in range(lo, hi + 1))]
        detail = [(lo, hi, q, ans, [answers[k][q] for k in range(lo, hi + 1)])
                  for lo, hi, q, ans in got
                  if not any(answers[k][q] == ans for k in range(lo, hi + 1))][:2]
        assert wrong == [], f"run {run}: {len(wrong)} of {len(got)} answers match no state " \
                            f"the writer passed through: {wrong[:5]}; first: {detail}"
