"""The fleet index (fsmem.fleet, docs/FLEET.md) against a real PostgreSQL server started for
the session (tests/pg_server.py): sync from each store's change feed, search across stores,
positions that survive a server restart, drop-and-rebuild, zh and en, unreachable stores,
truncated feeds, and a sync that never writes into a store."""

from __future__ import annotations

import contextlib
import io
import json
import os
import uuid
from pathlib import Path

import pytest

from fsmem import Memory
from fsmem.format.model import Event
from fsmem.store import changes as feed

from pg_server import PgServer, find_bindir

psycopg = pytest.importorskip("psycopg") if not os.environ.get("CI") else __import__("psycopg")

from fsmem.fleet import FleetError, FleetIndex  # noqa: E402
from fsmem.fleet.schema import has_vector  # noqa: E402


@pytest.fixture(scope="session")
def pg_server():
    bindir = find_bindir()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("CI: no PostgreSQL server (initdb) installed; .ci/run installs it")
        pytest.skip("no PostgreSQL server installed (initdb not found)")
    srv = PgServer(bindir)
    yield srv
    srv.close()


@pytest.fixture
def dsn(pg_server):
    """A fresh database of the session's server, dropped afterwards."""
    name = "t" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server.dsn, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    yield f"postgresql://postgres@127.0.0.1:{pg_server.port}/{name}"
    if not pg_server.running:
        pg_server.start()
    with psycopg.connect(pg_server.dsn, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _store(path: Path, tag: str, agent: str) -> dict[str, str]:
    """A store with the default agent and ``agent``: a shared and a private document, an L1
    event each. ``tag`` is a word only this store holds."""
    mem = Memory.open(path, durability="off")
    out = {"shared": mem.commit(f"the {tag} greenhouse watering schedule is at dawn")}
    mem.append(Event(source="user", input=f"{tag} breakfast was porridge"))
    out["l1"] = mem.units("context")[0]
    mem.close()
    mem = Memory.open(path, durability="off", agent=agent)
    out["private"] = mem.commit(f"{agent} keeps the {tag} vault combination", private=True)
    mem.append(Event(source="user", input=f"{agent} is planning the {tag} hiking trip"))
    out["agent_l1"] = mem.units(f"context@{agent}")[0]
    mem.close()
    return out


def _ids(hits) -> list[tuple[str, str, str]]:
    return [(h.store_id, h.unit_id, h.layer) for h in hits]


def test_sync_of_three_stores_with_two_agents_each(tmp_path, dsn):
    stores = {n: _store(tmp_path / n, f"tag{n}", f"agent{n}") for n in ("s1", "s2", "s3")}
    with FleetIndex(dsn) as idx:
        report = idx.sync([tmp_path / n for n in stores])
        assert [s.mode for s in report.stores] == ["full"] * 3
        assert report.total("upserted") == 12 and not report.errors
        for n, units in stores.items():
            path = str(tmp_path / n)
            hits = idx.search(f"tag{n} greenhouse", limit=20)
            assert hits[0].unit_id == units["shared"] and hits[0].store_path == path
            assert (hits[0].layer, hits[0].agent, hits[0].private) == ("documents", "default",
                                                                       False)
            own = idx.search(f"tag{n} vault", agent=f"agent{n}")
            assert (own[0].unit_id, own[0].agent, own[0].private) == (units["private"],
                                                                      f"agent{n}", True)
            for other in ("someone", "default"):                      # not theirs
                seen = {h.unit_id for h in idx.search(f"tag{n} vault", agent=other)}
                assert units["private"] not in seen and units["shared"] in seen
            assert idx.search(f"tag{n} vault")[0].unit_id == units["private"]   # operator
            trip = idx.search(f"tag{n} hiking")[0]
            assert (trip.unit_id, trip.layer, trip.agent) == (units["agent_l1"],
                                                              f"context@agent{n}", f"agent{n}")
            l1 = idx.search(f"tag{n} porridge", store=path)
            assert (l1[0].unit_id, l1[0].layer, l1[0].agent) == (units["l1"], "context",
                                                                 "default")
            assert {h.store_path for h in idx.search(f"tag{n}", limit=20)} == {path}
        everything = idx.search("greenhouse hiking porridge vault", limit=100)
        assert len(everything) == 12 and len(set(_ids(everything))) == 12
        assert {h.store_path for h in everything} == {str(tmp_path / n) for n in stores}
        only = idx.search("greenhouse", store=str(tmp_path / "s2"), limit=100)
        assert {h.store_path for h in only} == {str(tmp_path / "s2")}
        assert idx.search("greenhouse", layer="stablemem") == []


def test_a_hit_names_what_fsmem_show_opens(tmp_path, dsn):
    from fsmem.interfaces.cli.main import main
    units = _store(tmp_path / "s", "tagshow", "bob")
    with FleetIndex(dsn) as idx:
        idx.sync([tmp_path / "s"])
        hit = idx.search("tagshow greenhouse")[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--root", hit.store_path, "show", hit.unit_id]) == 0
    assert hit.unit_id == units["shared"] and "greenhouse watering" in out.getvalue()


def test_commit_recall_remove_update_appear_after_the_next_sync(tmp_path, dsn):
    path = tmp_path / "s"
    mem = Memory.open(path, durability="off")
    gone = mem.commit("the old shed key hangs by the door")
    moved = mem.commit("the kayak paddles are in the garage loft")
    old = mem.commit("the gate code is 1234")
    mem.close()
    with FleetIndex(dsn) as idx:
        assert idx.sync([path]).stores[0].mode == "full"
        mem = Memory.open(path, durability="off")
        new = mem.commit("the zebra finch eats millet seeds", summary="bird food")
        assert mem.recall("kayak paddles garage", top_k=1) == [moved]
        mem.remove(gone)
        newer = mem.update(old, "the gate code is 5678 since May")
        mem.close()
        s = idx.sync([path]).stores[0]
        assert (s.mode, s.upserted, s.deleted) == ("incremental", 3, 1)
        assert s.records == 4
        assert [(h.unit_id, h.layer, h.agent, h.summary) for h in idx.search("zebra finch")] \
            == [(new, "documents", "default", "bird food")]
        assert [(h.unit_id, h.layer) for h in idx.search("kayak paddles")] == [(moved, "context")]
        assert idx.search("shed key") == []
        assert [h.unit_id for h in idx.search("gate code", limit=10)] == [newer]   # one, new
        assert idx.search("1234") == []                          # the old one is hidden
        again = idx.sync([path]).stores[0]                       # nothing new: nothing done
        assert (again.records, again.upserted, again.deleted) == (0, 0, 0)


def test_the_feed_position_survives_a_server_restart(tmp_path, dsn, pg_server):
    path = tmp_path / "s"
    mem = Memory.open(path, durability="off")
    for i in range(5):
        mem.commit(f"note number {i} about the lighthouse")
    mem.close()
    with FleetIndex(dsn) as idx:
        assert idx.sync([path]).stores[0].upserted == 5
        pg_server.stop()
        told = []
        idx.follow([path], interval=0.01, rounds=1, on_round=lambda r, e: told.append((r, e)))
        assert told[0][0] is None and isinstance(told[0][1], FleetError)   # logged, retried
        pg_server.start()
        mem = Memory.open(path, durability="off")
        mem.commit("a sixth note about the lighthouse keeper")
        mem.commit("a seventh about the foghorn")
        mem.close()
        told.clear()
        idx.follow([path], interval=0.01, rounds=1, on_round=lambda r, e: told.append((r, e)))
        s = told[0][0].stores[0]
        assert (s.mode, s.records, s.upserted, s.unchanged) == ("incremental", 2, 2, 0)
    with FleetIndex(dsn) as fresh:     # a new process: the position is the server's
        s = fresh.sync([path]).stores[0]
        assert (s.mode, s.records, s.upserted) == ("incremental", 0, 0)
        assert len(fresh.search("lighthouse foghorn", limit=50)) == 7


QUERIES = ["greenhouse watering", "vault combination", "hiking", "咖啡机", "咖啡", "猫",
           "coffee machines", "porridge breakfast", "gate code"]


def _zh_en_store(path: Path) -> dict[str, str]:
    mem = Memory.open(path, durability="off")
    out = {"zh": mem.commit("我家的咖啡机坏了，明天要去修理"),
           "zh2": mem.commit("猫粮放在厨房的柜子里"),
           "en": mem.commit("The coffee machine broke; it goes to the repair shop tomorrow")}
    mem.close()
    return out


def test_zh_and_en_queries_both_answer(tmp_path, dsn):
    units = _zh_en_store(tmp_path / "s")
    with FleetIndex(dsn) as idx:
        idx.sync([tmp_path / "s"])
        assert [h.unit_id for h in idx.search("咖啡机")] == [units["zh"]]
        assert [h.unit_id for h in idx.search("修理咖啡机")] == [units["zh"]]
        assert [h.unit_id for h in idx.search("猫粮")] == [units["zh2"]]
        assert [h.unit_id for h in idx.search("猫")] == [units["zh2"]]     # one character
        assert [h.unit_id for h in idx.search("coffee machines")] == [units["en"]]  # stemmed
        assert [h.unit_id for h in idx.search("repairing")] == [units["en"]]
        assert idx.search("the of and") == []      # stop words only: nothing to match
        assert idx.search("") == [] and idx.search("!!! ???") == []
        assert not has_vector(idx.conn)            # no pgvector here: the column is left out


def test_drop_then_sync_gives_the_same_answers(tmp_path, dsn):
    _store(tmp_path / "a", "taga", "alice")
    _zh_en_store(tmp_path / "b")
    mem = Memory.open(tmp_path / "b", durability="off")
    old = mem.commit("the gate code is 1234")
    mem.update(old, "the gate code is 9999 now")
    mem.close()
    paths = [tmp_path / "a", tmp_path / "b"]
    with FleetIndex(dsn) as idx:
        idx.sync(paths)
        before = {q: [(h.store_id, h.unit_id, h.layer, h.agent, round(h.score, 6))
                      for h in idx.search(q, limit=20)] for q in QUERIES}
        before_alice = idx.search("vault", agent="alice")
        idx.drop()
        with pytest.raises(FleetError, match="no fleet index"):
            idx.search("gate")
        assert {s.mode for s in idx.sync(paths).stores} == {"full"}
        after = {q: [(h.store_id, h.unit_id, h.layer, h.agent, round(h.score, 6))
                     for h in idx.search(q, limit=20)] for q in QUERIES}
        assert after == before and all(before[q] for q in QUERIES)
        assert idx.search("vault", agent="alice") == before_alice


def test_an_unreachable_store_is_reported_and_catches_up(tmp_path, dsn):
    a, b = tmp_path / "a", tmp_path / "b"
    for p in (a, b):
        Memory.open(p, durability="off").commit(f"first note of {p.name}")
    empty = tmp_path / "empty"
    empty.mkdir()
    with FleetIndex(dsn) as idx:
        idx.sync([a, b])
        away = tmp_path / "a-away"
        os.rename(a, away)
        mem = Memory.open(away, durability="off")
        late = mem.commit("the parcel arrived while the disk was unmounted")
        mem.close()
        report = idx.sync([a, b, empty])
        err = report.stores[0]
        assert err.mode == "error" and str(a) in err.reason
        assert report.stores[1].mode == "incremental"
        assert report.stores[2].mode == "error" and "not an fsmem store" in report.stores[2].reason
        assert idx.search("parcel unmounted") == []
        os.rename(away, a)
        s = idx.sync([a, b]).stores[0]
        assert (s.mode, s.records, s.upserted) == ("incremental", 1, 1)
        assert [h.unit_id for h in idx.search("parcel unmounted")] == [late]


def test_a_truncated_feed_lists_the_store_and_deletes_stale_rows(tmp_path, dsn, monkeypatch):
    monkeypatch.setattr(feed, "SEGMENT_BYTES", 1)     # every session closes its segment
    monkeypatch.setattr(feed, "SEGMENTS_KEPT", 1)     # and only the newest is kept
    path = tmp_path / "s"
    mem = Memory.open(path, durability="off")
    doomed = mem.commit("the broken umbrella is in the hall")
    kept = mem.commit("the spare umbrella is in the car")
    with FleetIndex(dsn) as idx:
        idx.sync([path])
        mem.remove(doomed)                             # its record is compacted away ...
        fresh = mem.commit("a third umbrella, blue")
        mem.commit("the weather is dry")               # ... by these sessions
        s = idx.sync([path]).stores[0]
        assert s.mode == "full" and "truncated" in s.reason
        assert (s.deleted, s.upserted) == (1, 2) and s.unchanged == 1
        assert {h.unit_id for h in idx.search("umbrella")} == {kept, fresh}
        # the feed started again (another id): listed once more, nothing else changes
        mem.close()
        import shutil
        shutil.rmtree(path / ".fsmem" / "changes")
        mem = Memory.open(path, durability="off")
        mem.commit("a fourth umbrella, red")
        mem.close()
        s = idx.sync([path]).stores[0]
        assert s.mode == "full" and "started again" in s.reason
        assert len(idx.search("umbrella")) == 3
        s = idx.sync([path]).stores[0]
        assert (s.mode, s.records) == ("incremental", 0)


def _tree(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns,
                                             st.st_ctime_ns, st.st_ino)
    st = os.lstat(root)
    out["."] = (st.st_mode, st.st_mtime_ns, st.st_ctime_ns)
    return out


def test_sync_never_writes_into_a_store(tmp_path, dsn):
    path = tmp_path / "s"
    _store(path, "tagro", "carol")
    before = _tree(path)
    with FleetIndex(dsn) as idx:
        idx.sync([path])                                   # a full listing
        assert _tree(path) == before
        mem = Memory.open(path, durability="off")
        mem.commit("one more note")
        mem.close()
        before = _tree(path)
        assert idx.sync([path]).stores[0].mode == "incremental"
        idx.search("note")
        assert _tree(path) == before


def test_bad_input_names_the_field(tmp_path, dsn):
    with pytest.raises(FleetError, match="dsn: not a PostgreSQL connection string"):
        FleetIndex("nope://x").sync([tmp_path])
    with pytest.raises(FleetError, match=r"dsn .*port=1.*cannot connect"):
        FleetIndex("postgresql://postgres@127.0.0.1:1/x").sync([tmp_path])
    with FleetIndex(dsn) as idx:
        with pytest.raises(FleetError, match="stores: none given"):
            idx.sync([])
        report = idx.sync([tmp_path / "missing"])
        assert report.stores[0].mode == "error" and "missing" in report.stores[0].reason
        with pytest.raises(FleetError, match="limit"):
            idx.search("x", limit=0)
        with pytest.raises(FleetError, match="layer"):
            idx.search("x", layer="attic")
        with pytest.raises(Exception, match="agent"):
            idx.search("x", agent="Not An Agent")


def test_the_cli(tmp_path, dsn):
    from fsmem.interfaces.cli.main import main
    units = _zh_en_store(tmp_path / "s")

    def run(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(list(argv))
        return rc, out.getvalue()
    rc, out = run("fleet", "sync", "--dsn", dsn, str(tmp_path / "s"), "--json")
    assert rc == 0 and json.loads(out)[0]["mode"] == "full"
    rc, out = run("fleet", "search", "--dsn", dsn, "咖啡机", "--json")
    hits = json.loads(out)
    assert rc == 0 and [(h["unit_id"], h["store_path"]) for h in hits] == [
        (units["zh"], str(tmp_path / "s"))]
    rc, out = run("fleet", "search", "--dsn", dsn, "coffee", "--limit", "1")
    assert rc == 0 and units["en"] in out and str(tmp_path / "s") in out
    rc, out = run("fleet", "sync", "--dsn", dsn, str(tmp_path / "s"), str(tmp_path / "no"))
    assert rc == 1 and "skipped" in out
    rc, out = run("fleet", "status", "--dsn", dsn)
    assert rc == 0 and str(tmp_path / "s") in out
    rc, out = run("fleet", "drop", "--dsn", dsn)
    assert rc == 0 and "dropped" in out
    assert run("fleet", "search", "--dsn", dsn, "coffee")[0] == 1
