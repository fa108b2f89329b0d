"""Vectors computed when a ranker first needs them, for units stored without any.

Why: with the hashed default embedder and a ranker that reads no vectors (``bm25``, the
default), a commit, an append and a prune store no ``vectors.npy`` at all: nothing would read
it, and embedding was a sixth of a durable commit. The hashed embedder is deterministic and
cheap (``on_demand = True``), so the vector a unit would have stored is a pure function of its
compute-layer texts: when a dense or fused ranker later reads vectors (a query of the index,
a prune ranking L1 by cosine), the missing rows are embedded then, from the unit's blocks,
exactly as a commit would have embedded them (``fsmem.search.vector_cache.unit_texts``), and kept in
memory (a writer's index saves them with its next snapshot; units are never written).
docs/DECISIONS.md ("Vectors only for rankers that read them").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fsmem.format.model import Manifest

__all__ = ["on_demand", "stores_vectors", "missing_text_rows", "embed_rows"]

log = logging.getLogger("fsmem.lazy_vectors")


def on_demand(mem: Any) -> bool:
    """True when ``mem``'s vectors may be computed on first use instead of stored: its
    embedder says it is cheap and deterministic and no deferred-vector filler owns them."""
    return bool(getattr(mem.embedder, "on_demand", False)) \
        and getattr(mem, "_filler", None) is None


def stores_vectors(mem: Any) -> bool:
    """Whether a write embeds its texts into the unit: yes for a ranker that reads vectors,
    for an embedder that is not cheap to re-run, or when asked to (``vectors="inline"``)."""
    return getattr(mem, "vectors_mode", "auto") == "inline" or mem.ranker != "bm25" \
        or not on_demand(mem)


def missing_text_rows(manifest: "Manifest", rows: dict[str, np.ndarray]) -> bool:
    """True when some text block of the unit has no vector row in ``rows``."""
    return any(f"{ev.id}:{ref.digest}" not in rows for ev in manifest.events
               for ref in ev.blocks if ref.modality == "text")


def embed_rows(mem: Any, path: str, manifest: "Manifest", rows: dict[str, np.ndarray]) -> int:
    """Add to ``rows`` the vectors of the unit's text rows it lacks, embedded now from its
    blocks (read and verified) by ``mem.embedder``; returns how many rows were added."""
    if not missing_text_rows(manifest, rows):
        return 0
    # lazy: start-up, loaded only when used (+msgspec, blake3, uuid)
    from fsmem.search.vector_cache import unit_texts
    todo = [(k, t) for k, t in unit_texts(mem.plugins, path, manifest) if k not in rows]
    if not todo:
        return 0
    mat = mem.embedder.embed([t for _k, t in todo])
    for (key, _t), vec in zip(todo, np.asarray(mat, np.float32)):
        rows[key] = vec
    return len(todo)
