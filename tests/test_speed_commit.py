"""A commit indexes its unit from what it has in hand (fsmem.format.unit.Written): no block, manifest
or vectors file of the new unit is read back, and the entry equals the one read from disk."""

from __future__ import annotations

import hashlib

import numpy as np

import fsmem.format.blocks
import fsmem.search.index
import fsmem.search.index_entry
from fsmem import Event, MediaAttachment, Memory, Timestamp, ToolOutput
from fsmem.search.embed import HashEmbedder

T0 = Timestamp.parse("2026-03-01T09:00:00+08:00").ns


def _events() -> list[Event]:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    return [Event(timestamp=Timestamp(T0 + i * 10**9, 8 * 3600), source="chat",
                  input=f"周末 计划 visit the harbour on 7 May 2026, turn {i}",
                  response="same text" if i else "sunny 天气",
                  tool_results=[ToolOutput(name="search", output=f"猫粮 result {i}")],
                  attachments=[MediaAttachment(data=png, mime="image/png", name="p.png")]
                  if i == 0 else [])
            for i in range(3)] + [Event(timestamp=Timestamp(T0, 0), source="chat",
                                        input="echo", response="echo")]   # one deduped block


def _same(a: fsmem.search.index_entry.IndexEntry, b: fsmem.search.index_entry.IndexEntry) -> None:
    assert (a.unit_id, a.ino, a.summary, a.created_ns, a.created_off, a.events) == \
        (b.unit_id, b.ino, b.summary, b.created_ns, b.created_off, b.events)
    for name in ("terms", "tfs", "vector"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.rows.ids == b.rows.ids and a.rows.keys == b.rows.keys
    for name in ("ptr", "time", "kind"):
        assert np.array_equal(getattr(a.rows, name), getattr(b.rows, name)), name


def test_commit_indexes_its_unit_without_reading_it_back(root, monkeypatch):
    mem = Memory.open(root, durability="off", auto_prune=False)
    index = mem.index
    mem.commit("warm up")
    reads: list[str] = []
    real_block, real_manifest, real_vectors = (fsmem.format.blocks.read_block,
                                               fsmem.search.index.read_manifest,
                                               fsmem.search.index.read_vectors)
    monkeypatch.setattr(fsmem.format.blocks, "read_block",
                        lambda p, *a, **k: reads.append(p) or real_block(p, *a, **k))
    monkeypatch.setattr(fsmem.search.index, "read_manifest",
                        lambda p, *a, **k: reads.append(p) or real_manifest(p, *a, **k))
    monkeypatch.setattr(fsmem.search.index, "read_vectors",
                        lambda p, *a, **k: reads.append(p) or real_vectors(p, *a, **k))
    uid = mem.commit_events(_events(), summary="a summary", source="chat",
                            meta={"session": "s1"})
    assert reads == []
    written = index.pending[uid]
    path = mem.layout.unit_dir("documents", uid)
    _same(written, index.entry_for(path, uid, written.ino))   # read from disk this time
    assert reads   # (the spies do see reads)
    assert [h.unit_id for h in mem.query("猫粮 harbour", top_k=1)] == [uid]


_EMBED_TEXTS = ["", "   ", "Hello, World! hello world", "周末计划：去 harbour 看 sunny 天气",
                "ｆｕｌｌｗｉｄｔｈ Ⅻ ｶﾞ がっこう 한국어 𠀀𠀁 don't it’s 1,000 2023-05-07 a_b",
                "word\tword\nword  猫粮royal canin猫 x", "İstanbul ß é\u0301",
                "记忆 咖啡机 猫粮 光伏板 memory coffee solar piano 周末 计划 天气 rain sunny " * 3]


def _features_digest(emb: HashEmbedder, texts: list[str]) -> str:
    rows, feats = emb.features(texts)
    order = np.lexsort((feats, rows))
    return hashlib.sha256(rows[order].astype("<i8").tobytes()
                          + feats[order].astype("<u8").tobytes()).hexdigest()


def test_hash_embedder_features_are_unchanged():
    """The faster HashEmbedder.features (a per-token cache) gives the features, hence the
    vectors, of fingerprint fsmem-hash-v1: stored vectors stay comparable. Pinned from the
    implementation before the change; a second call (cache warm) gives the same."""
    emb = HashEmbedder()
    assert emb.fingerprint == "fsmem-hash-v1:d512"
    for _ in range(2):
        assert _features_digest(emb, _EMBED_TEXTS) == PINNED_FEATURES
        assert _features_digest(emb, _EMBED_TEXTS[::-1]) == PINNED_FEATURES_REVERSED


PINNED_FEATURES = "cdfe561c65cbec2cf20ae7826aa617d9bf1e1358e6f8ab1958423119dbf05f46"
PINNED_FEATURES_REVERSED = "244adac2108b7977d51eff3181a8566b4fc3b0d9bfe0d228c2a61f270a693e8f"
