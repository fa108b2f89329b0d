"""Ranking L2 units against a query (the simple built-in similarity; see the search issue).

Each unit's vector is the normalised sum of its stored block vectors (computed at write time
and kept in the unit); the query is embedded once and compared by cosine. Units whose vectors
come from another embedder are not compared (vectors of two spaces are never mixed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .views import Hit

if TYPE_CHECKING:
    from .flows import Memory

__all__ = ["rank_units", "unit_vector"]


def unit_vector(rows: dict[str, np.ndarray], dim: int) -> np.ndarray:
    if not rows:
        return np.zeros(dim, dtype=np.float32)
    v = np.sum(list(rows.values()), axis=0)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def rank_units(mem: "Memory", text: str, top_k: int) -> list[Hit]:
    """The ``top_k`` L2 units most similar to ``text`` (score > 0), best first."""
    if top_k <= 0 or not text.strip():
        return []
    qv = mem.embedder.embed([text])[0]
    units = mem._load_layer("documents", with_vectors=True)
    if not units:
        return []
    mat = np.stack([unit_vector(u.rows, mem.embedder.dim) for u in units])
    scores = mat @ qv
    order = np.argsort(-scores, kind="stable")[:top_k]
    hits = []
    for i in order:
        if scores[i] <= 0:
            break
        u = units[int(i)]
        hits.append(Hit(unit_id=u.unit_id, score=float(scores[i]), summary=u.manifest.summary,
                        created_at=u.manifest.created_at, events=len(u.manifest.events)))
    return hits

