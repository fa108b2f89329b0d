"""Progress for long CLI work, on stderr only. On a terminal: a bar (tqdm, extra
``progress``; a plain one-line bar without it). stderr not a terminal: one plain line when the
work starts and one when it ends, nothing else. With ``--json`` (``enabled=False``): nothing."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

__all__ = ["progress", "progress_bar"]

Tick = Callable[[int, int], None]


@contextlib.contextmanager
def progress(label: str, *, enabled: bool = True) -> Iterator[Tick | None]:
    """A ``tick(done, total)`` callback for the duration of the block (None when disabled)."""
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
        yield plain
        if state["total"] >= 0:
            err.write(f"fsmem: {label}: done\n")
            err.flush()
        return
    try:
        from tqdm import tqdm  # lazy: start-up, loaded only when used (+tqdm)
    except ImportError:
        tqdm = None
    bar = None

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
        width = 30
        filled = width * done // max(total, 1)
        err.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            err.write("\n")
        err.flush()
    try:
        yield tick
    finally:
        if bar is not None:
            bar.close()


def progress_bar(done: int, total: int) -> None:
    """A one-line progress bar on stderr (for ``fsmem reindex``)."""
    width = 40
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\rreindex [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()
