"""The derived vector cache: embeddings kept outside unit directories, filled after commit.

Why: a real embedder (the light e5 one: ~10 ms a text) would dominate a durable commit of one
turn. With deferred vectors a unit is published without ``vectors.npy`` and its compute-layer
texts are embedded afterwards, by a background thread of the writing process, into
``.fsmem/vectors/<embedder key>/<kk>/<key>``:

- ``<embedder key>``: the first 24 hex digits of BLAKE3(embedder fingerprint), so vectors of
  different models never mix, then ``-d<dim>`` (the vector length);
- ``<key>``: BLAKE3 of the compute-layer text (UTF-8), i.e. the block digest whenever no
  cleaner changed the text; content-addressed, so a text shared by several units (an event
  archived by prune, a copy) has one vector, found from any of them;
- the file holds exactly ``dim`` little-endian float32 values (any other size: ignored).

Units stay immutable (nothing is ever written into one). The cache is derived: deleting it
loses nothing (``Memory.fill_vectors`` refills it); a reader uses it and never writes it.
Until a text's vector is in the cache its event ranks by its lexical score alone (its dense
score is 0), so it is still found. Reads are safe against links, FIFOs and odd sizes.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import stat
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from fsmem.format import blocks as blockfiles  # module attribute: tests count its reads
from fsmem.format.blocks import hash_bytes
from fsmem.format.errors import FsmemError
from fsmem.format.layout import read_small
from fsmem.format.unit import block_path, read_manifest
from fsmem.store.derived import make_room, problem
from fsmem.search.speakers import spoken_text

if TYPE_CHECKING:
    from fsmem.format.model import Manifest

__all__ = ["VectorCache", "VectorFiller", "LockedEmbedder", "unit_texts", "fill_rows",
           "cache_dir", "check_cache", "heal_index", "queue_missing"]

log = logging.getLogger("fsmem.vector_cache")


def cache_dir(meta_dir: str, fingerprint: str, dim: int) -> str:
    """Where the vectors of one embedder live, under the store's ``.fsmem`` directory."""
    return os.path.join(meta_dir, "vectors",
                        f"{hash_bytes(fingerprint.encode('utf-8'))[:24]}-d{dim}")


class VectorCache:
    """Content-addressed vectors of one embedder (``fingerprint``, ``dim``)."""

    def __init__(self, meta_dir: str, fingerprint: str, dim: int, *,
                 durable: bool = False) -> None:
        self.dir = cache_dir(meta_dir, fingerprint, dim)
        self._meta = meta_dir
        self.dim = dim
        self.durable = durable
        self._size = 4 * dim

    @staticmethod
    def key(text: str) -> str:
        return hash_bytes(text.encode("utf-8"))

    def _path(self, key: str) -> str:
        return os.path.join(self.dir, key[:2], key)

    def exists(self) -> bool:
        return os.path.isdir(self.dir)

    def get(self, key: str) -> np.ndarray | None:
        """The cached vector, or None (absent, not a regular file, wrong size)."""
        path = self._path(key)
        try:
            data = read_small(path, self._size)
        except (OSError, FsmemError):   # absent, not a regular file, too big: recomputed
            return None
        if len(data) != self._size:
            return None
        return np.frombuffer(data, dtype="<f4").astype(np.float32)

    def put(self, key: str, vec: np.ndarray) -> None:
        """Write one vector (writer only): temporary file, then rename (a reader never sees a
        partial file; the size check rejects a torn one after a crash)."""
        data = np.ascontiguousarray(vec, dtype="<f4").tobytes()
        if len(data) != self._size:
            raise ValueError(f"vector of {len(data) // 4} values, expected {self.dim}")
        sub = os.path.dirname(self._path(key))
        os.makedirs(sub, exist_ok=True)
        tmp = os.path.join(sub, f".tmp-{os.getpid()}-{threading.get_ident()}")
        if os.path.lexists(tmp) and problem(tmp):   # never written through (a FIFO...)
            make_room(tmp, self._meta)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        make_room(self._path(key), self._meta)   # a directory: quarantined
        os.replace(tmp, self._path(key))


def unit_texts(plugins: Any, path: str, manifest: "Manifest") -> list[tuple[str, str]]:
    """(vector row key ``<event id>:<digest>``, compute-layer text) of each text block of a
    unit, as a commit embeds them (cleaners applied, blank texts left out)."""
    out = []
    for ev in manifest.events:
        tool_of = {tr.block: tr.name for tr in ev.tool_results}
        for ref in ev.blocks:
            if ref.modality != "text":
                continue
            data = blockfiles.read_block(block_path(path, ref), ref.digest)
            text = data.decode("utf-8", "replace")
            if ref.role == "tool_output":
                text = plugins.tool_text(ev.source, tool_of.get(ref.digest, ""), text)
            else:   # as the commit embedded it: "<speaker>: <text>" (fsmem.search.speakers)
                text = spoken_text(ev.source, plugins.source_text(ev.source, text))
            if text.strip():
                out.append((f"{ev.id}:{ref.digest}", text))
    return out


def fill_rows(cache: VectorCache | None, plugins: Any, path: str, manifest: "Manifest",
              rows: dict[str, np.ndarray]) -> list[str]:
    """Add to ``rows`` the cached vectors of the unit's text rows it lacks; returns the row
    keys still without a vector (ranked lexically until the cache has them)."""
    if cache is None or not manifest.events:
        return []
    if all(f"{ev.id}:{ref.digest}" in rows for ev in manifest.events for ref in ev.blocks
           if ref.modality == "text"):
        return []   # the unit stores every row (inline vectors): no block to read
    missing = []
    for row_key, text in unit_texts(plugins, path, manifest):
        if row_key in rows:
            continue
        vec = cache.get(cache.key(text))
        if vec is None:
            missing.append(row_key)
        else:
            rows[row_key] = vec
    return missing


def heal_index(index: Any) -> int:
    """Re-index the units the index holds with zero vectors (saved before their deferred
    vectors were filled: a crash before close, a snapshot saved mid-run): each takes what the
    cache holds now, and one still lacking vectors is noted in ``index.missing``. In memory
    only (a reader may call it); returns how many units were re-read."""
    todo = index.zero_vector_units()
    for uid in todo:
        index.add_unit(uid)
    if todo:
        log.info("vector cache: %d units indexed without vectors re-read", len(todo))
    return len(todo)


def queue_missing(filler: "VectorFiller", plugins: Any, layout: Any, missing: set[str]) -> bool:
    """Submit to ``filler`` the texts the cache lacks of each unit (of documents/) in
    ``missing`` that is not queued already; True when some unit turned out to have all its
    vectors in the cache (the index should re-read it). An unreadable unit is skipped
    (logged): its events keep ranking lexically."""
    cached = False
    for uid in sorted(missing - filler.submitted):
        path = layout.unit_dir("documents", uid)
        try:
            texts = [t for _k, t in unit_texts(plugins, path, read_manifest(path))
                     if filler.cache.get(filler.cache.key(t)) is None]
        except (FsmemError, OSError, ValueError) as exc:
            log.warning("vector cache: %s not queued: %s", path, exc)
            filler.submitted.add(uid)   # not retried in this process
            continue
        if texts:
            filler.submit(uid, texts)
        else:
            cached = True
    return cached


class LockedEmbedder:
    """An embedder shared by the writer's thread and its background filler: every call runs
    under one lock (an embedding engine need not be thread-safe). Attributes pass through."""

    def __init__(self, inner: Any, lock: threading.Lock) -> None:
        self.inner = inner
        self.lock = lock
        self.fingerprint = inner.fingerprint
        self.dim = inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self.lock:
            return self.inner.embed(texts)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name == "embed_query":
            def embed_query(texts: Sequence[str]) -> np.ndarray:
                with self.lock:
                    return attr(texts)
            return embed_query
        return attr


class VectorFiller:
    """Background embedding for the writing process: ``submit`` queues texts (returns at
    once); one daemon thread embeds whatever is queued in one batch and writes the cache.
    ``flush`` waits until everything submitted so far is in the cache."""

    def __init__(self, cache: VectorCache, embed: Callable[[Sequence[str]], np.ndarray]) -> None:
        self.cache = cache
        self._embed = embed
        self._q: queue.Queue = queue.Queue()
        self._filled: list[str] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.errors = 0
        self.submitted: set[str] = set()   # units queued and not reported filled yet

    def submit(self, unit_id: str, texts: Sequence[str]) -> None:
        if not texts:
            return
        self.submitted.add(unit_id)
        self._q.put((unit_id, list(texts)))
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="fsmem-vectors",
                                            daemon=True)
            self._thread.start()

    def flush(self) -> None:
        """Wait until every text submitted so far is embedded (or failed, logged)."""
        self._q.join()

    def filled(self) -> list[str]:
        """Unit ids whose vectors were written since the last call."""
        with self._lock:
            out, self._filled = self._filled, []
        self.submitted.difference_update(out)
        return out

    def close(self) -> None:
        self.flush()
        if self._thread is not None and self._thread.is_alive():
            self._q.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                self._q.task_done()
                return
            batch = [item]
            while True:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._q.put(None)   # stop after this batch
                    self._q.task_done()
                    break
                batch.append(nxt)
            try:
                self._fill(batch)
            except Exception as exc:   # derived data: a failure costs only the dense signal
                self.errors += 1
                log.warning("vector cache: %d units not embedded: %s", len(batch), exc)
            finally:
                for _ in batch:
                    self._q.task_done()

    def _fill(self, batch: list[tuple[str, list[str]]]) -> None:
        todo: dict[str, str] = {}
        for _uid, texts in batch:
            for text in texts:
                key = self.cache.key(text)
                if key not in todo and self.cache.get(key) is None:
                    todo[key] = text
        if todo:
            mat = self._embed(list(todo.values()))
            for key, vec in zip(todo, mat):
                self.cache.put(key, vec)
        with self._lock:
            self._filled.extend(uid for uid, _t in batch)


def check_cache(meta_dir: str) -> list[tuple[str, str]]:
    """(path, problem) of each cache entry no reader would use: a temporary file left by a
    writer that is gone, anything not a regular file, a size that is no float32 vector.
    All of it is derived: fsck --fix deletes it and the writer refills what is missing."""
    root = os.path.join(meta_dir, "vectors")
    out: list[tuple[str, str]] = []
    for d, dirs, files in os.walk(root):
        top = os.path.relpath(d, root).split(os.sep)[0]
        size = 4 * int(top.rsplit("-d", 1)[1]) if re.fullmatch(r"[0-9a-f]{24}-d[1-9][0-9]{0,5}",
                                                                 top) else -1
        for name in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, name)
            st = os.lstat(p)
            if name.startswith(".tmp-"):
                if _writer_running(name):
                    continue
                out.append((p, "temporary vector file left by a writer (derived: deletable)"))
            elif not stat.S_ISREG(st.st_mode):
                out.append((p, "not a regular file (derived vector cache: deletable)"))
            elif st.st_size != size:
                out.append((p, f"{st.st_size} bytes is not a vector of this directory's "
                            "length (derived: deletable)"))
    return out


def _writer_running(tmp_name: str) -> bool:
    """Whether the process that names a temporary file ``.tmp-<pid>-...`` still runs."""
    try:
        pid = int(tmp_name.split("-")[1])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True
