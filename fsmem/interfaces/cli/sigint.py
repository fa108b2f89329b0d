"""Ctrl-C for the ``fsmem`` process: one line and exit 130 at any moment (issue 29).

In the verb, SIGINT is Python's ``KeyboardInterrupt``: it unwinds the library's clean-ups, so an
operation either did not happen or completed (the writes are crash-safe; docs/RELIABILITY.md),
and ``main`` prints the line. Three moments need more than that, each handled here:
- an import (the verbs import the library lazily): an import cut midway can leave a C
  extension half set up (msgspec 0.23 crashes with SIGSEGV when a Ctrl-C meets the building of
  a ``Decoder`` at import time), and an import writes nothing, so ``install`` lets the
  ``KeyboardInterrupt`` wait until the import is over;
- a ``KeyboardInterrupt`` raised inside a finalizer or a weak-reference callback (the import
  system runs one on every module lock) is dropped by the interpreter as "unraisable", with a
  traceback, and the verb goes on: ``catch_dropped`` raises the signal again, so it is seen
  by the code that was running;
- a write in flight (a unit of this process staged, a journal entry it wrote not yet done):
  stopped there, it would leave dead staging or a pending entry for the next writer to settle
  (fsck lists them until then), so ``defer_while`` lets the ``KeyboardInterrupt`` wait until
  the write is published or dropped, for at most DEFER_MAX_S;
- a Ctrl-C can leave a library's thread waiting for work that will never come (the MCP SDK's
  anyio worker, whose start it cut): the interpreter's exit would wait on it forever, so
  ``exit_if_held`` ends an interrupted process at once where such a thread is left;
- once the verb has returned, the interpreter's exit (thread clean-up, finalizers, and at the
  very end the restored default action that kills the process) is not interruptible:
  ``finish`` flushes what the verb printed and ignores SIGINT from then on, so the exit code
  is the verb's (0, or 130 after the line).
Only the process's own command calls these: a library user's handlers are left alone.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, Callable

__all__ = ["catch_dropped", "defer_while", "exit_if_held", "finish", "install",
           "say_interrupted"]

LINE = b"fsmem: interrupted\n"


def say_interrupted() -> None:
    """The one line, unbuffered (it is out before anything the exit may print)."""
    try:
        os.write(2, LINE)
    except OSError:
        pass


#: the import system's own frames: a frame under one of them is running an import
_IMPORTING = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
#: how long a Ctrl-C that met an import or a write waits before it looks again
RETRY_S = 0.005
#: the longest a Ctrl-C waits for a write in flight (one that never ends must not hold it)
DEFER_MAX_S = 10.0

_busy: list[Callable[[], bool]] = []
_waiting_since: list[float] = []


def defer_while(busy: Callable[[], bool]) -> None:
    """Let a Ctrl-C wait while ``busy()`` says a write is in flight (see the module doc)."""
    _busy.append(busy)


def _writing() -> bool:
    for busy in _busy:
        try:
            if busy():
                return True
        except Exception:   # noqa: BLE001 - a look that fails must not keep the Ctrl-C
            pass
    return False


def install() -> None:
    """Ctrl-C raises ``KeyboardInterrupt`` in the main thread, except during an import: there it
    is raised once the import is over (looked at again every RETRY_S). A SIGINT that is
    ignored (a shell's background job) stays ignored."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
        signal.signal(signal.SIGINT, _on_sigint)


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if _importing(frame) or (_writing() and not _waited_too_long()):
        timer = threading.Timer(RETRY_S, signal.pthread_kill,
                                (threading.main_thread().ident, signal.SIGINT))
        timer.daemon = True
        timer.start()
        return
    _waiting_since.clear()
    raise KeyboardInterrupt


def _importing(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename in _IMPORTING:
            return True
        frame = frame.f_back
    return False


def _waited_too_long() -> bool:
    if not _waiting_since:
        _waiting_since.append(time.monotonic())
    return time.monotonic() - _waiting_since[0] > DEFER_MAX_S


def catch_dropped() -> None:
    """Make a Ctrl-C that met a finalizer count: re-raise the signal where it is seen."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if (isinstance(unraisable.exc_value, KeyboardInterrupt)
                or unraisable.exc_type is KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)   # the next bytecode of the main thread raises
            return
        previous(unraisable)

    if not getattr(sys.unraisablehook, "fsmem_sigint", False):
        hook.fsmem_sigint = True   # type: ignore[attr-defined]
        sys.unraisablehook = hook


def finish() -> None:
    """The verb is over: flush its output, then let no Ctrl-C interrupt the exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:   # the reader went away (``| head``): stop quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _on_sigint)):
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_if_held(code: int) -> None:
    """After an interrupted verb (its line said, its output flushed by ``finish``): where a
    thread that is not a daemon is still alive, the interpreter's exit would wait for it,
    forever if it waits for work nobody will give it; end the process now with ``code``.
    Nothing of fsmem's is in flight by then (``defer_while``; the store's lock is a flock the
    kernel releases)."""
    me = threading.current_thread()
    if any(t is not me and t.is_alive() and not t.daemon for t in threading.enumerate()):
        os._exit(code)
