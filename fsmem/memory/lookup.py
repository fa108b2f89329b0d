"""A unit or a block found by its id or digest, from whichever layer holds it (a HomeAgent
document or media blob read in place through the fallback), and hits shown as the model
reads them. Read-only; every lookup runs on one consistent view."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Protocol

import msgspec

from fsmem.format import blocks as blockfiles  # module attribute: tests count its reads
from fsmem.format.blocks import DIGEST_RE
from fsmem.format.errors import AmbiguousDigest, FsmemError, InvalidName, NotFound
from fsmem.format.layout import Vanished, View
from fsmem.format.model import BlockRef, Event, check_name
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import block_path, read_manifest
from fsmem.format.views import Document, Hit, hit_label, hydrate_event, matched_view, unit_label
from fsmem.memory.units import Source, access_of, units_of

if TYPE_CHECKING:
    from fsmem.memory.render import HitView

__all__ = ["MEDIA_STORE", "Lookup", "document", "find_block", "find_legacy_block", "read_block",
           "hit_views", "labelled"]

MEDIA_STORE = "<media-store>"   # find_block's marker for a legacy media-store blob


class Lookup(Source, Protocol):
    """What a lookup takes of a memory (a ``Reader`` is one): ``Source`` plus the root and
    graph.db (a HomeAgent block id may be named only there)."""

    @property
    def root(self) -> str: ...

    @property
    def graph(self) -> Any: ...


def document(src: Lookup, unit_id: str) -> Document:
    """A unit read back whole, from whichever layer holds it."""
    check_name(unit_id)

    def read(view: View) -> Document:
        found = view.locate(unit_id)
        if found is None:   # a HomeAgent document still in documents/: the fallback
            # lazy: start-up, loaded only when used
            from fsmem.homeagent.documents import legacy_document
            doc = legacy_document(src.root, unit_id)
            seen = src.access.stats().get(unit_id)
            if seen is not None:
                doc.access_count += seen.count
            return doc
        layer, path = found
        try:
            manifest = read_manifest(path, expect_id=unit_id)
            events = [hydrate_event(path, manifest.id, rec, manifest.agent)
                      for rec in manifest.events]
        except (FsmemError, OSError) as exc:
            if src.layout.vanished(path):
                raise Vanished(path) from exc
            raise
        doc = Document.of(manifest, layer=layer, path=path, events=events)
        doc.access_count, last = access_of(manifest, src.access.stats().get(unit_id))
        doc.last_access = last
        return doc
    return src.consistent(read, only=unit_id)   # one unit: a stat per layer, none listed


def find_block(src: Lookup, digest: str) -> tuple[str, BlockRef]:
    """The unit directory and reference of the block whose digest (or unique prefix of at
    least 8 hex) is ``digest``; NotFound or AmbiguousDigest otherwise. A HomeAgent block
    id (``blk_…``) resolves too."""
    if digest.startswith("blk_"):
        return find_legacy_block(src, digest)
    prefix = digest.strip().lower()
    if not (8 <= len(prefix) <= 64) or not DIGEST_RE.match(prefix.ljust(64, "0")):
        raise InvalidName(f"digest {digest!r}: want 8 to 64 hex characters")

    def read(view: View) -> dict[str, tuple[str, BlockRef]]:
        found: dict[str, tuple[str, BlockRef]] = {}
        for layer in view.units:
            for unit in units_of(src, view, layer):
                for ev in unit.manifest.events:
                    for ref in ev.blocks:
                        if ref.digest.startswith(prefix) or ref.sha256.startswith(prefix):
                            found.setdefault(ref.digest, (unit.path, ref))
        return found
    found = src.consistent(read)
    if not found:
        # lazy: start-up, loaded only when used
        from fsmem.homeagent.documents import find_legacy_blob
        legacy = find_legacy_blob(src.root, prefix)
        if len(legacy) > 1:
            raise AmbiguousDigest(f"digest {digest!r} matches {len(legacy)} media blobs")
        if legacy:   # HomeAgent's media store (sha256): resolved, copied in on write
            return MEDIA_STORE, BlockRef(digest="0" * 64, modality="file", mime="",
                                         size=0, created_at=Timestamp.now(),
                                         role="attachment", sha256=legacy[0])
        raise NotFound(f"digest {digest!r}: no block in the store has it")
    if len(found) > 1:
        raise AmbiguousDigest(f"digest {digest!r} matches {len(found)} blocks: "
                              + ", ".join(sorted(d[:16] for d in found)))
    return next(iter(found.values()))


def find_legacy_block(src: Lookup, block_id: str) -> tuple[str, BlockRef]:
    """The block a HomeAgent ``blk_…`` id names: in a unit (kept as legacy_id), else a
    media-store blob named by a legacy document or by graph.db's memory_blocks row."""
    def read(view: View) -> tuple[str, BlockRef] | None:
        for layer in view.units:
            for unit in units_of(src, view, layer):
                for ev in unit.manifest.events:
                    for ref in ev.blocks:
                        if ref.legacy_id == block_id:
                            return unit.path, ref
        return None
    found = src.consistent(read)
    if found is not None:
        return found
    # lazy: start-up, loaded only when used
    from fsmem.homeagent.documents import find_legacy_block
    m = find_legacy_block(src.root, block_id)
    sha = m.sha256 if m else src.graph.payload_digest(block_id)
    if sha:
        return find_block(src, sha)
    raise NotFound(f"block {block_id!r}: no unit, legacy document or graph row has it")


def read_block(src: Lookup, digest: str) -> bytes:
    """The bytes of a block (digest or unique prefix), verified against its digest."""
    path, ref = find_block(src, digest)
    if path == MEDIA_STORE:   # a HomeAgent media-store blob (verified by its sha256)
        # lazy: start-up, loaded only when used
        from fsmem.homeagent.documents import LegacyMedia, read_blob
        got = read_blob(src.root, LegacyMedia(sha256=ref.sha256))
        if got is None:
            raise NotFound(f"media blob {ref.sha256} missing from the media store")
        return got[0]
    if ref.absent:
        raise NotFound(f"block {digest}: its media was missing when it was adopted (only its "
                       "record is kept: fsck reports media-missing)")
    return blockfiles.read_block(block_path(path, ref), ref.digest)


def hit_views(src: Lookup, hits: Iterable[Hit]) -> list["HitView"]:
    """The hits as the model's view shows them: label = summary (or id), text = the events
    the query matched and their neighbours, each event whole (``views.matched_view``; the
    whole unit when nothing is left out). Read-only; a hit gone meanwhile is left out."""
    from fsmem.memory.render import HitView  # lazy: start-up, loaded only when used
    out = []
    for hit in hits:
        try:
            doc = document(src, hit.unit_id)
        except (FsmemError, OSError):
            continue
        out.append(HitView(label=hit_label(doc) or hit.summary or doc.id,
                           text=matched_view(doc.events, hit.events_matched,
                                             _near_events(src, hit.events_near))))
    return out


def _near_events(src: Lookup, near: Iterable[tuple[str, str]]) -> list[Event]:
    """The events ``Hit.events_near`` names, each unit read once; a unit or event gone
    meanwhile is left out."""
    want: dict[str, set[str]] = {}
    for unit_id, event_id in near:
        want.setdefault(unit_id, set()).add(event_id)
    out = []
    for unit_id, ids in want.items():
        try:
            doc = document(src, unit_id)
        except (FsmemError, OSError):
            continue
        out += [e for e in doc.events if e.id in ids]
    return out


def labelled(src: Lookup, hits: list[Hit]) -> list[Hit]:
    """The hits with the label every view shows (fsmem.format.views.summary_label): a unit
    stored without a summary gets the start of its text, read from its first text blocks
    only. Read-only; a unit gone meanwhile, or a HomeAgent document, keeps its hit as is."""
    def label(view: View, unit_id: str) -> dict[str, str]:
        found = view.locate(unit_id)
        return {unit_id: unit_label(found[1], read_manifest(found[1]))} if found else {}
    want = [h for h in hits if h.kind == "unit" and h.unit_id and not h.summary.strip()]
    texts: dict[str, str] = {}
    lost = []
    for hit in want:   # where the index saw it: one manifest read, no layer listed
        try:
            path = src.layout.unit_dir(hit.layer, hit.unit_id)
            texts[hit.unit_id] = unit_label(path, read_manifest(path))
        except (FsmemError, OSError, ValueError):
            lost.append(hit.unit_id)   # moved meanwhile, or a HomeAgent document
    for uid in lost:   # found on a consistent view of that unit
        try:
            texts.update(src.consistent(lambda v, u=uid: label(v, u), only=uid))
        except (FsmemError, OSError):
            pass
    asked = {id(h) for h in want}
    return [msgspec.structs.replace(h, summary=texts[h.unit_id])
            if id(h) in asked and texts.get(h.unit_id) else h for h in hits]
