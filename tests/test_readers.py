"""Immutable units and lock-free readers (issue 11): readers never lock, create or write; a
reader sees one consistent state while writers change the store; snapshots."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PKG_ROOT, REPO, cli_env, fsmem_process, make_png
from fsmem import Event, Memory, Reader
from fsmem.memory.prune import watermark
from fsmem.memory.stablemem import find_cold
from fsmem.format.timestamps import Timestamp

STRESS = os.environ.get("FSMEM_STRESS") == "1"


def fsmem(*args: str, env: dict | None = None, timeout: float = 60):
    return fsmem_process(list(args), timeout=timeout, env=cli_env(**(env or {})))


def tree_state(root: Path, *, with_meta: bool = False) -> dict[str, tuple]:
    """Every file under the layers (and .fsmem when asked): bytes digest, mtime, inode."""
    out = {}
    for dirpath, dirnames, files in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if not with_meta and rel_dir.split(os.sep)[0] == ".fsmem":
            continue
        for name in files + [d for d in dirnames]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(open(p, "rb").read()).hexdigest()
            out[os.path.relpath(p, root)] = (digest, st.st_mtime_ns if stat.S_ISREG(st.st_mode)
                                             else 0)
    return out


def build_store(root: Path) -> Memory:
    """Three layers, media, a pruned archive, a recalled unit."""
    mem = Memory.open(root, context_capacity=4, context_protected=1)
    mem.commit("屋顶光伏板今天发电 14.2 kWh", summary="solar",
               attachments=[__import__("fsmem").MediaAttachment(data=make_png(), mime="image/png")])
    mem.commit("the coffee machine leaks from the water tank valve", summary="coffee")
    mem.commit("我家的猫叫年糕，今年三岁了", summary="cat")
    for i in range(8):
        mem.append(Event(source="qq", input=f"message {i} about the garden and tomatoes",
                         response=f"reply {i}"))
    mem.recall("coffee machine", top_k=1)
    mem.distill(max_age_s=0, max_access=100)
    mem.append(Event(source="qq", input="after distill: the cat sleeps"))
    mem.close()
    return mem


# -- (c) immutability --------------------------------------------------------------------

def test_hundred_queries_change_no_unit_file(tmp_path):
    root = tmp_path / "m"
    mem = build_store(root)
    before = tree_state(root)
    reader = Reader.open(root)
    for i in range(100):
        (reader if i % 2 else mem).query("garden tomatoes coffee 光伏", top_k=5)
    for _ in range(3):
        assert fsmem("query", "--root", str(root), "tomatoes").returncode == 0
    assert tree_state(root) == before     # bytes and mtimes of every manifest and block
    assert mem.fsck() == []


# -- (d) access counts drive find_cold ---------------------------------------------------

def test_access_counts_live_outside_units_and_drive_find_cold(tmp_path):
    root = tmp_path / "m"
    mem = Memory.open(root, auto_prune=False)
    a = mem.commit("alpha 冷文档 rarely read")
    b = mem.commit("beta 常用文档 read often")
    reader = Reader.open(root)
    assert reader.query("beta 常用文档", top_k=1)[0].unit_id == b      # a reader counts too
    assert fsmem("query", "--root", str(root), "--top-k", "1", "beta read often").returncode == 0
    later = Timestamp(Timestamp.now().ns + 73 * 3600 * 10**9)
    # HomeAgent's rule: cold when accessed at most twice (the write is the first access)
    # and the last access is 72 h old.
    assert mem.document(a).access_count == 1 and mem.document(b).access_count == 3
    assert find_cold(mem, now=later) == [a]
    assert find_cold(mem, now=later, max_access=3) == [a, b]
    assert find_cold(reader, now=later) == [a]
    mem.access.compact(force=True)                 # folding changes no count
    assert mem.document(b).access_count == 3 and find_cold(mem, now=later) == [a]


def test_prune_remainder_and_recall_keep_access_history(tmp_path):
    mem = Memory.open(tmp_path / "m", context_capacity=3, context_protected=1, auto_prune=False)
    x = mem.commit_events([Event(source="qq", input=f"piano lesson part {i}") for i in range(3)],
                          summary="piano")
    for _ in range(4):
        assert mem.query("piano lesson", top_k=1)[0].unit_id == x
    assert mem.recall("piano lesson", top_k=1) == [x]
    assert mem.document(x).access_count == 5          # kept through the recall (same unit)
    mem.append(Event(source="qq", input="the weather today"))
    mem.append(Event(source="qq", input="more about the weather"))
    mem.prune(query="piano lesson part 2")   # keeps one piano event: a remainder unit
    remainders = [u for u in mem.units("context")
                  if mem.document(u).summary == "piano"]
    assert remainders, "part of the piano unit should stay in L1"
    assert all(mem.document(u).access_count == 5 for u in remainders)
    assert mem.fsck() == []


# -- (f) read verbs on a missing path or a non-store -------------------------------------

READ_VERBS = [["ls"], ["show", "u-x"], ["query", "x"], ["timeline"], ["render", "--budget", "50"],
              ["stats"], ["fsck"], ["graph", "neighbors", "x"], ["graph", "search", "x"]]


@pytest.mark.parametrize("kind", ["missing", "empty", "file"])
def test_read_verbs_on_a_non_store_exit_1_and_create_nothing(tmp_path, kind):
    target = tmp_path / "nostore"
    if kind == "empty":
        target.mkdir()
    elif kind == "file":
        target.write_text("x")
    before = sorted(os.listdir(tmp_path))
    for verb in READ_VERBS:
        args = verb[:1] + ["--root", str(target)] + verb[1:] if verb[0] != "graph" else \
            verb[:2] + ["--root", str(target)] + verb[2:]
        r = fsmem(*args)
        assert r.returncode == 1, (verb, r.stderr)
        assert "not an fsmem store" in r.stderr and str(target) in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == before
    if kind == "empty":
        assert os.listdir(target) == []


def test_ls_at_filesystem_root_creates_nothing():
    r = fsmem("ls", "--root", "/")
    assert r.returncode == 1 and "not an fsmem store" in r.stderr
    assert not os.path.exists("/.fsmem") and not os.path.exists("/context")


def test_read_verbs_do_not_wait_for_a_held_writer_lock(tmp_path):
    root = tmp_path / "m"
    build_store(root)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(root / '.fsmem' / 'lock')!r}, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for verb in READ_VERBS[:7] + [["graph", "search", "cat"]]:
            args = verb[:1] + ["--root", str(root), "--json"] + verb[1:] if verb[0] != "graph" \
                else verb[:2] + ["--root", str(root), "--json"] + verb[2:]
            if verb[0] == "show":
                args[-1] = Reader.open(root).units("documents")[0]
            # no wait for the lock: a verb that took it would fail after FSMEM_LOCK_TIMEOUT,
            # one that blocked on it would meet the (generous) deadline
            r = fsmem(*args, env={"FSMEM_LOCK_TIMEOUT": "1"}, timeout=60)
            assert r.returncode == 0, (verb, r.stderr)
        # a writer does wait, and says so
        r = fsmem("commit", "--root", str(root), "x", env={"FSMEM_LOCK_TIMEOUT": "1"})
        assert r.returncode == 1 and "held by another writer" in r.stderr
    finally:
        holder.kill()
        holder.wait()


# -- (b) read-only mounts and chmod -R a-w -----------------------------------------------

def read_answers(root: Path, unit: str) -> dict[str, object]:
    out = {}
    seq = [("ls", []), ("show", [unit]), ("timeline", []), ("render", ["--budget", "80"]),
           ("stats", []), ("fsck", []), ("query", ["garden tomatoes"]),
           ("graph-search", ["cat"])]
    for verb, rest in seq:
        args = ["graph", "search", "--root", str(root), "--json", *rest] if verb == "graph-search" \
            else [verb, "--root", str(root), "--json", *rest]
        r = fsmem(*args)
        assert r.returncode == 0, (verb, r.stderr)
        text = r.stdout.replace(str(root), "ROOT")
        out[verb] = json.loads(text)
    # where the store is writable, the query above is counted: later reads see it
    out["show"].pop("access_count")
    out["show"].pop("last_access", None)
    return out


def test_read_verbs_on_chmod_a_w_copy_answer_the_same(tmp_path):
    root = tmp_path / "m"
    build_store(root)
    unit = Reader.open(root).units("documents")[0]
    ro = tmp_path / "ro"
    shutil.copytree(root, ro, symlinks=True)
    for dirpath, dirnames, files in os.walk(ro):
        for name in files + dirnames:
            p = os.path.join(dirpath, name)
            os.chmod(p, os.lstat(p).st_mode & ~0o222)
    os.chmod(ro, os.stat(ro).st_mode & ~0o222)
    try:
        before = tree_state(ro)
        ans_ro = read_answers(ro, unit)
        assert tree_state(ro) == before
        ans_rw = read_answers(root, unit)
        assert ans_ro == ans_rw
    finally:
        for dirpath, dirnames, files in os.walk(ro):
            os.chmod(dirpath, 0o755)


def _mount_ro(src: Path, dst: Path) -> bool:
    dst.mkdir()
    if os.geteuid() != 0:
        return False
    if subprocess.run(["mount", "--bind", str(src), str(dst)], capture_output=True).returncode:
        return False
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(dst)],
                      capture_output=True).returncode:
        subprocess.run(["umount", str(dst)])
        return False
    return True


def test_read_verbs_on_a_read_only_bind_mount_answer_the_same(tmp_path):
    root = tmp_path / "m"
    build_store(root)
    unit = Reader.open(root).units("documents")[0]
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, symlinks=True)
    mnt = tmp_path / "mnt"
    if not _mount_ro(copy, mnt):
        pytest.skip("needs root and mount --bind (tests run as root in CI)")
    try:
        with pytest.raises(OSError):
            (mnt / "probe").write_text("x")
        ans_ro = read_answers(mnt, unit)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    ans_rw = read_answers(copy, unit)
    assert ans_ro == ans_rw
    mem = Reader.open(copy)
    assert mem.fsck() == []


# -- (a) a reader process against a writer process ---------------------------------------

WRITER = r"""
import os, sys, time
from fsmem import Memory, Event
root, rounds, acks = sys.argv[1], int(sys.argv[2]), sys.argv[3]
min_rounds = int(sys.argv[4]) if len(sys.argv) > 4 else rounds
enough = os.path.join(os.path.dirname(acks), "reader.enough")   # the reader has its reads
mem = Memory.open(root, context_capacity=6, context_protected=2, durability="off")
words = ["garden", "coffee", "piano", "solar", "cat", "tomato", "valve", "lesson"]
with open(acks, "a", buffering=1) as ack:
    for i in range(rounds):
        if i >= min_rounds and os.path.exists(enough):
            break
        w = words[i % len(words)]
        eid = f"e-w{i:06d}"
        mem.append(Event(id=eid, source="qq", input=f"{w} note {i}", response=f"ok {i}"))
        ack.write(eid + "\n")
        if i % 7 == 3:
            mem.recall(words[(i + 3) % len(words)], top_k=1)
        if i % 11 == 5:
            uid = mem.commit(f"document {i} about {w}")
            ack.write(f"C{uid}\n")
        if i % 29 == 13:
            mem.distill(max_age_s=0, max_access=1000)
mem.close()
print(i + 1)
"""

READER = r"""
import os, sys, json, time
from fsmem import Reader
from fsmem.format.layout import LAYERS
root, acks, mode = sys.argv[1], sys.argv[2], sys.argv[3]
minimum = int(sys.argv[4])
reader = Reader.open(root)
stats = {"reads": 0, "timelines": 0, "checks": 0, "queries": 0, "fsck": 0}

def acked():
    try:
        lines = open(acks).read().split("\n")[:-1]
    except FileNotFoundError:
        return set(), set()
    return ({l for l in lines if l.startswith("e-")},
            {l[1:] for l in lines if l.startswith("C")})

def all_layers(view):
    # What ``consistent`` returns is one state; a read it takes again (a writer's change
    # began or ended meanwhile) may see two, so twice-seen events are judged after it.
    seen, units, twice = {}, set(), []
    for layer in LAYERS:
        for u in reader._units_of(view, layer):
            units.add(u.unit_id)
            for ev in u.manifest.events:
                if ev.id in seen:
                    twice.append(f"event {ev.id} in {seen[ev.id]} and {layer}/{u.unit_id}")
                seen[ev.id] = f"{layer}/{u.unit_id}"
    return seen, units, twice

i = 0
done_flag = os.path.join(os.path.dirname(acks), "writer.done")
while True:
    finished = os.path.exists(done_flag)
    if stats["reads"] >= minimum:
        open(os.path.join(os.path.dirname(acks), "reader.enough"), "w").close()
        if finished:
            break
    events_acked, units_acked = acked()
    k = i % 10
    if k < 6 or mode == "timeline":
        tl = reader.timeline()
        ids = [e.id for e in tl]
        assert len(ids) == len(set(ids)), "an event twice in the timeline"
        stats["timelines"] += 1
    elif k < 8:
        seen, units, twice = reader.consistent(all_layers)
        assert not twice, twice
        missing = events_acked - set(seen)
        assert not missing, f"acknowledged events in no layer: {sorted(missing)[:5]}"
        gone = units_acked - units - {None}
        # a committed document may have been recalled and pruned into other units: its
        # events must still be somewhere (checked above); only its id may change
        stats["checks"] += 1
    elif k == 8:
        reader.query("garden coffee piano", top_k=3)
        reader.render(200)
        reader.units("context")
        stats["queries"] += 1
    else:
        findings = reader.fsck(read_data=False)
        assert findings == [], findings
        stats["fsck"] += 1
    stats["reads"] += 1
    i += 1
print(json.dumps(stats))
"""


def _reader_vs_writer(tmp_path: Path, rounds: int, minimum_reads: int, mode: str,
                      min_rounds: int | None = None) -> dict:
    root = tmp_path / "m"
    Memory.open(root).close()
    acks = tmp_path / "acks"
    env = {**os.environ, "PYTHONPATH": str(PKG_ROOT)}
    reader = subprocess.Popen([sys.executable, "-c", READER, str(root), str(acks), mode,
                               str(minimum_reads)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    writer = subprocess.run([sys.executable, "-c", WRITER, str(root), str(rounds), str(acks),
                             str(rounds if min_rounds is None else min_rounds)],
                            env=env, capture_output=True, text=True, timeout=3600)
    (tmp_path / "writer.done").write_text("")
    assert writer.returncode == 0, writer.stderr
    out, err = reader.communicate(timeout=1800)
    assert reader.returncode == 0, err[-3000:]
    assert Memory.open(root).fsck() == []
    stats = json.loads(out.strip().splitlines()[-1])
    print("reader stats:", stats, "writer rounds:", writer.stdout.strip())
    return stats


def test_reader_process_against_writer_process(tmp_path):
    stats = _reader_vs_writer(tmp_path, rounds=300 if not STRESS else 3000,
                              minimum_reads=400 if not STRESS else 20000, mode="mixed")
    assert stats["timelines"] > 0 and stats["checks"] > 0 and stats["fsck"] > 0


@pytest.mark.stress
@pytest.mark.skipif(not STRESS, reason="set FSMEM_STRESS=1 (100,000 timeline reads)")
def test_hundred_thousand_timelines_against_prune(tmp_path):
    stats = _reader_vs_writer(tmp_path, rounds=1_000_000, minimum_reads=100_000, mode="timeline",
                              min_rounds=2000)
    assert stats["timelines"] >= 100_000


def _journal_window(template: Path, probe: Path) -> range:
    """The fs-call numbers at which the prune's journal entry is on disk, found by one
    in-process run that watches the journal directory before each call (a few calls of
    margin each side; every call up to 200 when the run shows none)."""
    from fsmem.format import fsops as _fsops
    shutil.copytree(template, probe)
    journal, window = probe / ".fsmem" / "journal", []

    def spy(_op: str) -> None:
        if journal.is_dir() and any(n.endswith(".json") for n in os.listdir(journal)):
            window.append(_fsops.call_count())
    _fsops.set_hook(spy)
    try:
        Memory.open(probe, context_capacity=3, context_protected=1).prune("garden")
    finally:
        _fsops.set_hook(None)
    if STRESS or not window:
        return range(1, 200)
    return range(max(1, window[0] - 3), window[-1] + 4)


def test_reader_sees_a_pending_journal_applied_and_changes_nothing(tmp_path):
    """A prune killed after its journal commit: readers see the after state, fsck reports
    the pending journal and repairs nothing; a writer (fsck --fix) completes it."""
    template = tmp_path / "t"
    mem = Memory.open(template, context_capacity=3, context_protected=1, auto_prune=False)
    for i in range(5):
        mem.append(Event(id=f"e-p{i}", source="qq", input=f"line {i} garden"))
    mem.close()
    child = ("import sys; from fsmem import Memory; "
             "Memory.open(sys.argv[1], context_capacity=3, context_protected=1).prune('garden')")
    found, pending = False, 0
    for n in _journal_window(template, tmp_path / "probe"):
        root = tmp_path / f"c{n}"
        shutil.copytree(template, root)
        proc = subprocess.run([sys.executable, "-c", child, str(root)], cwd=str(REPO),
                              env={**os.environ, "PYTHONPATH": str(PKG_ROOT),
                                   "FSMEM_CRASH_AT": str(n)}, capture_output=True, text=True)
        if proc.returncode == 0:
            break
        if not [n for n in os.listdir(root / ".fsmem" / "journal") if n.endswith(".json")]:
            shutil.rmtree(root)
            continue
        pending += 1
        if not STRESS and pending > 2 and pending % 6:   # a sample of the journal window
            shutil.rmtree(root)
            continue
        found = True
        before = tree_state(root, with_meta=True)
        reader = Reader.open(root)
        ids = [e.id for e in reader.timeline()]
        # the after state: L1 pruned down to the watermark
        assert len(ids) == len(set(ids)) == watermark(3, 1, context_tokens=None)
        seen = reader.consistent(lambda v: sorted(ev.id for layer in ("context", "documents")
                                                  for u in reader._units_of(v, layer)
                                                  for ev in u.manifest.events))
        assert seen == [f"e-p{i}" for i in range(5)]
        findings = reader.fsck()
        assert [f.kind for f in findings] == ["pending-journal"], findings
        r = fsmem("fsck", "--root", str(root), "--json")
        assert r.returncode == 1 and json.loads(r.stdout)[0]["kind"] == "pending-journal"
        assert tree_state(root, with_meta=True) == before      # nothing repaired or written
        r = fsmem("fsck", "--root", str(root), "--fix", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)[0]["fixed"] == "completed by recovery"
        assert Reader.open(root).fsck() == []
        shutil.rmtree(root)
    assert found, "no crash point left a pending journal"


def test_fsck_without_fix_repairs_nothing(tmp_path):
    root = tmp_path / "m"
    mem = Memory.open(root)
    uid = mem.commit("duplicated unit")
    shutil.copytree(root / "documents" / uid, root / "stablemem" / uid)
    (root / ".fsmem" / "journal" / "j-broken.json").write_text("{not json")
    dead = root / ".fsmem" / "staging" / "u-x~999999~abc"
    dead.mkdir()
    before = tree_state(root, with_meta=True)
    r = fsmem("fsck", "--root", str(root), "--json")
    assert r.returncode == 1
    kinds = sorted(f["kind"] for f in json.loads(r.stdout))
    assert kinds == ["duplicate-event", "duplicate-unit", "pending-journal", "stray-staging"], kinds
    assert tree_state(root, with_meta=True) == before
    r = fsmem("fsck", "--root", str(root), "--fix", "--json")
    assert r.returncode == 0, r.stdout
    assert all(f["fixed"] for f in json.loads(r.stdout))
    assert Reader.open(root).fsck() == []


# -- (e) snapshots -------------------------------------------------------------------------

def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for rel, (digest, mtime) in sorted(tree_state(root).items()):
        h.update(f"{rel}\0{digest}\0{mtime}\n".encode())
    return h.hexdigest()


def test_snapshot_links_every_block_and_stays_unchanged(tmp_path):
    root = tmp_path / "m"
    mem = build_store(root)
    mem = Memory.open(root, context_capacity=4, context_protected=1)
    snap = tmp_path / "snap"
    r = fsmem("snapshot", "--root", str(root), "--json", str(snap))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["linked"] > 0
    for layer in ("context", "documents", "stablemem"):
        for uid in os.listdir(root / layer):
            for name in os.listdir(root / layer / uid):
                assert os.stat(root / layer / uid / name).st_ino == \
                    os.stat(snap / layer / uid / name).st_ino
    digest = tree_digest(snap)
    answers = read_answers(snap, Reader.open(snap).units("documents")[0])
    assert Reader.open(snap).fsck() == []
    # the source changes in every way; the snapshot does not
    mem.commit("a new document after the snapshot")
    for i in range(6):
        mem.append(Event(source="qq", input=f"after snapshot {i} garden"))
    mem.recall("solar", top_k=1)
    mem.remove(mem.units("documents")[0])
    mem.distill(max_age_s=0, max_access=100)
    assert tree_digest(snap) == digest
    assert read_answers(snap, Reader.open(snap).units("documents")[0]) == answers
    assert Reader.open(snap).fsck() == []
    # the snapshot is a store of its own: writable, queryable
    smem = Memory.open(snap)
    smem.commit("written into the snapshot")
    assert smem.query("written into the snapshot", top_k=1)
    assert smem.fsck() == []
    assert mem.fsck() == []


def test_snapshot_while_a_writer_prunes(tmp_path):
    """Snapshots taken while another process appends and prunes are each fsck clean and
    hold every event exactly once."""
    root = tmp_path / "m"
    Memory.open(root).close()
    acks = tmp_path / "acks"
    env = {**os.environ, "PYTHONPATH": str(PKG_ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root), "250", str(acks)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    n = 0
    try:
        while writer.poll() is None or n < 2:
            snap = tmp_path / f"snap{n}"
            r = fsmem("snapshot", "--root", str(root), str(snap))
            assert r.returncode == 0, r.stderr
            reader = Reader.open(snap)
            assert reader.fsck() == []
            ids = reader.consistent(lambda v: [ev.id for layer in ("context", "documents",
                                                                   "stablemem")
                                               for u in reader._units_of(v, layer)
                                               for ev in u.manifest.events])
            assert len(ids) == len(set(ids))
            shutil.rmtree(snap)
            n += 1
    finally:
        writer.wait(timeout=600)
    assert writer.returncode == 0, writer.stderr.read()
    assert Memory.open(root).fsck() == []
