"""The Ctrl-C deferral's look at the store (issue 29, item 5): a unit this process has staged is
a write in flight, whatever the staging name's owner format (``<pid>@<host>`` since format 5)."""

from __future__ import annotations

import os

from fsmem import Memory
from fsmem.interfaces.cli.main import _write_in_flight


def test_a_unit_this_process_staged_is_a_write_in_flight(tmp_path):
    mem = Memory.open(tmp_path / "m")
    try:
        busy = _write_in_flight(str(tmp_path / "m"))
        assert not busy()
        builder = mem.store.builder()   # staged, not yet published: ``<id>~<pid>@<host>~<r>``
        assert f"~{os.getpid()}@" in os.path.basename(builder.path)
        assert busy()
        os.rmdir(builder.path)
        assert not busy()
    finally:
        mem.close()


def test_another_process_staging_is_not_ours(tmp_path):
    mem = Memory.open(tmp_path / "m")
    try:
        busy = _write_in_flight(str(tmp_path / "m"))
        os.mkdir(os.path.join(mem.store.staging, f"u-x~{os.getpid() + 1}@{'0' * 12}~abcdef"))
        assert not busy()
    finally:
        mem.close()
