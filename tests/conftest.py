"""Shared helpers: temporary stores, child processes, sample media."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import wave
import zlib
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from collections import Counter

import pytest

SOURCE = Path(__file__).resolve().parent.parent

# One OpenBLAS thread in the workers and every child they start (the CLI does the same): its
# thread pool's start costs each process ~0.1 s of CPU, and the suite starts hundreds on two
# cores (fsmem's matrix products are small: one thread is as fast).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The word bridge's derived tables (fsmem.search.bridge) are cached here, not in the home
# directory of whoever runs the suite: made by the first worker that needs them, then read.
os.environ.setdefault("FSMEM_CACHE", os.path.join(tempfile.gettempdir(),
                                                  f"fsmem-test-cache-{os.getuid()}"))


def _package_root() -> Path:
    """The directory whose ``fsmem/`` the suite tests: FSMEM_TEST_PKG_ROOT (the mutation check:
    a mutated copy), else an installed non-editable fsmem (CI tests what pip installed), else
    this source tree."""
    forced = os.environ.get("FSMEM_TEST_PKG_ROOT")
    if forced:
        return Path(forced)
    import importlib.machinery
    here = {str(SOURCE), "", "."}
    spec = importlib.machinery.PathFinder.find_spec(
        "fsmem", [p for p in sys.path if p not in here and Path(p or ".").resolve() != SOURCE])
    if spec is not None and spec.origin and SOURCE not in Path(spec.origin).resolve().parents:
        return Path(spec.origin).resolve().parent.parent
    return SOURCE


PKG_ROOT = _package_root()
if PKG_ROOT != SOURCE:   # never let the source tree shadow the package under test
    sys.path[:] = [p for p in sys.path if p not in ("", ".") and Path(p).resolve() != SOURCE]
    os.environ["PYTHONSAFEPATH"] = "1"    # children: no cwd first on sys.path either
sys.path.insert(0, str(PKG_ROOT))
# The repository (fixtures, benchmarks, README); children get PYTHONPATH=PKG_ROOT.
REPO = SOURCE if os.environ.get("FSMEM_TEST_PKG_ROOT") is None else PKG_ROOT

from fsmem import Memory  # noqa: E402


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "mem"


@pytest.fixture
def mem(root: Path) -> Memory:
    return Memory.open(root)


def make_png(width: int = 64, height: int = 48, seed: int = 1) -> bytes:
    """A real PNG (valid CRCs), a gradient that depends on ``seed``."""
    raw = b"".join(b"\x00" + b"".join(bytes(((x * 4 + y * seed) % 256, (y * 5) % 256, seed % 256))
                                       for x in range(width)) for y in range(height))
    return _png(width, height, raw)


def solid_png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A real PNG of one colour."""
    return _png(width, height, (b"\x00" + bytes(rgb) * width) * height)


def _png(width: int, height: int, raw: bytes) -> bytes:
    """RGB8 rows (each led by filter byte 0) as a PNG file with valid CRCs."""
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(
            ">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def make_wav(seconds: float = 0.25, freq: int = 440) -> bytes:
    import math
    buf = BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * freq * i / 8000)))
                               for i in range(int(8000 * seconds))))
    return buf.getvalue()


def run_racing(threads: "list[threading.Thread]", *, switch: float = 1e-6,
               timeout: float | None = None) -> None:
    """Start and join ``threads`` with the interpreter switching threads as often as it can
    (``sys.setswitchinterval(switch)``), so that races show; the interval is restored."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(switch)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=timeout)
    finally:
        sys.setswitchinterval(old)


def run_py(code: str, *, env: dict[str, str] | None = None, timeout: float = 120,
           check: bool = False) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the repo importable."""
    full_env = {**os.environ, "PYTHONPATH": str(PKG_ROOT), **(env or {})}
    proc = subprocess.run(cwd=str(REPO), args=[sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_cli(*args: str, root: Path | None = None, timeout: float = 120
            ) -> subprocess.CompletedProcess:
    """``fsmem ARGS [--root ROOT]`` as its own process (the package under test), text out."""
    return fsmem_process([*args, *(["--root", str(root)] if root else [])], timeout=timeout)


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a command the suite starts: this one, the package under test first."""
    return {**os.environ, "PYTHONPATH": str(PKG_ROOT), **extra}


# Environment variables read when a module is imported (the interpreter's own, fsmem's fault
# injection): a command whose value differs from the server's starts fresh.
_IMPORT_TIME = ("PYTHON", "FSMEM_CRASH_AT", "FSMEM_FAIL_AT", "FSMEM_CALLS_OUT", "FSMEM_TEST_")
_server_state: dict = {"lock": threading.Lock()}


def _cli_server() -> tuple[subprocess.Popen, dict[str, str]]:
    """This worker's fork server (tests/cli_server.py), started on first use."""
    proc = _server_state.get("proc")
    if proc is None or proc.poll() is not None:
        here = str(Path(__file__).resolve().parent)
        code = (f"import sys; sys.path.insert(0, {here!r}); import cli_server; "
                f"cli_server.serve({here!r})")
        env = cli_env()
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, cwd=str(REPO), env=env)
        _server_state.update(proc=proc, env=env, buf=b"")
    return proc, _server_state["env"]


def _server_line(proc: subprocess.Popen, deadline: float | None) -> dict | None:
    """The server's next answer, or None when ``deadline`` (time.monotonic) passes first."""
    import json
    import select
    import time
    while b"\n" not in _server_state["buf"]:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([proc.stdout], [], [], wait)
        if not ready:
            return None
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            raise RuntimeError("the CLI fork server ended")
        _server_state["buf"] += chunk
    line, _server_state["buf"] = _server_state["buf"].split(b"\n", 1)
    return json.loads(line)


def fsmem_process(args: list[str], *, module: str = "fsmem.cli",
                  input: str | bytes | None = None, env: dict[str, str] | None = None,
                  cwd: str | os.PathLike | None = None, timeout: float = 120,
                  text: bool = True) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` as its own process, like ``subprocess.run(capture_output=True)``:
    forked from this worker's server that imported fsmem once (tests/cli_server.py), or a fresh
    interpreter when the fork could differ (an import-time variable, FSMEM_TEST_FRESH_CLI=1) or
    the server is busy with another thread's command (two commands may wait on each other)."""
    env = cli_env() if env is None else env
    cwd = str(REPO) if cwd is None else os.fspath(cwd)
    argv = [sys.executable, "-m", module, *map(os.fspath, args)]
    data = input.encode() if isinstance(input, str) else input
    lock = _server_state["lock"]
    if os.environ.get("FSMEM_TEST_FRESH_CLI") != "1" and lock.acquire(blocking=False):
        try:
            proc, server_env = _cli_server()
            if all(env.get(k) == server_env.get(k) for k in {*env, *server_env}
                   if k.startswith(_IMPORT_TIME)):
                return _forked(proc, argv, module, args, data, env, cwd, timeout, text)
        finally:
            lock.release()
    done = subprocess.run(argv, input=data, capture_output=True, cwd=cwd, env=env,
                          timeout=timeout)
    return _decoded(done) if text else done


def _decoded(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """Text out as ``subprocess.run(text=True)`` gives it (universal newlines)."""
    done.stdout, done.stderr = (b.decode().replace("\r\n", "\n").replace("\r", "\n")
                                for b in (done.stdout, done.stderr))
    return done


def _forked(proc: subprocess.Popen, argv: list[str], module: str, args: list[str],
            data: bytes | None, env: dict[str, str], cwd: str, timeout: float,
            text: bool) -> subprocess.CompletedProcess:
    import json
    import signal
    import tempfile
    import time
    with tempfile.TemporaryDirectory(prefix="fsmem-cli-") as tmp:
        paths = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
        for name, path in paths.items():
            with open(path, "wb") as fh:
                fh.write((data or b"") if name == "stdin" else b"")
        req = {"module": module, "args": [os.fspath(a) for a in args], "env": env, "cwd": cwd,
               **paths}
        proc.stdin.write(json.dumps(req).encode() + b"\n")
        proc.stdin.flush()
        pid = _server_line(proc, None)["pid"]
        answer = _server_line(proc, time.monotonic() + timeout)
        timed_out = answer is None
        if timed_out:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            answer = _server_line(proc, None)
        with open(paths["stdout"], "rb") as fh:
            out = fh.read()
        with open(paths["stderr"], "rb") as fh:
            err = fh.read()
    if timed_out:
        raise subprocess.TimeoutExpired(argv, timeout, output=out, stderr=err)
    done = subprocess.CompletedProcess(argv, os.waitstatus_to_exitcode(answer["status"]),
                                       out, err)
    return _decoded(done) if text else done


STRESS = os.environ.get("FSMEM_STRESS") == "1"


def full_context(path: Path) -> set[str]:
    """A store whose L1 (capacity 4, 1 protected) is full: four appended events, no prune."""
    from fsmem import Event
    mem = Memory.open(path, context_capacity=4, context_protected=1, auto_prune=False)
    inputs = [f"topic alpha {i}" if i % 2 else f"topic gamma {i}" for i in range(4)]
    for text in inputs:
        mem.append(Event(source="qq", input=text, response="answer " + text))
    mem.close()
    return set(inputs)


def distillable(path: Path) -> set[str]:
    """A store with three events pruned into L2 (fact-shaped: "Alice works at Acme number
    i", "Bob lives in Paris."): what distill takes; their inputs."""
    from fsmem import Event
    mem = Memory.open(path, context_capacity=2, context_protected=1, auto_prune=False)
    base = set()
    for i in range(3):
        text = f"Alice works at Acme number {i}"
        mem.append(Event(source="qq", input=text, response="Bob lives in Paris."))
        base.add(text)
    mem.prune(query="x")
    mem.close()
    return base


def topics_template(root: Path, **open_kw) -> "Counter[str]":
    """A full L1 of four events on two topics ("before i topic0/1"), as ``stored_counts`` counts it."""
    from fsmem import Event
    mem = Memory.open(root, context_capacity=4, context_protected=1)
    for i in range(4):
        mem.append(Event(source="qq", input=f"before {i} topic{i % 2}"))
    mem.close()
    return stored_counts(root, **open_kw)


def stored_counts(root: Path, **open_kw) -> "Counter[str]":
    """``stored_inputs`` after a writer open of ``root`` (recovery runs first)."""
    mem = Memory.open(root, auto_prune=False, **open_kw)
    try:
        return stored_inputs(mem)
    finally:
        mem.close()


def stored_inputs(mem: Memory) -> "Counter[str]":
    """How many times each event input is stored, over every layer of ``mem``."""
    from collections import Counter
    seen: Counter = Counter()
    for layer in mem.store.layers():
        for unit in mem.units(layer):
            for ev in mem.document(unit).events:
                seen[ev.input] += 1
    return seen

# Runs many crash points in one interpreter: fsmem is imported once, then each point is a fork
# that crashes (os._exit(77)) at its Nth mutating call; one JSON line per point on stdout.
_FORK_DRIVER = """
import json, os, sys
import fsmem, fsmem.memory.facade, fsmem.memory.prune, fsmem.memory.stablemem
from fsmem.format import fsops as _fsops
code = compile(sys.argv[1], "<crash child>", "exec")
for arg in sys.argv[2:]:
    point, root = arg.split("=", 1)
    pid = os.fork()
    if pid == 0:
        out = os.open(root + ".stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.environ["FSMEM_CRASH_AT"] = point
        _fsops.set_hook(_fsops._env_hook())
        sys.argv = ["-c", root]
        try:
            exec(code, {"__name__": "__main__"})
        except SystemExit as exc:
            os._exit(exc.code if isinstance(exc.code, int) else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(json.dumps([int(point), os.waitstatus_to_exitcode(status)]), flush=True)
"""

def crash_points(total: int, sample: int, seed: int = 16) -> list[int]:
    """Every crash point 1..total under FSMEM_STRESS=1; else the first, the last and a seeded
    sample of the others (the same points on every run)."""
    import random
    if STRESS or total <= sample:
        return list(range(1, total + 1))
    rest = random.Random(seed).sample(range(2, total), sample - 2)
    return sorted({1, total, *rest})


def crash_sweep(tmp_path: Path, template: Path, child: str, check, *, limit: int = 400,
                env: dict[str, str] | None = None, sample: int = 16,
                focus: "Callable[[str], list[int]] | None" = None
                ) -> tuple[int, subprocess.CompletedProcess]:
    """Crash ``child`` (python code, argv[1] = a fresh copy of ``template``) at its Nth mutating
    fs call, then call ``check(root, label)`` on the copy (reopening it runs recovery); what the
    child printed before its crash is in ``<root>.stdout``.

    A clean run counts the calls (and is checked too); then each chosen point N (all of them
    under FSMEM_STRESS=1, else ``sample`` seeded ones) runs in a fork of one preloaded
    interpreter and must really crash there. ``focus(clean stdout)``: more points, always run
    (the calls a test cares about, which the child printed). Returns (number of calls, the
    clean run)."""
    import json
    import shutil
    from fsmem.format import fsops as _fsops
    base = {**os.environ, "PYTHONPATH": str(PKG_ROOT), **(env or {})}
    base.pop("FSMEM_CRASH_AT", None)
    clean = tmp_path / "crash-clean"
    shutil.copytree(template, clean, symlinks=True)
    out = tmp_path / "crash-calls"
    proc = subprocess.run(cwd=str(REPO), args=[sys.executable, "-c", child, str(clean)],
                          capture_output=True, text=True, timeout=120,
                          env={**base, "FSMEM_CALLS_OUT": str(out)})
    assert proc.returncode == 0, proc.stderr
    total = int(out.read_text())
    Path(f"{clean}.stdout").write_text(proc.stdout)
    assert 0 < total < limit, f"{total} fs calls"
    check(clean, "no crash")
    points = crash_points(total, sample)
    if focus is not None:
        points = sorted({*points, *(n for n in focus(proc.stdout) if 0 < n <= total)})
    roots = {n: tmp_path / f"crash{n}" for n in points}
    for root in roots.values():
        shutil.copytree(template, root, symlinks=True)
    drv = subprocess.run(cwd=str(REPO), args=[sys.executable, "-c", _FORK_DRIVER, child,
                                               *(f"{n}={r}" for n, r in roots.items())],
                         capture_output=True, text=True, timeout=60 + 10 * len(points), env=base)
    assert drv.returncode == 0, drv.stderr
    codes = dict(json.loads(line) for line in drv.stdout.splitlines())
    for n, root in roots.items():
        assert codes.get(n) == _fsops.CRASH_EXIT_CODE, \
            f"FSMEM_CRASH_AT={n} of {total}: exit {codes.get(n)}, not a crash\n{drv.stderr}"
        check(root, f"FSMEM_CRASH_AT={n} of {total}")
        shutil.rmtree(root)
    return total, proc


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``stress`` run only under FSMEM_STRESS=1 (the default suite stays short)."""
    if STRESS:
        return
    skip = pytest.mark.skip(reason="stress run: set FSMEM_STRESS=1")
    for item in items:
        if item.get_closest_marker("stress") is not None:
            item.add_marker(skip)


def assert_feed_agrees(root: Path, label: str = "") -> None:
    """The change feed and the layers agree (fsmem.store.changes): every unit is where the
    newest record about it places it, and nowhere else, except the units of the session a
    crash interrupted (after the last end mark): a record is written before its change, so
    such a unit is where the feed placed it before that session, or where its records say
    (a consumer looks at each record's unit anyway)."""
    from fsmem.store.changes import UNIT_KINDS, read_changes
    recs = read_changes(str(Path(root) / ".fsmem")).records
    last_end = max((r.seq for r in recs if r.kind == "end"), default=0)

    def placed(upto: int) -> dict[str, str]:
        where: dict[str, str] = {}
        for r in recs:
            if r.seq > upto:
                break
            if r.kind in ("publish", "move"):
                where[r.unit] = r.layer
            elif r.kind in ("remove", "quarantine") and where.get(r.unit) == r.layer:
                del where[r.unit]
        return where
    before, after = placed(last_end), placed(1 << 62)
    tail = {r.unit for r in recs if r.seq > last_end and r.kind in UNIT_KINDS}
    present: dict[str, list[str]] = {}
    from fsmem.format.layout import Layout
    for layer in Layout(root).layers():   # every agent's L1 too (format 4)
        for e in os.scandir(Path(root) / layer):
            if e.is_dir(follow_symlinks=False):
                present.setdefault(e.name, []).append(layer)
    for unit in set(present) | set(after):
        at = present.get(unit, [])
        allowed = [[after[unit]] if unit in after else []]
        if unit in tail:
            allowed.append([before[unit]] if unit in before else [])
        assert at in allowed, f"{label}: {unit} is in {at}, the feed says {allowed}"
