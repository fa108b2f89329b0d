"""Host-aware ownership (issue 28 item 3, format 5): one machine plays two hosts, its
subprocesses given another ``FSMEM_HOST_ID``, on one store.

- host B's staging, trash and pin entries survive host A's recovery while B's lease is fresh
  (B's pid means nothing on A), and are cleaned once the lease expired;
- a dead local pid's staging is still removed at once, and names from before format 5 (a bare
  pid) still parse as this host's;
- fsck names the lock's holder from its record, and a journal entry of a live writer on
  another host is "in progress on host B", not interrupted (/proc/locks, which does list the
  subprocess's flock here, is not what decides).

Lease expiry is waited for as a condition (a small ``FSMEM_LEASE_S``), never timed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import PKG_ROOT, REPO
from fsmem import Memory

HOST_A, HOST_B = "hosta", "hostb"


@pytest.fixture(autouse=True)
def as_host_a(monkeypatch):
    """This test process is host A, with a lease long enough not to expire by itself."""
    monkeypatch.setenv("FSMEM_HOST_ID", HOST_A)
    monkeypatch.setenv("FSMEM_LEASE_S", "3600")


def _child(code: str, host: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(PKG_ROOT), "FSMEM_HOST_ID": host}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=str(REPO),
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _run(code: str, host: str) -> list[str]:
    proc = _child(code, host)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out.split()


LEAVE_ENTRIES = """
    import os, sys
    from fsmem import Memory
    from fsmem.format.unit import staging_name
    mem = Memory.open(sys.argv[1] if len(sys.argv) > 1 else {root!r}, durability="off",
                      auto_prune=False)
    store = mem.store
    staged = os.path.join(store.staging, staging_name("u-building"))
    os.mkdir(staged)                                  # a unit being built
    uid = mem.commit("a note host B removes")
    store.discard(store.unit_dir("documents", uid), defer=True)   # waits in the trash
    pin = store.pin()                                 # a snapshot in progress
    print(os.path.basename(staged), *os.listdir(store.trash_dir), os.path.basename(pin))
    sys.stdout.flush()
    os._exit(0)   # gone without closing: its pid is nothing on host A
"""


def _wait_for(cond, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.1)


def test_another_hosts_entries_live_while_its_lease_is_fresh(root, monkeypatch):
    Memory.open(root, durability="off").close()
    staged, trashed, pin = _run(LEAVE_ENTRIES.format(root=str(root)), HOST_B)
    assert f"@{HOST_B}~" in staged and f"@{HOST_B}~" in trashed and f"@{HOST_B}~" in pin
    meta = root / ".fsmem"
    assert (meta / "leases" / HOST_B).is_file()
    for _ in range(2):   # every open by host A runs recovery and empties the trash
        mem = Memory.open(root, durability="off")
        assert mem.store.pinned()            # B's pin holds the trash
        assert not [f for f in mem.fsck() if "staging" in f.path]   # not stray
        mem.close()
        assert (meta / "staging" / staged).is_dir()
        assert (meta / "trash" / trashed).is_dir()
        assert (meta / "snapshot-pins" / pin).is_file()

    monkeypatch.setenv("FSMEM_LEASE_S", "1")   # B's lease now expires (B renews nothing)

    def cleaned() -> bool:
        Memory.open(root, durability="off").close()
        return not (meta / "staging" / staged).exists() \
            and not (meta / "trash" / trashed).exists()
    _wait_for(cleaned, "host B's staging and trash cleaned after its lease expired")
    mem = Memory.open(root, durability="off")
    assert not mem.store.pinned()   # B's pin no longer holds anything
    assert mem.fsck() == []
    mem.close()


def test_a_live_host_keeps_renewing_its_lease(root, monkeypatch):
    """A writer process that lives keeps its host's lease fresh with its one daemon thread,
    even idle (no lock taken): its staging survives every recovery of host A meanwhile."""
    monkeypatch.setenv("FSMEM_LEASE_S", "1")
    Memory.open(root, durability="off").close()
    code = """
        import os, sys
        from fsmem import Memory
        from fsmem.format.unit import staging_name
        mem = Memory.open(%r, durability="off")
        staged = os.path.join(mem.store.staging, staging_name("u-slow"))
        os.mkdir(staged)
        print(os.path.basename(staged), flush=True)
        sys.stdin.read()   # idle until told, lease renewed by the thread
    """ % str(root)
    proc = _child(code, HOST_B)
    try:
        staged = proc.stdout.readline().strip()
        lease = root / ".fsmem" / "leases" / HOST_B
        first = lease.stat().st_mtime_ns
        _wait_for(lambda: lease.stat().st_mtime_ns != first, "host B's lease renewed")
        for _ in range(3):
            seen = lease.stat().st_mtime_ns
            Memory.open(root, durability="off").close()   # A's recovery
            assert (root / ".fsmem" / "staging" / staged).is_dir()
            _wait_for(lambda: lease.stat().st_mtime_ns != seen, "renewed again")
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def test_a_dead_local_pid_and_old_names(root):
    """This host's entries are judged by their pid at once, with or without the host in
    their name (a name from before format 5 is this host's)."""
    Memory.open(root, durability="off").close()
    code = "import os; print(os.getpid())"
    dead = _run(code, HOST_A)[0]   # a pid of this host that has exited
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    try:
        live = str(sleeper.pid)
        staging = root / ".fsmem" / "staging"
        names = {"dead-new": f"u-a~{dead}@{HOST_A}~0a1b", "dead-old": f"u-b~{dead}~0a1b",
                 "live-new": f"u-c~{live}@{HOST_A}~0a1b", "live-old": f"u-d~{live}~0a1b"}
        for name in names.values():
            (staging / name).mkdir()
        pins = root / ".fsmem" / "snapshot-pins"
        pins.mkdir(exist_ok=True)
        (pins / f"{dead}~0a1b").touch()
        mem = Memory.open(root, durability="off")
        left = set(os.listdir(staging))
        assert left == {names["live-new"], names["live-old"]}, left
        assert not mem.store.pinned()            # an old-style pin of a dead pid
        (pins / f"{live}~0a1b").touch()
        assert mem.store.pinned()                # an old-style pin of a live pid
        mem.close()
    finally:
        sleeper.stdin.close()
        sleeper.wait(timeout=60)


JOURNAL_AND_HOLD = """
    import os, signal, sys
    from fsmem import Memory
    from fsmem.format.layout import JournalEntry
    from fsmem.format.timestamps import Timestamp
    mem = Memory.open({root!r}, durability="off")
    store = mem.store
    with store.locked():
        store.journal_commit(JournalEntry(id="j-test", op="prune", created_at=Timestamp.now()))
        print(os.getpid(), flush=True)
        if {die}:
            os.kill(os.getpid(), signal.SIGKILL)   # crashed holding the lock
        sys.stdin.read()   # holding the lock until told
"""


def test_fsck_names_a_dead_holder_from_the_lock_file(root):
    from fsmem.memory.fsck import lock_holder
    Memory.open(root, durability="off").close()
    proc = _child(JOURNAL_AND_HOLD.format(root=str(root), die=True), HOST_A)
    pid = proc.stdout.readline().strip()
    proc.wait(timeout=60)
    holder = lock_holder(Memory.open(root, readonly=True).layout)
    assert holder is not None and holder.record.pid == int(pid)
    assert holder.record.host == HOST_A and holder.local and not holder.alive
    [finding] = Memory.open(root, readonly=True).fsck()
    assert finding.kind == "pending-journal" and "interrupted prune" in finding.detail
    assert f"pid {pid} on this host" in finding.detail and "gone" in finding.detail
    mem = Memory.open(root, durability="off")   # the next writer completes it
    assert mem.fsck() == []
    mem.close()
    assert lock_holder(mem.layout) is None   # released: the record is blank


def test_a_live_writer_on_another_host_is_in_progress(root):
    from fsmem.memory.fsck import lock_holder
    Memory.open(root, durability="off").close()
    proc = _child(JOURNAL_AND_HOLD.format(root=str(root), die=False), HOST_B)
    try:
        pid = proc.stdout.readline().strip()
        reader = Memory.open(root, readonly=True)
        holder = lock_holder(reader.layout)
        assert holder is not None and holder.record.host == HOST_B and holder.alive
        assert holder.record.pid == int(pid) and not holder.local
        assert holder.record.hostname and holder.record.acquired_at > 0
        findings = reader.fsck()
        assert [f.kind for f in findings] == ["in-progress"], findings
        assert f"in progress on host {HOST_B}" in findings[0].detail
        assert "interrupted" not in findings[0].detail
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr.read()
    mem = Memory.open(root, durability="off")   # B released after its entry: completed here
    assert mem.fsck() == []
    mem.close()


def test_the_lock_record_is_written_in_place(root):
    """The record is one fixed-width pwrite at each lock taken and blanked at release: the
    lock file keeps its inode and size (nothing renamed, nothing grows)."""
    from fsmem.memory.fsck import lock_holder
    mem = Memory.open(root, durability="off")
    lock = root / ".fsmem" / "lock"
    before = lock.stat()
    with mem.store.locked():
        holder = lock_holder(mem.layout)
        assert holder is not None and holder.local and holder.alive
        assert holder.record.pid == os.getpid() and holder.record.host == HOST_A
        assert holder.record.start > 0 and holder.record.boot
    for _ in range(3):
        mem.commit("another note")
    after = lock.stat()
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)
    assert lock.read_bytes().strip() == b""
    mem.close()


@pytest.mark.skipif(sys.platform != "linux", reason="FUSE mounts: Linux only")
@pytest.mark.parametrize("writer_host", [HOST_A, HOST_B])
def test_fsck_on_juicefs_sees_the_live_writer_through_the_other_mount(tmp_path, writer_host):
    """The issue's case: on JuiceFS /proc/locks lists no lock, so a live writer's journal was
    reported as interrupted. A writer holding the lock through mount 2 (this host, or another
    host id), fsck through mount 1: no finding for this host's live writer, "in progress on
    host B" for another host's; the record is flushed, so the other mount sees it."""
    from fsmem.format.layout import writer_alive
    from fsmem.memory.fsck import lock_holder
    from fuse_mounts import juicefs
    with juicefs(tmp_path / "jfs", 2) as (m1, m2):
        (m1 / "s").mkdir()
        a, b = m1 / "s", m2 / "s"
        Memory.open(a).close()
        proc = _child(JOURNAL_AND_HOLD.format(root=str(b), die=False), writer_host)
        try:
            pid = int(proc.stdout.readline().strip())
            reader = Memory.open(a, readonly=True)
            assert not writer_alive(reader.layout.lock_path)   # /proc/locks: blind here
            holder = lock_holder(reader.layout)
            assert holder is not None and holder.alive and holder.record.pid == pid
            findings = reader.fsck()
            if writer_host == HOST_A:
                assert holder.local and findings == []
            else:
                assert [f.kind for f in findings] == ["in-progress"], findings
                assert f"in progress on host {HOST_B}" in findings[0].detail
        finally:
            proc.stdin.close()
            proc.wait(timeout=60)
        assert proc.returncode == 0, proc.stderr.read()
        mem = Memory.open(a)
        assert mem.fsck() == []
        mem.close()
