"""Group commit (Memory.append_many): a burst of L1 units behind one journal entry, so the
burst costs the barriers of one operation, not one per event; all or nothing on a fault or a
crash; idempotency keys honoured; one prune for the burst."""

from __future__ import annotations

import os
import shutil

import pytest

from fsmem import Event, FsmemError, Memory, Timestamp
from fsmem.format import fsops as _fsops
from fsmem.format.model import MediaAttachment

from conftest import STRESS, crash_sweep

T0 = Timestamp.parse("2026-03-01T09:00:00+00:00").ns
BARRIERS = ("fsync", "fsync_dir", "syncfs")


def _ev(i: int, **kw) -> Event:
    return Event(timestamp=Timestamp(T0 + i * 10**9, 0), source="alice",
                 input=f"turn {i} about the harbour", **kw)


def _l1_ids(mem: Memory) -> list[str]:
    return sorted(e.id for e in mem.timeline())


def _barriers(fn) -> int:
    ops: list[str] = []
    _fsops.set_hook(ops.append)
    try:
        fn()
    finally:
        _fsops.set_hook(None)
    return sum(op in BARRIERS for op in ops)


def test_a_burst_is_stored_in_order_with_the_barriers_of_one_operation(root):
    mem = Memory.open(root, durability="full", auto_prune=False)
    one = _barriers(lambda: mem.append(_ev(0)))
    small = _barriers(lambda: mem.append_many([_ev(1), _ev(2)]))
    ids: list[str] = []
    big = _barriers(lambda: ids.extend(mem.append_many([_ev(i) for i in range(3, 11)])))
    assert small == big <= 2 * one   # constant per burst, not per event
    assert big < 8 * one
    assert len(ids) == 8 and len(set(ids)) == 8
    assert [e.input for e in mem.timeline()] == [f"turn {i} about the harbour"
                                                         for i in range(11)]
    assert len(os.listdir(mem.store.staging)) == 0
    assert mem.fsck(read_data=True) == []


def test_a_burst_over_capacity_prunes_once(root):
    mem = Memory.open(root, durability="off", context_capacity=12, context_protected=2)
    calls = []
    real = mem.prune
    mem.prune = lambda **kw: calls.append(kw) or real(**kw)   # a spy: the real prune runs
    mem.append_many([_ev(i) for i in range(20)])
    assert len(calls) == 1
    assert len(mem.timeline()) <= 12
    assert len(mem.timeline()) + sum(len(u.manifest.events) for u in mem._load_layer("documents", with_vectors=False)) == 20


def test_idempotency_keys_are_honoured(root):
    mem = Memory.open(root, durability="off", auto_prune=False)
    mem.append(_ev(0, id="k-0"))
    ids = mem.append_many([_ev(0, id="k-0"), _ev(1, id="k-1"), _ev(1, id="k-1"), _ev(2)])
    assert ids[:3] == ["k-0", "k-1", "k-1"] and ids[3] not in ids[:3]
    assert _l1_ids(mem) == sorted(["k-0", "k-1", ids[3]])
    assert mem.append_many([_ev(1, id="k-1")]) == ["k-1"]
    assert len(mem.timeline()) == 3


def test_a_bad_event_in_the_burst_stores_none_of_it(root):
    mem = Memory.open(root, durability="off", auto_prune=False)
    mem.append(_ev(0))
    bad = _ev(2, attachments=[MediaAttachment(data=b"x")])   # data without a mime
    with pytest.raises(FsmemError, match="mime"):
        mem.append_many([_ev(1), bad, _ev(3)])
    assert len(mem.timeline()) == 1
    assert os.listdir(mem.store.staging) == []


def _burst_ops(root) -> list[str]:
    """The mutating fs calls of the burst the fault tests make, on a store in the same state."""
    mem = Memory.open(root, durability="full", auto_prune=False)
    mem.append(_ev(0))
    ops: list[str] = []
    _fsops.set_hook(ops.append)
    try:
        mem.append_many([_ev(i) for i in range(1, 4)])
    finally:
        _fsops.set_hook(None)
    return ops


@pytest.mark.parametrize("where", ["first", "a block", "the entry", "the commit barrier",
                                   "an apply rename", "the apply barrier"])
def test_a_failing_write_stores_none_of_the_burst_or_all_of_it(tmp_path, where):
    """Before the journal entry is durable a fault stores nothing (and raises); after it,
    the burst is decided: it is completed and acknowledged."""
    ops = _burst_ops(tmp_path / "probe")
    barriers = [i for i, op in enumerate(ops, 1) if op in BARRIERS]
    commit = barriers[0]
    fail_at = {"first": 1, "a block": 2, "the entry": commit - 2, "the commit barrier": commit,
               "an apply rename": [i for i, op in enumerate(ops, 1)   # the second unit's
                                   if op == "rename" and i > commit][1],
               "the apply barrier": barriers[1]}[where]
    decided = fail_at > commit
    root = tmp_path / "mem"
    mem = Memory.open(root, durability="full", auto_prune=False)
    mem.append(_ev(0))
    seen = []

    def hook(op: str) -> None:
        seen.append(op)
        if len(seen) == fail_at:
            raise OSError(28, "injected ENOSPC")
    _fsops.set_hook(hook)
    try:
        if decided:
            mem.append_many([_ev(i) for i in range(1, 4)])
        else:
            with pytest.raises(OSError):
                mem.append_many([_ev(i) for i in range(1, 4)])
    finally:
        _fsops.set_hook(None)
    assert len(mem.timeline()) == (4 if decided else 1)
    assert os.listdir(mem.store.staging) == []
    assert os.listdir(mem.store.journal_dir) == []
    reopened = Memory.open(root, auto_prune=False)
    assert len(reopened.timeline()) == (4 if decided else 1)
    assert reopened.fsck(read_data=True) == []


def test_a_crash_during_a_burst_leaves_all_of_it_or_none(tmp_path):
    template = tmp_path / "template"
    mem = Memory.open(template, durability="full", auto_prune=False)
    mem.append(_ev(0))
    mem.close()
    child = f"""
import sys
from fsmem import Event, Memory, Timestamp
mem = Memory.open(sys.argv[1], durability="full", auto_prune=False)
mem.append_many([Event(timestamp=Timestamp({T0} + i * 10**9, 0), source="alice",
                       input=f"turn {{i}}", id=f"b-{{i}}") for i in range(1, 5)])
print("acknowledged", flush=True)
"""

    def check(root, label: str) -> None:
        m = Memory.open(root, auto_prune=False)
        burst = [e.id for e in m.timeline() if e.id.startswith("b-")]
        assert burst in ([], ["b-1", "b-2", "b-3", "b-4"]), (label, burst)
        if "acknowledged" in open(f"{root}.stdout").read():
            assert len(burst) == 4, label
        assert m.fsck(read_data=True) == [], label
        m.close()
    crash_sweep(tmp_path, template, child, check, sample=6)


@pytest.fixture(params=["batch", "syncfs", "fsync"] if STRESS else ["batch", "syncfs"])
def strategy(request, monkeypatch) -> str:
    """The default strategy here; both under FSMEM_STRESS=1 (tests/test_powerloss.py runs
    both for the single-append path)."""
    monkeypatch.setenv("FSMEM_SYNC", request.param)
    return request.param


def test_a_burst_survives_power_loss_whole_or_not_at_all(tmp_path, strategy):
    """The power-loss model of tests/test_powerloss.py on a burst into a full L1 (it also
    prunes): acknowledged events survive every crash state, no event is in two places, and
    the burst is never torn (all of its events or none)."""
    from conftest import full_context
    from test_powerloss import (_prepare, ack, acked_inputs, build_state, check_states,
                                choosers, crash_points, events_by_layer, record)
    base: set[str] = set()
    pre, live = _prepare(tmp_path, lambda p: base.update(full_context(p)))
    burst = [f"burst event {i}" for i in range(3)]

    def run() -> None:
        mem = Memory.open(live, context_capacity=4, context_protected=1, auto_prune=True)
        mem.append_many([Event(source="qq", input=t, response="r") for t in burst])
        for t in burst:
            ack(f"ack:{t}")
    log = record(run)
    assert any(op[0] == "rename" and os.path.basename(os.path.dirname(op[2])) == "documents"
               for op in log), "the burst did not prune"   # (removed L1 units wait in trash)
    assert check_states(tmp_path, pre, live, log, acked_inputs(base), budget=8) >= 8
    for k in crash_points(log, 6, 3):
        for _name, keep in choosers(3 + k, 1):
            state = tmp_path / f"whole-{k}"
            build_state(pre, live, log, k, keep, state)
            seen, _where = events_by_layer(state)
            assert sum(t in seen for t in burst) in (0, 3), (k, seen)
            shutil.rmtree(state)


def test_cli_append_of_json_lines_is_one_burst(tmp_path):
    """``fsmem append`` reading JSON lines stores them as one burst (Memory.append_many):
    every line's event in L1, in order, their ids printed, an idempotency key honoured; a
    line whose event cannot be stored stores none of them."""
    import json
    import subprocess
    import sys

    from conftest import REPO
    root = tmp_path / "mem"
    Memory.open(root).close()

    def append(ids) -> subprocess.CompletedProcess:
        lines = "\n".join(json.dumps({"source": "cli", "input": f"line {i}", "id": f"c-{i}"})
                          for i in ids)
        return subprocess.run([sys.executable, "-m", "fsmem.cli", "append", "--root",
                               str(root)], input=lines, capture_output=True, text=True,
                              cwd=str(REPO), timeout=60)
    bad = append([7, "8/bad", 9])
    assert bad.returncode != 0 and "8/bad" in bad.stderr
    assert Memory.open(root).timeline() == []
    proc = append([0, 1, 1, 2])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["c-0", "c-1", "c-1", "c-2"]
    assert [e.input for e in Memory.open(root).timeline()] == ["line 0", "line 1", "line 2"]


def test_a_decided_burst_whose_apply_fails_twice_still_succeeds(tmp_path, monkeypatch):
    """Once the burst's journal entry is durable the call succeeds, even when applying it
    fails both times: the entry stays, and the next writer lock's recovery completes it."""
    from fsmem.store.store import Store
    root = tmp_path / "mem"
    mem = Memory.open(root, durability="full", auto_prune=False)
    applying = {"calls": 0, "now": False}
    real_apply = Store.journal_apply

    def journal_apply(self, entry, **kw):   # the real apply; its renames fail in the first two
        applying["calls"] += 1
        applying["now"] = applying["calls"] <= 2
        try:
            return real_apply(self, entry, **kw)
        finally:
            applying["now"] = False

    def hook(op: str) -> None:
        if applying["now"] and op == "rename":
            raise OSError(5, "injected EIO")
    monkeypatch.setattr(Store, "journal_apply", journal_apply)
    _fsops.set_hook(hook)
    try:
        ids = mem.append_many([_ev(i) for i in range(3)])
    finally:
        _fsops.set_hook(None)
    assert len(ids) == 3 and applying["calls"] == 2
    assert _l1_ids(mem) == sorted(ids)   # the next lock's recovery completed it
    mem.close()
    again = Memory.open(root, durability="full", auto_prune=False)
    assert _l1_ids(again) == sorted(ids) and again.fsck() == []
    again.close()
