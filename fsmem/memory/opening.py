"""Opening a memory: settings (``.fsmem/config.toml`` < ``FSMEM_*`` < arguments), the store and
its recovery, the deferred-vector filler, HomeAgent's ``context.json`` when asked to adopt it,
and the prune a previous process owed."""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import Iterable, TypeVar

from fsmem.format.errors import FormatError
from fsmem.format.plugins import ChannelDef, Plugins, ToolDef
from fsmem.homeagent.documents import allow_record
from fsmem.memory.maintenance import repair_owed
from fsmem.memory.prune import prune
from fsmem.memory.reader import Reader, default_ranker
from fsmem.memory.writer import Writer, shared_embedder
from fsmem.search.embed import Embedder, HashEmbedder
from fsmem.store.config import effective
from fsmem.store.store import Durability, Store

__all__ = ["open_memory"]

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
        if adopt and os.path.isfile(os.path.join(store.root, "context.json")):
            from fsmem.homeagent.context import adopt as adopt_context  # lazy: hashlib, json
            try:
                adopt_context(mem)
            except FormatError as exc:
                log.error("context.json not adopted: %s", exc)
    # a prune a previous process owed (never fails the open), by the memory's own prune
    repair_owed(store, getattr(mem, "prune", partial(prune, mem)) if auto_prune else None)
    return mem
