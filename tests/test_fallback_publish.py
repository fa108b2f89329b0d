"""The fallback publish (issue 28 item 1): where renameat2(RENAME_NOREPLACE) answers EINVAL
(GlusterFS, bindfs, many FUSE filesystems), a unit is published by one plain rename under the
writer lock. A crash at any call leaves the unit staged or published, never an empty claim in
a layer; recovery never deletes a staged unit whose destination is an empty directory (what an
older fsmem left), and never waits on its own lock.

The sweeps run twice: on a real bindfs mount, whose rename answers EINVAL to NOREPLACE (the
kernel's own answer), and on the local filesystem with EINVAL produced by the real libc call
(NOREPLACE together with EXCHANGE, which the kernel refuses)."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import crash_sweep, stored_counts, topics_template
from fsmem import Event, Memory
from fsmem.format import fsops
from fuse_mounts import bindfs

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="renameat2 and FUSE: Linux")

# bindfs is refused for writing by name (issue 28 item 2); the tests use the documented override.
ALLOW = {"FSMEM_ALLOW_FS": "fuse"}   # bindfs: a FUSE type that names no subtype

# The child's own libc call answers EINVAL, as on a filesystem without NOREPLACE.
INJECT = """
from fsmem.format import fsops as _f
_real = _f._renameat2
_f._renameat2 = lambda a, b, c, d, flags: _real(a, b, c, d, flags | 2)   # | RENAME_EXCHANGE
"""

# Each fallback rename's call number printed, so the sweep crashes right before and right
# after every one of them (the window an empty claim used to open), whatever it samples.
MARK = """
from fsmem.format import fsops as _m
_rename = _m.rename
def _marked(src, dst, **kw):
    print("point", _m.call_count() + 1, flush=True)
    return _rename(src, dst, **kw)
_m.rename = _marked
"""


def _renames(stdout: str) -> list[int]:
    marks = [int(ln.split()[1]) for ln in stdout.splitlines() if ln.startswith("point ")]
    return sorted({p + d for p in marks for d in (0, 1)})

CHILD = """
import sys
from fsmem import Event, Memory
mem = Memory.open(sys.argv[1], context_capacity=4, context_protected=1, lock_timeout=5)
assert not mem.store.noreplace, "the fallback is not in use"
for i in range(5):   # past capacity: each append's journaled prune moves units to L2
    mem.append(Event(source="qq", input=f"fallback event {i} topic{i % 2}"))
    print("ack", f"fallback event {i} topic{i % 2}", flush=True)
mem.commit("fallback note topic0", source="qq")
print("ack fallback note topic0", flush=True)
mem.recall("topic1", top_k=1)
mem.prune()
"""


def _stored(root: Path) -> Counter:
    """Every event's input, counted over every layer, after a writer open (recovery runs; a
    wedged lock is StoreLocked after 5 s, failing the test; an empty claim: NotFound)."""
    return stored_counts(root, lock_timeout=5)


def _template(root: Path) -> Counter:
    return topics_template(root, lock_timeout=5)


def _checker(before: Counter):
    def check(root: Path, label: str) -> None:
        out = Path(f"{root}.stdout")
        acked = [ln[4:] for ln in out.read_text().splitlines() if ln.startswith("ack ")] \
            if out.exists() else []
        stored = _stored(root)
        assert all(stored[t] == 1 for t in [*before, *acked]), f"{label}: lost: {stored}"
        assert all(c == 1 for c in stored.values()), f"{label}: duplicated: {stored}"
        empty = [f"{layer}/{u}" for layer in ("context", "documents", "stablemem")
                 for u in os.listdir(root / layer) if not os.listdir(root / layer / u)]
        assert empty == [], f"{label}: empty unit directories {empty}"
        mem = Memory.open(root, lock_timeout=5)
        try:
            assert mem.fsck() == [], label
        finally:
            mem.close()
    return check


def test_bindfs_answers_einval_to_noreplace(tmp_path):
    """The premise of the real-mount sweep: bindfs's rename refuses RENAME_NOREPLACE."""
    (tmp_path / "src").mkdir()
    with bindfs(tmp_path / "src", tmp_path / "mnt") as mnt:
        assert fsops.renameat2_supported(mnt) is False
        assert fsops.renameat2_supported(tmp_path / "src") is True


def test_crash_sweep_on_a_real_einval_mount(tmp_path, monkeypatch):
    for k, v in ALLOW.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "src").mkdir()
    with bindfs(tmp_path / "src", tmp_path / "mnt") as mnt:
        before = _template(mnt / "template")
        total, _ = crash_sweep(mnt, mnt / "template", MARK + CHILD, _checker(before),
                               env=ALLOW, sample=6, focus=_renames)
        assert total > 30


def test_crash_sweep_with_einval_from_the_real_call(tmp_path):
    before = _template(tmp_path / "template")
    total, _ = crash_sweep(tmp_path, tmp_path / "template", INJECT + MARK + CHILD,
                           _checker(before), sample=6, focus=_renames)
    assert total > 30


PRUNE_THEN_CRASH = INJECT + """
import os, sys
from fsmem import Event, Memory
from fsmem.store import store as st
mem = Memory.open(sys.argv[1], context_capacity=2, context_protected=0)
real = st.Store.rename_dir
def claim_then_die(self, src, dst):   # an older fsmem: mkdir(dst), then a crash before the rename
    if os.path.basename(os.path.dirname(dst)) != "documents":
        return real(self, src, dst)       # the append's own publish into context/
    os.mkdir(dst)
    os._exit(9)
st.Store.rename_dir = claim_then_die
for i in range(3):
    mem.append(Event(source="qq", input=f"pruned {i}"))
    print("ack", f"pruned {i}", flush=True)
"""


def test_an_empty_claim_left_by_an_older_fsmem_never_costs_the_staged_unit(tmp_path):
    """An older fsmem's fallback crashed between mkdir(dst) and the rename of a journaled
    prune: recovery publishes the staged unit onto the empty claim; it used to see dst,
    delete the staged original, and lose the pruned events."""
    import subprocess

    from conftest import PKG_ROOT, REPO
    root = tmp_path / "m"
    Memory.open(root).close()
    p = subprocess.run([sys.executable, "-c", PRUNE_THEN_CRASH, str(root)], cwd=str(REPO),
                       env={**os.environ, "PYTHONPATH": str(PKG_ROOT)}, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 9, p.stderr
    assert os.listdir(root / ".fsmem" / "journal"), "the crash left no journaled prune"
    acked = [ln[4:] for ln in p.stdout.splitlines() if ln.startswith("ack ")]
    assert len(acked) >= 2
    stored = _stored(root)
    assert {t: stored[t] for t in acked} == {t: 1 for t in acked}
    mem = Memory.open(root)
    try:
        assert mem.fsck() == []
    finally:
        mem.close()


def test_an_empty_claim_of_an_unjournaled_publish_is_removed_at_recovery(tmp_path, monkeypatch):
    """An older fsmem's commit crashed between its claim and its rename: nothing was
    acknowledged; the empty directory it left in documents/ is not listed as a unit after the
    next writer's recovery."""
    root = tmp_path / "m"
    mem = Memory.open(root)
    kept = mem.commit("kept note")
    mem.close()
    claim = root / "documents" / "u-20260101T000000-0123456789ab"
    claim.mkdir()
    (root / ".fsmem" / "staging" / "u-20260101T000000-0123456789ab~999999999~dead").mkdir()
    import fsmem.store.store as st
    monkeypatch.setattr(st, "_renameat2_cache", {})
    real = fsops._renameat2
    monkeypatch.setattr(fsops, "_renameat2", lambda a, b, c, d, f: real(a, b, c, d, f | 2))
    mem = Memory.open(root)
    try:
        assert not mem.store.noreplace
        assert mem.units("documents") == [kept]
        assert not claim.exists()
        assert mem.fsck() == []
    finally:
        mem.close()


def test_the_fallback_never_replaces_a_name_that_exists(tmp_path, monkeypatch):
    """Under the fallback an existing destination, empty or not, is AlreadyExists with
    nothing replaced (as with RENAME_NOREPLACE)."""
    from fsmem.format.errors import AlreadyExists
    import fsmem.store.store as st
    monkeypatch.setattr(st, "_renameat2_cache", {})
    real = fsops._renameat2
    monkeypatch.setattr(fsops, "_renameat2", lambda a, b, c, d, f: real(a, b, c, d, f | 2))
    mem = Memory.open(tmp_path / "m")
    assert not mem.store.noreplace
    (tmp_path / "m" / "documents" / "u-full").mkdir()
    (tmp_path / "m" / "documents" / "u-full" / "mine.txt").write_text("mine")
    (tmp_path / "m" / "documents" / "u-empty").mkdir()
    for uid in ("u-full", "u-empty"):
        with pytest.raises(AlreadyExists):
            mem.commit_events([Event(input="x")], unit_id=uid)
    assert os.listdir(tmp_path / "m" / "documents" / "u-full") == ["mine.txt"]
    assert os.listdir(tmp_path / "m" / "documents" / "u-empty") == []
    mem.close()
