"""CLI start-up: the everyday read verbs import only what they use.

Listing, showing and reading L1 back run in a fresh interpreter, and after the verb's ``main``
returns, ``sys.modules`` must hold none of the heavy modules those verbs never need (numpy, the
search index, the stemmers, the embedders, watchdog, the write flows). A test about imports,
not timing (wall times are benchmarks/_rows_read.py's CLI rows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import PKG_ROOT, REPO
from fsmem import Event, Memory, Timestamp

#: modules a listing or a transcript never needs (each costs tens of ms to import)
HEAVY = ("numpy", "watchdog", "snowballstemmer", "Stemmer", "sentence_transformers",
         "fsmem.index", "fsmem.analyze", "fsmem.embed", "fsmem.embedders", "fsmem.ranking",
         "fsmem.vector_cache", "fsmem.flows", "fsmem.watch")
#: a store without HomeAgent documents, a reader without plugins, a reader (it writes nothing:
#: not even the module of mutating filesystem calls, ctypes and all) need none of these
LISTING_NEEDS_NOT = ("fsmem.legacy", "fsmem.plugins", "fsmem._fsops")

_CHILD = """
import json, sys
from fsmem.cli import main
rc = main(sys.argv[1:])
sys.stdout.flush()
print("\\n" + json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def _run_verb(*argv: str) -> tuple[int, str, list[str]]:
    """Run one verb through ``fsmem.cli.main`` in a fresh interpreter: exit code, what it
    printed, and every module imported by then."""
    env = {**os.environ, "PYTHONPATH": str(PKG_ROOT)}
    for key in ("FSMEM_ROOT", "FSMEM_CAPACITY", "FSMEM_PROTECTED", "FSMEM_DURABILITY"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True,
                          text=True, timeout=60, cwd=str(REPO), env=env)
    out, _, last = proc.stdout.rstrip("\n").rpartition("\n")
    report = json.loads(last)
    assert report["rc"] == proc.returncode == 0, proc.stderr
    return report["rc"], out, report["modules"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[str, str, str]:
    """A small store: two L2 documents and two L1 events (a context unit has no summary, so
    ``ls`` reads its blocks for a first line)."""
    root = str(tmp_path_factory.mktemp("imports") / "m")
    mem = Memory.open(root)
    doc = mem.commit("the tomato seedlings went out on the balcony", summary="garden")
    mem.commit("second note about the heat pump")
    mem.append(Event(timestamp=Timestamp.now(), source="cli", input="water the tomatoes?",
                     response="yes, twice a week"))
    mem.append(Event(timestamp=Timestamp.now(), source="cli", input="and the basil?"))
    ctx = mem.units("context")[0]
    mem.close()
    return root, doc, ctx


@pytest.mark.parametrize("verb", ["ls", "show DOC", "show --json CTX", "timeline", "stats",
                                  "fsck --quick", "render --budget 200"])
def test_read_verbs_import_no_heavy_module(store, verb):
    root, doc, ctx = store
    argv = [a.replace("DOC", doc).replace("CTX", ctx) for a in verb.split()]
    rc, out, modules = _run_verb("--root", root, *argv)
    assert out.strip(), f"`fsmem {verb}` printed nothing"   # the verb really ran
    if argv[0] == "ls":
        assert doc in out and ctx in out
    elif argv[0] == "show":
        assert argv[-1] in out
    heavy = list(HEAVY)
    if argv[0] in ("ls", "show", "timeline"):
        heavy += LISTING_NEEDS_NOT
    loaded = sorted(m for m in heavy if m in modules)
    assert not loaded, f"`fsmem {verb}` imported {loaded}"


def test_query_still_works_after_the_lazy_imports(store):
    """The index (and numpy) come in when a query needs them."""
    root, doc, _ = store
    rc, out, modules = _run_verb("--root", root, "--json", "query", "tomato seedlings")
    assert json.loads(out)[0]["unit_id"] == doc
    assert "numpy" in modules and "fsmem.index" in modules   # the guard above can fail


def test_python_dash_m_fsmem_runs_the_command(store):
    root, doc, _ = store
    proc = subprocess.run([sys.executable, "-m", "fsmem", "--root", root, "ls"],
                          capture_output=True, text=True, timeout=60, cwd=str(REPO),
                          env={**os.environ, "PYTHONPATH": str(PKG_ROOT)})
    assert proc.returncode == 0 and doc in proc.stdout, proc.stderr


def test_render_without_numpy_cuts_exactly_as_with_it(tmp_path):
    """``fsmem render`` weighs a small L1 without numpy (fsmem.render._heuristic_many_py):
    the text it prints is the one the numpy pass gives, at a budget that cuts and one that
    keeps everything."""
    import random
    from fsmem import render
    root = str(tmp_path / "m")
    mem = Memory.open(root)
    rng = random.Random(18)
    words = ["tomato", "热泵", "12.5 kWh", "🐱", "naïve", "—", "x\ty", "수리", "?!", "\U0001f600"]
    for i in range(8):
        mem.append(Event(timestamp=Timestamp.now(), source="cli", role="user",
                         input=" ".join(rng.choice(words) for _ in range(rng.randint(5, 120))),
                         response=" ".join(rng.choice(words) for _ in range(rng.randint(0, 60)))))
    events = mem.timeline()
    mem.close()
    for budget in (40, 100_000):   # cuts and collapses; everything whole
        rc, out, modules = _run_verb("--root", root, "--json", "render", "--budget", str(budget))
        assert "numpy" not in modules
        assert json.loads(out)["text"] == render(events, budget), budget   # numpy loaded here


def test_heuristic_weights_agree_with_the_numpy_pass():
    """The loop and the numpy pass: the same (units, keep, kept) for every text and limit,
    over every weight class (ASCII classes, 2-, 3-, 4-byte characters, lone surrogates)."""
    import importlib
    import random

    import numpy  # noqa: F401 - loaded, so _heuristic_many takes the numpy pass
    mod = importlib.import_module("fsmem.render")   # the module (fsmem.render is the function)
    rng = random.Random(7)
    alphabet = "aZ 09\t\n.,!-_\x00\x7f" + "éß\u07ff" + "\u0800中한\uffff" + "😀\U0010ffff" + "\ud800\udfff"
    for _ in range(500):
        texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
                 for _ in range(rng.randint(1, 5))]
        limits = [rng.randint(-2, 150) for _ in texts]
        assert mod._heuristic_many_py(texts, limits) == tuple(
            list(x) for x in mod._heuristic_many(texts, limits)), (texts, limits)
