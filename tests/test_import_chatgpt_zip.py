"""``fsmem import --from chatgpt export.zip``: the ChatGPT export read as downloaded, its images
kept as media blocks; a referenced image missing from the zip is named in the report; hostile
zips (bombs, traversal names, symlinks, encryption, corruption) are refused naming the member,
with nothing stored.

Every fixture zip is made here (tiny real PNGs, ``zipfile``); no real ChatGPT data."""

from __future__ import annotations

import json
import os
import stat
import struct
import zipfile
from pathlib import Path

import blake3
import pytest

from conftest import make_png, run_cli
from fsmem import FsmemError, Memory
from fsmem.ingest.importers import import_chatgpt
from fsmem.ingest.safezip import ZipLimits

PHOTO = make_png(6, 4, seed=2)         # the user's upload (file-service pointer)
DALLE = make_png(5, 5, seed=7)         # a generated image (sediment pointer)
SCAN = make_png(3, 2, seed=9)          # an upload kept under user-<id>/
SED_ID = "file_00000000a1b2c3d4e5f60718293a4b5c"
SCAN_ID = "file_00000000ffeeddccbbaa99887766554433"


def _msg(mid: str, role: str, parts: list, t: float, parent: str | None,
         children: list[str], content_type: str = "text") -> dict:
    return {"id": mid, "parent": parent, "children": children,
            "message": {"id": mid, "author": {"role": role}, "create_time": t,
                        "content": {"content_type": content_type, "parts": parts}}}


def _image(pointer: str) -> dict:
    return {"content_type": "image_asset_pointer", "asset_pointer": pointer,
            "size_bytes": 100, "width": 6, "height": 4}


def conversations() -> list[dict]:
    """Two conversations: an upload with a question, a generated image (a tool message with
    no text), an upload under user-<id>/, and one pointer whose file is not in the zip."""
    garden = {"id": "c-garden", "conversation_id": "c-garden", "title": "Leaf spots",
              "create_time": 1790000000.0, "current_node": "a3", "mapping": {
                  "root": {"id": "root", "message": None, "parent": None, "children": ["u1"]},
                  "u1": _msg("u1", "user", [_image("file-service://file-PhotoAbc123"),
                                            "what are these spots?"], 1790000001.0, "root",
                             ["a1"], "multimodal_text"),
                  "a1": _msg("a1", "assistant", ["early blight, most likely"], 1790000002.0,
                             "u1", ["t1"]),
                  "t1": _msg("t1", "tool", [_image(f"sediment://{SED_ID}")], 1790000003.0,
                             "a1", ["u2"], "multimodal_text"),
                  "u2": _msg("u2", "user", [_image("file-service://file-Gone999"),
                                            "and this one?"], 1790000004.0, "t1", ["a3"],
                             "multimodal_text"),
                  "a3": _msg("a3", "assistant", ["the same"], 1790000005.0, "u2", []),
              }}
    scan = {"id": "c-scan", "conversation_id": "c-scan", "title": "Receipt",
            "create_time": 1790000100.0, "current_node": "s1", "mapping": {
                "r": {"id": "r", "message": None, "parent": None, "children": ["s1"]},
                "s1": _msg("s1", "user", [_image(f"sediment://{SCAN_ID}"), "total?"],
                           1790000101.0, "r", [], "multimodal_text"),
            }}
    return [garden, scan]


def export_members(top: str = "") -> dict[str, bytes]:
    """The members of an export as OpenAI ships it (``top``: one enclosing folder)."""
    return {f"{top}{name}": data for name, data in {
        "conversations.json": json.dumps(conversations()).encode(),
        "chat.html": b"<html>not read</html>",
        "user.json": b'{"id": "user-x"}',
        "message_feedback.json": b"[]",
        # named .jpg but a PNG: the MIME type comes from the bytes
        "file-PhotoAbc123-leaves.jpg": PHOTO,
        f"dalle-generations/{SED_ID}-0b1c2d3e-aaaa-bbbb-cccc-000000000001.webp": DALLE,
        f"user-AbCdEf/{SCAN_ID}-5d6e7f80-aaaa-bbbb-cccc-000000000002.png": SCAN,
    }.items()}


def write_zip(path: Path, members: dict[str, bytes], *, extra: list | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for info, data in extra or []:
            zf.writestr(info, data)
    return path


def tree(root: Path) -> dict[str, str]:
    """Every file of the store's layers and staging with the BLAKE3 of its bytes."""
    out = {}
    for sub in ("context", "documents", "stablemem", ".fsmem/staging"):
        for dirpath, _, files in os.walk(root / sub):
            for f in files:
                p = Path(dirpath) / f
                out[str(p.relative_to(root))] = blake3.blake3(p.read_bytes()).hexdigest()
    return out


def images_of(*events) -> list:
    return [b for ev in events for b in ev.blocks if b.modality == "image"]


# -- the zip as downloaded --------------------------------------------------------------------

@pytest.mark.parametrize("top", ["", "chatgpt-export-2026-11-30/"])
def test_zip_as_downloaded_keeps_images_as_blocks(tmp_path, top):
    src = write_zip(tmp_path / "export.zip", export_members(top))
    root = tmp_path / "m"
    Memory.open(root).close()
    r = run_cli("import", "--from", "chatgpt", "--json", str(src), root=root)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert sorted(rep["imported"]) == ["chatgpt-c-garden", "chatgpt-c-scan"]
    assert rep["images"] == 3
    # the pointer whose file the zip lacks: counted and named, never dropped silently
    (missing,) = rep["images_missing"]
    assert "file-service://file-Gone999" in missing and "chatgpt-c-garden" in missing

    mem = Memory.open(root)
    garden = mem.document("chatgpt-c-garden")
    by_event = {ev.id: ev for ev in garden.events}
    assert by_event["cg-u1"].input == "what are these spots?"
    (photo,) = images_of(by_event["cg-u1"])
    assert photo.digest == blake3.blake3(PHOTO).hexdigest()
    assert (photo.mime, photo.width, photo.height, photo.size) == ("image/png", 6, 4, len(PHOTO))
    assert mem.read_block(photo.digest) == PHOTO
    # a generated image alone in a tool message is an event of its own
    (dalle,) = images_of(by_event["cg-t1"])
    assert dalle.digest == blake3.blake3(DALLE).hexdigest() and by_event["cg-t1"].role == "tool"
    assert by_event["cg-u2"].input == "and this one?" and not images_of(by_event["cg-u2"])
    (scan,) = images_of(*mem.document("chatgpt-c-scan").events)
    assert mem.read_block(scan.digest) == SCAN
    # the bytes on disk are the zip's bytes, and `fsmem show` lists the block
    blocks = [p for p in (root / "documents" / "chatgpt-c-garden").iterdir()
              if p.name.startswith(photo.digest)]
    assert [blake3.blake3(p.read_bytes()).hexdigest() for p in blocks] == [photo.digest]
    shown = run_cli("show", "chatgpt-c-garden", root=root)
    assert shown.returncode == 0, shown.stderr
    assert f"[image/png 6×4 file-PhotoAbc123-leaves.jpg] {blocks[0]}" in shown.stdout
    assert "[image/png 5×5" in shown.stdout
    assert mem.fsck() == []
    # again: nothing new, nothing changed
    before = tree(root)
    again = run_cli("import", "--from", "chatgpt", str(src), root=root)
    assert again.returncode == 0, again.stderr
    assert "imported 0 conversations, 2 already present" in again.stdout
    assert tree(root) == before


def test_the_text_report_names_each_missing_image(tmp_path):
    src = write_zip(tmp_path / "export.zip", export_members())
    r = run_cli("import", "--from", "chatgpt", str(src), root=tmp_path / "m")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "imported 2 conversations, 0 already present; 3 images stored, 1 missing"
    assert any("file-service://file-Gone999" in line and "not in the zip" in line
               for line in lines[1:]), lines


def test_conversations_json_alone_reports_its_images_missing(tmp_path):
    """The bare conversations.json has pointers but no image bytes: each one is reported."""
    src = tmp_path / "conversations.json"
    src.write_text(json.dumps(conversations()))
    mem = Memory.open(tmp_path / "m")
    rep = import_chatgpt(mem, str(src))
    assert len(rep.imported) == 2 and rep.images == 0
    assert len(rep.images_missing) == 4
    assert all("the .zip" in m for m in rep.images_missing)
    assert mem.document("chatgpt-c-scan").events[0].input == "total?"


def test_a_referenced_file_that_is_not_an_image_is_reported_not_stored(tmp_path):
    members = export_members()
    members["file-PhotoAbc123-leaves.jpg"] = b"this is no image at all"
    mem = Memory.open(tmp_path / "m")
    rep = import_chatgpt(mem, str(write_zip(tmp_path / "e.zip", members)))
    assert rep.images == 2
    assert any("file-PhotoAbc123" in m and "not a recognised image" in m
               for m in rep.images_missing), rep.images_missing
    assert mem.fsck() == []


# -- hostile zips: one line naming the member, nothing stored ---------------------------------

def _symlink_info() -> zipfile.ZipInfo:
    info = zipfile.ZipInfo("file-Link1-x.png")
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def _encrypted(tmp_path: Path) -> Path:
    """A member marked encrypted (general purpose flag bit 0) in its local header and its
    central directory entry (``zipfile`` itself writes no encrypted members)."""
    name = b"file-Secret1-x.png"
    path = write_zip(tmp_path / "e.zip", {**export_members(), name.decode(): PHOTO})
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        local = zf.getinfo(name.decode()).header_offset
    raw[local + 6] |= 0x1
    at = raw.find(b"PK\x01\x02")
    while at >= 0:
        n = struct.unpack("<H", raw[at + 28:at + 30])[0]
        if bytes(raw[at + 46:at + 46 + n]) == name:
            raw[at + 8] |= 0x1
        at = raw.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(raw))
    return path


def _bomb(tmp_path: Path) -> Path:
    members = export_members()
    members["file-Bomb1-big.png"] = b"\x00" * (16 << 20)   # 16 MiB of zeros: ~16 KiB deflated
    return write_zip(tmp_path / "bomb.zip", members)


def _corrupt_member(tmp_path: Path) -> Path:
    members = export_members()
    path = tmp_path / "crc.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    raw = bytearray(path.read_bytes())
    at = raw.find(PHOTO)
    raw[at + 40] ^= 0xFF   # inside the PNG's data: the member's CRC-32 no longer matches
    path.write_bytes(bytes(raw))
    return path


HOSTILE = {
    "traversal": (lambda p: write_zip(p / "t.zip", export_members(),
                                      extra=[(zipfile.ZipInfo("../../evil.png"), PHOTO)]),
                  "../../evil.png", "'..'"),
    "absolute": (lambda p: write_zip(p / "a.zip", export_members(),
                                     extra=[(zipfile.ZipInfo("/etc/evil.png"), PHOTO)]),
                 "/etc/evil.png", "absolute"),
    "symlink": (lambda p: write_zip(p / "s.zip", export_members(),
                                    extra=[(_symlink_info(), b"/etc/passwd")]),
                "file-Link1-x.png", "symbolic link"),
    "encrypted": (_encrypted, "file-Secret1-x.png", "encrypted"),
    "bomb ratio": (_bomb, "file-Bomb1-big.png", "zip bomb"),
    "corrupt member": (_corrupt_member, "file-PhotoAbc123-leaves.jpg", "CRC"),
    "truncated zip": (lambda p: _truncated(p), "t.zip", "not a valid zip"),
    "two conversations.json": (
        lambda p: write_zip(p / "two.zip", {**export_members("a/"), **export_members("b/")}),
        "conversations.json", "more than one"),
    "no conversations.json": (
        lambda p: write_zip(p / "none.zip", {"chat.html": b"<html/>"}),
        "conversations.json", "no conversations.json"),
}


def _truncated(tmp_path: Path) -> Path:
    good = write_zip(tmp_path / "good.zip", export_members())
    bad = tmp_path / "t.zip"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    return bad


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_zip_is_refused_naming_the_member_with_nothing_stored(tmp_path, case):
    make, member, why = HOSTILE[case]
    src = make(tmp_path)
    root = tmp_path / "m"
    Memory.open(root).commit("already here", summary="kept")
    before = tree(root)
    r = run_cli("import", "--from", "chatgpt", str(src), root=root)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert member in r.stderr and why in r.stderr, r.stderr
    assert tree(root) == before
    assert Memory.open(root).fsck() == []
    # never extracted: nothing named after a member appeared anywhere near the zip
    assert not (tmp_path.parent / "evil.png").exists() and not Path("/etc/evil.png").exists()


@pytest.mark.parametrize("limits, why", [
    (ZipLimits(total=1024), "total"),
    (ZipLimits(member_size=1024), "conversations.json"),
    (ZipLimits(members=3), "members"),
])
def test_size_and_count_caps_refuse_before_anything_is_read(tmp_path, limits, why):
    src = write_zip(tmp_path / "e.zip", export_members())
    mem = Memory.open(tmp_path / "m")
    with pytest.raises(FsmemError, match=why):
        import_chatgpt(mem, str(src), limits=limits)
    assert mem.units("documents") == [] and mem.fsck() == []


def test_a_symlink_or_fifo_in_place_of_the_zip_is_refused(tmp_path):
    real = write_zip(tmp_path / "real.zip", export_members())
    (tmp_path / "link.zip").symlink_to(real)
    os.mkfifo(tmp_path / "fifo.zip")
    mem = Memory.open(tmp_path / "m")
    for name in ("link.zip", "fifo.zip"):
        with pytest.raises(FsmemError, match=name):
            import_chatgpt(mem, str(tmp_path / name))
    assert mem.units("documents") == []
