"""Deferred vectors (fsmem.search.vector_cache): a commit publishes its unit without vectors, a
background thread of the writer fills the derived cache under .fsmem/vectors; events whose
vector is not there yet rank lexically; readers use the cache and never write it; the cache
is derived (deleted: refilled; odd files: ignored, fsck removes them)."""

from __future__ import annotations

import os
import threading

import numpy as np

from fsmem import Event, Memory
from fsmem.search.embed import HashEmbedder
from fsmem.memory.fsck import fsck, fsck_fix
from fsmem.format.layout import Layout
from fsmem.format.unit import read_manifest
from fsmem.search.vector_cache import VectorCache, cache_dir

TEXTS = ["We booked a cabin near Lake Tahoe for the second weekend of March",
         "My dog loves chasing squirrels in the park every morning",
         "The quarterly budget review moved to next Tuesday afternoon"]


class GatedEmbedder(HashEmbedder):
    """The hashed embedder, but ``embed`` (passages) waits until the gate opens: lets a test
    look at the store while vectors are still being filled."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def embed(self, texts):
        self.gate.wait(30)
        return super().embed(texts)

    def embed_query(self, texts):   # queries are never held back (the search must not wait)
        return super().embed(texts)


def _commit_all(mem: Memory) -> list[str]:
    return [mem.commit_events([Event(source="chat", role="user", input=t)], source="chat")
            for t in TEXTS]


def _tree(root: str) -> dict[str, bytes]:
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def _vector_files(root: str) -> list[str]:
    return [f for f in _tree(root) if f.startswith(os.path.join(".fsmem", "vectors"))]


def test_deferred_commit_stores_no_vectors_in_the_unit_and_fills_the_cache(tmp_path):
    emb = HashEmbedder()
    mem = Memory.open(tmp_path, embedder=emb, auto_prune=False, vectors="deferred")
    uids = _commit_all(mem)
    units = {u: _tree(mem.layout.unit_dir("documents", u)) for u in uids}
    mem.flush_vectors()
    cache = VectorCache(mem.layout.meta, emb.fingerprint, emb.dim)
    for uid, text in zip(uids, TEXTS):
        path = mem.layout.unit_dir("documents", uid)
        assert read_manifest(path).vectors is None
        assert _tree(path) == units[uid]            # the unit never changed
        vec = cache.get(cache.key(f"{text}"))
        assert vec is not None
        np.testing.assert_allclose(vec, emb.embed([text])[0], rtol=1e-6)
    assert len(_vector_files(tmp_path)) == len(TEXTS)
    mem.close()


def test_auto_is_inline_for_the_hashed_embedder(tmp_path):
    # under a ranker that reads vectors (bm25 stores none: tests/test_speed_vectors.py)
    mem = Memory.open(tmp_path, auto_prune=False, ranker="fusion")
    uid = _commit_all(mem)[0]
    assert read_manifest(mem.layout.unit_dir("documents", uid)).vectors is not None
    assert not _vector_files(tmp_path)
    mem.close()


def test_event_without_its_vector_yet_is_found_lexically_then_densely(tmp_path):
    emb = GatedEmbedder()
    mem = Memory.open(tmp_path, embedder=emb, auto_prune=False, vectors="deferred")
    uids = _commit_all(mem)
    assert not _vector_files(tmp_path)
    hits = mem.index.search("squirrels park", 3, "fusion")
    assert hits and hits[0][0] == uids[1]            # lexical part alone
    assert mem.index.search("squirrels park", 3, "dense") == []   # no vector yet
    emb.gate.set()
    mem.flush_vectors()
    hits = mem.index.search("squirrels park", 3, "dense")
    assert hits and hits[0][0] == uids[1]
    mem.close()


def test_close_fills_and_a_reader_uses_the_cache_without_writing(tmp_path):
    emb = HashEmbedder()
    mem = Memory.open(tmp_path, embedder=emb, auto_prune=False, vectors="deferred")
    uids = _commit_all(mem)
    mem.close()
    before = _tree(tmp_path)
    reader = Memory.open(tmp_path, readonly=True, embedder=HashEmbedder())
    hits = reader.index.search("cabin Tahoe March", 3, "dense")
    assert hits and hits[0][0] == uids[0]
    reader.close()
    assert _tree(tmp_path) == before


def test_deleted_cache_is_refilled(tmp_path):
    emb = HashEmbedder()
    mem = Memory.open(tmp_path, embedder=emb, auto_prune=False, vectors="deferred")
    uids = _commit_all(mem)
    mem.close()
    import shutil
    shutil.rmtree(os.path.join(tmp_path, ".fsmem", "vectors"))
    mem = Memory.open(tmp_path, embedder=emb, auto_prune=False, vectors="deferred")
    assert mem.fill_vectors() == len(TEXTS)      # before any use of the index
    mem.flush_vectors()
    assert mem.fill_vectors() == 0
    hits = mem.index.search("budget review Tuesday", 3, "dense")
    assert hits and hits[0][0] == uids[2]
    mem.close()
    shutil.rmtree(os.path.join(tmp_path, ".fsmem", "vectors"))
    counting = CountingEmbedder()
    mem = Memory.open(tmp_path, embedder=counting, auto_prune=False, vectors="deferred")
    mem.reindex()                                 # zero vectors: the cache is gone
    mem.index.search("budget review Tuesday", 3)  # the index queues what it lacks itself
    mem.flush_vectors()
    assert counting.passages == len(TEXTS)
    assert mem.fill_vectors() == 0
    hits = mem.index.search("budget review Tuesday", 3, "dense")
    assert hits and hits[0][0] == uids[2]
    mem.close()


def test_odd_cache_files_are_ignored_and_fsck_removes_them(tmp_path):
    emb = HashEmbedder()
    mem = Memory.open(tmp_path, embedder=emb, auto_prune=False, vectors="deferred")
    mem.close()
    cache = VectorCache(Layout(str(tmp_path)).meta, emb.fingerprint, emb.dim)
    key = cache.key(TEXTS[0])
    os.makedirs(os.path.join(cache.dir, key[:2]))
    with open(os.path.join(cache.dir, key[:2], key), "wb") as fh:
        fh.write(b"\0" * 12)                            # wrong size
    assert cache.get(key) is None
    key2 = cache.key(TEXTS[1])
    os.makedirs(os.path.join(cache.dir, key2[:2]))
    os.mkfifo(os.path.join(cache.dir, key2[:2], key2))  # a FIFO never blocks a read
    assert cache.get(key2) is None
    with open(os.path.join(cache.dir, key[:2], ".tmp-999999999-2"), "wb") as fh:
        fh.write(b"x")                                  # left by a writer that died
    found = [f for f in fsck(Layout(str(tmp_path))) if f.kind == "derived-vector"]
    assert len(found) == 3
    from fsmem.store.store import Store
    store = Store(str(tmp_path))
    fsck_fix(store)
    assert not [f for f in fsck(Layout(str(tmp_path))) if f.kind == "derived-vector"]
    assert cache_dir(Layout(str(tmp_path)).meta, emb.fingerprint, emb.dim) == cache.dir


def test_lived_with_deferred_vectors_archives_and_finds_densely(tmp_path):
    emb = HashEmbedder()
    mem = Memory.open(tmp_path, embedder=emb, context_capacity=4, context_protected=1,
                      vectors="deferred")
    for i in range(12):
        mem.append(Event(source="chat", role="user",
                         input=f"{TEXTS[i % 3]} note number {i}"))
    mem.flush_vectors()
    assert mem.units("documents")
    hits = mem.index.search(TEXTS[1], 3, "dense")
    assert hits and all(s > 0 for _u, s in hits)
    mem.close()


# -- self-healing after a crash (a writer killed after commit, before close) ----------------
_CHILD = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[1])
from fsmem import Event, Memory
from fsmem.search.embed import HashEmbedder

class Stuck(HashEmbedder):
    # passages never embed: the filler never writes the cache before the kill
    def embed(self, texts):
        threading.Event().wait()
    def embed_query(self, texts):
        return HashEmbedder.embed(self, texts)

mem = Memory.open(sys.argv[2], embedder=Stuck(), auto_prune=False, vectors="deferred")
for text in sys.argv[4:]:
    mem.commit_events([Event(source="chat", role="user", input=text)], source="chat")
if sys.argv[3] == "save":
    mem.index.save()      # a snapshot saved mid-run (as watch does), zero vectors in it
print("committed", flush=True)
time.sleep(120)
"""


def _crash_after_commit(root, save: bool) -> None:
    """A real writer process commits TEXTS with deferred vectors and is SIGKILLed before
    close, its filler stuck: nothing of the cache is written."""
    import signal
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, repo, str(root),
                              "save" if save else "nosave", *TEXTS],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "committed"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)


class CountingEmbedder(HashEmbedder):
    """The hashed embedder, counting the passages it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.passages = 0

    def embed(self, texts):
        self.passages += len(texts)
        return super().embed(texts)

    def embed_query(self, texts):
        return super().embed(texts)


def _found_densely(mem_or_reader) -> bool:
    units = mem_or_reader.units("documents")
    for text in TEXTS:
        hits = mem_or_reader.index.search(text, 1, "dense")
        if not hits or hits[0][0] not in units:
            return False
        unit = mem_or_reader.document(hits[0][0])
        if unit.events[0].input != text:
            return False
    return True


def test_vectors_lost_in_a_crash_are_refilled_on_the_next_open(tmp_path):
    for save in (True, False):
        root = tmp_path / ("saved" if save else "unsaved")
        _crash_after_commit(root, save)
        assert not _vector_files(root)
        if save:   # the crash left a saved index holding zero vectors
            reader = Memory.open(root, readonly=True, embedder=HashEmbedder())
            assert len(reader.index.ids) == len(TEXTS) and not reader.index.dense.any()
            reader.close()
        emb = CountingEmbedder()
        mem = Memory.open(root, embedder=emb, auto_prune=False, vectors="deferred")
        mem.index.search(TEXTS[0], 3)     # first use of the index: no reindex, no fill_vectors
        mem.flush_vectors()
        assert emb.passages == len(TEXTS)
        assert _found_densely(mem)
        assert mem.fill_vectors() == 0
        mem.close()
        before = _tree(root)
        reader = Memory.open(root, readonly=True, embedder=HashEmbedder())
        assert _found_densely(reader)     # the saved index holds the vectors now
        reader.close()
        assert _tree(root) == before


def test_cached_vectors_the_saved_index_holds_as_zero_are_taken_up(tmp_path):
    _crash_after_commit(tmp_path, save=True)
    emb = HashEmbedder()
    cache = VectorCache(Layout(str(tmp_path)).meta, emb.fingerprint, emb.dim)
    for text in TEXTS:           # as if the filler had written them just before the kill
        cache.put(cache.key(text), emb.embed([text])[0])
    before = _tree(tmp_path)
    reader = Memory.open(tmp_path, readonly=True, embedder=HashEmbedder())
    assert _found_densely(reader)         # in memory only
    reader.close()
    assert _tree(tmp_path) == before
    counting = CountingEmbedder()
    mem = Memory.open(tmp_path, embedder=counting, auto_prune=False, vectors="deferred")
    assert _found_densely(mem)
    mem.flush_vectors()
    assert counting.passages == 0          # taken from the cache, nothing re-embedded
    mem.close()


def test_imported_units_without_vectors_are_queued_for_the_filler(tmp_path):
    src = Memory.open(tmp_path / "src", embedder=HashEmbedder(), auto_prune=False,
                      vectors="deferred")
    _commit_all(src)
    src.close()
    archive = str(tmp_path / "units.tar")
    from fsmem.ingest.archive import export_archive
    export_archive(src.store, archive)
    emb = CountingEmbedder()
    dst = Memory.open(tmp_path / "dst", embedder=emb, auto_prune=False, vectors="deferred")
    from fsmem.ingest.archive import import_archive
    import_archive(dst, archive)
    dst.close()                          # close fills what the import queued
    assert emb.passages == len(TEXTS)
    reader = Memory.open(tmp_path / "dst", readonly=True, embedder=HashEmbedder())
    assert _found_densely(reader)
    reader.close()
