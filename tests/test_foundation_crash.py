"""Crash safety of publish: a crash at every fs call, injected ENOSPC/EIO, concurrent writers."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PKG_ROOT, REPO, assert_feed_agrees, crash_sweep, make_png, run_py
from fsmem.store.changes import read_changes
from fsmem import Event, Memory, StorageError, StoreLocked
from fsmem.format.errors import AlreadyExists
from fsmem.format import fsops as fsops

CHILD = """
import sys
from fsmem import Memory, MediaAttachment
from conftest_png import png
mem = Memory.open(sys.argv[1])
for i in range(2):
    uid = mem.commit(f"unit {i} 内容 " * 50, attachments=[MediaAttachment(data=png, mime="image/png")])
    print(uid, flush=True)
"""


def _child_env(tmp_path):
    (tmp_path / "conftest_png.py").write_text(f"png = {make_png()!r}\n")
    return {**os.environ, "PYTHONPATH": f"{PKG_ROOT}{os.pathsep}{tmp_path}"}


@pytest.mark.parametrize("strategy", ["batch", "syncfs", "fsync"])
def test_crash_point_sweep_commit(tmp_path, strategy):
    env = {**_child_env(tmp_path), "FSMEM_SYNC": strategy}
    template = tmp_path / "template"
    Memory.open(template)

    def check(root, label):
        out = Path(f"{root}.stdout")
        acked = out.read_text().split() if out.exists() else []
        mem = Memory.open(root)  # recovery runs here
        visible = mem.units("documents")
        assert set(acked) <= set(visible), f"{label}: acked unit lost"
        assert len(visible) <= len(acked) + 1, f"{label}: more units than commits"
        for uid in visible:
            assert mem.document(uid).events[0].input.startswith("unit ")
        assert mem.fsck() == [], label
        assert os.listdir(root / ".fsmem" / "staging") == [], f"{label}: staging not cleaned"
        assert_feed_agrees(root, label)
    total, proc = crash_sweep(tmp_path, template, CHILD, check, env=env, sample=20)
    assert total > 20  # the sweep really stepped through the publish protocol
    assert len(proc.stdout.split()) == 2


@pytest.mark.parametrize("op", ["write", "fsync", "open", "link", "mkdir", "rename"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize("strategy", ["batch", "syncfs", "fsync"])
def test_injected_errors_publish_nothing(root, op, err, strategy):
    mem = Memory.open(root)
    mem.store.sync_strategy = strategy
    keep = mem.commit("already stored")
    ops_after: list[str] = []
    for nth in range(1, 12):
        seen = {"n": 0, "failed": False}

        def hook(name: str) -> None:
            if seen["failed"]:
                ops_after.append(name)
            if name == op:
                seen["n"] += 1
                if seen["n"] == nth:
                    seen["failed"] = True
                    raise OSError(err, f"injected {os.strerror(err)}")
        fsops.set_hook(hook)
        try:
            uid = mem.commit("new unit", attachments=[])
        except StorageError as exc:
            assert exc.errno == err and str(root) in str(exc)
            assert "fsync" not in ops_after, "a failed fsync must not be retried"
            assert mem.units("documents") == [keep]
            assert os.listdir(root / ".fsmem" / "staging") == []
        else:
            fsops.set_hook(None)
            if seen["failed"]:   # only the follow-up after the data is durable may fail: the
                # feed's end mark (logged; a consumer lists once), never the commit itself
                assert op == "write"
                assert read_changes(str(root / ".fsmem")).records[-1].kind == "publish"
            assert mem.document(uid).events[0].input == "new unit"
            mem.store.discard(mem.store.unit_dir("documents", uid))
            break
        finally:
            fsops.set_hook(None)
            ops_after.clear()
    assert mem.fsck() == []
    assert mem.document(keep).events[0].input == "already stored"
    assert mem.document(mem.commit("a re-add works")).events[0].input == "a re-add works"


def test_env_fault_injection_in_child(root):
    Memory.open(root)
    proc = run_py(f"""
        from fsmem import Memory, StorageError
        mem = Memory.open({str(root)!r})
        try:
            mem.commit("x")
        except StorageError as exc:
            print("ERR", exc.errno)
    """, env={"FSMEM_FAIL_AT": "1:ENOSPC:fsync"})
    assert proc.stdout.strip() == f"ERR {errno.ENOSPC}", proc.stderr
    assert Memory.open(root).units("documents") == []


def test_two_processes_committing(root):
    Memory.open(root)
    code = f"""
import sys, time
from fsmem import Memory
mem = Memory.open({str(root)!r})
end = time.time() + 3
i = 0
while (time.time() < end or i < 20) and i < 5000:   # at least 20 commits each, however slow
    print(mem.commit(f"writer {{sys.argv[1]}} item {{i}}"), flush=True)
    i += 1
"""
    env = {**os.environ, "PYTHONPATH": str(PKG_ROOT)}
    procs = [subprocess.Popen(cwd=str(REPO), args=[sys.executable, "-c", code, str(k)], stdout=subprocess.PIPE,
                              text=True, env=env) for k in range(2)]
    acked = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        acked.append(out.split())
    mem = Memory.open(root)
    assert all(len(a) > 10 for a in acked)
    assert set(acked[0]) | set(acked[1]) == set(mem.units("documents"))
    assert mem.fsck() == []


def test_second_writer_waits_then_store_locked(root):
    Memory.open(root)
    holder = subprocess.Popen(cwd=str(REPO), args=[sys.executable, "-c", f"""
import time
from fsmem import Memory
mem = Memory.open({str(root)!r})
with mem.store.locked():
    print("held", flush=True)
    time.sleep(3)
"""], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(PKG_ROOT)})
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(StoreLocked, match="lock: held by another writer for more than 0.3s"):
        Memory.open(root, lock_timeout=0.3)
    mem = Memory.open(root, lock_timeout=120)  # waits for the holder to let go, then gets it
    holder.wait(timeout=30)
    assert mem.commit("after") in mem.units("documents")


def _einval_renameat2(monkeypatch) -> None:
    """Make the libc renameat2 call itself fail with EINVAL, as on a filesystem without
    RENAME_NOREPLACE: the kernel rejects NOREPLACE together with EXCHANGE."""
    real = fsops._renameat2
    assert real is not None, "libc has no renameat2"

    def einval(olddfd, old, newdfd, new, flags):
        return real(olddfd, old, newdfd, new, flags | 2)   # | RENAME_EXCHANGE: EINVAL
    monkeypatch.setattr(fsops, "_renameat2", einval)
    import fsmem.store.store
    monkeypatch.setattr(fsmem.store.store, "_renameat2_cache", {})   # probe again, per test


def test_renameat2_einval_at_publish_falls_back_to_a_plain_rename_under_the_lock(root, monkeypatch):
    """renameat2 works at open (the probe) and answers EINVAL at publish: the publish falls
    back to a plain rename under the lock, and a taken name is still refused with nothing
    replaced."""
    mem = Memory.open(root)
    assert mem.store.noreplace
    _einval_renameat2(monkeypatch)
    uid = mem.commit("after EINVAL")
    assert not mem.store.noreplace
    assert mem.document(uid).events[0].input == "after EINVAL"
    os.mkdir(root / "documents" / "u-claimed")
    (root / "documents" / "u-claimed" / "keep.txt").write_text("mine")
    with pytest.raises(AlreadyExists):
        mem.commit_events([Event(input="x")], unit_id="u-claimed")
    assert os.listdir(root / "documents" / "u-claimed") == ["keep.txt"]


def test_renameat2_einval_at_open_uses_the_fallback(root, monkeypatch):
    _einval_renameat2(monkeypatch)
    mem = Memory.open(root)
    assert not mem.store.noreplace
    uid = mem.commit("fallback from the start")
    dst = mem.recall("fallback from the start", top_k=1)
    assert dst == [uid] and mem.units("context") == [uid]
    os.mkdir(root / "documents" / uid)
    with pytest.raises(AlreadyExists):
        mem.store.move(uid, "context", "documents")
    assert mem.units("context") == [uid]


def test_children_import_the_package_under_test():
    """The suite and its child processes import the same fsmem: the installed one when pip
    installed it non-editable (CI), the mutated copy in the mutation check, else the source."""
    import fsmem
    from conftest import PKG_ROOT
    here = os.path.realpath(fsmem.__file__)
    assert here.startswith(os.path.realpath(PKG_ROOT) + os.sep)
    child = run_py("import fsmem, os; print(os.path.realpath(fsmem.__file__))", check=True)
    assert child.stdout.strip() == here
