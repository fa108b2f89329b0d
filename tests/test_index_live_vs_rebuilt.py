"""The live index equals a rebuilt one after any sequence (issue 28 item 6): conversation turns
committed one per unit in any time order, some asking (the turn after takes more of their
score), removed, the pending rows folded (compaction) at any moment; every query's hits and
scores, neighbour smoothing included, are those of an index rebuilt from the directories.
(Found before: a pending turn between two compacted neighbours kept a stale link; a removed
neighbour's link outlived it.)"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fsmem import Event, Memory

WORDS = ["boiler", "valve", "garden", "hose", "lisbon", "train", "dentist", "tooth", "soup",
         "cumin", "tent", "alps", "?"]   # a text ending in "?" asks (ranking.KIND_ASKS)
QUERIES = ["boiler valve", "garden hose", "train to lisbon", "dentist", "soup cumin", "tent"]

op = st.one_of(
    st.tuples(st.just("turn"), st.integers(0, 59), st.sampled_from(["ana", "ben"]),
              st.lists(st.sampled_from(WORDS), min_size=0, max_size=3)),
    # a plain commit whose source is a speaker (issue 31: spoken rows, one dialogue group)
    st.tuples(st.just("said"), st.integers(0, 59), st.sampled_from(["Ana", "Ben", "Cy"]),
              st.lists(st.sampled_from(WORDS), min_size=0, max_size=3)),
    # a note of two events (no role, no speaker): its rows neighbour each other only, and
    # sort among the turns of its key (they may split two turns apart)
    st.tuples(st.just("note"), st.integers(0, 59), st.sampled_from(["chat", "notes"]),
              st.lists(st.sampled_from(WORDS), min_size=0, max_size=3)),
    st.tuples(st.just("remove"), st.integers(0, 40)),
    st.tuples(st.just("compact")),
)


def _answers(mem: Memory) -> dict[str, list]:
    return {q: [(u, round(s, 4)) for u, s, _m in mem.index.search_events(q, 10, "bm25")]
            for q in QUERIES}


@settings(max_examples=int(os.environ.get("FSMEM_HYPOTHESIS_EXAMPLES", "40")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=24))
# turns of one time: their order is the unit ids' (random), not the order they arrived in
@example([("turn", 0, "ana", []) for _ in range(5)] + [("turn", 0, "ana", ["boiler"]),
                                                      ("turn", 0, "ben", [])])
@example([("turn", 0, "ana", []) for _ in range(2)] + [("turn", 0, "ana", ["boiler"])]
         + [("turn", 0, "ana", []) for _ in range(4)] + [("compact",)])
@example([("turn", 0, "ana", []) for _ in range(4)] + [("turn", 0, "ana", ["boiler"])]
         + [("turn", 0, "ana", []) for _ in range(5)] + [("compact",)])
@example([("turn", 0, "ana", ["boiler"])] + [("turn", 0, "ana", []) for _ in range(7)]
         + [("compact",)])
# a removed turn between two compacted ones: they are neighbours now
@example([("turn", 10, "ana", ["boiler"]), ("turn", 11, "ana", []),
          ("turn", 12, "ana", ["valve"]), ("compact",), ("remove", 1)])
# spoken turns: a pending turn of another speaker on either side of two compacted turns of one
# speaker makes them part of a dialogue (their link is a compacted pair's)
@example([("said", 10, "Ana", ["boiler"]), ("said", 12, "Ana", ["valve"]), ("compact",),
          ("said", 9, "Ben", []), ("said", 13, "Ben", [])])
@example([("said", 10, "Ana", ["boiler"]), ("said", 12, "Ana", ["valve"]),
          ("said", 9, "Ben", []), ("said", 13, "Ben", []), ("compact",),
          ("remove", 2), ("remove", 2)])
# ... and one of them 40 minutes (more than one window) from the new turn that makes it so
@example([("said", 0, "Ben", []), ("said", 10, "Ana", ["boiler"]),
          ("said", 30, "Ana", ["valve"]), ("compact",), ("said", 50, "Ben", [])])
# ... and the pending turns ask: a question is a spoken row too (ranking.base_kind)
@example([("said", 10, "Ana", ["boiler"]), ("said", 12, "Ana", ["valve"]), ("compact",),
          ("said", 9, "Ben", ["?"]), ("said", 13, "Ben", ["?"])])
def test_live_index_answers_equal_a_rebuilt_index(ops):
    base = Path(tempfile.mkdtemp(prefix="fsmem-live-"))
    try:
        mem = Memory.open(base / "m", durability="off", auto_prune=False, ranker="bm25")
        mem.query("warm", 1, count=False)   # the index loaded: every change goes through it live
        units: list[str] = []
        for o in ops:
            if o[0] == "turn":
                _, minute, who, words = o
                uid = mem.commit_events([Event(
                    source="chat", role="user", timestamp=f"2024-03-01T10:{minute:02d}:00Z",
                    input=f"{who}: " + " ".join(words or ["hmm"]))], source="chat")
                units.append(uid)
            elif o[0] == "said":
                _, minute, who, words = o
                units.append(mem.commit(" ".join(words or ["hmm"]), source=who,
                                        timestamp=f"2024-03-01T10:{minute:02d}:00Z"))
            elif o[0] == "note":
                _, minute, src, words = o
                units.append(mem.commit_events([Event(
                    source=src, timestamp=f"2024-03-01T10:{m:02d}:00Z",
                    input=" ".join(words[i:] or ["hmm"])) for i, m in
                    enumerate((minute, min(59, minute + 1)))], source=src))
            elif o[0] == "remove" and units:
                mem.remove(units.pop(o[1] % len(units)))
            elif o[0] == "compact":
                mem.index._compact()
        live = _answers(mem)
        mem.close()
        shutil.copytree(base / "m", base / "copy")
        fresh = Memory.open(base / "copy", durability="off", auto_prune=False, ranker="bm25")
        fresh.reindex()
        rebuilt = _answers(fresh)
        fresh.close()
        assert live == rebuilt
    finally:
        shutil.rmtree(base, ignore_errors=True)
