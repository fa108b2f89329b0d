"""``fsmem snapshot`` is atomic and durable (issue 29, item 4): the copy is built beside the
destination under a partial name, flushed, then renamed into place. A snapshot killed at any
step, or one that fails (a full disk), leaves nothing that looks like a store at the
destination; fsck of a partial copy says what it is; a second try into the same destination
works and cleans up after the dead one (never after a live one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PKG_ROOT, REPO, crash_sweep, run_cli
from fsmem import Memory
from fsmem.format.layout import Layout
from fsmem.memory.fsck import fsck
from fsmem.store.snapshot import PARTIAL_INFIX, PARTIAL_MARKER, snapshot


def _store(root: Path, units: int = 5, size: int = 200) -> list[str]:
    mem = Memory.open(root)
    ids = [mem.commit(f"unit {i} " + "word%d " % i * size) for i in range(units)]
    mem.close()
    return ids


def _looks_like_a_store(path: Path) -> bool:
    return path.exists() and ((path / ".fsmem").exists() or any(path.iterdir()))


def _partials(dest: Path) -> list[Path]:
    return sorted(p for p in dest.parent.iterdir()
                  if p.name.startswith(dest.name + PARTIAL_INFIX))


def _complete(dest: Path, ids: list[str]) -> None:
    mem = Memory.open(dest, create=False)
    try:
        assert mem.fsck() == []
        assert sorted(mem.store.list_layer("documents")) == sorted(ids)
    finally:
        mem.close()


CHILD = """
import sys
from fsmem.store.snapshot import snapshot
snapshot(sys.argv[1], sys.argv[1] + ".dest")
print("done", flush=True)
"""


def test_snapshot_killed_at_every_step_leaves_no_store(tmp_path):
    template = tmp_path / "template"
    ids = _store(template)

    def check(root: Path, label: str) -> None:
        dest = Path(f"{root}.dest")
        done = "done" in Path(f"{root}.stdout").read_text()
        if not done and os.path.lexists(dest):
            # only once renamed into place (killed at the parent's flush): then complete
            assert not (dest / ".fsmem" / PARTIAL_MARKER).exists(), label
            _complete(dest, ids)
            done = True
        for partial in _partials(dest):
            if (partial / ".fsmem" / "marker.json").exists():
                findings = fsck(Layout(partial))
                if (partial / ".fsmem" / PARTIAL_MARKER).exists():
                    assert [f.kind for f in findings] == ["partial-snapshot"], (label, findings)
                else:   # killed between the last flush and the rename: complete
                    assert findings == [], (label, findings)
        if not done:   # a second try into the same destination works, and cleans up
            snapshot(root, dest)
        assert _partials(dest) == [], label
        _complete(dest, ids)
        shutil.rmtree(dest)

    total, proc = crash_sweep(tmp_path, template, CHILD, check, sample=24)
    assert total > 20, total   # the sweep stepped through the snapshot's own writes


def test_failed_snapshot_leaves_nothing_and_a_retry_works(tmp_path):
    root = tmp_path / "store"
    ids = _store(root)
    dest = tmp_path / "out" / "snap"
    from fsmem.format import fsops
    calls = {"n": 0}

    def hook(name: str) -> None:
        calls["n"] += 1
        if calls["n"] == 30:
            raise OSError(28, "injected: No space left on device")
    fsops.set_hook(hook)
    try:
        with pytest.raises(OSError):
            snapshot(root, dest)
    finally:
        fsops.set_hook(None)
    assert not os.path.lexists(dest)
    assert _partials(dest) == []    # removed on the way out
    snapshot(root, dest)
    _complete(dest, ids)


def test_partial_of_a_live_process_is_kept_a_dead_ones_removed(tmp_path):
    root = tmp_path / "store"
    _store(root, units=2)
    dest = tmp_path / "snap"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    try:
        keep = tmp_path / f"snap{PARTIAL_INFIX}{live.pid}-aaaa"
        gone = tmp_path / f"snap{PARTIAL_INFIX}{int(dead.stdout)}-bbbb"
        other = tmp_path / f"other{PARTIAL_INFIX}{int(dead.stdout)}-cccc"
        for p in (keep, gone, other):
            (p / ".fsmem").mkdir(parents=True)
        snapshot(root, dest)
        assert keep.is_dir() and other.is_dir()   # a live snapshot's; another destination's
        assert not gone.exists()
    finally:
        live.kill()
        live.wait()


def test_partial_snapshot_fsck_names_it(tmp_path):
    """A partial copy (its marker written first) is one clear finding, also through the CLI."""
    root = tmp_path / "store"
    _store(root, units=3)
    dest = tmp_path / "snap"
    from fsmem.format import fsops
    calls = {"n": 0}

    def hook(name: str) -> None:
        calls["n"] += 1
        if calls["n"] == 12:
            raise KeyboardInterrupt   # stands for a kill: nothing cleaned up below
    fsops.set_hook(hook)
    real_rmtree = fsops.rmtree
    fsops.rmtree = lambda *a, **k: None   # as after a SIGKILL: the partial copy stays
    try:
        with pytest.raises(KeyboardInterrupt):
            snapshot(root, dest)
    finally:
        fsops.set_hook(None)
        fsops.rmtree = real_rmtree
    assert not dest.exists()
    [partial] = _partials(dest)
    proc = run_cli("fsck", root=partial)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "partial-snapshot" in proc.stdout and "Traceback" not in proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 1, proc.stdout


def test_cli_snapshot_exit_codes(tmp_path):
    root = tmp_path / "store"
    _store(root, units=2)
    ok = run_cli("snapshot", str(tmp_path / "a"), root=root)
    assert ok.returncode == 0 and "snapshot of 2 units" in ok.stdout, ok.stderr
    again = run_cli("snapshot", str(tmp_path / "a"), root=root)
    assert again.returncode == 1 and "exists" in again.stderr and "Traceback" not in again.stderr
    (tmp_path / "empty").mkdir()
    into_empty = run_cli("snapshot", str(tmp_path / "empty"), root=root)
    assert into_empty.returncode == 0, into_empty.stderr
    assert (tmp_path / "empty" / ".fsmem" / "marker.json").is_file()
    assert not (tmp_path / "empty" / ".fsmem" / PARTIAL_MARKER).exists()


@pytest.fixture
def small_fs(tmp_path):
    """A 1 MiB tmpfs (root only): a destination that fills up."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        if os.environ.get("CI") == "1":
            pytest.fail(f"cannot mount a tmpfs under CI: {proc.stderr}")
        pytest.skip(f"cannot mount a tmpfs (root needed): {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_disk_full_destination_leaves_nothing(tmp_path, small_fs):
    root = tmp_path / "store"
    ids = _store(root, units=20, size=20000)   # ~2.5 MiB of text: more than the tmpfs holds
    dest = small_fs / "snap"
    proc = subprocess.run([sys.executable, "-m", "fsmem.cli", "snapshot", str(dest),
                           "--root", str(root)], capture_output=True, text=True,
                          cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(PKG_ROOT)},
                          timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "No space" in proc.stderr, proc.stderr
    assert not os.path.lexists(dest)
    assert os.listdir(small_fs) == []   # the partial copy removed on the way out
    big = tmp_path / "big"
    snapshot(root, big)
    _complete(big, ids)
