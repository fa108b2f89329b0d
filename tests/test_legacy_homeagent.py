"""HomeAgent drop-in without silent loss (issue 14): one test per numbered item, over a memory
directory written by tests/homeagent_gen.py (Go encoding/json by hand, not fsmem's reader)."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import subprocess
from pathlib import Path

import pytest

import homeagent_gen as gen
from conftest import fsmem_process
from fsmem import Memory, Timestamp
from fsmem.interfaces.docmemory import DocMemory

GO_TIMES = [gen.ZERO, gen.YEAR1, gen.FAR, gen.T1, gen.T2, gen.T3, "1969-12-31T23:59:59.999999999Z",
            "2262-04-11T23:47:16.854775808Z", "1677-09-21T00:12:43.145224191Z"]


@pytest.fixture
def ha(tmp_path) -> Path:
    return gen.build(tmp_path / "memory")


def _cli(*args: str, root: Path) -> subprocess.CompletedProcess:
    return fsmem_process([*args, "--root", str(root)])


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".fsmem" not in p.parts}


# -- 0. Go's zero time, year 1, far future ----------------------------------------------------

@pytest.mark.parametrize("text", GO_TIMES)
def test_item0_every_go_time_round_trips(text):
    assert Timestamp.parse(text).isoformat() == text
    assert Timestamp.parse(text).strftime("%Y-%m-%d")[:4] == text[:4]


def test_item0_zero_and_far_times_are_indexable_and_render(ha):
    mem = Memory.open(ha, adopt=True)
    hits = mem.query("厨房插座")
    assert hits and hits[0].unit_id == gen.DOC["explicit"]
    assert hits[0].created_at.isoformat() == gen.ZERO
    assert mem.query("火星")[0].created_at.isoformat() == gen.FAR
    assert mem.reindex() >= 5
    assert mem.query("签证")[0].unit_id == gen.DOC["v3"]          # no IndexError afterwards
    assert mem.recall("厨房插座", top_k=1) == [gen.DOC["explicit"]]
    assert mem.recall("火星", top_k=1) == [gen.DOC["far"]]
    text = mem.render(4000)
    assert "0001-01-01" in text and "9999-12-31" in text and " 1-01-01" not in text
    report = mem.distill(max_age_s=0, max_access=100)         # converted units stay indexable
    assert report is not None
    mem2 = Memory.open(ha)
    assert mem2.reindex() >= 0 and mem2.query("咖啡机") is not None


# -- 1. the SDK facade, document() and show on legacy ids --------------------------------------

def test_item1_sdk_and_show_work_on_legacy_ids(ha, tmp_path):
    mem = Memory.open(ha)
    dm = DocMemory(mem)
    docs = dm.query("签证", top_k=3)
    assert docs and docs[0].id == gen.DOC["v3"]
    assert "签证材料: 护照照片 录音" in docs[0].content and docs[0].title == "签证材料"
    assert gen.PNG.sha256 in docs[0].media_digests
    d = mem.document(gen.DOC["v2"])
    assert d.layer == "legacy" and d.summary == "语音留言 光伏板"
    assert d.events[0].response == "光伏板清洗 <提醒> & 语音"
    r = _cli("show", gen.DOC["v1"], "--json", root=ha)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["id"] == gen.DOC["v1"]
    assert (ha / "documents" / f"{gen.DOC['v1']}.json").exists()   # a read converts nothing
    original = (ha / "documents" / f"{gen.DOC['v2']}.json").read_bytes()
    dm.remove(gen.DOC["v2"])
    assert not (ha / "documents" / f"{gen.DOC['v2']}.json").exists()
    moved = list((ha / ".fsmem").rglob(f"{gen.DOC['v2']}.json"))
    assert len(moved) == 1 and moved[0].read_bytes() == original    # moved aside, not deleted
    assert all(h.unit_id != gen.DOC["v2"] for h in mem.query("光伏板"))


# -- 2. duplicate id-less events; fsck never quarantines a unit for one event -------------------

def test_item2_duplicate_events_get_unique_ids_and_fsck_keeps_units(ha, root):
    mem = Memory.open(ha, adopt=True)
    tl = mem.timeline()
    raw = json.loads((ha / "context.json.adopted").read_text("utf-8"))
    assert len(tl) == len(raw) and len({e.id for e in tl}) == len(raw)
    assert [f for f in mem.fsck() if f.kind == "duplicate-event"] == []
    again = Memory.open(gen.build(root.parent / "again"), adopt=True)
    assert [e.id for e in again.timeline()] == [e.id for e in tl]        # deterministic
    from fsmem.format.model import Event
    a = mem.commit_events([Event(id="e-same", input="one", source="x")], layer="context")
    b = mem.commit_events([Event(id="e-same", input="two", source="x"),
                           Event(id="e-other", input="three", source="x")], layer="context")
    findings = mem.fsck(fix=True)
    assert any(f.kind == "duplicate-event" for f in findings)
    assert {a, b} <= set(mem.units("context"))
    assert len(mem.timeline()) == len(raw) + 3


# -- 3. media.db is read; m4a is audio ---------------------------------------------------------

@pytest.mark.parametrize("schema", ["old", "new"])
def test_item3_media_db_types_voice_notes_and_m4a(tmp_path, schema):
    ha = gen.build(tmp_path / "m", media_schema=schema)
    mem = Memory.open(ha)
    assert mem.recall("光伏板", top_k=1) == [gen.DOC["v2"]]
    blocks = {b.sha256: b for b in mem.document(gen.DOC["v2"]).blocks if b.sha256}
    amr = blocks[gen.AMR.sha256]
    assert (amr.mime, amr.modality) == ("audio/amr", "audio")
    assert amr.tool == "qq"                                     # media.db's tool column
    if schema == "new":                                         # media.db's vec + vec_model
        assert (amr.vector, amr.fingerprint) == ([0.5, 0.5], "chineseclip")
    else:
        assert amr.vector == [] and amr.fingerprint == ""
    assert mem.recall("签证", top_k=1) == [gen.DOC["v3"]]
    m4a = [b for b in mem.document(gen.DOC["v3"]).blocks if b.sha256 == gen.M4A.sha256][0]
    assert m4a.modality == "audio" and m4a.mime.startswith("audio/")


def test_item3_sniffing_without_media_db():
    from fsmem.format.media import sniff_mime
    assert sniff_mime(gen.AMR.data[:64]) == "audio/amr"
    assert sniff_mime(gen.M4A.data[:64]) == "audio/mp4"


# -- 4. v3 block fields are kept; legacy block ids resolve ---------------------------------------

def test_item4_v3_block_fields_are_kept_and_resolve(ha, caplog):
    mem = Memory.open(ha)
    assert mem.read_block(gen.V3_IMAGE_BLOCK) == gen.PNG.data     # before recall: media store
    with caplog.at_level(logging.WARNING, logger="fsmem.legacy"):
        assert mem.recall("签证", top_k=1) == [gen.DOC["v3"]]
    ev = mem.document(gen.DOC["v3"]).events[0]
    by_id = {b.legacy_id: b for b in ev.blocks if b.legacy_id}
    # issue 32: a block with neither payload nor text is kept (nothing dropped on recall)
    empty = by_id[gen.V3_EMPTY_BLOCK]
    assert (empty.size, empty.created_at, empty.updated_at) == (
        0, Timestamp.parse(gen.T3), Timestamp.parse(gen.T3))
    assert not any(gen.V3_EMPTY_BLOCK in r.getMessage() and "not kept" in r.getMessage()
                   for r in caplog.records)
    img, txt = by_id[gen.V3_IMAGE_BLOCK], by_id[gen.V3_TEXT_BLOCK]
    assert img.vector == [round(0.1 * i, 3) for i in range(8)]
    assert img.fingerprint == "chineseclip:d8" and img.tool == "camera"
    assert (txt.semantic_type, txt.source, txt.tool, txt.scene) == \
        ("Person", "triple", "doc_commit", "chan:qq")
    assert txt.updated_at == Timestamp.parse(gen.T3)
    assert txt.created_at == Timestamp.parse(gen.T2)
    path, ref = mem.find_block(gen.V3_IMAGE_BLOCK)
    assert ref.sha256 == gen.PNG.sha256
    assert mem.read_block(gen.V3_IMAGE_BLOCK) == gen.PNG.data
    assert ev.texts[txt.digest] == "王小明"                     # in the hydrated event
    assert "王小明" in mem.render(4000)                                 # and in render
    # graph.db names the old block id: it joins to the recalled block
    with sqlite3.connect(ha / "graph.db") as db:
        (gid,) = db.execute("SELECT id FROM memory_blocks WHERE payload_digest=?",
                            (gen.PNG.sha256,)).fetchone()
    assert mem.find_block(gid)[1].digest == img.digest


def test_item4_context_json_blocks_and_ids_are_kept(ha):
    mem = Memory.open(ha, adopt=True)
    tl = mem.timeline()
    ev = [e for e in tl if e.input == "发给你一张图"][0]
    assert ev.id == "evt_1791300000000000001"
    assert {b.legacy_id for b in ev.blocks} >= {"blk_1791300000000000001_1", gen.blk_ent("小雨")}
    assert "小雨" in "".join(ev.texts.values())
    html = [e for e in tl if "这张" in e.input][0]
    assert html.input == "看看 <b>这张</b> & 那张"


# -- 5. an old graph.db is only read -------------------------------------------------------------

@pytest.mark.parametrize("generation", gen.GRAPH_GENERATIONS)
def test_item5_old_graph_is_read_never_changed(tmp_path, generation):
    ha = gen.build(tmp_path / "m", graph=generation)
    before = _tree(ha)
    names = sorted(p.name for p in ha.iterdir())
    mem = Memory.open(ha)
    rec = mem.graph.recall("分机")
    assert {(r.source_name, r.relation_type, r.target_name) for r in rec.relations} >= \
        set(gen.LEGACY_FACTS)
    assert mem.graph.search("分机").relations
    mem.close()
    assert _tree(ha) == before                       # graph.db byte for byte, no -wal/-shm
    assert not [p for p in ha.iterdir() if p.name.startswith("graph.db") and p.name not in names]
    with sqlite3.connect(f"file:{ha / 'graph.db'}?immutable=1", uri=True) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if generation == "entities-only":
        assert "memory_blocks" not in tables and "documents" not in tables


# -- 6. a second context.json --------------------------------------------------------------------

def test_item6_second_context_json_is_adopted_into_its_own_unit(ha, caplog):
    mem = Memory.open(ha, adopt=True)
    n = len(mem.timeline())
    first = (ha / "context.json.adopted").read_bytes()
    new = [dict(gen.EV_DUP), {"timestamp": "2026-10-08T10:00:00+08:00", "source": "qq",
                              "input": "第二份上下文"}]
    (ha / "context.json").write_bytes(gen.go_json(new, indent=False))
    with caplog.at_level(logging.WARNING, logger="fsmem.legacy"):
        Memory.open(ha, adopt=True)
    assert (ha / "context.json.adopted").read_bytes() == first
    assert (ha / "context.json.adopted.2").read_bytes() == gen.go_json(new, indent=False)
    assert not (ha / "context.json").exists()
    tl = Memory.open(ha).timeline()
    assert "第二份上下文" in [e.input for e in tl]
    assert len(tl) == n + 1            # the event already adopted is not doubled
    assert any("context.json.adopted.2" in r.getMessage() for r in caplog.records)


def test_item6_context_json_rewritten_during_adoption_is_left_for_next_time(ha):
    from fsmem import ChannelDef
    later = [dict(gen.EV_DUP), {"timestamp": "2026-10-08T11:00:00+08:00", "source": "qq",
                                "input": "写入期间的新事件"}]

    def homeagent_writes(text: str) -> str:   # HomeAgent's debounced write lands meanwhile
        (ha / "context.json").write_bytes(gen.go_json(later, indent=False))
        return text
    Memory.open(ha, adopt=True, plugins=[ChannelDef(name="qq", cleaner=homeagent_writes)])
    assert (ha / "context.json").read_bytes() == gen.go_json(later, indent=False)
    assert not (ha / "context.json.adopted").exists()
    Memory.open(ha, adopt=True)
    assert (ha / "context.json.adopted").read_bytes() == gen.go_json(later, indent=False)
    inputs = [e.input for e in Memory.open(ha).timeline()]
    assert "写入期间的新事件" in inputs and inputs.count("在吗") == 3   # 2 dups + agent turn


# -- 7. legacy graph facts, HomeAgent's migration, text/*.jsonl, updated_at ------------------------

@pytest.mark.parametrize("generation", gen.GRAPH_GENERATIONS)
def test_item7_legacy_graph_facts_are_searchable(tmp_path, generation):
    ha = gen.build(tmp_path / "m", graph=generation)
    r = _cli("graph", "search", "分机", "--json", root=ha)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    rels = {(x["source_name"], x["relation_type"], x["target_name"]) for x in got["relations"]}
    assert set(gen.LEGACY_FACTS) <= rels
    mem = Memory.open(ha)
    rels = {(x.source_name, x.relation_type, x.target_name) for x in mem.graph.recall("老王").relations}
    assert ("老王", "住在", "成都") in rels
    assert len([r for r in mem.graph.recall("老王").relations if r.relation_type == "住在"]) == 1
    if generation == "latest":                      # a scene key leads to its entities' facts
        by_scene = mem.graph.search("家里电话")
        assert ("厨房", "有", "分机") in {(x.source_name, x.relation_type, x.target_name)
                                         for x in by_scene.relations}
    sent = [p.text for r in mem.graph.recall("分机").relations for p in r.provenance]
    assert "厨房有分机，号码是8021" in sent                # the legacy sentence as provenance


@pytest.mark.parametrize("generation", gen.GRAPH_GENERATIONS)
def test_item7_graph_writes_survive_homeagents_migration(tmp_path, generation):
    from fsmem.graph.distill import Triple
    ha = gen.build(tmp_path / "m", graph=generation)
    mem = Memory.open(ha)
    with mem.store.locked():
        mem.graph.commit([Triple(subject="小雨", relation="喜欢", object="钢琴", confidence=0.8)],
                         session_id="s1")
    mem.close()
    with sqlite3.connect(ha / "graph.db") as db:
        gen.ha_relation_edge_uniqueness_migration(db)
    mem = Memory.open(ha)
    rel = [r for r in mem.graph.recall("小雨").relations if r.relation_type == "喜欢"]
    assert rel and rel[0].confidence == pytest.approx(0.8)
    with sqlite3.connect(ha / "graph.db") as db:
        assert db.execute("SELECT status FROM memory_block_edges WHERE edge_type='喜欢'"
                          ).fetchone() == ("active",)


def test_item7_unread_files_reported_and_updated_at_kept(ha):
    mem = Memory.open(ha)   # HomeAgent's logs: listed by stats --legacy, no fsck finding
    from fsmem.homeagent.report import legacy_report
    assert any("text/2026-10-07.jsonl" in p for p in legacy_report(str(ha)).unread)
    assert not any("text/" in f.path for f in mem.fsck())
    mem.recall("签证", top_k=1)
    assert mem.document(gen.DOC["v3"]).updated_at.isoformat() == gen.FAR


# -- 8. adoption is explicit; recall leaves a way back ---------------------------------------------

def test_item8_reads_never_adopt_and_adopt_is_explicit(ha):
    before = _tree(ha)
    for verb in (["stats"], ["ls"], ["query", "咖啡机"], ["timeline"], ["fsck"]):
        _cli(*verb, root=ha)
    assert _tree(ha) == before and (ha / "context.json").exists()
    r = _cli("adopt", "--dry-run", root=ha)
    assert r.returncode == 0, r.stderr
    assert "context.json" in r.stdout and "5 events" in r.stdout
    assert _tree(ha) == before
    r = _cli("adopt", root=ha)
    assert r.returncode == 0, r.stderr
    assert not (ha / "context.json").exists() and (ha / "context.json.adopted").exists()
    mem = Memory.open(ha)
    original = (ha / "documents" / f"{gen.DOC['v1']}.json").read_bytes()
    assert mem.recall("咖啡机", top_k=1) == [gen.DOC["v1"]]
    aside = ha / ".fsmem" / "legacy-recalled" / f"{gen.DOC['v1']}.json"
    assert aside.read_bytes() == original


# -- 9. honest counts, payload digests, logging once per store -------------------------------------

def test_item9_stats_count_only_homeagent_documents(ha):
    s = Memory.open(ha).stats()
    assert s["legacy_documents"] == 5          # not the empty file nor settings.json
    assert s["legacy_unreadable"] == 2


def test_item9_media_blocks_in_graph_carry_their_sha256(ha):
    mem = Memory.open(ha)
    uid = mem.commit("老王住在成都。", media_digests=[gen.PNG.sha256[:12]])
    mem.commit("小雨住在北京。", attachments=[__import__("fsmem").MediaAttachment(
        data=gen._png(3, 3), mime="image/png")])
    mem.distill(max_age_s=0, max_access=100)
    with sqlite3.connect(ha / "graph.db") as db:
        rows = db.execute("SELECT payload_digest FROM memory_blocks WHERE modality='image'"
                          ).fetchall()
    assert gen.PNG.sha256 in {r[0] for r in rows}
    assert hashlib.sha256(gen._png(3, 3)).hexdigest() in {r[0] for r in rows}
    assert uid


def test_item9_fallback_warnings_once_per_store_and_a_summary(ha):
    # The record lives in .fsmem/, which a writer makes (readers create nothing: on a bare
    # HomeAgent directory they can only log once per process).
    assert _cli("init", root=ha).returncode == 0
    r1 = _cli("query", "咖啡机", root=ha)
    r2 = _cli("query", "咖啡机", root=ha)
    assert r1.returncode == 0 and r2.returncode == 0
    # one summary line, never a line per document (issue 32 item 3); each one with -v
    assert len(r1.stderr.splitlines()) == len(r2.stderr.splitlines()) == 1
    assert "documents/ are HomeAgent's" in r1.stderr
    r3 = _cli("-v", "query", "咖啡机", root=ha)
    assert sum("read through the fallback" in ln for ln in r3.stderr.splitlines()) >= 1
