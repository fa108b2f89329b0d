"""Ctrl-C at any moment of any verb (issue 29, item 5): the process ends with exit 130 and the one
line ``fsmem: interrupted`` (or 0 when the verb had finished), never a traceback, and the store
it ran on is clean after (fsck), whatever step the signal met: interpreter start-up, the imports,
the verb's writes, its ``finally`` clean-ups, the exit.

Each run is a real subprocess of the real command on its own copy of one seeded store; the
signal is sent a swept delay after the child's fsmem entry has run (its import report says so:
a condition, not a guess). Nothing here measures time: a delay only picks a moment to
interrupt. The default suite runs an early and a middle moment of each writing verb and the
middle one of each read verb; FSMEM_STRESS=1
runs the whole sweep, and a sweep from the exec itself (the interpreter's start-up, before
fsmem's entry, is Python's: there only its own report is accepted).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_py

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
for _k in ("FSMEM_ROOT", "FSMEM_CAPACITY", "FSMEM_PROTECTED", "FSMEM_DURABILITY"):
    ENV.pop(_k, None)
CMD = [sys.executable, "-m", "fsmem"]

#: the verbs, each as the arguments after ``fsmem`` given the store ``r`` and a scratch dir ``t``
VERBS = {
    "commit": lambda r, t: ["commit", "--root", r, "--summary", "piano", "the recital is at seven"],
    "append": lambda r, t: ["append", "--root", r, "--source", "qq", "--role", "user",
                            "--input", "when is the piano recital?"],
    "query": lambda r, t: ["query", "--root", r, "piano recital"],
    "search": lambda r, t: ["search", "--root", r, "piano"],
    "recall": lambda r, t: ["recall", "--root", r, "piano recital"],
    "prune": lambda r, t: ["prune", "--root", r, "--capacity", "4", "--protected", "1"],
    "distill": lambda r, t: ["distill", "--root", r, "--max-age", "0.0001"],
    "fsck": lambda r, t: ["fsck", "--root", r],
    "snapshot": lambda r, t: ["snapshot", "--root", r, os.path.join(t, "snap")],
    "export": lambda r, t: ["export", "--root", r, os.path.join(t, "out.tar")],
    "import": lambda r, t: ["import", "--root", r, os.path.join(t, "in.tar")],
    "watch": lambda r, t: ["watch", "--root", r, "--once"],
    # the verbs that run until stopped
    "watch-daemon": lambda r, t: ["watch", "--root", r],
    "changes-follow": lambda r, t: ["changes", "--root", r, "--follow"],
    "serve": lambda r, t: ["serve", "--root", r, "--port", "0"],
    "mcp": lambda r, t: ["mcp", "--root", r],
}

#: seconds after fsmem's entry ran (the import phase, the verb's work, its exit)
SWEEP = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.6)
QUICK = (0.0, 0.1)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CMD, *args], capture_output=True, timeout=timeout, cwd=str(REPO),
                          env=ENV)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> tuple[Path, Path]:
    """A store with L1 events, L2 units and an export archive of it (the import's input)."""
    base = tmp_path_factory.mktemp("ctrlc")
    root = base / "m"
    r = str(root)
    for i in range(8):
        p = cli("append", "--root", r, "--init", "--source", "qq", "--role", "user",
                "--input", f"message {i} about the piano recital and the garden")
        assert p.returncode == 0, p.stderr
    for i in range(3):
        p = cli("commit", "--root", r, "--summary", f"note {i}", f"the recital {i} is at seven")
        assert p.returncode == 0, p.stderr
    p = cli("export", "--root", r, str(base / "in.tar"))
    assert p.returncode == 0, p.stderr
    return root, base / "in.tar"


#: what runs before fsmem's entry (fsmem/__main__.py) gets control: the interpreter's start-up,
#: runpy, and the package's ``__init__`` (it imports ``typing``; the entry cannot run earlier)
PRE_ENTRY = {str(REPO / "fsmem" / f) for f in ("__init__.py", "_moved.py", "_version.py")}


def before_fsmem(code: int, text: str) -> bool:
    """The signal met the interpreter before fsmem's entry ran: killed by the default action
    before Python installed its handler (no output), or Python's own KeyboardInterrupt report
    with no frame of fsmem's besides the package ``__init__``."""
    if code == -signal.SIGINT and text == "":
        return True
    lines = text.strip().splitlines()
    if code not in (1, -signal.SIGINT) or not lines or lines[-1] != "KeyboardInterrupt":
        return False
    files = re.findall(r'^\s*File "([^"]+)"', text, flags=re.M)
    return all(f.startswith("<frozen ") or f in PRE_ENTRY or "/fsmem/" not in f for f in files)


#: the line a verb's progress writes when its work starts, stderr not a terminal
PROGRESS_START = re.compile(r"^fsmem: [a-z -]+: \d+ units$")

#: the import that marks fsmem's entry as running (the CLI's module, imported by
#: fsmem/__main__.py): from the end of it on, every Ctrl-C is fsmem's to answer
ENTRY = re.compile(rb"^import time: .*\| +fsmem\.interfaces\.cli\.main$", re.M)


def interrupt(seeded, tmp_path: Path, verb: str, delay: float, *, from_entry: bool = True) -> None:
    """Run ``verb`` on a copy of the seeded store, SIGINT it ``delay`` s after fsmem's entry
    ran (``from_entry``: the child's import report, PYTHONPROFILEIMPORTTIME, names ENTRY; a
    condition, not a fixed sleep) or after the exec, then check the exit, the one line, and
    fsck of the store."""
    src, archive = seeded
    root = tmp_path / "m"
    shutil.copytree(src, root, symlinks=True)
    shutil.copy(archive, tmp_path / "in.tar")
    (root / "inbox").mkdir(exist_ok=True)
    (root / "inbox" / "note.txt").write_text("a dropped note about the garden\n")
    errpath = tmp_path / "stderr"
    # A shell's background job inherits SIGINT ignored; at a terminal Ctrl-C meets the default
    # disposition, so the child starts with it.
    with open(errpath, "wb") as errfile:
        p = subprocess.Popen([*CMD, *VERBS[verb](str(root), str(tmp_path))],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errfile,
                             cwd=str(REPO), env={**ENV, "PYTHONPROFILEIMPORTTIME": "1"},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60   # a deadline against a hang, not a measurement
        while from_entry and not ENTRY.search(errpath.read_bytes()):
            assert p.poll() is None and time.monotonic() < deadline, errpath.read_text()
            time.sleep(0.001)
        if delay:
            time.sleep(delay)   # not a measurement: the moment of the sweep to interrupt
        try:
            p.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = "".join(line for line in errpath.read_text(errors="replace").splitlines(True)
                   if not line.startswith("import time:"))
    if not from_entry and before_fsmem(p.returncode, text):
        return   # the interpreter had not reached fsmem's entry: nothing was opened
    assert "Traceback" not in text and "Exception ignored" not in text, (verb, delay, text)
    if p.returncode == 130:
        # the verb's own progress line (stderr not a terminal: "fsmem: distill: 3 units" when
        # the work starts, fsmem/interfaces/cli/progress.py) may come first; the interrupt
        # itself is one line, the last
        said = [ln for ln in text.strip().splitlines() if not PROGRESS_START.match(ln)]
        assert said == ["fsmem: interrupted"], (verb, delay, text)
    else:
        assert p.returncode == 0, (verb, delay, p.returncode, text)
    fsck = cli("fsck", "--root", str(root))
    assert fsck.returncode == 0 and fsck.stdout.strip() == b"clean", (verb, delay, fsck.stdout,
                                                                        fsck.stderr)


#: the verbs that write (each gets both quick moments; a read verb, the middle one)
WRITERS = {"commit", "append", "recall", "prune", "distill", "import", "watch", "watch-daemon"}


@pytest.mark.parametrize(("verb", "delay"), [(v, d) for v in sorted(VERBS) for d in QUICK
                                             if v in WRITERS or d == QUICK[-1]])
def test_ctrl_c_is_one_line_and_leaves_the_store_clean(seeded, tmp_path, verb, delay):
    interrupt(seeded, tmp_path, verb, delay)


@pytest.mark.stress
@pytest.mark.parametrize("delay", SWEEP)
@pytest.mark.parametrize("verb", sorted(VERBS))
def test_ctrl_c_sweep(seeded, tmp_path, verb, delay):
    interrupt(seeded, tmp_path, verb, delay)


@pytest.mark.stress
@pytest.mark.parametrize("delay", (0.0, 0.01, 0.02, 0.04, 0.08))
@pytest.mark.parametrize("verb", ["commit", "query"])
def test_ctrl_c_sweep_from_the_exec(seeded, tmp_path, verb, delay):
    """From the exec on: before fsmem's entry runs, Python's own report is all there is (not
    fsmem's to change: docs/RELIABILITY.md); from it on, the one line."""
    interrupt(seeded, tmp_path, verb, delay, from_entry=False)


def test_a_ctrl_c_that_ends_the_mcp_servers_tasks_is_not_logged_as_an_error(caplog):
    """A Ctrl-C that meets the MCP server's stdin reader ends its task group with the
    KeyboardInterrupt; asyncio.run's shutdown then reports that task through the loop's
    exception handler, which logs it as an error with the group's traceback (seen in the
    default suite: ``fsmem mcp`` at 0.1 s printed it before its line). While the server
    runs, such a report of nothing but a Ctrl-C is dropped; any other is logged as before."""
    import asyncio

    from fsmem.interfaces import mcp_server

    def report(exc: BaseException) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.call_exception_handler({
                "message": "unhandled exception during asyncio.run() shutdown",
                "exception": exc})
        finally:
            loop.close()

    interrupted = BaseExceptionGroup("unhandled errors in a TaskGroup",
                                     [KeyboardInterrupt(), asyncio.CancelledError()])
    failed = BaseExceptionGroup("unhandled errors in a TaskGroup",
                                [KeyboardInterrupt(), OSError("stdin closed")])
    with caplog.at_level("ERROR", logger="asyncio"):
        with mcp_server.quiet_interrupted_shutdown():
            report(interrupted)
            report(KeyboardInterrupt())
            assert caplog.records == []
            report(failed)
            assert len(caplog.records) == 1 and caplog.records[0].exc_info[1] is failed
        report(interrupted)   # outside the server: asyncio's report as ever
        assert len(caplog.records) == 2


_SHUTDOWN_CHILD = """
import signal, sys
from fsmem.interfaces import mcp_server

cleaned = []
kept = []

async def gen(name):
    try:
        yield name
    finally:
        if name == "first":
            signal.raise_signal(signal.SIGINT)   # the Ctrl-C lands in the loop's shutdown
        cleaned.append(name)

async def main():
    for name in ("first", "second"):
        g = gen(name)
        await g.__anext__()
        kept.append(g)   # left suspended: the loop's shutdown closes them

try:
    mcp_server.run_loop(main)
except KeyboardInterrupt:
    print("interrupted", sorted(cleaned), signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


def test_a_ctrl_c_during_the_mcp_loops_shutdown_waits_for_its_end():
    """A Ctrl-C that meets the end of ``fsmem mcp`` (its client gone, the event loop
    shutting down) cut the shutdown midway: the sweep saw "coroutine
    'BaseEventLoop.shutdown_asyncgens' was never awaited" after the line. The loop's
    shutdown is now held whole: the Ctrl-C waits for its end, then is raised as ever. In a
    child process (as the CLI meets it): the Ctrl-C lands in the first async generator's
    clean-up; both clean-ups finish, the KeyboardInterrupt comes after, the handler is
    Python's again, and nothing else is printed."""
    proc = run_py(_SHUTDOWN_CHILD)
    assert proc.stdout.strip() == "interrupted ['first', 'second'] True", (proc.stdout,
                                                                          proc.stderr)
    assert proc.stderr == "", proc.stderr
