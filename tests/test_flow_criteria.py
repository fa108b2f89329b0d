"""The repair plan's criteria (section 三 ①②③) for the L1 <-> L2 flow, one named test each.

Every test drives the real store: events are appended to L1, pruned into L2 by capacity, and
recalled back, and the assertions read the unit directories themselves.
"""

from __future__ import annotations

import os

import blake3
import pytest

from conftest import make_png
from fsmem import Event, MediaAttachment, Memory, Timestamp, ToolOutput
from fsmem.format.unit import read_manifest, read_vectors

SENTINEL = "⟦SENTINEL-END-5000⟧"


def _events(n: int = 6) -> list[Event]:
    """Events with nanosecond +08:00 timestamps, long responses, tools and tool results."""
    out = []
    for i in range(n):
        resp = (f"回答{i}：" + "长文本" * 1700)[:5000 - len(SENTINEL)] + SENTINEL
        out.append(Event(
            timestamp=Timestamp.parse(f"2026-10-0{1 + i}T08:0{i}:0{i}.12345678{i}+08:00"),
            source="qq" if i % 2 else "wechat", role="user",
            input=f"问题 {i}: 咖啡机 coffee machine number {i}",
            response=resp, tools_used=["search", "calc"],
            tool_results=[ToolOutput(name="search", output=f"搜索结果 {i} " + "x" * 600),
                          ToolOutput(name="calc", output=f"= {i * 7}")],
            attachments=[MediaAttachment(data=make_png(seed=i + 2), mime="image/png",
                                         name=f"p{i}.png")] if i == 1 else []))
    return out


@pytest.fixture
def archived(tmp_path):
    """Six events appended to L1 (capacity 6), then six unrelated ones: pruning by relevance
    to a query about the new ones moves exactly the first six into one L2 unit."""
    mem = Memory.open(tmp_path / "m", context_capacity=6, context_protected=2, auto_prune=False)
    originals = _events()
    ids = [mem.append(e) for e in originals]
    for k in range(6):
        mem.append(Event(source="cli", input=f"weather rain umbrella {k}"))
    unit = mem.prune(query="weather rain umbrella")
    assert unit is not None
    return mem, originals, ids, unit


def _l2_events(mem, unit):
    doc = mem.document(unit)
    assert doc.layer == "documents"
    return {e.id: e for e in doc.events}


def test_archive_keeps_full_timestamp_source_response_tools(archived):
    mem, originals, ids, unit = archived
    got = _l2_events(mem, unit)
    assert set(ids) <= set(got)
    for eid, orig in zip(ids, originals):
        ev = got[eid]
        assert ev.timestamp == orig.timestamp
        assert ev.timestamp.isoformat() == orig.timestamp.isoformat()  # not HH:MM
        assert ev.source == orig.source
        assert ev.input == orig.input
        assert ev.response == orig.response and ev.response.endswith(SENTINEL)
        assert len(ev.response) == 5000
        assert ev.tools_used == ["search", "calc"]
        assert [(t.name, t.output) for t in ev.tool_results] == \
            [(t.name, t.output) for t in orig.tool_results]


def test_text_blocks_are_byte_identical_separate_and_timed(archived):
    mem, originals, ids, unit = archived
    path = os.path.join(mem.root, "documents", unit)
    manifest = read_manifest(path)
    recs = {r.id: r for r in manifest.events}
    for eid, orig in zip(ids, originals):
        rec = recs[eid]
        texts = {b.role: b for b in rec.blocks if b.modality == "text" and b.role != "tool_output"}
        assert set(texts) == {"input", "response"}          # two blocks, not one merged
        assert texts["input"].digest != texts["response"].digest
        for role, want in (("input", orig.input), ("response", orig.response)):
            ref = texts[role]
            with open(os.path.join(path, ref.digest + ".txt"), "rb") as fh:
                data = fh.read()
            assert data == want.encode("utf-8")
            assert blake3.blake3(data).hexdigest() == ref.digest
            assert ref.created_at == orig.timestamp         # created_at = event time
        outs = [b for b in rec.blocks if b.role == "tool_output"]
        assert len(outs) == 2 and all(b.created_at == orig.timestamp for b in outs)


def test_content_is_a_view_rendered_whole(archived):
    mem, originals, ids, unit = archived
    doc = mem.document(unit)
    assert SENTINEL in doc.content and "2026-10-01T08:00:00.12345678+08:00" in doc.content
    assert "content" not in open(os.path.join(doc.path, "manifest.json")).read()


def test_recall_restores_each_event_at_its_original_timestamp(archived):
    mem, originals, ids, unit = archived
    assert mem.recall("咖啡机 coffee machine", top_k=1) == [unit]
    timeline = {e.id: e for e in mem.timeline()}
    for eid, orig in zip(ids, originals):
        ev = timeline[eid]
        assert ev.timestamp == orig.timestamp and ev.source == orig.source
        assert ev.input == orig.input and ev.tools_used == orig.tools_used
    stamps = [e.timestamp.ns for e in mem.timeline()]
    assert stamps == sorted(stamps)


def test_recall_carries_the_blocks(archived):
    mem, originals, ids, unit = archived
    mem.recall("咖啡机 coffee machine", top_k=1)
    ev = {e.id: e for e in mem.timeline()}[ids[1]]
    media = [b for b in ev.blocks if b.modality == "image"]
    assert len(media) == 1 and media[0].name == "p1.png" and (media[0].width, media[0].height) == (64, 48)
    path = os.path.join(mem.root, "context", unit, media[0].digest + ".png")
    assert open(path, "rb").read() == make_png(seed=3)


def test_long_response_with_sentinel_comes_back_whole(archived):
    mem, originals, ids, unit = archived
    mem.recall("咖啡机 coffee machine", top_k=1)
    timeline = {e.id: e for e in mem.timeline()}
    for eid, orig in zip(ids, originals):
        assert timeline[eid].response == orig.response
        assert len(timeline[eid].response) == 5000 and timeline[eid].response.endswith(SENTINEL)
        assert timeline[eid].tool_results[0].output == orig.tool_results[0].output


def _identity(mem, layer, unit):
    """digest -> (created_at, inode, mtime) and row key -> vector bytes of one unit."""
    path = os.path.join(mem.root, layer, unit)
    manifest = read_manifest(path)
    blocks = {}
    for rec in manifest.events:
        for b in rec.blocks:
            name = next(n for n in os.listdir(path) if n.startswith(b.digest))
            st = os.stat(os.path.join(path, name))
            blocks[(rec.id, b.digest, b.role)] = (b.created_at, st.st_ino, st.st_mtime_ns)
    keys, mat = read_vectors(path, manifest)
    return blocks, {k: mat[i].tobytes() for i, k in enumerate(keys)}


def test_block_ids_vectors_and_created_at_never_change(tmp_path):
    mem = Memory.open(tmp_path / "m", context_capacity=2, context_protected=0, auto_prune=False,
                      vectors="inline")   # stored vectors, to see them copied bit for bit
    eid = mem.append(_events(2)[1])
    before_blocks, before_vecs = {}, {}
    for unit in mem.units("context"):
        b, v = _identity(mem, "context", unit)
        before_blocks.update({k: x[0] for k, x in b.items()})
        before_vecs.update(v)
    mem.append(Event(source="cli", input="unrelated one"))
    mem.append(Event(source="cli", input="unrelated two"))
    unit = mem.prune(query="unrelated")
    in_l2, vec_l2 = _identity(mem, "documents", unit)
    # The prune archives a batch (down to the watermark): this event's blocks and rows.
    assert {k: x[0] for k, x in in_l2.items() if k[0] == eid} == before_blocks
    assert {k: v for k, v in vec_l2.items() if k.startswith(eid + ":")} == before_vecs
    calls = mem.embedder.calls
    assert mem.recall("咖啡机 coffee machine", top_k=1) == [unit]
    assert mem.embedder.calls == calls          # recall never calls the embedder
    in_l1, vec_l1 = _identity(mem, "context", unit)
    assert in_l1 == in_l2                        # same created_at, same inode, same mtime
    assert vec_l1 == vec_l2


def test_holder_moves_from_l2_to_l1_and_is_never_both(archived):
    mem, originals, ids, unit = archived
    assert any(h.unit_id == unit for h in mem.query("咖啡机 coffee machine"))
    assert mem.recall("咖啡机 coffee machine", top_k=1) == [unit]
    assert unit in mem.units("context") and unit not in mem.units("documents")
    assert all(h.unit_id != unit for h in mem.query("咖啡机 coffee machine"))
    assert mem.recall("咖啡机 coffee machine", top_k=1) != [unit]
    assert mem.fsck() == []


def test_query_is_read_only(archived):
    mem, originals, ids, unit = archived

    def state():
        out = {}
        for layer in ("context", "documents"):
            for dirpath, _, files in os.walk(os.path.join(mem.root, layer)):
                for f in files:
                    p = os.path.join(dirpath, f)
                    out[os.path.relpath(p, mem.root)] = (open(p, "rb").read(),
                                                         os.stat(p).st_mtime_ns)
        return out
    before = state()
    count_before = mem.document(unit).access_count
    hits = mem.query("咖啡机 coffee machine", top_k=3)
    assert hits and hits[0].unit_id == unit and hits[0].score > 0
    # Units are immutable: no file of any unit changes (bytes and mtime); the access is
    # counted outside the unit, in the access log.
    assert state() == before
    doc = mem.document(unit)
    assert doc.access_count == count_before + 1 and doc.last_access is not None


def test_prune_protects_the_most_recent_arrivals(tmp_path):
    """A just-recalled old event is not old for eviction: arrival, not event time, counts."""
    mem = Memory.open(tmp_path / "m", context_capacity=4, context_protected=2, auto_prune=False)
    old = Event(timestamp=Timestamp.parse("2020-01-01T00:00:00Z"), source="qq",
                input="ancient piano lesson notes")
    archived = mem.commit_events([old])
    for k in range(3):
        mem.append(Event(source="cli", input=f"solar panel {k}"))
    assert mem.recall("piano lesson", top_k=1) == [archived]
    mem.append(Event(source="cli", input="solar panel fresh"))
    mem.prune(query="solar panel")           # 5 events, capacity 4: down to the watermark 3
    inputs = [e.input for e in mem.timeline()]
    assert "ancient piano lesson notes" in inputs   # protected by its arrival
    assert len(inputs) == 3


def test_prune_keeps_the_most_relevant(tmp_path):
    # capacity 4: the prune goes down to the watermark clamp(8, >= 2, <= 3) = 3
    mem = Memory.open(tmp_path / "m", context_capacity=4, context_protected=1, auto_prune=False)
    for text in ("cat food brand", "solar panel output", "cat food price", "visa appointment",
                 "rain boots", "latest message"):
        mem.append(Event(source="cli", input=text))
    unit = mem.prune(query="cat food")
    kept = sorted(e.input for e in mem.timeline())
    assert kept == ["cat food brand", "cat food price", "latest message"]
    assert sorted(e.input for e in mem.document(unit).events) == ["rain boots",
                                                                   "solar panel output",
                                                                   "visa appointment"]
    assert mem.prune(query="cat food") is None      # within capacity now
    assert mem.fsck() == []


def test_prune_moves_events_into_one_unit_and_splits_a_recalled_unit(tmp_path):
    mem = Memory.open(tmp_path / "m", context_capacity=4, context_protected=0, auto_prune=False)
    unit = mem.commit_events([Event(source="qq", input="alpha topic"),
                              Event(source="qq", input="beta other"),
                              Event(source="qq", input="alpha again"),
                              Event(source="qq", input="gamma thing")])
    mem.recall("alpha", top_k=1)
    mem.append(Event(source="cli", input="alpha three"))   # the recall's turn ends: unpinned
    new = mem.prune(query="alpha")                          # 5 events: down to 3
    assert [e.input for e in mem.document(new).events] == ["beta other", "gamma thing"]
    assert sorted(e.input for e in mem.timeline()) == ["alpha again", "alpha three", "alpha topic"]
    assert unit not in mem.units("context")   # replaced by a remainder unit
    assert mem.fsck() == []
