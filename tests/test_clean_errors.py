"""Every escaping exception is a clean error (issue 29 item 5): out-of-range timestamps,
hostile numbers in tool arguments and CLI flags."""

from __future__ import annotations

import math

import pytest

from fsmem import Event, Memory, Timestamp
from fsmem.format.errors import FormatError
from fsmem.interfaces import tools

GO_ZERO = Timestamp.parse("0001-01-01T00:00:00Z")   # Go's time.Time{}


def test_go_zero_instant_in_a_negative_zone_is_written_and_read_back(tmp_path):
    """Go's zero time in a -05:00 zone is year 0 on the wall clock ("0000-12-31T19:00:00-05:00",
    as Go writes it): it commits, round-trips exactly, and sorts before year 1."""
    t = Timestamp(GO_ZERO.ns, -5 * 3600)
    assert t.isoformat() == "0000-12-31T19:00:00-05:00"
    assert Timestamp.parse(t.isoformat()) == t
    assert t.strftime("%Y-%m-%d %H:%M") == "0000-12-31 19:00"
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    unit = mem.commit_events([Event(source="go", input="zero time", timestamp=t)])
    assert mem.document(unit).events[0].timestamp == t
    assert Timestamp.parse("0000-01-01T00:00:00Z") < GO_ZERO


@pytest.mark.parametrize("ns", [-10**30, 10**30, Timestamp.parse("9999-12-31T23:59:59Z").ns
                                + 10**18])
def test_an_instant_outside_years_0_to_9999_is_a_format_error(ns):
    with pytest.raises(FormatError, match="out of range"):
        Timestamp(ns, 0)


def test_an_offset_that_carries_the_wall_clock_past_9999_is_a_format_error():
    last = Timestamp.parse("9999-12-31T23:00:00Z")
    with pytest.raises(FormatError, match="out of range"):
        Timestamp(last.ns, 2 * 3600)


@pytest.mark.parametrize("seconds", [1e308, -1e308, math.inf, -math.inf, math.nan, 10**40])
def test_hostile_unix_seconds_are_a_format_error(seconds):
    with pytest.raises(FormatError):
        Timestamp.coerce(seconds)


@pytest.mark.parametrize("args", [{"max_age_hours": 1e308}, {"max_age_hours": 1e308,
                                                              "dry_run": True},
                                  {"max_access": 10**30}])
def test_hostile_numbers_in_tool_arguments_are_refused_by_the_schema(tmp_path, args):
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    mem.commit("something to distill")
    with pytest.raises(ValueError, match="memory_distill"):
        tools.call(mem, "memory_distill", args)
    assert len(mem.units("documents")) == 1


def test_every_numeric_tool_argument_has_a_finite_range():
    """No number a tool takes is unbounded: each declares a minimum and a maximum, so a
    hostile value is refused by the schema before any arithmetic sees it."""
    def numbers(schema, where):
        if isinstance(schema, dict):
            if schema.get("type") in ("number", "integer"):
                yield where, schema
            for key, sub in schema.items():
                yield from numbers(sub, f"{where}.{key}")
        elif isinstance(schema, list):
            for i, sub in enumerate(schema):
                yield from numbers(sub, f"{where}[{i}]")
    found = [(w, s) for t in tools.TOOLS for w, s in numbers(t.properties, t.name)]
    assert found
    unbounded = [w for w, s in found if "minimum" not in s or "maximum" not in s]
    assert unbounded == []


@pytest.mark.parametrize("argv", [["distill", "--max-age", "1e308"], ["distill", "--max-age", "inf"],
                                  ["distill", "--llm-timeout", "1e308"],
                                  ["watch", "--rescan", "inf"], ["fleet", "sync", "--interval", "1e400"]])
def test_hostile_numbers_in_cli_flags_are_one_line_and_exit_2(tmp_path, argv):
    import subprocess
    import sys

    from conftest import PKG_ROOT, REPO
    env = {"PYTHONPATH": str(PKG_ROOT), "PATH": "/usr/bin:/bin", "FSMEM_ROOT": str(tmp_path / "m")}
    r = subprocess.run([sys.executable, "-m", "fsmem", *argv], cwd=str(REPO), env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "must be at most" in r.stderr, r.stderr
