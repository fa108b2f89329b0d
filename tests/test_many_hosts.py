"""One store, many hosts (issue 28): a real JuiceFS volume (metadata in a redis-server the
tests start, objects in a local directory) mounted at two points, each mount a "host".

- two writer processes, one through each mount (appends with their prunes, commits, recalls),
  and a reader through a mount during the writes: every acknowledged event is stored exactly
  once, every hit the reader got opened, fsck is clean;
- crashes with the store on the mount (at fs calls, and SIGKILL at random moments), each store
  reopened through the *other* mount: nothing acknowledged lost, no open wedged;
- switching mounts does not re-index an unchanged store (the unit identity has no st_dev).

The default suite runs short versions (10 events a writer, 3 sampled crash points plus the
first and last, 2 kills); FSMEM_STRESS=1 runs 60 events, every crash point and 20 kills.
The volume is mounted once for the module (a few seconds). Without juicefs, redis-server or
/dev/fuse the tests skip, and fail under CI=1 (.ci/run installs them)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PKG_ROOT, REPO, STRESS, crash_sweep, stored_counts, topics_template
from fsmem import Memory, Reader
from fuse_mounts import juicefs

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="FUSE mounts: Linux only")

ENV = {**os.environ, "PYTHONPATH": str(PKG_ROOT)}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> list[Path]:
    with juicefs(tmp_path_factory.mktemp("juicefs"), 2) as points:
        yield points


@pytest.fixture
def where(hosts, request) -> tuple[Path, Path]:
    """A fresh directory of this test on the volume, as seen from host 1 and from host 2."""
    name = f"t-{request.node.name[:40]}-{os.urandom(3).hex()}"
    (hosts[0] / name).mkdir()
    yield hosts[0] / name, hosts[1] / name


WRITER = """
import sys
import time
from fsmem import Event, Memory
root, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
mem = Memory.open(root, context_capacity=6, context_protected=1)
for i in range(n):
    text = f"{tag} event {i} topic{i % 4}"
    mem.append(Event(source=tag, input=text, response=f"reply {i} of {tag}"))
    print("ack", text, flush=True)
    if i % 5 == 4:
        note = f"{tag} note {i} topic{i % 4}"
        mem.commit(note, source=tag)
        print("ack", note, flush=True)
    if i % 7 == 6:
        mem.recall(f"topic{(i + 1) % 4}", top_k=1)
mem.close()
print("done", flush=True)
"""

READER = """
import sys, time
from fsmem import Reader
root, seconds = sys.argv[1], float(sys.argv[2])
end, n, opened = time.time() + seconds, 0, 0
while time.time() < end or n < 5:
    r = Reader.open(root)
    for hit in r.query(f"topic{n % 4} event", 5, count=False):
        r.document(hit.unit_id)   # every hit opens: a listed unit is whole
        opened += 1
    r.units("context")
    n += 1
print(n, opened, flush=True)
"""


def _acks(stdout: str) -> list[str]:
    return [line[4:] for line in stdout.splitlines() if line.startswith("ack ")]


def test_juicefs_is_known_as_a_shared_filesystem_a_writer_may_use(where):
    from fsmem.store.filesystems import kind_of, mount_of, polling_needed
    a, _b = where
    m = mount_of(str(a))
    assert m is not None and m.fstype == "fuse.juicefs" and kind_of(m.fstype) == "shared"
    assert polling_needed(str(a))   # inotify sees nothing another host writes
    Memory.open(a).close()          # a writer is let in


def test_a_juicefs_mount_that_caches_metadata_refuses_a_writer(tmp_path, monkeypatch):
    """JuiceFS's default mount caches entries and attributes in the kernel for 1 s: a writer
    holding the lock can see a unit another host has just moved as still there (recovery then
    renames a name that is gone). Such a mount refuses a writer, naming the flags, before it
    creates anything; a reader works there, and the override lets a writer in (one host)."""
    from fsmem import Reader, UnsafeFilesystem
    with juicefs(tmp_path / "cached", 1, caches=True) as (point,):
        root = point / "store"
        with pytest.raises(UnsafeFilesystem) as err:
            Memory.open(root)
        text = str(err.value)
        assert str(root) in text and "fuse.juicefs" in text, text
        for flag in ("--attr-cache 0", "--entry-cache 0", "--dir-entry-cache 0"):
            assert flag in text, text
        assert "FSMEM_ALLOW_FS=fuse.juicefs" in text, text
        assert not root.exists()   # refused before anything was created
        monkeypatch.setenv("FSMEM_ALLOW_FS", "fuse.juicefs")
        mem = Memory.open(root)
        mem.commit("one host only, by the override")
        mem.close()
        assert [h.unit_id for h in Reader.open(root).query("override", 3, count=False)]


def test_two_writers_through_two_mounts_keep_every_acknowledged_event_once(where):
    a, b = where
    Memory.open(a).close()
    n = int(os.environ.get("FSMEM_HOSTS_EVENTS", "60" if STRESS else "10"))
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), tag, str(n)],
                                cwd=str(REPO), env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for root, tag in ((a, "alpha"), (b, "beta"))]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(b), "3"], cwd=str(REPO),
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=600) for p in writers]
    for p, (out, err) in zip(writers, outs):
        assert p.returncode == 0 and out.endswith("done\n"), err[-3000:]
    r_out, r_err = reader.communicate(timeout=300)
    assert reader.returncode == 0, r_err[-3000:]
    assert int(r_out.split()[0]) >= 5
    acked = [t for out, _ in outs for t in _acks(out)]
    assert len(acked) == len(set(acked)) == 2 * (n + n // 5)
    stored = stored_counts(b)
    assert {t: stored[t] for t in acked} == {t: 1 for t in acked}
    assert set(stored) == set(acked)   # nothing else either (no duplicate, no stray)
    mem = Memory.open(a)
    try:
        assert mem.fsck() == []
    finally:
        mem.close()


CRASH_CHILD = """
import sys
import time
from fsmem import Event, Memory
mem = Memory.open(sys.argv[1], context_capacity=4, context_protected=1)
for i in range(3):
    mem.append(Event(source="qq", input=f"crash event {i} topic{i % 2}"))
    print("ack", f"crash event {i} topic{i % 2}", flush=True)
mem.commit("crash note", source="qq")
print("ack crash note", flush=True)
mem.recall("topic1", top_k=1)
"""


def test_crashes_on_the_mount_lose_nothing_reopened_through_the_other_host(where):
    a, b = where
    before = topics_template(a / "template")

    def check(root: Path, label: str) -> None:
        other = b / root.relative_to(a)        # host 2 reopens what host 1 left
        out = Path(f"{root}.stdout")
        acked = _acks(out.read_text()) if out.exists() else []
        stored = stored_counts(other)
        assert all(stored[t] == 1 for t in [*before, *acked]), \
            f"{label}: lost or duplicated: {stored}"
        assert all(c == 1 for c in stored.values()), f"{label}: {stored}"
        mem = Memory.open(other)
        try:
            assert mem.fsck() == [], label
        finally:
            mem.close()

    total, _ = crash_sweep(a, a / "template", CRASH_CHILD, check, sample=3)
    assert total > 20


def test_sigkill_at_random_moments_with_the_store_on_the_mount(where):
    a, b = where
    Memory.open(a).close()
    rng = random.Random(28)
    kills = int(os.environ.get("FSMEM_HOSTS_KILLS", "20" if STRESS else "2"))
    acked: list[str] = []
    for k in range(kills):
        p = subprocess.Popen([sys.executable, "-c", WRITER, str(a), f"kill{k}", "200"],
                             cwd=str(REPO), env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        # until it has acknowledged something, then at a random moment after
        first = p.stdout.readline()
        assert first.startswith("ack "), first
        time.sleep(rng.uniform(0.05, 1.5))
        p.send_signal(signal.SIGKILL)
        rest, _ = p.communicate(timeout=60)
        acked += _acks(first + rest)
        stored = stored_counts(b)   # reopened through the other host (a wedged lock: StoreLocked)
        assert {t: stored[t] for t in acked} == {t: 1 for t in acked}, f"kill {k}"
        assert all(c == 1 for c in stored.values()), f"kill {k}: duplicated"
    mem = Memory.open(b)
    try:
        assert mem.fsck() == []
    finally:
        mem.close()


def test_switching_mounts_does_not_reindex_an_unchanged_store(where):
    from fsmem.search.index import unit_ident
    a, b = where
    mem = Memory.open(a, auto_prune=False)
    units = [mem.commit(f"document {i} about subject{i % 3}") for i in range(12)]
    assert mem.query("subject1", 3, count=False)
    mem.close()
    assert os.stat(a).st_dev != os.stat(b).st_dev   # two mounts: two devices
    for u in units:   # the identity of each unit is the same through either mount
        assert unit_ident(str(a / "documents" / u)) == unit_ident(str(b / "documents" / u)), u
    mem = Memory.open(b, auto_prune=False)
    try:
        assert mem.reconcile(full=True) == {"added": 0, "removed": 0}
        assert [h.unit_id for h in mem.query("subject1", 3, count=False)]
    finally:
        mem.close()


def test_watch_on_one_host_sees_what_the_other_host_drops_and_commits(where):
    """watch polls on a shared filesystem (inotify sees nothing written through another
    mount): a file dropped through host 2 is ingested by the watch of host 1, and a unit that
    host 2 commits comes back in a reconcile record that names it."""
    import json
    a, b = where
    Memory.open(a).close()
    out, err = a.parent / f"{a.name}.watch.out", a.parent / f"{a.name}.watch.err"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen([sys.executable, "-m", "fsmem.watch", "--root", str(a), "--json",
                                 "--rescan", "3600"], cwd=str(REPO), env=ENV, stdout=fo,
                                stderr=fe)

    def records() -> list[dict]:
        return [json.loads(ln) for ln in out.read_text().splitlines() if ln.endswith("}")]

    def wait(pred, what: str) -> None:
        deadline = time.monotonic() + 120   # a deadline for a hang, not a speed check
        while not pred():
            assert proc.poll() is None and time.monotonic() < deadline, \
                f"{what}: {records()} {err.read_text()[-2000:]}"
            time.sleep(0.1)
    try:
        wait(lambda: any("watching" in r for r in records()), "start")
        assert [r["polling"] for r in records() if "watching" in r] == [True]
        (b / "inbox" / "dropped.md").write_text("# Dropped through host 2\nthe boiler code")
        wait(lambda: any(r.get("status") == "ingested" for r in records()), "ingest")
        other = Memory.open(b)
        uid = other.commit("committed on host 2 about the garden hose")
        other.close()
        wait(lambda: any(uid in r.get("reconciled", {}).get("units", {}).get("added", [])
                         for r in records()), "the other host's unit")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    r = Reader.open(a)
    assert [h.unit_id for h in r.query("garden hose", 1, count=False)] == [uid]
