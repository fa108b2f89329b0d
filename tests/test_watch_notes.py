"""``fsmem watch`` takes a dropped folder of notes (an Obsidian vault, a Notion export): each
note one L2 unit, its text byte-exact, the images it embeds as media blocks of its unit, an
image no note embeds a unit of its own; hidden entries skipped; any hostile entry rejects the
whole folder with nothing stored; a folder still being copied is not taken half-way; a folder
dropped twice is stored once. With the real daemon (``python -m fsmem.watch``) as a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path

from conftest import STRESS, crash_points, fsmem_process, make_png
from fsmem import Memory, Reader
from fsmem.format.timestamps import Timestamp
from test_watch import (
    Daemon,
    assert_clean,
    event_ids,
    manifests,
    once,
    store,
    store_snapshot,
    wait_for,
)

PIC = make_png(20, 10, seed=7)
LONE = make_png(6, 8, seed=3)
MTIME = 1_700_000_000   # 2023-11-14T22:13:20Z: what each unit's time must be
NOTES = {
    "Home.md": "# Kitchen appliances\n\nThe espresso machine gasket leaks.\r\n"
               "![the machine](assets/pic.png \"photo\")\n".encode(),
    "projects/solar/roof.md": "Roof panels gave 14.2 kWh today.\n\n![[pic.png|200]]\n"
                              "![gone](nowhere.png) ![web](https://example.com/x.png)\n".encode(),
    "projects/wifi.txt": "\ufeffwifi password is hunter2, router in the hallway\n".encode(),
}
IMAGES = {"assets/pic.png": PIC, "assets/scans/lone.png": LONE}
HIDDEN = {".obsidian/app.json": b"{}", ".DS_Store": b"\x00\x01bud1",
          ".git/HEAD": b"ref: refs/heads/main\n", "projects/draft.md~": b"old\n"}


def vault(at: Path, files: dict[str, bytes] | None = None) -> Path:
    """A notes tree at ``at`` (files: path -> bytes), every mtime set to MTIME."""
    for rel, data in (files if files is not None else {**NOTES, **IMAGES, **HIDDEN}).items():
        p = at / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (MTIME, MTIME))
    return at


def drop(tmp_path: Path, inbox: Path, name: str, files: dict[str, bytes] | None = None) -> None:
    """Build the tree outside the inbox, then move it in with one rename (as a user would)."""
    src = vault(tmp_path / "drops" / name, files)
    os.rename(src, inbox / name)


def outcomes(r) -> dict[str, dict]:
    return {o["name"]: o for o in map(json.loads, r.stdout.splitlines()) if "status" in o}


def by_path(root: Path) -> dict[str, object]:
    """note_path -> manifest, for every unit of documents/."""
    return {m.meta["note_path"]: m for w, m in manifests(root).items()
            if w.startswith("documents/") and "note_path" in m.meta}


# -- what a notes folder becomes --------------------------------------------------------------

def test_a_notes_tree_becomes_documents_with_its_images(tmp_path):
    root, inbox = store(tmp_path)
    d = Daemon(root)
    try:
        drop(tmp_path, inbox, "vault")
        wait_for(lambda: d.outcomes(), 20, d)
    finally:
        assert d.stop() == 0
    (out,) = [r for r in d.records() if "status" in r]
    assert out["status"] == "ingested" and out["kind"] == "notes", out
    assert len(out["units"]) == 4, out
    assert sorted(out["skipped"]) == [".DS_Store", ".git/", ".obsidian/", "projects/draft.md~"]
    units = by_path(root)
    assert set(units) == {*NOTES, "assets/scans/lone.png"}
    mem = Memory.open(root)
    for rel, data in NOTES.items():
        m = units[rel]
        (ev,) = m.events
        (text,) = [b for b in ev.blocks if b.role == "input"]
        assert mem.read_block(text.digest) == data, rel          # the block is the file
        assert mem.document(m.id).events[0].input.encode() == data, rel
        assert m.created_at == ev.timestamp == Timestamp(MTIME * 10**9), rel
        assert m.meta["inbox_name"] == "vault" and m.source == "inbox"
    assert units["Home.md"].summary == "Kitchen appliances"     # its first heading
    assert units["projects/solar/roof.md"].summary == "roof"    # else the file name's stem
    assert units["projects/wifi.txt"].summary == "wifi"

    def images(rel: str) -> list[bytes]:
        return [mem.read_block(b.digest) for ev in units[rel].events for b in ev.blocks
                if b.role == "attachment"]
    assert images("Home.md") == [PIC]                  # ![alt](assets/pic.png "title")
    assert images("projects/solar/roof.md") == [PIC]   # ![[pic.png|200]], found by name
    assert images("projects/wifi.txt") == []
    assert images("assets/scans/lone.png") == [LONE]   # embedded by no note: its own unit
    (att,) = [b for ev in units["Home.md"].events for b in ev.blocks if b.role == "attachment"]
    assert (att.mime, att.width, att.height) == ("image/png", 20, 10)
    assert "2 embeds name no file" not in out["reason"] and "1 embeds" in out["reason"]

    reader = Reader.open(root)
    (hit,) = [h for h in reader.search("wifi password hallway", top_k=3)
              if h.unit_id == units["projects/wifi.txt"].id]
    assert hit.layer == "documents"
    assert reader.query("espresso gasket")[0].unit_id == units["Home.md"].id
    assert reader.query("roof panels kWh")[0].unit_id == units["projects/solar/roof.md"].id
    assert [n for n in os.listdir(inbox) if not n.startswith(".")] == []
    assert_clean(root)


def test_hidden_and_temporary_entries_are_skipped_and_counted(tmp_path):
    root, inbox = store(tmp_path)
    drop(tmp_path, inbox, "v", {"note.md": b"# only this\n", **HIDDEN,
                                ".trash/old.md": b"deleted note\n", "empty.md": b""})
    r = once(root)
    assert r.returncode == 0, r.stderr
    (out,) = outcomes(r).values()
    assert out["status"] == "ingested" and len(out["units"]) == 1, out
    assert sorted(out["skipped"]) == [".DS_Store", ".git/", ".obsidian/", ".trash/",
                                      "empty.md", "projects/draft.md~"]
    assert "skipped 6" in out["reason"]
    (m,) = by_path(root).values()
    assert m.summary == "only this"
    texts = [Memory.open(root).document(u.split("/")[1]).events[0].input for u in out["units"]]
    assert texts == ["# only this\n"]
    assert_clean(root)


# -- hostile folders ----------------------------------------------------------------------

def _many(v: Path) -> None:
    """10,001 (empty) notes: one file over the cap, all of them skipped as empty otherwise."""
    (v / "many").mkdir()
    for i in range(10_001):
        (v / "many" / f"{i}.md").write_bytes(b"")

def test_a_folder_with_one_bad_entry_is_rejected_whole_and_nothing_is_stored(tmp_path):
    root, inbox = store(tmp_path)
    Memory.open(root).commit("already here", summary="kept")
    secret = tmp_path / "secret.md"
    secret.write_text("TOP-SECRET-OUTSIDE-THE-ROOT\n")
    good = {"a.md": b"# fine\n", "sub/b.md": b"also fine\n", "sub/p.png": make_png(seed=11)}
    deep = "/".join(f"d{i}" for i in range(9))
    bad: dict[str, tuple[dict, object, str]] = {   # folder -> (files, how to spoil it, why)
        "symlink": ({}, lambda v: os.symlink(secret, v / "sub" / "evil.md"),
                    "sub/evil.md: a symbolic link"),
        "dirlink": ({}, lambda v: os.symlink(tmp_path, v / "sub" / "out"),
                    "sub/out: a symbolic link"),
        "fifo": ({}, lambda v: os.mkfifo(v / "sub" / "pipe.md"), "sub/pipe.md: a FIFO"),
        "latin1": ({"sub/café.md": "café".encode("latin-1")}, None,
                   "sub/café.md: not UTF-8"),
        "nul": ({"n.txt": b"a\x00b"}, None, "n.txt: contains NUL"),
        "unknown": ({"sub/data.bin": b"\x01\x02"}, None, "sub/data.bin: unsupported type"),
        "fakeimg": ({"sub/x.png": b"not a png"}, None, "sub/x.png: named like media"),
        "hardlink": ({}, lambda v: os.link(v / "a.md", tmp_path / "a-elsewhere.md"),
                     "a.md: has 2 hard links"),
        "deep": ({f"{deep}/x.md": b"too deep\n"}, None, "folders nested deeper than 8"),
        "toobig": ({"sub/big.md": b"x" * 70_000}, None, "sub/big.md: 70000 bytes, over the cap"),
        "many": ({}, _many, "more than 10000 files"),
    }
    if os.geteuid() == 0:   # only root may make a device node
        bad["device"] = ({}, lambda v: os.mknod(v / "sub" / "null.md", stat.S_IFCHR | 0o600,
                                                os.makedev(1, 3)), "sub/null.md: a device node")
    for name, (extra, spoil, _) in bad.items():
        src = vault(tmp_path / "drops" / name, {**good, **extra})
        if spoil is not None:
            spoil(src)
        os.rename(src, inbox / name)
    before = store_snapshot(root)
    r = once(root, "--size-cap", "64k", timeout=120)
    assert r.returncode == 1, r.stderr   # --once exits 1 when it rejected something
    outs = outcomes(r)
    assert set(outs) == set(bad), outs
    for name, (_, _, why) in bad.items():
        assert outs[name]["status"] == "rejected" and why in outs[name]["reason"], outs[name]
        kept = inbox / ".rejected" / outs[name]["moved_to"]
        assert kept.is_dir() and not kept.is_symlink(), name
        assert why in Path(f"{kept}.error.txt").read_text(), name
    assert store_snapshot(root) == before
    assert not any("SECRET" in p.read_text(errors="replace")
                   for p in (root / "documents").rglob("*.txt"))
    assert secret.read_text() == "TOP-SECRET-OUTSIDE-THE-ROOT\n"
    assert_clean(root)


def test_a_crash_anywhere_in_a_folder_ingest_never_leaves_half_of_it(tmp_path):
    """SIGKILL-like exits (FSMEM_CRASH_AT) at sampled filesystem calls: a reader afterwards
    sees all of the folder's units or none, and the restart stores each exactly once."""
    files = {**NOTES, **IMAGES}

    def setup(name: str) -> Path:
        root, inbox = store(tmp_path / name)
        drop(tmp_path / name, inbox, "vault", files)
        return root
    clean = setup("clean")
    calls = tmp_path / "calls"
    r = once(clean, env={"FSMEM_CALLS_OUT": str(calls)})
    assert r.returncode == 0, r.stderr
    total, want = int(calls.read_text()), event_ids(clean)
    assert len(want) == 4 and set(want.values()) == {1}
    # the start, the middle and the publish near the end (every point under FSMEM_STRESS=1)
    points = crash_points(total, total) if STRESS else sorted(
        {1, total // 2, total * 3 // 4, total * 7 // 8, total - 2})
    for point in points:
        root = setup(f"c{point}")
        r = once(root, env={"FSMEM_CRASH_AT": str(point)})
        assert r.returncode in (0, 77), (point, r.stderr)
        seen = len(Reader.open(root).units("documents"))
        assert seen in (0, 4), (point, seen)   # never half a folder
        r = once(root)
        assert r.returncode == 0, (point, r.stderr)
        assert event_ids(root) == want, point
        assert_clean(root)


# -- quiescence and duplicates -------------------------------------------------------------

def test_a_folder_copied_in_slowly_is_taken_once_and_whole(tmp_path):
    """Files arrive two folders down, each after the last, with pauses shorter than the
    settle time, one of them written slowly while held open: the daemon waits for all."""
    root, inbox = store(tmp_path)
    d = Daemon(root)
    parts = [f"chunk {i} of the slow note\n".encode() * 20 for i in range(4)]
    try:
        deep = inbox / "slow" / "a" / "b"
        deep.mkdir(parents=True)
        for i in range(3):
            (deep / f"n{i}.md").write_bytes(f"# note {i}\n".encode())
            time.sleep(0.4)
        with open(deep / "growing.md", "wb") as fh:
            for part in parts:
                fh.write(part)
                fh.flush()
                time.sleep(0.4)
        (inbox / "slow" / "a" / "last.txt").write_bytes(b"the last file\n")
        wait_for(lambda: d.outcomes(), 20, d)
        time.sleep(1.2)   # anything more would be a second, partial ingest
    finally:
        assert d.stop() == 0
    (out,) = [r for r in d.records() if "status" in r]
    assert out["status"] == "ingested" and len(out["units"]) == 5, out
    units = by_path(root)
    assert set(units) == {"a/b/n0.md", "a/b/n1.md", "a/b/n2.md", "a/b/growing.md",
                          "a/last.txt"}
    mem = Memory.open(root)
    assert mem.document(units["a/b/growing.md"].id).events[0].input.encode() == b"".join(parts)
    assert_clean(root)


def test_the_same_folder_dropped_twice_is_stored_once(tmp_path):
    root, inbox = store(tmp_path)
    files = {**NOTES, **IMAGES}
    drop(tmp_path, inbox, "vault", files)
    assert once(root).returncode == 0
    before, ids = store_snapshot(root), event_ids(root)
    drop(tmp_path, inbox, "vault-copy", files)
    (inbox / "wifi.txt").write_bytes(NOTES["projects/wifi.txt"])   # one note dropped alone
    r = once(root)
    outs = outcomes(r)
    assert {n: o["status"] for n, o in outs.items()} == {"vault-copy": "duplicate",
                                                         "wifi.txt": "duplicate"}, outs
    assert store_snapshot(root) == before
    # the folder again with one note more: only that note is stored
    drop(tmp_path, inbox, "vault-more", {**files, "new.md": b"# a new note\n"})
    r = once(root)
    (out,) = outcomes(r).values()
    assert out["status"] == "ingested" and len(out["units"]) == 1, out
    assert "4 already stored" in out["reason"]
    after = event_ids(root)
    assert set(after.values()) == {1} and len(after) == len(ids) + 1
    assert by_path(root)["new.md"].summary == "a new note"
    assert_clean(root)



# -- fsmem import DIR: the same code path -----------------------------------------------------

def test_fsmem_import_of_a_notes_folder_stores_what_watch_would_once(tmp_path):
    import subprocess

    from test_watch import ENV

    def fsmem(root: Path, *args: str) -> subprocess.CompletedProcess:
        return fsmem_process(["--root", str(root), *args], module="fsmem", env=ENV, timeout=60)
    src = vault(tmp_path / "vault")
    watched, inbox = store(tmp_path / "w")
    shutil.copytree(src, inbox / "vault", symlinks=True)
    assert once(watched).returncode == 0
    root, _ = store(tmp_path / "i")
    r = fsmem(root, "import", str(src))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("imported 4 units (3 notes, 2 media files; skipped 4")

    def shape(at: Path) -> dict:
        return {rel: (m.summary, m.created_at, [[b.digest for b in ev.blocks] for ev in m.events])
                for rel, m in by_path(at).items()}
    assert shape(root) == shape(watched)
    before = store_snapshot(root)
    r = fsmem(root, "import", "--json", str(src))
    assert r.returncode == 0 and json.loads(r.stdout)["imported"] == [], r
    (tmp_path / "link").symlink_to(src)
    (src / "projects" / "bad.md").write_bytes(b"caf\xe9\n")
    for bad, why in ((tmp_path / "link", "a symbolic link"), (src, "projects/bad.md: not UTF-8")):
        r = fsmem(root, "import", str(bad))
        assert r.returncode == 1 and why in r.stderr and len(r.stderr.splitlines()) == 1, r
    assert store_snapshot(root) == before
    assert Memory.open(root).fsck() == []
    assert os.listdir(root / ".fsmem" / "staging") == []
