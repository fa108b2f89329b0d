"""The L1 cache of the writing process (fsmem.memory.l1cache): used, and never stale. Behaviour, not
timing: what it serves must equal what the directories hold, whoever changed them."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from fsmem import Event, Memory, Timestamp
from fsmem.memory.l1cache import _cache_of, event_terms, load_context
from fsmem.search.analyze import term_hashes
from fsmem.search.index_entry import event_texts, term_counts

from conftest import run_py
from test_index_identity import _rm_and_cp_a_reusing, _same_size_replacement

T0 = Timestamp.parse("2026-03-01T09:00:00+00:00").ns


def _event(i: int, text: str, source: str = "alice") -> Event:
    return Event(timestamp=Timestamp(T0 + i * 10**9, 0), source=source, input=text)


def _fresh(mem: Memory) -> dict[str, tuple]:
    """What L1 holds, read from the directories alone (no cache): id -> event ids."""
    return {u.unit_id: tuple(r.id for r in u.manifest.events)
            for u in mem._load_layer("context", with_vectors=True)}


def _cached(mem: Memory) -> dict[str, tuple]:
    return {u.unit_id: tuple(r.id for r in u.manifest.events) for u in load_context(mem)}


def test_appends_read_nothing_back(root):
    """The units this process appends are cached from what it wrote (l1cache.seed_written):
    no L1 unit's manifest or vectors is read again, and the cache still equals the
    directories (terms included)."""
    mem = Memory.open(root, durability="off", context_capacity=50)
    for i in range(10):
        mem.append(_event(i, f"turn {i} about the harbour"))
    assert _cached(mem) == _fresh(mem)
    cache = _cache_of(mem)
    before = cache.misses
    for i in range(10, 15):
        mem.append(_event(i, f"turn {i} about the harbour"))
    assert cache.misses - before == 0          # the new units were seeded, the others kept
    assert _cached(mem) == _fresh(mem)
    fresh = {u.unit_id: u for u in mem._load_layer("context", with_vectors=True)}
    for unit in load_context(mem):
        disk = fresh[unit.unit_id]
        assert unit.arrival_ns == disk.arrival_ns and unit.manifest == disk.manifest
        assert sorted(unit.rows) == sorted(disk.rows)
        assert all(np.array_equal(unit.rows[k], disk.rows[k]) for k in disk.rows)
        for ev in unit.manifest.events:
            seeded, read = event_terms(mem, [(unit, ev)])[0], term_counts(event_texts(mem.plugins, disk.path, ev))
            assert np.array_equal(seeded[0], read[0]) and np.array_equal(seeded[1], read[1])


@pytest.mark.parametrize("how", ["append", "turn", "append_many"])
def test_appends_and_their_prunes_read_no_block_back(root, monkeypatch, how):
    """Issue 18: "append and prune never re-read L1". Every append here prunes and ranks all
    of L1 by its terms: each event is tokenised from the text this process wrote, once, and
    no block of L1 is read. The prunes decide as a cold cache (blocks read) would."""
    import fsmem.format.blocks
    from fsmem.memory.turn import InjectOptions
    reads: list[str] = []
    real = fsmem.format.blocks.read_block

    def counting(path, *a, **k):
        reads.append(path)
        return real(path, *a, **k)
    opts = InjectOptions(context_policy="prune", recall_policy="none")

    def live(where, cold: bool) -> tuple[set[str], set[str]]:
        mem = Memory.open(where, durability="off", context_capacity=8, context_protected=2)
        for i in range(0, 30, 2):
            if cold:
                mem._l1_cache = None
            a, b = (Event(id=f"e-{j:03d}", timestamp=Timestamp(T0 + j * 10**9, 0),
                          source="alice", input=f"turn {j} about "
                          f"{['the boat', 'bread', 'rain', 'the harbour'][j % 4]}")
                    for j in (i, i + 1))
            if how == "turn":
                mem.turn(a, b, options=opts)
            elif how == "append_many":
                mem.append_many([a, b])
            else:
                mem.append(a)
                mem.append(b)
        l1 = {e.id for e in mem.timeline()}
        l2 = {e.id for u in mem.units("documents") for e in mem.document(u).events}
        return l1, l2
    cold = live(root / "cold", cold=True)
    monkeypatch.setattr(fsmem.format.blocks, "read_block", counting)
    warm = live(root / "warm", cold=False)
    assert [r for r in reads if "/context/" in r or "/staging/" in r] == []
    assert warm == cold and len(warm[1]) > 10   # it did prune, as often as a cold cache


def test_another_process_appending_and_pruning_is_seen(root):
    mem = Memory.open(root, durability="off", context_capacity=8, context_protected=2)
    for i in range(6):
        mem.append(_event(i, f"turn {i} of the first writer"))
    assert len(_cached(mem)) == 6
    run_py(f"""
        from fsmem import Event, Memory, Timestamp
        mem = Memory.open({str(root)!r}, durability="off", context_capacity=8,
                          context_protected=2)
        for i in range(6, 12):   # goes over capacity: this process prunes
            mem.append(Event(timestamp=Timestamp({T0} + i * 10**9, 0), source="bob",
                             input=f"turn {{i}} of the second writer"))
        mem.close()
    """, check=True)
    assert _cached(mem) == _fresh(mem)
    assert len(mem.units("documents")) >= 1     # the other process's prune happened
    ids = {e for evs in _cached(mem).values() for e in evs}
    assert ids == {e.id for e in mem.timeline()}


def test_unit_replaced_under_the_same_id_onto_a_reused_inode_is_reread(root, tmp_path):
    mem = Memory.open(root, durability="off", context_capacity=50)
    mem.append(_event(0, "the parrot squeaks at dawn"))
    mem.append(_event(1, "the kettle boils"))
    units = {u.unit_id: u for u in load_context(mem)}
    uid = next(u for u, unit in units.items()
               if "parrot" in " ".join(e.input for e in mem.document(u).events))
    unit = units[uid]
    old_terms = event_terms(mem, [(unit, unit.manifest.events[0])])[0][0]
    assert set(term_hashes(["squeaks"])) <= set(old_terms.tolist())
    path = os.path.join(root, "context", uid)
    _same_size_replacement(path, str(tmp_path / "copy"), b"squeaks", b"rattles")
    old_ino = os.stat(os.path.join(path, "manifest.json")).st_ino
    _rm_and_cp_a_reusing(path, str(tmp_path / "copy"), old_ino)
    shutil.copystat(tmp_path / "copy", path)
    fresh = {u.unit_id: u for u in load_context(mem)}[uid]
    assert fresh is not unit
    terms = event_terms(mem, [(fresh, fresh.manifest.events[0])])[0][0]
    assert set(term_hashes(["rattles"])) <= set(terms.tolist())
    assert not set(term_hashes(["squeaks"])) & set(terms.tolist())


def test_prune_with_cache_equals_prune_without(root, tmp_path):
    """The same appends, one memory pruning from its cache, another from a cold cache on
    every append: the same events end up in the same layers."""
    def live(where, cold: bool) -> tuple[set[str], set[str]]:
        mem = Memory.open(where, durability="off", context_capacity=12, context_protected=3)
        for i in range(40):
            if cold:
                mem._l1_cache = None
            mem.append(Event(id=f"e-{i:03d}", timestamp=Timestamp(T0 + i * 10**9, 0),
                             source="alice" if i % 2 else "bob",
                             input=f"turn {i} about {['the boat', 'bread', 'rain'][i % 3]}"))
        l1 = {e.id for e in mem.timeline()}
        l2 = {e.id for u in mem.units("documents") for e in mem.document(u).events}
        return l1, l2
    assert live(root, cold=False) == live(tmp_path / "cold", cold=True)


def test_timeline_from_the_cache_equals_a_readers(root):
    from fsmem import Reader
    mem = Memory.open(root, durability="off", context_capacity=50)
    for i in range(6):
        mem.append(_event(i, f"turn {i} on the quay"))
    assert mem.timeline() == Reader.open(root).timeline()
    run_py(f"""
        from fsmem import Event, Memory, Timestamp
        mem = Memory.open({str(root)!r}, durability="off", context_capacity=50)
        mem.append(Event(timestamp=Timestamp({T0} - 10**9, 0), source="bob", input="earlier"))
    """, check=True)
    # one of this process's units (not the other process's "earlier" one): unit ids sort by
    # second, then by a random part, so a listing position is no choice
    victim = next(e.unit_id for e in Reader.open(root).timeline() if e.input.startswith("turn 2"))
    shutil.rmtree(os.path.join(root, "context", victim))      # rm -r by hand
    got = mem.timeline()
    assert got == Reader.open(root).timeline()
    assert len(got) == 6 and got[0].input == "earlier"
    assert mem.render(4000) == Reader.open(root).render(4000)
