"""Shared helpers: temporary stores, child processes, sample media."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import wave
import zlib
from io import BytesIO
from pathlib import Path

import pytest

# FSMEM_TEST_PKG_ROOT points the suite at another copy of the package (the mutation check).
REPO = Path(os.environ.get("FSMEM_TEST_PKG_ROOT") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(REPO))

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


def run_py(code: str, *, env: dict[str, str] | None = None, timeout: float = 120,
           check: bool = False) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the repo importable."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.run(cwd=str(REPO), args=[sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def crash_sweep(tmp_path: Path, template: Path, child: str, check, *, limit: int = 400,
                env: dict[str, str] | None = None) -> tuple[int, subprocess.CompletedProcess]:
    """Run ``child`` (python -c, argv[1] = a fresh copy of ``template``) with FSMEM_CRASH_AT=n
    for n = 1, 2, ... until it completes; after each run call ``check(root, label)`` on the
    copy (reopening it runs recovery). Returns the number of runs and the completed run."""
    import shutil
    from fsmem import _fsops
    base = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    n = 0
    while True:
        n += 1
        assert n < limit, "the child never completed"
        root = tmp_path / f"crash{n}"
        shutil.copytree(template, root, symlinks=True)
        proc = subprocess.run(cwd=str(REPO), args=[sys.executable, "-c", child, str(root)],
                              capture_output=True, text=True, timeout=60,
                              env={**base, "FSMEM_CRASH_AT": str(n)})
        assert proc.returncode in (0, _fsops.CRASH_EXIT_CODE), proc.stderr
        check(root, f"FSMEM_CRASH_AT={n}")
        shutil.rmtree(root)
        if proc.returncode == 0:
            return n, proc
