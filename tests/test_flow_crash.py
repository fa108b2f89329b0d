"""Exactly once across crashes: SIGKILL-equivalent exits at every fs call of prune and recall,
and two processes recalling and pruning at once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from conftest import PKG_ROOT, REPO, assert_feed_agrees, crash_sweep, make_png
from fsmem import Event, MediaAttachment, Memory, ToolOutput

CHILD = """
import sys
from fsmem import Memory
mem = Memory.open(sys.argv[1], context_capacity=4, context_protected=1, auto_prune=False)
print("pruned", mem.prune(query="topic alpha"), flush=True)
print("recalled", mem.recall("topic beta archived", top_k=2), flush=True)
print("pruned", mem.prune(query="topic beta"), flush=True)
"""


def _all_events(root) -> Counter:
    mem = Memory.open(root)
    seen: Counter = Counter()
    for layer in ("context", "documents", "stablemem"):
        for unit in mem.units(layer):
            for ev in mem.document(unit).events:
                seen[(ev.id, ev.input, ev.response)] += 1
    return seen


def _template(path) -> Counter:
    mem = Memory.open(path, context_capacity=100, auto_prune=False)
    mem.commit_events([Event(source="qq", input=f"topic beta archived {i}",
                             response="r" * 300) for i in range(3)])
    for i in range(7):
        word = "alpha" if i % 2 else "gamma"
        mem.append(Event(source="qq", input=f"topic {word} {i}", response=f"answer {i}",
                         tools_used=["t"], tool_results=[ToolOutput(name="t", output=f"o{i}")],
                         attachments=[MediaAttachment(data=make_png(seed=i), mime="image/png")]
                         if i == 3 else []))
    return _all_events(path)


def test_crash_point_sweep_prune_and_recall(tmp_path):
    template = tmp_path / "template"
    expected = _template(template)
    assert all(c == 1 for c in expected.values()) and len(expected) == 10

    def check(root, label):
        got = _all_events(root)          # reopening runs recovery
        assert got == expected, f"{label}: events lost or duplicated: {got - expected} " \
                                f"{expected - got}"
        assert Memory.open(root).fsck() == [], label
        assert os.listdir(root / ".fsmem" / "staging") == [], label
        assert os.listdir(root / ".fsmem" / "journal") == [], label
        assert_feed_agrees(root, label)
    n, proc = crash_sweep(tmp_path, template, CHILD, check)
    assert n > 30
    assert "recalled ['u-" in proc.stdout


CHILD_LOOP = """
import sys
from fsmem import Event, Memory
from fsmem.memory.prune import prune_context
mem = Memory.open(sys.argv[1], context_capacity=5, context_protected=1, auto_prune=False)
print("groups", len(prune_context(mem, "keep")), flush=True)
mem.auto_prune = True
print("recalled", mem.recall("archived conversation", top_k=1), flush=True)
mem.append(Event(source="qq", input="keep the recall pinned"))
"""


def _loop_template(path) -> Counter:
    """L1 holds two sessions a day apart (a multi-group prune); L2 a 4-event conversation
    that a recall brings back into a full L1 (its own prune must evict others, not it)."""
    from fsmem import Timestamp
    day = 86_400_000_000_000
    t0 = Timestamp.parse("2026-10-01T08:00:00Z").ns
    mem = Memory.open(path, context_capacity=100, auto_prune=False)
    mem.commit_events([Event(timestamp=Timestamp(t0 - day + k), source="qq",
                             input=f"archived conversation {k}") for k in range(4)])
    for k in range(4):
        for d in (0, 1):
            mem.append(Event(timestamp=Timestamp(t0 + d * day + k * 60_000_000_000),
                             source="wechat" if d else "qq",
                             input=("keep" if k % 2 else "drop") + f" day{d} {k}"))
    return _all_events(path)


def test_crash_point_sweep_multi_group_prune_pinned_recall(tmp_path):
    template = tmp_path / "template"
    expected = _loop_template(template)
    assert all(c == 1 for c in expected.values()) and len(expected) == 12
    appended = {"keep the recall pinned"}

    def check(root, label):
        got = _all_events(root)          # reopening runs recovery
        new = got - expected             # the child's own append, once if it was durable
        assert not expected - got and all(c == 1 for c in got.values()), \
            f"{label}: events lost or duplicated: {expected - got} {got}"
        assert {inp for _, inp, _ in new} <= appended, label
        assert Memory.open(root).fsck() == [], label
        assert os.listdir(root / ".fsmem" / "staging") == [], label
        assert os.listdir(root / ".fsmem" / "journal") == [], label
        assert_feed_agrees(root, label)
    n, proc = crash_sweep(tmp_path, template, CHILD_LOOP, check)
    assert "groups 2" in proc.stdout and "recalled ['u-" in proc.stdout
    assert n > 30


def test_two_processes_recalling_and_pruning(tmp_path):
    root = tmp_path / "m"
    mem = Memory.open(root, auto_prune=False)
    for i in range(12):
        mem.commit_events([Event(source="qq", input=f"shared topic number {i} keyword{i % 3}")])
    expected = _all_events(root)
    code = f"""
import sys, time
from fsmem import Memory, Event
mem = Memory.open({str(root)!r}, context_capacity=5, context_protected=1)
end = time.time() + 3
k = 0
while (time.time() < end or k < 8) and k < 500:   # at least 8 rounds, however slow the machine
    mem.recall(f"shared topic keyword{{k % 3}}", top_k=2)
    mem.prune(query=f"keyword{{(k + 1) % 3}}")
    k += 1
print(k)
"""
    env = {**os.environ, "PYTHONPATH": str(PKG_ROOT)}
    procs = [subprocess.Popen(cwd=str(REPO), args=[sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env=env) for _ in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=90)
        assert p.returncode == 0 and int(out) > 3
    assert _all_events(root) == expected
    assert Memory.open(root).fsck() == []


def test_two_processes_recall_the_same_unit_exactly_one_gets_it(tmp_path):
    root = tmp_path / "m"
    mem = Memory.open(root, auto_prune=False)
    unit = mem.commit("the one and only 唯一")
    code = f"""
from fsmem import Memory
mem = Memory.open({str(root)!r}, auto_prune=False)
print(",".join(mem.recall("the one and only 唯一", top_k=1)))
"""
    env = {**os.environ, "PYTHONPATH": str(PKG_ROOT)}
    procs = [subprocess.Popen(cwd=str(REPO), args=[sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    outs = [out.strip() for out, _ in results]
    assert sorted(outs) == ["", unit]
    assert Memory.open(root).units("context") == [unit]
