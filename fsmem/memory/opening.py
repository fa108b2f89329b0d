"""Opening a memory: settings (``.fsmem/config.toml`` < ``FSMEM_*`` < arguments), the store and
its recovery, the deferred-vector filler, HomeAgent's ``context.json`` when asked to adopt it,
and the prune a previous process owed."""

from __future__ import annotations

import fcntl
import logging
import os
from functools import partial
from typing import Iterable, TypeVar

from fsmem.format.errors import FormatError, FsmemError
from fsmem.format.layout import read_small
from fsmem.format.unit import damaged
from fsmem.format.plugins import ChannelDef, Plugins, ToolDef
from fsmem.homeagent.documents import allow_record
from fsmem.memory.maintenance import repair_owed
from fsmem.memory.prune import prune
from fsmem.memory.reader import Reader, default_ranker
from fsmem.memory.writer import Writer, shared_embedder
from fsmem.search.embed import Embedder, HashEmbedder
from fsmem.store.config import effective
from fsmem.store.store import Durability, Store

__all__ = ["open_memory", "WATCH_MARK", "quarantine_torn_since", "settle_interrupted_ingest"]

WATCH_MARK = "watch-unflushed"   # .fsmem/: since when a watch run's units may be unflushed

log = logging.getLogger("fsmem.flows")
W = TypeVar("W", bound=Writer)


def open_memory(cls: type[W], root: str | os.PathLike, *, context_capacity: int | None = None,
                context_protected: int | None = None,
                plugins: Plugins | Iterable[ToolDef | ChannelDef] | None = None,
                embedder: Embedder | None = None, durability: Durability | None = None,
                lock_timeout: float | None = None, auto_prune: bool = True,
                create: bool = True, ranker: str | None = None, readonly: bool = False,
                adopt: bool = False, context_tokens: int | None = None,
                vectors: str = "auto", agent: str | None = None) -> W | Reader:
    """``Memory.open`` (its docstring says what each argument does): a ``cls`` over the store
    at ``root``, created where missing and recovered, or a ``Reader`` when ``readonly``."""
    if vectors not in ("auto", "inline", "deferred"):
        raise ValueError(f"vectors must be auto, inline or deferred, got {vectors!r}")
    if readonly:
        return Reader.open(root, plugins=plugins, embedder=embedder, ranker=ranker, agent=agent)
    cfg = effective(root, {"agent": agent, "context_capacity": context_capacity,
                           "context_protected": context_protected,
                           "durability": durability, "lock_timeout": lock_timeout})
    if embedder is None and cfg["embedder"] != "hash":   # the store's own (config.toml)
        # lazy: start-up, loaded only when used (+the embedder's package)
        from fsmem.search.embedders import make_embedder
        embedder = make_embedder(cfg["embedder"], f"embedder = {cfg['embedder']!r} in "
                                 f"{os.path.join(os.fspath(root), '.fsmem', 'config.toml')}")
    if ranker is None and cfg["ranker"] != "auto":
        ranker = cfg["ranker"]
    context_capacity, context_protected = cfg["context_capacity"], cfg["context_protected"]
    durability, lock_timeout = cfg["durability"], cfg["lock_timeout"]
    store = Store(os.fspath(root), durability=durability, lock_timeout=lock_timeout,
                  create=create)
    filler_embedder = None
    if vectors == "deferred" or (vectors == "auto" and embedder is not None
                                 and not isinstance(embedder, HashEmbedder)):
        embedder = filler_embedder = shared_embedder(embedder or HashEmbedder())
    mem = cls(store, context_capacity=context_capacity, context_protected=context_protected,
              plugins=Plugins.of(plugins), embedder=embedder or HashEmbedder(),
              auto_prune=auto_prune, ranker=ranker or default_ranker(embedder),
              context_tokens=context_tokens, agent=cfg["agent"])
    mem.vectors_mode = vectors
    mem.homeagent_files = cfg["homeagent_files"]   # "keep": HomeAgent's files never moved
    if filler_embedder is not None:
        from fsmem.search.vector_cache import (  # lazy: threads, only for a real embedder
            VectorCache,
            VectorFiller,
        )
        mem._filler = VectorFiller(VectorCache(store.meta, filler_embedder.fingerprint,
                                               filler_embedder.dim,
                                               durable=durability == "full"),
                                   filler_embedder.embed)
    mem.access.create()
    if mem.agent:   # this agent's L1 (format 4): context@<agent>/ beside context/
        store.ensure_layer(mem.l1)
    with store.locked():  # taking the lock runs recovery
        allow_record(store.root)
        settle_interrupted_ingest(store, ("documents", mem.l1))
        if adopt and os.path.isfile(os.path.join(store.root, "context.json")):
            from fsmem.homeagent.context import adopt as adopt_context  # lazy: hashlib, json
            try:
                adopt_context(mem)
            except FormatError as exc:
                log.error("context.json not adopted: %s", exc)
    # a prune a previous process owed (never fails the open), by the memory's own prune
    repair_owed(store, getattr(mem, "prune", partial(prune, mem)) if auto_prune else None)
    return mem


def quarantine_torn_since(store: Store, layers: Iterable[str], since: int) -> int:
    """Quarantine (never delete) each unit of ``layers`` whose inode changed at or after
    ``since`` (ns) and that does not verify; returns how many. The caller holds the lock."""
    n = 0
    for layer in layers:
        for uid, path in store.list_layer(layer).items():
            try:
                if os.lstat(path).st_ctime_ns < since:
                    continue
            except OSError:
                continue
            problems = damaged(path, uid)
            if problems:
                log.warning("%s: unit %s left torn by an interrupted ingest (%s)",
                            store.root, uid, problems[0])
                store.quarantine(path, f"torn-{uid}")
                n += 1
    return n


def settle_interrupted_ingest(store: Store, layers: Iterable[str]) -> None:
    """Recovery of an ingest (``fsmem watch``) that a power loss interrupted: it publishes
    units before the batch's one syncfs, so such a loss may keep a unit's name and not its
    data. Its run mark (``.fsmem/watch-unflushed``) says since when; with no watch running
    (none holds ``watch.lock``), every unit published since then that does not verify is
    quarantined, so no writer shows a torn unit (its file, still claimed in the inbox, is
    stored again by the next watch), and the mark goes. A running watch settles its own."""
    mark = os.path.join(store.meta, WATCH_MARK)
    if not os.path.lexists(mark):
        return
    try:
        lock = os.open(os.path.join(store.meta, "watch.lock"),
                       os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        lock = -1
    except OSError:
        return
    try:
        if lock >= 0:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return   # a watch runs: its units are whole in the page cache
        try:
            raw = read_small(mark, 64)
            since = int(raw) if raw.strip().isdigit() else 0   # a torn mark: check them all
        except FileNotFoundError:
            return
        except (OSError, FsmemError):
            since = 0
        quarantine_torn_since(store, layers, since)
        from fsmem.format import fsops  # lazy: a reader never loads the mutating calls
        try:
            fsops.unlink(mark)   # (lost to a power loss: the check runs again, harmless)
        except FileNotFoundError:
            pass
    finally:
        if lock >= 0:
            os.close(lock)
