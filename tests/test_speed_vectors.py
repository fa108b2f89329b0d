"""Vectors only for rankers that read them (issue 18; fsmem.search.lazy_vectors): with the hashed
default embedder and the bm25 ranker a commit, an append and a prune store no vectors; a
dense or fused ranker reading such units later gets exactly the vectors a commit would have
stored, computed from the units' texts, for queries of the index and for prune."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fsmem import Event, Memory, Reader, Timestamp, ToolOutput
from fsmem.format.unit import VECTORS, read_manifest

T0 = Timestamp.parse("2026-03-01T09:00:00+08:00").ns
TOPICS = ["grind the coffee beans for the espresso machine",
          "the solar panel inverter shows an error light",
          "piano lesson on tuesday: scales and a sonatina",
          "visa appointment at the consulate, bring two photos",
          "周末 去 海边 看 日出 带 相机"]


def _event(i: int, text: str) -> Event:
    return Event(timestamp=Timestamp(T0 + i * 60 * 10**9, 8 * 3600), source="chat",
                 input=text, response=f"noted: {text}",
                 tool_results=[ToolOutput(name="search", output=f"result about {text}")]
                 if i % 2 else [])


def _units(root, layer: str) -> list[str]:
    d = os.path.join(root, layer)
    return sorted(os.path.join(d, n) for n in os.listdir(d) if not n.startswith("."))


def _write(root, **kw) -> None:
    mem = Memory.open(root, auto_prune=False, **kw)
    for i, text in enumerate(TOPICS):
        mem.commit_events([_event(i, text)])
    mem.close()


def test_bm25_writes_store_no_vectors(tmp_path):
    root = tmp_path / "s"
    mem = Memory.open(root, context_capacity=3, context_protected=0, context_tokens=2000)
    mem.commit_events([_event(0, TOPICS[0])])
    for i, text in enumerate(TOPICS[1:], 1):
        mem.append(_event(i, text))   # over capacity: prunes into documents/
    units = _units(root, "documents") + _units(root, "context")
    assert len(_units(root, "documents")) >= 2 and _units(root, "context")
    for path in units:
        assert read_manifest(path).vectors is None and not os.path.exists(
            os.path.join(path, VECTORS)), path
    assert mem.fsck() == []
    mem.close()


@pytest.mark.parametrize("kw", [{"ranker": "dense"}, {"ranker": "fusion"},
                                {"vectors": "inline"}])
def test_vectors_stored_when_a_ranker_reads_them_or_asked(tmp_path, kw):
    root = tmp_path / "s"
    mem = Memory.open(root, auto_prune=False, **kw)
    mem.commit_events([_event(1, TOPICS[1])])
    mem.append(_event(2, TOPICS[2]))
    for path in _units(root, "documents") + _units(root, "context"):
        assert read_manifest(path).vectors is not None, path
    mem.close()


def _dense_results(root, opener, ranker: str) -> list[list[tuple[str, float]]]:
    """Per topic's query, (topic of the unit, rounded score) of each hit."""
    mem = opener(root, ranker=ranker)
    try:
        out = []
        for text in TOPICS:
            out.append([])
            for hit in mem._search(text, 5):
                ev = read_manifest(os.path.join(root, "documents", hit.unit_id)).events[0]
                out[-1].append((TOPICS[(ev.timestamp.ns - T0) // (60 * 10**9)],
                                round(hit.score, 5)))
        return out
    finally:
        mem.close()


@pytest.mark.parametrize("opener", [Memory.open, Reader.open], ids=["memory", "reader"])
@pytest.mark.parametrize("ranker", ["dense", "fusion"])
def test_units_written_under_bm25_rank_as_if_their_vectors_were_stored(tmp_path, opener,
                                                                       ranker):
    lazy, inline = tmp_path / "lazy", tmp_path / "inline"
    _write(lazy)                        # saves its index: all-zero dense rows
    _write(inline, vectors="inline")
    got, want = _dense_results(lazy, opener, ranker), _dense_results(inline, opener, ranker)
    assert got == want
    assert [hits[0][0] for hits in got] == TOPICS   # each topic finds its own unit first


def test_writer_saves_the_vectors_it_computed(tmp_path):
    root = tmp_path / "s"
    _write(root)
    mem = Memory.open(root, ranker="dense")
    assert mem.index.unembedded or not mem.index.dense_scanned
    mem._search(TOPICS[2], 3)
    n = len(mem.index)
    mem.close()
    again = Memory.open(root, ranker="dense")
    idx = again.index
    assert len(idx) == n and np.all(idx.dense.any(axis=1))   # loaded, not recomputed
    assert again.fsck() == []
    again.close()


def test_dense_prune_ranks_l1_units_stored_without_vectors(tmp_path):
    root = tmp_path / "s"
    mem = Memory.open(root, auto_prune=False, context_capacity=10, context_protected=0)
    for i, text in enumerate(TOPICS[:4]):
        mem.append(_event(i, text))
    mem.close()
    dense = Memory.open(root, ranker="dense", context_capacity=3, context_protected=0,
                        context_tokens=2000)   # watermark 1: keep the closest event only
    assert dense.prune(query="piano scales sonatina") is not None
    assert [e.input for e in dense.timeline()] == [TOPICS[2]]
    assert dense.fsck() == []
    dense.close()


def test_imported_conversations_store_vectors_only_for_rankers_that_read_them(tmp_path):
    """``fsmem import --from chatgpt`` writes units as commit does: none under bm25 with the
    hashed embedder, stored under a ranker that reads them; a fused query finds them either way."""
    from pathlib import Path

    from fsmem.ingest.importers import import_chatgpt
    export = Path(__file__).resolve().parents[1] / "fixtures" / "chatgpt" / "conversations.json"
    for kw, stored in (({}, False), ({"ranker": "fusion"}, True)):
        root = tmp_path / ("lazy" if not stored else "fused")
        mem = Memory.open(root, **kw)
        assert len(import_chatgpt(mem, str(export)).imported) == 2
        for path in _units(root, "documents"):
            assert (read_manifest(path).vectors is not None) == stored, path
            assert os.path.exists(os.path.join(path, VECTORS)) == stored, path
        assert mem.fsck() == []
        mem.close()
        fused = Memory.open(root, ranker="fusion")
        assert fused.query("balcony tomatoes watering")[0].unit_id.endswith("0001")
        fused.close()
