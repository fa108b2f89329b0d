"""Opening in O(changes): the index skips the listing of documents/ only when it provably
saw documents/ as it is (SEEN), finds what plain file tools changed, keeps itself in step with
this process's own changes, and checks its dense array the first time a ranker reads it."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np

from fsmem import Memory
from fsmem.search.index import Index


class _Listings:
    """Counts real calls of Index._listing (the real method runs)."""

    def __init__(self, monkeypatch) -> None:
        self.n = 0
        real = Index._listing

        def counted(index):
            self.n += 1
            return real(index)
        monkeypatch.setattr(Index, "_listing", counted)


def _store(root, n=30) -> list[str]:
    mem = Memory.open(root, durability="off", auto_prune=False)
    ids = [mem.commit(f"entry {i} about the {['mill', 'ferry', 'orchard'][i % 3]}",
                      summary=f"e{i}") for i in range(n)]
    time.sleep(0.06)           # older than a timestamp tick by a margin: SEEN can prove it
    mem.query("mill", 3)       # one listing, recorded
    mem.close()
    return ids


def test_open_skips_the_listing_when_nothing_changed(root, monkeypatch):
    _store(root)
    listings = _Listings(monkeypatch)
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert len(mem.query("ferry", 5)) == 5
    assert listings.n == 0
    assert len(mem.index) == 30


def test_file_tools_change_is_found_at_open(root, tmp_path, monkeypatch):
    ids = _store(root)
    other = tmp_path / "other"
    mem2 = Memory.open(other, durability="off", auto_prune=False)
    new = mem2.commit("the lighthouse on the cape", summary="cape")
    mem2.close()
    shutil.copytree(other / "documents" / new, root / "documents" / new)   # cp -a
    shutil.rmtree(root / "documents" / ids[0])                              # rm -r
    listings = _Listings(monkeypatch)
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert [h.unit_id for h in mem.query("lighthouse cape", 3)] == [new]
    assert ids[0] not in [h.unit_id for h in mem.query("entry 0 mill", 30)]
    assert listings.n == 1
    assert len(mem.index) == 30


def test_own_changes_keep_the_index_in_step_without_listing(root, monkeypatch):
    _store(root)
    mem = Memory.open(root, durability="off", auto_prune=False)
    mem.query("mill", 3)
    listings = _Listings(monkeypatch)
    uid = mem.commit("a note on the windmill sails", summary="sails")
    assert [h.unit_id for h in mem.query("windmill sails", 1)] == [uid]
    moved = mem.recall("windmill sails", 1)
    assert moved == [uid]
    assert uid not in [h.unit_id for h in mem.query("windmill sails", 5)]
    assert listings.n == 0
    mem.close()
    fresh = Memory.open(root, durability="off", auto_prune=False)   # and the truth agrees
    assert sorted(fresh.index.ids + list(fresh.index.pending)) == sorted(
        u for u in fresh.units("documents"))


def test_damaged_dense_array_is_found_on_first_use(root):
    mem = Memory.open(root, durability="off", auto_prune=False, ranker="fusion")
    for i in range(30):   # a ranker that reads vectors: the index saves them
        mem.commit(f"entry {i} about the {['mill', 'ferry', 'orchard'][i % 3]}", summary=f"e{i}")
    mem.query("mill", 3)
    mem.close()
    gen = os.path.join(root, ".fsmem", "index",
                       open(os.path.join(root, ".fsmem", "index", "CURRENT")).read().strip())
    path = os.path.join(gen, "dense.npy")
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:   # the data's second half turned into NaNs (0xff bytes)
        fh.seek(size - (size - 128) // 2)
        fh.write(b"\xff" * ((size - 128) // 2))
    mem = Memory.open(root, durability="off", auto_prune=False)   # bm25: not read yet
    assert len(mem.query("orchard", 5)) == 5
    got = mem.index.search("orchard ferry", 5, "dense")          # first use: checked
    want = Memory.open(root, durability="off", auto_prune=False)
    want.reindex()
    assert got == want.index.search("orchard ferry", 5, "dense")
    assert np.isfinite(mem.index.dense).all()


def test_damaged_postings_are_found_on_first_search(root, caplog):
    """The postings are checksummed when a search first reads them, not at open; a byte
    changed in place (same size: only a checksum sees it) rebuilds the index, same answers."""
    _store(root)
    want = Memory.open(root, durability="off", auto_prune=False)
    want.reindex()
    expect = [want.index.search(q, 5, "bm25") for q in ("orchard", "ferry mill", "entry 7")]
    gen = os.path.join(root, ".fsmem", "index",
                       open(os.path.join(root, ".fsmem", "index", "CURRENT")).read().strip())
    path = os.path.join(gen, "p_tfs.npy")
    with open(path, "r+b") as fh:
        fh.seek(os.path.getsize(path) - 3)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0x40]))
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert len(mem.index) == 30 and mem.index._post_check is not None   # not hashed yet
    with caplog.at_level("WARNING", logger="fsmem.index"):
        got = [mem.index.search(q, 5, "bm25") for q in ("orchard", "ferry mill", "entry 7")]
    assert "checksum mismatch" in caplog.text and mem.index._post_check is None
    assert got == expect
    clean = Memory.open(root, durability="off", auto_prune=False)    # a sound snapshot: no warning
    caplog.clear()
    with caplog.at_level("WARNING", logger="fsmem.index"):
        assert [clean.index.search(q, 5, "bm25") for q in ("orchard", "ferry mill",
                                                            "entry 7")] == expect
    assert "checksum" not in caplog.text


def test_mv_out_and_in_is_found_at_open(root, tmp_path, monkeypatch):
    """``mv`` keeps a unit directory's inode and files (only its ctime changes): a unit moved
    out of documents/ and another moved in are both seen at the next open, as one listing."""
    ids = _store(root)
    other = tmp_path / "other"
    mem2 = Memory.open(other, durability="off", auto_prune=False)
    new = mem2.commit("the signal box by the level crossing", summary="box")
    mem2.close()
    os.rename(root / "documents" / ids[1], tmp_path / ids[1])        # mv out
    os.rename(other / "documents" / new, root / "documents" / new)    # mv in
    listings = _Listings(monkeypatch)
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert len(mem.index) == 30 and listings.n == 1
    assert [h.unit_id for h in mem.query("signal box level crossing", 3)] == [new]
    assert ids[1] not in [h.unit_id for h in mem.query("entry 1 ferry", 30)]
    mem.close()
    os.rename(tmp_path / ids[1], root / "documents" / ids[1])        # and back
    again = Memory.open(root, durability="off", auto_prune=False)
    assert len(again.index) == 31
    assert ids[1] in [h.unit_id for h in again.query("entry 1 ferry", 31)]


def test_string_tables_are_mapped_and_decoded_on_demand(root):
    """A saved index keeps unit ids, event ids and summaries in mapped string tables, not in
    meta.json: the open decodes none of them; a search and a lookup read only what they need,
    and a commit after the open folds them back into lists."""
    from fsmem.search.index_files import StrTable
    ids = _store(root)
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert isinstance(mem.index.ids, StrTable) and isinstance(mem.index.ev_ids, StrTable)
    assert sorted(mem.index.ids) == sorted(ids)
    assert mem.index.summaries[mem.index.ids.index(ids[4])] == "e4"
    meta = os.path.join(root, ".fsmem", "index", mem.index._gen, "meta.json")
    assert ids[0] not in open(meta, encoding="utf-8").read()
    row_of = mem.index.row_of   # a binary search of the mapped table, not a dict
    assert not isinstance(row_of, dict)
    assert [row_of.get(u) for u in ids] == [mem.index.ids.index(u) for u in ids]
    assert row_of.get("u-nosuchunit") is None and "u-nosuchunit" not in row_of
    assert dict(row_of.items()) == {u: i for i, u in enumerate(mem.index.ids)}
    hit = mem.query("entry 4 mill", 1)[0]
    assert (hit.unit_id, hit.summary) == (ids[4], "e4")
    uid = mem.commit("a note on the water wheel", summary="wheel")
    mem.close()
    fresh = Memory.open(root, durability="off", auto_prune=False)
    assert sorted(fresh.index.ids) == sorted(ids + [uid]) and len(fresh.index) == 31
    assert [h.summary for h in fresh.query("water wheel", 1)] == ["wheel"]


def test_damaged_table_or_small_array_is_found_on_first_use(root, caplog):
    """Unit ids, event times, identities: one byte changed in place (same size, so only a
    checksum sees it) in any of them is not hashed at open, but found by the first search,
    which rebuilds the index and answers as an undamaged one does."""
    _store(root)
    want = Memory.open(root, durability="off", auto_prune=False)
    want.reindex()
    queries = ("orchard", "ferry mill", "entry 7")
    expect = [[(h.unit_id, h.summary) for h in want.query(q, 5)] for q in queries]
    want.close()
    gen = os.path.join(root, ".fsmem", "index",
                       open(os.path.join(root, ".fsmem", "index", "CURRENT")).read().strip())
    for name in ("ids_utf8", "summaries_utf8", "ev_time", "inos", "u_ptr"):
        path = os.path.join(gen, f"{name}.npy")
        with open(path, "rb") as fh:
            clean = fh.read()
        at = 128 + (len(clean) - 128) // 2   # inside the data, after the .npy header
        with open(path, "r+b") as fh:
            fh.seek(at)
            fh.write(bytes([clean[at] ^ 0x01]))
        mem = Memory.open(root, durability="off", auto_prune=False)
        assert len(mem.index) == 30 and mem.index._post_check is not None, name
        caplog.clear()
        with caplog.at_level("WARNING", logger="fsmem.index"):
            got = [[(h.unit_id, h.summary) for h in mem.query(q, 5)] for q in queries]
        assert "checksum mismatch" in caplog.text, name
        assert got == expect, name
        mem.close()   # the rebuilt index is saved: the next damage starts from a sound one
        gen = os.path.join(root, ".fsmem", "index", mem.index._gen)


def test_postings_are_checked_chunk_by_chunk_as_searches_read_them(root, monkeypatch, caplog):
    """A first query hashes only the chunks of the big postings files its terms' postings
    sit in; a damaged chunk is found when a search (or a compaction) reads it, the index is
    rebuilt, and the answers are those of a clean rebuild."""
    from fsmem.search import index_files
    monkeypatch.setattr(index_files, "_CHUNK", 1024)
    mem = Memory.open(root, durability="off", auto_prune=False)
    for i in range(300):
        mem.commit(f"entry {i} about the {['mill', 'ferry', 'orchard'][i % 3]} and w{i}")
    mem.reindex()
    mem.close()
    want = Memory.open(root, durability="off", auto_prune=False)
    want.reindex()
    queries = ("mill ferry", "orchard", "w7 entry", "w299")
    expect = {q: want.index.search(q, 5) for q in queries}
    index_dir = os.path.join(root, ".fsmem", "index")
    gen = os.path.join(index_dir, open(os.path.join(index_dir, "CURRENT")).read().strip())
    path = os.path.join(gen, "p_rows.npy")
    assert os.path.getsize(path) > 4 * 1024
    from fsmem.search.analyze import term_hashes
    from fsmem.search.index_files import _term_postings
    probe = Memory.open(root, readonly=True).index
    q = np.unique(np.asarray(term_hashes(["w299"], pairs=False), np.uint64))
    (_i, rows, _tfs), = _term_postings(probe.post, q)   # where w299's postings sit
    at = int(probe.post.rows.offset) + int(rows.ctypes.data) - int(probe.post.rows.ctypes.data)
    del probe
    with open(path, "r+b") as fh:        # a byte of w299's postings, in its chunk
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x01]))
    mem = Memory.open(root, durability="off", auto_prune=False)
    with caplog.at_level("WARNING", logger="fsmem.index"):
        got = {q: mem.index.search(q, 5) for q in queries}
    assert "checksum mismatch" in caplog.text      # some query read the damaged chunk
    assert got == expect
    checks = Memory.open(root, durability="off", auto_prune=False)
    checks.index.search("w7", 1)
    done = [sum(c.done) for c in checks.index._chunk_checks]
    assert done and all(0 < d < len(c.digests) for d, c in zip(done, checks.index._chunk_checks))
