"""The fsmem command as a newcomer meets it (issue 15): global flags before or after the verb,
--version, exit codes 0/1/2 with messages naming the argument, stdin at a terminal, empty and
non-UTF-8 input, a closed pipe, Ctrl-C, show/rm/config/doctor, demo --json/--root, progress on a
real pseudo-terminal and its absence on a pipe. Every case runs the real CLI in a subprocess
and checks that nothing was stored or changed on error."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, fsmem_process

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
for _k in ("FSMEM_ROOT", "FSMEM_CAPACITY", "FSMEM_PROTECTED", "FSMEM_DURABILITY"):
    ENV.pop(_k, None)
CMD = [sys.executable, "-m", "fsmem.cli"]


def run(*args: str, stdin=None, input: bytes | None = None, env: dict | None = None):
    if stdin is not None:   # a descriptor of the test's own: a fresh interpreter inherits it
        return subprocess.run([*CMD, *args], input=input, stdin=stdin, capture_output=True,
                              timeout=60, cwd=str(REPO), env={**ENV, **(env or {})})
    return fsmem_process(list(args), input=input, env={**ENV, **(env or {})}, timeout=60,
                         text=False)


def tree(root) -> list[tuple[str, int]]:
    """Every path under the store except derived/ephemeral state, with sizes."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("index",)]
        for f in files:
            if f in ("lock", "access.log", "legacy-reported"):
                continue
            p = os.path.join(d, f)
            out.append((os.path.relpath(p, root), os.path.getsize(p)))
    return sorted(out)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ux") / "m")
    assert run("init", "--root", root).returncode == 0
    r = run("--root", root, "commit", "--json", "屋顶光伏板今天发电 14.2 kWh", "--summary", "solar")
    assert r.returncode == 0, r.stderr
    return root, json.loads(r.stdout)["unit_id"]


def test_global_flags_before_or_after_the_verb_and_version(store):
    root, uid = store
    a, b = run("--json", "--root", root, "ls"), run("ls", "--root", root, "--json")
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    assert json.loads(a.stdout) == json.loads(b.stdout) and json.loads(a.stdout)[0]["unit_id"] == uid
    for argv in (["graph", "--root", root, "neighbors", "x"], ["--root", root, "graph", "neighbors",
                                                                 "x", "--json"]):
        r = run(*argv)
        assert r.returncode == 0, r.stderr
    v = run("--version")
    assert v.returncode == 0 and v.stdout.decode().startswith("fsmem 0.")
    # the fast path imports no library module (measured in docs/EXTRAS.md; no timing here)
    t = subprocess.run([sys.executable, "-X", "importtime", "-m", "fsmem.cli", "--version"],
                       capture_output=True, text=True, env=ENV, cwd=str(REPO))
    assert ("fsmem.interfaces.cli" in t.stderr and "fsmem.memory.facade" not in t.stderr
            and "msgspec" not in t.stderr)


@pytest.mark.parametrize("argv, names", [
    (["append", "--input", "q", "--tool-result", "noequals"], "--tool-result"),
    (["render", "--budget", "-10"], "--budget"),
    (["append", "--input", "q", "--timestamp", "2026-01-01T10:00:00"], "--timestamp"),
    (["query", "x", "--top-k", "0"], "--top-k"),
    (["recall", "x", "--top-k", "-5"], "--top-k"),
    (["commit", ""], "TEXT"),
    (["append", "--input", "  "], "--input"),
    (["config", "durability", "maybe"], "VALUE"),
    (["config", "nope"], "KEY"),
])
def test_usage_errors_exit_2_name_the_argument_and_store_nothing(store, argv, names):
    root, _ = store
    before = tree(root)
    r = run(*argv, "--root", root, stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert names in r.stderr.decode() and b"Traceback" not in r.stderr and r.stdout == b""
    assert tree(root) == before


def test_stdin_empty_non_utf8_and_at_a_terminal(store):
    root, _ = store
    before = tree(root)
    r = run("commit", "--root", root, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and b"empty text" in r.stderr
    r = run("commit", "--root", root, input=b"caf\xe9 au lait")
    assert r.returncode == 2 and b"stdin is not UTF-8" in r.stderr and b"0xe9" in r.stderr
    master, slave = pty.openpty()
    try:   # a terminal on stdin: a usage error at once, not a silent wait
        for verb in ("commit", "append"):
            p = subprocess.run([*CMD, verb, "--root", root], stdin=slave, capture_output=True,
                               timeout=20, cwd=str(REPO), env=ENV)
            assert p.returncode == 2 and b"pipe it on stdin" in p.stderr, p.stderr
    finally:
        os.close(master), os.close(slave)
    assert tree(root) == before


def test_broken_pipe_is_quiet_and_ctrl_c_is_one_line(store):
    root, _ = store
    rfd, wfd = os.pipe()
    os.close(rfd)              # the reader (`| head`) has gone before we write
    p = subprocess.run([*CMD, "ls", "--root", root], stdout=wfd, stderr=subprocess.PIPE,
                       timeout=30, cwd=str(REPO), env=ENV)
    os.close(wfd)
    assert p.returncode == 0 and p.stderr == b"", p.stderr
    before = tree(root)
    # A shell's background job inherits SIGINT ignored (and Python then keeps it ignored); at a
    # terminal Ctrl-C always meets the default disposition, so the child starts with it.
    p = subprocess.Popen([*CMD, "commit", "--root", root], stdin=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdout=subprocess.PIPE, cwd=str(REPO), env=ENV,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(1.0)            # blocked reading stdin that never ends
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 130 and err.decode().strip() == "fsmem: interrupted", err
    assert tree(root) == before


def test_show_is_a_transcript_and_ls_summarises_context(tmp_path):
    root = str(tmp_path / "m")
    q = ["append", "--root", root, "--init", "--source", "qq", "--role", "user"]
    assert run(*q, "--input", "周五的钢琴演奏会几点？",
               "--timestamp", "2026-05-01T09:00:00+08:00").returncode == 0
    r = run("append", "--root", root, "--source", "agent", "--role", "assistant", "--response",
            "晚上 7 点", "--timestamp", "2026-05-01T09:00:05+08:00", "--json")
    assert r.returncode == 0, r.stderr
    ls = json.loads(run("ls", "--root", root, "--json", "--layer", "context").stdout)
    assert {row["summary"] for row in ls} == {"周五的钢琴演奏会几点？", "晚上 7 点"}
    before = tree(root)
    for row in ls:
        out = run("show", row["unit_id"], "--root", root).stdout.decode()
        assert row["summary"] in out and "2026-05-01T09:00" in out
    assert tree(root) == before   # show writes nothing (units stay immutable)


def test_rm_asks_or_needs_yes(tmp_path):
    root = str(tmp_path / "m")
    uid = json.loads(run("commit", "--init", "--root", root, "--json", "to remove").stdout)["unit_id"]
    before = tree(root)
    r = run("rm", uid, "--root", root, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and b"--yes" in r.stderr and tree(root) == before
    r = run("rm", "u-20200101T000000-000000000000", "--root", root, "--yes")
    assert r.returncode == 1 and b"u-20200101T000000-000000000000" in r.stderr
    r = run("rm", uid, "--root", root, "--yes", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == {"removed": uid, "layer": "documents"}
    assert not os.path.exists(os.path.join(root, "documents", uid))


def test_config_is_kept_in_the_store_and_every_open_agrees(tmp_path):
    root = str(tmp_path / "m")
    assert run("init", "--root", root, "--capacity", "4", "--protected", "2").returncode == 0
    assert os.path.isfile(os.path.join(root, ".fsmem", "config.toml"))
    assert run("config", "context_protected", "1", "--root", root).returncode == 0
    got = json.loads(run("config", "--root", root, "--json").stdout)
    assert got["context_capacity"] == 4 and got["context_protected"] == 1
    env = json.loads(run("config", "--root", root, "--json", env={"FSMEM_CAPACITY": "9"}).stdout)
    assert env["context_capacity"] == 9
    code = ("import sys; from fsmem import Memory; m = Memory.open(sys.argv[1]);"
            "print(m.context_capacity, m.context_protected); m.close()")
    out = subprocess.run([sys.executable, "-c", code, root], capture_output=True, text=True,
                         env=ENV, cwd=str(REPO))
    assert out.stdout.split() == ["4", "1"], out.stderr
    # an older store without the file opens with the defaults; a reader creates nothing
    os.unlink(os.path.join(root, ".fsmem", "config.toml"))
    got = json.loads(run("config", "--root", root, "--json").stdout)
    assert got["context_capacity"] == 30
    assert not os.path.exists(os.path.join(root, ".fsmem", "config.toml"))


def test_doctor_and_demo_json(tmp_path):
    root = str(tmp_path / "demo")
    r = run("--json", "--root", root, "demo")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["timeline_events"] > 0 and os.path.isdir(root)
    again = run("demo", "--root", root)
    assert again.returncode == 2 and again.stdout == b"" and b"not empty" in again.stderr
    d = run("doctor", "--root", root, "--json")
    assert d.returncode == 0, d.stdout
    rep = json.loads(d.stdout)
    assert rep["store"]["format_version"] >= 1 and rep["store"]["findings"] == 0
    assert rep["extras"]["mcp"]["installed"] in (True, False)
    bridge = rep["word_bridge"]   # the suite's cache dir (conftest), where the tables are made
    assert bridge["installed"] is True
    assert bridge["cache"].startswith(os.environ["FSMEM_CACHE"] + os.sep), bridge
    assert b"word bridge (zh<->en, lexical): installed" in run("doctor", "--root", root).stdout
    assert json.loads(run("config", "--root", root, "--json").stdout)["context_capacity"] == 6


def _read_all(fd: int, proc: subprocess.Popen) -> bytes:
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    return b"".join(chunks)


def test_progress_on_a_terminal_and_not_on_a_pipe(tmp_path):
    root = str(tmp_path / "m")
    code = ("import sys; from fsmem import Memory; m = Memory.open(sys.argv[1], "
            "durability='off')\nfor i in range(40): m.commit(f'doc {i}')\nm.close()")
    subprocess.run([sys.executable, "-c", code, root], check=True, env=ENV, cwd=str(REPO))
    piped = run("reindex", "--root", root)
    assert piped.returncode == 0 and b"\r" not in piped.stderr
    assert len(piped.stderr.decode().splitlines()) <= 2
    master, slave = pty.openpty()
    try:
        for flags, want_bar in (([], True), (["--json"], False)):
            p = subprocess.Popen([*CMD, "reindex", "--root", root, *flags], stdout=subprocess.PIPE,
                                 stderr=slave, cwd=str(REPO), env=ENV)
            err = _read_all(master, p)
            out, _ = p.communicate(timeout=30)
            assert p.returncode == 0
            assert (b"\r" in err and b"40/40" in err) == want_bar, err
            if flags:
                assert json.loads(out) == {"units": 40} and err == b""
    finally:
        os.close(master), os.close(slave)


def test_distill_and_a_first_query_after_a_bulk_load_tell_their_progress(tmp_path):
    """Item 6: the long silent runs (distill of many units, the index catch-up of the first
    query after a bulk load) report progress: a bar on a terminal, plain lines on a pipe,
    nothing with --json."""
    root, small = str(tmp_path / "m"), str(tmp_path / "s")
    code = ("import sys; from fsmem import Memory; m = Memory.open(sys.argv[1], "
            "durability='off')\nfor i in range(int(sys.argv[2])): "
            "m.commit(f'Alice met Bob {i} at the lake')\nm.close()")
    for where, n in ((root, "220"), (small, "25")):
        subprocess.run([sys.executable, "-c", code, where, n], check=True, env=ENV,
                       cwd=str(REPO))
    shutil.rmtree(os.path.join(root, ".fsmem", "index"))   # derived: the first query rebuilds it
    piped = run("query", "lake", "--root", root)
    assert piped.returncode == 0, piped.stderr
    lines = piped.stderr.decode().splitlines()
    assert b"\r" not in piped.stderr and 1 <= len(lines) <= 2 and "index" in lines[0], lines
    quiet = run("query", "lake", "--root", root, "--json")
    assert quiet.returncode == 0 and quiet.stderr == b"" and json.loads(quiet.stdout)
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([*CMD, "distill", "--root", small, "--max-age", "0",
                              "--max-access", "100"], stdout=subprocess.PIPE, stderr=slave,
                             cwd=str(REPO), env=ENV)
        err = _read_all(master, p)
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert b"\r" in err and b"25/25" in err, err[-300:]
    finally:
        os.close(master), os.close(slave)


def test_init_takes_the_directory_as_an_argument(tmp_path):
    where = tmp_path / "new-store"
    r = run("init", str(where), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["root"] == str(where)
    assert (where / ".fsmem" / "config.toml").is_file()
    assert run("ls", "--root", str(where)).returncode == 0
