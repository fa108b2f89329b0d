"""Access counts are memoised (a call reads only appended bytes) and never stale: whatever
changed the log (this process, another process, a compaction, a torn line completed later),
the memo answers what a fresh read of the files answers."""

from __future__ import annotations

import os

from fsmem import Memory
from fsmem.store.access import AccessLog

from conftest import run_py


def _fresh(meta: str) -> dict[str, tuple[int, int]]:
    return {u: (s.count, s.last_ns) for u, s in AccessLog(meta).stats().items()}


def _memo(log: AccessLog) -> dict[str, tuple[int, int]]:
    return {u: (s.count, s.last_ns) for u, s in log.stats().items()}


def test_memoised_counts_equal_a_fresh_read(root):
    mem = Memory.open(root, durability="off", auto_prune=False)
    ids = [mem.commit(f"page {i} of the logbook", summary=f"p{i}") for i in range(5)]
    meta = mem.store.meta
    log = mem.access
    mem.query("logbook page", 3)
    assert _memo(log) == _fresh(meta) != {}
    assert mem.document(ids[0]).access_count >= 1
    run_py(f"""
        from fsmem import Reader
        r = Reader.open({str(root)!r})
        for _ in range(4):
            r.query("logbook page", 5)
    """, check=True)
    assert _memo(log) == _fresh(meta)
    with open(log.path, "ab") as fh:           # a line being appended right now
        fh.write(f"{ids[1]} 17".encode())
    assert _memo(log) == _fresh(meta)
    with open(log.path, "ab") as fh:           # ... and completed
        fh.write(b"00\n")
    assert _memo(log)[ids[1]] == _fresh(meta)[ids[1]]
    assert _memo(log) == _fresh(meta)
    with mem.store.locked():
        assert log.compact(force=True)          # sealed, folded into the state
    assert _memo(log) == _fresh(meta)
    mem.query("logbook", 2)
    assert _memo(log) == _fresh(meta)
    os.unlink(log.path)                         # the live log removed by hand, then re-made
    log.create()
    mem.query("logbook", 1)
    assert _memo(log) == _fresh(meta)
