"""The units of a store as a reader sees them: loaded from one consistent view (a unit that
moved away meanwhile raises ``Vanished``, and the view is read again), their events with text,
the L1 timeline, counts per layer, and the cold L2 units distillation takes.

Every function reads through ``Source``, what it needs of a ``Reader`` (or a ``Writer``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, TypeVar

from fsmem.format.errors import FsmemError
from fsmem.format.layout import Layout, Vanished, View
from fsmem.format.model import Event, Manifest
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import read_manifest, read_vectors
from fsmem.format.views import hydrate_event
from fsmem.store.access import AccessLog, AccessStats

if TYPE_CHECKING:   # numpy, embedders and plugins load on first use (CLI start-up)
    import numpy as np

    from fsmem.format.plugins import Plugins
    from fsmem.search.embed import Embedder
    from fsmem.search.vector_cache import VectorCache

__all__ = ["Loaded", "Source", "read_unit", "units_of", "hydrate", "timeline", "access_of",
           "stats", "find_cold"]

log = logging.getLogger("fsmem.reader")
T = TypeVar("T")


@dataclass
class Loaded:
    """One unit read from disk: where it is, its manifest, its vectors by row key."""

    unit_id: str
    path: str
    manifest: Manifest
    rows: dict[str, np.ndarray]
    arrival_ns: int


class Source(Protocol):
    """What reading units takes of a memory (a ``Reader`` is one): the layout, the access log,
    consistent views, and (for vectors) the embedder, plugins and vector cache, built on
    first use."""

    layout: Layout
    access: AccessLog

    @property
    def embedder(self) -> "Embedder": ...

    @property
    def plugins(self) -> "Plugins": ...

    @property
    def vector_cache(self) -> "VectorCache | None": ...

    def consistent(self, read: Callable[[View], T], layers: tuple[str, ...] | None = None,
                   *, only: str | None = None) -> T: ...


def read_unit(src: Source, uid: str, path: str, *, with_vectors: bool) -> Loaded | None:
    """One unit of a view; None (logged) if it is damaged; Vanished if it moved away."""
    try:
        manifest = read_manifest(path, expect_id=uid)
        st = os.stat(path)
        rows: dict[str, np.ndarray] = {}
        if with_vectors and manifest.vectors is not None \
                and manifest.vectors.embedder == src.embedder.fingerprint:
            keys, mat = read_vectors(path, manifest)  # type: ignore[misc]
            rows = dict(zip(keys, mat))
        if with_vectors:   # rows not stored in the unit: the derived vector cache
            # lazy: start-up, loaded only when used (+numpy, ctypes, queue)
            from fsmem.search.vector_cache import fill_rows
            fill_rows(src.vector_cache, src.plugins, path, manifest, rows)
    except (FsmemError, OSError) as exc:
        if src.layout.vanished(path):
            raise Vanished(path) from exc
        log.warning("skipping damaged unit %s: %s", path, exc)
        return None
    return Loaded(uid, path, manifest, rows, st.st_mtime_ns)


def units_of(src: Source, view: View, layer: str, *, with_vectors: bool = False
             ) -> list[Loaded]:
    """The readable units of ``layer`` in ``view`` (damaged ones skipped, logged)."""
    out = []
    for uid, path in view.layer(layer):
        unit = read_unit(src, uid, path, with_vectors=with_vectors)
        if unit is not None:
            out.append(unit)
    return out


def hydrate(src: Source, unit: Loaded) -> list[Event] | None:
    """A unit's events with their text; None (logged) if a block is damaged."""
    try:
        agent = unit.manifest.agent
        return [hydrate_event(unit.path, unit.unit_id, rec, agent)
                for rec in unit.manifest.events]
    except (FsmemError, OSError, UnicodeDecodeError) as exc:
        if src.layout.vanished(unit.path):
            raise Vanished(unit.path) from exc
        log.warning("skipping damaged unit %s: %s", unit.path, exc)
        return None


def timeline(src: Source) -> list[Event]:
    """The L1 events, sorted by original timestamp (ties: arrival, then event id)."""
    def read(view: View) -> list[Event]:
        pairs = []
        for unit in units_of(src, view, src.l1):
            for ev in hydrate(src, unit) or ():
                pairs.append((ev, unit.arrival_ns))
        pairs.sort(key=lambda p: (p[0].timestamp.ns, p[1], p[0].id))
        return [e for e, _ in pairs]
    return src.consistent(read, (src.l1,))


def access_of(manifest: Manifest, logged: AccessStats | None) -> tuple[int, Timestamp | None]:
    """A unit's access count and last access: what its manifest was written with (a
    format-1 manifest did not count its write) plus its lines in the access log."""
    count = manifest.access_count + (1 if manifest.format < 2 else 0)
    last = manifest.last_access
    if logged is not None:
        count += logged.count
        if last is None or logged.last_ns > last.ns:
            last = Timestamp(logged.last_ns, 0)
    return count, last


def stats(src: Source) -> dict[str, int]:
    """Units and events per layer, and the HomeAgent documents (readable, unreadable)."""
    def read(view: View) -> dict[str, int]:
        out: dict[str, int] = {}
        own = getattr(src, "l1", "context")
        for layer in view.units:   # this agent's L1 is "context"; another agent's its layer
            units = units_of(src, view, layer)
            layer = "context" if layer == own else \
                "context@default" if layer == "context" else layer
            out[f"{layer}_units"] = len(units)
            out[f"{layer}_events"] = sum(len(u.manifest.events) for u in units)
        return out
    out = src.consistent(read)
    # lazy: start-up, loaded only when used
    from fsmem.homeagent.documents import legacy_counts
    out["legacy_documents"], out["legacy_unreadable"] = legacy_counts(src.root)
    return out


def find_cold(src: Source, max_age_s: float = 72 * 3600, max_access: int = 2, *,
              now: Timestamp | None = None) -> list[str]:
    """L2 units accessed at most ``max_access`` times (the write counts as the first, as in
    HomeAgent) whose last access (else creation) is at least ``max_age_s`` old, oldest first
    (HomeAgent FindColdDocs, thresholds as parameters). Counts come from the manifest a unit
    was written with plus the access log."""
    now_ns = (now or Timestamp.now()).ns
    limit = now_ns - int(max_age_s * 1e9)
    logged = src.access.stats()
    found = []
    for unit in src.consistent(lambda v: units_of(src, v, "documents"), ("documents",)):
        count, last = access_of(unit.manifest, logged.get(unit.unit_id))
        ref = (last or unit.manifest.created_at).ns
        if count <= max_access and ref <= limit:
            found.append((ref, unit.unit_id))
    return [u for _, u in sorted(found)]
