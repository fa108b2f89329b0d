"""Round trip through a new process: text (CJK, emoji, 5 MB, empty) and media byte-identical."""

from __future__ import annotations

import json
import os
import sqlite3
import stat

import blake3

from conftest import make_png, make_wav, run_py
from fsmem import FORMAT_VERSION, MediaAttachment, Memory, Timestamp


def test_round_trip_in_new_process(root):
    texts = {"cjk": "记忆是块的持有关系 🧠🌏 — naïve café ✓", "big": "长" * (5 * 1024 * 1024 // 3) + "END",
             "empty": ""}
    png, wav = make_png(), make_wav()
    mem = Memory.open(root)
    ids = {k: mem.commit(v) for k, v in texts.items()}
    ids["media"] = mem.commit("photo and sound", attachments=[
        MediaAttachment(data=png, mime="image/png", name="cat.png"),
        MediaAttachment(data=wav, mime="audio/wav", name="meow.wav")])
    out = run_py(f"""
        import json, sys
        from fsmem import Memory
        mem = Memory.open({str(root)!r})
        ids = {json.dumps(ids)}
        res = {{k: mem.document(u).events[0].input for k, u in ids.items()}}
        doc = mem.document(ids["media"])
        media = [(b.mime, b.width, b.height, mem.read_block(b.digest).hex()) for b in doc.blocks
                 if b.modality != "text"]
        print(json.dumps({{"texts": res, "media": media}}))
    """, check=True)
    got = json.loads(out.stdout)
    for k, v in texts.items():
        assert got["texts"][k] == v, k
    media = {m[0]: m for m in got["media"]}
    assert bytes.fromhex(media["image/png"][3]) == png
    assert media["image/png"][1:3] == [64, 48]
    assert bytes.fromhex(media["audio/wav"][3]) == wav
    assert mem.fsck() == []


def test_unit_directory_is_browsable(mem):
    png = make_png()
    uid = mem.commit("你好，世界", attachments=[MediaAttachment(data=png, mime="image/png")])
    unit = os.path.join(mem.root, "documents", uid)
    names = sorted(os.listdir(unit))
    digest_png = blake3.blake3(png).hexdigest()
    digest_txt = blake3.blake3("你好，世界".encode()).hexdigest()
    assert f"{digest_png}.png" in names and f"{digest_txt}.txt" in names
    assert "manifest.json" in names
    with open(os.path.join(unit, f"{digest_txt}.txt"), encoding="utf-8") as fh:
        assert fh.read() == "你好，世界"
    manifest = json.load(open(os.path.join(unit, "manifest.json")))
    assert manifest["format"] == FORMAT_VERSION == 5 and manifest["id"] == uid
    mode = os.stat(os.path.join(unit, f"{digest_png}.png")).st_mode
    assert not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    marker = json.load(open(os.path.join(mem.root, ".fsmem", "marker.json")))
    assert marker["format"] == FORMAT_VERSION and marker["hash"] == "blake3"


def test_go_nanosecond_timestamp_kept_exactly(mem):
    ts = "2026-10-04T08:04:00.123456789+08:00"
    uid = mem.commit("t", timestamp=ts)
    ev = mem.document(uid).events[0]
    assert ev.timestamp.isoformat() == ts
    assert ev.timestamp == Timestamp.parse(ts)
    blk = ev.blocks[0]
    assert blk.created_at == ev.timestamp


def test_opening_homeagent_dir_touches_nothing(tmp_path):
    root = tmp_path / "memory"
    (root / "documents").mkdir(parents=True)
    sqlite3.connect(tmp_path / "g.db").execute("CREATE TABLE t (x)").connection.commit()
    legacy = {"documents/doc_1.json": b'{"id":"doc_1"}', "context.json": b"[]",
              "graph.db": (tmp_path / "g.db").read_bytes(), "media/blobs/ab/cdef": b"x"}
    for rel, data in legacy.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    before = {rel: os.stat(root / rel).st_mtime_ns for rel in legacy}
    mem = Memory.open(root)
    mem.commit("new beside legacy")
    for rel, data in legacy.items():
        assert (root / rel).read_bytes() == data
        assert os.stat(root / rel).st_mtime_ns == before[rel]
    for d in ("context", "documents", "stablemem", "inbox", ".fsmem"):
        assert (root / d).is_dir()
    assert mem.fsck() == []
