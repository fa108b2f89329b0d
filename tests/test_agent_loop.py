"""The living agent loop (issue 12): recall that sticks, archives that hold a conversation,
policies that act, and the turn API.

Every test drives a real store on disk; layer membership is read from the unit directories.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from fsmem import (ChannelDef, Event, InjectOptions, Memory, TextEvent, Timestamp, ToolDef,
                   ToolOutput)
from fsmem.memory.prune import watermark
from fsmem.format.unit import read_manifest, read_vectors

MIN = 60_000_000_000
T0 = Timestamp.parse("2026-10-01T08:00:00+08:00").ns


def _at(minute: int) -> Timestamp:
    return Timestamp(T0 + minute * MIN, 8 * 3600)


def _layer_events(mem: Memory, layer: str) -> dict[str, str]:
    """event id -> unit id, for every event of ``layer``."""
    out = {}
    for unit in mem.units(layer):
        for rec in read_manifest(f"{mem.root}/{layer}/{unit}").events:
            out[rec.id] = unit
    return out


def _every_event_once(mem: Memory) -> Counter:
    seen: Counter = Counter()
    for layer in ("context", "documents", "stablemem"):
        for eid in _layer_events(mem, layer):
            seen[eid] += 1
    return seen


def _conversation(n: int = 20) -> list[Event]:
    """A recital-planning conversation: one event names the piano, the rest are small talk."""
    out = [Event(timestamp=_at(0), source="qq", input="piano recital plan for 年糕")]
    out += [Event(timestamp=_at(k), source="qq" if k % 2 else "agent",
                  input=f"small talk line {k} about nothing in particular")
            for k in range(1, n)]
    return out


def _full_l1(tmp_path, **kw) -> tuple[Memory, str, list[str]]:
    """L2 holds a 20-event conversation; L1 is filled to capacity with events that match the
    recall query better than most of the conversation does."""
    mem = Memory.open(tmp_path / "m", **kw)
    conv = _conversation()
    unit = mem.commit_events(conv)
    ids = [r.id for r in read_manifest(f"{mem.root}/documents/{unit}").events]
    for k in range(mem.context_capacity):
        mem.append(Event(timestamp=_at(10_000 + k), source="cli", input=f"recital ticket {k}"))
    return mem, unit, ids


# -- 1. recall sticks --------------------------------------------------------------------

def test_recall_returns_ids_that_exist_in_l1_with_all_their_events(tmp_path):
    mem, unit, ids = _full_l1(tmp_path)
    moved = mem.recall("piano recital", top_k=1)
    assert moved == [unit]
    for uid in moved:
        assert uid in mem.units("context")
    in_l1 = _layer_events(mem, "context")
    assert all(in_l1.get(e) == unit for e in ids)          # all 20, still in the same unit
    assert all(c == 1 for c in _every_event_once(mem).values())
    assert mem.fsck() == []


def test_recall_then_append_keeps_every_recalled_event_in_l1(tmp_path):
    mem, unit, ids = _full_l1(tmp_path)
    moved = mem.recall("piano recital", top_k=1)
    mem.append(Event(source="agent", input="piano recital", response="已加载 1 篇文档记忆"))
    in_l1 = _layer_events(mem, "context")
    assert all(u in mem.units("context") for u in moved)
    assert all(in_l1.get(e) == unit for e in ids)
    assert all(c == 1 for c in _every_event_once(mem).values())


def test_the_recalls_own_prune_evicts_others_never_what_it_brought(tmp_path):
    mem, unit, ids = _full_l1(tmp_path)
    before = set(mem.units("documents")) - {unit}
    mem.recall("piano recital", top_k=1)
    new_l2 = set(mem.units("documents")) - before
    assert new_l2, "L1 was over capacity: the recall's prune made room"
    in_l2 = _layer_events(mem, "documents")
    archived = {e for e, u in in_l2.items() if u in new_l2}
    assert not archived & set(ids)
    assert sum(1 for _ in _layer_events(mem, "context")) <= mem.context_capacity


def test_l1_stays_over_capacity_until_a_later_turn_then_prunes_by_relevance(tmp_path):
    mem = Memory.open(tmp_path / "m", context_capacity=10, context_protected=2)
    conv = [Event(timestamp=_at(k), source="qq", input=f"garden chat {k}") for k in range(15)]
    unit = mem.commit_events(conv)
    for k in range(10):
        mem.append(Event(timestamp=_at(1000 + k), source="cli", input=f"solar panel {k}"))
    conv_ids = set(_layer_events(mem, "documents"))
    assert mem.recall("garden chat", top_k=1) == [unit]
    assert len(_layer_events(mem, "context")) > mem.context_capacity   # 15 pinned + 2 protected
    mem.append(Event(source="cli", input="solar panel output today"))  # same turn: pinned
    assert unit in mem.units("context")
    mem.append(Event(source="cli", input="solar panel output tomorrow"))  # a later turn
    in_l1 = _layer_events(mem, "context")
    assert len(in_l1) <= mem.context_capacity
    recalled_left = conv_ids & set(in_l1)
    assert len(recalled_left) < 15            # evicted by relevance, now that the pin is gone
    assert all(c == 1 for c in _every_event_once(mem).values())
    assert mem.fsck() == []


def test_pins_are_kept_beside_the_units_never_inside_them(tmp_path):
    mem, unit, ids = _full_l1(tmp_path)
    before = open(f"{mem.root}/documents/{unit}/manifest.json", "rb").read()
    mem.recall("piano recital", top_k=1)
    assert open(f"{mem.root}/context/{unit}/manifest.json", "rb").read() == before


# -- 2. coherent archives ----------------------------------------------------------------

def test_watermark_is_homeagents_top_k_rule():
    assert watermark(30, 10, context_tokens=None) == 11        # HomeAgent's unknown window
    assert watermark(30, 10, context_tokens=40_000) == 20
    assert watermark(30, 10, context_tokens=1_000_000) == 29   # <= capacity - 1
    assert watermark(30, 10, context_tokens=100) == 11         # >= protected + 1
    assert watermark(30, 10, context_tokens=40_000, avg_event_tokens=4000) == 11
    assert watermark(3, 1, context_tokens=None) == 2


def test_one_prune_moves_a_batch_down_to_the_watermark(tmp_path):
    mem = Memory.open(tmp_path / "m")
    for k in range(31):
        mem.append(Event(timestamp=_at(k), source="alice" if k % 2 else "bob",
                         input=f"line {k} of our long talk"))
    assert len(_layer_events(mem, "context")) == 11
    docs = mem.units("documents")
    assert len(docs) == 1 and len(_layer_events(mem, "documents")) == 20
    mem2 = Memory.open(tmp_path / "m2", context_tokens=40_000)
    for k in range(31):
        mem2.append(Event(timestamp=_at(k), source="alice", input=f"line {k}"))
    assert len(_layer_events(mem2, "context")) == 20


def test_300_appends_past_capacity_archive_multi_event_units_nothing_lost(tmp_path):
    mem = Memory.open(tmp_path / "m")
    sent = {}
    for k in range(330):
        ev = Event(timestamp=_at(k), source="alice" if k % 2 else "bob",
                   input=f"turn {k}: weather, groceries and the cat")
        sent[mem.append(ev)] = ev.timestamp
    seen = _every_event_once(mem)
    assert set(seen) == set(sent) and all(c == 1 for c in seen.values())
    sizes = [len(read_manifest(f"{mem.root}/documents/{u}").events)
             for u in mem.units("documents")]
    assert sizes and min(sizes) > 1
    for u in mem.units("documents"):
        for ev in mem.document(u).events:
            assert ev.timestamp == sent[ev.id]
    assert mem.fsck() == []


def test_events_archived_together_split_into_coherent_units_in_one_journal_entry(tmp_path):
    mem = Memory.open(tmp_path / "m", context_capacity=10, context_protected=2,
                      auto_prune=False)
    day = 24 * 60
    for k in range(6):   # two sessions a day apart, then the recent conversation
        mem.append(Event(timestamp=_at(k), source="qq", input=("keep" if k % 2 else "drop")
                         + f" morning {k}"))
        mem.append(Event(timestamp=_at(day + k), source="wechat",
                         input=("keep" if k % 2 else "drop") + f" evening {k}"))
    mem.append(Event(timestamp=_at(2 * day), source="qq", input="latest a"))
    mem.append(Event(timestamp=_at(2 * day + 1), source="qq", input="latest b"))
    entries = []
    commit = mem.store.journal_commit
    mem.store.journal_commit = lambda e: (entries.append(e), commit(e))[1]  # type: ignore
    first = mem.prune(query="keep")
    assert first is not None and len(entries) == 1
    archives = [u for _, layer, u in entries[0].publish if layer == "documents"]
    assert len(archives) == 2
    groups = sorted(sorted(e.input for e in mem.document(u).events) for u in archives)
    assert groups == [[f"drop evening {k}" for k in (0, 2, 4)],
                      [f"drop morning {k}" for k in (0, 2, 4)]]
    assert mem.fsck() == []


# -- 3. the turn API ---------------------------------------------------------------------

def test_inject_options_zero_value_remember_no_prune_recall_auto(tmp_path):
    opts = InjectOptions()
    assert (opts.no_memory, opts.context_policy, opts.cleaner_name) == (False, "", "")
    assert opts.recall_policy in ("", "auto") and opts.priority in ("", "L1")
    mem = Memory.open(tmp_path / "m", context_capacity=5, context_protected=1)
    doc = mem.commit("piano recital on friday at 7")
    for k in range(8):                        # over capacity, under twice capacity
        res = mem.turn(TextEvent(role="user", content=f"piano question {k}", channel="qq"))
    assert len(_layer_events(mem, "context")) == 8        # remembered, never pruned
    assert [h.unit_id for h in res.hits] == [doc]          # recall auto: a read-only query
    assert mem.units("documents") == [doc]                 # nothing moved
    assert len(res.event_ids) == 1


def test_context_policy_prune_focuses_on_the_cleaned_input(tmp_path):
    plugins = [ChannelDef(name="web", cleaner=lambda s: s.replace("NOISE", ""))]
    mem = Memory.open(tmp_path / "m", context_capacity=5, context_protected=1,
                      plugins=plugins)
    for text in ("NOISE only", "cat food brand", "solar panel", "cat food price", "visa"):
        mem.turn(Event(source="cli", input=text))
    res = mem.turn(Event(source="qq", input="NOISE NOISE cat food NOISE"),
                   options=InjectOptions(context_policy="prune", cleaner_name="web"))
    kept = [e.input for e in mem.timeline()]
    assert len(kept) == watermark(5, 1, context_tokens=None) == 4
    assert "NOISE NOISE cat food NOISE" in kept and "NOISE only" not in kept
    assert "cat food brand" in kept and "cat food price" in kept
    assert res.archived and res.focus.strip() == "cat food"
    none = Memory.open(tmp_path / "n", context_capacity=5, context_protected=1)
    for k in range(7):
        none.turn(Event(source="cli", input=f"x {k}"), options=InjectOptions(context_policy="none"))
    assert len(none.timeline()) == 7


def test_recall_policy_none_gives_no_hits_and_auto_gives_the_top_3(tmp_path):
    mem = Memory.open(tmp_path / "m")
    for k in range(5):
        mem.commit(f"garden tomato note {k}")
    assert mem.turn(Event(source="qq", input="garden tomato"),
                    options=InjectOptions(recall_policy="none")).hits == []
    hits = mem.turn(Event(source="qq", input="garden tomato")).hits
    assert len(hits) == 3 and len(mem.units("documents")) == 5


def test_no_memory_stores_the_event_out_of_the_compute_layer(tmp_path):
    mem = Memory.open(tmp_path / "m")
    mem.commit("garden tomato note")
    res = mem.turn(Event(source="qq", input="garden tomato status"),
                   options=InjectOptions(no_memory=True))
    assert res.hits == [] and res.focus == ""
    (unit,) = mem.units("context")
    manifest = read_manifest(f"{mem.root}/context/{unit}")
    assert manifest.vectors is None                       # nothing embedded
    assert [e.input for e in mem.timeline()] == ["garden tomato status"]   # but remembered


def test_cleaner_by_name_cleans_compute_text_never_the_original(tmp_path):
    mem = Memory.open(tmp_path / "m", plugins=[
        ChannelDef(name="web", cleaner=lambda s: s.replace("NOISE", "").strip())],
        vectors="inline")   # stored, to look at what was embedded
    mem.commit("NOISE NOISE NOISE NOISE")
    piano = mem.commit("piano lesson")
    res = mem.turn(Event(source="qq", input="NOISE piano NOISE"),
                   options=InjectOptions(cleaner_name="web"))
    assert [h.unit_id for h in res.hits] == [piano]
    (unit,) = mem.units("context")
    manifest = read_manifest(f"{mem.root}/context/{unit}")
    keys, mat = read_vectors(f"{mem.root}/context/{unit}", manifest)
    assert np.allclose(mat[0], mem.embedder.embed(["piano"])[0])
    assert mem.timeline()[0].input == "NOISE piano NOISE"
    with pytest.raises(ValueError, match="cleaner_name.*nope"):
        mem.turn(Event(source="qq", input="x"), options=InjectOptions(cleaner_name="nope"))
    with pytest.raises(ValueError, match="context_policy"):
        mem.turn(Event(source="qq", input="x"), options=InjectOptions(context_policy="sometimes"))


def test_periodic_maintenance_prunes_past_twice_capacity_with_an_empty_query(tmp_path):
    mem = Memory.open(tmp_path / "m", context_capacity=5, context_protected=1)
    for k in range(10):
        mem.turn(Event(source="qq", input=f"turn {k}"))
    assert len(mem.timeline()) == 10 and mem.units("documents") == []
    res = mem.turn(Event(source="qq", input="turn 10"))
    assert res.archived and len(mem.timeline()) == watermark(5, 1, context_tokens=None)
    assert all(c == 1 for c in _every_event_once(mem).values())


def test_turn_with_a_response_appends_both_and_tool_declarations_act(tmp_path):
    plugins = [ToolDef(name="fetch", context_policy="prune", recall_policy="auto"),
               ToolDef(name="calc")]
    mem = Memory.open(tmp_path / "m", context_capacity=5, context_protected=1,
                      plugins=plugins)
    page = mem.commit("violin concert schedule")
    for text in ("violin strings", "solar panel", "violin bow", "visa", "rain"):
        mem.turn(Event(source="cli", input=text))
    quiet = mem.turn(Event(source="qq", input="hello"),
                     Event(source="agent", response="sum", tools_used=["calc"],
                           tool_results=[ToolOutput(name="calc", output="violin 2+2")]))
    assert quiet.archived == [] and page not in [h.unit_id for h in quiet.hits]
    assert len(quiet.event_ids) == 2
    res = mem.turn(Event(source="qq", input="hello again"),
                   Event(source="agent", response="here", tools_used=["fetch"],
                         tool_results=[ToolOutput(name="fetch", output="violin concert")]))
    assert page in [h.unit_id for h in res.hits]            # the tool's recall_policy auto
    assert res.archived                                     # the tool's context_policy prune
    kept = [e.input for e in mem.timeline()]
    assert any(k.startswith("violin") for k in kept) and "solar panel" not in kept
    assert mem.units("documents").count(page) == 1


def test_channel_declarations_act_when_the_options_leave_them_unset(tmp_path):
    mem = Memory.open(tmp_path / "m", context_capacity=3, context_protected=1,
                      plugins=[ChannelDef(name="alarm", context_policy="prune",
                                          recall_policy="none")])
    mem.commit("alarm history")
    for k in range(4):
        res = mem.turn(Event(source="alarm", input=f"alarm {k}"))
    assert res.hits == [] and res.archived and len(mem.timeline()) == 2


def test_priority_is_validated_and_l4_is_clamped_to_l3(tmp_path):
    mem = Memory.open(tmp_path / "m")
    assert mem.turn(Event(source="qq", input="a"), options=InjectOptions(priority="L4")).priority == "L3"
    with pytest.raises(ValueError, match="priority"):
        mem.turn(Event(source="qq", input="a"), options=InjectOptions(priority="L9"))


# -- 5. contract drifts ------------------------------------------------------------------

def test_text_event_timestamp_zero_means_now(tmp_path):
    mem = Memory.open(tmp_path / "m")
    before = time.time_ns()
    mem.append(TextEvent(role="user", content="hi", timestamp=0))
    mem.append(TextEvent(role="user", content="then", timestamp=1_790_000_000))
    got = {e.input: e.timestamp.ns for e in mem.timeline()}
    assert before - 10**9 <= got["hi"] <= time.time_ns()
    assert got["then"] == 1_790_000_000 * 10**9


def test_declarations_with_unknown_policies_are_refused(tmp_path):
    with pytest.raises(ValueError, match="ToolDef.*'fetch'.*context_policy"):
        Memory.open(tmp_path / "m", plugins=[ToolDef(name="fetch", context_policy="always")])
    with pytest.raises(ValueError, match="ChannelDef.*recall_policy"):
        Memory.open(tmp_path / "m", plugins=[ChannelDef(name="qq", recall_policy="sometimes")])
