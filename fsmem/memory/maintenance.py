"""Maintenance after a durable write, and the idempotency key of append.

An operation either fails with nothing stored, or succeeds (docs/RELIABILITY.md). ``append``
stores its event first; the prune that follows is maintenance: if it fails (a full disk, a
damaged L1 unit, a lock timeout) the append has still succeeded. The failure is logged, the
debt is recorded in ``.fsmem/maintenance`` and the next write (or the next open) retries it,
so L1 stays over capacity only until a retry succeeds.

The idempotency key is the event id a caller supplies: a retry of an append whose outcome
the caller never saw finds the event already stored and stores nothing.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import time
from typing import TYPE_CHECKING, Callable

from fsmem.format.errors import FsmemError
from fsmem.format.unit import read_manifest

if TYPE_CHECKING:
    from fsmem.memory.writer import Writer
    from fsmem.store.store import Store

__all__ = ["failed_step", "after_write", "repair_owed", "owed", "stored_event", "OWED_FILE",
           "IDEMPOTENCY_WINDOW_S"]

log = logging.getLogger("fsmem.maintenance")

OWED_FILE = "maintenance"
# How far back L2 is searched for a supplied event id: every unit that can hold an event was
# created after the event was first stored, and unit ids sort by creation time, so a retry
# within this window finds the event wherever prune moved it (L1 is always searched whole).
IDEMPOTENCY_WINDOW_S = 24 * 3600
_ID_TIME = re.compile(r"^[A-Za-z]+-(\d{8}T\d{6})-")


def _owed_path(store: "Store") -> str:
    return os.path.join(store.meta, OWED_FILE)


def owed(store: "Store") -> bool:
    """True when a maintenance step failed and has not been retried successfully yet."""
    return os.path.isfile(_owed_path(store))


def after_write(store: "Store", *steps: Callable[[], object]) -> bool:
    """Run the maintenance ``steps`` after a durable write; never raises for a storage or
    store error: it is logged and owed. Returns True when every step succeeded (and the
    debt, if any, is settled)."""
    for step in steps:
        try:
            step()
        except (OSError, FsmemError) as exc:
            log.warning("%s: maintenance failed after a durable write, retried later: %s",
                        store.root, exc)
            _mark_owed(store, str(exc))
            return False
    if owed(store):
        try:
            os.unlink(_owed_path(store))
        except OSError:
            pass
        log.info("%s: owed maintenance completed", store.root)
    return True


def failed_step(exc: BaseException) -> Callable[[], None]:
    """A maintenance step that already failed with ``exc`` (for ``after_write``: logged and
    owed like any other)."""
    def step() -> None:
        raise exc
    return step


def repair_owed(store: "Store", prune: Callable[[], object] | None) -> None:
    """At open: retry a prune a previous process owed (logged again if it still fails);
    ``prune`` None: the memory does not prune by itself."""
    if prune is not None and owed(store):
        after_write(store, prune)


def _mark_owed(store: "Store", why: str) -> None:
    """Record the debt (best effort: on a full disk the next write retries anyway)."""
    path = _owed_path(store)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                     | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)   # (a FIFO: ENXIO, no hang)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            os.write(fd, why.encode("utf-8", "replace")[:4096])
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("%s: cannot record owed maintenance: %s", path, exc)


def stored_event(mem: "Writer", event_id: str) -> str:
    """The id of the unit holding an event with this id in L1, or in an L2 unit created
    within the idempotency window ('' when none does). Damaged units are skipped (fsck
    reports them)."""
    # lazy: start-up, loaded only when used (+numpy, ctypes)
    from fsmem.memory.l1cache import load_context
    for unit in load_context(mem):   # L1 from the writer's cache: re-read only what changed
        if any(ev.id == event_id for ev in unit.manifest.events):
            return unit.unit_id
    cutoff = time.strftime("%Y%m%dT%H%M%S", time.gmtime(time.time() - IDEMPOTENCY_WINDOW_S))
    for unit_id, path in mem.store.list_layer("documents").items():
        m = _ID_TIME.match(unit_id)
        if m is None or m.group(1) < cutoff:
            continue
        try:
            manifest = read_manifest(path, expect_id=unit_id)
        except (FsmemError, OSError, ValueError):
            continue
        if any(ev.id == event_id for ev in manifest.events):
            return unit_id
    return ""
