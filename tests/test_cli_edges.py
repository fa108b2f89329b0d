"""The CLI's rough edges (issue 30, item 7), one test each: help on every argument and verb,
usage errors (exit 2) for values that parse but cannot be right, the MCP port, the append hint
that must work as printed, config comments kept, the stale-index hint, a quiet progress line."""

from __future__ import annotations

import argparse
import io
import json
import os
import pty
import re
import shlex
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, fsmem_process

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
for _k in ("FSMEM_ROOT", "FSMEM_CAPACITY", "FSMEM_PROTECTED", "FSMEM_DURABILITY", "FSMEM_AGENT"):
    ENV.pop(_k, None)
CMD = [sys.executable, "-m", "fsmem.cli"]


def run(*args: str, stdin=None, input: bytes | None = None, env: dict | None = None,
        timeout: float = 60):
    if stdin is not None:   # a descriptor of the test's own: a fresh interpreter inherits it
        return subprocess.run([*CMD, *args], input=input, stdin=stdin, capture_output=True,
                              timeout=timeout, cwd=str(REPO), env={**ENV, **(env or {})})
    return fsmem_process(list(args), input=input, env={**ENV, **(env or {})}, timeout=timeout,
                         text=False)


def _walk(parser: argparse.ArgumentParser, path: str):
    """(path, parser) for this parser and every subparser below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                assert helps.get(name), f"{path} {name}: no help in the verb list"
                yield from _walk(sub, f"{path} {name}")


def test_every_verb_has_a_description_and_every_argument_a_help():
    """The rule: every argument, positional or optional, says what it is (``help=``), but
    ``-h`` itself and the verb list (each verb is checked on its own); every verb, nested
    ones too (``graph neighbors``, ``fleet sync``), has a description for its ``--help``."""
    from fsmem.interfaces.cli.main import _parser
    missing = []
    for path, parser in _walk(_parser(), "fsmem"):
        if not parser.description:
            missing.append(f"{path}: no description")
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not action.help or action.help is argparse.SUPPRESS:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, "\n".join(missing)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("edges") / "m")
    assert run("init", "--root", root).returncode == 0
    r = run("--root", root, "commit", "the wifi password is on the fridge")
    assert r.returncode == 0, r.stderr
    return root


def test_export_since_not_a_time_is_a_usage_error_and_writes_nothing(store, tmp_path):
    out = tmp_path / "a.tar"
    r = run("--root", store, "export", str(out), "--since", "yesterday")
    assert r.returncode == 2, r.stderr
    assert b"--since" in r.stderr and b"Traceback" not in r.stderr
    assert not out.exists() and r.stdout == b""
    ok = run("--root", store, "export", str(out), "--since", "2000-01-01T00:00:00Z")
    assert ok.returncode == 0 and out.exists(), ok.stderr


NEGATIVE = [
    (["distill", "--max-age", "-1"], "--max-age"),
    (["distill", "--max-access", "-1"], "--max-access"),
    (["distill", "--llm-timeout", "-1"], "--llm-timeout"),
    (["graph", "neighbors", "x", "--depth", "-1"], "--depth"),
    (["graph", "search", "x", "--limit", "-1"], "--limit"),
    (["graph", "search", "x", "--limit", "0"], "--limit"),
    (["changes", "--since", "-1"], "--since"),
    (["changes", "--interval", "-1"], "--interval"),
    (["changes", "--interval", "0"], "--interval"),
    (["watch", "--rescan", "-1"], "--rescan"),
    (["watch", "--size-cap", "-1"], "--size-cap"),
    (["query", "x", "--top-k", "-1"], "--top-k"),
    (["recall", "x", "--top-k", "-1"], "--top-k"),
    (["ls", "--limit", "-1"], "--limit"),
    (["render", "--budget", "-1"], "--budget"),
    (["append", "--input", "x", "--capacity", "-1"], "--capacity"),
    (["append", "--input", "x", "--protected", "-1"], "--protected"),
    (["fleet", "search", "x", "--limit", "-1"], "--limit"),
    (["fleet", "sync", "s", "--interval", "-1"], "--interval"),
    (["fleet", "sync", "s", "--partitions", "-1"], "--partitions"),
    (["mcp", "--http", "--port", "99999"], "--port"),
    (["mcp", "--http", "--port", "0"], "--port"),
    (["mcp", "--http", "--port", "-1"], "--port"),
]


@pytest.mark.parametrize("argv, flag", NEGATIVE, ids=[" ".join(a) for a, _ in NEGATIVE])
def test_negative_and_out_of_range_numbers_are_usage_errors(argv, flag, capsys, tmp_path):
    """In process (argparse exits 2 before any verb runs): the message names the flag."""
    from fsmem.interfaces.cli.main import main
    with pytest.raises(SystemExit) as exc:
        main(["--root", str(tmp_path / "none"), *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert f"argument {flag}" in err, err
    assert not (tmp_path / "none").exists()


def test_every_numeric_flag_is_range_checked():
    """No verb takes a bare ``int`` or ``float``: each numeric flag has a type that refuses a
    value out of its range (the list above exercises each one)."""
    from fsmem.interfaces.cli.main import _parser
    bare = [f"{path} {'/'.join(a.option_strings) or a.dest}" for path, p in _walk(_parser(), "fsmem")
            for a in p._actions if a.type in (int, float)]
    assert not bare, bare



def test_mcp_port_in_use_is_one_line_exit_1(store):
    pytest.importorskip("mcp")
    pytest.importorskip("uvicorn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = run("--root", store, "mcp", "--http", "--port", str(port), stdin=subprocess.DEVNULL,
                timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert len(err.strip().splitlines()) == 1 and str(port) in err and "Traceback" not in err, err


def _at_a_terminal(*argv: str) -> subprocess.CompletedProcess:
    master, slave = pty.openpty()
    try:
        return subprocess.run([*CMD, *argv], stdin=slave, capture_output=True, timeout=30,
                              cwd=str(REPO), env=ENV)
    finally:
        os.close(master), os.close(slave)


@pytest.mark.parametrize("verb", ["append", "commit", "update"])
def test_the_stdin_hint_is_a_command_that_works(tmp_path, verb):
    """At a terminal with nothing to read, the usage error shows commands in backquotes;
    each one, run for real through a shell (``fsmem`` as this interpreter's module), works."""
    root = str(tmp_path / "m")
    assert run("init", root).returncode == 0
    uid = run("--root", root, "commit", "first").stdout.decode().strip()
    argv = [verb, uid] if verb == "update" else [verb]
    r = _at_a_terminal("--root", root, *argv)
    err = r.stderr.decode()
    assert r.returncode == 2 and "pipe it on stdin" in err, err
    hints = re.findall(r"`([^`]*fsmem [^`]*)`", err)
    assert hints, err
    fsmem = " ".join(shlex.quote(a) for a in CMD)
    for hint in hints:
        line = re.sub(r"\bfsmem (?=%s)" % verb, fsmem + " ", hint)
        p = subprocess.run(["sh", "-c", line], capture_output=True, timeout=60, cwd=str(REPO),
                           env={**ENV, "FSMEM_ROOT": root})
        assert p.returncode == 0, (hint, p.stderr)


def test_config_set_keeps_comments_blank_lines_and_order(tmp_path):
    root = str(tmp_path / "m")
    assert run("init", root).returncode == 0
    path = os.path.join(root, ".fsmem", "config.toml")
    text = textwrap.dedent("""\
        # my settings: keep this comment
        context_capacity = 30   # L1 size

        # durability note
        durability = "full"
        lock_timeout = 10.0
    """)
    with open(path, "w") as fh:
        fh.write(text)
    r = run("--root", root, "config", "context_capacity", "12")
    assert r.returncode == 0, r.stderr
    lines = open(path).read().splitlines()
    want = text.splitlines()
    assert len(lines) == len(want)
    changed = [(a, b) for a, b in zip(want, lines) if a != b]
    assert len(changed) == 1 and changed[0][1].startswith("context_capacity = 12"), changed
    r = run("--root", root, "config", "agent", "kitchen")   # not in the file: appended
    assert r.returncode == 0, r.stderr
    after = open(path).read().splitlines()
    assert after[:len(lines)] == lines and after[len(lines):] == ['agent = "kitchen"'], after
    got = json.loads(run("--root", root, "--json", "config").stdout)
    assert got["context_capacity"] == 12 and got["agent"] == "kitchen"
    assert not [n for n in os.listdir(os.path.dirname(path)) if ".tmp" in n]


def test_set_config_is_atomic_and_refuses_what_it_cannot_keep(tmp_path):
    from fsmem.format.errors import FormatError
    from fsmem.store.config import load_config, set_config
    (tmp_path / ".fsmem").mkdir()
    path = tmp_path / ".fsmem" / "config.toml"
    path.write_text("# top\n[table]\nx = 1\n")   # a table fsmem does not know: refused
    with pytest.raises(FormatError):
        set_config(tmp_path, "durability", "off")
    assert path.read_text() == "# top\n[table]\nx = 1\n"
    path.unlink()
    set_config(tmp_path, "durability", "off")     # no file yet: one is written
    assert load_config(tmp_path) == {"durability": "off"}


_WRITE_NO_CLOSE = """
import os, sys
from fsmem.memory.facade import Memory
m = Memory.open(sys.argv[1], create=True, durability="off")
for i in range(int(sys.argv[2])):
    m.commit(f"note {i} about the coffee maker and topic {i % 17}", summary=f"n{i}")
os._exit(0)   # no close: the index the writer kept in memory is never saved
"""


def test_a_store_written_without_close_gives_one_stale_index_hint_until_reindex(tmp_path):
    root = str(tmp_path / "m")
    w = subprocess.run([sys.executable, "-c", _WRITE_NO_CLOSE, root, "600"],
                       capture_output=True, timeout=300, cwd=str(REPO), env=ENV)
    assert w.returncode == 0, w.stderr
    for _ in range(2):   # a reader never saves: the second query rebuilds (and says) again
        r = run("--root", root, "query", "coffee")
        err = r.stderr.decode()
        assert r.returncode == 0, err
        assert err.count("the search index is missing or stale") == 1, err
        assert "fsmem reindex" in err and "600 units" in err, err
        assert len(err.splitlines()) <= 2, err   # in the bar's closing line, not one more
    j = run("--root", root, "--json", "query", "coffee")   # --json: stderr stays quiet
    assert j.returncode == 0 and json.loads(j.stdout) and j.stderr == b""
    assert run("--root", root, "reindex").returncode == 0
    r = run("--root", root, "query", "coffee")
    assert r.returncode == 0 and b"missing or stale" not in r.stderr, r.stderr


def _written_and_closed(root: str, n: int, query_first: bool) -> None:
    code = _WRITE_NO_CLOSE.replace("os._exit(0)", ("m.query('coffee')\n" if query_first
                                                    else "") + "m.close()")
    w = subprocess.run([sys.executable, "-c", code, root, str(n)], capture_output=True,
                       timeout=300, cwd=str(REPO), env=ENV)
    assert w.returncode == 0, w.stderr


def test_memory_close_saves_the_index_it_used_so_the_cli_reads_it(tmp_path):
    root = str(tmp_path / "m")
    _written_and_closed(root, 250, query_first=True)
    r = run("--root", root, "query", "coffee")
    assert r.returncode == 0 and b"missing or stale" not in r.stderr, r.stderr
    assert b"fsmem: index" not in r.stderr   # no catch-up bar either


def test_memory_close_after_commits_alone_saves_the_index(tmp_path):
    root = str(tmp_path / "m")
    _written_and_closed(root, 250, query_first=False)
    r = run("--root", root, "query", "coffee")
    assert r.returncode == 0 and b"missing or stale" not in r.stderr, r.stderr


def test_reindex_progress_on_a_pipe_is_a_few_lines(tmp_path):
    root = str(tmp_path / "m")
    _written_and_closed(root, 600, query_first=False)
    r = run("--root", root, "reindex")   # stderr is a pipe here
    assert r.returncode == 0, r.stderr
    assert len(r.stderr) < 400 and len(r.stderr.splitlines()) <= 4, r.stderr


def test_plain_terminal_bar_without_tqdm_redraws_a_bounded_number_of_times(monkeypatch):
    """A terminal without the ``progress`` extra gets a one-line bar: drawn when it changes
    (at most ~31 times for any count), not once a unit; its last draw shows the total."""
    from fsmem.interfaces.cli import progress as prog

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True
    err = Tty()
    monkeypatch.setitem(sys.modules, "tqdm", None)   # import tqdm -> ImportError
    monkeypatch.setattr(sys, "stderr", err)
    with prog.progress("reindex") as tick:
        for i in range(600):
            tick(i + 1, 600)
    out = err.getvalue()
    assert out.count("\r") <= 40 and len(out) < 3000, len(out)
    assert out.rstrip().endswith("600/600")
    err2 = Tty()
    monkeypatch.setattr(sys, "stderr", err2)
    for i in range(600):
        prog.progress_bar(i + 1, 600)
    assert err2.getvalue().count("\r") <= 50 and err2.getvalue().rstrip().endswith("600/600")


@pytest.mark.parametrize("how", ["file", "stdin", "chatgpt"])
def test_a_refused_import_into_a_new_directory_leaves_no_store_behind(tmp_path, how):
    """`fsmem --root NEW import BAD` refuses the archive and does not leave NEW behind as an
    empty store it made; an existing store's directory stays (its tree unchanged)."""
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"garbage, not a tar archive\n")
    new = tmp_path / "new"
    if how == "file":
        r = run("--root", str(new), "import", str(bad))
    elif how == "stdin":
        r = run("--root", str(new), "import", "-", input=bad.read_bytes())
    else:
        r = run("--root", str(new), "import", "--from", "chatgpt", str(bad))
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not new.exists(), sorted(os.listdir(new))
    old = tmp_path / "old"
    assert run("--root", str(old), "init").returncode == 0
    before = sorted(str(p.relative_to(old)) for p in old.rglob("*"))
    r = run("--root", str(old), "import", str(bad))
    assert r.returncode == 1 and old.is_dir(), r.stderr
    assert sorted(str(p.relative_to(old)) for p in old.rglob("*")) == before
