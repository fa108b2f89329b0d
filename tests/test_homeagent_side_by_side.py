"""HomeAgent and fsmem on one directory (issue 32, items 2, 3 and 5): fsck leaves HomeAgent's
files alone, one summary line instead of a warning per document, a migration report and
``fsmem verify-legacy``. Directories come from tests/homeagent_gen.py (Go's JSON by hand)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import homeagent_gen as gen
from conftest import run_cli

EMPTY = "doc_1791000000000000000.json"      # gen.build writes it 0 bytes long
HALF = "doc_1791000000000000007.json"       # a half-written document (added here)


def _tree(root: Path) -> dict[str, str]:
    """sha256 of every file outside .fsmem/ (HomeAgent's files and fsmem's units)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".fsmem" not in p.parts}


@pytest.fixture
def healthy(tmp_path) -> Path:
    """A HomeAgent directory with nothing damaged: documents, settings.json (root and
    documents/), text/*.jsonl logs, media/, media.db, graph.db, context.json."""
    root = gen.build(tmp_path / "memory")
    (root / "documents" / EMPTY).unlink()
    (root / "settings.json").write_bytes(b'{"model": "qwen"}')
    return root


@pytest.fixture
def damaged(tmp_path) -> Path:
    """gen.build's directory (a 0-byte document, documents/settings.json, text/*.jsonl) plus
    a half-written document and a settings.json at the root."""
    root = gen.build(tmp_path / "memory")
    whole = (root / "documents" / f"{gen.DOC['v1']}.json").read_bytes()
    (root / "documents" / HALF).write_bytes(whole[: len(whole) // 2])
    (root / "settings.json").write_bytes(b'{"model": "qwen"}')
    return root


# -- item 2: fsck leaves HomeAgent's files alone ------------------------------------------------

def test_fsck_fix_moves_nothing_of_homeagents(damaged):
    assert run_cli("init", root=damaged).returncode == 0      # --fix is a writer
    before = _tree(damaged)
    r = run_cli("fsck", "--fix", "--json", root=damaged)
    assert _tree(damaged) == before, "fsck --fix moved, renamed or changed a HomeAgent file"
    assert not (damaged / ".fsmem" / "quarantine").exists() or \
        os.listdir(damaged / ".fsmem" / "quarantine") == []
    findings = json.loads(r.stdout)
    bad = {os.path.basename(f["path"]): f for f in findings if f["kind"] == "legacy-unreadable"}
    assert set(bad) == {EMPTY, HALF}, findings          # settings.json is not a finding
    assert all(not f.get("fixed") and f.get("left") for f in bad.values())
    assert "0 bytes" in bad[EMPTY]["detail"]
    assert "HomeAgent's loader is not documented for this case" in bad[HALF]["detail"]
    assert r.returncode == 1, "a finding --fix leaves is still a finding"
    r = run_cli("fsck", root=damaged)
    assert r.returncode == 1 and EMPTY in r.stdout and HALF in r.stdout


def test_fsck_exits_0_on_a_healthy_homeagent_directory(healthy):
    assert (healthy / "text" / "2026-10-07.jsonl").exists()
    before = _tree(healthy)
    r = run_cli("fsck", root=healthy)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "clean"
    assert run_cli("init", root=healthy).returncode == 0
    r = run_cli("fsck", "--fix", root=healthy)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _tree(healthy) == before


# -- item 3: one summary line ----------------------------------------------------------------

@pytest.mark.parametrize("verb", [["ls"], ["query", "咖啡机"], ["show", gen.DOC["v1"]],
                                  ["stats"]])
def test_a_read_verb_prints_one_summary_line(damaged, verb):
    for _ in range(2):   # every time, on a directory fsmem never opened as a writer
        r = run_cli(*verb, root=damaged)
        assert r.returncode == 0, r.stderr
        lines = r.stderr.splitlines()
        assert len(lines) == 1, lines
        assert "HomeAgent" in lines[0] and "fsmem stats --legacy" in lines[0]
    assert not (damaged / ".fsmem").exists()


def test_summary_counts_and_verbose_lists_each_document(damaged):
    r = run_cli("query", "咖啡机", root=damaged)
    assert "8 JSON files in documents/" in r.stderr and "5 read" in r.stderr \
        and "2 unreadable" in r.stderr, r.stderr
    r = run_cli("-v", "query", "咖啡机", root=damaged)
    for did in gen.DOC.values():
        assert did in r.stderr
    assert HALF in r.stderr


def test_after_a_writer_still_one_line(damaged):
    assert run_cli("init", root=damaged).returncode == 0
    for _ in range(2):
        r = run_cli("query", "咖啡机", root=damaged)
        assert len(r.stderr.splitlines()) == 1, r.stderr


# -- item 5: the migration report ------------------------------------------------------------

def test_stats_legacy_reports_each_document(tmp_path):
    root = gen.build(tmp_path / "memory")
    blob = root / "media" / "blobs" / gen.AMR.sha256[:2] / gen.AMR.sha256[2:]
    blob.unlink()                                           # v2's voice note is gone
    v3 = root / "documents" / f"{gen.DOC['v3']}.json"
    data = json.loads(v3.read_bytes())
    data["blocks"].append(gen.block("blk_vec_only", "image", vector=[0.5, 0.5],
                                    fingerprint="chineseclip:d2"))
    v3.write_bytes(gen.go_json(data, indent=True))
    r = run_cli("stats", "--legacy", "--json", root=root)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    docs = {d["file"]: d for d in rep["documents"]}
    assert set(docs) == {f"documents/{n}" for n in os.listdir(root / "documents")}
    v1 = docs[f"documents/{gen.DOC['v1']}.json"]
    assert v1["version"] == "v1" and v1["events"] == 1 and v1["blocks"] == 0
    assert v1["text_bytes"] == len("咖啡机除垢".encode()) + len("[08:04] qq: 咖啡机每月除垢一次".encode())
    v2 = docs[f"documents/{gen.DOC['v2']}.json"]
    assert v2["version"] == "v2" and v2["media"] == 2
    assert any(gen.AMR.sha256 in c and "missing" in c for c in v2["cannot_read"])
    assert any(gen.AMR.sha256 in k and "kept as a record, media missing" in k
               for k in v2["recall_keeps"])
    d3 = docs[f"documents/{gen.DOC['v3']}.json"]
    assert d3["version"] == "v3" and d3["blocks"] == 5 and d3["media"] == 2
    assert any("blk_vec_only" in c and "vector-only" in c for c in d3["cannot_read"])
    assert any("blk_vec_only" in k and "with its vector" in k for k in d3["recall_keeps"])
    empty = docs[f"documents/{EMPTY}"]
    assert empty["status"] == "unreadable" and "0 bytes" in empty["error"]
    assert docs["documents/settings.json"]["status"] == "not-a-document"
    text = run_cli("stats", "--legacy", root=root).stdout
    assert gen.DOC["v3"] in text and "blk_vec_only" in text and "kept as a record, media missing" in text


def test_adopt_dry_run_reports_each_document(damaged):
    before = _tree(damaged)
    r = run_cli("adopt", "--dry-run", root=damaged)
    assert r.returncode == 0, r.stderr
    assert HALF in r.stdout and "unreadable" in r.stdout
    for did in gen.DOC.values():
        assert did in r.stdout
    r = run_cli("adopt", "--dry-run", "--json", root=damaged)
    rep = json.loads(r.stdout)
    assert {d["file"] for d in rep["documents"]} >= {f"documents/{HALF}", f"documents/{EMPTY}"}
    assert rep["plan"]["events"] == 5
    assert _tree(damaged) == before and not (damaged / ".fsmem").exists()


def test_verify_legacy_after_adopt(damaged):
    assert run_cli("adopt", root=damaged).returncode == 0
    assert (damaged / ".fsmem" / "legacy-report.json").exists()
    state = _tree(damaged)
    r = run_cli("verify-legacy", root=damaged)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "context.json: moved by fsmem to context.json.adopted" in r.stdout
    assert _tree(damaged) == state                          # a reader writes nothing
    # a recall moves a document aside by design: reported as moved, not vanished
    assert run_cli("recall", "咖啡机", "--top-k", "1", root=damaged).returncode == 0
    r = run_cli("verify-legacy", root=damaged)
    assert r.returncode == 0, r.stdout
    assert f"documents/{gen.DOC['v1']}.json: moved by fsmem to .fsmem/legacy-recalled/" in r.stdout
    # HomeAgent (or anyone) changes, removes and adds files: each is named
    (damaged / "documents" / f"{gen.DOC['v2']}.json").write_bytes(b'{"id": "x"}')
    (damaged / "media" / "blobs" / gen.PNG.sha256[:2] / gen.PNG.sha256[2:]).unlink()
    (damaged / "documents" / "doc_1799999999999999999.json").write_bytes(b"{}")
    r = run_cli("verify-legacy", root=damaged)
    assert r.returncode == 1
    assert f"documents/{gen.DOC['v2']}.json: changed" in r.stdout
    assert f"{gen.PNG.sha256[2:]}: vanished" in r.stdout
    assert "documents/doc_1799999999999999999.json: appeared" in r.stdout
    r = run_cli("verify-legacy", "--json", root=damaged)
    got = json.loads(r.stdout)
    assert r.returncode == 1 and {c["file"] for c in got["changed"]} == \
        {f"documents/{gen.DOC['v2']}.json"}


def test_stats_legacy_save_then_verify(healthy):
    assert run_cli("init", root=healthy).returncode == 0      # --save is a writer
    r = run_cli("stats", "--legacy", "--save", root=healthy)
    assert r.returncode == 0, r.stderr
    saved = json.loads((healthy / ".fsmem" / "legacy-report.json").read_bytes())
    files = set(saved["files"])
    assert {"context.json", "graph.db", "media/media.db", "settings.json",
            f"documents/{gen.DOC['v3']}.json",
            f"media/blobs/{gen.PNG.sha256[:2]}/{gen.PNG.sha256[2:]}"} <= files
    assert run_cli("verify-legacy", root=healthy).returncode == 0
    (healthy / "context.json").write_bytes(b"[]")
    r = run_cli("verify-legacy", root=healthy)
    assert r.returncode == 1 and "context.json: changed" in r.stdout


def test_verify_legacy_without_a_report_names_the_file(healthy):
    r = run_cli("verify-legacy", root=healthy)
    assert r.returncode == 1 and "legacy-report.json" in r.stderr
    assert not (healthy / ".fsmem").exists()
