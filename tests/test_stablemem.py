"""L3 stable memory: graph.db in HomeAgent's schema, distillation of cold units (originals
kept whole, moved by one rename), provenance back to the exact event, idempotence, a crash
sweep, an existing HomeAgent graph.db kept and added to, recall through the graph, the CLI."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO, assert_feed_agrees, crash_sweep, make_png
from fsmem import ChannelDef, Event, MediaAttachment, Memory, Timestamp, ToolDef, ToolOutput
from fsmem.graph.distill import RuleDistiller, Triple
from fsmem.memory.stablemem import (Graph, distill, find_cold, recall_from_graph, sentence_block_id, triple_block_id, unit_facts)
from fsmem.interfaces.cli.graph import add_cli

HA_GRAPH = REPO / "fixtures" / "homeagent-memory" / "graph.db"
HOMEAGENT_COLUMNS = {
    "memory_blocks": ["id", "modality", "text_content", "payload_digest", "mime", "size", "width",
                      "height", "vector", "fingerprint", "source", "tool", "scene",
                      "semantic_type", "created_at", "updated_at"],
    "memory_block_edges": ["id", "source_kind", "source_id", "target_kind", "target_id",
                           "edge_type", "created_at", "confidence", "session_id", "turn_id",
                           "status", "merged_into"],
    "documents": ["id", "summary", "created_at"],
}
LAYERS = ("context", "documents", "stablemem")


def canonical(path: Path) -> tuple[list, list, list]:
    """graph.db without clock columns or row ids (an edge-to-edge reference is replaced by the
    referenced edge's content), sorted: equal dumps = the same graph."""
    db = sqlite3.connect(path)
    try:
        blocks = sorted(db.execute(
            "SELECT id, modality, text_content, payload_digest, mime, size, width, height, "
            "vector, fingerprint, source, tool, scene, semantic_type FROM memory_blocks"))
        raw = db.execute("SELECT id, source_kind, source_id, target_kind, target_id, edge_type, "
                         "confidence, session_id, turn_id, status, merged_into "
                         "FROM memory_block_edges").fetchall()
        key = {r[0]: (r[1], r[2], r[5], r[3], r[4]) for r in raw}

        def ref(kind: str, ident: str) -> str:
            return repr(key.get(int(ident), ident)) if kind == "edge" else ident
        edges = sorted((r[1], ref(r[1], r[2]), r[3], ref(r[3], r[4]), *r[5:]) for r in raw)
        docs = sorted(db.execute("SELECT id, summary, created_at FROM documents"))
    finally:
        db.close()
    return blocks, edges, docs


def layers_of(root: Path) -> dict[str, list[str]]:
    mem = Memory.open(root)
    return {layer: sorted(mem.units(layer)) for layer in LAYERS}


def snapshot(unit_dir: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_ino) for p in sorted(unit_dir.iterdir())}


def _store(root: Path, **kw) -> tuple[Memory, list[str]]:
    mem = Memory.open(root, auto_prune=False, **kw)
    units = [
        mem.commit_events([
            Event(source="qq", input="你好呀"),
            Event(source="qq", input="我住在杭州。我喜欢猫和狗。", response="好的，记住了。"),
            Event(source="agent", input="查一下", response="查到了。", tools_used=["search"],
                  tool_results=[ToolOutput(name="search", output="Bob likes jazz.")],
                  attachments=[MediaAttachment(data=make_png(), mime="image/png", name="a.png")]),
        ], summary="home"),
        mem.commit_events([Event(source="qq", input="小雨住在杭州。阿橘喜欢晒太阳。")], summary="cat"),
        mem.commit_events([Event(source="qq", input="今天天气怎么样？")], summary="weather"),
        mem.commit_events([Event(source="wechat", input="My sister lives in Boston. I work at "
                                 "Airbus.")], summary="en"),
    ]
    return mem, units


# -- schema -------------------------------------------------------------------------------

def test_fresh_graph_has_homeagent_schema_wal_and_busy_timeout(tmp_path):
    mem, _ = _store(tmp_path / "m")
    distill(mem, max_age_s=0)
    path = tmp_path / "m" / "graph.db"
    db = sqlite3.connect(path)
    for table, cols in HOMEAGENT_COLUMNS.items():
        assert [r[1] for r in db.execute(f"PRAGMA table_info({table})")] == cols
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"idx_memory_blocks_modality", "idx_memory_blocks_digest", "idx_mbe_source",
            "idx_mbe_target"} <= indexes
    with Graph(mem) as g:
        assert g.connection.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_old_homeagent_schema_gets_columns_added_never_dropped(tmp_path):
    path = tmp_path / "graph.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE memory_blocks (id TEXT PRIMARY KEY, modality TEXT NOT NULL,
            text_content TEXT DEFAULT '', created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
        CREATE TABLE memory_block_edges (id INTEGER PRIMARY KEY AUTOINCREMENT,
            source_kind TEXT NOT NULL, source_id TEXT NOT NULL, target_kind TEXT NOT NULL,
            target_id TEXT NOT NULL, edge_type TEXT NOT NULL,
            created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
            UNIQUE(source_kind, source_id, target_kind, target_id, edge_type));
        CREATE TABLE keepme (x INTEGER);
        INSERT INTO keepme VALUES (42);
        INSERT INTO memory_blocks(id, modality, text_content) VALUES ('blk_old', 'text', 'old');
        INSERT INTO memory_block_edges(source_kind, source_id, target_kind, target_id, edge_type)
            VALUES ('block', 'blk_old', 'block', 'blk_old2', 'knows');
    """)
    db.commit()
    db.close()
    with Graph(path) as g:
        res = g.commit([Triple("小雨", "养", "阿橘"), Triple("小雨", "养", "阿橘")])
        assert res.edges_added == 1 and res.blocks_added == 2
        g.commit([Triple("小雨", "养", "阿橘")])
    db = sqlite3.connect(path)
    for table, cols in HOMEAGENT_COLUMNS.items():
        assert set(cols) <= {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
    assert db.execute("SELECT * FROM keepme").fetchall() == [(42,)]
    assert db.execute("SELECT id, text_content FROM memory_blocks WHERE id='blk_old'"
                      ).fetchall() == [("blk_old", "old")]
    assert db.execute("SELECT count(*) FROM memory_block_edges").fetchone()[0] == 2


def test_a_locked_graph_is_a_clear_error_and_nothing_changes(tmp_path):
    from fsmem import FsmemError
    path = tmp_path / "graph.db"
    with Graph(path) as g:
        g.commit([Triple("A", "knows", "B")])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")                            # HomeAgent writing right now
    try:
        with Graph(path, busy_timeout_s=0.2) as g, pytest.raises(FsmemError, match="graph.db"):
            g.commit([Triple("C", "knows", "D")])
    finally:
        other.execute("ROLLBACK")
        other.close()
    with Graph(path) as g:
        assert g.stats()["memory_block_edges"] == 1 and g.recall("C").relations == []


# -- distillation -------------------------------------------------------------------------

def test_distill_moves_units_whole_and_byte_identical(tmp_path):
    root = tmp_path / "m"
    mem, units = _store(root)
    before = {u: snapshot(root / "documents" / u) for u in units}
    report = distill(mem, max_age_s=0)
    moved = [units[0], units[1], units[3]]
    assert sorted(report.distilled) == sorted(moved)
    assert report.no_facts == [units[2]]          # nothing to distil: stays searchable in L2
    assert layers_of(root) == {"context": [], "documents": [units[2]],
                               "stablemem": sorted(moved)}
    for u in moved:
        assert snapshot(root / "stablemem" / u) == before[u]   # same bytes, same inodes
        assert mem.document(u).layer == "stablemem"
    assert snapshot(root / "documents" / units[2]) == before[units[2]]
    assert mem.fsck() == []


def test_every_block_of_a_distilled_unit_is_linked_from_its_document(tmp_path):
    root = tmp_path / "m"
    mem, units = _store(root)
    distill(mem, max_age_s=0)
    doc = mem.document(units[0])
    db = sqlite3.connect(root / "graph.db")
    assert db.execute("SELECT summary FROM documents WHERE id=?", (units[0],)).fetchone() == ("home",)
    linked = set(db.execute("SELECT target_id, session_id FROM memory_block_edges WHERE "
                            "source_kind='document' AND source_id=? AND edge_type='contains'",
                            (units[0],)))
    assert linked == {(ref.digest, ev.id) for ev in doc.events for ref in ev.blocks}
    image = next(r for ev in doc.events for r in ev.blocks if r.modality == "image")
    row = db.execute("SELECT modality, mime, size, width, height, text_content FROM memory_blocks "
                     "WHERE id=?", (image.digest,)).fetchone()
    assert row == ("image", "image/png", image.size, 64, 48, "")
    for ev in doc.events:
        for ref in ev.blocks:
            if ref.modality == "text":
                text = db.execute("SELECT text_content, tool FROM memory_blocks WHERE id=?",
                                  (ref.digest,)).fetchone()
                original = (Path(doc.path) / f"{ref.digest}.txt").read_text()
                assert text[0] == original
                assert text[1] == ("search" if ref.role == "tool_output" else "")


def test_provenance_leads_back_to_the_exact_event_and_block(tmp_path):
    root = tmp_path / "m"
    mem, units = _store(root)
    distill(mem, max_age_s=0)
    with Graph(mem) as g:
        rec = g.recall(["杭州"], depth=1)
        rel = next(r for r in rec.relations if r.source_name == "我")
        assert (rel.relation_type, rel.target_name) == ("住在", "杭州")
        (prov,) = rel.provenance
        doc = mem.document(prov.unit_id)
        assert prov.unit_id == units[0] and doc.layer == "stablemem"
        event = next(ev for ev in doc.events if ev.id == prov.event_id)
        assert event.input == "我住在杭州。我喜欢猫和狗。" and prov.turn == 1
        ref = next(r for r in event.blocks if r.digest == prov.block)
        assert ref.role == "input"
        assert (Path(doc.path) / f"{ref.digest}.txt").read_text() == event.input
        # A fact read from a tool output points at the tool_output block.
        bob = g.recall(["Bob"], depth=1).relations[0]
        tool_ev = next(ev for ev in doc.events if ev.id == bob.provenance[0].event_id)
        assert next(r for r in tool_ev.blocks if r.digest == bob.provenance[0].block
                    ).role == "tool_output"
        # derived_from: each endpoint to the text block, tagged with the event.
        db = g.connection
        for name in ("我", "杭州"):
            assert db.execute("SELECT session_id FROM memory_block_edges WHERE source_id=? AND "
                              "target_id=? AND edge_type='derived_from'",
                              (triple_block_id(name), prov.block)).fetchall() == [(event.id,)]


def test_homeagent_graph_keeps_its_rows_and_gains_new_ones(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    shutil.copy(HA_GRAPH, root / "graph.db")
    old = sqlite3.connect(root / "graph.db")
    tables = [r[0] for r in old.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                        "AND name != 'sqlite_sequence'")]  # SQLite's counter
    before = {t: old.execute(f"SELECT * FROM {t}").fetchall() for t in tables}
    ddl = dict(old.execute("SELECT name, sql FROM sqlite_master"))
    old.close()
    mem, units = _store(root)
    distill(mem, max_age_s=0)
    db = sqlite3.connect(root / "graph.db")
    for t in tables:
        after = db.execute(f"SELECT * FROM {t}").fetchall()
        assert Counter(after) & Counter(before[t]) == Counter(before[t]), t  # every old row kept
    assert {n: s for n, s in db.execute("SELECT name, sql FROM sqlite_master")
            if n in ddl} == ddl                                              # no table rewritten
    assert len(db.execute("SELECT * FROM memory_blocks").fetchall()) > len(before["memory_blocks"])
    assert len(db.execute("SELECT * FROM memory_block_edges").fetchall()) > \
        len(before["memory_block_edges"])
    # 小雨 -住在-> 杭州 and 阿橘 -喜欢-> 晒太阳 were already HomeAgent edges 3 and 2: they are
    # reused (no duplicate) and gain provenance from our unit.
    assert db.execute("SELECT count(*) FROM memory_block_edges WHERE edge_type IN ('住在','喜欢') "
                      "AND source_id IN (?, ?)", (triple_block_id("小雨"), triple_block_id("阿橘"))
                      ).fetchone()[0] == 2
    with Graph(mem) as g:
        rec = g.recall(["小雨"], depth=2)
    names = {(r.source_name, r.relation_type, r.target_name): r for r in rec.relations}
    assert {("小雨", "养", "阿橘"), ("小雨", "住在", "杭州"), ("阿橘", "喜欢", "晒太阳"),
            ("我", "住在", "杭州")} <= set(names)
    lives = names[("小雨", "住在", "杭州")]
    assert lives.edge_id == 3 and lives.session_id == "homeagent_doc_archival"
    ha_sentence = "小雨养了一只叫阿橘的橘猫，它最喜欢在杭州家里的阳台上晒太阳。"
    assert [(p.unit_id, p.text) for p in lives.provenance] == [("", ha_sentence), (units[1], "")]
    assert [(p.block, p.text) for p in names[("小雨", "养", "阿橘")].provenance] == [
        ("blk_src_6dff35bd8fa14e4a5f65c495", ha_sentence)]      # HomeAgent's own provenance
    types = dict(db.execute("SELECT text_content, semantic_type FROM memory_blocks WHERE "
                            "source='triple'"))
    assert types["阿橘"] == "Animal" and types["杭州"] == "Place"   # existing types untouched
    assert mem.fsck() == []


def test_distill_is_idempotent(tmp_path):
    root = tmp_path / "m"
    mem, units = _store(root)
    with Graph(mem) as g:
        unit = unit_facts(mem, mem.document(units[0]), RuleDistiller())
        first = g.commit_unit(unit)
        dump = canonical(root / "graph.db")
        again = g.commit_unit(unit)
    assert first.edges_added > 0 and first.blocks_added > 0
    assert (again.edges_added, again.blocks_added, again.documents_added) == (0, 0, 0)
    assert canonical(root / "graph.db") == dump
    # The rows are there but the unit was not moved (a crash between): distill just moves it.
    report = distill(mem, max_age_s=0)
    assert units[0] in report.distilled
    dump = canonical(root / "graph.db")
    assert report.distilled and mem.units("stablemem")
    second = distill(mem, max_age_s=0)
    assert second.distilled == [] and second.edges_added == 0 and second.blocks_added == 0
    assert canonical(root / "graph.db") == dump
    _, edges, _ = dump
    assert len(edges) == len(set(edges))           # no duplicate edge anywhere


def test_dry_run_changes_nothing(tmp_path):
    root = tmp_path / "m"
    mem, units = _store(root)
    report = distill(mem, max_age_s=0, dry_run=True)
    assert report.dry_run and report.triples >= 6 and report.distilled == []
    assert {(u.unit_id, t.subject, t.relation, t.object) for u in report.units for t in u.triples} \
        >= {(units[0], "我", "住在", "杭州"), (units[3], "I", "works at", "Airbus")}
    assert not (root / "graph.db").exists()
    assert sorted(mem.units("documents")) == sorted(units)


def test_find_cold_uses_access_statistics_and_thresholds(tmp_path):
    root = tmp_path / "m"
    mem = Memory.open(root, auto_prune=False)
    a = mem.commit("alpha 冷文档")
    b = mem.commit("beta 常用文档")
    c = mem.commit("gamma 冷文档")
    for _ in range(3):
        assert mem.query("beta 常用文档", top_k=1)[0].unit_id == b
    (root / "documents" / "doc_1789175727183004211.json").write_text("{}")   # legacy: ignored
    later = Timestamp(Timestamp.now().ns + 73 * 3600 * 10**9)
    assert find_cold(mem) == []                                   # nothing is 72 h old yet
    assert find_cold(mem, now=later) == [a, c]                    # b was used 3 times
    # The write counts as the first access (as in HomeAgent): b has 1 + 3 = 4.
    assert find_cold(mem, now=later, max_access=3) == [a, c]
    assert find_cold(mem, now=later, max_access=4) == [a, c, b]    # oldest access first
    assert find_cold(mem, max_age_s=0) == [a, c]
    assert find_cold(mem, max_age_s=0, max_access=1) == [a, c]
    assert find_cold(mem, max_age_s=0, max_access=0) == []      # every unit was written once
    assert find_cold(mem, 100 * 3600, now=later) == []


def test_no_memory_sources_are_left_out_and_cleaners_apply(tmp_path):
    root = tmp_path / "m"
    mem = Memory.open(root, auto_prune=False, plugins=[
        ChannelDef(name="secret", no_memory=True),
        ToolDef(name="web", cleaner=lambda s: s.replace("上海", "南京"))])
    hidden = mem.commit_events([Event(source="secret", input="我住在北京。")])
    mixed = mem.commit_events([
        Event(source="secret", input="我的密码是hunter2。"),
        Event(source="qq", input="查一下", tools_used=["web"],
              tool_results=[ToolOutput(name="web", output="小李住在上海。")])])
    report = distill(mem, max_age_s=0)
    assert report.no_facts == [hidden] and report.distilled == [mixed]
    triples = {t.key for u in report.units for t in u.triples}
    assert triples == {("小李", "住在", "南京")}                   # cleaned text, nothing secret
    db = sqlite3.connect(root / "graph.db")
    assert db.execute("SELECT count(*) FROM memory_blocks WHERE text_content LIKE '%hunter2%' "
                      "OR text_content LIKE '%北京%'").fetchone()[0] == 0
    doc = mem.document(mixed)                                     # the originals are untouched
    assert doc.events[0].input == "我的密码是hunter2。"
    assert doc.events[1].tool_results[0].output == "小李住在上海。"
    assert mem.document(hidden).layer == "documents"


def test_unit_texts_is_the_only_text_source(tmp_path):
    """The per-unit text source is a parameter: a legacy document can be fed in the same way."""
    from fsmem.memory.stablemem import TextPiece
    mem, units = _store(tmp_path / "m")
    seen = []

    def texts(m, doc):
        seen.append(doc.id)
        ev = doc.events[0]
        return [TextPiece(event_id=ev.id, turn=0, block=ev.blocks[0].digest, role="input",
                          text="老王住在成都。", source="legacy")]
    report = distill(mem, max_age_s=0, texts=texts)
    assert sorted(seen) == sorted(units) and sorted(report.distilled) == sorted(units)
    assert {t.key for u in report.units for t in u.triples} == {("老王", "住在", "成都")}


# -- the graph API ------------------------------------------------------------------------

def test_graph_commit_recall_depth_and_search(tmp_path):
    with Graph(tmp_path / "g.db") as g:
        res = g.commit([Triple("A", "knows", "B", sentence_text="A knows B."),
                        Triple("B", "knows", "C"), Triple("C", "knows", "D"),
                        Triple("X", "likes", "Y")], session_id="sdk", turn_id=7)
        assert (res.blocks_added, res.edges_added) == (7, 5)
        assert g.commit([Triple("A", "knows", "B", sentence_text="A knows B.")]).edges_added == 0
        for depth, names in ((0, set()), (1, {"B"}), (2, {"B", "C"}), (3, {"B", "C", "D"})):
            rec = g.recall(["A"], depth)
            assert {e.name for e in rec.entities} - {"A"} == names, depth
        rec = g.recall("C", 1)
        assert {(r.source_name, r.target_name) for r in rec.relations} == {("B", "C"), ("C", "D")}
        ab = g.recall(["A"], 1).relations[0]
        assert ab.provenance[0].block == sentence_block_id("A knows B.")
        assert ab.session_id == "sdk"
        assert g.recall(["nobody"]).relations == []
        found = g.search("like")
        assert [(r.source_name, r.target_name) for r in found.relations] == [("X", "Y")]
        assert [e.name for e in g.search("Y").entities] == ["Y"]
        assert g.stats()["memory_block_edges"] == 5
    assert Graph(tmp_path / "none.db").recall(["A"]).relations == []
    assert not (tmp_path / "none.db").exists()                   # reads never create it


def test_recall_from_graph_brings_the_original_unit_back_to_l1(tmp_path):
    root = tmp_path / "m"
    mem, units = _store(root)
    distill(mem, max_age_s=0)
    dump = canonical(root / "graph.db")
    before = snapshot(root / "stablemem" / units[1])
    moved = recall_from_graph(mem, ["阿橘"], depth=1)
    assert moved == [units[1]]
    assert snapshot(root / "context" / units[1]) == before
    assert "小雨住在杭州。阿橘喜欢晒太阳。" in [ev.input for ev in mem.timeline()]
    assert recall_from_graph(mem, ["阿橘"], depth=1) == []       # already in L1
    assert canonical(root / "graph.db") == dump                   # the graph is not changed
    assert mem.fsck() == []


def test_recall_from_graph_follows_the_event_after_a_regroup(tmp_path):
    root = tmp_path / "m"
    mem, units = _store(root)
    distill(mem, max_age_s=0)
    doc = mem.document(units[3])
    events = [Event(id=ev.id, timestamp=ev.timestamp, source=ev.source, input=ev.input)
              for ev in doc.events]
    mem.remove(units[3], layer="stablemem")
    regrouped = mem.commit_events(events)                        # same event ids, new unit id
    assert recall_from_graph(mem, ["Airbus"], depth=1) == [regrouped]
    assert mem.document(regrouped).layer == "context"


# -- crashes and concurrency --------------------------------------------------------------

CHILD = """
import sys
from fsmem import Memory
from fsmem.memory.stablemem import distill
mem = Memory.open(sys.argv[1], auto_prune=False)
print(distill(mem, max_age_s=0).distilled, flush=True)
"""

CHILD_SQL = """
import os, sys
import fsmem.memory.stablemem as sm
from fsmem import Memory
limit, count = int(sys.argv[2]), [0]
def tick():
    count[0] += 1
    if count[0] >= limit:
        os._exit(77)
    return 0
original = sm.Graph.commit_unit
def commit_unit(self, unit):
    self.connection.set_progress_handler(tick, 10)
    return original(self, unit)
sm.Graph.commit_unit = commit_unit
mem = Memory.open(sys.argv[1], auto_prune=False)
print(sm.distill(mem, max_age_s=0).distilled, flush=True)
"""


@pytest.fixture
def template(tmp_path):
    """A store with an existing HomeAgent graph.db, and the graph a clean run gives."""
    tpl = tmp_path / "template"
    tpl.mkdir()
    shutil.copy(HA_GRAPH, tpl / "graph.db")
    _store(tpl)
    ref = tmp_path / "reference"
    shutil.copytree(tpl, ref, symlinks=True)
    distill(Memory.open(ref, auto_prune=False), max_age_s=0)
    return tpl, canonical(ref / "graph.db"), layers_of(ref)


def _check_after_crash(root: Path, expected, layout, label: str) -> None:
    mem = Memory.open(root, auto_prune=False)                    # reopening runs recovery
    assert_feed_agrees(root, label)
    with Graph(mem) as g:                                        # never moved before its rows
        for unit in mem.units("stablemem"):
            assert g.has_document(unit), f"{label}: {unit} in stablemem without graph rows"
    distill(mem, max_age_s=0)                                    # re-run completes the work
    assert canonical(root / "graph.db") == expected, label
    got = layers_of(root)
    assert got == layout, label
    every = [u for units in got.values() for u in units]
    assert len(every) == len(set(every)), label                 # each unit in exactly one layer
    assert mem.fsck() == [], label


def test_crash_point_sweep_distill(tmp_path, template):
    tpl, expected, layout = template
    n, _ = crash_sweep(tmp_path, tpl, CHILD,
                       lambda root, label: _check_after_crash(root, expected, layout, label),
                       limit=200)
    # three units moved, two or three calls each (the rename, then the two parents' flush:
    # one wave under the batch strategy, two fsyncs under the others)
    assert n >= 6


def test_crash_inside_the_graph_transaction(tmp_path, template):
    """A kill in the middle of SQLite's work (progress handler) rolls the unit back whole."""
    tpl, expected, layout = template
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    limit, crashes = 1, 0
    while True:
        root = tmp_path / f"s{limit}"
        shutil.copytree(tpl, root, symlinks=True)
        proc = subprocess.run(cwd=str(REPO), args=[sys.executable, "-c", CHILD_SQL, str(root),
                                                   str(limit)],
                              capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode in (0, 77), proc.stderr
        _check_after_crash(root, expected, layout, f"progress limit {limit}")
        shutil.rmtree(root)
        if proc.returncode == 0:
            break
        crashes += 1
        limit = int(limit * 1.6) + 1
    assert crashes >= 8


def test_two_processes_distilling_at_once(tmp_path, template):
    tpl, expected, layout = template
    root = tmp_path / "both"
    shutil.copytree(tpl, root, symlinks=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen(cwd=str(REPO), args=[sys.executable, "-c", CHILD, str(root)],
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert canonical(root / "graph.db") == expected
    assert layers_of(root) == layout
    assert Memory.open(root).fsck() == []


# -- command line -------------------------------------------------------------------------

def _cli(argv: list[str], capsys) -> tuple[int, str]:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", default="./memory")
    common.add_argument("--json", action="store_true")
    common.add_argument("-v", "--verbose", action="store_true")
    parser = argparse.ArgumentParser(prog="fsmem")
    sub = parser.add_subparsers(dest="verb", required=True)
    add_cli(sub, [common])
    args = parser.parse_args(argv)
    rc = args.fn(args)
    return rc, capsys.readouterr().out


def test_cli_distill_and_graph_verbs(tmp_path, capsys):
    root = tmp_path / "m"
    _, units = _store(root)
    rc, out = _cli(["distill", "--root", str(root), "--dry-run", "--max-age", "0", "--json"], capsys)
    assert rc == 0 and json.loads(out)["dry_run"] is True and json.loads(out)["triples"] >= 6
    rc, out = _cli(["distill", "--root", str(root), "--max-age", "100"], capsys)
    assert rc == 0 and "distilled 0 of 0" in out
    rc, out = _cli(["distill", "--root", str(root), "--max-age", "0", "--max-access", "2",
                    "--json"], capsys)
    data = json.loads(out)
    assert rc == 0 and len(data["distilled"]) == 3 and data["no_facts"] == [units[2]]
    rc, out = _cli(["graph", "neighbors", "杭州", "--root", str(root), "--depth", "1"], capsys)
    assert rc == 0 and "我 -[住在]-> 杭州" in out and units[0] in out
    rc, out = _cli(["graph", "neighbors", "杭州", "--root", str(root), "--json"], capsys)
    data = json.loads(out)
    assert {r["target_name"] for r in data["relations"]} >= {"杭州", "猫", "狗"}
    assert data["relations"][0]["provenance"][0]["event_id"].startswith("e-")
    rc, out = _cli(["graph", "search", "Air", "--root", str(root), "--json"], capsys)
    assert rc == 0 and [e["name"] for e in json.loads(out)["entities"]] == ["Airbus"]
    rc, out = _cli(["graph", "search", "nothing-like-this", "--root", str(root)], capsys)
    assert rc == 0 and out.strip() == "no match"
