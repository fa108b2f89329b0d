"""The "batch" barrier's wave (``fsops.flush_many_start``): every file and directory flushed once,
all of a wave in flight at once (what folds them into one journal commit), the first failure
raised after every flush finished, descriptors closed, workers shared by waves and bounded."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from fsmem.format import fsops


def _files(tmp_path: Path, n: int) -> list[str]:
    out = []
    for i in range(n):
        path = tmp_path / f"f{i}"
        path.write_bytes(b"x" * 10)
        out.append(str(path))
    return out


def _path_of(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.fixture
def flushed(monkeypatch):
    """Record (path, is_dir) of every flush the workers run (really flushing too)."""
    seen: list[tuple[str, bool]] = []
    lock = threading.Lock()
    real = fsops._flush_one

    def record(fd: int, is_dir: bool):
        with lock:
            seen.append((_path_of(fd), is_dir))
        return real(fd, is_dir)
    monkeypatch.setattr(fsops, "_flush_one", record)
    return seen


def test_every_file_and_directory_is_flushed_once(tmp_path, flushed):
    files = _files(tmp_path, 3 * fsops.FLUSH_THREADS + 5)   # more than there are workers
    fsops.flush_many(files, [str(tmp_path)])
    assert sorted(flushed) == sorted([(f, False) for f in files] + [(str(tmp_path), True)])
    assert fsops._threads <= fsops.FLUSH_THREADS


def test_the_flushes_of_a_wave_are_in_flight_at_once(tmp_path, monkeypatch):
    """Each flush waits at a barrier of the wave's size: the wave completes only if all of
    them run at the same time (in turn, the barrier would break after its timeout)."""
    files = _files(tmp_path, 12)
    barrier = threading.Barrier(len(files) + 1, timeout=60)

    def meet(fd: int, is_dir: bool):
        barrier.wait()
        return None
    monkeypatch.setattr(fsops, "_flush_one", meet)
    fsops.flush_many(files, [str(tmp_path)])
    assert not barrier.broken


def test_the_first_failure_is_raised_after_every_flush_finished(tmp_path, monkeypatch):
    files = _files(tmp_path, 9)
    fds: list[int] = []
    done: list[str] = []
    lock = threading.Lock()

    def fail_some(fd: int, is_dir: bool):
        path = _path_of(fd)
        with lock:
            fds.append(fd)
            done.append(path)
        if path in (files[3], files[6]):
            return OSError(5, "Input/output error")
        return None
    monkeypatch.setattr(fsops, "_flush_one", fail_some)
    wait = fsops.flush_many_start(files, [str(tmp_path)])
    with pytest.raises(OSError) as err:
        wait()
    assert err.value.filename == files[3] and err.value.errno == 5
    assert len(done) == len(files) + 1   # none left in flight
    for fd in fds:   # every descriptor of the wave closed
        with pytest.raises(OSError):
            os.fstat(fd)


def test_waves_from_several_threads_share_the_workers(tmp_path, flushed):
    errors: list[BaseException] = []
    sets = [_files(tmp_path / str(k), 7) for k in range(6) if not (tmp_path / str(k)).mkdir()]

    def run(files: list[str]) -> None:
        try:
            for _ in range(5):
                fsops.flush_many(files, [])
        except BaseException as exc:   # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(s,)) for s in sets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and not any(t.is_alive() for t in threads)
    assert sorted(p for p, _ in flushed) == sorted(f for s in sets for f in s for _ in range(5))
    assert fsops._threads <= fsops.FLUSH_THREADS


def test_more_flushes_than_workers_wait_for_one(tmp_path, monkeypatch, flushed):
    """With two workers a wave of ten still completes (the rest queue behind them), and the
    next waves start no third thread."""
    fsops._forget_workers()   # a fresh set of workers (earlier ones stay idle on their queue)
    monkeypatch.setattr(fsops, "FLUSH_THREADS", 2)
    try:
        files = _files(tmp_path, 10)
        for _ in range(3):
            fsops.flush_many(files, [str(tmp_path)])
        assert fsops._threads == 2 and fsops._backlog == 0 and fsops._idle == 2
        assert len(flushed) == 3 * 11
    finally:
        fsops._forget_workers()


def test_a_flush_that_raises_is_raised_by_the_wait_and_the_workers_live_on(tmp_path,
                                                                          monkeypatch):
    """Not an OSError returned but an exception raised (a bug): the wait raises it once the
    wave is done, and the next wave still has its workers (none died)."""
    files = _files(tmp_path, 5)

    def boom(fd: int, is_dir: bool):
        raise RuntimeError("bug")
    monkeypatch.setattr(fsops, "_flush_one", boom)
    for _ in range(3 * fsops.FLUSH_THREADS // 5 + 1):   # more raises than there are workers
        with pytest.raises(RuntimeError, match="bug"):
            fsops.flush_many(files, [])
    monkeypatch.undo()
    fsops.flush_many(files, [str(tmp_path)])


def test_a_wave_of_nothing_returns(tmp_path):
    fsops.flush_many([], [])
    fsops.flush_many_start([], [])()
