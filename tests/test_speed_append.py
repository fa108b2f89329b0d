"""The per-turn append path (issue 18): the units a prune removes are deleted in a batch, not
during the turn. Behaviour, not timing."""

from __future__ import annotations

import os

import pytest

from fsmem import Event, Memory, Timestamp
from fsmem.store import store as store_mod

T0 = Timestamp.parse("2026-03-01T09:00:00+00:00").ns


def _event(i: int) -> Event:
    return Event(timestamp=Timestamp(T0 + i * 10**9, 0), source="alice",
                 input=f"turn {i} about the harbour and the boats")


def _trash(root) -> list[str]:
    return os.listdir(os.path.join(root, ".fsmem", "trash"))


def _l2_events(mem: Memory) -> set[str]:
    return {r.id for u in mem._load_layer("documents", with_vectors=True)
            for r in u.manifest.events}


def test_pruned_units_wait_in_the_trash_until_close(root):
    """A prune leaves the L1 units it removed in .fsmem/trash/ (deleted later, in a batch);
    nothing of them is lost: their events are in L2, readable, and close empties the trash."""
    mem = Memory.open(root, durability="off", context_capacity=4, context_protected=1,
                      context_tokens=10**9)
    for i in range(9):
        mem.append(_event(i))
    assert _trash(root)                      # deferred: not deleted during the turn
    timeline = {e.id for e in mem.timeline()}
    archived = _l2_events(mem)
    assert len(timeline) + len(archived) == 9 and not timeline & archived
    assert list(mem.fsck()) == []              # the trash is no finding
    mem.close()
    assert _trash(root) == []
    again = Memory.open(root, durability="off", context_capacity=4, context_protected=1)
    assert {e.id for e in again.timeline()} == timeline and _l2_events(again) == archived
    again.close()


def test_the_trash_is_emptied_once_it_holds_a_batch(root, monkeypatch):
    """A process that never closes does not grow the trash without bound."""
    monkeypatch.setattr(store_mod, "TRASH_BATCH", 3)
    mem = Memory.open(root, durability="off", context_capacity=3, context_protected=1,
                      context_tokens=10**9)
    most = 0
    for i in range(30):
        mem.append(_event(i))
        most = max(most, len(_trash(root)))
    assert 0 < most <= 3 + 3                 # a batch, plus what one prune removes
    assert len(mem.timeline()) + len(_l2_events(mem)) == 30
    mem.close()


def test_the_trash_is_emptied_by_the_next_open(root):
    """A process that ends without close leaves the trash to the next writer's open."""
    mem = Memory.open(root, durability="off", context_capacity=4, context_protected=1,
                      context_tokens=10**9)
    for i in range(9):
        mem.append(_event(i))
    assert _trash(root)
    del mem
    again = Memory.open(root, durability="off", context_capacity=4, context_protected=1)
    assert _trash(root) == []
    assert len(again.timeline()) + len(_l2_events(again)) == 9
    again.close()


def _mixed_event(i: int) -> Event:
    topics = ("the harbour and the boats", "tax forms and the deadline", "a recipe for bread")
    return Event(timestamp=Timestamp(T0 + i * 10**9, 0), source="alice" if i % 2 else "bob",
                 id=f"ev-{i}", input=f"turn {i} about {topics[i % 3]}",
                 response=f"noted {topics[(i * 7) % 3]}")


def _layout(mem: Memory) -> tuple[list[str], list[list[str]]]:
    """L1's event ids in order, and L2's units as sorted lists of event ids (ids of units
    differ between stores, so units are compared by what they hold)."""
    l1 = [e.id for e in mem.timeline()]
    l2 = sorted(sorted(r.id for r in u.manifest.events)
                for u in mem._load_layer("documents", with_vectors=True))
    return l1, l2


def test_a_pruning_append_evicts_what_append_then_prune_evicts(tmp_path):
    """The append that overflows L1 publishes its unit and the prune in one journal entry;
    what it evicts, and how it groups the evicted events into L2 units, is exactly what an
    append followed by a separate prune (with the event's text as the focus) gives."""
    one = Memory.open(tmp_path / "one", durability="off", context_capacity=6,
                      context_protected=2, context_tokens=4 * 2000)
    two = Memory.open(tmp_path / "two", durability="off", context_capacity=6,
                      context_protected=2, context_tokens=4 * 2000, auto_prune=False)
    for i in range(20):
        ev = _mixed_event(i)
        one.append(ev)
        two.append(ev)
        two.prune(query=" ".join(t for t in (ev.input, ev.response) if t))
        assert _layout(one) == _layout(two), i
    assert len(one.timeline()) <= 6 and _layout(one)[1]
    one.close()
    two.close()


def test_a_pruning_append_is_one_journal_entry_and_two_barriers(tmp_path, monkeypatch):
    """Durable, "batch" strategy: the append that overflows L1 makes its own unit and the
    prune durable in one journal entry: two barriers (the staged units with the entry, then
    the renames), where an append then a prune took four."""
    from fsmem.format import fsops as _fsops
    monkeypatch.setenv("FSMEM_SYNC", "batch")
    mem = Memory.open(tmp_path / "m", context_capacity=4, context_protected=1,
                      context_tokens=2 * 2000)
    for i in range(4):
        mem.append(_mixed_event(i))
    ops: list[str] = []
    _fsops.set_hook(ops.append)
    try:
        mem.append(_mixed_event(4))
    finally:
        _fsops.set_hook(None)
    assert len(mem.timeline()) <= 4 and "ev-4" in {e.id for e in mem.timeline()}
    assert ops.count("fsync") == 2, ops
    mem.close()


def _prune_once(root) -> Memory:
    mem = Memory.open(root, durability="off", context_capacity=2, context_protected=1,
                      context_tokens=10**9)
    for i in range(3):
        mem.append(_event(i))
    return mem


def test_the_epoch_is_bumped_in_place(root):
    """Readers compare ``.fsmem/epoch`` before and after they read; writers bump it twice
    around every journaled change. It is rewritten in place, not replaced by a rename: on
    ext4 a rename over an existing file starts writeback of the new one (auto_da_alloc),
    2-4 ms per bump here, twice per prune."""
    mem = _prune_once(root)
    path = os.path.join(root, ".fsmem", "epoch")
    fd, before = os.open(path, os.O_RDONLY), mem.store.epoch()
    assert before >= 2
    mem.prune("")                        # within capacity: no journaled change
    assert mem.store.epoch() == before
    mem.append(_event(3))                # L1 back at capacity: no journaled change
    assert mem.store.epoch() == before
    mem.append(_event(4))                # over it: one journaled change, two bumps
    assert mem.store.epoch() == before + 2
    assert int(os.pread(fd, 64, 0)) == before + 2   # in place: the open file shows it
    os.close(fd)
    mem.close()


@pytest.mark.parametrize("odd", ["fifo", "symlink", "hard link", "old text"])
def test_an_odd_epoch_file_is_replaced_not_followed(root, tmp_path, odd):
    """A FIFO, or a link (to a file outside the store), where the epoch should be: a bump
    neither hangs nor writes through the link; the epoch file becomes a regular file again.
    An epoch written by an older release (a bare number) goes on counting from it."""
    _prune_once(root).close()
    path = os.path.join(root, ".fsmem", "epoch")
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    os.unlink(path)
    if odd == "fifo":
        os.mkfifo(path)
    elif odd == "symlink":
        os.symlink(outside, path)
    elif odd == "hard link":
        os.link(outside, path)
    else:
        with open(path, "w") as f:
            f.write("41")
    mem = _prune_once(root)
    assert outside.read_text() == "not yours"
    assert not os.path.islink(path) and os.path.isfile(path) and os.stat(path).st_nlink == 1
    assert mem.store.epoch() >= (41 + 2 if odd == "old text" else 2)
    mem.close()


@pytest.mark.parametrize("call", ["turn", "append_many"])
def test_a_pruning_turn_or_burst_is_one_journal_entry_and_two_barriers(tmp_path, monkeypatch,
                                                                       call):
    """A turn (input + response) whose policy prunes, or a burst that overflows L1, makes
    its events and the prune durable in one journal entry: two barriers (a turn took two
    publishes of two and a prune of three before)."""
    from fsmem.format import fsops as _fsops
    from fsmem.memory.turn import InjectOptions
    monkeypatch.setenv("FSMEM_SYNC", "batch")
    mem = Memory.open(tmp_path / "m", context_capacity=4, context_protected=2,
                      context_tokens=2 * 2000)
    for i in range(4):
        mem.append(_mixed_event(i))
    q, a = _mixed_event(4), _mixed_event(5)
    ops: list[str] = []
    _fsops.set_hook(ops.append)
    try:
        if call == "turn":
            archived = mem.turn(q, a, options=InjectOptions(context_policy="prune")).archived
        else:
            mem.append_many([q, a])
            archived = [u for u in mem.units("documents")]
    finally:
        _fsops.set_hook(None)
    assert archived and ops.count("fsync") == 2, (archived, ops)
    l1 = {e.id for e in mem.timeline()}
    assert {"ev-4", "ev-5"} <= l1 and len(l1) <= 4
    stored = l1 | {r.id for u in mem._load_layer("documents", with_vectors=True)
                   for r in u.manifest.events}
    assert stored == {f"ev-{i}" for i in range(6)}
    mem.close()

