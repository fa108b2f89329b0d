"""The change feed (issue 27): every unit change a writer makes is in .fsmem/changes/ exactly
once, the index follows it in O(changes), and what the feed cannot vouch for is listed once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import fsmem_process, run_py
from fsmem import Event, Memory
from fsmem.format.layout import LAYERS
from fsmem.search import index as index_mod
from fsmem.search.index import Index
from fsmem.store import changes as changes_mod
from fsmem.store.changes import UNIT_KINDS, ChangesTruncated, read_changes


class _Count:
    """Counts real calls of a function (the real one runs)."""

    def __init__(self, monkeypatch, owner, name: str) -> None:
        self.n = 0
        real = getattr(owner, name)

        def counted(*a, **k):
            self.n += 1
            return real(*a, **k)
        monkeypatch.setattr(owner, name, counted)


def _child(root: Path, code: str) -> str:
    proc = run_py(f"""
        from fsmem import Event, Memory
        mem = Memory.open({str(root)!r}, context_capacity=4, context_protected=1)
        {code}
        mem.close()
    """)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _records(root: Path, kind: str | None = None) -> list:
    recs = read_changes(str(root / ".fsmem")).records
    return [r for r in recs if kind is None or r.kind == kind]


def _top(mem, text: str, k: int = 5) -> list[str]:
    return [h.unit_id for h in mem.query(text, top_k=k)]


def test_each_change_by_another_process_is_in_the_next_query_and_once_in_the_feed(
        root, monkeypatch):
    mem = Memory.open(root, context_capacity=4, context_protected=1)
    keep = mem.commit("the orchard ladder is in the barn", summary="ladder")
    assert _top(mem, "orchard ladder") == [keep]
    listings = _Count(monkeypatch, Index, "_listing")

    uid = _child(root, 'print(mem.commit("a kestrel nests in the box on the oak", summary="k"))')
    assert _top(mem, "kestrel nests") == [uid]                              # commit
    assert [r.unit for r in _records(root, "publish")].count(uid) == 1

    _child(root, 'print(mem.recall("kestrel nests", top_k=1))')
    assert uid not in _top(mem, "kestrel nests")                            # recall
    assert len(mem.index) == len(mem.units("documents"))   # its entry gone, not just hidden
    moves = [r for r in _records(root, "move") if r.unit == uid]
    assert [(m.src, m.layer) for m in moves] == [("documents", "context")]

    out = _child(root, "\n        ".join(
        f'mem.append(Event(input="heron wading at dawn {i}", id="e-heron-{i}"))'
        for i in range(6)) + '\n        print(mem.units("documents"))')  # append + prune
    archived = [u for u in eval(out) if u != keep]
    assert archived and set(archived) <= set(_top(mem, "heron wading dawn", 10))

    _child(root, f'mem.remove({keep!r})')
    assert keep not in _top(mem, "orchard ladder")                          # remove
    assert len(mem.index) == len(mem.units("documents"))
    assert [r.unit for r in _records(root, "remove")].count(keep) == 1
    assert listings.n == 0    # all of it from the feed: documents/ was never listed
    fresh = Memory.open(root)   # and the truth agrees
    fresh.reindex()
    for q in ("orchard ladder", "kestrel nests", "heron wading dawn"):
        assert _top(mem, q) == _top(fresh, q)


def test_open_after_changes_costs_the_changes_not_the_store(root, monkeypatch):
    mem = Memory.open(root, durability="off", auto_prune=False)
    for i in range(80):
        mem.commit(f"note {i} about the {['mill', 'ferry', 'weir'][i % 3]} number {i}")
    assert len(mem.query("mill", 3)) == 3
    mem.close()
    _child(root, "\n        ".join(f'mem.commit("the lock keeper wrote entry {i}")'
                                   for i in range(3)))
    idents = _Count(monkeypatch, index_mod, "unit_ident")
    listings = _Count(monkeypatch, Index, "_listing")
    adds = _Count(monkeypatch, Index, "add_unit")
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert len(mem.query("lock keeper entry", 5)) == 3
    assert listings.n == 0 and adds.n == 3
    assert idents.n <= 3 + 2 * 5          # the 3 changed units, then each hit's check
    assert len(mem.index) == 83


def test_a_manifest_truncated_in_place_is_never_a_hit(root, caplog):
    """An in-place edit changes no directory and writes no record: the hit's own identity is
    checked, on any machine speed (no sleep anywhere), in the same process and a fresh one."""
    mem = Memory.open(root)
    a = mem.commit("zebras graze in the savanna", summary="zebras")
    b = mem.commit("zebras and lions at the waterhole", summary="lions")
    assert set(_top(mem, "zebras")) == {a, b}
    mem.close()
    man = root / "documents" / a / "manifest.json"
    raw = man.read_bytes()
    man.chmod(0o644)
    man.write_bytes(raw[: len(raw) // 2])
    for fresh in (True, False):
        m = Memory.open(root) if fresh else mem
        with caplog.at_level("WARNING"):
            assert _top(m, "zebras") == [b]
        assert any(a in r.getMessage() for r in caplog.records)
        caplog.clear()


def test_a_plain_tool_change_between_two_writers_is_found(root, tmp_path, monkeypatch):
    """A ``cp -a`` between two fsmem sessions: the next session's begin mark does not match the
    end before it, so the feed cannot vouch for documents/: one listing finds the unit."""
    mem = Memory.open(root)
    mem.commit("first note on the weather vane")
    assert len(mem.query("weather vane", 1)) == 1
    mem.close()
    other = Memory.open(tmp_path / "other")
    copied = other.commit("the lighthouse on the cape", summary="cape")
    other.close()
    shutil.copytree(tmp_path / "other" / "documents" / copied, root / "documents" / copied)
    _child(root, 'mem.commit("second note, by another process")')   # a session after it
    listings = _Count(monkeypatch, Index, "_listing")
    mem = Memory.open(root)
    assert _top(mem, "lighthouse cape", 1) == [copied]
    assert listings.n == 1
    assert _top(mem, "lighthouse cape", 1) == [copied] and listings.n == 1   # once


def test_the_feed_is_bounded_and_a_consumer_behind_it_lists_once(root, monkeypatch):
    monkeypatch.setattr(changes_mod, "SEGMENT_BYTES", 2000)
    monkeypatch.setattr(changes_mod, "SEGMENTS_KEPT", 2)
    mem = Memory.open(root, durability="off", auto_prune=False)
    first = mem.commit("the first of many notes about the canal")
    assert _top(mem, "canal") == [first]
    mem.close()   # the index's position: an early record
    writer = Memory.open(root, durability="off", auto_prune=False)
    for i in range(40):
        writer.commit(f"barge {i} moored by the towpath")
    writer.close()
    segments = [n for n in os.listdir(root / ".fsmem" / "changes") if n.endswith(".jsonl")]
    assert 1 <= len(segments) <= 3
    assert sum(os.path.getsize(root / ".fsmem" / "changes" / n) for n in segments) < 3 * 2600
    with pytest.raises(ChangesTruncated) as exc:
        read_changes(str(root / ".fsmem"), 1)
    assert exc.value.horizon > 2
    listings = _Count(monkeypatch, Index, "_listing")
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert len(mem.query("barge towpath", 50)) == 40
    assert listings.n == 1
    seqs = [r.seq for r in read_changes(str(root / ".fsmem"), exc.value.horizon - 1).records]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) and seqs[-1] > 120   # never reused


def test_a_torn_last_record_is_cut_and_numbering_goes_on(root):
    mem = Memory.open(root)
    mem.commit("the kettle is on")
    mem.close()
    seg = sorted((root / ".fsmem" / "changes").glob("*.jsonl"))[-1]
    last = _records(root)[-1].seq
    with open(seg, "ab") as fh:   # a crash inside an append: half a line, or a power loss's zeros
        fh.write(b'{"seq":99,"at":1,"kind":"pub')
    assert _records(root)[-1].seq == last            # a reader skips it
    mem = Memory.open(root)
    uid = mem.commit("the tea is ready")
    mem.close()
    recs = _records(root)
    assert [r.seq for r in recs] == list(range(1, len(recs) + 1))
    assert [r.unit for r in recs if r.kind == "publish"][-1] == uid
    assert b'"kind":"pub\n' not in seg.read_bytes() and not seg.read_bytes().count(b"pub{")


def test_no_vectors_are_saved_for_bm25_and_another_ranker_still_gets_them(root):
    mem = Memory.open(root)
    for i in range(20):
        mem.commit(f"entry {i} on the {['mill', 'ferry', 'orchard'][i % 3]} and its keeper")
    mem.reindex()
    gen = root / ".fsmem" / "index" / (root / ".fsmem" / "index" / "CURRENT").read_text()
    assert not (gen / "dense.npy").exists()
    mem.close()
    fused = Memory.open(root, ranker="fusion")
    fused.reindex()
    gen = root / ".fsmem" / "index" / (root / ".fsmem" / "index" / "CURRENT").read_text()
    assert (gen / "dense.npy").exists()
    want = fused.index.search("ferry keeper", 5, "dense")
    fused.close()
    plain = Memory.open(root)
    plain.reindex()   # saved without vectors again
    assert Memory.open(root).index.search("ferry keeper", 5, "dense") == want


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_index_disk_stays_within_twice_the_live_index_over_100_rounds(root, tmp_path):
    mem = Memory.open(root, durability="off", auto_prune=False)
    words = "river mill ferry weir lock towpath barge heron kestrel orchard".split()
    for i in range(600):   # big enough that saves write deltas, not whole generations
        mem.commit(" ".join(words[(i * k) % 10] for k in range(1, 30)) + f" item{i}")
    mem.reindex()
    mem.close()
    index_dir = root / ".fsmem" / "index"
    worst = 0.0
    deltas = 0
    for r in range(100):
        mem = Memory.open(root, durability="off", auto_prune=False)
        mem.commit(f"round {r} " + " ".join(words[(r + k) % 10] for k in range(12)))
        assert mem.query(f"round {r}", 1)
        mem.close()
        gen = index_dir / (index_dir / "CURRENT").read_text()
        deltas = max(deltas, len(list(gen.glob("delta-*.bin"))))
        if r % 25 == 24:   # the live index's size: what a rebuild of the same units saves
            live = tmp_path / f"live{r}"
            shutil.copytree(root, live)
            shutil.rmtree(live / ".fsmem" / "index")
            Memory.open(live, durability="off", auto_prune=False).reindex()
            worst = max(worst, _du(index_dir) / _du(live / ".fsmem" / "index"))
            shutil.rmtree(live)
    assert deltas > 1            # saves were deltas ...
    assert worst <= 2.0, worst   # ... and old ones were reclaimed
    assert len([n for n in os.listdir(index_dir) if n.startswith("gen-")]) == 1


# -- the live index against one rebuilt from scratch (hypothesis) ---------------------------------

WORDS = "anchor barley cider dove elm fennel garnet harbour iris juniper kelp linen".split()
OPS = st.one_of(
    st.tuples(st.just("commit"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=6)),
    st.tuples(st.just("append"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)),
    st.tuples(st.just("prune"), st.sampled_from(WORDS)),
    st.tuples(st.just("recall"), st.sampled_from(WORDS)),
    st.tuples(st.just("remove"), st.integers(0, 50)),
    st.tuples(st.just("compact"), st.just(0)),
    st.tuples(st.just("save"), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0)),
    st.tuples(st.just("other"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=6)),
)


@settings(max_examples=int(os.environ.get("FSMEM_PROPERTY_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=14))
def test_the_live_index_always_equals_one_rebuilt_from_scratch(tmp_path_factory, ops):
    root = tmp_path_factory.mktemp("prop") / "s"
    kw = dict(durability="off", context_capacity=3, context_protected=1)
    mem = Memory.open(root, **kw)
    made: list[str] = []
    for n, (op, arg) in enumerate(ops):
        if op == "commit":
            made.append(mem.commit(" ".join(arg) + f" n{n}"))
        elif op == "append":
            mem.append(Event(input=" ".join(arg) + f" n{n}"))
        elif op == "prune":
            mem.prune(arg)
        elif op == "recall":
            mem.recall(arg, top_k=1)
        elif op == "remove" and made:
            uid = made[arg % len(made)]
            for layer in LAYERS:
                if (root / layer / uid).is_dir():
                    mem.remove(uid, layer)
        elif op == "compact":
            mem.index._compact()
        elif op == "save":
            mem.index.save()
        elif op == "reopen":
            mem.close()
            mem = Memory.open(root, **kw)
        elif op == "other":   # another writer of the same store (its own lock, feed session)
            other = Memory.open(root, **kw)
            made.append(other.commit(" ".join(arg) + f" other{n}"))
            other.close()
        fresh = Memory.open(root, readonly=True)
        fresh.index.rebuild()
        for q in WORDS[:6] + ["anchor elm", "kelp linen iris"]:
            got = mem.index.search(q, 20)
            want = fresh.index.search(q, 20)
            assert [u for u, _ in got] == [u for u, _ in want], (ops[: n + 1], q)
            assert [round(s, 5) for _, s in got] == [round(s, 5) for _, s in want], q
    mem.close()


# -- the CLI ---------------------------------------------------------------------------------------

def test_fsmem_changes_prints_the_feed(root):
    def cli(*argv: str) -> subprocess.CompletedProcess:
        return fsmem_process(["--root", str(root), *argv], module="fsmem", timeout=60)
    mem = Memory.open(root)
    a = mem.commit("the first note")
    b = mem.commit("the second note")
    mem.remove(a)
    mem.close()
    out = cli("changes", "--json")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["kind"], r["unit"]) for r in rows] == [("publish", a), ("publish", b),
                                                     ("remove", a)]
    assert all(r["kind"] in UNIT_KINDS for r in rows)
    since = rows[1]["seq"]
    later = cli("changes", "--since", str(since), "--json")
    assert [json.loads(x)["unit"] for x in later.stdout.splitlines()] == [a]
    text = cli("changes").stdout
    assert a in text and "remove" in text and "documents" in text
    marks = cli("changes", "--all", "--json").stdout
    assert '"kind":"begin"' in marks and '"kind":"end"' in marks


def test_a_format_2_store_opens_and_its_first_writer_starts_the_feed(root):
    mem = Memory.open(root)
    ids = [mem.commit(f"old note {i} about the granary") for i in range(3)]
    mem.close()
    shutil.rmtree(root / ".fsmem" / "changes")   # as a format-2 fsmem left it
    shutil.rmtree(root / ".fsmem" / "index")
    marker = root / ".fsmem" / "marker.json"
    marker.write_text(marker.read_text().replace('"format": 3', '"format": 2'))
    before = sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*"))
    reader = Memory.open(root, readonly=True)
    assert sorted(h.unit_id for h in reader.query("granary", 5, count=False)) == sorted(ids)
    assert reader.changes() == []
    assert sorted((p.relative_to(root), p.stat().st_mtime_ns) for p in root.rglob("*")) == before
    mem = Memory.open(root)
    new = mem.commit("a new note about the granary roof")
    assert json.loads(marker.read_text())["format"] == 5
    assert [(r.kind, r.unit) for r in mem.changes()] == [("publish", new)]
    assert sorted(_top(mem, "granary")) == sorted(ids + [new])
