"""L3 stable memory: ``ROOT/graph.db`` in HomeAgent's schema, the graph API, distillation.

A cold L2 unit is distilled into triples whose nodes are blocks (premise E): each triple writes
two text blocks named by HomeAgent's triple-endpoint rule and one relation edge between them.
Nothing is compressed (premise D): the unit itself moves whole, by one rename, into
``stablemem/``, and the graph links its blocks (``document --contains--> block``) and the text
block every fact came from (``block --contains--> edge``, ``endpoint --derived_from--> block``).

Crash order per unit: every graph row in one SQLite transaction (idempotent: check-then-insert),
commit, then the rename. A crash in between leaves the unit in ``documents/`` with its rows
present; the next run finds the rows and only moves the unit. See docs/STABLEMEM.md.
"""

from __future__ import annotations

import hashlib
import logging
import os
from functools import partial
from typing import TYPE_CHECKING, Callable, Sequence

import msgspec

from fsmem.format import fsops as fsops
from fsmem.format.blocks import hash_bytes, read_block
from fsmem.format.errors import FsmemError, NotFound, StorageError
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import block_path, read_manifest
from fsmem.format.views import Document
from fsmem.graph.distill import (
    Distiller,
    DistillError,
    RuleDistiller,
    TextPiece,
    Triple,
    unit_texts,
)
from fsmem.graph.graph import (
    GRAPH_FILE,
    BlockRow,
    CommitResult,
    Entity,
    Graph,
    Provenance,
    Recall,
    Relation,
    UnitFacts,
    sentence_block_id,
    triple_block_id,
)
from fsmem.homeagent.documents import convert_cold_legacy
from fsmem.memory.maintenance import after_write
from fsmem.memory.prune import prune as prune_l1
from fsmem.memory.reader import find_cold

if TYPE_CHECKING:
    from fsmem.memory.writer import Writer
__all__ = [
    "GRAPH_FILE", "Graph", "Entity", "Relation", "Provenance", "Recall", "CommitResult",
    "TextPiece", "UnitFacts", "BlockRow", "DistillReport", "UnitReport", "find_cold", "distill",
    "recall_from_graph", "distill_store", "unit_texts", "unit_facts", "triple_block_id",
    "sentence_block_id",
]

log = logging.getLogger("fsmem.stablemem")


# -- from a unit to graph rows ------------------------------------------------------------

def unit_blocks(mem: "Writer", doc: Document) -> list[BlockRow]:
    """Every block of a unit as a ``memory_blocks`` row; text rows carry the original text,
    except for no_memory sources, whose text stays only in the unit (linked, not indexed)."""
    rows = []
    for turn, ev in enumerate(doc.events):
        texts = {"input": ev.input, "response": ev.response}
        tools = {hash_bytes(tr.output.encode()): tr for tr in ev.tool_results}
        for ref in ev.blocks:
            text, tool = "", ""
            if ref.modality == "text":
                tr = tools.get(ref.digest) if ref.role == "tool_output" else None
                text = tr.output if tr else texts.get(ref.role, "")
                tool = tr.name if tr else ""
                if mem.plugins.no_memory(ev.source) or (tr and not mem.plugins.tool_text(
                        ev.source, tr.name, tr.output)):
                    text = ""
            rows.append(BlockRow(id=ref.digest, event_id=ev.id, turn=turn,
                                 modality=ref.modality, mime=ref.mime, size=ref.size,
                                 created_at=ref.created_at, width=ref.width or 0,
                                 height=ref.height or 0, text=text, tool=tool,
                                 semantic_type=ref.semantic_type,
                                 payload_digest=ref.sha256 or _sha256_of(doc.path, ref)))
    return rows


def _sha256_of(unit_dir: str, ref) -> str:
    """HomeAgent's payload_digest of a media block (sha256 of its bytes); '' for text."""
    if ref.modality == "text" or ref.absent:
        return ref.sha256 if ref.absent else ""
    return hashlib.sha256(read_block(block_path(unit_dir, ref), ref.digest)).hexdigest()


def unit_facts(mem: "Writer", doc: Document, distiller: Distiller,
               texts: Callable[["Writer", Document], list[TextPiece]] = unit_texts) -> UnitFacts:
    """Run the distiller over a unit's text pieces (may raise DistillError)."""
    facts: list[tuple[TextPiece, Triple]] = []
    for piece in texts(mem, doc):
        for t in distiller.extract(piece.text, source=piece.source):
            if t.subject.strip() and t.object.strip() and t.subject.strip() != t.object.strip():
                facts.append((piece, t))
    return UnitFacts(unit_id=doc.id, summary=doc.summary, created_at=doc.created_at,
                     blocks=unit_blocks(mem, doc), facts=facts)


# -- distillation -------------------------------------------------------------------------

class UnitReport(msgspec.Struct, kw_only=True):
    unit_id: str
    triples: list[Triple] = []
    events: list[str] = []       # the event id of each triple, in the same order
    moved: bool = False


class DistillReport(msgspec.Struct, kw_only=True):
    """What one distillation run did (or, with ``dry_run``, would do)."""

    dry_run: bool
    distiller: str
    cold: int = 0
    distilled: list[str] = []     # moved documents/ -> stablemem/
    no_facts: list[str] = []      # cold, but no triple: left in documents/
    kept_private: list[str] = []  # cold, but private to its agent: left in documents/
    triples: int = 0
    blocks_added: int = 0
    edges_added: int = 0
    units: list[UnitReport] = []
    committed: int = 0            # units whose graph rows this run committed
    error: str = ""               # why the run stopped early after committing ('' if it did not)


def distill(mem: "Writer", *, max_age_s: float = 72 * 3600, max_access: int = 2,
            distiller: Distiller | None = None, dry_run: bool = False,
            now: Timestamp | None = None, move_empty: bool = False,
            texts: Callable[["Writer", Document], list[TextPiece]] = unit_texts,
            progress: Callable[[int, int], None] | None = None,
            busy_timeout_s: float = 10.0) -> DistillReport:
    """Distil cold L2 units into graph.db and move each, whole, into stablemem/.

    Per unit: extract (outside the lock: an LLM may be slow), then under the writer lock one
    graph transaction and one rename. A unit with no triple stays in documents/ unless
    ``move_empty``. An error (a DistillError, a full disk, graph.db locked past
    ``busy_timeout_s``) stops the run. Before any graph commit it is raised (nothing was
    written); after one, the run succeeds with what it did and ``report.error`` says why it
    stopped: a unit whose rows are committed but whose move failed is moved by the next run
    (the commit is idempotent). ``progress(done, total)`` is told as the units are worked.
    """
    distiller = distiller or RuleDistiller()
    report = DistillReport(dry_run=dry_run, distiller=distiller.name)
    cold = find_cold(mem, max_age_s, max_access, now=now)
    report.cold = len(cold)
    graph: Graph | None = None
    try:
        for n, unit_id in enumerate(cold):
            if progress and n:
                progress(n, len(cold))
            try:
                if not dry_run and graph is None:
                    graph = Graph(mem, busy_timeout_s=busy_timeout_s)
                _distill_unit(mem, graph, unit_id, distiller, texts, move_empty, report)
            except (FsmemError, OSError) as exc:
                if not report.committed:
                    raise   # nothing written in this run: the run failed
                report.error = f"stopped at unit {unit_id}: {exc}"
                log.warning("distill: %s (%d unit(s) distilled before it)", report.error,
                            len(report.distilled))
                break
    finally:
        if graph is not None:
            graph.close()
    if progress and cold:
        progress(len(cold), len(cold))
    return report


def distill_store(mem: "Writer", *, max_age_s: float = 72 * 3600, max_access: int = 2,
                  distiller: Distiller | None = None, dry_run: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> DistillReport:
    """``Memory.distill``: cold legacy HomeAgent documents first become new-format units,
    whole (unless ``dry_run``), then ``distill`` runs."""
    if not dry_run:
        convert_cold_legacy(mem, max_age_s, max_access)
    return distill(mem, max_age_s=max_age_s, max_access=max_access, distiller=distiller,
                   dry_run=dry_run, progress=progress)


def _distill_unit(mem: "Writer", graph: Graph | None, unit_id: str, distiller: Distiller,
                  texts: Callable[["Writer", Document], list[TextPiece]], move_empty: bool,
                  report: DistillReport) -> None:
    """Extract one cold unit and (unless a dry run: ``graph`` None) commit and move it."""
    try:
        doc = mem.document(unit_id)
    except NotFound:
        return  # recalled by someone else since the listing
    except (FsmemError, OSError) as exc:
        log.warning("distill: skipping unreadable unit %s: %s", unit_id, exc)
        return
    if doc.layer != "documents":
        return
    if doc.private:   # L3 is shared: a private unit's facts would reach every agent
        report.kept_private.append(unit_id)
        return
    try:
        unit = unit_facts(mem, doc, distiller, texts)
    except DistillError as exc:
        raise DistillError(f"unit {unit_id}: {exc} (nothing written for it; "
                           f"{len(report.distilled)} unit(s) distilled before it)") from exc
    except (FsmemError, OSError):
        if mem.layout.vanished(doc.path):
            return   # recalled or distilled by another process while we read it
        raise
    entry = UnitReport(unit_id=unit_id, triples=[t for _, t in unit.facts],
                       events=[p.event_id for p, _ in unit.facts])
    report.triples += len(unit.facts)
    if not unit.facts and not move_empty:
        report.no_facts.append(unit_id)
        report.units.append(entry)
        return
    if graph is not None:
        if not _commit_and_move(mem, graph, unit, report):
            return
        entry.moved = True
        report.distilled.append(unit_id)
    report.units.append(entry)


def _commit_and_move(mem: "Writer", graph: Graph, unit: UnitFacts, report: DistillReport) -> bool:
    """One graph transaction, then one rename. Once the rows are committed a failing move
    does not fail the run: it raises only when the unit stayed in documents/ (the next run
    moves it), and a rename that happened counts as moved."""
    with mem.store.locked():
        if not os.path.isdir(mem.store.unit_dir("documents", unit.unit_id)):
            return False  # moved by another process after we read it
        result = graph.commit_unit(unit)
        report.committed += 1
        report.blocks_added += result.blocks_added
        report.edges_added += result.edges_added
        try:
            mem.store.move(unit.unit_id, "documents", "stablemem")
        except (FsmemError, OSError) as exc:
            if not os.path.isdir(mem.store.unit_dir("stablemem", unit.unit_id)):
                raise StorageError(getattr(exc, "errno", None) or 0,
                                   f"unit {unit.unit_id}: graph rows stored, but it could not "
                                   f"move into stablemem/ (the next distill moves it): {exc}"
                                   ) from exc
            report.error = (f"unit {unit.unit_id}: moved into stablemem/, but its move may "
                            f"not be durable yet: {exc}")
            log.warning("distill: %s", report.error)
    return True


def recall_from_graph(mem: "Writer", names: Sequence[str] | str, depth: int = 2, *,
                      prune: Callable[[str], object] | None = None) -> list[str]:
    """Bring the original units of the facts around ``names`` back into L1, each by one
    rename (stablemem/ or documents/ -> context/), as ``Memory.recall`` does; returns them.
    ``prune(query)``: the memory's prune (``Memory.prune``; default: the plain one)."""
    if isinstance(names, str):
        names = [names]
    with Graph(mem) as graph:
        found = graph.recall(names, depth)
    wanted: dict[str, str] = {}      # unit id -> an event id it should hold
    for rel in found.relations:
        for p in rel.provenance:
            for uid in ([p.unit_id] if p.unit_id else []) + p.candidates:
                wanted.setdefault(uid, p.event_id)
    moved: list[str] = []
    with mem.store.locked():
        for unit_id, event_id in wanted.items():
            layer, unit_id = _locate(mem, unit_id, event_id)
            if layer not in ("stablemem", "documents") or unit_id in moved:
                continue
            try:
                _move_to_context(mem, layer, unit_id)
            except (FsmemError, OSError) as exc:   # once one unit moved, the recall succeeds
                if os.path.isdir(mem.store.unit_dir(mem.l1, unit_id)):
                    moved.append(unit_id)          # renamed; a parent fsync failed after it
                if not moved:
                    raise
                log.warning("%s: recall stopped after %d unit(s); %s stays in %s/: %s",
                            mem.root, len(moved), unit_id, layer, exc)
                break
            moved.append(unit_id)
    if moved and mem.auto_prune:
        prune = prune or partial(prune_l1, mem)
        after_write(mem.store, lambda: prune(query=" ".join(names)))
    return moved


def _move_to_context(mem: "Writer", layer: str, unit_id: str) -> None:
    src = mem.store.unit_dir(layer, unit_id)
    fsops.utime(src, (Timestamp.now().ns,) * 2)  # arrival in L1
    if mem.store.sync:
        fsops.fsync_dir(src)
    mem.store.move(unit_id, layer, mem.l1)


def _locate(mem: "Writer", unit_id: str, event_id: str) -> tuple[str, str]:
    """(layer, unit id) holding the fact: the unit named by the graph, else (after a prune
    regrouped events) whichever unit now holds the event."""
    try:
        layer, _ = mem.store.locate(unit_id)
        return layer, unit_id
    except (NotFound, FsmemError):
        pass
    if event_id:
        for layer in ("stablemem", "documents", mem.l1):
            for uid in mem.store.iter_units(layer):
                try:
                    m = read_manifest(mem.store.unit_dir(layer, uid))
                except (FsmemError, OSError):
                    continue
                if any(ev.id == event_id for ev in m.events):
                    return layer, uid
    return "", unit_id
