"""``fsck``: the store's own consistency check, and the oracle of every crash and stress test."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Literal

import msgspec

from fsmem.format.errors import FsmemError
from fsmem.format.hosts import LockRecord, host_id, read_lock_record, record_alive
from fsmem.format.layout import Layout, Vanished, View, read_small, writer_alive
from fsmem.format.model import check_name
from fsmem.format.unit import is_stray, verify_unit

if TYPE_CHECKING:   # a plain check (a reader) never loads the writer's modules
    from fsmem.store.store import Store

__all__ = ["Finding", "fsck", "fsck_fix", "FindingKind", "repair_marker", "lock_holder",
           "Holder"]

FindingKind = Literal[
    "damaged-unit", "unexpected-entry", "duplicate-unit", "duplicate-event", "stray-staging",
    "pending-journal", "legacy", "legacy-unreadable", "legacy-rewritten", "media-missing",
    "quarantined-foreign", "graph-damaged", "graph-dangling", "bad-marker", "derived-vector",
    "update-chain", "in-progress", "partial-snapshot", "damaged-file",
]
# Files a HomeAgent memory directory keeps inside documents/ (read by the legacy reader).
_LEGACY_SUFFIXES = (".json",)


class Finding(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One problem: what kind, where (a path), and why; after ``fsck --fix``, what was done
    (``fixed``) or why it was left as it is (``left``)."""

    kind: str
    path: str
    detail: str
    unit: str = ""
    layer: str = ""
    fixed: str = ""
    left: str = ""

    def __str__(self) -> str:
        extra = f" [{self.fixed}]" if self.fixed else f" [left: {self.left}]" if self.left else ""
        return f"{self.kind}: {self.path}: {self.detail}{extra}"


def fsck(layout: Layout, *, read_data: bool = True) -> list[Finding]:
    """Check every unit in every layer and the .fsmem area, read-only and lock-free: nothing
    is repaired, created or written. A journaled change that a live writer is applying is
    checked in its after state; one left by a dead writer is a ``pending-journal`` finding."""
    # lazy: start-up, loaded only when used
    from fsmem.memory.fsck_checks import check_files, check_partial
    partial = check_partial(layout)
    if partial:   # an interrupted snapshot: one finding, not one per unit it lacks
        return [Finding(kind=k, path=p, detail=d) for k, p, d in partial]

    def check(view: View) -> list[Finding]:
        return _check(layout, view, read_data)
    return layout.consistent(check) + [Finding(kind=k, path=p, detail=d)
                                       for k, p, d in check_files(layout)]


def fsck_fix(store: Store, *, read_data: bool = True,
             before: list[Finding] | None = None) -> list[Finding]:
    """Report, then repair under the writer lock: recovery completes pending journals,
    removes dead staging and settles duplicates (those findings are marked as such), and
    what is still damaged is quarantined. ``before``: the findings of a read-only check
    taken before the store was opened for writing (opening runs recovery)."""
    if before is None:
        before = fsck(store, read_data=read_data)
    with store.locked():        # taking the lock runs recovery
        after = fsck(store, read_data=read_data)
        for finding in after:
            _repair(store, finding)
    still = {(f.kind, f.path, f.detail) for f in after}
    settled = [f for f in before if (f.kind, f.path, f.detail) not in still]
    for f in settled:
        f.fixed = {"pending-journal": "completed by recovery",
                   "stray-staging": "removed"}.get(f.kind, "settled by recovery")
    return settled + after


def _check(layout: Layout, view: View, read_data: bool) -> list[Finding]:
    findings: list[Finding] = []
    holders: dict[str, list[tuple[str, str]]] = {}
    updates: dict[str, tuple[str, str, str]] = {}   # unit -> (the unit it updates, layer, path)
    event_home: dict[str, tuple[str, str]] = {}
    for layer in layout.layers():
        findings += _odd_entries(layout, layer)
        for unit_id, path in view.layer(layer):
            holders.setdefault(unit_id, []).append((layer, path))
            manifest, problems = verify_unit(path, read_data=read_data, expect_id=unit_id)
            if problems and layout.vanished(path):
                raise Vanished(path)
            for p in problems:
                kind = "unexpected-entry" if is_stray(p) else "damaged-unit"
                findings.append(Finding(kind=kind, path=path, detail=p, unit=unit_id,
                                        layer=layer))
            if manifest is None:
                continue
            if manifest.meta.get("supersedes"):
                updates[unit_id] = (manifest.meta["supersedes"], layer, path)
            for ev in manifest.events:
                for ref in ev.blocks:
                    if ref.absent:
                        findings.append(Finding(
                            kind="media-missing", path=path, unit=unit_id, layer=layer,
                            detail=f"block {ref.legacy_id or ref.digest[:16]} ({ref.mime}, "
                            f"{ref.size} bytes, sha256 {ref.sha256}) is a record only: its "
                            "media file was missing from HomeAgent's media store when it was "
                            "adopted; put the file back there and recall again to keep it"))
                if ev.id in event_home:
                    other = event_home[ev.id]
                    findings.append(Finding(kind="duplicate-event", path=path, unit=unit_id,
                                            layer=layer, detail=f"event {ev.id} also in "
                                            f"{other[0]}/{other[1]}"))
                else:
                    event_home[ev.id] = (layer, unit_id)
    for unit_id, places in holders.items():
        if len(places) > 1:
            where = ", ".join(layer for layer, _ in places)
            for layer, path in places[1:]:
                findings.append(Finding(kind="duplicate-unit", path=path, unit=unit_id,
                                        layer=layer, detail=f"unit id present in {where}"))
    findings.extend(_check_updates(updates))
    findings.extend(_check_meta(layout, view))
    findings.extend(_check_foreign(layout))
    # lazy: start-up, loaded only when used (+fcntl)
    from fsmem.memory.fsck_checks import check_graph
    findings.extend(Finding(kind=k, path=p, detail=d) for k, p, d in check_graph(layout.root))
    from fsmem.homeagent.report import legacy_findings  # lazy: start-up, loaded only when used
    for kind, path, problem in legacy_findings(layout.root):
        findings.append(Finding(kind=kind, path=path, detail=problem, layer="documents"))
    findings.extend(_check_rewritten(layout))
    return findings


def _check_updates(updates: dict[str, tuple[str, str, str]]) -> list[Finding]:
    """The chain of updates (``meta["supersedes"]``): each link names a unit id, no unit is
    updated twice (two current versions of one memory), no chain loops. A link to a unit no
    longer in the store is history removed by hand (or left out of a partial export): fine."""
    out: list[Finding] = []
    by_old: dict[str, list[str]] = {}
    for new, (old, layer, path) in sorted(updates.items()):
        try:
            check_name(old)
        except FsmemError:
            out.append(Finding(kind="update-chain", path=path, unit=new, layer=layer,
                               detail=f"meta supersedes {old!r} is not a unit id"))
            continue
        by_old.setdefault(old, []).append(new)
    for old, news in sorted(by_old.items()):
        for new in news[1:]:
            _, layer, path = updates[new]
            out.append(Finding(kind="update-chain", path=path, unit=new, layer=layer,
                               detail=f"unit {old} is updated twice ({', '.join(news)}): "
                               "search shows each as current; remove the one not wanted"))
    for start in sorted(updates):
        seen, cur = [start], updates[start][0]
        while cur in updates and cur not in seen:
            seen.append(cur)
            cur = updates[cur][0]
        if cur == start:   # reported once, at the smallest id of the loop
            if start == min(seen):
                _, layer, path = updates[start]
                out.append(Finding(kind="update-chain", path=path, unit=start, layer=layer,
                                   detail="the updates loop: " + " -> ".join([*seen, start])))
    return out


def _check_rewritten(layout: Layout) -> list[Finding]:
    """HomeAgent documents written again after fsmem made a unit of them (side by side):
    both copies kept and named (docs/FORMAT.md §9, "Running side by side")."""
    # lazy: start-up, loaded only when used
    from fsmem.homeagent.documents import rewritten_documents
    out = []
    for name, st in rewritten_documents(layout):
        path = os.path.join(layout.root, "documents", name)
        out.append(Finding(
            kind="legacy-rewritten", path=path, unit=st.prev, layer="documents",
            detail=f"HomeAgent wrote this document again after fsmem made unit {st.prev} of "
            f"it; both are kept: search finds the new text as {st.unit_id} (`fsmem show "
            f"{st.unit_id}` prints this file, `fsmem show {st.prev}` fsmem's unit); a "
            f"recall makes it unit {st.unit_id}, an update of {st.prev}, which stays as "
            "history"))
    return out


def _odd_entries(layout: Layout, layer: str) -> list[Finding]:
    """Entries of a layer directory that are not unit directories (legacy JSON aside)."""
    out = []
    try:
        entries = sorted(os.scandir(layout.layer_dir(layer)), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return out
    for entry in entries:
        try:
            problem = _entry_problem(entry, layer)
        except FileNotFoundError:
            continue   # moved while we looked
        if problem and problem != "legacy":
            out.append(Finding(kind="unexpected-entry", path=entry.path, detail=problem,
                               layer=layer))
    return out


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


class Holder(msgspec.Struct, kw_only=True):
    """The writer lock's holder as its lock file records it (format 5), and whether it is
    alive: on this host its process (pid and start time) or /proc/locks, on another host
    that host's lease (``fsmem.format.hosts``)."""

    record: LockRecord
    alive: bool
    local: bool

    def __str__(self) -> str:
        r = self.record
        where = "this host" if self.local else f"host {r.host}"
        state = "alive" if self.alive else "gone"
        how = "" if self.local else (", its lease fresh" if self.alive else
                                     ", its lease expired")
        return f"pid {r.pid} on {where} ({r.hostname or '?'}), {state}{how}"


def lock_holder(layout: Layout) -> Holder | None:
    """Who holds the writer lock, from ``.fsmem/lock`` (None when no writer holds it, or the
    holder recorded nothing: an fsmem before format 5). Read-only: no lock is taken."""
    try:
        record = read_lock_record(read_small(layout.lock_path, 4096))
    except (OSError, FsmemError):
        return None
    if record is None:
        return None
    local = record.host == host_id()
    alive = record_alive(record, layout.leases_dir)
    if local and not alive:   # its pid gone; a lock /proc/locks still shows is alive
        alive = bool(writer_alive(layout.lock_path))
    return Holder(record=record, alive=alive, local=local)


def _check_meta(layout: Layout, view: View) -> list[Finding]:
    findings: list[Finding] = []
    holder = lock_holder(layout)
    # A record naming another host's live writer wins over /proc/locks, which on a shared
    # filesystem shows this host's locks only (and none at all of FUSE or network ones).
    remote = holder is not None and holder.alive and not holder.local
    live_writer = not remote and (writer_alive(layout.lock_path) or (
        holder is not None and holder.alive))
    pending = {p[0] for e in view.pending for p in e.publish}
    try:
        staged = sorted(os.listdir(layout.staging))
    except FileNotFoundError:
        staged = []
    for name in staged:
        if name not in pending and layout.staging_is_dead(name):
            findings.append(Finding(kind="stray-staging", path=os.path.join(layout.staging, name),
                                    detail="left by a writer that is gone"))
    if os.path.isdir(os.path.join(layout.meta, "vectors")):   # none: nothing to check
        # lazy: start-up, loaded only when used (+numpy, ctypes, queue)
        from fsmem.search.vector_cache import (
            check_cache,  # (and numpy stays unloaded: CLI start-up)
        )
        findings.extend(Finding(kind="derived-vector", path=p, detail=d)
                        for p, d in check_cache(layout.meta))
    if live_writer:
        return findings   # its journal entries are being applied right now
    _, bad = layout.pending_journals()
    for entry in view.pending:
        path = os.path.join(layout.journal_dir, f"{entry.id}.json")
        if remote:   # another host's writer, applying it
            findings.append(Finding(kind="in-progress", path=path, detail=(
                f"a {entry.op} in progress on host {holder.record.host} (lock held by "
                f"{holder}); that writer completes it")))
            continue
        gone = f" (the lock's last holder, {holder}, left it)" if holder is not None else ""
        findings.append(Finding(kind="pending-journal", path=path, detail=(
            f"an interrupted {entry.op}{gone}; the next writer completes it")))
    for path, problem in bad:
        findings.append(Finding(kind="pending-journal", path=path,
                                detail=f"undecodable ({problem}); fsck --fix quarantines it"))
    return findings


def _repair(store: Store, finding: Finding) -> None:
    import shutil  # lazy: start-up, loaded only when used (+shutil, zlib)
    path = finding.path
    if not os.path.lexists(path):
        finding.fixed = "already gone"
        return
    if finding.kind == "derived-vector":   # derived data: the writer refills the cache
        os.unlink(path)
        finding.fixed = "removed"
        return
    if finding.kind == "damaged-file":   # derived: set aside, the writers rebuild it
        from fsmem.store.derived import make_room  # lazy: start-up, loaded only when used
        finding.fixed = make_room(path, store.meta) or "already a regular file"
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
    left = _LEFT.get(finding.kind)
    if left is None and finding.layer == "documents" and not finding.unit \
            and not os.path.isdir(path):
        left = _LEFT["legacy"]   # a file in HomeAgent's documents/: fsmem wrote none there
    if left is not None:
        finding.left = left
        return
    label = finding.unit or os.path.basename(path)
    finding.fixed = "moved to " + store.quarantine(path, f"{finding.layer}-{label}")


# What --fix leaves, and why: HomeAgent's files (and any file in its documents/: fsmem writes
# only unit directories there) are never moved; the user's, and graph.db, neither.
_LEFT = {
    "legacy": "HomeAgent's file: fsck never moves, renames or deletes it",
    "legacy-unreadable": "HomeAgent's file: fsck never moves, renames or deletes it",
    "legacy-rewritten": "HomeAgent's file, and fsmem's unit of its older version: both kept",
    "media-missing": "the unit is whole: its record of the block is all there is to keep",
    "pending-journal": "recovery did not settle it; the next writer retries",
    "in-progress": "a live writer on another host is applying it",
    "duplicate-event": "both units are readable: a unit is never quarantined for one event",
    "quarantined-foreign": "the files are the user's: move out what is yours, then delete it",
    "graph-damaged": "fsck never rewrites graph.db: restore it from a snapshot",
    "graph-dangling": "fsck never rewrites graph.db",
    "update-chain": "every unit of the chain is whole: remove the version not wanted (fsmem rm)",
    "partial-snapshot": "an interrupted snapshot: delete the directory, take the snapshot again",
}


def _check_foreign(layout: Layout) -> list[Finding]:
    """Units that a discard (prune, remove) kept whole because they held files fsmem did not
    write: they wait in .fsmem/quarantine/ for the user, nothing in them was deleted."""
    try:
        names = sorted(os.listdir(layout.quarantine_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    if not names:   # the usual case: a plain check never loads the writer's modules
        return []
    # lazy: start-up, loaded only when used (+ctypes, fcntl)
    from fsmem.store.store import FOREIGN_LABEL
    return [Finding(kind="quarantined-foreign", path=os.path.join(layout.quarantine_dir, n),
                    detail="a discarded unit held files fsmem did not write; kept whole "
                    "(move out what is yours, then delete the directory)")
            for n in names if f"-{FOREIGN_LABEL}" in n]


def repair_marker(root: str) -> Finding | None:
    """``fsck --fix`` for a damaged ``.fsmem/marker.json``: None when it reads; else a
    ``bad-marker`` finding, fixed (the damaged file moved to quarantine, a new marker
    written) only when the directory is recognisably an fsmem store (its .fsmem/staging and
    .fsmem/journal and a layer directory exist) and no writer holds the lock."""
    # lazy: start-up, loaded only when used (+fcntl)
    from fsmem.memory.fsck_checks import rewrite_marker
    layout = Layout(root)
    if not os.path.lexists(layout.marker_path):
        return None
    try:
        layout.read_marker()
        return None
    except FsmemError as exc:
        if "newer" in str(exc):
            return Finding(kind="bad-marker", path=layout.marker_path,
                           detail=f"{exc}; not rewritten")
        problem = str(exc)
    finding = Finding(kind="bad-marker", path=layout.marker_path, detail=problem)
    finding.fixed = rewrite_marker(layout)
    return finding
