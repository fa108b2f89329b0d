"""The Ctrl-C deferral's look at the store (issue 29, item 5): a unit this process has staged is
a write in flight, whatever the staging name's owner format (``<pid>@<host>`` since format 5)."""

from __future__ import annotations

import os

import pytest

from fsmem import Memory
from fsmem.interfaces.cli.main import _write_in_flight


def test_a_unit_this_process_staged_is_a_write_in_flight(tmp_path):
    mem = Memory.open(tmp_path / "m")
    try:
        busy = _write_in_flight(str(tmp_path / "m"))
        assert not busy()
        builder = mem.store.builder()   # staged, not yet published: ``<id>~<pid>@<host>~<r>``
        assert f"~{os.getpid()}@" in os.path.basename(builder.path)
        assert busy()
        os.rmdir(builder.path)
        assert not busy()
    finally:
        mem.close()


def test_another_process_staging_is_not_ours(tmp_path):
    mem = Memory.open(tmp_path / "m")
    try:
        busy = _write_in_flight(str(tmp_path / "m"))
        os.mkdir(os.path.join(mem.store.staging, f"u-x~{os.getpid() + 1}@{'0' * 12}~abcdef"))
        assert not busy()
    finally:
        mem.close()


def test_a_ctrl_c_leaves_no_thread_to_hold_the_exit(tmp_path):
    """A Ctrl-C that stops a verb while a thread of a library it uses is left waiting (the
    MCP SDK's anyio worker, whose start the signal cut: the sweep saw `fsmem mcp` hang at
    exit) ends the process with the one line and 130, not a hang on that thread."""
    code = """
import signal, sys, threading
from fsmem.interfaces.cli import main as cli
stuck = threading.Event()
def verb(args):
    threading.Thread(target=stuck.wait).start()   # non-daemon, never set
    signal.raise_signal(signal.SIGINT)
    return 0
sys.argv = ["fsmem", "ls", "--root", sys.argv[1]]
cli._main = lambda argv: verb(None)
from fsmem.interfaces.cli import sigint
sigint.install()
sys.exit(cli.main())
"""
    import subprocess
    import sys

    from conftest import cli_env
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m")], capture_output=True,
                          text=True, timeout=60, env=cli_env())
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == ["fsmem: interrupted"], proc.stderr


def test_a_ctrl_c_inside_the_mcp_servers_task_group_is_a_keyboard_interrupt(monkeypatch):
    """anyio wraps a KeyboardInterrupt raised in its tasks in an exception group; serve_stdio
    gives the CLI the KeyboardInterrupt (one line), not the group (a traceback). The group
    comes out of the server's event loop (``mcp_server.run_loop``)."""
    pytest.importorskip("mcp")
    from fsmem.interfaces import mcp_server

    class Service:
        closed = False

        def close(self):
            Service.closed = True

    def run(fn):
        raise BaseExceptionGroup("unhandled errors in a TaskGroup", [KeyboardInterrupt()])
    monkeypatch.setattr(mcp_server, "run_loop", run)
    monkeypatch.setattr(mcp_server, "build_server", lambda service: type(
        "S", (), {"run_stdio_async": None})())
    with pytest.raises(KeyboardInterrupt):
        mcp_server.serve_stdio(Service())
    assert Service.closed
