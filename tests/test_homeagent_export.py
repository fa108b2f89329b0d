"""``fsmem export --homeagent DIR`` (issue 32, item 6: a way back): an fsmem store written out as
a HomeAgent memory directory (reference: /work/shared/reference/homeagent-format.md), checked
against the reference's shapes strictly (and by Go's encoding/json where Go is installed), then
opened with fsmem again: the same documents, events and media."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

import homeagent_gen as gen
from conftest import run_cli
from fsmem import Memory, Timestamp
from fsmem.format.errors import FsmemError
from fsmem.format.model import Event, MediaAttachment, ToolOutput
from fsmem.ingest import homeagent_export as hx
from fsmem.ingest.homeagent_export import export_homeagent

GO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d*[1-9])?(Z|[+-]\d{2}:\d{2})$")
# Reference §1a (v3 column) and §2, in Go's struct field order; (key, type, omitempty).
DOC_V3 = [("id", str, False), ("summary", str, False), ("content", str, False),
          ("tags", "strs|null", False), ("entities", "strs|null", False),
          ("created_at", "time", False), ("updated_at", "time", False), ("source", str, False),
          ("meta", "map", True), ("access_count", int, False), ("last_access", "time", False),
          ("blocks", "blocks", True), ("vector", "sparse", True), ("dense_vec", "floats", True),
          ("dense_fp", str, True)]
BLOCK = [("id", str, False), ("modality", "modality", False), ("text", str, True),
         ("payload_digest", "sha256", True), ("mime", str, True), ("size", int, True),
         ("width", int, True), ("height", int, True), ("vector", "floats", True),
         ("fingerprint", str, True), ("source", str, True), ("tool", str, True),
         ("scene", str, True), ("semantic_type", str, True), ("created_at", "time", False),
         ("updated_at", "time", False)]
# Reference §3, the @6d38a164 event (blocks replace v1.2's media).
EVENT = [("id", str, True), ("timestamp", "time", False), ("source", str, False),
         ("input", str, False), ("response", str, True), ("tools_used", "strs", True),
         ("tool_results", "results", True), ("blocks", "blocks", True)]
MEDIA_COLUMNS = ["digest", "kind", "mime", "size", "width", "height", "origin_path", "tool",
                 "description", "described_by", "ref_count", "first_seen", "last_seen", "vec",
                 "vec_model"]

PRIVATE_TEXT = "秘密 日记 只给自己"
BOB_TEXT = "bob 的事件 在电报上"


# -- the strict shape check (reference §1a, §2, §3) -------------------------------------------

def _check_value(kind, value, where):
    if kind is str or kind is int:
        assert type(value) is kind, f"{where}: {type(value).__name__}, want {kind.__name__}"
    elif kind == "time":
        assert isinstance(value, str) and GO_TIME.match(value), f"{where}: {value!r}"
        Timestamp.parse(value)
    elif kind in ("strs", "strs|null"):
        assert (value is None and kind == "strs|null") or (
            isinstance(value, list) and all(type(v) is str for v in value)), where
    elif kind == "map":
        assert isinstance(value, dict) and all(type(v) is str for v in value.values()), where
        assert list(value) == sorted(value), f"{where}: Go writes map keys sorted"
    elif kind == "floats":
        assert isinstance(value, list) and all(type(v) in (int, float) for v in value), where
    elif kind == "sparse":
        assert isinstance(value, dict) and all(type(v) in (int, float) for v in value.values())
    elif kind == "modality":
        assert value in ("text", "image", "video", "audio"), f"{where}: modality {value!r}"
    elif kind == "sha256":
        assert isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value), where
    elif kind == "blocks":
        assert isinstance(value, list), where
        for i, b in enumerate(value):
            _check_object(b, BLOCK, f"{where}[{i}]")
    elif kind == "results":
        assert isinstance(value, list), where
        for r in value:
            assert list(r) == ["name", "output"] and all(type(v) is str for v in r.values())
    else:
        raise AssertionError(kind)


def _check_object(obj, shape, where):
    """Keys in Go's field order, nothing unknown, each of its Go type; an omitempty key never
    holds its zero value (Go would have left it out); a required key always present."""
    assert isinstance(obj, dict), where
    order = [k for k, _, _ in shape]
    assert set(obj) <= set(order), f"{where}: unknown keys {set(obj) - set(order)}"
    assert list(obj) == [k for k in order if k in obj], f"{where}: not in Go's field order"
    for key, kind, omitempty in shape:
        if key not in obj:
            assert omitempty, f"{where}: {key} missing"
            continue
        if omitempty:
            assert obj[key] not in ("", 0, None, [], {}), f"{where}.{key}: zero value written"
        _check_value(kind, obj[key], f"{where}.{key}")


def _check_shapes(out: Path, copied: set[str]) -> None:
    for p in sorted((out / "documents").iterdir()):
        raw = p.read_bytes()
        if p.name in copied:
            continue
        data = json.loads(raw)
        _check_object(data, DOC_V3, p.name)
        assert p.name == data["id"] + ".json"
        assert raw == gen.go_json(data, indent=True), f"{p.name}: not MarshalIndent's bytes"
        for b in data.get("blocks") or []:
            assert b.get("payload_digest") or b.get("text"), f"{p.name}: empty block"
            if b.get("payload_digest"):
                assert (out / "media" / "blobs" / b["payload_digest"][:2]
                        / b["payload_digest"][2:]).is_file() or b["payload_digest"] in MISSING
    raw = (out / "context.json").read_bytes()
    events = json.loads(raw)
    assert raw == gen.go_json(events, indent=False), "context.json: not json.Marshal's bytes"
    assert isinstance(events, list)
    for i, e in enumerate(events):
        _check_object(e, EVENT, f"context.json[{i}]")
    stamps = [Timestamp.parse(e["timestamp"]) for e in events]
    assert [s.ns for s in stamps] == sorted(s.ns for s in stamps), "events not in time order"
    media = out / "media"
    for p in (media / "blobs").rglob("*"):
        if p.is_file():
            assert hashlib.sha256(p.read_bytes()).hexdigest() == p.parent.name + p.name
    db = sqlite3.connect(f"file:{media / 'media.db'}?mode=ro", uri=True)
    assert [r[1] for r in db.execute("PRAGMA table_info(media)")] == MEDIA_COLUMNS
    assert [r[1] for r in db.execute("PRAGMA table_info(media_refs)")] == \
        ["digest", "owner_kind", "owner_id"]
    rows = {r[0]: r for r in db.execute("SELECT * FROM media")}
    blobs = {p.parent.name + p.name for p in (media / "blobs").rglob("*") if p.is_file()}
    assert set(rows) == blobs
    for digest, _kind, owner, oid in [(r[0], None, r[1], r[2]) for r in
                                      db.execute("SELECT * FROM media_refs")]:
        assert digest in rows and owner in ("context", "document", "graph_sentence") and oid
    db.close()
    assert not [n for n in os.listdir(out) if n.endswith(("-wal", "-shm", "-journal"))]


MISSING: set[str] = set()


# -- the store to export ---------------------------------------------------------------------

def _store(root: Path) -> tuple[Memory, dict[str, str]]:
    """A HomeAgent directory opened with fsmem and used: context adopted, a document recalled,
    commits (one with media, one distilled into L3, one updated, one private), events appended
    (one with a tool result and a text attachment), another agent's L1."""
    gen.build(root)
    mem = Memory.open(root, adopt=True)
    assert mem.recall("厨房插座", top_k=1) == [gen.DOC["explicit"]]
    units = {"l3": mem.commit("My sister lives in Boston. I work at Airbus.", summary="en")}
    mem.distill(max_age_s=0, max_access=2)
    assert mem.units("stablemem") == [units["l3"]]
    units["media"] = mem.commit("新的笔记 带图片", summary="带图", tags=["图", "笔记"],
                                attachments=[MediaAttachment(data=gen.CTX_PNG.data,
                                                             mime="image/png", name="x.png"),
                                             MediaAttachment(data=b"%PDF-1.4 tiny",
                                                             mime="application/pdf")])
    units["old"] = mem.commit("旧版本 地址 一号路", summary="地址")
    units["new"] = mem.update(units["old"], "新版本 地址 二号路")
    units["private"] = mem.commit(PRIVATE_TEXT, private=True)
    mem.append(Event(timestamp=Timestamp.parse("2026-11-01T10:00:00.123456789+05:30"),
                     source="qq", input="你好 世界 <b>&", response="你好",
                     tools_used=["doc_query"],
                     tool_results=[ToolOutput(name="doc_query", output="未找到相关文档记忆")]))
    mem.append(Event(timestamp=Timestamp.parse("2026-10-07T08:00:00.5-05:00"), source="tg",
                     input="更早的事件", attachments=[MediaAttachment(data=gen.PNG.data,
                                                                    mime="image/png")]))
    bob = Memory.open(root, agent="bob")
    bob.append(Event(timestamp=Timestamp.parse("2026-11-02T10:00:00.000000001Z"), source="tg",
                     input=BOB_TEXT))
    bob.close()
    return mem, units


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("hx")
    mem, units = _store(base / "src")
    mem.close()
    before = _tree(base / "src")
    rep = export_homeagent(str(base / "src"), str(base / "out"))
    return base, units, rep, before


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# -- the criteria ----------------------------------------------------------------------------

def test_export_has_homeagent_shapes(exported):
    base, _, rep, _ = exported
    out = base / "out"
    copied = {f"{gen.DOC['v2']}.json"}
    assert sorted(os.listdir(out)) == ["context.json", "documents", "graph.db", "media"]
    _check_shapes(out, copied)
    # a HomeAgent document still in place is exported as it is, byte for byte
    assert (out / "documents" / copied.pop()).read_bytes() == \
        (base / "src" / "documents" / f"{gen.DOC['v2']}.json").read_bytes()
    assert not (out / "documents" / "settings.json").exists()
    assert rep.documents == len(os.listdir(out / "documents"))
    assert rep.events == len(json.loads((out / "context.json").read_bytes()))
    assert rep.media == len([p for p in (out / "media" / "blobs").rglob("*") if p.is_file()])
    assert rep.bytes == sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


def test_adopted_documents_keep_their_ids_blocks_and_fields(exported):
    base, _, _, _ = exported
    docs = base / "out" / "documents"
    v3 = json.loads((docs / f"{gen.DOC['v3']}.json").read_bytes())
    src = json.loads(gen.go_json(gen._docs()[gen.DOC["v3"]], indent=True))
    for key in ("id", "summary", "content", "tags", "entities", "created_at", "updated_at",
                "source", "access_count", "last_access"):
        assert v3[key] == src[key], key
    by_id = {b["id"]: b for b in v3["blocks"]}
    # issue 32: recall keeps a block with neither payload nor text (an empty block): it
    # goes back with its id and times
    want = {b["id"]: b for b in src["blocks"]}
    assert set(by_id) == set(want)
    assert (by_id[gen.V3_EMPTY_BLOCK]["created_at"], by_id[gen.V3_EMPTY_BLOCK]["updated_at"]) \
        == (want[gen.V3_EMPTY_BLOCK]["created_at"], want[gen.V3_EMPTY_BLOCK]["updated_at"])
    assert by_id[gen.V3_IMAGE_BLOCK] == want[gen.V3_IMAGE_BLOCK]   # every field, exactly
    assert by_id[gen.V3_TEXT_BLOCK] == want[gen.V3_TEXT_BLOCK]
    assert by_id[gen.V3_AUDIO_BLOCK]["payload_digest"] == gen.M4A.sha256
    v1 = json.loads((docs / f"{gen.DOC['v1']}.json").read_bytes())
    assert v1["meta"] == {"content_hash": "h1a2b3c4d", "is_archived_context": "true"}
    assert v1["tags"] is None and v1["content"] == "[08:04] qq: 咖啡机每月除垢一次"
    far = json.loads((docs / f"{gen.DOC['far']}.json").read_bytes())
    assert far["created_at"] == far["updated_at"] == gen.FAR


def test_fsmem_units_get_stable_homeagent_ids_and_decisions_are_reported(exported):
    base, units, rep, _ = exported
    docs = {json.loads(p.read_bytes())["id"]: json.loads(p.read_bytes())
            for p in (base / "out" / "documents").iterdir()}
    with Memory.open(base / "src", readonly=True) as r:
        ids = {k: hx.doc_id(r.document(u)) for k, u in units.items()}
    for key in ("l3", "media", "new", "private"):
        d = docs[ids[key]]
        assert re.fullmatch(r"doc_\d+_\d+", d["id"]) and d["meta"]["fsmem_unit"] == units[key]
    assert ids["old"] not in docs and rep.superseded == [units["old"]]   # the newest only
    assert docs[ids["new"]]["content"] == "新版本 地址 二号路"
    assert docs[ids["private"]]["content"] == PRIVATE_TEXT and rep.private == [units["private"]]
    assert docs[ids["l3"]]["meta"]["fsmem_layer"] == "stablemem"
    bob = [d for d in docs.values() if d.get("meta", {}).get("fsmem_agent") == "bob"]
    assert len(bob) == 1 and BOB_TEXT in bob[0]["content"] and rep.other_agents == {"bob": 1}
    media = docs[ids["media"]]
    assert media["tags"] == ["图", "笔记"] and media["content"] == "新的笔记 带图片"
    png, pdf = media["blocks"]
    assert (png["modality"], png["payload_digest"], png["width"], png["height"]) == \
        ("image", gen.CTX_PNG.sha256, 4, 4)
    assert (pdf["modality"], pdf["mime"]) == ("text", "application/pdf")   # §2: else text
    assert sorted(rep.skipped_files) == ["doc_1791000000000000000.json", "settings.json"]


def test_round_trip_through_fsmem(exported, tmp_path):
    """Open the export with fsmem as a HomeAgent directory: the same documents (texts), events
    (ids, timestamps to the nanosecond with their offsets, texts) and media (bytes)."""
    base, units, rep, _ = exported
    copy = tmp_path / "again"
    shutil.copytree(base / "out", copy)
    src = Memory.open(base / "src", readonly=True)
    if True:
        want_docs = {}
        for layer in ("documents", "stablemem", "context@bob"):
            for uid in src.units(layer):
                if uid == units["old"]:
                    continue
                d = src.document(uid)
                want_docs[hx.doc_id(d)] = d
        want_events = src.timeline()
    back = Memory.open(copy, adopt=True)
    for did, d in want_docs.items():
        got = back.document(did)
        assert got.summary == d.summary and got.source == d.source
        assert got.created_at == d.created_at and sorted(got.tags) == sorted(d.tags)
        ev = got.events[0]
        for e in d.events:
            for text in (e.input, e.response, *(t.output for t in e.tool_results)):
                if text and text != d.summary:
                    assert text in ev.response, (did, text)
            assert sorted(e.texts.values()) == sorted(ev.texts.values())
        assert _media(back, [ev]) == _media(src, d.events), did
    v2 = back.document(gen.DOC["v2"])
    assert v2.events[0].response == "光伏板清洗 <提醒> & 语音"
    got_events = back.timeline()

    def flat(mem, events):
        return [(e.id, e.timestamp.isoformat(), e.source, e.input, e.response, e.tools_used,
                 [(t.name, t.output) for t in e.tool_results], sorted(e.texts.values()),
                 _media(mem, [e])) for e in events]
    assert flat(back, got_events) == flat(src, want_events)
    assert "2026-11-01T10:00:00.123456789+05:30" in [e.timestamp.isoformat() for e in got_events]
    assert any(_media(back, [e]) for e in got_events)
    back.close()
    src.close()


def _media(mem, events) -> list[str]:
    """The sha256 of every media attachment's bytes, read back through ``mem``."""
    out = []
    for e in events:
        for b in e.blocks:
            if b.role == "attachment" and b.modality != "text":
                data = mem.read_block(b.digest)
                assert not b.sha256 or hashlib.sha256(data).hexdigest() == b.sha256
                out.append(hashlib.sha256(data).hexdigest())
    return sorted(out)


def test_store_unchanged_and_second_export_identical(exported):
    base, _, rep, before = exported
    assert _tree(base / "src") == before        # every file, .fsmem/ included, byte for byte
    again = export_homeagent(str(base / "src"), str(base / "out2"))
    assert _tree(base / "out2") == _tree(base / "out")
    assert (again.documents, again.events, again.media, again.bytes) == \
        (rep.documents, rep.events, rep.media, rep.bytes)
    assert _tree(base / "src") == before
    shutil.rmtree(base / "out2")


def test_graph_db_is_copied_whole(exported):
    base, _, rep, _ = exported
    assert rep.graph
    dump = lambda p: list(sqlite3.connect(f"file:{p}?immutable=1", uri=True).iterdump())  # noqa
    assert dump(base / "out" / "graph.db") == dump(base / "src" / "graph.db")


def test_existing_non_empty_dir_is_refused_and_nothing_written(exported, tmp_path):
    base, _, _, before = exported
    dest = tmp_path / "taken"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(FsmemError, match=re.escape(str(dest))):
        export_homeagent(str(base / "src"), str(dest))
    assert os.listdir(dest) == ["keep.txt"] and os.listdir(tmp_path) == ["taken"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_homeagent(str(base / "src"), str(empty)).documents > 0   # empty is fine
    with pytest.raises(FsmemError, match="inside the store"):
        export_homeagent(str(base / "src"), str(base / "src" / "out"))
    assert _tree(base / "src") == before


def test_a_failed_export_leaves_nothing(exported, tmp_path, monkeypatch):
    base, _, _, _ = exported

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(hx, "_copy_graph", boom)
    with pytest.raises(OSError, match="disk full"):
        export_homeagent(str(base / "src"), str(tmp_path / "out"))
    assert os.listdir(tmp_path) == []


def test_store_without_context_or_graph(tmp_path):
    mem = Memory.open(tmp_path / "s")
    mem.commit("only a note")
    mem.close()
    rep = export_homeagent(str(tmp_path / "s"), str(tmp_path / "o"))
    assert (rep.documents, rep.events, rep.media, rep.graph) == (1, 0, 0, False)
    assert (tmp_path / "o" / "context.json").read_bytes() == b"[]"
    assert sorted(os.listdir(tmp_path / "o")) == ["context.json", "documents"]


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_export_homeagent(exported, tmp_path):
    base, _, rep, before = exported
    r = run_cli("export", "--root", str(base / "src"), "--homeagent", str(tmp_path / "ha"), "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert {k: got[k] for k in ("documents", "events", "media", "bytes")} == \
        {"documents": rep.documents, "events": rep.events, "media": rep.media,
         "bytes": rep.bytes}
    assert _tree(tmp_path / "ha") == _tree(base / "out")
    r = run_cli("export", "--root", str(base / "src"), "--homeagent", str(tmp_path / "ha"))
    assert r.returncode == 1 and str(tmp_path / "ha") in r.stderr and "not empty" in r.stderr
    r = run_cli("export", "--root", str(base / "src"), "--homeagent", str(tmp_path / "x"),
             str(tmp_path / "x.tar"))
    assert r.returncode == 2 and not (tmp_path / "x").exists()
    r = run_cli("export", "--root", str(base / "src"), "--homeagent", str(tmp_path / "y"))
    assert r.returncode == 0 and "private" in r.stdout and "HomeAgent has no privacy" in r.stdout
    assert _tree(base / "src") == before


# -- Go's encoding/json, where Go is installed -----------------------------------------------

def test_go_decodes_the_export_strictly(exported):
    go = shutil.which("go")
    if go is None:
        if os.environ.get("CI"):
            pytest.fail("go is not on PATH under CI (.ci/run installs golang-go)")
        pytest.skip("go is not installed (apt-get install golang-go); the Python shape check ran")
    base, _, _, _ = exported
    prog = Path(__file__).resolve().parent / "go" / "hacheck"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GO111MODULE": "on",
           "GOCACHE": os.environ.get("GOCACHE", "/tmp/fsmem-go-cache"), "GOPATH": "/tmp/fsmem-gopath"}
    r = subprocess.run([go, "run", ".", str(base / "out")], cwd=str(prog), capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    by = {x["file"]: x for x in lines}
    assert by["context.json"]["same_bytes"] and by["context.json"]["events"] > 0
    for name in os.listdir(base / "out" / "documents"):
        x = by[f"documents/{name}"]
        if name == f"{gen.DOC['v2']}.json":
            assert x["version"] == "v2"
        else:
            assert x["version"] == "v3" and x["same_bytes"], x
