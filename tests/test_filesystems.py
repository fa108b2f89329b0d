"""Know the filesystem (issue 28 item 2): a writer reads the store's mount from
/proc/self/mountinfo; local filesystems and JuiceFS, CephFS, GlusterFS, NFSv4 are allowed, a
writer anywhere else (bindfs and sshfs, whose flock excludes nothing across two mounts; SMB;
an unknown FUSE filesystem) is refused with one line naming it and the override, and nothing
is created or changed; readers still work. The refusal is tried on a real bindfs mount."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PKG_ROOT, REPO
from fsmem import Memory, Reader, UnsafeFilesystem
from fsmem.store import filesystems as fs
from fsmem.store.config import set_config
from fuse_mounts import bindfs

TABLE = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 27 0:50 / /mnt/juice rw,relatime - fuse.juicefs JuiceFS:vol rw,user_id=0
41 27 0:51 / /mnt/my\\040notes rw - fuse.sshfs me@host:/n rw
42 40 0:52 / /mnt/juice/inner rw - nfs4 srv:/x rw,vers=4.2
43 27 0:53 / /mnt/b rw - fuse.bindfs /src rw
44 43 0:54 / /mnt/b rw - tmpfs tmpfs rw
"""


@pytest.mark.parametrize("path,fstype,kind", [
    ("/home/u/m", "ext4", "local"),
    ("/mnt/juice/store", "fuse.juicefs", "shared"),
    ("/mnt/juice", "fuse.juicefs", "shared"),
    ("/mnt/juicefs-other", "ext4", "local"),            # a prefix of the name is not a parent
    ("/mnt/juice/inner/deep", "nfs4", "shared"),         # the longest mount point wins
    ("/mnt/my notes/m", "fuse.sshfs", "refused"),        # \\040 in mountinfo is a space
    ("/mnt/b/m", "tmpfs", "local"),                      # mounted over: the last one wins
])
def test_the_mount_of_a_path_is_its_longest_containing_mount_point(path, fstype, kind):
    m = fs.mount_of(path, TABLE)
    assert m is not None and m.fstype == fstype
    assert fs.kind_of(m.fstype) == kind


def test_the_store_here_is_on_a_known_local_filesystem(tmp_path):
    m = fs.mount_of(str(tmp_path))
    assert m is not None and fs.kind_of(m.fstype) == "local", m


@pytest.mark.parametrize("setting,ok", [("fuse.bindfs", True), ("bindfs", True),
                                        ("nfs, fuse.bindfs", True), ("any", True),
                                        ("fuse.sshfs", False), ("", False)])
def test_the_override_names_a_type_or_its_fuse_subtype(setting, ok):
    assert fs.allowed_by(setting, "fuse.bindfs") is ok


def test_the_lock_probe_sees_flock_exclude_on_a_local_filesystem(tmp_path):
    lock = tmp_path / "lock"
    lock.write_bytes(b"")
    assert fs.probe_flock(str(lock)) is True
    mem = Memory.open(tmp_path / "m")
    with mem.store.locked():   # held by a writer: the probe is refused, which shows it too
        assert fs.probe_flock(mem.store.lock_path) is True
    mem.close()


@pytest.fixture
def mounted(tmp_path, monkeypatch) -> tuple[Path, Path]:
    monkeypatch.delenv("FSMEM_ALLOW_FS", raising=False)
    src = tmp_path / "src"
    src.mkdir()
    Memory.open(src / "m").commit("written on the local side")
    with bindfs(src, tmp_path / "mnt") as mnt:
        yield src, mnt


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size if p.is_file() else -1
            for p in sorted(root.rglob("*"))}


def test_a_writer_on_bindfs_is_refused_naming_it_and_the_override(mounted):
    src, mnt = mounted
    before = _tree(src)
    with pytest.raises(UnsafeFilesystem) as err:
        Memory.open(mnt / "m")
    text = str(err.value)
    # bindfs names no subtype: mountinfo says "fuse", an unknown FUSE filesystem
    assert "on fuse " in text and "FSMEM_ALLOW_FS=fuse " in text and "\n" not in text
    with pytest.raises(UnsafeFilesystem):
        Memory.open(mnt / "new")          # nor is a new store created there
    assert not (src / "new").exists()
    assert _tree(src) == before          # nothing stored was changed


def test_a_reader_on_bindfs_works(mounted):
    _src, mnt = mounted
    r = Reader.open(mnt / "m")
    hits = r.query("local side", 3, count=False)
    assert hits and r.document(hits[0].unit_id).events[0].input == "written on the local side"


def test_the_cli_refuses_in_one_line_and_reads(mounted):
    _src, mnt = mounted
    env = {"PYTHONPATH": str(PKG_ROOT), "PATH": os.environ["PATH"]}
    w = subprocess.run([sys.executable, "-m", "fsmem", "--root", str(mnt / "m"), "commit", "x"],
                       cwd=str(REPO), env=env, capture_output=True, text=True, timeout=120)
    assert w.returncode == 1, w.stderr
    assert "Traceback" not in w.stderr and "FSMEM_ALLOW_FS=fuse" in w.stderr
    assert len(w.stderr.strip().splitlines()) == 1, w.stderr
    q = subprocess.run([sys.executable, "-m", "fsmem", "--root", str(mnt / "m"), "query",
                        "local side"], cwd=str(REPO), env=env, capture_output=True, text=True,
                       timeout=120)
    assert q.returncode == 0 and "local side" in q.stdout, q.stderr


def test_the_override_by_environment_or_config_lets_a_writer_in(mounted, monkeypatch, caplog):
    src, mnt = mounted
    monkeypatch.setenv("FSMEM_ALLOW_FS", "fuse")
    with caplog.at_level(logging.INFO, logger="fsmem.store"):
        mem = Memory.open(mnt / "m")
        mem.commit("written through bindfs")
        mem.close()
        Memory.open(mnt / "m").close()
    chosen = [r.getMessage() for r in caplog.records if "allowed by override" in r.getMessage()]
    assert len(chosen) <= 1   # logged once per mount (an earlier test may have logged it)
    monkeypatch.delenv("FSMEM_ALLOW_FS")
    with pytest.raises(UnsafeFilesystem):
        Memory.open(mnt / "m")
    local = Memory.open(src / "m")   # the setting written where writing is allowed
    with local.store.locked():
        set_config(src / "m", "allow_fs", "fuse")
    local.close()
    mem = Memory.open(mnt / "m")
    try:
        assert len(mem.units("documents")) == 2
        assert mem.fsck() == []
    finally:
        mem.close()
