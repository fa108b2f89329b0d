"""Progress for long CLI work, on stderr only. On a terminal: a bar (tqdm, extra
``progress``; without it a plain one-line bar, redrawn only when it changes). stderr not a terminal: one plain line when the
work starts and one when it ends, nothing else. With ``--json`` (``enabled=False``): nothing."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

__all__ = ["progress", "progress_bar"]

Tick = Callable[[int, int], None]


@contextlib.contextmanager
def progress(label: str, *, enabled: bool = True) -> Iterator[Tick | None]:
    """A ``tick(done, total)`` callback for the duration of the block (None when disabled).
    Its ``final`` attribute, set by the caller, is added to the closing ``done`` line (a
    note about the work, in the same line rather than one more)."""
    if not enabled:
        yield None
        return
    err = sys.stderr
    if not err.isatty():
        state = {"total": -1}

        def plain(done: int, total: int) -> None:
            if state["total"] < 0:
                state["total"] = total
                err.write(f"fsmem: {label}: {total} units\n")
                err.flush()
        plain.final = ""   # type: ignore[attr-defined]
        yield plain
        if state["total"] >= 0:
            err.write(f"fsmem: {label}: done{plain.final}\n")   # type: ignore[attr-defined]
            err.flush()
        return
    try:
        from tqdm import tqdm  # lazy: start-up, loaded only when used (+tqdm)
    except ImportError:
        tqdm = None
    bar = None
    plain_bar = _Throttled(label, 30)

    def tick(done: int, total: int) -> None:
        nonlocal bar
        if tqdm is not None:
            if bar is None:
                # lazy: start-up, loaded only when used (+shutil, zlib)
                import shutil  # only for a bar: a query that needs none skips it (~2.5 ms)
                # a terminal that reports a 0x0 size (a fresh pty) would get no bar at all
                size = shutil.get_terminal_size((80, 24))
                bar = tqdm(total=total, desc=label, unit="unit", file=err, leave=True,
                           ncols=size.columns, nrows=size.lines)
            bar.update(done - bar.n)
            return
        plain_bar(done, total)
    tick.final = ""   # type: ignore[attr-defined]
    try:
        yield tick
    finally:
        if bar is not None:
            bar.close()
        if tick.final and (bar is not None or plain_bar.drawn >= 0):  # type: ignore[attr-defined]
            err.write(f"fsmem: {label}: done{tick.final}\n")  # type: ignore[attr-defined]
            err.flush()


class _Throttled:
    """A one-line bar on stderr, redrawn only when it changes (a ``#`` more), a second has
    passed, or the work is done: at most ``width`` + a few draws, not one a unit."""

    def __init__(self, label: str, width: int) -> None:
        self.label, self.width, self.drawn, self.at = label, width, -1, 0.0

    def __call__(self, done: int, total: int) -> None:
        import time  # lazy: start-up, loaded only when used
        filled = self.width * min(done, total) // max(total, 1)
        now = time.monotonic()
        if filled == self.drawn and done < total and now - self.at < 1.0:
            return
        self.drawn, self.at = filled, now
        err = sys.stderr
        err.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                  f"{done}/{total}")
        if done >= total:
            err.write("\n")
        err.flush()


_bar = _Throttled("reindex", 40)


def progress_bar(done: int, total: int) -> None:
    """A one-line progress bar on stderr (for ``fsmem reindex``), throttled."""
    global _bar
    if done <= 1:
        _bar = _Throttled("reindex", 40)   # a new run
    _bar(done, total)
