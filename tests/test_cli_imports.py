"""CLI start-up: the everyday verbs import only what they use.

Listing, showing and reading L1 back run in a fresh interpreter, and after the verb's ``main``
returns, ``sys.modules`` must hold none of the heavy modules those verbs never need (numpy, the
search index, the stemmers, the embedders, watchdog, the write flows). A query needs numpy and
the index but no writer; an append writes without the search index. A test about imports,
not timing (wall times are benchmarks/_rows_read.py's CLI rows).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest

from conftest import PKG_ROOT, REPO
from fsmem import Event, Memory, Timestamp

#: modules a listing or a transcript never needs (each costs tens of ms to import)
HEAVY = ("numpy", "watchdog", "snowballstemmer", "Stemmer", "sentence_transformers",
         "fsmem.search.index", "fsmem.search.analyze", "fsmem.search.embed", "fsmem.search.embedders", "fsmem.search.ranking",
         "fsmem.search.vector_cache", "fsmem.memory.facade", "fsmem.ingest.watch")
#: a store without HomeAgent documents, a reader without plugins, a reader (it writes nothing:
#: not even the module of mutating filesystem calls, ctypes and all) need none of these
LISTING_NEEDS_NOT = ("fsmem.homeagent.documents", "fsmem.format.plugins", "fsmem.format.fsops")
#: no read verb needs the writer's modules (a plain fsck of a store without graph.db or
#: quarantined units either), nor shutil (argparse's formatter would import it for the
#: terminal width: fsmem.interfaces.cli.args.HelpFormatter), nor fractions (render's budget_split only)
READER_NEEDS_NOT = ("fsmem.store.store", "fsmem.format.fsops", "ctypes", "sqlite3", "shutil", "fractions")
#: an append never touches the search index; one into an L1 with room ranks nothing either
#: (a prune ranks L1 by BM25: the analyzer and stemmer come with it)
APPEND_NEEDS_NOT = ("fsmem.search.index", "numpy.ma", "watchdog", "sentence_transformers",
                    "fsmem.search.embedders", "fsmem.ingest.watch")
APPEND_WITH_ROOM_NEEDS_NOT = ("fsmem.search.analyze", "fsmem.search.index_entry", "fsmem.search.index_files",
                              "snowballstemmer", "Stemmer")

_CHILD = """
import json, sys
from fsmem.interfaces.cli.main import main
rc = main(sys.argv[1:])
sys.stdout.flush()
print("\\n" + json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


@functools.lru_cache(maxsize=None)
def _numpy_loads() -> frozenset[str]:
    """What ``import numpy`` alone loads (numpy 1.x imports numpy.ma, and hashlib through
    numpy.random, itself): a verb that needs numpy is not faulted for those."""
    proc = subprocess.run([sys.executable, "-c", "import json, sys, numpy; "
                           "print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, timeout=60, check=True)
    return frozenset(json.loads(proc.stdout))


def _needless(modules: list[str], needless: tuple[str, ...]) -> list[str]:
    """The modules of ``needless`` the verb loaded, less those numpy's own import loads."""
    return sorted(m for m in needless if m in modules and m not in _numpy_loads())


def _run_verb(*argv: str) -> tuple[int, str, list[str]]:
    """Run one verb through ``fsmem.interfaces.cli.main.main`` in a fresh interpreter: exit code, what it
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
    heavy = list(HEAVY) + list(READER_NEEDS_NOT)
    if argv[0] in ("ls", "show", "timeline"):
        heavy += LISTING_NEEDS_NOT
    loaded = sorted(m for m in heavy if m in modules)
    assert not loaded, f"`fsmem {verb}` imported {loaded}"


def test_query_still_works_after_the_lazy_imports(store):
    """The index (and numpy) come in when a query needs them."""
    root, doc, _ = store
    rc, out, modules = _run_verb("--root", root, "--json", "query", "tomato seedlings")
    assert json.loads(out)[0]["unit_id"] == doc
    assert "numpy" in modules and "fsmem.search.index" in modules   # the guard above can fail
    # a query is a read (it only appends its hits to the access log): no writer, no watcher,
    # no embedding model, no shutil (it saves no index, draws no bar); nor numpy's masked
    # arrays (numpy >= 2.3's plain np.unique loads them). hashlib comes with the analyzer's
    # blake2b (docs/DECISIONS.md: no private module of the standard library, issue 33)
    needless = ("fsmem.memory.facade", "fsmem.store.store", "watchdog", "fsmem.ingest.watch", "shutil",
                "sentence_transformers", "fsmem.search.embedders", "numpy.ma",
                "fsmem.homeagent.documents")   # the store holds no HomeAgent documents
    loaded = _needless(modules, needless)
    assert not loaded, f"`fsmem query` imported {loaded}"


def _appended(root: str) -> tuple[int, int]:
    """(L1 events, L2 units) of the store at ``root``."""
    from fsmem import Reader
    reader = Reader.open(root)
    return len(reader.timeline()), len(reader.units("documents"))


def test_append_imports_no_index(tmp_path):
    """``fsmem append`` into an L1 with room: written (durably, as always), and neither the
    search index nor the analyzer, stemmer, watcher or an embedding model imported."""
    root = str(tmp_path / "m")
    Memory.open(root).close()
    rc, out, modules = _run_verb("--root", root, "append", "--input", "water the tomatoes?",
                                 "--response", "twice a week")
    assert out.strip().startswith("e-") and _appended(root) == (1, 0)
    assert "fsmem.memory.facade" in modules and "fsmem.memory.appending" in modules   # the verb really ran
    loaded = _needless(modules, APPEND_NEEDS_NOT + APPEND_WITH_ROOM_NEEDS_NOT)
    assert not loaded, f"`fsmem append` imported {loaded}"


def test_append_that_prunes_imports_no_index(tmp_path):
    """An append into a full L1 prunes (L1 ranked by BM25, the oldest moved into L2): the
    analyzer comes in for that, the search index still does not."""
    root = str(tmp_path / "m")
    mem = Memory.open(root, context_capacity=2, context_protected=1)
    for i in range(2):
        mem.append(Event(timestamp=Timestamp.now(), source="cli", input=f"question {i}"))
    mem.close()
    rc, out, modules = _run_verb("--root", root, "append", "--capacity", "2", "--protected",
                                 "1", "--input", "and the basil?")
    assert _appended(root)[1] == 1   # pruned into one L2 unit
    assert "fsmem.search.analyze" in modules   # the prune ranked L1 (the guard below can fail)
    loaded = _needless(modules, APPEND_NEEDS_NOT)
    assert not loaded, f"`fsmem append` (pruning) imported {loaded}"


def test_python_dash_m_fsmem_runs_the_command(store):
    root, doc, _ = store
    proc = subprocess.run([sys.executable, "-m", "fsmem", "--root", root, "ls"],
                          capture_output=True, text=True, timeout=60, cwd=str(REPO),
                          env={**os.environ, "PYTHONPATH": str(PKG_ROOT)})
    assert proc.returncode == 0 and doc in proc.stdout, proc.stderr


def test_render_without_numpy_cuts_exactly_as_with_it(tmp_path):
    """``fsmem render`` weighs a small L1 without numpy (fsmem.memory.render._heuristic_many_py):
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
    mod = importlib.import_module("fsmem.memory.render")   # the module (fsmem.memory.render is the function)
    rng = random.Random(7)
    alphabet = "aZ 09\t\n.,!-_\x00\x7f" + "éß\u07ff" + "\u0800中한\uffff" + "😀\U0010ffff" + "\ud800\udfff"
    for _ in range(500):
        texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
                 for _ in range(rng.randint(1, 5))]
        limits = [rng.randint(-2, 150) for _ in texts]
        assert mod._heuristic_many_py(texts, limits) == tuple(
            list(x) for x in mod._heuristic_many(texts, limits)), (texts, limits)


def test_lazy_pattern_compiles_on_first_use_then_is_the_pattern(monkeypatch):
    """fsmem.search.lazyre: the stand-in answers as the compiled pattern, and its first use puts
    the compiled pattern itself in the module (later uses cost nothing extra); a holder of
    the stand-in keeps working."""
    import re
    import types
    from fsmem.search.lazyre import lazy_compile
    mod = types.ModuleType("fsmem_lazy_probe")
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    pattern = r"([\u4e00-\u9fff]+)|([^\W_\u4e00-\u9fff]+)"
    mod.TOKEN = held = lazy_compile(mod.__name__, "TOKEN", pattern, re.IGNORECASE)
    assert not isinstance(mod.TOKEN, re.Pattern)   # nothing compiled at definition
    text = "Tomato 番茄 x_y"
    assert mod.TOKEN.findall(text) == re.compile(pattern, re.IGNORECASE).findall(text)
    assert mod.TOKEN is re.compile(pattern, re.IGNORECASE)   # rebound to the pattern itself
    assert held.sub("-", text) == mod.TOKEN.sub("-", text) and held.flags == mod.TOKEN.flags


def test_tokenisers_compile_their_patterns_on_first_use():
    """The embedder's and the reference analyzer's CJK patterns (~4 and ~6 ms to compile)
    are not compiled by importing their modules; the first use compiles them in place."""
    code = """
import json, re, sys
import fsmem.search.analyze as an, fsmem.search.embed as em
mods = (an, em)
before = [isinstance(m._TOKEN_RE, re.Pattern) for m in mods]
out = [an.analyze(sys.argv[1]), em.tokenize(sys.argv[1])]
print(json.dumps([before, [isinstance(m._TOKEN_RE, re.Pattern) for m in mods], out]))
"""
    text = "The 7th tomato 番茄苗 went out, 2024-05-01; naïve x_y 1,000"
    proc = subprocess.run([sys.executable, "-c", code, text], capture_output=True, text=True,
                          timeout=60, cwd=str(REPO),
                          env={**os.environ, "PYTHONPATH": str(PKG_ROOT)})
    assert proc.returncode == 0, proc.stderr
    before, after, (terms, tokens) = json.loads(proc.stdout)
    assert before == [False, False] and after == [True, True]
    from fsmem.search.analyze import analyze
    from fsmem.search.embed import tokenize
    assert terms == analyze(text) and "tomato" in terms
    assert tokens == tokenize(text) and "番茄" in tokens


@pytest.mark.parametrize("columns", [None, "50", "0", "wide"])
def test_help_is_formatted_at_argparse_width(monkeypatch, columns):
    """fsmem.interfaces.cli.args.Parser formats help and usage errors exactly as argparse's own
    formatter (which asks shutil for the terminal width), $COLUMNS set or not."""
    import argparse
    from fsmem.interfaces.cli.args import Parser
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)

    def build(cls):
        p = cls(prog="fsmem", description="filesystem-native agent memory " * 4)
        p.add_argument("--root", help="store directory (default $FSMEM_ROOT, else ./memory) " * 2)
        sub = p.add_subparsers(dest="verb", metavar="VERB")
        sp = sub.add_parser("append", help="add an event to L1 (flags, or JSON lines on stdin)")
        sp.add_argument("--tool-result", action="append", metavar="NAME=OUTPUT", help="x " * 40)
        return p, sp

    (ours, our_sub), (theirs, their_sub) = build(Parser), build(argparse.ArgumentParser)
    assert isinstance(our_sub, Parser)   # subparsers take their parser's class
    assert ours.format_help() == theirs.format_help()
    assert our_sub.format_help() == their_sub.format_help()
    assert our_sub.format_usage() == their_sub.format_usage()
