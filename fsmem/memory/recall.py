"""Recall (L2 -> L1): the best matches of a query move into L1, each unit by one rename, at
its original timestamps; a HomeAgent document becomes a unit on the way. Then the recalled
units are pinned through the turn and a full L1 is pruned (maintenance: never the recall's
failure once one unit has moved)."""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import TYPE_CHECKING, Callable

from fsmem.format import fsops
from fsmem.format.errors import FsmemError, NotFound
from fsmem.format.timestamps import Timestamp
from fsmem.format.model import check_name
from fsmem.format.unit import read_manifest
from fsmem.homeagent.documents import legacy_file_of, legacy_id, recall_legacy
from fsmem.memory.maintenance import after_write
from fsmem.memory.prune import prune as prune_l1
from fsmem.store.pins import pin_units

if TYPE_CHECKING:
    from fsmem.memory.writer import Writer

__all__ = ["recall", "recall_id"]

log = logging.getLogger("fsmem.flows")


def recall(mem: "Writer", text: str, top_k: int = 3, *,
           prune: Callable[[str], object] | None = None, scope: str = "all",
           agent: str | None = None) -> list[str]:
    """Move the best L2 matches into L1, each by one rename; returns the moved unit ids.

    Once one unit has moved, recall succeeds: a later hit that cannot move is logged and
    left in L2; pinning and the prune into a full L1 are maintenance (a failure is
    logged and owed, fsmem.memory.maintenance). Recall fails only with nothing moved.
    ``prune(query)``:
    the memory's prune (``Memory.prune``, a host's override included; default: the plain one)."""
    moved: list[str] = []
    hits = mem._search(text, top_k, scope=scope, agent=agent)   # the index in step once
    for hit in hits:
        try:
            uid = _recall_hit(mem, hit.unit_id, mem._index.legacy_file(hit.unit_id))
        except (OSError, FsmemError) as exc:
            uid = _moved_anyway(mem, hit.unit_id)
            if not moved and not uid:
                raise
            log.warning("%s: recall stopped after %d unit(s); %s stays in documents/: %s",
                        mem.root, len(moved) + bool(uid), hit.unit_id, exc)
            moved += [uid] if uid else []
            break
        if uid:
            moved.append(uid)
    if moved:
        _after(mem, moved, prune, text)
    return moved


def recall_id(mem: "Writer", unit_id: str, *,
              prune: Callable[[str], object] | None = None) -> str:
    """Move the L2 unit or HomeAgent document ``unit_id`` into this agent's L1 (one rename;
    a HomeAgent document, empty or not, becomes a unit on the way), pinned through the turn;
    returns its unit id. NotFound when no such unit is in documents/ (or it is another
    agent's private unit); a unit already in this L1 is returned as it is."""
    check_name(unit_id)
    if os.path.isdir(mem.store.unit_dir(mem.l1, unit_id)):
        return unit_id
    with mem.store.locked():
        src = mem.store.unit_dir("documents", unit_id)
        legacy = ""
        if os.path.isdir(src):
            if not mem.sees(read_manifest(src, expect_id=unit_id)):
                raise NotFound(f"unit {unit_id!r} not found in {mem.root}/documents")
        else:
            legacy = legacy_file_of(mem.root, unit_id) or ""
            if not legacy:
                raise NotFound(f"unit {unit_id!r} not found in {mem.root}/documents (neither a "
                               "unit nor a HomeAgent document)")
        uid = _recall_hit(mem, unit_id, legacy)
        if uid is None:
            raise NotFound(f"HomeAgent document {legacy} is already a unit: "
                           f"{legacy_id(legacy)}")
    _after(mem, [uid], prune, "")
    return uid


def _after(mem: "Writer", moved: list[str], prune: Callable[[str], object] | None,
           query: str) -> None:
    """Pin what a recall moved and prune a full L1: maintenance, never the recall's failure."""
    prune = prune or partial(prune_l1, mem)
    after_write(mem.store, lambda: _pin(mem, moved),
                lambda: prune(query=query) if mem.auto_prune else None)


def _recall_hit(mem: "Writer", unit_id: str, legacy_file: str) -> str | None:
    """Move one L2 unit (or, ``legacy_file``, a HomeAgent document) into L1; its id, or
    None when another process took it first."""
    with mem.store.locked():
        if legacy_file:
            uid = recall_legacy(mem, legacy_file, mem.l1)
            mem._indexed(unit_id, "documents", added=False)
            return uid or None
        src = mem.store.unit_dir("documents", unit_id)
        if not os.path.isdir(src):
            return None  # another process recalled it first
        fsops.utime(src, (Timestamp.now().ns,) * 2)  # arrival in L1
        if mem.store.sync:
            fsops.fsync_dir(src)
        mem.store.move(unit_id, "documents", mem.l1)
        mem._indexed(unit_id, "documents", added=False)
        return unit_id


def _moved_anyway(mem: "Writer", unit_id: str) -> str | None:
    """After a failed move: the unit id when its rename happened all the same (a parent
    fsync failed after it): it is in L1 and the index is told."""
    if not os.path.isdir(mem.store.unit_dir(mem.l1, unit_id)):
        return None
    mem._indexed(unit_id, "documents", added=False)
    return unit_id


def _pin(mem: "Writer", moved: list[str]) -> None:
    """Pin recalled units through the rest of this turn (fsmem.store.pins)."""
    with mem.store.locked():
        pin_units(mem.store, moved, mem.l1)   # never evicted before the next turn
