"""``fsmem watch``: the inbox protocol and index reconcile, with the real daemon as a subprocess.

Every accepted type and every rejection; a slow writer, a temp-name writer, a 2,000-file
burst, SIGKILL mid-burst and at chosen filesystem calls, SIGTERM, and cp/mv/rm of unit
directories reconciled into the index. Each test ends with ``fsck`` clean.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import blake3
import pytest

from conftest import PKG_ROOT, REPO, fsmem_process, make_png, make_wav
from fsmem import Memory
from fsmem.format.unit import read_manifest, verify_unit

stress = pytest.mark.skipif(os.environ.get("FSMEM_STRESS") != "1",
                            reason="stress run: set FSMEM_STRESS=1")
ENV = {**os.environ, "PYTHONPATH": str(PKG_ROOT)}


# -- helpers ----------------------------------------------------------------------------------

def once(root: Path, *args: str, env: dict | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess:
    return fsmem_process(["--root", str(root), "--once", "--json", *args], module="fsmem.watch",
                         env={**ENV, **(env or {})}, timeout=timeout)


class Daemon:
    """``python -m fsmem.watch --json`` in the background; its stdout goes to a file."""

    def __init__(self, root: Path, *args: str, env: dict | None = None) -> None:
        self.out = root.parent / f"watch-{time.monotonic_ns()}.out"
        self.err = self.out.with_suffix(".err")
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fsmem.watch", "--root", str(root), "--json", *args],
                cwd=str(REPO), env={**ENV, **(env or {})}, stdout=out, stderr=err)
        wait_for(lambda: any("watching" in r for r in self.records()), 20, self)

    def records(self) -> list[dict]:
        lines = self.out.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip().endswith("}")]

    def outcomes(self, status: str = "ingested") -> list[dict]:
        return [r for r in self.records() if r.get("status") == status]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def __repr__(self) -> str:
        return f"daemon rc={self.proc.poll()} stderr={self.err.read_text()[-2000:]!r}"


def wait_for(pred, timeout: float, what: object = "") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {what!r}")
        time.sleep(0.05)


def store(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "mem"
    Memory.open(root, durability="off")
    return root, root / "inbox"


def manifests(root: Path) -> dict[str, object]:
    """'layer/unit' -> manifest, for every unit."""
    out = {}
    for layer in ("context", "documents", "stablemem"):
        for name in sorted(os.listdir(root / layer)):
            out[f"{layer}/{name}"] = read_manifest(str(root / layer / name))
    return out


def event_ids(root: Path) -> Counter:
    return Counter(ev.id for m in manifests(root).values() for ev in m.events)


def text_file_ids(files: dict[str, bytes]) -> dict[str, str]:
    """The event id the daemon gives the single event of each dropped text file."""
    return {name: f"e-i{blake3.blake3(data).hexdigest()[:32]}-0" for name, data in files.items()}


def assert_clean(root: Path) -> None:
    assert Memory.open(root).fsck() == [], Memory.open(root).fsck()
    assert os.listdir(root / "inbox" / ".processing") == []
    assert os.listdir(root / ".fsmem" / "staging") == []


def store_snapshot(root: Path) -> dict[str, str]:
    """Every file under the layers with the BLAKE3 of its bytes."""
    snap = {}
    for layer in ("context", "documents", "stablemem"):
        for dirpath, _, files in os.walk(root / layer):
            for f in files:
                p = Path(dirpath) / f
                snap[str(p.relative_to(root))] = blake3.blake3(p.read_bytes()).hexdigest()
    return snap


def indexed_ids(root: Path) -> set[str] | None:
    """Unit ids in the saved index snapshot (what the daemon persisted), None if no index."""
    try:
        from fsmem.search.index import Index
    except ImportError:
        return None
    idx = Index(Memory.open(root))
    return set(idx.ids) if idx.load() else set()


def jpeg(w: int, h: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, h, w, 3) + b"\x01\x11\x00\x02\x11\x00\x03\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\x00" * 16 + b"\xff\xd9"


MEDIA = {
    "p.png": (make_png(40, 30), "image/png", (40, 30)),
    "j.jpg": (jpeg(33, 22), "image/jpeg", (33, 22)),
    "g.gif": (b"GIF89a" + struct.pack("<HH", 7, 5) + b"\x00" * 16 + b";", "image/gif", (7, 5)),
    "w.webp": (b"RIFF" + struct.pack("<I", 30) + b"WEBPVP8X" + struct.pack("<I", 10)
               + b"\x00" * 4 + (99).to_bytes(3, "little") + (49).to_bytes(3, "little")
               + b"\x00" * 8, "image/webp", (100, 50)),
    "a.wav": (make_wav(), "audio/wav", None),
    "m.mp3": (b"ID3\x03\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x00" + b"\x00" * 64, "audio/mpeg", None),
    "o.ogg": (b"OggS\x00\x02" + b"\x00" * 64, "audio/ogg", None),
    "v.mp4": (struct.pack(">I", 24) + b"ftypisom\x00\x00\x02\x00isomiso2" + b"\x00" * 64,
              "video/mp4", None),
    "d.pdf": (b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n", "application/pdf", None),
    # recognised by content, not by name
    "photo.txt": (make_png(8, 9, seed=3), "image/png", (8, 9)),
    "IMG_0001": (make_png(12, 6, seed=5), "image/png", (12, 6)),
}


# -- what is accepted ---------------------------------------------------------------------------

def test_every_accepted_type(tmp_path):
    root, inbox = store(tmp_path)
    for name, (data, _, _) in MEDIA.items():
        (inbox / name).write_bytes(data)
    (inbox / "chat.jsonl").write_text(
        '{"input": "咖啡机漏水", "response": "换密封圈", "tools_used": ["manual"], '
        '"tool_results": [{"name": "manual", "output": "BES870 §4.2"}]}\n'
        '{"content": "记得买滤芯", "role": "user", "layer": "context"}\n'
        '{"content": "好的", "role": "assistant", "channel": "qq", "layer": "context"}\n')
    (inbox / "one.json").write_text(json.dumps(
        [{"input": "solar 14.2 kWh", "source": "roof",
          "attachments": [{"data": __import__("base64").b64encode(make_png(3, 4)).decode(),
                           "mime": "image/png", "name": "roof.png"}]}]))
    (inbox / "notes.md").write_text("intro line\n\n## 光伏板 ##\n\nbody\n")
    (inbox / "plain.txt").write_text("just some text\n")
    other = Memory.open(tmp_path / "other", durability="off")
    uid = other.commit("a unit restored from a backup", summary="restored",
                       attachments=[__import__("fsmem").MediaAttachment(data=make_png(5, 5),
                                                                         mime="image/png")])
    shutil.copytree(tmp_path / "other" / "documents" / uid, inbox / uid)

    r = once(root)
    assert r.returncode == 0, r.stderr
    outs = {o["name"]: o for o in map(json.loads, r.stdout.splitlines()) if "status" in o}
    assert {o["status"] for o in outs.values()} == {"ingested"}, outs
    assert len(outs) == len(MEDIA) + 5
    units = manifests(root)

    def unit_of(name: str):
        (where,) = [u for u in outs[name]["units"] if u.startswith("documents/")]
        return units[where]

    for name, (data, mime, dims) in MEDIA.items():
        m = unit_of(name)
        (att,) = [b for ev in m.events for b in ev.blocks if b.role == "attachment"]
        assert (att.mime, att.size) == (mime, len(data)), name
        assert att.digest == blake3.blake3(data).hexdigest()
        assert (att.width, att.height) == (dims or (None, None)), name
    chat = outs["chat.jsonl"]["units"]
    assert [u.split("/")[0] for u in chat] == ["documents", "context", "context"]
    l2 = units[chat[0]].events[0]
    assert l2.tools_used == ["manual"] and l2.tool_results[0].name == "manual"
    timeline = [e.input or e.response for e in Memory.open(root).timeline()]
    assert timeline == ["记得买滤芯", "好的"]
    assert unit_of("one.json").events[0].source == "roof"
    assert unit_of("notes.md").summary == "光伏板"
    assert unit_of("plain.txt").summary == "plain.txt"
    assert Memory.open(root).document(unit_of("notes.md").id).events[0].input.endswith("body\n")
    # the unit directory: verified and adopted whole, under its own id
    assert outs[uid]["units"] == [f"documents/{uid}"]
    assert verify_unit(str(root / "documents" / uid)) == (units[f"documents/{uid}"], [])
    assert units[f"documents/{uid}"].events == read_manifest(
        str(tmp_path / "other" / "documents" / uid)).events
    assert os.listdir(inbox / ".rejected") == []
    assert [n for n in os.listdir(inbox) if not n.startswith(".")] == []
    assert_clean(root)


def test_duplicates_are_reported_not_stored_twice(tmp_path):
    root, inbox = store(tmp_path)
    other = Memory.open(tmp_path / "other", durability="off")
    uid = other.commit("restored twice", summary="r")
    src = tmp_path / "other" / "documents" / uid
    (inbox / "a.md").write_text("# same\n")
    (inbox / "p.png").write_bytes(make_png())
    shutil.copytree(src, inbox / uid)
    assert once(root).returncode == 0
    before = store_snapshot(root)
    (inbox / "b.md").write_text("# same\n")
    (inbox / "q.png").write_bytes(make_png())
    shutil.copytree(src, inbox / uid)
    r = once(root)
    outs = [json.loads(line) for line in r.stdout.splitlines() if '"status"' in line]
    assert sorted((o["name"], o["status"]) for o in outs) == [
        ("b.md", "duplicate"), ("q.png", "duplicate"), (uid, "duplicate")]
    assert store_snapshot(root) == before
    assert "same content as documents/" in (inbox / ".rejected" / "b.md.error.txt").read_text()
    assert_clean(root)


# -- what is rejected -------------------------------------------------------------------------

def test_every_rejection_leaves_the_store_unchanged(tmp_path):
    root, inbox = store(tmp_path)
    Memory.open(root).commit("already here", summary="kept")
    before = store_snapshot(root)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-OUTSIDE-THE-ROOT\n")
    (inbox / "bad.jsonl").write_text('{"input": "ok"}\n{"input": "missing brace"\n')
    (inbox / "unknown.jsonl").write_text('{"input": "x", "colour": "red"}\n')
    (inbox / "layer.jsonl").write_text('{"input": "x", "layer": "stablemem"}\n')
    (inbox / "pathatt.jsonl").write_text(
        '{"input": "x", "attachments": [{"path": "../secret.txt"}]}\n')
    (inbox / "data.bin").write_bytes(b"\x00\x01binary")
    (inbox / "big.txt").write_text("x" * 5000)
    (inbox / "link.txt").symlink_to(secret)
    os.mkfifo(inbox / "pipe.md")
    (inbox / "hard.txt").write_text("two names\n")
    os.link(inbox / "hard.txt", tmp_path / "elsewhere.txt")
    (inbox / "empty.md").write_bytes(b"")
    (inbox / "fake.png").write_text("not a png at all")
    (inbox / "latin1.txt").write_bytes("café".encode("latin-1"))
    # a folder of notes is taken now (tests/test_watch_notes.py); one bad note in it
    # rejects the whole folder
    (inbox / "folder" / "sub").mkdir(parents=True)
    (inbox / "folder" / "x.txt").write_text("x")
    (inbox / "folder" / "sub" / "latin1.md").write_bytes("café".encode("latin-1"))
    (inbox / "bad.name").mkdir()
    other = Memory.open(tmp_path / "other", durability="off")
    uid = other.commit("to be tampered with")
    shutil.copytree(tmp_path / "other" / "documents" / uid, inbox / uid)
    block = next(p for p in (inbox / uid).iterdir() if p.suffix == ".txt")
    block.chmod(0o644)
    block.write_text("TO be tampered with")  # same size, other bytes
    newline = "evil\nname.bin"
    (inbox / newline).write_bytes(b"\x00zz")

    r = once(root, "--size-cap", "4k", timeout=60)
    assert r.returncode == 1, r.stderr  # --once exits 1 when it rejected something
    outs = {o["name"]: o for o in map(json.loads, r.stdout.splitlines()) if "status" in o}
    expect = {
        "bad.jsonl": "line 2", "unknown.jsonl": "unknown field", "layer.jsonl": "layer must be",
        "pathatt.jsonl": "record's folder", "data.bin": "unsupported type", "big.txt": "size cap",
        "link.txt": "symbolic link", "pipe.md": "FIFO", "hard.txt": "2 hard links",
        "empty.md": "empty", "fake.png": "content is not one", "latin1.txt": "not UTF-8",
        "folder": "sub/latin1.md: not UTF-8", "bad.name": "neither manifest.json", uid: "bytes hash to", newline: "unsupported type",
    }
    assert set(outs) == set(expect), outs
    for name, why in expect.items():
        assert outs[name]["status"] == "rejected" and why in outs[name]["reason"], outs[name]
        kept = inbox / ".rejected" / outs[name]["moved_to"]
        assert os.path.lexists(kept), name
        text = Path(f"{kept}.error.txt").read_text()
        assert why in text, text
    assert (inbox / ".rejected" / "link.txt").is_symlink()  # moved, never followed
    assert (tmp_path / "elsewhere.txt").read_text() == "two names\n"
    assert "evil\\x0aname.bin" in (inbox / ".rejected" / f"{newline}.error.txt").read_text()
    assert store_snapshot(root) == before
    assert not any("SECRET" in p.read_text(errors="replace")
                   for p in (root / "documents").rglob("*.txt"))
    assert [n for n in os.listdir(inbox) if not n.startswith(".")] == []
    assert_clean(root)


def test_hostile_names_and_ignored_names(tmp_path):
    root, inbox = store(tmp_path)
    long = "长" * 80 + ".md"  # 243 bytes: the claim and error names must still fit
    files = {"multi\nline.md": b"# a newline in the name\n", long: b"# long\n",
             "back\\slash..md": b"dots inside\n"}
    for name, data in files.items():
        (inbox / name).write_bytes(data)
    for ignored in (".hidden.md", "..dots.md", "draft.md.tmp", "dl.part", "notes.md~"):
        (inbox / ignored).write_text("not yet")
    r = once(root)
    assert r.returncode == 0, r.stderr
    ids = event_ids(root)
    assert all(ids[i] == 1 for i in text_file_ids(files).values())
    summaries = {m.summary for m in manifests(root).values()}
    assert "a newline in the name" in summaries
    assert sorted(os.listdir(inbox)) == sorted(
        [".processing", ".rejected", ".hidden.md", "..dots.md", "draft.md.tmp", "dl.part",
         "notes.md~"])
    assert_clean(root)


# -- writers, bursts, crashes -------------------------------------------------------------------

def test_slow_writer_is_taken_once_with_its_final_digest(tmp_path):
    root, inbox = store(tmp_path)
    d = Daemon(root)
    try:
        chunks = [f"part {i} ".encode() * 50 for i in range(5)]
        with open(inbox / "slow.txt", "wb") as fh:
            time.sleep(0.8)  # an empty file, open for writing, longer than the settle time
            for chunk in chunks:
                fh.write(chunk)
                fh.flush()
                time.sleep(0.4)
        final = b"".join(chunks)
        wait_for(lambda: d.outcomes(), 10, d)
        time.sleep(0.5)
        assert [o["name"] for o in d.records() if "status" in o] == ["slow.txt"]
    finally:
        assert d.stop() == 0
    (uid,) = os.listdir(root / "documents")
    m = read_manifest(str(root / "documents" / uid))
    assert m.meta["inbox_digest"] == blake3.blake3(final).hexdigest()
    assert Memory.open(root).document(uid).events[0].input == final.decode()
    assert_clean(root)


def test_temp_name_writers_are_taken_once(tmp_path):
    root, inbox = store(tmp_path)
    d = Daemon(root)
    try:
        (inbox / ".a.md.tmp").write_text("# written under a temp name\n")
        os.rename(inbox / ".a.md.tmp", inbox / "a.md")
        (inbox / "b.txt.part").write_text("a download\n")
        time.sleep(0.6)  # .part stays untouched while it has that name
        os.rename(inbox / "b.txt.part", inbox / "b.txt")
        (tmp_path / "c.md").write_text("# written outside, moved in\n")
        os.rename(tmp_path / "c.md", inbox / "c.md")
        wait_for(lambda: len(d.outcomes()) >= 3, 10, d)
        time.sleep(0.5)
        assert sorted(o["name"] for o in d.records() if "status" in o) == ["a.md", "b.txt",
                                                                          "c.md"]
    finally:
        assert d.stop() == 0
    assert len(os.listdir(root / "documents")) == 3
    assert_clean(root)


def drop_burst(inbox: Path, n: int) -> dict[str, bytes]:
    files = {f"f{i:05d}.txt": f"burst file {i}\n".encode() for i in range(n)}
    for name, data in files.items():
        (inbox / name).write_bytes(data)
    return files


def assert_each_once(root: Path, files: dict[str, bytes]) -> None:
    ids = event_ids(root)
    want = text_file_ids(files)
    missing = [n for n, i in want.items() if ids[i] != 1]
    assert not missing, (len(missing), missing[:5], [ids[want[n]] for n in missing[:5]])
    assert sum(ids.values()) == len(files)


def test_burst_of_2000_files_all_ingested(tmp_path):
    root, inbox = store(tmp_path)
    d = Daemon(root)
    try:
        files = drop_burst(inbox, 2000)
        wait_for(lambda: len(d.outcomes()) >= 2000, 90, d)
    finally:
        assert d.stop() == 0
    assert_each_once(root, files)
    assert [n for n in os.listdir(inbox) if not n.startswith(".")] == []
    assert_clean(root)


def test_sigkill_mid_burst_then_restart_ingests_each_file_once(tmp_path):
    root, inbox = store(tmp_path)
    files = drop_burst(inbox, 600)
    d = Daemon(root)
    wait_for(lambda: len(os.listdir(root / "documents")) >= 150, 60, d)
    d.proc.kill()
    d.proc.wait(timeout=10)
    claimed = os.listdir(inbox / ".processing")
    stored = len(os.listdir(root / "documents"))
    assert stored < len(files)
    r = once(root)
    assert r.returncode == 0, r.stderr
    resumed = [o for o in map(json.loads, r.stdout.splitlines())
               if "before a restart" in o.get("reason", "")]
    assert len(resumed) <= len(claimed)
    assert_each_once(root, files)
    assert_clean(root)


def test_lost_events_are_caught_by_the_periodic_rescan(tmp_path):
    root, inbox = store(tmp_path)
    d = Daemon(root, "--rescan", "1", env={"FSMEM_WATCH_DROP_EVENTS": "1"})
    try:
        files = drop_burst(inbox, 50)
        # every inbox event is dropped (FSMEM_WATCH_DROP_EVENTS): what is found, a scan found
        wait_for(lambda: len(d.outcomes()) >= 50, 60, d)
    finally:
        assert d.stop() == 0
    assert_each_once(root, files)
    assert_clean(root)


def _crash_inbox(tmp_path: Path, name: str) -> tuple[Path, dict[str, bytes]]:
    """A store whose inbox holds one file of each kind: a chat log, JSON records, Markdown,
    plain text, an image, a sound and a dropped unit directory."""
    root, inbox = store(tmp_path / name)
    files = {
        "chat.jsonl": b'{"input": "q", "response": "r"}\n{"content": "hi", "role": "user", '
                      b'"layer": "context"}\n{"content": "yo", "role": "user", "layer": "context"}\n',
        "one.json": json.dumps([{"input": "solar 14.2 kWh", "source": "roof"}]).encode(),
        "notes.md": "intro line\n\n## 光伏板 ##\n\nbody\n".encode(),
        "plain.txt": b"just some text\n",
        "p.png": make_png(9, 9),
        "v.wav": make_wav(0.1),
    }
    for fname, data in files.items():
        (inbox / fname).write_bytes(data)
    other = Memory.open(tmp_path / f"{name}-other", durability="off")
    uid = other.commit("a unit restored from a backup", summary="restored")
    shutil.copytree(tmp_path / f"{name}-other" / "documents" / uid, inbox / uid)
    return root, files


def _watch_crash_points(tmp_path: Path) -> tuple[int, dict[str, int]]:
    """The number of fs calls of a clean ``watch --once`` over the crash inbox, and its events."""
    root, _ = _crash_inbox(tmp_path, "clean")
    out = tmp_path / "calls"
    r = once(root, env={"FSMEM_CALLS_OUT": str(out)})
    assert r.returncode == 0, r.stderr
    ids = event_ids(root)
    assert ids and set(ids.values()) == {1}
    return int(out.read_text()), ids


def crash_at(tmp_path: Path, point: int, total: int, n_events: int) -> None:
    root, files = _crash_inbox(tmp_path, f"c{point}")
    calls = tmp_path / f"c{point}.calls"
    r = once(root, env={"FSMEM_CRASH_AT": str(point), "FSMEM_CALLS_OUT": str(calls)})
    if r.returncode == 0:   # how files group into writer sessions depends on timing (each
        # session adds its change-feed marks): this run made fewer calls than the clean one
        assert int(calls.read_text()) < point, f"point {point} of {total} did not crash"
    else:
        assert r.returncode == 77, f"point {point} of {total}: exit {r.returncode} {r.stderr}"
    r = once(root)
    assert r.returncode == 0, r.stderr
    ids = event_ids(root)
    assert sorted(ids.values()) == [1] * n_events, (point, ids)
    atts = sorted(b.digest for m in manifests(root).values() for ev in m.events for b in ev.blocks
                  if b.role == "attachment")
    assert atts == sorted(blake3.blake3(files[n]).hexdigest() for n in ("p.png", "v.wav")), point
    assert_clean(root)


def test_crash_at_sampled_filesystem_calls_then_restart_is_exactly_once(tmp_path):
    from conftest import crash_points
    total, ids = _watch_crash_points(tmp_path)
    assert total > 40
    for point in crash_points(total, 6):
        crash_at(tmp_path, point, total, len(ids))


@pytest.mark.stress
@stress
def test_crash_at_every_filesystem_call(tmp_path):
    total, ids = _watch_crash_points(tmp_path)
    for point in range(1, total + 1):
        crash_at(tmp_path, point, total, len(ids))


def test_sigterm_stops_cleanly_and_the_rest_is_taken_later(tmp_path):
    root, inbox = store(tmp_path)
    files = drop_burst(inbox, 800)
    d = Daemon(root)
    wait_for(lambda: len(d.outcomes()) >= 30, 60, d)
    assert d.stop(signal.SIGTERM, timeout=60) == 0   # a generous deadline, not a measurement
    assert_clean(root)  # nothing half-made, no claim left behind
    assert once(root).returncode == 0
    assert_each_once(root, files)
    assert_clean(root)


# -- external edits ---------------------------------------------------------------------------

def test_cp_mv_rm_of_unit_directories_are_reconciled(tmp_path):
    root, _ = store(tmp_path)
    mem = Memory.open(root, durability="off")
    keep = mem.commit("屋顶光伏板今天发电 14.2 kWh", summary="solar")
    moving = mem.commit("the coffee machine leaks from the water tank valve", summary="coffee")
    backup = tmp_path / "backup"
    backup.mkdir()
    subprocess.run(["cp", "-a", str(root / "documents" / moving), str(backup)], check=True)
    d = Daemon(root)
    try:
        def reflected(present: bool) -> None:
            def ok() -> bool:
                ids = indexed_ids(root)
                return ids is None or (moving in ids) == present
            wait_for(ok, 60, d)   # a generous deadline, not a measurement
        reflected(True)
        subprocess.run(["rm", "-r", str(root / "documents" / moving)], check=True)
        reflected(False)
        subprocess.run(["cp", "-a", str(backup / moving), str(root / "documents")], check=True)
        reflected(True)
        hits = Memory.open(root).query("coffee machine water tank", top_k=1)
        assert [h.unit_id for h in hits] == [moving]
        subprocess.run(["mv", str(root / "documents" / moving), str(root / "context")],
                       check=True)
        reflected(False)
        assert moving not in [h.unit_id for h in Memory.open(root).query("coffee machine")]
        assert [e.input for e in Memory.open(root).timeline()] == [
            "the coffee machine leaks from the water tank valve"]
        subprocess.run(["mv", str(root / "context" / moving), str(root / "stablemem")],
                       check=True)
        time.sleep(1.0)
        changed = [c for r in d.records() if "reconciled" in r
                   for c in r["reconciled"]["changed"]]
        assert f"documents/{moving}" in changed and f"stablemem/{moving}" in changed
        assert keep in (indexed_ids(root) or {keep})
    finally:
        assert d.stop() == 0
    assert_clean(root)


def test_a_second_watcher_is_refused(tmp_path):
    root, _ = store(tmp_path)
    d = Daemon(root)
    try:
        r = once(root)
        assert r.returncode == 1 and "another fsmem watch" in r.stderr
    finally:
        assert d.stop() == 0


def test_add_cli_registers_the_watch_verb():
    import argparse

    from fsmem.ingest.watch import DEFAULT_SIZE_CAP
    from fsmem.interfaces.cli.watch import add_cli, cmd_watch
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", default="./memory")
    common.add_argument("--json", action="store_true")
    common.add_argument("-v", "--verbose", action="store_true")
    p = argparse.ArgumentParser(prog="fsmem")
    add_cli(p.add_subparsers(dest="verb", required=True), [common])
    a = p.parse_args(["watch", "--root", "R", "--once", "--size-cap", "2M", "--json"])
    assert (a.root, a.once, a.size_cap, a.json, a.fn) == ("R", True, 2 << 20, True, cmd_watch)
    b = p.parse_args(["watch", "--rescan", "5"])
    assert (b.once, b.size_cap, b.rescan) == (False, DEFAULT_SIZE_CAP, 5.0)


def test_record_folder_with_path_attachments(tmp_path):
    """A dropped folder of records may name its attachments by bare file name; nothing
    outside the folder (.., subpaths, symlinks) is ever read."""
    root, inbox = store(tmp_path)
    secret = tmp_path / "secret.png"
    secret.write_bytes(make_png(seed=9))
    staging = tmp_path / "drop"
    good = staging / "trip-2026"
    good.mkdir(parents=True)
    (good / "photo.png").write_bytes(make_png(seed=4))
    (good / "chat.jsonl").write_text(json.dumps({
        "role": "user", "content": "屋顶光伏板的照片", "channel": "qq",
        "attachments": [{"path": "photo.png", "mime": "image/png"}]}, ensure_ascii=False) + "\n")
    bad = staging / "sneaky"
    bad.mkdir()
    os.symlink(secret, bad / "link.png")
    (bad / "a.jsonl").write_text('{"input": "x", "attachments": [{"path": "link.png"}]}\n')
    up = staging / "upward"
    up.mkdir()
    (up / "a.jsonl").write_text('{"input": "x", "attachments": [{"path": "../secret.png"}]}\n')
    for d in (good, bad, up):
        os.rename(d, inbox / d.name)
    r = once(root, timeout=60)
    outs = {o["name"]: o for o in map(json.loads, r.stdout.splitlines()) if "status" in o}
    assert outs["trip-2026"]["status"] == "ingested", outs
    assert outs["sneaky"]["status"] == "rejected" and "link.png" in outs["sneaky"]["reason"]
    assert outs["upward"]["status"] == "rejected" and "own folder" in outs["upward"]["reason"]
    mem = Memory.open(root)
    (uid,) = [u.split("/")[1] for u in outs["trip-2026"]["units"]]
    ev = mem.document(uid).events[0]
    assert ev.input == "屋顶光伏板的照片" and ev.source == "qq"
    (img,) = [b for b in ev.blocks if b.modality == "image"]
    assert mem.read_block(img.digest) == make_png(seed=4) and img.width == 64
    assert_clean(root)


def test_a_dropped_folders_files_are_never_read_through_a_link(tmp_path):
    """Inside a dropped folder, a record file or a unit's block that is a symlink (or a second
    name of a file) outside the inbox is rejected, never read, even when its bytes are what
    the manifest promises (issue 29: the safe open of a folder's files)."""
    root, inbox = store(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "chat.jsonl").write_text('{"input": "TOP-SECRET record from outside"}\n')
    staging = tmp_path / "drop"
    records = staging / "linked-records"
    records.mkdir(parents=True)
    os.symlink(outside / "chat.jsonl", records / "chat.jsonl")
    other = Memory.open(tmp_path / "other", durability="off")
    uids = [other.commit(f"TOP-SECRET unit {i} with a linked block") for i in range(2)]
    for uid, how in zip(uids, ("symlink", "hardlink")):
        shutil.copytree(tmp_path / "other" / "documents" / uid, staging / uid)
        block = next(p for p in (staging / uid).iterdir() if p.suffix == ".txt")
        kept = outside / f"{uid}{block.suffix}"   # the same bytes, the digest matches
        shutil.copyfile(block, kept)
        block.unlink()
        (os.symlink if how == "symlink" else os.link)(kept, block)
    for d in (records, *(staging / uid for uid in uids)):
        os.rename(d, inbox / d.name)
    r = once(root, timeout=60)
    outs = {o["name"]: o for o in map(json.loads, r.stdout.splitlines()) if "status" in o}
    assert set(outs) == {"linked-records", *uids}, outs
    for name, o in outs.items():
        assert o["status"] == "rejected", (name, o)
    assert "symbolic link" in outs["linked-records"]["reason"]
    assert "symbolic link" in outs[uids[0]]["reason"] and "hard links" in outs[uids[1]]["reason"]
    assert not any("TOP-SECRET" in p.read_text(errors="replace")
                   for layer in ("context", "documents") for p in (root / layer).rglob("*")
                   if p.is_file())
    assert_clean(root)


def test_only_a_file_unchanged_for_the_settle_time_is_ready_at_first_look(tmp_path):
    """A file whose ctime is already older than the settle time is taken without a second
    wait (``watch --once`` of a full inbox starts at once); a fresh one still waits, and so
    does every file where leases are unavailable (the ctime alone is not trusted there)."""
    from fsmem.ingest.inbox import _InboxDirs
    from fsmem.ingest.watch import SETTLE_S, Watcher
    root, inbox = store(tmp_path)
    (inbox / "old.md").write_text("# dropped a while ago\n")
    time.sleep(SETTLE_S + 0.1)
    mem = Memory.open(root, durability="off")
    for leases in (True, False):
        watcher = Watcher(mem)
        watcher.dirs = _InboxDirs(mem.root)
        watcher._lease_ok = leases
        try:
            (inbox / "new.md").write_text("# just dropped\n")   # its ctime: now
            watcher._scan_inbox()
            assert watcher._ready(time.monotonic()) == (["old.md"] if leases else [])
        finally:
            watcher.dirs.close()
    mem.close()


# -- group commit: no per-file lock, one open per file ----------------------------------------

def test_a_claim_swapped_after_the_open_is_ingested_as_claimed_not_as_opened(tmp_path):
    """The watcher opens a file before its claim rename and hands that descriptor to the
    ingest; if the name was replaced in between, what the claim holds is what is stored."""
    from fsmem.ingest.inbox import Ingestor, _Ledger
    from fsmem.ingest.inbox_dirs import _InboxDirs
    root, inbox = store(tmp_path)
    (inbox / "a.txt").write_text("opened before the swap\n")
    fd = os.open(inbox / "a.txt", os.O_RDONLY)
    os.replace(inbox / "a.txt", tmp_path / "old.txt")
    (inbox / "a.txt").write_text("swapped in under the same name\n")
    mem = Memory.open(root)
    dirs = _InboxDirs(str(root))
    ledger = _Ledger(mem)
    ledger.load()
    try:
        claim = dirs.claim("a.txt")
        out = Ingestor(mem, dirs, ledger, 1 << 20).ingest(claim, "a.txt", fd=fd)
    finally:
        os.close(fd)
        ledger.close()
        dirs.close()
        mem.close()
    assert out.status == "ingested", out
    assert out.digest == blake3.blake3(b"swapped in under the same name\n").hexdigest()
    (where,) = manifests(root)
    stored = [p.read_bytes() for p in (root / where).glob("*.txt")]
    assert stored == [b"swapped in under the same name\n"]


def test_once_takes_the_writer_lock_per_slice_not_per_file_and_writes_the_ledger(tmp_path):
    from fsmem.store.store import Store
    from fsmem.ingest.watch import Watcher
    root, inbox = store(tmp_path)
    for i in range(60):
        (inbox / f"n{i:03d}.txt").write_text(f"note {i} about the boiler\n")
    taken = []
    acquire = Store._acquire

    def counting(self):  # the real lock is taken; only counted
        taken.append(1)
        return acquire(self)
    Store._acquire = counting
    try:
        counts = Watcher(Memory.open(root)).run(once=True)
    finally:
        Store._acquire = acquire
    assert counts["ingested"] == 60
    assert len(taken) < 30   # per file it was 60 and more
    lines = (root / ".fsmem" / "inbox.ledger").read_text().splitlines()
    assert len(lines) == 60 and all(len(line.split()) == 2 for line in lines)
    assert not list((inbox / ".processing").iterdir())


# -- group commit beside the ingest (a full batch's syncfs runs while the next is stored) ----

def _overlap_run(tmp_path: Path, monkeypatch, n: int, hook=None,
                 batch: int = 8) -> tuple[Path, dict, list, list]:
    """``watch --once`` in this process over ``n`` text files with batches of ``batch``,
    recording every filesystem call (and each report, as a mark) and running ``hook(op)``
    before each."""
    import fsmem.ingest.watch as watch
    from fsmem.format import fsops as _fsops
    monkeypatch.setattr(watch, "BATCH", batch)
    root, inbox = store(tmp_path)
    files = drop_burst(inbox, n)
    log: list[tuple] = []
    outs: list = []

    def report(out) -> None:
        outs.append(out)
        _fsops.record_mark(f"told {out.status} {out.name}")
    _fsops.set_recorder(log)
    _fsops.set_hook(hook)
    try:
        watch.Watcher(Memory.open(root), report=report).run(once=True)
    finally:
        _fsops.set_hook(None)
        _fsops.set_recorder(None)
    return root, files, log, outs


def test_a_claim_is_released_only_after_a_syncfs_that_began_after_its_unit_was_published(
        tmp_path, monkeypatch):
    """Full batches in the middle of a run are made durable by a syncfs in a thread, beside
    the next batch's ingest; still, each file leaves .processing only after a syncfs that
    began after its unit's publish rename, and is told only after that."""
    import threading
    syncers = set()

    def hook(op: str) -> None:
        if op == "fsync":
            syncers.add(threading.current_thread().name)
    root, files, log, outs = _overlap_run(tmp_path, monkeypatch, 40, hook)
    assert "fsmem-watch-sync" in syncers   # the overlap happened
    assert [o.status for o in outs] == ["ingested"] * 40
    _released_after_a_later_syncfs(log, outs)
    assert_each_once(root, files)
    assert_clean(root)


def _released_after_a_later_syncfs(log: list, outs: list) -> None:
    """Each ingested file left .processing only after a syncfs that began after its unit's
    publish rename, and was told only after that."""
    syncs = [j for j, op in enumerate(log) if op[0] == "syncfs"]
    for out in outs:
        (where,) = out.units
        published = next(j for j, op in enumerate(log)
                         if op[0] == "rename" and op[2].endswith("/" + where))
        released = next(j for j, op in enumerate(log) if op[0] == "unlink"
                        and "/inbox/.processing/" in op[1] and op[1].endswith("~" + out.name))
        told = log.index(("mark", f"told ingested {out.name}"))
        assert any(published < s < released for s in syncs), out.name
        assert released < told, out.name


def test_a_run_shorter_than_a_batch_still_syncs_beside_the_ingest(tmp_path, monkeypatch):
    """Fewer files than BATCH: once BATCH_MIN are stored and the sync thread is free, they are
    made durable there while the ingest goes on (continuous group commit), so the run's last,
    in-line syncfs covers only what came after; each file is still released only after a
    syncfs that began after its unit's publish rename, and told only after that."""
    import threading

    import fsmem.ingest.watch as watch
    monkeypatch.setattr(watch, "BATCH_MIN", 8)
    syncers = set()

    def hook(op: str) -> None:
        if op == "fsync":
            syncers.add(threading.current_thread().name)
    root, files, log, outs = _overlap_run(tmp_path, monkeypatch, 40, hook, batch=256)
    assert [o.status for o in outs] == ["ingested"] * 40
    syncs = [j for j, op in enumerate(log) if op[0] == "syncfs"]
    assert len(syncs) >= 2 and "fsmem-watch-sync" in syncers, (len(syncs), syncers)
    _released_after_a_later_syncfs(log, outs)
    assert_each_once(root, files)
    assert_clean(root)


def test_a_failed_overlapped_syncfs_withdraws_its_batch_and_what_was_published_meanwhile(
        tmp_path, monkeypatch):
    """The overlapped syncfs fails (EIO) after the ingest went on storing files: its batch and
    every unit published while it ran are withdrawn (their writeback may have failed inside
    it, and a later syncfs would not report that again), their claims kept; the next run
    stores each of them, and every file is stored exactly once."""
    import errno
    import threading
    gate, state = threading.Event(), {"failing": False, "renames": 0}

    def hook(op: str) -> None:
        if threading.current_thread().name == "fsmem-watch-sync":
            if op == "fsync" and not state["failing"]:
                state["failing"] = True
                gate.wait(30)   # until the ingest has published more units meanwhile
                raise OSError(errno.EIO, "injected EIO at the overlapped syncfs")
        elif state["failing"] and op == "rename":
            state["renames"] += 1   # a claim and a publish per file
            if state["renames"] >= 6:
                gate.set()
    root, files, log, outs = _overlap_run(tmp_path, monkeypatch, 40, hook)
    assert gate.is_set()
    deferred = {o.name for o in outs if o.status == "deferred"}
    ingested = {o.name for o in outs if o.status == "ingested"}
    assert len(deferred) >= 8 + 3 and len(deferred) + len(ingested) == 40, outs
    ids, want = event_ids(root), text_file_ids(files)
    assert all(ids[want[n]] == 0 for n in deferred)      # withdrawn: no unit left
    assert all(ids[want[n]] == 1 for n in ingested)
    claimed = {c.split("~", 1)[1] for c in os.listdir(root / "inbox" / ".processing")}
    assert claimed == deferred
    from fsmem.ingest.watch import Watcher
    Watcher(Memory.open(root)).run(once=True)
    assert_each_once(root, files)
    assert_clean(root)


def test_once_lists_documents_at_start_only_when_its_mtime_moved(tmp_path, monkeypatch):
    """Start-up reconcile costs O(changes), as any open: with the saved index proven in step
    with documents/ (its SEEN record), watch --once does not list documents/; a unit copied
    in with ``cp -a`` moves the mtime, is listed and indexed."""
    from fsmem.search.index import Index
    from fsmem.ingest.watch import Watcher
    root, _ = store(tmp_path)
    mem = Memory.open(root)
    for i in range(3):
        mem.commit(f"boiler note {i}", summary=f"n{i}")
    mem.close()
    old = time.time() - 60
    os.utime(root / "documents", (old, old))   # well before any listing: SEEN can prove it
    m = Memory.open(root)
    m.reconcile()   # a listing; saved with documents/'s stamp when it closes
    m.close()
    listings = []
    real = Index._listing

    def counting(self):
        listings.append(1)
        return real(self)
    monkeypatch.setattr(Index, "_listing", counting)
    Watcher(Memory.open(root)).run(once=True)
    assert listings == []
    other = Memory.open(tmp_path / "other", durability="off")
    uid = other.commit("a unit restored with cp -a", summary="restored")
    shutil.copytree(tmp_path / "other" / "documents" / uid, root / "documents" / uid)
    Watcher(Memory.open(root)).run(once=True)
    assert len(listings) == 1
    assert uid in indexed_ids(root)


def test_a_polling_watch_names_the_units_another_writer_committed(tmp_path):
    """FSMEM_WATCH_POLL=1 (what a shared filesystem chooses by itself): no inotify on the
    layers; the change feed is read every second, and the reconcile record names the units
    another writer committed and removed."""
    root, inbox = store(tmp_path)
    d = Daemon(root, "--rescan", "3600", env={"FSMEM_WATCH_POLL": "1"})
    try:
        assert [r["polling"] for r in d.records() if "watching" in r] == [True]
        other = Memory.open(root)
        uid = other.commit("a note from another writer about the attic fan")
        wait_for(lambda: any(uid in r.get("reconciled", {}).get("units", {}).get("added", [])
                             for r in d.records()), 60, d)
        other.remove(uid)
        wait_for(lambda: any(uid in r.get("reconciled", {}).get("units", {}).get("removed", [])
                             for r in d.records()), 60, d)
        other.close()
    finally:
        assert d.stop() == 0, d
