"""Legacy at scale (issue 27, point 4): the index reads a HomeAgent document without decoding
its vectors (``fsmem.homeagent.index_view``), and nothing else changes: every document is
readable or unreadable, reported and searched exactly as through the fallback reader."""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import homeagent_gen as gen
from conftest import REPO
from fsmem import Memory
from fsmem.homeagent import documents, index_view

FIXTURE = Path(REPO) / "fixtures" / "homeagent-memory"
T = "2026-10-04T08:04:00.123456789+08:00"


def _slow(path: str) -> tuple:
    """What the fallback reader makes of a file: the index's fields, or the error."""
    try:
        d = documents.read_legacy(path)
    except Exception as exc:   # noqa: BLE001 - the very exception is compared
        return ("error", type(exc), str(exc))
    return ("ok", d.id, d.version, d.source, d.summary, d.created_at, documents.legacy_texts(d))


def _view(path: str) -> tuple:
    try:
        d = index_view.read_for_index(path)
    except Exception as exc:   # noqa: BLE001
        return ("error", type(exc), str(exc))
    return ("ok", d.id, d.version, d.source, d.summary, d.created_at, d.texts)


def _fast_taken(path: str) -> bool:
    with open(path, "rb") as fh:
        return index_view._fast(fh.read()) is not None


def _vec(rng: random.Random, dim: int) -> list[float]:
    return [rng.uniform(-1, 1) for _ in range(dim)]


def _big_doc(doc_id: str, content: str, rng: random.Random, *, blocks: int = 12,
             dim: int = 2048) -> dict:
    """A v3 document whose vectors are nearly all of its bytes (MarshalIndent: ~0.75 MB)."""
    return gen.doc(doc_id, summary="大文档", content=content, tags=["年糕"], entities=None,
                   created_at=T, updated_at=T, source="context_archived", access_count=1,
                   last_access=T, blocks=[gen.block(f"blk_{doc_id}_{i}", "text",
                                                    text=f"实体{i}", vector=_vec(rng, dim),
                                                    fingerprint="qwen3vl", created_at=T,
                                                    updated_at=T) for i in range(blocks)],
                   dense_vec=_vec(rng, dim), dense_fp="qwen3vl:d2048")


def _write(root: Path, doc_id: str, doc: dict | bytes) -> Path:
    (root / "documents").mkdir(parents=True, exist_ok=True)
    path = root / "documents" / f"{doc_id}.json"
    path.write_bytes(doc if isinstance(doc, bytes) else gen.go_json(doc, indent=True))
    return path


# -- the view is the fallback reader's, decoded without the vectors ----------------------------

def test_every_fixture_and_generated_document_is_read_the_same_and_without_json(tmp_path):
    ha = gen.build(tmp_path / "gen")
    paths = sorted([*(FIXTURE / "documents").glob("*.json"), *(ha / "documents").glob("*.json")])
    fast = 0
    for path in paths:
        want = _slow(str(path))
        assert _view(str(path)) == want, path.name
        if want[0] == "ok" and _fast_taken(str(path)):
            fast += 1
    readable = sum(_slow(str(p))[0] == "ok" for p in paths)
    assert readable >= 14 and fast == readable   # every readable one without the fallback


def test_a_huge_embedding_is_indexed_by_its_text_and_never_decoded(tmp_path, monkeypatch):
    rng = random.Random(4)
    root = tmp_path / "memory"
    big = _write(root, "doc_1790000000000000001",
                 _big_doc("doc_1790000000000000001", "年糕喜欢吃鸡胸肉 chicken breast", rng))
    _write(root, "doc_1790000000000000002", gen.doc(
        "doc_1790000000000000002", summary="咖啡机", content="咖啡机每月除垢", created_at=T,
        updated_at=T, last_access=T, dense_vec=_vec(rng, 512)))
    assert big.stat().st_size > 700_000
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
              for p in (root / "documents").iterdir()}

    loads = json.loads

    def no_big_json(text, *args, **kwargs):
        assert len(text) < 100_000, "a document's vectors were decoded with json"
        return loads(text, *args, **kwargs)
    monkeypatch.setattr(json, "loads", no_big_json)
    mem = Memory.open(root)
    hits = mem.query("鸡胸肉", top_k=2)
    assert [h.unit_id for h in hits][:1] == ["doc_1790000000000000001"]
    assert hits[0].summary == "大文档"
    assert mem.query("实体7")[0].unit_id == "doc_1790000000000000001"   # a block's own text
    assert mem.query("chicken breast")[0].unit_id == "doc_1790000000000000001"
    assert mem.query("除垢")[0].unit_id == "doc_1790000000000000002"
    mem.close()
    monkeypatch.undo()
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in (root / "documents").iterdir()} == before   # nothing of HomeAgent's changed
    mem = Memory.open(root)   # and the whole document is still there for recall
    assert mem.document("doc_1790000000000000001").events[0].response.startswith("年糕")
    mem.close()


@pytest.mark.parametrize("case", [
    "invalid UTF-8 in a field the index skips",
    "a string in a kept block's vector",
    "an integer of 5000 digits in dense_vec",
])
def test_an_unreadable_document_is_still_unreadable_and_reported_once(tmp_path, caplog, case):
    """Documents the fallback reader rejects for a value the index itself never needs: the
    fast view must not take them (each case goes red if its guard is removed)."""
    rng = random.Random(5)
    root = tmp_path / "memory"
    bad_id = "doc_1790000000000000003"
    doc = _big_doc(bad_id, "损坏的文档 brokenword", rng, blocks=2, dim=8)
    raw = gen.go_json(doc, indent=True)
    if case.startswith("invalid UTF-8"):
        raw = raw.replace(b'"id": "doc', b'"note": "\xff\xfe",\n  "id": "doc', 1)
    elif case.startswith("a string"):
        doc["blocks"][0]["vector"] = [0.5, "x"]
        raw = gen.go_json(doc, indent=True)
    else:
        raw = raw.replace(b'"dense_vec": [', b'"dense_vec": [' + b"7" * 5000 + b", ", 1)
    path = _write(root, bad_id, raw)
    _write(root, "doc_1790000000000000004", gen.doc(
        "doc_1790000000000000004", summary="好的", content="好的文档 goodword", created_at=T))
    assert _slow(str(path))[0] == "error" and not _fast_taken(str(path))
    Memory.open(root).close()   # a writer: the record of reports is made
    with caplog.at_level(logging.INFO, logger="fsmem.legacy"):   # named at INFO (fsmem -v)
        mem = Memory.open(root)
        assert mem.query("brokenword") == []
        assert mem.query("goodword")[0].unit_id == "doc_1790000000000000004"
        mem.reindex()
        assert mem.query("brokenword") == []
        stats = mem.stats()
        mem.close()
        Memory.open(root).query("brokenword")
    skipped = [r for r in caplog.records if "skipping legacy" in r.getMessage()
               and bad_id in r.getMessage()]
    assert len(skipped) == 1
    assert (stats["legacy_documents"], stats["legacy_unreadable"]) == (1, 1)
    record = (root / ".fsmem" / "legacy-reported").read_text()
    assert record.count(f"{bad_id}.json\tunreadable") == 1


def test_a_readable_document_the_view_cannot_vouch_for_goes_through_the_reader(tmp_path):
    """A block without text or digest is dropped by the reader before its vector is read:
    an odd vector there is no error, so the document stays readable and searchable."""
    root = tmp_path / "memory"
    doc = gen.doc("doc_1790000000000000005", summary="留下", content="留下的文档 keptword",
                  created_at=T, blocks=[gen.block("blk_a", "text", vector=None, created_at=T),
                                        gen.block("blk_b", "text", text="块文本", created_at=T)])
    doc["blocks"][0]["vector"] = ["not", "numbers"]
    path = _write(root, "doc_1790000000000000005", doc)
    assert _slow(str(path))[0] == "ok" and not _fast_taken(str(path))
    assert _view(str(path)) == _slow(str(path))
    mem = Memory.open(root)
    assert mem.query("keptword")[0].unit_id == "doc_1790000000000000005"
    assert mem.query("块文本")[0].unit_id == "doc_1790000000000000005"
    mem.close()


def test_each_document_is_reported_once_per_store_through_the_view(tmp_path, caplog):
    root = tmp_path / "memory"
    for i in range(3):
        _write(root, f"doc_179000000000000001{i}", gen.doc(
            f"doc_179000000000000001{i}", summary=f"s{i}", content=f"文档{i} word{i}",
            created_at=T, dense_vec=[0.1, 0.2]))
    Memory.open(root).close()
    (root / ".fsmem" / "legacy-reported").unlink()
    documents.allow_record(str(root))
    with caplog.at_level(logging.INFO, logger="fsmem.legacy"):   # named at INFO (fsmem -v)
        documents._logged.clear()
        mem = Memory.open(root)
        mem.reindex()
        mem.query("word1")
        mem.close()
    served = [r.getMessage() for r in caplog.records if "fallback path" in r.getMessage()]
    assert sorted(served) == [f"legacy document doc_179000000000000001{i} (v2) read through the "
                              f"fallback path: doc_179000000000000001{i}.json" for i in range(3)]
    lines = (root / ".fsmem" / "legacy-reported").read_text().splitlines()
    assert sorted(lines) == [f"doc_179000000000000001{i}.json\tdoc_179000000000000001{i}\tv2"
                             for i in range(3)]


# -- any document: the same outcome as the fallback reader ------------------------------------

def _base_doc() -> dict:
    """A v3 document with a kept text block, a media block and a dropped (empty) block."""
    return gen.doc("doc_1790000000000000020", summary="基准", content="基准文档 baseword",
                   tags=["a"], entities=["b"], created_at=T, updated_at=T, source="manual",
                   meta={"content_hash": "h1"}, access_count=2, last_access=T,
                   blocks=[gen.block("blk_t", "text", text="块", vector=[0.5, 1], created_at=T,
                                     updated_at=T),
                           gen.block("blk_m", "image", digest=gen.PNG.sha256, mime="image/png",
                                     size=12, vector=[1.0], created_at=T, updated_at=T),
                           gen.block("blk_e", "text", created_at=T)],
                   vector={"基准": 0.5, "文档": 0.25}, dense_vec=[0.25, -0.5], dense_fp="fp:d2")


def _set(*path):
    def change(d):
        *where, key, value = path
        for k in where:
            d = d[k]
        d[key] = value
    return change


# (what is changed, the change, whether the fallback reader still reads the document)
MUTATIONS = [
    ("a kept block's vector nested", _set("blocks", 0, "vector", [[1]]), False),
    ("a kept block's vector with a string", _set("blocks", 1, "vector", [1, "x"]), False),
    ("a kept block's vector a number", _set("blocks", 0, "vector", 5), False),
    ("a kept block's updated_at", _set("blocks", 0, "updated_at", "bad"), False),
    ("a kept block's created_at", _set("blocks", 1, "created_at", "2026-13-01T00:00:00Z"),
     False),
    ("a dropped block's created_at", _set("blocks", 2, "created_at", "bad"), True),
    ("a dropped block's vector", _set("blocks", 2, "vector", [[1], "x"]), True),
    ("a block's size as a string", _set("blocks", 1, "size", "12"), True),
    ("a block's size as text", _set("blocks", 1, "size", "twelve"), False),
    ("a block not an object", _set("blocks", 1, "x"), False),
    ("dense_vec true", _set("dense_vec", True), False),
    ("dense_vec a string", _set("dense_vec", "abc"), True),
    ("dense_vec nested", _set("dense_vec", [[1, 2]]), True),
    ("the sparse vector a number", _set("vector", 5), False),
    ("the sparse vector a list", _set("vector", [1, 2]), True),
    ("the sparse vector nested", _set("vector", {"a": {"b": [1]}}), True),
    ("the sparse vector a string", _set("vector", "ab"), True),
    ("the sparse vector true", _set("vector", True), False),
    ("the sparse vector null", _set("vector", None), True),
    ("last_access", _set("last_access", "yesterday"), False),
    ("updated_at an offset out of range", _set("updated_at", "2026-10-04T08:04:00+25:00"),
     False),
    ("tags with a number", _set("tags", ["a", 1]), False),
    ("access_count a string", _set("access_count", "3"), True),
    ("access_count a float", _set("access_count", 2.5), True),
    ("meta with a number", _set("meta", {"a": 1}), True),
    ("summary a number", _set("summary", 7), True),
    ("an empty id", _set("id", ""), False),
    ("media with a number", _set("media", ["", 5]), True),
    ("an unknown field", _set("zz_extra", {"x": [1, 2]}), True),
]
TEXT_MUTATIONS = [
    ("NaN in dense_vec", b'"dense_vec": [', b'"dense_vec": [NaN, ', True),
    ("a lone surrogate in the summary", b'"summary": "', b'"summary": "\\ud800', True),
    ("the id twice", b'"summary"', b'"id": "doc_1790000000000000021",\n  "summary"', True),
    ("5000 digits in a kept block's vector", b'"vector": [', b'"vector": [' + b"1" * 5000
     + b", ", False),
    ("invalid UTF-8 in meta", b'"h1"', b'"h1\xff"', False),
    ("invalid UTF-8 in a sparse vector's feature", '基准": 0.5'.encode(), b'\xe5\x9f": 0.5',
     False),
    ("5000 digits in the sparse vector", b'": 0.5', b'": ' + b"2" * 5000, False),
    ("NaN in the sparse vector", b'": 0.5', b'": NaN', True),
    ("the sparse vector nested deeper than json reads", b'": 0.25',
     b'": ' + b"[" * 1200 + b"]" * 1200, False),
    ("invalid UTF-8 in a block's unknown field", b'"id": "blk_t"',
     b'"note": "\xff", "id": "blk_t"', False),
    ("null in a kept block's vector", b'"vector": [', b'"vector": [null, ', False),
    ("true in a kept block's vector", b'"vector": [', b'"vector": [true, ', True),
    ("a byte order mark", b"{", b"\xef\xbb\xbf{", False),
]


@pytest.mark.parametrize("what,change,readable", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_changed_document_gives_what_the_fallback_reader_gives(tmp_path, what, change,
                                                                 readable):
    doc = _base_doc()
    path = _write(tmp_path, "doc_base", doc)
    assert _slow(str(path))[0] == "ok" and _fast_taken(str(path))
    change(doc)
    path = _write(tmp_path, "doc_changed", doc)
    assert (_slow(str(path))[0] == "ok") is readable
    assert _view(str(path)) == _slow(str(path))


@pytest.mark.parametrize("what,old,new,readable", TEXT_MUTATIONS,
                         ids=[m[0] for m in TEXT_MUTATIONS])
def test_a_changed_file_gives_what_the_fallback_reader_gives(tmp_path, what, old, new, readable):
    raw = gen.go_json(_base_doc(), indent=True)
    assert old in raw
    path = _write(tmp_path, "doc_changed", raw.replace(old, new, 1))
    assert (_slow(str(path))[0] == "ok") is readable
    assert _view(str(path)) == _slow(str(path))
    assert not _fast_taken(str(path)) or readable

_STR = ['"咖啡机 coffee"', '""', "null", "7", '["a"]', '"\\ud800"', '"a\\u0000b"', '"é\\u00e9"']
_TIME = [f'"{T}"', '""', "null", '"bad"', "0", f'"{gen.ZERO}"', '"2026-10-04T08:04:00+25:00"',
         '"2026-02-30T00:00:00Z"']
_STRS = ["null", "[]", '["a", "猫"]', '["a", 1]', '"ab"', "{}"]
_NUMS = ["null", "[]", "[0.5, -1e-7, 3]", "[[1]]", '["a"]', "0", "5", "[1e400]", "[NaN]",
         "[" + "9" * 5000 + "]", "[" + ", ".join(["0.25"] * 400) + "]", "true", '{"a": 1}',
         '"\\ud800"', "[1, null]"]
_POOLS = {
    "id": ['"doc_1790000000000000009"', '""', "null", "5"],
    "summary": _STR, "content": _STR, "source": _STR,
    "tags": _STRS, "entities": _STRS,
    "created_at": _TIME, "updated_at": _TIME, "last_access": _TIME,
    "meta": ["null", "{}", '{"a": "b"}', '{"a": 1}', "[]", '"x"'],
    "access_count": ["0", "3", "null", '"3"', "3.5", "true", "1" + "0" * 30],
    "media": ["null", "[]", f'["{gen.PNG.sha256}"]', '["", 5]', '"ab"'],
    "vector": ["null", "{}", '{"光伏": 0.5}', '{"a": "b"}', "[1, 2]", '"ab"', "0", "5",
               '{"a": 1e400}'],
    "dense_vec": _NUMS,
    "dense_fp": ["null", '"chineseclip:d512"', "5"],
    "zz_unknown": ["1", '"x"'],
}
_BLOCK_POOLS = {
    "id": ['"blk_1"', "null", "3"], "modality": ['"text"', '"image"', "null"],
    "text": ['"块"', '""', "null", "9"],
    "payload_digest": [f'"{gen.PNG.sha256.upper()}"', '""', "null", "[]"],
    "mime": ['"image/png"', '""', "null"], "size": ["0", "12", '"12"', "1.5", "null", "true"],
    "width": ["640", "null", '"w"'], "vector": _NUMS, "fingerprint": ['"fp"', "1"],
    "scene": ['"chan:qq"'], "created_at": _TIME, "updated_at": _TIME, "zz_unknown": ["1"],
}


def _obj(pools: dict[str, list[str]], draw) -> str:
    keys = draw(st.lists(st.sampled_from(sorted(pools)), unique=True))
    if keys and draw(st.booleans()):
        keys.append(draw(st.sampled_from(keys)))   # a key twice: the last value counts
    parts = []
    for k in keys:
        value = _block_list(draw) if k == "blocks" else draw(st.sampled_from(pools[k]))
        parts.append(f'"{k}": {value}')
    return "{" + ", ".join(parts) + "}"


def _block_list(draw) -> str:
    return "[" + ", ".join(_obj(_BLOCK_POOLS, draw) for _ in range(draw(st.integers(0, 3)))) + "]"


@st.composite
def _documents(draw) -> bytes:
    pools = dict(_POOLS, blocks=[])
    text = _obj(pools, draw)
    if draw(st.booleans()):
        text = text.replace('"id": ', '"id" : ', 1)   # spacing Go never writes
    raw = text.encode("utf-8")
    if draw(st.integers(0, 9)) == 0:
        raw = raw.replace(b'"x"', b'"\xff"')   # invalid UTF-8 (in the unknown field)
    return raw


@settings(max_examples=400, deadline=None)
@given(_documents())
def test_any_document_gives_what_the_fallback_reader_gives(raw):
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), "doc_x", raw)
        assert _view(str(path)) == _slow(str(path)), raw[:300]


def test_a_legacy_json_left_beside_its_unit_is_not_indexed(tmp_path):
    """A recall interrupted after its unit was published leaves the JSON in documents/: the
    index leaves it out while a unit of that id is in context/ or stablemem/ (the other
    layers are listed once for all the JSON files; each name found there is looked up)."""
    import shutil
    home = tmp_path / "memory"
    shutil.copytree(FIXTURE, home)
    mem = Memory.open(home)
    coffee, solar = "doc_1789175727183004211", "doc_1790315272901276334"
    assert mem.recall("咖啡机", top_k=1) == [coffee]
    assert mem.recall("光伏板", top_k=1) == [solar]
    mem.close()
    os.rename(home / "context" / solar, home / "stablemem" / solar)
    for name in (coffee, solar):   # the leftovers
        shutil.copy2(home / ".fsmem" / "legacy-recalled" / f"{name}.json", home / "documents")
    shutil.rmtree(home / ".fsmem" / "index")
    mem = Memory.open(home)
    assert coffee not in [h.unit_id for h in mem.query("咖啡机 除垢", top_k=5)]
    assert solar not in [h.unit_id for h in mem.query("光伏板", top_k=5)]
    assert mem.query("猫粮")[0].unit_id == "doc_1789389068040000000"
    mem.close()
