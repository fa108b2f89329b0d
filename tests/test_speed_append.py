"""The per-turn append path (issue 18): the units a prune removes are deleted in a batch, not
during the turn. Behaviour, not timing."""

from __future__ import annotations

import os

from fsmem import Event, Memory, Timestamp
from fsmem import store as store_mod

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
