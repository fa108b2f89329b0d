"""``fsmem watch``: files dropped into ``ROOT/inbox/`` become units, and plain-tool edits of the
layer directories (``cp -a``, ``mv``, ``rm -r``) are reconciled into the derived index.

The inbox protocol is Maildir's (docs/FORMAT.md §7, docs/WATCH.md): a file is taken only when
complete (no writer holds it open, its stat unchanged), claimed by one rename into
``inbox/.processing/``, hashed and stored from the same open descriptor, then removed. What
cannot be stored moves to ``inbox/.rejected/`` beside ``<name>.error.txt``. Every ingested
file's BLAKE3 is recorded in what it became (``meta.inbox_digest``, event ids
``e-i<digest>-<n>``, the media block itself), so a crash between claim and store re-ingests
without a duplicate.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import queue
import signal
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from fsmem.format import fsops as fsops
from fsmem.format.errors import FsmemError, StoreLocked
from fsmem.format.layout import read_small
from fsmem.ingest.inbox import (
    DEFAULT_SIZE_CAP,
    Ingestor,
    Outcome,
    Rejected,
    _Interrupted,
    _Ledger,
    _StoreScan,
)
from fsmem.ingest.inbox_dirs import (
    _BatchSync,
    _close,
    _dir_fingerprint,
    _display,
    _in_thread,
    _InboxDirs,
    _LockSlice,
    TREE_DEPTH,
    TREE_ENTRIES,
    _stat_key,
    _writer_holds,
    ignored_name,
    walk_tree,
)
from fsmem.memory.facade import Memory
from fsmem.store.filesystems import polling_needed
from fsmem.store.derived import make_room
from fsmem.memory.opening import WATCH_MARK, quarantine_torn_since

__all__ = ["Watcher", "Outcome", "Rejected", "DEFAULT_SIZE_CAP", "DEFAULT_RESCAN_S",
           "ignored_name"]


log = logging.getLogger("fsmem.watch")

DEFAULT_RESCAN_S = 30.0
POLL_S = 1.0   # how often a polling watch looks (inbox and change feed): see Watcher.polling
SETTLE_S = 0.25           # a file's stat unchanged this long (and no writer) = complete
SETTLE_DIR_S = 1.0        # same for a dropped unit directory
SETTLE_NO_LEASE_S = 1.0   # where leases are unavailable, wait longer...
QUIET_NO_CLOSE_S = 5.0    # ...and longer still if a write was seen but never its close
LAYER_SETTLE_S = 0.3      # a changed unit directory unchanged this long is reconciled
ONCE_WAIT_S = 10.0        # --once leaves files still being written after this long
BATCH = 256               # at most this many files made durable by one syncfs...
BATCH_MIN = 32            # ...and at least this many go to the sync thread once it is free
_CTIME_SLACK_NS = 2_000_000_000   # inode ctimes come from a coarse clock: a margin
_CTIME_MARGIN_NS = 50_000_000     # ...and a file's age from its ctime is trusted less this
BATCH_AGE_S = 1.0         # ...or those stored in this long (group commit)
LOCK_SLICE_S = 0.1        # the writer lock is held across files at most this long at a time
RETRY_BASE_S = 2.0        # a deferred claim is retried after 2, 4, 8... seconds...
RETRY_MAX_S = 60.0        # ...at most this long apart (a full disk is waited out, forever)
_WAIT_ERRNOS = {errno.ENOSPC, errno.EDQUOT}


@dataclass
class _Candidate:
    """A name in the inbox not yet taken: its last stat and since when it has not changed."""

    seen: float
    key: tuple | None = None
    since: float = 0.0
    settle: float = SETTLE_S
    writing: bool = False
    next_check: float = 0.0
    aged: bool = False   # ``since`` was set back by the age of the file's ctime


class Watcher:
    """The daemon: inbox ingest plus index reconcile for one store (see module docstring)."""

    def __init__(self, mem: Memory, *, size_cap: int = DEFAULT_SIZE_CAP,
                 rescan_s: float = DEFAULT_RESCAN_S,
                 report: Callable[[Outcome], None] | None = None,
                 on_reconcile: Callable[[dict], None] | None = None,
                 on_start: Callable[[], None] | None = None,
                 on_told: Callable[[], None] | None = None) -> None:
        self.mem = mem
        self._told = on_told or (lambda: None)   # after each group of reports: a reporter
        # that buffers its lines writes them then (one write per batch, not per file)
        self.on_start = on_start or (lambda: None)
        self.size_cap = size_cap
        self.rescan_s = rescan_s
        self.report = report or (lambda out: None)
        self.on_reconcile = on_reconcile or (lambda stats: None)
        self.counts = {"ingested": 0, "duplicate": 0, "rejected": 0, "deferred": 0}
        self._queue: queue.Queue = queue.Queue()
        self._stopping = False
        self._candidates: dict[str, _Candidate] = {}
        self._retry: dict[str, tuple[float, int]] = {}
        self._layer_dirs = {mem.store.layer_dir(layer): layer for layer in mem.store.layers()}
        self._layer_pending: dict[tuple[str, str], tuple[Any, float]] = {}
        self._own: dict[str, tuple[str, float]] = {}
        self._lease_ok = True
        self._housekept = 0.0
        self._once = False
        self._batch: list[tuple[str, Outcome]] = []
        self._batch_t = 0.0
        self._inflight: tuple[_BatchSync, list[tuple[str, Outcome]]] | None = None
        self._stored_since_save = 0
        self._slice = _LockSlice(mem.store, LOCK_SLICE_S)
        self.durable = mem.store.sync
        self._settled = False   # the start-up check of an interrupted run's mark is done
        # Polling where inotify cannot see other hosts' writes (a shared or unknown
        # filesystem, fsmem.store.filesystems), or FSMEM_WATCH_POLL=1: watchdog's polling
        # observer on the inbox, and the layers caught up from the change feed every
        # POLL_S (O(changes): what a writer on any host recorded, one stat when nothing did).
        self.polling = (os.environ.get("FSMEM_WATCH_POLL") == "1"
                        or polling_needed(mem.store.root))
        self._next_poll = 0.0

    # -- lifecycle --------------------------------------------------------------------------
    def run(self, *, once: bool = False) -> dict[str, int]:
        """Watch until SIGINT/SIGTERM or ``stop()`` (with ``once``: handle what waits, exit)."""
        lock_fd = self._lock()
        observer = None
        old = self._signals()
        self.mem.store.durability = "off"  # group commit: one syncfs per batch (_flush)
        try:
            self.dirs = _InboxDirs(self.mem.root)
            ledger = _Ledger(self.mem)
            ledger.load()
            self.ingestor = Ingestor(self.mem, self.dirs, ledger, self.size_cap)
            self._ledger = ledger
            observer = None if once else self._observe()
            marked = self._settle_torn()
            try:
                self._reconcile()   # the index loaded while the run mark is flushed
            finally:
                marked()   # durable before anything is published
            self._resume()
            self._scan_inbox()
            if not once:
                self.on_start()
            self._loop(once)
        finally:
            try:
                self._finish()
                self._told()
            finally:
                self.mem.store.durability = "full" if self.durable else "off"
            for signum, handler in old.items():
                signal.signal(signum, handler)
            if observer is not None:
                wd_log = logging.getLogger("watchdog.observers.inotify")
                level = wd_log.level  # 7.1 logs a spurious ERROR when stopped mid-read
                wd_log.setLevel(logging.CRITICAL)
                observer.stop()
                observer.join(timeout=5)
                wd_log.setLevel(level)
            self.mem.close()  # saves the index if it has unsaved changes
            if hasattr(self, "_ledger"):
                self._ledger.close()
            if hasattr(self, "dirs"):
                self.dirs.close()
            os.close(lock_fd)
        return self.counts

    def stop(self) -> None:
        self._stopping = True

    def _finish(self) -> None:
        """The exit: the last batch made durable and released in the sync thread while this
        thread saves the index snapshot (derived: ``Memory.close`` would save it after, in
        turn); then, everything published being durable, the run mark goes."""
        if not hasattr(self, "ingestor"):
            return
        self._flush(overlap=True)
        try:
            if self._stored_since_save:
                self.mem.index.save()   # logs and goes on if it cannot be written
                self._stored_since_save = 0
        finally:
            self._acknowledge(wait=True)
        if self._settled:   # (a mark this run did not settle stays for the next start)
            self._unmark()   # everything published is durable

    def _lock(self) -> int:
        path = os.path.join(self.mem.store.meta, "watch.lock")
        make_room(path, self.mem.store.meta)   # a FIFO or a directory there: set aside
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(f"{path}: another fsmem watch runs on this store") from None
        return fd

    def _signals(self) -> dict[int, Any]:
        """First SIGINT/SIGTERM: finish the entry in hand, then stop. Second: abandon it."""
        if threading.current_thread() is not threading.main_thread():
            return {}

        def handler(signum: int, frame: object) -> None:
            if self._stopping:
                raise _Interrupted(signum)
            log.info("signal %d: finishing the entry in hand, then stopping", signum)
            self._stopping = True
        old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        old[signal.SIGIO] = signal.signal(signal.SIGIO, signal.SIG_IGN)  # lease breaks
        return old

    def _observe(self) -> Any:
        from watchdog import events as ev  # lazy: start-up, loaded only when used (+watchdog)

        # lazy: start-up, loaded only when used (+ctypes, watchdog, tempfile)
        from watchdog.observers import Observer
        from watchdog.observers.polling import PollingObserver  # lazy: as Observer

        q = self._queue
        # FSMEM_WATCH_DROP_EVENTS=1 loses every inbox event, as an inotify queue overflow
        # does (watchdog reports none): the tests' proof that the rescan alone suffices.
        lost = self.dirs.inbox if os.environ.get("FSMEM_WATCH_DROP_EVENTS") == "1" else None

        class Handler(ev.FileSystemEventHandler):
            def on_any_event(self, event: Any) -> None:
                src = os.fsdecode(event.src_path)
                if lost is None or os.path.dirname(src) != lost:
                    q.put((event.event_type, src,
                           os.fsdecode(getattr(event, "dest_path", "") or "")))

        # Only what is used (the filter narrows the inotify mask): no IN_MODIFY per write, no
        # IN_OPEN/IN_CLOSE_NOWRITE from our own lease probes. Fewer events, less GIL contention.
        moves = [ev.FileMovedEvent, ev.DirMovedEvent, ev.FileDeletedEvent, ev.DirDeletedEvent,
                 ev.DirCreatedEvent]
        handler = Handler()
        if self.polling:   # (a polled layer of 100k units would be 100k stats a second)
            observer = PollingObserver(timeout=POLL_S)
            observer.schedule(handler, self.dirs.inbox, recursive=False)
            observer.start()
            return observer
        observer = Observer()
        observer.schedule(handler, self.dirs.inbox, recursive=False,
                          event_filter=[*moves, ev.FileCreatedEvent, ev.FileClosedEvent])
        for path in self._layer_dirs:
            observer.schedule(handler, path, recursive=False, event_filter=moves)
        observer.start()
        return observer

    # -- the loop ---------------------------------------------------------------------------
    def _loop(self, once: bool) -> None:
        self._once = once
        started = time.monotonic()
        next_rescan = started + self.rescan_s
        first = True   # the start-up scan's entries are looked at without a wait
        while not self._stopping:
            had = bool(self._candidates)
            self._drain(0.0 if first else 0.05 if self._candidates or self._layer_pending
                        else self._idle())
            first = False
            now = time.monotonic()
            self._handle(self._ready(now))
            last = once and (not self._candidates or now - started > ONCE_WAIT_S)
            if not last:   # --once's last batch: at the exit, beside the index save (_finish)
                self._flush()
            self._told()
            self._housekeep(once)
            if last:
                for name in sorted(self._candidates):
                    log.warning("%s: still being written; left for the next run",
                                _display(name))
                return
            if not once and self.polling and now >= self._next_poll:
                self._next_poll = now + POLL_S   # other hosts' units, from the feed
                self._reconcile()
            if not once and (now >= next_rescan or (had and not self._candidates)):
                # periodic, and right after a burst: events lost to a queue overflow
                next_rescan = now + self.rescan_s
                self._scan_inbox()
                self._reconcile(full=True)

    def _idle(self) -> float:
        """How long the loop may wait for an event: 0.5 s, less when a retry is due sooner."""
        if not self._retry:
            return 0.5
        due = min(when for when, _ in self._retry.values()) - time.monotonic()
        return min(0.5, max(0.05, due))

    def _housekeep(self, once: bool) -> None:
        """Between files too: look at the event queue, reconcile, retry deferred claims."""
        self._housekept = time.monotonic()
        self._acknowledge(wait=False)   # an overlapped batch done: its files told now
        # the age bound keeps a daemon's acknowledgements prompt; --once acknowledges at its
        # exit anyway (the batches that go to the sync thread on their own aside: _process)
        if self._batch and not once and self._housekept - self._batch_t > BATCH_AGE_S:
            self._flush()
        self._drain(0.0)
        if self._layer_pending:
            self._poll_layers(self._housekept)
        if self._retry and not once:
            self._retry_claims(self._housekept)

    def _drain(self, timeout: float) -> None:
        try:
            item = self._queue.get(timeout=timeout) if timeout else self._queue.get_nowait()
            while True:
                self._on_event(*item)
                item = self._queue.get_nowait()
        except queue.Empty:
            return

    def _on_event(self, kind: str, src: str, dest: str) -> None:
        for path, moved_in in ((src, False), (dest, True)):
            if not path:
                continue
            parent, name = os.path.split(path)
            if parent == self.dirs.inbox and not ignored_name(name):
                self._inbox_event(name, "moved_in" if moved_in else (
                    "moved_out" if kind == "moved" else kind))
            elif parent in self._layer_dirs and not name.startswith("."):
                layer = self._layer_dirs[parent]
                own = self._own.get(name)
                if own and own[0] == layer and (moved_in or kind == "created"):
                    continue  # a unit this daemon published: the library indexed it
                self._layer_pending.setdefault((layer, name), (_UNSEEN, 0.0))

    def _inbox_event(self, name: str, kind: str) -> None:
        if kind in ("deleted", "moved_out"):
            self._candidates.pop(name, None)
            return
        if kind in ("opened", "closed_no_write"):
            return  # our own lease probe opens files too
        c = self._candidates.setdefault(name, _Candidate(seen=time.monotonic()))
        if kind in ("created", "modified"):
            c.writing = True
        elif kind in ("closed", "moved_in"):
            c.writing = False
        c.key, c.next_check = None, 0.0

    def _scan_inbox(self) -> None:
        now = time.monotonic()
        for name in self.dirs.names():
            self._candidates.setdefault(name, _Candidate(seen=now))

    def _ready(self, now: float) -> list[str]:
        """Names whose stat has not changed for the settle time (oldest first); whether a
        writer still holds them is asked at claim time."""
        ready = []
        for name, c in list(self._candidates.items()):
            if now < c.next_check:
                continue
            if c.key is not None and c.next_check > 0 and now - c.since >= c.settle:
                ready.append(name)  # stable at its last look; the claim re-checks the stat
                continue
            try:
                st = os.lstat(name, dir_fd=self.dirs.inbox_fd)
            except FileNotFoundError:
                del self._candidates[name]
                continue
            key = _stat_key(st, name, self.dirs.inbox_fd)
            if key != c.key:
                c.key, c.settle = key, self._settle(st, c)
                age = self._unchanged_for(st, c.settle)
                c.since, c.aged = now - age, age > 0
            c.next_check = c.since + c.settle
            if now >= c.next_check:
                ready.append(name)
        ready.sort(key=lambda n: self._candidates[n].seen)
        return ready

    def _settle(self, st: os.stat_result, c: _Candidate) -> float:
        if stat.S_ISDIR(st.st_mode):
            return SETTLE_DIR_S
        if not stat.S_ISREG(st.st_mode):
            return 0.0
        if self._lease_ok:
            return SETTLE_S
        return QUIET_NO_CLOSE_S if c.writing else SETTLE_NO_LEASE_S

    def _unchanged_for(self, st: os.stat_result, settle: float) -> float:
        """How long a regular file has certainly not changed, from its ctime (any write,
        rename or chmod sets it), capped at ``settle``: a file dropped before the watcher
        looked is not waited for again. Only while file leases work (a local filesystem,
        the writer check at claim time); 0 otherwise, and for directories."""
        if not (self._lease_ok and stat.S_ISREG(st.st_mode)):
            return 0.0
        age_ns = time.time_ns() - st.st_ctime_ns - _CTIME_MARGIN_NS
        return min(settle, age_ns / 1e9) if age_ns > 0 else 0.0

    def _handle(self, names: list[str]) -> None:
        """Claim and ingest ``names``. The writer lock is held across files in slices of at
        most LOCK_SLICE_S (group commit: one lock and one recovery pass per slice, not per
        file); it is let go for housekeeping and each batch's syncfs, so another writer
        waits at most about one slice."""
        self._slice = _LockSlice(self.mem.store, LOCK_SLICE_S)
        try:
            for name in names:
                if self._stopping:
                    return
                c = self._candidates.get(name)
                if c is not None:
                    self._slice.hold()
                    claimed = self._claim(name, c)
                    if claimed is not None:
                        self._process(claimed[0], name, resume=False, fd=claimed[1])
                if time.monotonic() - self._housekept > 0.2:
                    self._slice.release()
                    self._housekeep(self._once)
                elif self._slice.expired():
                    self._slice.release()
        finally:
            self._slice.release()

    def _claim(self, name: str, c: _Candidate) -> tuple[str, int | None] | None:
        """Re-check, then rename into .processing: (claim, descriptor of the claimed file or
        None), or None if the entry is not ready after all. A regular file is opened once
        (never following a link): its stat, the writer check and the ingest use that one
        descriptor."""
        fd, st = self._look(name, c)
        if st is None:
            self._candidates.pop(name, None)
            return None
        try:
            key = _stat_key(st, name, self.dirs.inbox_fd)
            if key != c.key or self._held(name, st, fd) \
                    or (c.aged and not self._lease_ok):   # no leases after all: wait it out
                c.key, c.next_check = None, time.monotonic() + SETTLE_S
                return _close(fd)
            self._candidates.pop(name, None)
            try:
                return self.dirs.claim(name), fd
            except FileNotFoundError:
                return _close(fd)
        except BaseException:
            _close(fd)
            raise

    def _look(self, name: str, c: _Candidate) -> tuple[int | None, os.stat_result | None]:
        """(descriptor, fstat) of a regular file last seen as one, else (None, lstat);
        (None, None) when the name is gone."""
        if c.key is not None and stat.S_ISREG(c.key[0]):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                             dir_fd=self.dirs.inbox_fd)
            except OSError:
                fd = None   # gone, or no longer a regular file: the lstat below says
            if fd is not None:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode):
                    return fd, st
                os.close(fd)
        try:
            return None, os.lstat(name, dir_fd=self.dirs.inbox_fd)
        except FileNotFoundError:
            return None, None

    def _held(self, name: str, st: os.stat_result, fd: int | None = None) -> bool:
        """True if a writer still has the file (or a file of the directory) open; ``fd``:
        the file already open."""
        if fd is not None:
            return self._lease_says(_writer_holds(fd))
        if stat.S_ISREG(st.st_mode):
            return self._probe(name, self.dirs.inbox_fd)
        if not stat.S_ISDIR(st.st_mode):
            return False
        try:
            dfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=self.dirs.inbox_fd)
        except OSError:
            return False
        try:   # every file of the tree (a notes folder), bounded as its fingerprint is
            return any(self._probe(n, pfd) for pfd, n, _rel, s in
                       walk_tree(dfd, depth=TREE_DEPTH, entries=TREE_ENTRIES)
                       if stat.S_ISREG(s.st_mode))
        finally:
            os.close(dfd)

    def _probe(self, name: str, dir_fd: int) -> bool:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dir_fd)
        except OSError:
            return False  # a symlink, gone...: the claim decides
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            held = _writer_holds(fd)
        finally:
            os.close(fd)
        return self._lease_says(held)

    def _lease_says(self, held: bool | None) -> bool:
        if held is None and self._lease_ok:
            log.info("file leases unavailable here; relying on a longer stability wait")
            self._lease_ok = False
        return bool(held)

    def _process(self, claim: str, name: str, *, resume: bool, fd: int | None = None) -> None:
        """Ingest one claim (``fd``: the claimed file, already open; closed here)."""
        try:
            out = self.ingestor.ingest(claim, name, resume=resume, fd=fd)
        except (StoreLocked, OSError) as exc:
            out = self._defer(claim, name, exc)
        else:
            self._retry.pop(claim, None)
        finally:
            _close(fd)
        now = time.monotonic()
        for layer, uid in self.ingestor.published:
            self._own[uid] = (layer, now)
        self._stored_since_save += len(self.ingestor.published)
        while self._own:  # insertion order is age order: expire from the front
            oldest = next(iter(self._own))
            if now - self._own[oldest][1] < 60:
                break
            del self._own[oldest]
        if out.status != "ingested":
            self._tell(out)
            return
        if not self._batch:
            self._batch_t = now
        self._batch.append((claim, out))
        if len(self._batch) >= BATCH or (len(self._batch) >= BATCH_MIN and self._sync_idle()):
            self._flush(overlap=True)

    def _sync_idle(self) -> bool:
        """True if no batch is being made durable beside the ingest (the sync thread is free:
        the batch gathered so far goes to it now rather than waiting to be full)."""
        return self._inflight is None or not self._inflight[0].is_alive()

    def _defer(self, claim: str, name: str, exc: BaseException) -> Outcome:
        """A transient failure: retry later with backoff. Waiting for space (ENOSPC, EDQUOT)
        or for the writer lock is never a rejection; another error rejects after 6 tries."""
        _, tries = self._retry.get(claim, (0.0, 0))
        waiting = isinstance(exc, StoreLocked) or getattr(exc, "errno", None) in _WAIT_ERRNOS
        if tries >= 5 and not waiting:
            out = Outcome(status="rejected", name=name, reason=f"failed 6 times: {exc}")
            try:
                out.moved_to = self.dirs.reject(claim, name, out.reason)
                self._retry.pop(claim, None)
                return out
            except OSError as again:  # cannot even say why: keep it, try again later
                exc = again
        delay = min(RETRY_BASE_S * 2 ** min(tries, 16), RETRY_MAX_S)
        self._retry[claim] = (time.monotonic() + delay, tries + 1)
        if waiting and tries == 0:
            log.warning("%s: %s; waiting and retrying (not a rejection)", _display(name), exc)
        return Outcome(status="deferred", name=name, reason=str(exc))

    def _flush(self, *, overlap: bool = False) -> None:
        """Make the batch's units durable with one syncfs, then release its claims (the
        acknowledgement). A crash before this leaves the claims for resume: no loss, and
        the digests recorded in the units prevent duplicates. ``overlap`` (a full batch in
        the middle of a run): the syncfs and the releases run in a thread while the next
        batch is ingested; its files are told once it is done (``_acknowledge``), and a batch
        waits for the one before it, so at most one is in flight."""
        self._acknowledge(wait=True)
        batch, self._batch = self._batch, []
        if not batch:
            return
        if not overlap:
            self._slice.release()   # the syncfs may take long: other writers go on meanwhile
        self.ingestor.ledger.flush()   # its lines, made durable by the same syncfs
        job = _BatchSync(self.dirs, [(claim, out.kind in ("unit", "records", "notes"))
                                     for claim, out in batch],
                         self.mem.store.staging if self.durable else None)
        self._inflight = (job, batch)
        if overlap:
            try:
                job.start()
                return
            except RuntimeError:   # no thread to be had: in line, as below
                pass
        job.run()
        self._acknowledge(wait=True)

    def _acknowledge(self, *, wait: bool) -> None:
        """The batch in flight, once its job is done (``wait``: until it is): tell its files,
        or withdraw it if its syncfs failed, with every unit published while that syncfs ran
        (their data may have met the same failed writeback, which a later syncfs would not
        report again)."""
        if self._inflight is None:
            return
        job, batch = self._inflight
        if job.is_alive():
            if not wait:
                return
            job.join()
        self._inflight = None
        if job.sync_error is not None:
            later, self._batch = self._batch, []
            self._slice.release()
            self._withdraw(batch + later, job.sync_error)
            return
        if job.released and self.durable:
            self._mark(sync=False, now_ns=job.started_ns)   # published before it: durable
        for _, out in batch[:job.released]:
            self._tell(out)
        self._told()
        if job.error is not None:
            raise job.error

    # A power loss between a publish rename and its batch's syncfs can keep a unit's name and
    # lose its data (a torn unit) while its file is stored again after the restart. The mark
    # file says since when published units may be unflushed: written durably before the first
    # publish of a run, moved forward after each batch's syncfs (unsynced: a lost update only
    # leaves an older, safer time), removed at a clean exit.
    def _mark_path(self) -> str:
        return os.path.join(self.mem.store.meta, WATCH_MARK)

    def _mark(self, *, sync: bool, now_ns: int | None = None) -> None:
        stamp = str((time.time_ns() if now_ns is None else now_ns) - _CTIME_SLACK_NS).encode()
        self.mem.store.write_file_atomic(self._mark_path(), stamp, sync=sync)

    def _unmark(self) -> None:
        try:
            fsops.unlink(self._mark_path())
        except FileNotFoundError:
            pass

    def _settle_torn(self) -> Callable[[], None]:
        """After an interrupted run (its mark is still there), quarantine (never delete) each
        unit published since the mark that does not verify: its file is still in the inbox or
        claimed, and is stored again. Then mark this run's start: the durable write runs in a
        thread; returns its wait (raises what the write raised), to be called before the
        first publish."""
        try:
            raw = read_small(self._mark_path(), 64)
            since = int(raw) if raw.strip().isdigit() else 0   # a torn mark: check them all
        except FileNotFoundError:
            since = None
        except (OSError, FsmemError):
            since = 0
        store = self.mem.store
        if since is not None:
            with store.locked():
                quarantine_torn_since(store, ("documents", self.mem.l1), since)
        self._settled = True
        if not self.durable:
            return lambda: None
        return _in_thread(lambda: self._mark(sync=True), "fsmem-watch-mark")

    def _withdraw(self, batch: list[tuple[str, Outcome]], exc: OSError) -> None:
        log.error("syncfs failed (%s): withdrawing %d units; their files will be retried",
                  exc, sum(len(out.units) for _, out in batch))
        with self.mem.store.locked():
            for claim, out in batch:
                for where in out.units:
                    path = os.path.join(self.mem.root, where)
                    if os.path.isdir(path):
                        self.mem.store.discard(path, sync=False)
                self._retry[claim] = (time.monotonic() + 2.0, 1)
                self._tell(Outcome(status="deferred", name=out.name, reason=str(exc)))

    def _tell(self, out: Outcome) -> None:
        self.counts[out.status] = self.counts.get(out.status, 0) + 1
        self.report(out)

    def _resume(self) -> None:
        """Claims left in .processing by a crash: re-ingest each, without duplicates."""
        claims = self.dirs.claims()
        if claims:
            log.info("resuming %d claimed entries left by an earlier run", len(claims))
            self._resume_claims(claims)

    def _resume_claims(self, claims: list[str]) -> None:
        self.ingestor.scan = _StoreScan(self.mem)  # what the interrupted run already stored
        try:
            for claim in claims:
                if self._stopping:
                    break
                self._process(claim, self.dirs.original_name(claim), resume=True)
        finally:
            self.ingestor.scan = None

    def _retry_claims(self, now: float) -> None:
        due = sorted(c for c, (when, _) in self._retry.items() if when <= now)
        if due:
            self._resume_claims(due)

    # -- layers -----------------------------------------------------------------------------
    def _poll_layers(self, now: float) -> None:
        """Reconcile once each changed unit directory has stopped changing (a copy done)."""
        settled = []
        for key, (fp, since) in list(self._layer_pending.items()):
            cur = _dir_fingerprint(os.path.join(self.mem.store.layer_dir(key[0]), key[1]))
            if fp is _UNSEEN or cur != fp:
                self._layer_pending[key] = (cur, now)
            elif now - since >= LAYER_SETTLE_S:
                del self._layer_pending[key]
                settled.append(f"{key[0]}/{key[1]}")
        if settled:
            self._reconcile(sorted(settled))

    def _reconcile(self, changed: list[str] | None = None, *, full: bool = False) -> None:
        """Bring the index in step with the layer directories, and save its snapshot. At
        start-up (neither ``changed`` nor ``full``) ``documents/`` is listed only if its mtime
        moved since the index was last in step, as any open does; a rescan (``full``) or a
        change seen by an event lists it whatever its mtime says."""
        reconcile = getattr(self.mem, "reconcile", None)
        if reconcile is None:
            return
        index = getattr(self.mem, "_index", None)
        if index is not None:   # the units it finds, for the record (a rebuild: counts only)
            index.noticed = []
        try:
            stats: dict[str, Any] = dict(reconcile(full=bool(changed) or full) or {})
        finally:
            noticed = (index.noticed or []) if index is not None else []
            if index is not None:
                index.noticed = None
        last = dict((uid, change) for change, uid in noticed)
        stats["units"] = {"added": sorted(u for u, c in last.items() if c == "added"),
                          "removed": sorted(u for u, c in last.items() if c == "removed")}
        counted = stats.get("added") or stats.get("removed")
        if changed or counted or self._stored_since_save:
            try:
                self.mem.index.save()  # the snapshot on disk, not only the one in memory
                self._stored_since_save = 0
            except OSError as exc:  # derived: not saved now, saved at the next reconcile
                log.warning("index snapshot not saved (%s); reads go on", exc)
        if changed or counted:
            self.on_reconcile({**stats, "changed": changed or []})


_UNSEEN = object()
