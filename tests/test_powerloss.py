"""Power loss: every crash state that ext4 (data=ordered) may leave, checked after recovery.

A SIGKILL keeps the page cache, so the crash-point sweeps prove nothing about durability. Here
the real code runs with ``fsmem.format.fsops`` recording every mutating call (open/create, write with
its bytes, fsync, fsync_dir, syncfs, rename, link, unlink, mkdir, rmdir, utime). A crash state
at point ``k`` replays the first ``k`` calls onto a copy of the store as it was before the run:

- file data written before ``k`` persists if the file was fsync'd (or the filesystem syncfs'd)
  after the write and before ``k``; otherwise it may be lost (the write is not replayed);
- a directory entry change (create, mkdir, rename, link, unlink, rmdir) persists if its parent
  directory (a rename's target directory) was fsync'd or the filesystem syncfs'd after it and
  before ``k``; a created file's own fsync also persists its entry (ext4 commits the journal);
  otherwise it may or may not have happened. A rename whose source directory alone was
  flushed surely took the old name away, but the new name may be missing (the object is lost).

Each optional change is decided by a chooser: all lost, all kept (the page cache as a SIGKILL
leaves it) and seeded random mixes. On each state the real Memory reopens it (recovery runs) and
the invariants are checked: every acknowledged operation (returned before ``k``) intact, every
event in at most one layer (acknowledged ones in exactly one), fsck clean. The default suite
samples crash points with a fixed seed; FSMEM_STRESS=1 takes every point and more mixes.
"""

from __future__ import annotations

import os
import random
import shutil
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest

from conftest import distillable, full_context
from fsmem import Event, Memory
from fsmem.format import fsops as _fsops

STRESS = os.environ.get("FSMEM_STRESS") == "1"
ENTRY_OPS = ("open", "mkdir", "rename", "link", "unlink", "rmdir")


# -- recording ------------------------------------------------------------------------------
def record(run: Callable[[], None]) -> list[tuple]:
    """Run ``run`` with the recorder on; returns the log."""
    log: list[tuple] = []
    _fsops.set_recorder(log)
    try:
        run()
    finally:
        _fsops.set_recorder(None)
    return log


def ack(label: str) -> None:
    _fsops.record_mark(label)


# -- the crash-state model --------------------------------------------------------------------
def _entry_dir(op: tuple) -> str | None:
    """The directory whose fsync makes this entry change durable (None: not an entry op)."""
    kind = op[0]
    if kind == "open":
        return os.path.dirname(op[2]) if op[3] else None
    if kind in ("rename", "link"):
        return os.path.dirname(op[2])
    if kind in ("mkdir", "unlink", "rmdir"):
        return os.path.dirname(op[1])
    return None


def durable_set(log: list[tuple], k: int, half: set[int] | None = None) -> set[int]:
    """Indices (< k) of the calls whose effect the model says survives a crash at ``k``: a
    flush covers what was done before it *started* (a wave's entries, logged when it
    completed, carry their start position) and counts once it completed (before ``k``).
    Renames whose source directory was flushed but not their target's go into ``half``: the
    old name is surely gone, the new one may or may not be there."""
    half = set() if half is None else half
    flushes: list[tuple[int, str, object]] = []   # (start, kind, target) completed before k
    for j in range(k):
        op = log[j]
        if op[0] == "syncfs":
            flushes.append((j, "syncfs", None))
        elif op[0] in ("fsync", "fsync_dir"):
            flushes.append((op[2] if len(op) > 2 else j, op[0], op[1]))
    durable: set[int] = set()
    for j in range(k):
        op = log[j]
        kind = op[0]
        after = [(fk, t) for s, fk, t in flushes if s > j]
        everything = any(fk == "syncfs" for fk, _t in after)
        synced_dirs = {t for fk, t in after if fk == "fsync_dir"}
        synced_files = {t for fk, t in after if fk == "fsync"}
        if kind in ("syncfs", "fsync", "fsync_dir"):
            continue
        if kind == "write":
            if everything or op[1] in synced_files:
                durable.add(j)
        elif kind in ENTRY_OPS:
            parent = _entry_dir(op)
            if parent is None or everything or parent in synced_dirs or \
                    (kind == "open" and j in synced_files):
                durable.add(j)
            elif kind == "rename" and os.path.dirname(op[1]) in synced_dirs:
                half.add(j)
        else:
            durable.add(j)                 # utime, marks
    return durable


def build_state(pre: Path, live: Path, log: list[tuple], k: int, keep: Callable[[int], bool],
                dst: Path) -> None:
    """A copy of ``pre`` with the calls the model keeps for a crash at ``k`` replayed on it."""
    shutil.copytree(pre, dst, symlinks=True)
    src_root, dst_root = str(live), str(dst)

    def at(path: str) -> str | None:
        if path == src_root or path.startswith(src_root + os.sep):
            return dst_root + path[len(src_root):]
        return None
    half: set[int] = set()
    durable = durable_set(log, k, half)
    kept_open: dict[int, tuple[str, bool]] = {}
    offsets: dict[int, int] = {}
    for j in range(k):
        op = log[j]
        if op[0] in ("mark", "fsync", "fsync_dir", "syncfs"):
            continue
        if j not in durable and not keep(j):
            if op[0] == "open":
                kept_open[j] = (at(op[2]) or "", op[4])   # the file may exist from before
            elif j in half and at(op[1]):
                _vanish(at(op[1]))      # the source entry is gone, the target never came
            continue
        try:
            _apply(op, j, at, kept_open, offsets)
        except OSError:
            pass    # its precondition was lost (e.g. the parent directory never persisted)


def _vanish(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _apply(op: tuple, j: int, at, kept_open: dict, offsets: dict) -> None:
    kind = op[0]
    paths = [at(p) for p in op[1:] if isinstance(p, str)]
    if kind != "write" and any(p is None for p in paths):
        return
    if kind == "open":
        kept_open[j] = (paths[0], op[4])
        if op[3]:
            os.close(os.open(paths[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    elif kind == "write":
        path, append = kept_open.get(op[1], ("", False))
        if not path:
            return
        fd = os.open(path, os.O_WRONLY | (os.O_APPEND if append else 0))
        try:
            if append:
                os.write(fd, op[2])
            else:
                os.pwrite(fd, op[2], offsets.get(op[1], 0))
        finally:
            os.close(fd)
        offsets[op[1]] = offsets.get(op[1], 0) + len(op[2])
    elif kind == "rename":
        os.rename(paths[0], paths[1])
    elif kind == "link":
        os.link(paths[0], paths[1])
    elif kind == "unlink":
        os.unlink(paths[0])
    elif kind == "mkdir":
        os.mkdir(paths[0])
    elif kind == "rmdir":
        os.rmdir(paths[0])
    elif kind == "utime":
        os.utime(paths[0], ns=op[2])


def choosers(seed: int, n_random: int) -> list[tuple[str, Callable[[int], bool]]]:
    out: list[tuple[str, Callable[[int], bool]]] = [("all lost", lambda j: False),
                                                    ("all kept", lambda j: True)]
    for i in range(n_random):
        rng = random.Random(seed * 1000 + i)
        bits: dict[int, bool] = {}
        out.append((f"mix {i}", lambda j, b=bits, r=rng: b.setdefault(j, r.random() < 0.5)))
    return out


def crash_points(log: list[tuple], budget: int, seed: int) -> list[int]:
    """Every point in stress mode; else the ends, the points right after each flush or
    acknowledgement (where durability claims are made) and a seeded sample of the rest."""
    n = len(log)
    if STRESS:
        return list(range(n + 1))
    key = {n}
    key.update(j + 1 for j, op in enumerate(log) if op[0] in ("mark", "syncfs", "fsync_dir"))
    key.update(j for j, op in enumerate(log) if op[0] == "mark")
    rest = sorted(set(range(n + 1)) - key)
    rng = random.Random(seed)
    extra = rng.sample(rest, min(len(rest), max(0, budget - len(key))))
    points = sorted(key | set(extra))
    if len(points) > budget:
        points = sorted(rng.sample(points[:-1], budget - 1) + [n])
    return points


# -- invariants -------------------------------------------------------------------------------
def events_by_layer(root: Path) -> tuple[Counter, dict[str, str]]:
    mem = Memory.open(root, auto_prune=False)
    seen: Counter = Counter()
    where: dict[str, str] = {}
    for layer in ("context", "documents", "stablemem"):
        for unit in mem.units(layer):
            where[unit] = layer
            for ev in mem.document(unit).events:
                seen[ev.input] += 1
    return seen, where


def check_states(tmp: Path, pre: Path, live: Path, log: list[tuple],
                 acked_at: Callable[[list[tuple], int], set[str]], *, budget: int = 12,
                 seed: int = 1, expect_units: Callable[[list[tuple], int], dict[str, str]]
                 = lambda log, k: {}, points: list[int] | None = None) -> int:
    """Build and check the crash states (at ``points``, default a sample: ``crash_points``);
    returns how many were checked."""
    n_random = 6 if STRESS else 1
    checked = 0
    for k in crash_points(log, budget, seed) if points is None else points:
        for name, keep in choosers(seed + k, n_random):
            state = tmp / f"state-{k}-{checked}"
            build_state(pre, live, log, k, keep, state)
            label = f"crash at call {k}/{len(log)} ({log[k - 1][0] if k else 'start'}), {name}"
            try:
                seen, where = events_by_layer(state)    # reopening runs recovery
            except Exception as exc:
                raise AssertionError(f"{label}: the store cannot be read: {exc!r}") from exc
            dup = {e: c for e, c in seen.items() if c > 1}
            assert not dup, f"{label}: events in two places: {dup}"
            lost = acked_at(log, k) - set(seen)
            assert not lost, f"{label}: acknowledged events lost: {sorted(lost)}"
            for unit, layer in expect_units(log, k).items():
                assert where.get(unit) == layer, f"{label}: {unit} not in {layer}"
            assert Memory.open(state, auto_prune=False).fsck() == [], label
            shutil.rmtree(state)
            checked += 1
    return checked


def acked_inputs(base: set[str]) -> Callable[[list[tuple], int], set[str]]:
    """Acknowledged events at k: ``base`` plus those named by "ack:<input>" marks before k."""
    def acked(log: list[tuple], k: int) -> set[str]:
        return base | {op[1][4:] for op in log[:k] if op[0] == "mark" and op[1].startswith("ack:")}
    return acked


# -- scenarios --------------------------------------------------------------------------------
def _prepare(tmp: Path, setup: Callable[[Path], None]) -> tuple[Path, Path]:
    pre, live = tmp / "pre", tmp / "live"
    setup(pre)
    shutil.copytree(pre, live, symlinks=True)
    return pre, live


@pytest.fixture(params=["batch", "syncfs", "fsync"])
def strategy(request, monkeypatch) -> str:
    """Every sync strategy (the per-file fsyncs in turn only exist under "fsync", the waves
    only under "batch"); scenarios without the fixture run the default on this kernel."""
    monkeypatch.setenv("FSMEM_SYNC", request.param)
    return request.param


def test_commit_and_append_survive_power_loss(tmp_path, strategy):
    pre, live = _prepare(tmp_path, lambda p: Memory.open(p, auto_prune=False).close())

    def run() -> None:
        mem = Memory.open(live, auto_prune=False)
        mem.commit_events([Event(source="qq", input="commit one", response="r1"),
                           Event(source="qq", input="commit two", response="r2")])
        ack("ack:commit one")
        ack("ack:commit two")
        mem.append(Event(source="qq", input="append three", response="r3"))
        ack("ack:append three")
    log = record(run)
    assert any(op[0] == "mark" for op in log)
    assert check_states(tmp_path, pre, live, log, acked_inputs(set()), budget=8) >= 8


def test_append_with_prune_survives_power_loss(tmp_path, strategy):
    base: set[str] = set()
    pre, live = _prepare(tmp_path, lambda p: base.update(full_context(p)))

    def run() -> None:   # each append that prunes is one journal entry, whose deletion the
        # next one's barrier flushes: three appends, two of them pruning
        mem = Memory.open(live, context_capacity=4, context_protected=1, auto_prune=True)
        for text in ("topic alpha new", "topic gamma later", "topic alpha last"):
            mem.append(Event(source="qq", input=text, response="fresh"))
            ack(f"ack:{text}")
    log = record(run)
    assert sum(op[0] == "rename" and "/journal/" in op[2] for op in log) == 2
    assert any(op[0] == "rename" and os.path.basename(os.path.dirname(op[2])) == "documents"
               for op in log), "the append did not prune"   # (removed L1 units wait in trash)
    assert check_states(tmp_path, pre, live, log, acked_inputs(base), budget=12) >= 12
    # Right after each flush of journal/ (under "batch" the next append's first wave makes
    # the previous entry's deletion durable): the entry is gone for good, so whatever it
    # removed must be durable by then too, not left to a re-application.
    flushed = [j + 1 for j, op in enumerate(log) if op[0] == "fsync_dir"
               and op[1].endswith("/journal")]
    assert check_states(tmp_path, pre, live, log, acked_inputs(base),
                        points=flushed) == len(flushed) * (8 if STRESS else 3)   # (syncfs: none)


def test_an_explicit_prune_survives_power_loss(tmp_path, strategy):
    """``Memory.prune`` on its own entry (no remainder units, so the entry publishes into
    documents/ only): the L1 originals it removes must be durable before its entry goes."""
    base: set[str] = set()
    pre, live = _prepare(tmp_path, lambda p: base.update(full_context(p)))

    def run() -> None:
        mem = Memory.open(live, context_capacity=4, context_protected=1, auto_prune=False)
        mem.append(Event(source="qq", input="topic alpha new", response="fresh"))
        ack("ack:topic alpha new")
        assert mem.prune("topic alpha")
    log = record(run)
    entry_gone = [j + 1 for j, op in enumerate(log) if op[0] in ("fsync_dir", "syncfs")]
    assert check_states(tmp_path, pre, live, log, acked_inputs(base), budget=6,
                        points=sorted(set(entry_gone[-3:]))) >= 1


def test_a_pruning_turn_survives_power_loss(tmp_path, strategy):
    """A turn (input and response) whose policy prunes: its events and the prune are one
    journal entry; every crash state holds both events or neither, and nothing of L1 lost."""
    from fsmem.memory.turn import InjectOptions
    base: set[str] = set()
    pre, live = _prepare(tmp_path, lambda p: base.update(full_context(p)))

    def run() -> None:
        mem = Memory.open(live, context_capacity=4, context_protected=2, auto_prune=True)
        mem.turn(Event(source="qq", input="topic alpha question"),
                 Event(source="qq", input="topic alpha answer"),
                 options=InjectOptions(context_policy="prune"))
        ack("ack:topic alpha question")
        ack("ack:topic alpha answer")
    log = record(run)
    entry = next(j for j, op in enumerate(log) if op[0] == "rename" and "/journal/" in op[2])
    assert sum(op[0] == "rename" and "/journal/" in op[2] for op in log) == 1
    assert check_states(tmp_path, pre, live, log, acked_inputs(base), budget=8) >= 8
    # both events or neither: around the entry's barrier, where the turn is decided
    for k in range(entry, min(len(log), entry + 12), 3):
        for name, keep in choosers(3 + k, 1):
            state = tmp_path / f"pair-{k}-{name}"
            build_state(pre, live, log, k, keep, state)
            seen, _where = events_by_layer(state)
            pair = {"topic alpha question", "topic alpha answer"} & set(seen)
            assert len(pair) in (0, 2), f"crash at {k}, {name}: {pair}"
            shutil.rmtree(state)


@pytest.mark.parametrize("how", ["append", "prune"])
def test_a_journal_entry_whose_staged_units_were_lost_is_never_applied(tmp_path, monkeypatch,
                                                                       how):
    """The crash state a sampled sweep found: the journal entry of a prune is on disk (its
    file flushed, its rename kept) but the staged units it publishes never reached it (their
    mkdirs in staging/ unflushed and lost). Applying its removals then would delete the L1
    units whose events only those staged units held. Recovery must drop such an entry (its
    barrier never completed), and a reader must not show its after state."""
    monkeypatch.setenv("FSMEM_SYNC", "batch")
    base: set[str] = set()
    pre, live = _prepare(tmp_path, lambda p: base.update(full_context(p)))

    def run() -> None:
        mem = Memory.open(live, context_capacity=4, context_protected=1,
                          auto_prune=how == "append")
        mem.append(Event(source="qq", input="topic alpha new", response="fresh"))
        if how == "prune":
            mem.prune("topic alpha")
    log = record(run)
    entry = max(j for j, op in enumerate(log) if op[0] == "rename" and "/journal/" in op[2])
    k = next(j for j in range(entry, len(log)) if log[j][0] == "fsync") + 1
    state = tmp_path / "state"
    build_state(pre, live, log, k, lambda j: not (log[j][0] == "mkdir" and "/staging/"
                                                 in log[j][1]), state)
    assert os.listdir(state / ".fsmem" / "journal") and not os.listdir(state / ".fsmem" /
                                                                           "staging")
    from fsmem import Reader
    shown = {e.input for e in Reader.open(state).timeline()}
    assert base <= shown, base - shown                 # a reader, before any recovery
    seen, _where = events_by_layer(state)              # reopening runs recovery
    assert base <= set(seen), base - set(seen)
    assert all(c == 1 for c in seen.values()), seen
    assert Memory.open(state, auto_prune=False).fsck() == []


@pytest.mark.parametrize("sync", ["batch", "fsync"])   # a move under syncfs is as fsync
def test_recall_survives_power_loss(tmp_path, monkeypatch, sync):
    monkeypatch.setenv("FSMEM_SYNC", sync)
    base: set[str] = set()

    def setup(p: Path) -> None:
        base.update(full_context(p))
        mem = Memory.open(p, context_capacity=4, context_protected=1, auto_prune=False)
        mem.append(Event(source="qq", input="topic beta archived", response="b" * 200))
        mem.prune(query="topic alpha")
        mem.close()
        base.add("topic beta archived")
    pre, live = _prepare(tmp_path, setup)
    recalled: list[str] = []

    def run() -> None:
        mem = Memory.open(live, context_capacity=40, context_protected=1, auto_prune=False)
        recalled.extend(mem.recall("topic beta archived", top_k=1))
        ack("recalled")
    log = record(run)
    assert recalled

    def expect(log: list[tuple], k: int) -> dict[str, str]:
        done = any(op == ("mark", "recalled") for op in log[:k])
        return {u: "context" for u in recalled} if done else {}
    assert check_states(tmp_path, pre, live, log, acked_inputs(base), budget=8,
                        expect_units=expect) >= 8


def test_distill_survives_power_loss(tmp_path):
    base: set[str] = set()

    def setup(p: Path) -> None:
        base.update(distillable(p))
    pre, live = _prepare(tmp_path, setup)

    def run() -> None:
        mem = Memory.open(live, context_capacity=2, context_protected=1, auto_prune=False)
        mem.distill(max_age_s=0)
        ack("distilled")
    log = record(run)
    assert any(op[0] == "rename" and "/stablemem/" in op[2] for op in log), "nothing distilled"
    assert check_states(tmp_path, pre, live, log, acked_inputs(base), budget=6) >= 6


def _ingest_once(root: Path) -> None:
    from fsmem.ingest.watch import Watcher
    Watcher(Memory.open(root)).run(once=True)


INBOX_TEXTS = {f"note{i}.txt": f"inbox note number {i}" for i in range(3)}


def _recorded_ingest(tmp_path: Path) -> tuple[Path, Path, list[tuple]]:
    def setup(p: Path) -> None:
        Memory.open(p).close()
        for name, text in INBOX_TEXTS.items():
            (p / "inbox" / name).write_text(text)
    pre, live = _prepare(tmp_path, setup)

    def run() -> None:
        _ingest_once(live)
        ack("ingested")
    log = record(run)
    assert any(op[0] == "unlink" and "/inbox/.processing/" in op[1] for op in log)
    return pre, live, log


def _check_ingest_state(state: Path, label: str) -> None:
    _ingest_once(state)                # recovery, then the inbox is taken again
    try:
        seen, _ = events_by_layer(state)
    except Exception as exc:
        raise AssertionError(f"{label}: the store cannot be read: {exc!r}") from exc
    got = {t: seen[t] for t in INBOX_TEXTS.values()}
    assert got == {t: 1 for t in INBOX_TEXTS.values()}, f"{label}: {got}"
    assert Memory.open(state).fsck() == [], label


def test_ingest_survives_power_loss_after_its_batch_flush(tmp_path):
    """watch --once over an inbox: from the batch's syncfs on, any crash state followed by a
    second watch --once stores each dropped file's event exactly once (a claim is released
    only once its unit is durable). The window before that syncfs: the test below."""
    pre, live, log = _recorded_ingest(tmp_path)
    first_sync = next(j for j, op in enumerate(log) if op[0] == "syncfs")
    n = 0
    for k in crash_points(log, 5, 3):
        if k <= first_sync:
            continue
        for name, keep in choosers(k, 1):
            state = tmp_path / f"ingest-{k}-{n}"
            build_state(pre, live, log, k, keep, state)
            _check_ingest_state(state, f"crash at call {k}/{len(log)}, {name}")
            shutil.rmtree(state)
            n += 1
    assert n >= 6


def test_ingest_power_loss_before_the_batch_flush_leaves_no_torn_unit(tmp_path):
    """The window before the batch's syncfs: units were published (renamed into documents/)
    with their data unflushed. A state that keeps the names and loses the data holds torn
    units; the restart quarantines them (their claims are still in .processing/) and stores
    each file once."""
    pre, live, log = _recorded_ingest(tmp_path)
    k = next(j for j, op in enumerate(log) if op[0] == "syncfs")   # just before it
    cases = [("names kept, data lost", lambda j: log[j][0] != "write"), *choosers(k, 1)]
    for n, (name, keep) in enumerate(cases):
        state = tmp_path / f"torn-{n}"
        build_state(pre, live, log, k, keep, state)
        _check_ingest_state(state, f"crash at call {k}/{len(log)}, {name}")


def test_model_loses_what_was_never_flushed(tmp_path):
    """The model itself: an unsynced create is gone in "all lost" and there in "all kept";
    a file fsync'd and its directory fsync'd survives both."""
    pre, live = tmp_path / "pre", tmp_path / "live"
    pre.mkdir()
    live.mkdir()

    def run() -> None:
        fd = _fsops.open_(live / "a", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        _fsops.write_all(fd, b"data a")
        _fsops.fsync(fd)
        os.close(fd)
        _fsops.fsync_dir(live)
        fd = _fsops.open_(live / "b", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        _fsops.write_all(fd, b"data b")
        os.close(fd)
    log = record(run)
    lost, kept = choosers(0, 0)
    build_state(pre, live, log, len(log), lost[1], tmp_path / "s1")
    build_state(pre, live, log, len(log), kept[1], tmp_path / "s2")
    assert sorted(os.listdir(tmp_path / "s1")) == ["a"]
    assert (tmp_path / "s1" / "a").read_bytes() == b"data a"
    assert (tmp_path / "s2" / "b").read_bytes() == b"data b"



@pytest.mark.parametrize("sync", ["syncfs", "batch"])
@pytest.mark.parametrize("failing", ["the barrier", "the call after the barrier"])
def test_a_failed_append_burst_is_never_half_stored(tmp_path, monkeypatch, failing, sync):
    """An append burst meets ENOSPC/EIO at its barrier (syncfs, or the first call of the
    batch strategy's first wave) or at the first call after it.
    Whatever the call then reports, no crash state may hold a torn unit or an event twice, and
    if it returned, the burst is whole. The danger: a failure answered by removing the staged
    units while the journal entry that publishes them may still come back after a power loss
    (its removal unflushed): recovery would then publish half-deleted units."""
    import errno
    monkeypatch.setenv("FSMEM_SYNC", sync)
    pre, live = _prepare(tmp_path, lambda p: Memory.open(p, auto_prune=False).close())
    burst = [f"burst event {i}" for i in range(3)]
    flushed = False

    def hook(op: str) -> None:   # the only barrier calls ("fsync") are syncfs / a wave's
        nonlocal flushed
        if op == "fsync" and failing == "the barrier":
            raise OSError(errno.EIO, "injected EIO at the barrier")
        if op == "fsync":
            flushed = True
        elif flushed:
            flushed = False
            raise OSError(errno.ENOSPC, "injected ENOSPC after the barrier")

    def run() -> None:
        mem = Memory.open(live, auto_prune=False)
        _fsops.set_hook(hook)
        try:
            mem.append_many([Event(source="qq", input=t, response="r") for t in burst])
        except Exception:
            return
        finally:
            _fsops.set_hook(None)
        for text in burst:
            ack(f"ack:{text}")
    log = record(run)
    # The end state with the staged files' removals kept and every other unflushed change lost
    # (their directories' removals and the journal entry's among them), then sampled states.
    n = len(log)
    staged_writes = [j for j, op in enumerate(log) if op[0] == "write"
                     and "/staging/" in str(log[op[1]][2])]
    targeted = [("staged files' removals kept, rest lost", lambda j: log[j][0] == "unlink"
                 and "/staging/" in log[j][1]),
                ("one staged block's bytes lost, the rest kept (the entry too)",
                 lambda j: j != staged_writes[0])]
    entry = max(j for j, op in enumerate(log) if op[0] == "rename" and "/journal/" in op[2])
    for i, (name, keep) in enumerate(targeted):
        state = tmp_path / f"targeted-{i}"
        # the first targeted state at the end; the second just after the entry's rename
        build_state(pre, live, log, n if i == 0 else entry + 1, keep, state)
        seen, _where = events_by_layer(state)
        assert all(c == 1 for c in seen.values()), f"{failing}, {name}: {seen}"
        assert Memory.open(state, auto_prune=False).fsck() == [], f"{failing}, {name}"
    assert check_states(tmp_path, pre, live, log, acked_inputs(set()), budget=12) >= 12


def test_a_batch_commit_flushes_every_file_in_one_wave_before_the_rename(tmp_path, monkeypatch):
    """The "batch" strategy's protocol, read from the recorded calls of one durable commit:
    every file the staged unit holds is flushed, and its directory and staging/ too, before
    the publish rename, in one wave (the fault hook sees one barrier); then the layer
    directory (a second): two barriers a commit, and no syncfs of the whole filesystem."""
    from fsmem import MediaAttachment
    monkeypatch.setenv("FSMEM_SYNC", "batch")
    mem = Memory.open(tmp_path / "m", auto_prune=False)
    image = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
    ops: list[str] = []
    _fsops.set_hook(ops.append)
    try:
        log = record(lambda: mem.commit_events([
            Event(source="qq", input="one", response="r1",
                  attachments=[MediaAttachment(data=image, mime="image/png")]),
            Event(source="qq", input="two", response="r2")]))
    finally:
        _fsops.set_hook(None)
    assert ops.count("fsync") == 2, ops
    assert not any(op[0] == "syncfs" for op in log)
    publish = next(j for j, op in enumerate(log) if op[0] == "rename" and "/documents/" in op[2])
    staged = os.path.dirname(log[publish][1].rstrip("/"))
    created = {op[1] for op in log[:publish] if op[0] == "open" and op[2].startswith(staged)}
    flushed = {op[1] for op in log[:publish] if op[0] == "fsync"}
    assert len(created) >= 6 and created <= flushed, created - flushed
    dirs = {op[1] for op in log[:publish] if op[0] == "fsync_dir"}
    assert {log[publish][1], staged} <= dirs
    first = min(j for j, op in enumerate(log) if op[0] in ("fsync", "fsync_dir"))
    assert all(op[0] in ("fsync", "fsync_dir") for op in log[first:publish])   # one wave
    feed = {op[1] for op in log if op[0] == "open" and "/.fsmem/changes/" in op[2]}
    after = [op[0] for op in log[publish + 1:] if op[0] != "mark"
             and not (op[0] == "write" and op[1] in feed)]   # the feed's end mark: unsynced
    assert after == ["fsync_dir"]
    last = [op for op in log if not (op[0] == "write" and op[1] in feed)][-1]
    assert last[:2] == ("fsync_dir", os.path.dirname(mem.store.unit_dir("documents", "x")))
