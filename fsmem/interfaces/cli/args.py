"""The parser class, argument types and input helpers of the ``fsmem`` command (stdlib only,
so importing the command stays fast): usage errors exit 2 and name the argument at fault."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fsmem._version import __version__

__all__ = ["UsageError", "Parser", "HelpFormatter", "add_globals", "add_scope", "positive_int",
           "nonneg_int", "positive_float", "nonneg_float", "timestamp_arg", "tool_result_arg", "stdin_text", "version_string"]


class UsageError(Exception):
    """Bad arguments or input found after parsing: exit 2, nothing stored."""


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size().columns`` gives it ($COLUMNS if a
    positive integer, else the width of the terminal on stdout, else 80), without importing
    shutil (and bz2, lzma, fnmatch with it: ~2.5 ms of every start-up)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter at argparse's width (the terminal's, less 2). argparse builds one
    for every ``add_argument``, and its own asks shutil for the width."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None, **kwargs: Any) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _columns() - 2 if width is None else width, **kwargs)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose formatter is ``HelpFormatter`` (its subparsers are Parsers
    too: ``add_subparsers`` makes parsers of its parser's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def version_string() -> str:
    return f"fsmem {__version__} (Python {sys.version.split()[0]})"


def add_globals(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """``--root``, ``--json``, ``-v`` on the top parser (with defaults) and on every verb
    (``suppress``: absent means "keep what was given before the verb")."""
    none: Any = argparse.SUPPRESS if suppress else None
    false: Any = argparse.SUPPRESS if suppress else False
    parser.add_argument("--root", default=none,
                        help="store directory (default $FSMEM_ROOT, else ./memory)")
    parser.add_argument("--agent", default=none, metavar="NAME",
                        help="the agent this command acts as: its own L1, its view of the "
                        "shared layers (default $FSMEM_AGENT, else the config's agent, else "
                        "the default agent)")
    parser.add_argument("--json", action="store_true", default=false,
                        help="print one JSON document on stdout (no progress)")
    parser.add_argument("-v", "--verbose", action="store_true", default=false,
                        help="log what happens")


def add_scope(parser: argparse.ArgumentParser) -> None:
    """``--scope`` and ``--owner``: which units a search of the shared layers may return."""
    parser.add_argument("--scope", choices=["own", "shared", "all"], default="all",
                        help="own: this agent's units; shared: units not private (any "
                        "agent's); all: both (default)")
    parser.add_argument("--owner", default=None, metavar="AGENT",
                        help="only units of this agent ('default' for the default agent)")


def _int_arg(text: str, minimum: int, rule: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{rule}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (``--top-k``, ``--budget``, ``--capacity``)."""
    return _int_arg(text, 1, "must be at least 1")


def nonneg_int(text: str) -> int:
    """An integer >= 0 (``--protected``)."""
    return _int_arg(text, 0, "must not be negative")


# The largest number of seconds a flag takes (a year): time.sleep and the clocks overflow on
# inf or 1e308; no interval or timeout of fsmem's is meant to be longer.
MAX_SECONDS = 365 * 86400.0
# The largest age in hours (as tools.MAX_AGE_HOURS: over a century).
MAX_HOURS = 1_000_000.0


def _float_arg(text: str, positive: bool, maximum: float = MAX_SECONDS) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 if positive else value >= 0):   # NaN fails both
        raise argparse.ArgumentTypeError(
            f"must be {'more than 0' if positive else 'at least 0'}, got {text}")
    if not value <= maximum:   # inf, 1e308
        raise argparse.ArgumentTypeError(f"must be at most {maximum:g}, got {text}")
    return value


def positive_float(text: str) -> float:
    """A number > 0 of seconds, at most a year (seconds between looks, a timeout)."""
    return _float_arg(text, True)


def nonneg_float(text: str) -> float:
    """A number >= 0 of hours, at most a million (an age)."""
    return _float_arg(text, False, MAX_HOURS)


def timestamp_arg(text: str) -> Any:
    """An RFC 3339 timestamp with its zone offset (``2026-05-01T09:30:00+08:00``)."""
    from fsmem.format.errors import FsmemError  # lazy: start-up, loaded only when used

    # lazy: start-up, loaded only when used (+datetime)
    from fsmem.format.timestamps import Timestamp
    try:
        return Timestamp.parse(text, field="time")
    except (FsmemError, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"{exc} (want RFC 3339 with a zone offset, e.g. 2026-05-01T09:30:00+08:00)"
        ) from None


def tool_result_arg(text: str) -> Any:
    """``NAME=OUTPUT`` -> ToolOutput."""
    name, sep, output = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"want NAME=OUTPUT, got {text!r}")
    # lazy: start-up, loaded only when used (+msgspec, uuid, decimal)
    from fsmem.format.model import ToolOutput
    return ToolOutput(name=name, output=output)


def stdin_text(verb: str, argument: str, examples: str = "") -> str:
    """The text piped on stdin, strictly UTF-8. At a terminal it is a usage error (rather
    than a silent wait): say how to pass the text, with ``examples`` (commands in backquotes
    that work as printed; default: ``echo hello | fsmem VERB``)."""
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError(f"no {argument} given: pass it as an argument, or pipe it on stdin "
                         f"(e.g. {examples or f'`echo hello | fsmem {verb}`'})")
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"stdin is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}); nothing stored") from None
