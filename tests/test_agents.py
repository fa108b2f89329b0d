"""Agent namespaces in one store (issue 34, format 4): each agent its own L1, L2 and L3 shared
unless a unit is private, every unit and event naming its agent, scope and agent filters on
query and recall, updates that keep history, and two agents in two processes at once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from conftest import PKG_ROOT, REPO, STRESS, run_py
from fsmem import Memory
from fsmem.format.errors import FormatError, FsmemError, InvalidName, NotFound
from fsmem.format.model import TextEvent


def _say(i: int, who: str, what: str) -> TextEvent:
    return TextEvent(role="user", content=f"{who} note {i}: {what}", timestamp=1_800_000_000 + i)


def _l1_events(mem) -> list[str]:
    return [ev.input for ev in mem.timeline()]


def test_each_agent_has_its_own_l1_and_prunes_only_its_own(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    kitchen = Memory.open(root, agent="kitchen", context_capacity=6, context_protected=2)
    garage = Memory.open(root, agent="garage", context_capacity=50, context_protected=2)
    for i in range(4):
        garage.append(_say(i, "garage", "the drill battery is charging"))
    for i in range(12):
        kitchen.append(_say(i, "kitchen", "oven timer and flour stock"))
    assert (root / "context@kitchen").is_dir() and (root / "context@garage").is_dir()
    assert not any((root / "context").iterdir())   # the default agent wrote nothing
    k, g = _l1_events(kitchen), _l1_events(garage)
    assert len(k) <= 6 and all(t.startswith("kitchen") for t in k)
    assert g == [f"garage note {i}: the drill battery is charging" for i in range(4)]
    # kitchen's prunes archived only kitchen's events, marked as kitchen's
    archived = [garage.document(h.unit_id) for h in garage.query("oven flour", 10, count=False)]
    assert archived and all(d.agent == "kitchen" and d.layer == "documents" for d in archived)
    assert all(ev.agent == "kitchen" for d in archived for ev in d.events)
    assert all(ev.agent == "garage" for ev in garage.timeline())
    # every kitchen event once, in L1 or L2
    seen = Counter(ev.input for ev in kitchen.timeline())
    for d in archived:
        seen.update(ev.input for ev in d.events)
    assert sorted(seen) == sorted(f"kitchen note {i}: oven timer and flour stock"
                                  for i in range(12)) and set(seen.values()) == {1}


def test_l2_is_shared_private_units_are_their_owners_and_scopes_filter(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    kitchen = Memory.open(root, agent="kitchen")
    garage = Memory.open(root, agent="garage")
    shared = kitchen.commit("the wifi password is on the fridge door")
    secret = kitchen.commit("the wifi router admin password is hunter2", private=True)
    mine = garage.commit("garage wifi extender sits above the workbench")
    ids = lambda m, **kw: {h.unit_id for h in m.query("wifi password router extender", 10,
                                                      count=False, **kw)}
    assert ids(kitchen) == {shared, secret, mine}
    assert ids(garage) == {shared, mine}                       # never kitchen's private one
    assert ids(garage, scope="own") == {mine}
    assert ids(kitchen, scope="own") == {shared, secret}
    assert ids(kitchen, scope="shared") == {shared, mine}
    assert ids(garage, agent="kitchen") == {shared}
    assert ids(kitchen, agent="kitchen", scope="all") == {shared, secret}
    default = Memory.open(root)   # the default agent: sees shared units only
    assert ids(default) == {shared, mine} and ids(default, scope="own") == set()
    hits = {h.unit_id: h.agent for h in kitchen.query("wifi", 10, count=False)}
    assert hits[shared] == "kitchen" and hits[mine] == "garage"
    # a reader process of its own sees the same (the saved index carries the owners)
    kitchen.close()
    reader = Memory.open(root, readonly=True, agent="garage")
    assert {h.unit_id for h in reader.query("wifi password router extender", 10,
                                            count=False)} == {shared, mine}
    # recall by another agent never takes a private unit
    assert secret not in garage.recall("router admin password hunter2", top_k=3)
    assert (root / "documents" / secret).is_dir()


def test_a_recalled_shared_unit_goes_to_the_recallers_l1_and_back_as_its_owners(
        tmp_path: Path) -> None:
    root = tmp_path / "mem"
    garage = Memory.open(root, agent="garage")
    note = garage.commit("the spare house key hangs behind the garage door")
    kitchen = Memory.open(root, agent="kitchen", context_capacity=4, context_protected=1)
    assert kitchen.recall("spare house key", top_k=1) == [note]
    assert (root / "context@kitchen" / note).is_dir()
    assert [ev.input for ev in kitchen.timeline()] == [
        "the spare house key hangs behind the garage door"]
    assert garage.timeline() == []
    assert kitchen.document(note).agent == "garage"   # the unit is still garage's
    for i in range(8):   # kitchen's L1 overflows: the recalled events go back to L2
        kitchen.append(_say(i, "kitchen", "kettle descaling reminder"))
    back = [garage.document(h.unit_id) for h in garage.query("spare house key", 3, count=False)]
    assert back and back[0].layer == "documents" and back[0].agent == "garage"
    assert [e.input for e in back[0].events] == [
        "the spare house key hangs behind the garage door"]
    assert all(d.agent in ("garage", "kitchen") for d in back)
    # no archive unit mixes two agents
    for uid in os.listdir(root / "documents"):
        doc = garage.document(uid)
        assert {ev.agent for ev in doc.events} == {doc.agent}


def test_pins_are_per_agent(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    kitchen = Memory.open(root, agent="kitchen")
    note = kitchen.commit("the blue bowl is for the cat")
    assert kitchen.recall("blue bowl cat", top_k=1) == [note]
    pins = root / ".fsmem" / "pins@kitchen.json"
    assert json.loads(pins.read_text())["pins"] == {note: 1}
    garage = Memory.open(root, agent="garage")
    for i in range(3):   # another agent's writes do not release kitchen's pin
        garage.append(_say(i, "garage", "oil change"))
    assert json.loads(pins.read_text())["pins"] == {note: 1}
    assert not (root / ".fsmem" / "pins.json").exists()
    kitchen.append(_say(0, "kitchen", "next turn"))
    assert not pins.exists()


def test_update_keeps_history_and_hides_the_old_version(tmp_path: Path) -> None:
    mem = Memory.open(tmp_path / "mem", agent="kitchen")
    old = mem.commit("the bin goes out on tuesday", summary="bin day", tags=["chores"])
    new = mem.update(old, "the bin goes out on wednesday now")
    hits = [h.unit_id for h in mem.query("bin goes out", 5, count=False)]
    assert hits == [new]
    doc = mem.document(new)
    assert doc.meta["supersedes"] == old and doc.summary == "bin day" and doc.tags == ["chores"]
    assert doc.agent == "kitchen"
    assert mem.document(old).events[0].input == "the bin goes out on tuesday"   # history
    with pytest.raises(FsmemError, match="updated by"):
        mem.update(old, "again")
    newest = mem.update(new, "the bin goes out on thursday")
    assert [h.unit_id for h in mem.query("bin goes out", 5, count=False)] == [newest]
    reader = Memory.open(tmp_path / "mem", readonly=True)   # a fresh index agrees
    mem.close()
    assert [h.unit_id for h in reader.query("bin goes out", 5, count=False)] == [newest]
    mem = Memory.open(tmp_path / "mem", agent="kitchen")
    mem.remove(newest)   # removing an update brings its predecessor back
    assert [h.unit_id for h in mem.query("bin goes out", 5, count=False)] == [new]
    garage = Memory.open(tmp_path / "mem", agent="garage")
    secret = mem.commit("my locker code is 4711", private=True)
    with pytest.raises(NotFound):
        garage.update(secret, "guessing")


def test_bad_agent_names_and_scopes_are_refused_with_nothing_written(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    Memory.open(root).commit("a note")
    before = sorted(p.name for p in root.iterdir())
    for bad in ("Kitchen", "a/b", "..", "x" * 65, "-lead", "café"):
        with pytest.raises(InvalidName, match="agent"):
            Memory.open(root, agent=bad)
    assert sorted(p.name for p in root.iterdir()) == before
    mem = Memory.open(root)
    with pytest.raises(ValueError, match="scope"):
        mem.query("note", scope="mine")
    with pytest.raises(InvalidName, match="agent filter"):
        mem.query("note", agent="No Such")
    (root / ".fsmem" / "config.toml").write_text('agent = "Bad One"\n')
    with pytest.raises(FormatError, match="config.toml.*agent"):
        Memory.open(root)
    (root / ".fsmem" / "config.toml").write_text('agent = "kitchen"\n')
    assert Memory.open(root).agent == "kitchen" and Memory.open(root, readonly=True).l1 == \
        "context@kitchen"
    assert Memory.open(root, agent="default").agent == ""


def test_a_format_3_store_is_the_default_agent_unchanged_until_written(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    mem = Memory.open(root)
    a = mem.commit("a note from before agents")
    mem.append(TextEvent(role="user", content="an L1 event from before"))
    mem.close()
    # make it a format-3 store as the previous release wrote it
    marker = root / ".fsmem" / "marker.json"
    m = json.loads(marker.read_text())
    m["format"] = 3
    m.pop("id", None)
    marker.write_text(json.dumps(m))
    for man in root.glob("*/*/manifest.json"):
        os.chmod(man, 0o644)
        d = json.loads(man.read_text())
        d["format"] = 3
        man.write_text(json.dumps(d, indent=2) + "\n")
    shutil.rmtree(root / ".fsmem" / "index")
    (root / ".fsmem" / "index").mkdir()
    before = sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*"))
    reader = Memory.open(root, readonly=True)
    assert [h.unit_id for h in reader.query("note before agents", 3, count=False)] == [a]
    assert reader.document(a).agent == "" and [e.agent for e in reader.timeline()] == [""]
    assert reader.layout.store_id() == ""
    assert sorted((str(p.relative_to(root)), p.stat().st_mtime_ns)
                  for p in root.rglob("*")) == before
    kitchen = Memory.open(root, agent="kitchen")   # the first writer: marker 5 with an id
    assert json.loads(marker.read_text())["format"] == 5 and kitchen.layout.store_id()
    assert {h.unit_id for h in kitchen.query("note before agents", 3, count=False)} == {a}
    assert kitchen.timeline() == []   # the old L1 is the default agent's
    assert len(Memory.open(root).timeline()) == 1


def test_fsck_snapshot_and_archive_carry_agent_layers(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    kitchen = Memory.open(root, agent="kitchen")
    kitchen.append(TextEvent(role="user", content="kitchen L1 event"))
    kitchen.commit("a private kitchen note", private=True)
    assert kitchen.fsck() == []
    report = kitchen.snapshot(tmp_path / "snap")
    assert report.units == 2
    snap = Memory.open(tmp_path / "snap", agent="kitchen")
    assert [e.input for e in snap.timeline()] == ["kitchen L1 event"]
    assert snap.fsck() == []
    from fsmem.ingest.archive import export_archive, import_archive
    out = tmp_path / "a.tar"
    export_archive(kitchen.store, str(out))
    dest = Memory.open(tmp_path / "dest")
    import_archive(dest, str(out))
    other = Memory.open(tmp_path / "dest", agent="kitchen")
    assert [e.input for e in other.timeline()] == ["kitchen L1 event"]
    assert [h.unit_id for h in other.query("private kitchen note", 3, count=False)]
    assert not Memory.open(tmp_path / "dest", agent="garage").query("private kitchen note", 3)


def test_distill_leaves_private_units_in_l2(tmp_path: Path) -> None:
    mem = Memory.open(tmp_path / "mem", agent="kitchen")
    old = "2020-01-01T00:00:00Z"
    shared = mem.commit("My sister lives in Boston. Bob likes jazz.", timestamp=old)
    secret = mem.commit("My brother lives in Denver. Carol likes chess.", timestamp=old,
                        private=True)
    report = mem.distill(max_age_s=0, max_access=99)
    assert (tmp_path / "mem" / "stablemem" / shared).is_dir()
    assert (tmp_path / "mem" / "documents" / secret).is_dir()
    assert report.distilled == [shared] and report.kept_private == [secret]


# -- two agents, two processes, one store --------------------------------------------------

_AGENT_CHILD = textwrap.dedent("""
    import json, random, sys
    from fsmem import Memory
    from fsmem.format.model import TextEvent
    root, agent, rounds, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    mem = Memory.open(root, agent=agent, context_capacity=8, context_protected=2,
                      durability="off", lock_timeout=60)
    log = {"appended": [], "private": [], "shared": [], "recalled": [], "recalled_texts": []}
    for i in range(rounds):
        text = f"{agent} event {i} about topic{i % 5} " + rng.choice(["tea", "bolts", "rain"])
        mem.append(TextEvent(role="user", content=text, timestamp=1_800_000_000 + i))
        log["appended"].append(text)
        if i % 3 == 0:
            p = i % 6 == 0
            uid = mem.commit(f"{agent} {'private' if p else 'shared'} note {i} topic{i % 5}",
                             private=p)
            log["private" if p else "shared"].append(uid)
        if i % 4 == 1:
            for uid in mem.recall(f"topic{rng.randrange(5)}", top_k=1):
                log["recalled"].append(uid)
                log["recalled_texts"] += [e.input for e in mem.document(uid).events]
        if i % 7 == 2:
            mem.prune(query="tea")
    mem.close()
    print(json.dumps(log))
""")


def test_two_agents_in_two_processes_keep_every_event_once(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    Memory.open(root).close()
    rounds = 600 if STRESS else 40
    env = {**os.environ, "PYTHONPATH": str(PKG_ROOT)}
    procs = {agent: subprocess.Popen([sys.executable, "-c", _AGENT_CHILD, str(root), agent,
                                      str(rounds), str(seed)], cwd=str(REPO), env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for agent, seed in (("kitchen", 1), ("garage", 2))}
    logs = {}
    for agent, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        logs[agent] = json.loads(out)
    check = Memory.open(root)
    assert check.fsck() == []
    # every appended event exactly once across every layer, in a unit of its own agent
    where: Counter = Counter()
    owner = {}
    for layer in check.layout.layers():
        for uid in check.units(layer):
            doc = check.document(uid)
            for ev in doc.events:
                if ev.input:
                    where[ev.input] += 1
                    owner[ev.input] = (doc.agent, layer)
    for agent, log in logs.items():
        assert len(log["appended"]) == rounds
        for text in log["appended"]:
            assert where[text] == 1, (text, where[text])
            assert owner[text][0] == agent
            other = "garage" if agent == "kitchen" else "kitchen"
            # in the other agent's L1 only if that agent recalled it (L2 is shared)
            assert owner[text][1] in ("documents", f"context@{agent}") or (
                owner[text][1] == f"context@{other}" and text in logs[other]["recalled_texts"])
    # each L1 holds only its own agent's events, plus units it recalled itself
    for agent in logs:
        other = "garage" if agent == "kitchen" else "kitchen"
        mem = Memory.open(root, agent=agent, readonly=True)
        for ev in mem.timeline():
            assert ev.agent == agent or ev.input in logs[agent]["recalled_texts"], ev
        # shared L2 is searchable by both; private units by their owner only (those still
        # in documents/: a recall and a prune since give events a new unit)
        for a in logs:
            for kind in ("shared", "private"):
                for uid in logs[a][kind]:
                    if not (root / "documents" / uid).is_dir():
                        continue
                    text = check.document(uid).events[0].input
                    found = {h.unit_id for h in mem.query(text, 5, count=False)}
                    assert (uid in found) == (kind == "shared" or a == agent), (agent, a, uid)


def test_an_update_recalled_into_l1_and_pruned_back_still_hides_the_old_version(
        tmp_path: Path) -> None:
    root = tmp_path / "mem"
    mem = Memory.open(root, agent="kitchen", context_capacity=4, context_protected=1)
    old = mem.commit("the spare fuse box key is in the blue tin")
    new = mem.update(old, "the spare fuse box key moved to the red tin")
    assert mem.recall("fuse box key red tin", top_k=1) == [new]
    assert (root / "context@kitchen" / new).is_dir()
    assert [h.unit_id for h in mem.query("fuse box key tin", 5, count=False)] == []
    with pytest.raises(FsmemError, match="updated by"):
        mem.update(old, "again")
    mem.close()   # saved: a fresh process agrees
    reader = Memory.open(root, readonly=True, agent="kitchen")
    assert [h.unit_id for h in reader.query("fuse box key tin", 5, count=False)] == []
    mem = Memory.open(root, agent="kitchen", context_capacity=4, context_protected=1)
    for i in range(8):   # the update goes back to L2 in an archive unit of its own
        mem.append(_say(i, "kitchen", "dishwasher salt"))
    hits = [mem.document(h.unit_id) for h in mem.query("fuse box key tin", 5, count=False)]
    assert [[e.input for e in d.events] for d in hits] == [
        ["the spare fuse box key moved to the red tin"]]
    assert hits[0].meta["supersedes"] == old and hits[0].meta["is_archived_context"] == "true"


# -- crashes: an agent's prune, recall and commit at every fs call -------------------------------

_CRASH_CHILD = """
import sys
from fsmem import Memory
mem = Memory.open(sys.argv[1], agent="kitchen", context_capacity=4, context_protected=1,
                  auto_prune=False)
print("pruned", mem.prune(query="kettle"), flush=True)
print("recalled", mem.recall("spare key garage", top_k=1), flush=True)
print("committed", mem.commit("the kitchen alarm code", private=True), flush=True)
print("pruned", mem.prune(query="spare"), flush=True)
"""


def _events_by_layer(root: Path) -> Counter:
    mem = Memory.open(root, readonly=True)
    seen: Counter = Counter()
    for layer in mem.layout.layers():
        for uid in mem.units(layer):
            doc = mem.document(uid)
            for ev in doc.events:
                seen[(ev.id, ev.input, doc.agent)] += 1
    return seen


def test_crash_point_sweep_of_an_agents_prune_recall_and_commit(tmp_path: Path) -> None:
    from conftest import assert_feed_agrees, crash_sweep
    template = tmp_path / "template"
    garage = Memory.open(template, agent="garage", context_capacity=50, auto_prune=False)
    garage.commit("the spare key hangs behind the garage door")
    for i in range(3):
        garage.append(_say(i, "garage", "the drill battery"))
    garage.close()
    kitchen = Memory.open(template, agent="kitchen", context_capacity=50, auto_prune=False)
    for i in range(7):
        kitchen.append(_say(i, "kitchen", "kettle descaling" if i % 2 else "bread timer"))
    kitchen.close()
    expected = _events_by_layer(template)
    garage_l1 = sorted(u for u in os.listdir(template / "context@garage"))

    def check(root: Path, label: str) -> None:
        Memory.open(root).close()   # a writer's open runs recovery
        got = _events_by_layer(root)
        new = {k: c for k, c in got.items() if k not in expected}
        assert {k: c for k, c in got.items() if k in expected} == expected, label
        assert all(c == 1 and k[2] == "kitchen" and k[1] == "the kitchen alarm code"
                   for k, c in new.items()), (label, new)
        assert sorted(os.listdir(root / "context@garage")) == garage_l1, label  # untouched
        assert Memory.open(root).fsck() == [], label
        assert os.listdir(root / ".fsmem" / "journal") == [], label
        assert_feed_agrees(root, label)
    n, proc = crash_sweep(tmp_path, template, _CRASH_CHILD, check)
    assert n > 20 and "recalled ['u-" in proc.stdout
