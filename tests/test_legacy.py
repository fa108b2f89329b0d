"""Drop-in for a HomeAgent memory directory (fixtures/homeagent-memory): legacy documents v1-v3,
context.json, the media store and graph.db, read in place through one logged fallback path."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from fsmem import MediaAttachment, Memory, Timestamp

FIXTURE = Path(REPO) / "fixtures" / "homeagent-memory"
KEYWORDS = {"咖啡机": "doc_1789175727183004211", "猫粮": "doc_1789389068040000000",
            "光伏板": "doc_1790315272901276334", "体检报告": "doc_1790478160300118000",
            "钢琴课": "doc_1791109205123456789", "签证": "doc_1791205784650000001",
            "装修": "doc_1791388739999999999", "车险": "doc_1791259200000000000"}
PNG = "47744a6f6728c0cdd290b1beba41b10d59cc54018f9963601ab2c6e60bb3a40d"
WAV = "e2d0566070034516f46b7b074eb96d56c7edf27c6df0decc0c316943323b1e55"


@pytest.fixture
def home(tmp_path) -> Path:
    dst = tmp_path / "memory"
    shutil.copytree(FIXTURE, dst)
    return dst


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and ".fsmem" not in p.parts
            and p.parts[len(root.parts)] in ("documents", "media") or p.name == "graph.db"}


def _legacy(root: Path, doc_id: str) -> dict:
    return json.loads((root / "documents" / f"{doc_id}.json").read_text("utf-8"))


def test_open_in_place_changes_no_legacy_file(home):
    before = _digests(home)
    context = (home / "context.json").read_bytes()
    mem = Memory.open(home)
    assert _digests(home) == before and (home / "context.json").read_bytes() == context
    mem = Memory.open(home, adopt=True)          # adoption is explicit (issue 14, item 8)
    assert _digests(home) == before
    assert not (home / "context.json").exists()
    assert (home / "context.json.adopted").read_bytes() == context
    stats = mem.stats()                           # the malformed one is counted apart (item 9)
    assert (stats["legacy_documents"], stats["legacy_unreadable"]) == (10, 1)


@pytest.mark.parametrize("keyword,doc_id", sorted(KEYWORDS.items()))
def test_each_version_is_found_by_a_chinese_keyword(home, keyword, doc_id):
    mem = Memory.open(home)
    hits = mem.query(keyword, top_k=3)
    assert hits and hits[0].unit_id == doc_id and hits[0].score > 0


def test_every_legacy_read_is_logged_once_per_document(home, caplog):
    import fsmem.homeagent.documents as legacy
    legacy._logged.clear()
    with caplog.at_level(logging.INFO, logger="fsmem.legacy"):   # named at INFO (fsmem -v)
        mem = Memory.open(home, adopt=True)
        mem.query("咖啡机")
        mem.reindex()
        mem.query("签证")
    lines = [r.getMessage() for r in caplog.records if r.name == "fsmem.legacy"
             and "read through the fallback path" in r.getMessage()]
    assert any("doc_1789175727183004211 (v1)" in m for m in lines)
    assert any("doc_1790315272901276334 (v2)" in m for m in lines)
    assert any("doc_1791205784650000001 (v3)" in m for m in lines)
    assert len(lines) == len(set(lines))                     # once per document per process
    assert any("adopted" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("keyword,doc_id,media", [
    ("咖啡机", "doc_1789175727183004211", []), ("光伏板", "doc_1790315272901276334", [PNG]),
    ("钢琴课", "doc_1791109205123456789", [WAV]), ("签证", "doc_1791205784650000001", [PNG]),
    ("装修", "doc_1791388739999999999", [])])
def test_recall_keeps_every_byte_of_text_and_media(home, keyword, doc_id, media):
    original = _legacy(home, doc_id)
    mem = Memory.open(home)
    assert mem.recall(keyword, top_k=1) == [doc_id]
    assert not (home / "documents" / f"{doc_id}.json").exists()   # removed once durable
    doc = mem.document(doc_id)
    assert doc.layer == "context" and len(doc.events) == 1      # never split into invented events
    ev = doc.events[0]
    assert ev.source == "cold_storage"
    assert ev.timestamp == Timestamp.parse(original["created_at"])
    assert ev.timestamp.isoformat() == original["created_at"]     # to the nanosecond
    assert ev.response == original["content"]                     # whole: no 2,000 cut
    got_media = [b for b in ev.blocks if b.modality != "text"]
    assert sorted(b.sha256 for b in got_media) == sorted(media)
    for b in got_media:
        blob = (home / "media" / "blobs" / b.sha256[:2] / b.sha256[2:]).read_bytes()
        assert mem.read_block(b.digest) == blob
        assert mem.read_block(b.sha256[:10]) == blob              # the old digest still resolves
    if doc_id == "doc_1791388739999999999":
        assert ev.response.endswith("SENTINEL-END-7f3a") and len(ev.response) > 2000
    assert doc_id in [e.unit_id for e in mem.timeline()]
    assert all(h.unit_id != doc_id for h in mem.query(keyword))
    assert [f for f in mem.fsck() if not f.kind.startswith("legacy")] == []


def test_malformed_document_and_missing_blob_do_not_stop_the_rest(home, caplog):
    mem = Memory.open(home)
    findings = {(os.path.basename(f.path), f.kind) for f in mem.fsck()}
    assert ("doc_1791426600161803398.json", "legacy-unreadable") in findings   # malformed
    assert ("doc_1791423012345678912.json", "legacy") in findings        # missing blob
    details = " ".join(f.detail for f in mem.fsck())
    assert "011520b1" in details
    with caplog.at_level(logging.WARNING, logger="fsmem.legacy"):
        assert mem.recall("婚礼请柬", top_k=1) == ["doc_1791423012345678912"]
    ev = mem.document("doc_1791423012345678912").events[0]
    # issue 32: the block is not dropped: its record is kept (digest, MIME, size), no file
    media = [b for b in ev.blocks if b.modality != "text"]
    assert "婚礼请柬" in ev.response and len(media) == 1 and media[0].absent
    assert media[0].sha256.startswith("011520b1") and media[0].mime.startswith("image/")
    assert media[0].legacy_id == "blk_1791421968008675309_11"
    assert any("011520b1" in r.getMessage() and "missing" in r.getMessage()
               for r in caplog.records)
    missing = [f for f in mem.fsck() if f.kind == "media-missing"]
    assert [f.unit for f in missing] == ["doc_1791423012345678912"] and "011520b1" in \
        missing[0].detail
    assert mem.query("咖啡机")[0].unit_id == "doc_1789175727183004211"


def test_context_json_is_adopted_whole(home):
    raw = json.loads((home / "context.json").read_text("utf-8"))
    mem = Memory.open(home, adopt=True)
    tl = mem.timeline()
    assert len(tl) == len(raw)
    by_ts = {e.timestamp.isoformat(): e for e in tl}
    for e in raw:
        ev = by_ts[e["timestamp"]]
        assert ev.source == e["source"] and ev.input == e.get("input", "")
        assert ev.response == e.get("response", "")
        assert ev.tools_used == (e.get("tools_used") or [])
        assert [(t.name, t.output) for t in ev.tool_results] == \
            [(t["name"], t["output"]) for t in e.get("tool_results") or []]
        if e.get("blocks"):
            img = [b for b in ev.blocks if b.modality == "image"]
            assert img and img[0].sha256 == e["blocks"][0]["payload_digest"]
    Memory.open(home, adopt=True)                # reopening adopts nothing twice
    assert len(Memory.open(home).timeline()) == len(raw)


def test_media_store_digests_resolve_in_new_commits(home):
    mem = Memory.open(home)
    uid = mem.commit("屋顶照片", media_digests=[PNG[:12]])
    (img,) = [b for b in mem.document(uid).blocks if b.modality == "image"]
    assert img.sha256 == PNG and img.width == 64
    uid2 = mem.commit("录音", attachments=[MediaAttachment(digest=WAV)])
    (wav,) = [b for b in mem.document(uid2).blocks if b.modality == "audio"]
    assert mem.read_block(wav.digest) == (home / "media/blobs/e2" / WAV[2:]).read_bytes()


def test_graph_db_is_only_read(home):
    before = (home / "graph.db").read_bytes()
    mem = Memory.open(home)
    mem.query("小雨")
    mem.recall("签证")
    assert (home / "graph.db").read_bytes() == before


def test_a_copy_made_with_cp_a_opens_and_recalls_identically(home, tmp_path):
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(home), str(copy)], check=True)
    a, b = Memory.open(home), Memory.open(copy)
    for kw in KEYWORDS:
        assert [h.unit_id for h in a.query(kw)] == [h.unit_id for h in b.query(kw)]
    assert a.recall("光伏板", top_k=1) == b.recall("光伏板", top_k=1)
    da, db = a.document("doc_1790315272901276334"), b.document("doc_1790315272901276334")
    assert [(e.timestamp, e.response, [x.digest for x in e.blocks]) for e in da.events] == \
        [(e.timestamp, e.response, [x.digest for x in e.blocks]) for e in db.events]


def test_cold_legacy_documents_are_distilled_from_their_whole_content(home):
    mem = Memory.open(home)
    report = mem.distill(max_age_s=0, max_access=100)
    assert report.distilled, report
    doc = "doc_1791388739999999999"                          # the long one, sentinel at the end
    assert not (home / "documents" / f"{doc}.json").exists()
    unit = mem.document(doc)
    assert unit.layer == "stablemem"
    assert unit.events[0].response == _legacy_content(doc)
    assert mem.graph.has_document(doc)
    # the fixture's missing blob: kept as a record, reported (issue 32)
    assert [(f.kind, f.unit) for f in mem.fsck() if not f.kind.startswith("legacy")] == [
        ("media-missing", "doc_1791423012345678912")]


def _legacy_content(doc_id: str) -> str:
    return json.loads((FIXTURE / "documents" / f"{doc_id}.json").read_text("utf-8"))["content"]


def test_ls_lists_the_legacy_documents_left(home):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "fsmem.cli", "ls", "--root", str(home), "--json",
                        "--layer", "documents"], capture_output=True, text=True, cwd=str(REPO),
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    rows = json.loads(r.stdout)
    legacy = {row["unit_id"] for row in rows if row["layer"] == "legacy"}
    assert set(KEYWORDS.values()) <= legacy and len(legacy) == 10   # the malformed one is left out
