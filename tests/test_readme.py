"""Every code block of README.md runs as written, in order, in one temporary directory
(issue 15): the blocks are extracted from the file itself so the README cannot drift.

Convention: a fenced block runs unless its info string carries ``no-test``
(e.g. ```` ```sh no-test ````), used only for blocks that install packages, start a server, or
list commands with placeholders. ``sh``/``bash`` blocks run with bash (the venv's bin first on
PATH), ``python`` blocks with this interpreter, each as its own process; other languages (json)
are data. The temporary directory holds a copy of ``fixtures/`` as a checkout does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


def blocks() -> list[tuple[int, str, str]]:
    """(line, language, code) of each runnable block, in file order."""
    text = (REPO / "README.md").read_text("utf-8")
    out = []
    for m in FENCE.finditer(text):
        info = m.group(1).split()
        lang = info[0] if info else ""
        if "no-test" in info or lang not in ("sh", "bash", "python"):
            continue
        out.append((text.count("\n", 0, m.start()) + 1, lang, m.group(2)))
    return out


def test_readme_has_runnable_blocks():
    langs = {lang for _, lang, _ in blocks()}
    assert {"python", "sh"} <= langs


def test_every_readme_block_runs_in_order(tmp_path):
    if shutil.which("fsmem", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("the fsmem script is not installed next to this interpreter")
    shutil.copytree(REPO / "fixtures", tmp_path / "fixtures",
                    ignore=shutil.ignore_patterns("hostile"))
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    env.pop("FSMEM_ROOT", None)
    for line, lang, code in blocks():
        argv = (["bash", "-euo", "pipefail", "-c", code] if lang in ("sh", "bash")
                else [sys.executable, "-c", code])
        r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f"README.md line {line} ({lang}) failed:\n{code}\n{r.stderr}"
