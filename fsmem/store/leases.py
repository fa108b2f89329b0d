"""Keeping this host's lease fresh while a writer lives here (format 5; fsmem.format.hosts).

A writer renews ``.fsmem/leases/<host>`` when it takes the lock and the lease is older than a
quarter of its length (``due``), and one daemon thread per process renews the lease of every
open writer store every quarter lease, so an idle writer (building a unit outside the lock,
holding a snapshot pin) keeps its entries alive for other hosts. The thread holds weak
references only and starts with the first writer: a process that only reads starts none.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Protocol

from fsmem.format.hosts import lease_seconds, renew_lease

__all__ = ["register", "renew_if_due"]

log = logging.getLogger("fsmem.leases")


class _HasLeases(Protocol):
    leases_dir: str


_stores: "weakref.WeakSet[_HasLeases]" = weakref.WeakSet()
_renewed: dict[str, float] = {}    # leases dir -> monotonic time of this process's renewal
_lock = threading.Lock()
_thread: threading.Thread | None = None
_pid = 0                            # the process that started the thread (a fork has none)


def renew_if_due(leases_dir: str) -> None:
    """Renew this host's lease in ``leases_dir`` if this process has not for a quarter of
    the lease (in-memory clock: no system call otherwise). A failure is logged: a lease not
    renewed only makes other hosts wait."""
    now = time.monotonic()
    last = _renewed.get(leases_dir)
    if last is not None and now - last < lease_seconds() / 4:
        return
    try:
        renew_lease(leases_dir)
        _renewed[leases_dir] = now
    except OSError as exc:
        log.warning("%s: lease not renewed: %s", leases_dir, exc)


def register(store: _HasLeases) -> None:
    """Keep ``store``'s host lease fresh while it is open (weakly referenced), starting the
    one renewal thread of this process if it is not running."""
    global _thread, _pid
    with _lock:
        _stores.add(store)
        if _thread is None or not _thread.is_alive() or _pid != os.getpid():
            _pid = os.getpid()
            _thread = threading.Thread(target=_run, name="fsmem-lease", daemon=True)
            _thread.start()


def _run() -> None:
    while True:
        time.sleep(lease_seconds() / 4)
        with _lock:
            dirs = {s.leases_dir for s in list(_stores)}
            if not dirs:
                global _thread
                _thread = None
                return   # no writer open: the next one starts a thread again
        for leases_dir in sorted(dirs):
            try:
                _renewed.pop(leases_dir, None)
                renew_if_due(leases_dir)
            except Exception as exc:   # a daemon thread must not die of one store
                log.warning("%s: lease not renewed: %s", leases_dir, exc)
