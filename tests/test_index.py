"""The derived index: persisted, reconciled with plain file tools, rebuilt when damaged,
and never the source of truth."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from fsmem import Event, Memory
from fsmem.search.embed import HashEmbedder
from fsmem.search.index import Index


class CountingEmbedder(HashEmbedder):
    """The default embedder, recording every text it is asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts):
        self.texts.extend(texts)
        return super().embed(texts)


TOPICS = ["咖啡机漏水 密封圈", "猫粮 royal canin 体重", "光伏板 发电 14 kWh", "钢琴课 周六",
          "visa appointment embassy", "car insurance renewal", "体检报告 血压偏高", "装修 瓷砖"]


def _fill(root, n=40, **kw) -> Memory:
    mem = Memory.open(root, auto_prune=False, **kw)
    for i in range(n):
        mem.commit(f"{TOPICS[i % len(TOPICS)]} note {i}", summary=f"s{i}")
    return mem


def _top(mem, q, k=5):
    return [h.unit_id for h in mem.query(q, top_k=k)]


def test_index_persists_and_reloads_without_rebuild(root, monkeypatch):
    mem = _fill(root)
    expect = _top(mem, "光伏板 发电")
    mem.close()
    assert os.path.isfile(root / ".fsmem" / "index" / "CURRENT")
    calls = []
    monkeypatch.setattr(Index, "rebuild", lambda self, progress=None: calls.append(1) or 0)
    mem2 = Memory.open(root)
    assert _top(mem2, "光伏板 发电") == expect
    assert calls == []


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "delete", "empty-meta",
                                    "bad-current"])
def test_damaged_index_is_rebuilt_with_the_same_answers(root, damage):
    mem = _fill(root)
    expect = {q: _top(mem, q) for q in TOPICS}
    mem.close()
    index = root / ".fsmem" / "index"
    gen = index / (index / "CURRENT").read_text()
    if damage == "truncate":   # (dense.npy: not saved under bm25; test_index_open has it)
        data = (gen / "ev_len.npy").read_bytes()
        (gen / "ev_len.npy").write_bytes(data[: len(data) // 2])
    elif damage == "flip":                     # same size, one byte changed: only a checksum sees it
        data = bytearray((gen / "p_tfs.npy").read_bytes())
        data[-3] ^= 0x40
        (gen / "p_tfs.npy").write_bytes(bytes(data))
    elif damage == "garbage":
        (gen / "p_rows.npy").write_bytes(os.urandom(500))
    elif damage == "delete":
        shutil.rmtree(gen)
    elif damage == "empty-meta":
        (gen / "meta.json").write_bytes(b"")
    else:
        (index / "CURRENT").write_text("../../documents")
    mem2 = Memory.open(root)
    assert {q: _top(mem2, q) for q in TOPICS} == expect


def test_plain_file_tools_are_reconciled(root, tmp_path):
    mem = _fill(root, n=16)
    (hit,) = _top(mem, "钢琴课 周六 note 3", k=1)
    backup = tmp_path / "backup"
    subprocess.run(["cp", "-a", str(root / "documents" / hit), str(backup)], check=True)
    subprocess.run(["rm", "-r", str(root / "documents" / hit)], check=True)
    assert hit not in _top(mem, "钢琴课 周六 note 3")
    subprocess.run(["cp", "-a", str(backup), str(root / "documents" / hit)], check=True)
    assert _top(mem, "钢琴课 周六 note 3", k=1) == [hit]
    subprocess.run(["mv", str(root / "documents" / hit), str(root / "context" / hit)], check=True)
    assert hit not in _top(mem, "钢琴课 周六 note 3")
    assert hit in [e.unit_id for e in mem.timeline()]
    other = Memory.open(root)               # another process's view agrees
    assert hit not in _top(other, "钢琴课 周六 note 3")
    assert mem.fsck() == []


def test_other_processes_commits_are_seen(root):
    mem = _fill(root, n=8)
    _top(mem, "anything")
    other = Memory.open(root, auto_prune=False)
    uid = other.commit("a brand new 签证 embassy interview on Monday")
    assert _top(mem, "签证 embassy interview", k=1) == [uid]


def test_incremental_equals_rebuild(root):
    mem = _fill(root, n=30)
    for u in mem.units("documents")[:5]:
        mem.remove(u)
    mem.recall("咖啡机漏水", top_k=2)
    inc = {q: mem.query(q, top_k=5) for q in TOPICS}
    mem.reindex()
    reb = {q: mem.query(q, top_k=5) for q in TOPICS}
    for q in TOPICS:
        assert [h.unit_id for h in inc[q]] == [h.unit_id for h in reb[q]]
        assert np.allclose([h.score for h in inc[q]], [h.score for h in reb[q]], rtol=1e-4)


@pytest.mark.parametrize("ranker,expected", [
    ("bm25", []),                                            # the default: no call at all
    ("fusion", ["光伏板 发电", "钢琴课", "visa appointment"]),  # dense: the queries, nothing else
])
def test_recall_and_prune_never_embed_stored_content(root, ranker, expected):
    emb = CountingEmbedder()
    mem = Memory.open(root, embedder=emb, context_capacity=3, context_protected=1,
                      auto_prune=False, ranker=ranker)
    for i in range(6):
        mem.commit(f"{TOPICS[i]} stored text {i}")
        mem.append(Event(source="cli", input=f"{TOPICS[i]} in context {i}"))
    mem.query("warm up the index")
    emb.texts.clear()
    assert mem.recall("光伏板 发电", top_k=2)
    assert mem.prune(query="钢琴课")
    assert mem.recall("visa appointment", top_k=1)
    assert emb.texts == expected


def test_units_of_another_embedding_space_are_not_compared(root):
    mem = _fill(root, n=8)
    other = Memory.open(root, embedder=HashEmbedder(dim=256), auto_prune=False)
    foreign = other.commit("光伏板 发电 foreign space")
    # The foreign unit's vectors are 256-d: never compared densely, still found by BM25.
    mem2 = Memory.open(root, auto_prune=False)
    assert foreign in [h.unit_id for h in mem2.query("光伏板 发电 foreign space", top_k=3)]
    idx = mem2.index
    row = idx.row_of.get(foreign)
    vec = idx.dense[idx.u_ptr[row]:idx.u_ptr[row + 1]] if row is not None \
        else idx.pending[foreign].vector     # the unit's event rows
    assert not vec.any()


class TinyEmbedder:
    """A real-embedder stand-in through the protocol (fingerprint, dim, embed)."""

    fingerprint = "tiny:d16"
    dim = 16

    def embed(self, texts):
        out = np.zeros((len(texts), 16), np.float32)
        for i, t in enumerate(texts):
            out[i, len(t) % 16] = 1.0
        return out


def test_default_ranker_follows_the_embedder(root):
    assert Memory.open(root).ranker == "bm25"
    mem = Memory.open(root, embedder=TinyEmbedder(), auto_prune=False)
    assert mem.ranker == "fusion"
    uid = mem.commit("咖啡机漏水 密封圈")
    assert mem.query("咖啡机漏水", top_k=1)[0].unit_id == uid   # BM25 tokens need no embedder


@pytest.mark.parametrize("n_terms", [0, 1, 7, 3000])
def test_the_length_of_a_one_row_entry_is_its_word_count(n_terms):
    """A legacy document is one row: its BM25 length (words; pair terms left out) is the
    same whether taken as a sum or through the general per-row count."""
    from fsmem.search.analyze import PAIR_BIT
    from fsmem.search.index_entry import IndexEntry, _row_lengths
    rng = np.random.default_rng(n_terms)
    terms = np.sort(rng.integers(0, 2**64, n_terms, dtype=np.uint64))
    terms[::3] |= np.uint64(PAIR_BIT)
    tfs = rng.integers(1, 9, n_terms).astype(np.float32)
    one = IndexEntry(unit_id="u", ino=1, vector=np.zeros(4, np.float32), terms=terms, tfs=tfs)
    words = np.where((terms & np.uint64(PAIR_BIT)) != 0, np.float32(0), tfs)
    want = np.bincount(np.zeros(n_terms, np.int64), weights=words, minlength=1)
    got = _row_lengths(one)
    assert got.dtype == np.float32 and got.tolist() == want.astype(np.float32).tolist()
    assert got[0] == sum(int(t) for t, h in zip(tfs, terms) if not int(h) >> 63)
