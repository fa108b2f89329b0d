"""Bad input: each gives a clear error or an fsck finding, and nothing else in the store changes."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from conftest import make_png
from fsmem import (FORMAT_VERSION, AlreadyExists, ChecksumMismatch, Event, FormatError, InvalidName,
                   MediaAttachment, Memory, NotFound)


def snapshot(root) -> dict[str, str]:
    """Every file under the layers with a hash of its bytes (what must not change)."""
    out = {}
    for layer in ("context", "documents", "stablemem"):
        base = os.path.join(root, layer)
        for dirpath, dirnames, files in os.walk(base):
            for name in files + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                p = os.path.join(dirpath, name)
                rel = os.path.relpath(p, root)
                if os.path.islink(p):
                    out[rel] = "link:" + os.readlink(p)
                else:
                    out[rel] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


@pytest.fixture
def two(mem):
    """A store with one good unit and one victim unit."""
    good = mem.commit("good unit 好的", attachments=[MediaAttachment(data=make_png(), mime="image/png")])
    victim = mem.commit("victim unit")
    return mem, good, victim


def _manifest(mem, uid):
    return os.path.join(mem.root, "documents", uid, "manifest.json")


def _assert_isolated(mem, good, before, victim_rel):
    after = snapshot(mem.root)
    for rel, h in before.items():
        if not rel.startswith(victim_rel):
            assert after.get(rel) == h, rel
    assert mem.document(good).events[0].input == "good unit 好的"


@pytest.mark.parametrize("payload,needle", [
    (b"{not json", "invalid JSON"),
    (b'{"format": 1, "id": 5}', "$.id"),
    (b'{"format": 1, "id": "X", "created_at": "2026-01-01T00:00:00Z", '
     b'"updated_at": "2026-01-01T00:00:00Z", "events": "nope"}', "$.events"),
    (b'{"format": 7, "id": "X"}', "format version 7"),
])
def test_bad_manifest(two, payload, needle):
    mem, good, victim = two
    with open(_manifest(mem, victim), "wb") as fh:
        fh.write(payload)
    before = snapshot(mem.root)
    with pytest.raises(FormatError) as exc:
        mem.document(victim)
    assert needle in str(exc.value) and "manifest.json" in str(exc.value)
    if "format version" in needle:
        assert f"version {FORMAT_VERSION}" in str(exc.value)
    findings = mem.fsck()
    assert [f.kind for f in findings] == ["damaged-unit"]
    assert victim in findings[0].path
    _assert_isolated(mem, good, before, f"documents/{victim}")
    assert mem.query("good unit")[0].unit_id == good  # a damaged unit does not stop a query
    fixed = mem.fsck(fix=True)
    assert fixed and fixed[0].fixed.startswith("moved to")
    assert mem.fsck() == []
    assert os.listdir(os.path.join(mem.root, ".fsmem", "quarantine"))


def test_newer_marker_version_refuses_to_open(root):
    Memory.open(root)
    marker = os.path.join(root, ".fsmem", "marker.json")
    data = json.load(open(marker))
    data["format"] = 99
    json.dump(data, open(marker, "w"))
    with pytest.raises(FormatError, match=rf"version 99.*version {FORMAT_VERSION}"):
        Memory.open(root)


def _victim_block(mem, uid, modality="text"):
    doc = mem.document(uid)
    ref = next(b for b in doc.blocks if b.modality == modality)
    return ref, os.path.join(mem.root, "documents", uid,
                             next(n for n in os.listdir(os.path.join(mem.root, "documents", uid))
                                  if n.startswith(ref.digest)))


def test_block_bytes_do_not_match_name(two):
    mem, good, victim = two
    ref, path = _victim_block(mem, victim)
    os.chmod(path, 0o644)
    with open(path, "wb") as fh:
        fh.write(b"victim unix")  # same size, other bytes
    before = snapshot(mem.root)
    with pytest.raises(ChecksumMismatch, match=ref.digest[:16]):
        mem.document(victim)
    findings = mem.fsck()
    assert len(findings) == 1 and "digest mismatch" in findings[0].detail
    assert mem.fsck(read_data=False) == []  # only a re-hash sees it
    _assert_isolated(mem, good, before, f"documents/{victim}")
    mem.fsck(fix=True)
    assert mem.fsck() == []


def test_missing_block(two):
    mem, good, victim = two
    ref, path = _victim_block(mem, victim)
    os.unlink(path)
    before = snapshot(mem.root)
    with pytest.raises(NotFound, match="missing block"):
        mem.document(victim)
    findings = mem.fsck()
    assert len(findings) == 1 and "missing block" in findings[0].detail
    _assert_isolated(mem, good, before, f"documents/{victim}")


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", "a\x00b", "", ".hidden", "x" * 200])
def test_invalid_unit_ids(mem, bad):
    mem.commit("x")
    before = snapshot(mem.root)
    with pytest.raises(InvalidName):
        mem.document(bad)
    with pytest.raises(InvalidName):
        mem.commit_events([Event(input="y")], unit_id=bad)
    with pytest.raises(InvalidName):
        mem.commit_events([Event(input="y", id=bad if bad else "/")])
    assert snapshot(mem.root) == before


@pytest.mark.parametrize("bad", ["../../etc/passwd", "zzzzzzzzzzzz", "abc", "a" * 65, "ABCDEF0\x00"])
def test_invalid_digests(mem, bad):
    mem.commit("x")
    before = snapshot(mem.root)
    with pytest.raises(InvalidName):
        mem.commit("ref", attachments=[MediaAttachment(digest=bad)])
    assert snapshot(mem.root) == before


def test_digest_in_manifest_with_path_chars(two):
    mem, good, victim = two
    path = _manifest(mem, victim)
    data = json.load(open(path))
    data["events"][0]["blocks"][0]["digest"] = "../" * 21 + "x"
    json.dump(data, open(path, "w"))
    with pytest.raises(InvalidName):
        mem.document(victim)
    assert [f.kind for f in mem.fsck()] == ["damaged-unit"]


def test_symlink_where_unit_should_be(two, tmp_path):
    mem, good, victim = two
    outside = tmp_path / "outside"
    outside.mkdir()
    link = os.path.join(mem.root, "documents", "u-evil")
    os.symlink(outside, link)
    before = snapshot(mem.root)
    with pytest.raises(NotFound):
        mem.document("u-evil")
    assert "u-evil" not in mem.units("documents")
    findings = mem.fsck()
    assert [f.kind for f in findings] == ["unexpected-entry"] and "symlink" in findings[0].detail
    _assert_isolated(mem, good, before, "documents/u-evil")
    mem.fsck(fix=True)
    assert mem.fsck() == [] and outside.exists()


def test_symlink_where_block_should_be(two, tmp_path):
    mem, good, victim = two
    ref, path = _victim_block(mem, victim)
    secret = tmp_path / "secret.txt"
    secret.write_text("victim unit")  # right bytes, but behind a symlink
    os.unlink(path)
    os.symlink(secret, path)
    with pytest.raises(ChecksumMismatch, match="cannot read block"):
        mem.document(victim)
    findings = mem.fsck()
    assert len(findings) == 1 and "symlink" in findings[0].detail


def test_plain_file_where_unit_should_be(two):
    mem, good, victim = two
    with open(os.path.join(mem.root, "context", "u-notadir"), "w") as fh:
        fh.write("hi")
    findings = mem.fsck()
    assert [f.kind for f in findings] == ["unexpected-entry"]
    assert "plain file" in findings[0].detail and "u-notadir" in findings[0].path
    assert mem.timeline() == []


def test_empty_directory_at_publish_target_is_not_replaced(mem):
    target = os.path.join(mem.root, "documents", "u-taken")
    os.mkdir(target)
    with pytest.raises(AlreadyExists, match="u-taken"):
        mem.commit_events([Event(input="would clobber")], unit_id="u-taken")
    assert os.listdir(target) == []
    assert os.listdir(os.path.join(mem.root, ".fsmem", "staging")) == []
    uid = mem.commit("moves too")
    os.mkdir(os.path.join(mem.root, "context", uid))
    with pytest.raises(AlreadyExists):
        mem.store.move(uid, "documents", "context")
    assert mem.document(uid).layer == "documents"


def test_fallback_publish_without_renameat2(mem):
    """Where the filesystem answers EINVAL, publish claims the name with mkdir under the lock."""
    mem.store.noreplace = False
    uid = mem.commit("fallback path")
    assert mem.document(uid).events[0].input == "fallback path"
    os.mkdir(os.path.join(mem.root, "documents", "u-claimed"))
    with pytest.raises(AlreadyExists):
        mem.commit_events([Event(input="x")], unit_id="u-claimed")
    assert os.listdir(os.path.join(mem.root, "documents", "u-claimed")) == []
