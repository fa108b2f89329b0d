"""The package's shape is a contract (issue 33, docs/ARCHITECTURE.md): folders in one-way layers
and no import cycle (import-linter, pyproject.toml), lazy imports only with a stated reason, no
private module of the standard library, a facade of delegations, and the documented module
paths of the flat layout still importable."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from conftest import PKG_ROOT, REPO

PACKAGE = PKG_ROOT / "fsmem"


def _lint(pkg_root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with the repository's contracts over the ``fsmem`` under ``pkg_root``."""
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "importlinter.cli"]
    env = {**os.environ, "PYTHONPATH": str(pkg_root), "PYTHONSAFEPATH": "1"}
    return subprocess.run([*cmd, "--config", str(REPO / "pyproject.toml"), "--no-cache"],
                          capture_output=True, text=True, env=env, cwd=str(pkg_root), timeout=120)


def _modules(root: Path = PACKAGE):
    for path in sorted(root.rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_the_import_contract_holds():
    r = _lint(PKG_ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert " kept, 0 broken" in r.stdout, r.stdout


PLANTS = {
    # a lower folder importing a higher one inside a function: still an import
    "upward import in a function": ("format/blocks.py", "\n\ndef _planted():\n"
                                    "    from fsmem.interfaces import tools\n    return tools\n",
                                    "fsmem.format is not allowed to import fsmem.interfaces"),
    "upward import for typing only": ("store/access.py", "\n\nfrom typing import TYPE_CHECKING\n"
                                      "if TYPE_CHECKING:\n"
                                      "    from fsmem.memory.facade import Memory\n",
                                      "fsmem.store is not allowed to import fsmem.memory"),
    "a cycle inside a folder": ("memory/reader.py", "\n\ndef _planted():\n"
                                "    from fsmem.memory import facade\n    return facade\n",
                                "No cycles are allowed in fsmem.memory"),
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_the_contract_goes_red_on_a_planted_import(tmp_path, plant):
    """The same contracts over a copy of the package with one bad import planted: broken,
    and the message names what broke (a contract that cannot fail would pass here)."""
    rel, code, message = PLANTS[plant]
    shutil.copytree(PACKAGE, tmp_path / "fsmem",
                    ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "fsmem" / rel
    text = target.read_text(encoding="utf-8")
    target.write_text(text + code, encoding="utf-8")
    r = _lint(tmp_path)
    assert r.returncode != 0, r.stdout
    assert message in r.stdout, r.stdout


def _function_local_imports(tree: ast.AST):
    """Imports inside a function body, not under ``if TYPE_CHECKING``."""
    def walk(node: ast.AST, in_fn: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            fn = in_fn or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if fn and isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            yield from walk(child, fn)
    yield from walk(tree, False)


def test_every_lazy_import_says_why():
    """A function-local import is for start-up time only and says so on its line or the line
    above (``# lazy: ...``); anything else belongs at the top of the module."""
    silent = []
    for path, tree in _modules():
        with tokenize.open(path) as fh:
            comments = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(fh.readline)
                        if tok.type == tokenize.COMMENT}
        for node in _function_local_imports(tree):
            said = [comments.get(node.lineno, ""), comments.get(node.lineno - 1, "")]
            if not any(c.startswith("# lazy:") for c in said):
                silent.append(f"{path.relative_to(PKG_ROOT)}:{node.lineno}")
    assert not silent, f"lazy imports without a reason: {silent}"


def test_the_check_for_reasons_can_fail(tmp_path):
    """The scan above finds an unexplained function-local import (it is not vacuous)."""
    tree = ast.parse("def f():\n    import json\n    return json\n")
    assert [n.lineno for n in _function_local_imports(tree)] == [2]


def test_no_private_module_of_the_standard_library():
    private = {m for m in sys.stdlib_module_names if m.startswith("_") and not m.startswith("__")}
    used = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            used += [f"{path.relative_to(PKG_ROOT)}: {n}" for n in names
                     if n.split(".")[0] in private]
    assert not used, used


def test_the_facade_is_a_list_of_delegations():
    """``Memory``'s methods each hand the work to a module: a docstring and at most a couple
    of statements (fsck picks one of two), so the class reads in one screen."""
    tree = ast.parse((PACKAGE / "memory" / "facade.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Memory")
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef)]
    assert len(methods) >= 10
    for fn in methods:
        body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) else fn.body
        assert len(body) <= 3, f"Memory.{fn.name} does more than delegate"


DOCUMENTED = {   # module path of the flat 0.1 layout named in README.md or docs/ -> a name in it
    "fsmem.render": "budget_split", "fsmem.embedders": "E5SmallEmbedder",
    "fsmem.stablemem": "recall_from_graph", "fsmem.tools": "BadArgument",
    "fsmem.errors": "MissingDependency", "fsmem.media": "sniff_mime",
    "fsmem.inbox": "TEXT_PART", "fsmem.analyze": "PAIR_MAX_WORDS", "fsmem.config": "effective",
    "fsmem.cli": "main", "fsmem.watch": "main", "fsmem.mcp_server": "build_server",
}


def test_the_documented_flat_paths_still_import():
    code = ("import importlib, json, sys\n"
            f"names = {DOCUMENTED!r}\n"
            "out = {}\n"
            "for old, name in names.items():\n"
            "    mod = importlib.import_module(old)\n"
            "    out[old] = [mod.__name__, hasattr(mod, name), sys.modules[old] is mod]\n"
            "print(json.dumps(out))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(PKG_ROOT)}, timeout=60)
    assert r.returncode == 0, r.stderr
    import json
    got = json.loads(r.stdout)
    for old, (new, has, same) in got.items():
        assert has and same and new.startswith("fsmem.") and new != old, (old, new)
    # ``fsmem.render`` stays the function on the package, as before the move
    code = ("import fsmem, importlib; m = importlib.import_module('fsmem.render'); "
            "print(callable(fsmem.render), fsmem.render is m.render)")
    r = subprocess.run([sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(PKG_ROOT)})
    assert r.stdout.split() == ["True", "True"], r.stderr


def test_python_dash_m_of_a_documented_path_runs(tmp_path):
    """``python -m fsmem.watch`` (docs/WATCH.md) runs the verb through its old name."""
    r = subprocess.run([sys.executable, "-m", "fsmem.watch", "--root", str(tmp_path / "m"),
                        "--once"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(PKG_ROOT)}, cwd=str(tmp_path))
    assert r.returncode == 1 and "fsmem watch:" in r.stderr, (r.returncode, r.stderr)
