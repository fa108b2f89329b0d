"""HomeAgent and fsmem on one directory at once (issue 32, items 1 and 4): a document HomeAgent
rewrites after fsmem made a unit of it is found with its new text, named by fsck and show, and
nothing of it is lost; a store can keep HomeAgent's files in place; recall keeps every block
(vector-only blocks, blocks whose media file is gone) and takes any document by id."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

import homeagent_gen as gen
from conftest import run_cli
from fsmem import Memory
from fsmem.format.errors import FsmemError

T = "2026-10-05T09:00:00.123456789+08:00"
T2 = "2026-10-06T10:00:00+08:00"
DOC_ID = "doc_1790000000000000077"


def _write(root: Path, doc_id: str, doc: dict) -> Path:
    (root / "documents").mkdir(parents=True, exist_ok=True)
    path = root / "documents" / f"{doc_id}.json"
    path.write_bytes(gen.go_json(doc, indent=True))
    return path


def _note(content: str, updated: str = T) -> dict:
    return gen.doc(DOC_ID, summary="车库门", content=content, created_at=T, updated_at=updated,
                   source="manual", access_count=1, last_access=T)


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and ".fsmem" not in p.parts}


def test_a_document_homeagent_rewrites_after_a_recall_is_found_reported_and_kept(tmp_path):
    root = tmp_path / "memory"
    _write(root, DOC_ID, _note("车库门遥控器的电池 garage remote battery CR2032"))
    mem = Memory.open(root)
    assert mem.recall("garage remote battery", top_k=1) == [DOC_ID]
    assert not (root / "documents" / f"{DOC_ID}.json").exists()     # moved aside (default)
    # HomeAgent, still running, writes its document again with new text
    _write(root, DOC_ID, _note("车库门遥控器换成了 CR2450 电池 garage remote battery CR2450",
                               updated=T2))
    new = [h.unit_id for h in mem.query("CR2450", 3, count=False)]
    assert len(new) == 1 and new[0].startswith(DOC_ID + "-h")
    assert "CR2450" in mem.document(new[0]).events[0].response       # read in place
    found = [f for f in mem.fsck() if f.kind == "legacy-rewritten"]
    assert len(found) == 1 and found[0].unit == DOC_ID and new[0] in found[0].detail
    # show: the id names what it prints; fsmem's unit names HomeAgent's newer copy
    out = run_cli("show", DOC_ID, root=root).stdout
    assert "CR2032" in out and f"fsmem show {new[0]}" in out
    assert "CR2450" in run_cli("show", new[0], root=root).stdout
    # a fresh reader agrees (the saved index), and nothing of either version is lost
    mem.close()
    reader = Memory.open(root, readonly=True)
    assert [h.unit_id for h in reader.query("CR2450", 3, count=False)] == new
    assert "CR2032" in reader.document(DOC_ID).events[0].response
    # recalling the new version makes it a unit: an update of the first, which stays
    mem = Memory.open(root)
    assert mem.recall("CR2450 battery", top_k=1) == new
    unit = mem.document(new[0])
    assert unit.layer == "context" and unit.meta["supersedes"] == DOC_ID
    assert "CR2032" in mem.document(DOC_ID).events[0].response
    assert not (root / "documents" / f"{DOC_ID}.json").exists()
    assert [f for f in mem.fsck() if f.kind == "legacy-rewritten"] == []
    assert len(list((root / ".fsmem" / "legacy-recalled").iterdir())) == 2   # both JSONs


def test_a_store_that_keeps_homeagent_files_never_moves_them(tmp_path):
    root = tmp_path / "memory"
    gen.build(root)
    (root / ".fsmem").mkdir(exist_ok=True)
    Memory.open(root).close()
    (root / ".fsmem" / "config.toml").write_text('homeagent_files = "keep"\n')
    before = _files(root)
    mem = Memory.open(root, adopt=True)
    assert mem.recall("签证", top_k=1) == [gen.DOC["v3"]]
    with pytest.raises(FsmemError, match="keeps HomeAgent's files"):
        mem.remove(gen.DOC["v1"])
    mem.distill(max_age_s=0, max_access=1000)
    mem.close()
    after = _files(root)
    assert {k: v for k, v in after.items() if k in before} == before   # nothing moved or changed
    assert (root / "context.json").exists()
    # the converted documents are not found twice: the file their unit holds is skipped
    mem = Memory.open(root)
    hits = [h.unit_id for h in mem.query("签证", 5, count=False)]
    assert gen.DOC["v3"] not in hits                       # it is in L1 now, once
    assert [e.unit_id for e in mem.timeline()].count(gen.DOC["v3"]) == 1
    assert [f for f in mem.fsck() if f.kind == "legacy-rewritten"] == []
    # HomeAgent rewrites a converted document: a new version, its file still untouched
    path = root / "documents" / f"{gen.DOC['v3']}.json"
    data = json.loads(path.read_text())
    data["content"] = data["content"] + " 新的签证预约 zebracrossing"
    path.write_bytes(gen.go_json(data, indent=True))   # in place, as Go's os.WriteFile
    time.sleep(0.6)   # an in-place rewrite is looked for at most every 0.5 s (a stat a file)
    hits = [h.unit_id for h in mem.query("zebracrossing", 3, count=False)]
    assert len(hits) == 1 and hits[0].startswith(gen.DOC["v3"] + "-h")
    assert mem.recall("zebracrossing", top_k=1) == hits
    assert path.exists() and json.loads(path.read_text())["content"].endswith("zebracrossing")
    assert [h.unit_id for h in mem.query("zebracrossing", 3, count=False)] == []  # in L1, once


def test_recall_keeps_vector_only_blocks_and_blocks_whose_media_is_gone(tmp_path):
    root = tmp_path / "memory"
    gone = hashlib.sha256(b"a photo HomeAgent lost").hexdigest()
    doc = gen.doc(DOC_ID, summary="相册", content="相册 photoalbum", created_at=T,
                  blocks=[gen.block("blk_vec", "image", vector=[0.5, 0.25], fingerprint="clip:d2",
                                    scene="chan:qq", created_at=T, updated_at=T2),
                          gen.block("blk_gone", "image", digest=gone, mime="image/jpeg",
                                    size=1234, width=64, height=48, created_at=T)])
    _write(root, DOC_ID, doc)
    mem = Memory.open(root)
    assert mem.recall("photoalbum", top_k=1) == [DOC_ID]
    ev = mem.document(DOC_ID).events[0]
    by_id = {b.legacy_id: b for b in ev.blocks}
    vec = by_id["blk_vec"]
    assert (vec.vector, vec.fingerprint, vec.scene, vec.size) == ([0.5, 0.25], "clip:d2",
                                                                 "chan:qq", 0)
    lost = by_id["blk_gone"]
    assert lost.absent and (lost.sha256, lost.mime, lost.size) == (gone, "image/jpeg", 1234)
    assert (lost.width, lost.height) == (64, 48)
    kinds = [(f.kind, f.unit) for f in mem.fsck()]
    assert ("media-missing", DOC_ID) in kinds
    assert [k for k in kinds if k[0] == "damaged-unit"] == []
    with pytest.raises(Exception, match="missing"):
        mem.read_block(gone)
    # a prune carries the record along (no file to link)
    mem.prune()
    for i in range(40):
        mem.append({"role": "user", "content": f"filler {i}"})
    homes = [(layer, uid) for layer in mem.layout.layers() for uid in mem.units(layer)
             if any(b.legacy_id == "blk_gone" for e in mem.document(uid).events
                    for b in e.blocks)]
    assert len(homes) == 1 and mem.fsck(read_data=True) and not [
        f for f in mem.fsck() if f.kind == "damaged-unit"]


def test_recall_by_id_brings_any_document_even_an_empty_one(tmp_path):
    root = tmp_path / "memory"
    _write(root, "doc_empty", gen.doc("doc_empty", created_at=T))
    _write(root, DOC_ID, _note("车库门 garage"))
    mem = Memory.open(root)
    assert mem.query("doc_empty", 3, count=False) == []          # nothing to search for
    assert mem.recall_id("doc_empty") == "doc_empty"
    doc = mem.document("doc_empty")
    assert doc.layer == "context" and len(doc.events) == 1 and doc.events[0].blocks == []
    uid = mem.commit("a plain unit to recall by id")
    r = run_cli("recall", "--id", uid, "--id", DOC_ID, root=root)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [uid, DOC_ID]
    assert {e.unit_id for e in Memory.open(root).timeline()} == {"doc_empty", uid, DOC_ID}
    r = run_cli("recall", "--id", "doc_nothing", root=root)
    assert r.returncode == 1 and "doc_nothing" in r.stderr
    assert run_cli("recall", root=root).returncode == 2


def test_fsck_fix_leaves_a_rewritten_document_and_a_unit_with_missing_media(tmp_path):
    root = tmp_path / "memory"
    _write(root, DOC_ID, _note("车库门遥控器的电池 garage remote battery CR2032"))
    gone = hashlib.sha256(b"a photo HomeAgent lost").hexdigest()
    _write(root, "doc_photo", gen.doc("doc_photo", summary="相册", content="photoalbum",
                                      created_at=T, blocks=[gen.block(
                                          "blk_gone", "image", digest=gone, mime="image/jpeg",
                                          size=12, created_at=T)]))
    mem = Memory.open(root)
    assert mem.recall("garage remote battery", top_k=1) == [DOC_ID]
    assert mem.recall("photoalbum", top_k=1) == ["doc_photo"]
    _write(root, DOC_ID, _note("garage remote battery CR2450", updated=T2))
    before = _files(root)
    fixed = mem.fsck(fix=True)
    kinds = {f.kind: f for f in fixed}
    assert "legacy-rewritten" in kinds and "media-missing" in kinds
    assert kinds["legacy-rewritten"].left and kinds["media-missing"].left
    assert not kinds["media-missing"].fixed and not kinds["legacy-rewritten"].fixed
    assert _files(root) == before                       # nothing moved or changed
    assert (root / "context" / "doc_photo").is_dir()
    assert not list((root / ".fsmem" / "quarantine").iterdir())
