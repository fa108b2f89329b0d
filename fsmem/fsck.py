"""``fsck``: the store's own consistency check, and the oracle of every crash and stress test."""

from __future__ import annotations

import os
import shutil
import stat
from typing import Literal

import msgspec

from .errors import FsmemError
from .model import check_name
from .store import LAYERS, Store
from .unit import verify_unit

__all__ = ["Finding", "fsck", "FindingKind"]

FindingKind = Literal[
    "damaged-unit", "unexpected-entry", "duplicate-unit", "duplicate-event", "stray-staging",
    "pending-journal", "legacy",
]
# Files a HomeAgent memory directory keeps inside documents/ (read by the legacy reader).
_LEGACY_SUFFIXES = (".json",)


class Finding(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One problem: what kind, where (a path), and why."""

    kind: str
    path: str
    detail: str
    unit: str = ""
    layer: str = ""
    fixed: str = ""

    def __str__(self) -> str:
        extra = f" [{self.fixed}]" if self.fixed else ""
        return f"{self.kind}: {self.path}: {self.detail}{extra}"


def fsck(store: Store, *, fix: bool = False, read_data: bool = True) -> list[Finding]:
    """Check every unit in every layer and the .fsmem area; ``fix`` quarantines what is damaged.

    With ``fix`` the writer lock is held for the whole check, so recovery has run first and
    nothing changes underneath. Without it, the check is read-only and lock-free.
    """
    if fix:
        with store.locked():
            findings = _check(store, read_data)
            for finding in findings:
                _repair(store, finding)
            return findings
    return _check(store, read_data)


def _check(store: Store, read_data: bool) -> list[Finding]:
    findings: list[Finding] = []
    holders: dict[str, list[tuple[str, str]]] = {}
    event_home: dict[str, tuple[str, str]] = {}
    for layer in LAYERS:
        base = store.layer_dir(layer)
        for entry in sorted(os.scandir(base), key=lambda e: e.name):
            path = entry.path
            problem = _entry_problem(entry, layer)
            if problem == "legacy":
                continue
            if problem:
                findings.append(Finding(kind="unexpected-entry", path=path, detail=problem,
                                        layer=layer))
                continue
            holders.setdefault(entry.name, []).append((layer, path))
            manifest, problems = verify_unit(path, read_data=read_data)
            for p in problems:
                kind = "unexpected-entry" if p.endswith(("unexpected entry", "unexpected symlink")) \
                    else "damaged-unit"
                findings.append(Finding(kind=kind, path=path, detail=p, unit=entry.name,
                                        layer=layer))
            if manifest is None or problems:
                continue
            for ev in manifest.events:
                if ev.id in event_home:
                    other = event_home[ev.id]
                    findings.append(Finding(kind="duplicate-event", path=path, unit=entry.name,
                                            layer=layer, detail=f"event {ev.id} also in "
                                            f"{other[0]}/{other[1]}"))
                else:
                    event_home[ev.id] = (layer, entry.name)
    for unit_id, places in holders.items():
        if len(places) > 1:
            where = ", ".join(layer for layer, _ in places)
            for layer, path in places[1:]:
                findings.append(Finding(kind="duplicate-unit", path=path, unit=unit_id,
                                        layer=layer, detail=f"unit id present in {where}"))
    findings.extend(_check_meta(store))
    from .legacy import legacy_problems
    for path, problem in legacy_problems(store.root):
        findings.append(Finding(kind="legacy", path=path, detail=problem, layer="documents"))
    return findings


def _entry_problem(entry: os.DirEntry, layer: str) -> str:
    st = entry.stat(follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        return "symlink where a unit directory should be"
    if not stat.S_ISDIR(st.st_mode):
        if layer == "documents" and entry.name.endswith(_LEGACY_SUFFIXES):
            return "legacy"
        return "plain file where a unit directory should be"
    try:
        check_name(entry.name)
    except FsmemError:
        return "directory name is not a valid unit id"
    if not os.listdir(entry.path):
        return "empty directory (no manifest)"
    return ""


def _check_meta(store: Store) -> list[Finding]:
    findings: list[Finding] = []
    lock_free = store.try_lock_free()
    pending = store._pending_staged()
    for name in sorted(os.listdir(store.staging)):
        if name in pending:
            continue
        if store._staging_is_dead(name):
            findings.append(Finding(kind="stray-staging", path=os.path.join(store.staging, name),
                                    detail="left by a writer that is gone"))
    if lock_free and store._lock_depth == 0:
        for name in sorted(os.listdir(store.journal_dir)):
            findings.append(Finding(kind="pending-journal",
                                    path=os.path.join(store.journal_dir, name),
                                    detail="an interrupted change; the next writer completes it"))
    return findings


def _repair(store: Store, finding: Finding) -> None:
    path = finding.path
    if not os.path.lexists(path):
        finding.fixed = "already gone"
        return
    if finding.kind == "stray-staging":
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
        finding.fixed = "removed"
        return
    if finding.kind == "unexpected-entry" and finding.unit and ": unexpected" in finding.detail:
        name = finding.detail.split(":", 1)[0]
        inner = os.path.join(path, name)
        if os.path.lexists(inner):
            finding.fixed = "moved to " + store.quarantine(inner, f"{finding.unit}-{name}")
        return
    if finding.kind in ("pending-journal", "duplicate-event"):
        return  # a readable unit is never quarantined for a finding about one event in it
    if finding.kind == "legacy":
        if "missing from the media store" in finding.detail or "not read by" in finding.detail:
            return  # nothing fsmem can restore or needs to move; the file stays as it is
        finding.fixed = "moved to " + store.quarantine(path, "legacy-" + os.path.basename(path))
        return
    label = finding.unit or os.path.basename(path)
    finding.fixed = "moved to " + store.quarantine(path, f"{finding.layer}-{label}")
