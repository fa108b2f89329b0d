"""``ROOT/graph.db`` in HomeAgent's SQLite schema (reference section 4) and the graph API.

Tables ``memory_blocks``, ``memory_block_edges`` and ``documents``, column for column; an
existing HomeAgent graph.db is only added to (missing columns by ADD COLUMN, rows by
check-then-insert). A triple is two text blocks named by HomeAgent's triple-endpoint rule and
one relation edge between them; ``Graph.recall`` walks relations from named entities and
returns them with their provenance. Distillation, which fills the graph, is fsmem.memory.stablemem.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import sqlite3
import stat
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence

import msgspec

from fsmem.format.errors import FsmemError
from fsmem.format.timestamps import Timestamp
from fsmem.graph.distill import TextPiece, Triple
from fsmem.homeagent import graph_tables as legacy_g
from fsmem.homeagent.documents import sqlite_readonly

if TYPE_CHECKING:
    from fsmem.format.layout import Layout

__all__ = ["GRAPH_FILE", "Graph", "Entity", "Relation", "Provenance", "Recall", "CommitResult",
           "BlockRow", "UnitFacts", "triple_block_id", "sentence_block_id"]

log = logging.getLogger("fsmem.graph")

GRAPH_FILE = "graph.db"
STRUCTURAL = ("contains", "derived_from", "depicts")
_CHUNK = 500  # SQLite host parameters per IN (...) list

# HomeAgent's DDL (reference §4), column for column. Existing tables are only ever added to.
_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "memory_blocks": [
        ("id", "TEXT PRIMARY KEY"), ("modality", "TEXT NOT NULL"),
        ("text_content", "TEXT DEFAULT ''"), ("payload_digest", "TEXT DEFAULT ''"),
        ("mime", "TEXT DEFAULT ''"), ("size", "INTEGER DEFAULT 0"),
        ("width", "INTEGER DEFAULT 0"), ("height", "INTEGER DEFAULT 0"),
        ("vector", "TEXT DEFAULT ''"), ("fingerprint", "TEXT DEFAULT ''"),
        ("source", "TEXT DEFAULT ''"), ("tool", "TEXT DEFAULT ''"), ("scene", "TEXT DEFAULT ''"),
        ("semantic_type", "TEXT DEFAULT ''"),
        ("created_at", "TIMESTAMP DEFAULT CURRENT_TIMESTAMP"),
        ("updated_at", "TIMESTAMP DEFAULT CURRENT_TIMESTAMP")],
    "memory_block_edges": [
        ("id", "INTEGER PRIMARY KEY AUTOINCREMENT"), ("source_kind", "TEXT NOT NULL"),
        ("source_id", "TEXT NOT NULL"), ("target_kind", "TEXT NOT NULL"),
        ("target_id", "TEXT NOT NULL"), ("edge_type", "TEXT NOT NULL"),
        ("created_at", "TIMESTAMP DEFAULT CURRENT_TIMESTAMP"),
        ("confidence", "REAL DEFAULT 0"), ("session_id", "TEXT DEFAULT ''"),
        ("turn_id", "INTEGER DEFAULT 0"), ("status", "TEXT DEFAULT ''"),
        ("merged_into", "TEXT DEFAULT ''")],
    "documents": [
        ("id", "TEXT PRIMARY KEY"), ("summary", "TEXT DEFAULT ''"),
        ("created_at", "TIMESTAMP DEFAULT CURRENT_TIMESTAMP")],
}
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS idx_memory_blocks_modality ON memory_blocks(modality)",
    "CREATE INDEX IF NOT EXISTS idx_memory_blocks_digest ON memory_blocks(payload_digest)",
    "CREATE INDEX IF NOT EXISTS idx_mbe_source ON memory_block_edges(source_kind, source_id)",
    "CREATE INDEX IF NOT EXISTS idx_mbe_target ON memory_block_edges(target_kind, target_id)",
    # fsmem's own addition: the check-then-insert key, so a hub node (a "我" with thousands of
    # edges) does not make every insert scan all of its edges.
    "CREATE INDEX IF NOT EXISTS idx_fsmem_mbe_key ON memory_block_edges(source_id, target_id, "
    "edge_type)",
)


def triple_block_id(name: str) -> str:
    """HomeAgent's TripleBlockID: ``blk_ent_`` + hex of the first 12 bytes of sha256(trim)."""
    return "blk_ent_" + hashlib.sha256(name.strip().encode()).hexdigest()[:24]


def sentence_block_id(sentence: str) -> str:
    """HomeAgent's SentenceBlockID: ``blk_src_`` + the same construction over the sentence."""
    return "blk_src_" + hashlib.sha256(sentence.strip().encode()).hexdigest()[:24]


def _sqlite_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A SQLite failure (locked past the busy timeout, a damaged file) as an FsmemError."""
    @functools.wraps(fn)
    def wrapper(self: "Graph", *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise FsmemError(f"{self.path}: {fn.__name__} failed: {exc}") from exc
    return wrapper


def _db_time(ts: Timestamp) -> str:
    """go-sqlite3's rendering of a time.Time: ``2026-10-06 11:00:02.413370001+08:00``."""
    text = ts.isoformat().replace("T", " ", 1)
    return text[:-1] + "+00:00" if text.endswith("Z") else text


# -- result shapes ------------------------------------------------------------------------

class Entity(msgspec.Struct, kw_only=True):
    """A graph node that is a triple endpoint (SDK Entity, plus its block id)."""

    name: str
    type: str
    block_id: str
    mention_count: int = 0


class Provenance(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Where a fact was read: the unit, the event inside it, and the text block."""

    block: str
    event_id: str = ""
    unit_id: str = ""
    turn: int = 0
    candidates: list[str] = []   # every unit the graph lists as holding that event's block
    text: str = ""               # a sentence block not from a unit (HomeAgent's blk_src_): its text


class Relation(msgspec.Struct, kw_only=True):
    """A relation edge (SDK Relation) with the edge row and its provenance."""

    source_name: str
    target_name: str
    relation_type: str
    confidence: float
    edge_id: int
    source_id: str
    target_id: str
    session_id: str = ""
    provenance: list[Provenance] = []


class Recall(msgspec.Struct, kw_only=True):
    """SDK MemoryAPI.Recall's answer: entities and relations (with provenance)."""

    entities: list[Entity] = []
    relations: list[Relation] = []


class CommitResult(msgspec.Struct, kw_only=True):
    blocks_added: int = 0
    edges_added: int = 0
    documents_added: int = 0


@dataclass(frozen=True)
class BlockRow:
    """A unit's block as a ``memory_blocks`` row, and the event that holds it."""

    id: str
    event_id: str
    turn: int
    modality: str
    mime: str
    size: int
    created_at: Timestamp
    width: int = 0
    height: int = 0
    text: str = ""
    tool: str = ""
    semantic_type: str = ""
    payload_digest: str = ""


@dataclass
class UnitFacts:
    """Everything one unit contributes to the graph."""

    unit_id: str
    summary: str
    created_at: Timestamp
    blocks: list[BlockRow]
    facts: list[tuple[TextPiece, Triple]] = field(default_factory=list)


# -- the graph ----------------------------------------------------------------------------

class HasLayout(Protocol):
    """What ``Graph`` reads of a memory (a ``Reader`` or ``Memory`` is one): where the store
    is, whether it may write, and (a ``Memory``) its store's durability."""

    layout: "Layout"


class Graph:
    """``graph.db``: HomeAgent's block graph, opened lazily; reads never create the file.

    ``Graph(mem)`` uses ``ROOT/graph.db`` with the store's durability; ``Graph(path)`` any file.
    Writes from a Memory should run under ``mem.store.locked()`` (distil and recall do).
    """

    def __init__(self, target: "HasLayout | str | os.PathLike[str]", *, sync: bool | None = None,
                 busy_timeout_s: float = 10.0) -> None:
        layout = getattr(target, "layout", None)
        self.readonly = layout is not None and not getattr(target, "writable", False)
        if layout is not None:
            self.path = os.path.join(layout.root, GRAPH_FILE)
            store_sync = getattr(getattr(target, "store", None), "sync", True)
            self.sync = store_sync if sync is None else sync
        else:
            path = os.fspath(target)  # type: ignore[arg-type]
            self.path = os.path.join(path, GRAPH_FILE) if os.path.isdir(path) else path
            self.sync = True if sync is None else sync
        self.busy_timeout_s = busy_timeout_s
        self._db: sqlite3.Connection | None = None
        self._ro: sqlite3.Connection | None = None   # reads: never creates or changes anything
        self._lock = threading.RLock()

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for db in (self._db, self._ro):
                if db is not None:
                    db.close()
            self._db = self._ro = None

    @property
    def connection(self) -> sqlite3.Connection:
        """The open connection, creating graph.db and its schema if needed."""
        db = self._open(create=True)
        assert db is not None
        return db

    def _open(self, *, create: bool) -> sqlite3.Connection | None:
        """``create=False`` is a read: the writer's connection if this process has one, else
        a read-only connection that creates no table, file or sidecar (an old HomeAgent
        graph.db stays byte for byte as it was). ``create=True`` opens for writing."""
        with self._lock:
            if self._db is not None:
                return self._db
            _check_regular(self.path)
            if create and self.readonly:
                raise FsmemError(f"{self.path}: opened through a reader; the graph cannot be "
                                  "written")
            if not create:
                if self._ro is None and os.path.isfile(self.path):
                    try:
                        self._ro = sqlite_readonly(self.path, timeout=self.busy_timeout_s)
                        self._ro.execute(
                            f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
                    except sqlite3.Error as exc:
                        raise FsmemError(f"{self.path}: cannot read the graph: {exc}") from exc
                return self._ro
            if self._ro is not None:
                self._ro.close()
                self._ro = None
            try:
                db = sqlite3.connect(self.path, timeout=self.busy_timeout_s,
                                     isolation_level=None, check_same_thread=False)
                db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(f"PRAGMA synchronous={'FULL' if self.sync else 'NORMAL'}")
                db.execute("PRAGMA foreign_keys=ON")
                _ensure_schema(db)
            except sqlite3.Error as exc:
                raise FsmemError(f"{self.path}: cannot open the graph: {exc}") from exc
            self._db = db
            return db

    # -- writing ----------------------------------------------------------------------------
    @_sqlite_errors
    def commit(self, triples: Iterable[Triple], *, session_id: str = "",
               turn_id: int = 0) -> CommitResult:
        """SDK MemoryAPI.Commit: endpoint blocks and relation edges (and, when a triple
        carries ``sentence_text``, HomeAgent's sentence block ``--contains-->`` the edge)."""
        with self._write() as w:
            for t in triples:
                edge = w.relation(t, session_id=session_id, turn_id=turn_id)
                if edge is not None and t.sentence_text.strip():
                    sid = sentence_block_id(t.sentence_text)
                    w.block(sid, "text", text=t.sentence_text.strip(), source="sentence")
                    w.edge("block", sid, "edge", str(edge), "contains")
            return w.result

    @_sqlite_errors
    def commit_unit(self, unit: UnitFacts) -> CommitResult:
        """All rows of one distilled unit in one transaction; re-running adds nothing."""
        with self._write() as w:
            w.document(unit.unit_id, unit.summary, unit.created_at)
            for b in unit.blocks:
                w.block(b.id, b.modality, text=b.text, source="document", mime=b.mime,
                        size=b.size, width=b.width, height=b.height, tool=b.tool,
                        semantic_type=b.semantic_type, payload_digest=b.payload_digest,
                        created_at=b.created_at)
                w.edge("document", unit.unit_id, "block", b.id, "contains", session_id=b.event_id,
                       turn_id=b.turn)
            for piece, t in unit.facts:
                edge = w.relation(t, session_id=unit.unit_id, turn_id=piece.turn)
                if edge is None:
                    continue
                w.edge("block", piece.block, "edge", str(edge), "contains",
                       session_id=piece.event_id, turn_id=piece.turn)
                for name in {t.subject, t.object}:
                    w.edge("block", triple_block_id(name), "block", piece.block, "derived_from",
                           session_id=piece.event_id, turn_id=piece.turn)
            return w.result

    def _write(self) -> "_Writer":
        return _Writer(self)

    # -- reading ----------------------------------------------------------------------------
    @_sqlite_errors
    def has_document(self, unit_id: str) -> bool:
        db = self._open(create=False)
        return bool(db and "documents" in legacy_g.tables(db) and
                    db.execute("SELECT 1 FROM documents WHERE id=?", (unit_id,)).fetchone())

    @_sqlite_errors
    def payload_digest(self, block_id: str) -> str:
        """The ``payload_digest`` graph.db records for a block id ('' when none)."""
        db = self._open(create=False)
        if db is None or "memory_blocks" not in legacy_g.tables(db):
            return ""
        row = db.execute("SELECT payload_digest FROM memory_blocks WHERE id=?",
                         (block_id,)).fetchone()
        return (row[0] or "") if row else ""

    @_sqlite_errors
    def seeds(self, names: Sequence[str], *, like_limit: int = 20) -> list[str]:
        """Node ids for names: the exact endpoint id first, else a LIKE over endpoint texts
        (triple endpoints and migrated legacy entities); and the legacy ``entities`` rows."""
        db = self._open(create=False)
        if db is None:
            return []
        have = legacy_g.tables(db)
        out: dict[str, None] = {}
        for name in names:
            name = name.strip()
            if not name:
                continue
            for found in legacy_g.entity_seeds(db, have, name, _like(name), like_limit):
                out.setdefault(found, None)
            if "memory_blocks" not in have:
                continue
            bid = triple_block_id(name)
            if db.execute("SELECT 1 FROM memory_blocks WHERE id=?", (bid,)).fetchone():
                out.setdefault(bid, None)
                continue
            for (found,) in db.execute(
                    "SELECT id FROM memory_blocks WHERE modality='text' AND source IN "
                    f"{legacy_g.NODE_SOURCES!r} AND text_content LIKE ? ESCAPE '\\' "
                    "ORDER BY length(text_content), id LIMIT ?", (_like(name), like_limit)):
                out.setdefault(found, None)
        return list(out)

    @_sqlite_errors
    def recall(self, names: Sequence[str] | str, depth: int = 2, *,
               provenance: bool = True) -> Recall:
        """SDK MemoryAPI.Recall: entities and relations within ``depth`` hops of ``names``
        (breadth first over active relation edges, both directions), with provenance."""
        if isinstance(names, str):
            names = [names]
        db = self._open(create=False)
        seeds = self.seeds(names)
        if db is None or not seeds:
            return Recall()
        visited = dict.fromkeys(seeds)
        frontier = list(seeds)
        edges: dict[int, tuple] = {}
        for _ in range(max(depth, 0)):
            if not frontier:
                break
            nxt: list[str] = []
            for row in self._incident(db, frontier):
                if row[0] in edges:
                    continue
                edges[row[0]] = row
                for node in (row[1], row[2]):
                    if node not in visited:
                        visited[node] = None
                        nxt.append(node)
            frontier = nxt
        return self._answer(db, list(visited), edges, provenance)

    def neighbors(self, name: str, depth: int = 2) -> Recall:
        return self.recall([name], depth)

    @_sqlite_errors
    def search(self, text: str, limit: int = 20) -> Recall:
        """Entities whose name contains ``text``, relations whose type does, and the
        relations touching those entities (one hop)."""
        db = self._open(create=False)
        if db is None or not text.strip():
            return Recall()
        pattern = _like(text.strip())
        have = legacy_g.tables(db)
        ids, legacy_rows = legacy_g.search_rows(db, have, pattern, limit)
        found: list[tuple] = []
        if {"memory_blocks", "memory_block_edges"} <= have:
            ids += [r[0] for r in db.execute(
                f"SELECT id FROM memory_blocks WHERE modality='text' AND source IN "
                f"{legacy_g.NODE_SOURCES!r} AND text_content LIKE ? ESCAPE '\\' "
                "ORDER BY length(text_content), id LIMIT ?", (pattern, limit))]
            cols, status = legacy_g.edge_select(db)
            found = db.execute(
                f"SELECT {cols} "
                "FROM memory_block_edges WHERE source_kind='block' AND target_kind='block' AND "
                f"{status} AND edge_type NOT IN {STRUCTURAL!r} AND edge_type "
                "LIKE ? ESCAPE '\\' ORDER BY id LIMIT ?", (pattern, limit)).fetchall()
        rows = {r[0]: r for r in self._incident(db, ids)} if ids else {}
        for row in [*found, *legacy_rows]:
            rows.setdefault(row[0], row)
        return self._answer(db, ids, rows, True)

    @_sqlite_errors
    def facts_of(self, unit_id: str) -> Recall:
        """The relations read from one unit: those a text block of its events asserts
        (``document --contains--> block --contains--> edge``), with their provenance."""
        db = self._open(create=False)
        if db is None or "memory_block_edges" not in legacy_g.tables(db):
            return Recall()
        cols, status = legacy_g.edge_select(db)
        rows = db.execute(
            f"SELECT {cols} FROM memory_block_edges WHERE source_kind='block' AND "
            f"target_kind='block' AND {status} AND edge_type NOT IN {STRUCTURAL!r} AND "
            "CAST(id AS TEXT) IN (SELECT c.target_id FROM memory_block_edges c JOIN "
            "memory_block_edges d ON d.target_kind='block' AND d.target_id=c.source_id "
            "WHERE c.target_kind='edge' AND c.edge_type='contains' AND "
            "c.source_kind='block' AND d.source_kind='document' AND d.source_id=? AND "
            "d.edge_type='contains') ORDER BY id", (unit_id,)).fetchall()
        ends = list(dict.fromkeys(n for r in rows for n in (r[1], r[2])))
        return self._answer(db, ends, {r[0]: r for r in rows}, True)

    def _answer(self, db: sqlite3.Connection, entity_ids: list[str], rows: dict[int, tuple],
                provenance: bool) -> Recall:
        """Entities (with names, types, mention counts) and relations (with provenance)."""
        ends = [n for r in rows.values() for n in (r[1], r[2])]
        nodes = self._nodes(db, list(dict.fromkeys(entity_ids + ends)))
        prov = self.provenance(list(rows)) if provenance else {}
        rels, seen = [], set()
        # Block edges first (positive ids), then legacy rows: a fact migrated into blocks
        # and still in the legacy tables is listed once.
        for e, s, d, t, c, ss in sorted(rows.values(), key=lambda r: (r[0] < 0, abs(r[0]))):
            key = (nodes.get(s, ("", ""))[0], t, nodes.get(d, ("", ""))[0])
            if key in seen:
                continue
            seen.add(key)
            rels.append(Relation(source_name=key[0], target_name=key[2], relation_type=t,
                                 confidence=float(c or 0), edge_id=e, source_id=s, target_id=d,
                                 session_id=ss or "", provenance=prov.get(e, [])))
        counts = self._mentions(db, entity_ids)
        ents = [Entity(name=nodes[n][0], type=nodes[n][1] or "Concept", block_id=n,
                       mention_count=counts.get(n, 0)) for n in entity_ids if n in nodes]
        return Recall(entities=ents, relations=rels)

    @_sqlite_errors
    def provenance(self, edge_ids: Sequence[int]) -> dict[int, list[Provenance]]:
        """For each relation edge: the text blocks that assert it (``block --contains--> edge``)
        with their event, and the unit(s) whose ``document --contains--> block`` edge names
        that event."""
        db = self._open(create=False)
        out: dict[int, list[Provenance]] = {}
        if db is None or not edge_ids:
            return out
        have = legacy_g.tables(db)
        for edge_id, (sid, text) in legacy_g.sentence_texts(db, have, edge_ids).items():
            out.setdefault(edge_id, []).append(Provenance(block=f"sentence:{sid}", text=text))
        keys = [str(e) for e in edge_ids if e >= 0]
        if "memory_block_edges" not in have:
            return out
        sess_cols = "session_id, turn_id" if "session_id" in {
            r[1] for r in db.execute("PRAGMA table_info(memory_block_edges)")} else "'', 0"
        found: list[tuple[int, str, str, int]] = []
        for part in _chunks(keys):
            q = ",".join("?" * len(part))
            found += [(int(t), s, ev or "", turn or 0) for s, t, ev, turn in db.execute(
                f"SELECT source_id, target_id, {sess_cols} FROM memory_block_edges "
                f"WHERE target_kind='edge' AND target_id IN ({q}) AND edge_type='contains' "
                "AND source_kind='block' ORDER BY id", part)]
        for edge_id, block, event_id, turn in found:
            units = [u for (u,) in db.execute(
                "SELECT source_id FROM memory_block_edges WHERE target_kind='block' AND "
                "target_id=? AND source_kind='document' AND edge_type='contains' AND "
                "session_id=? ORDER BY id", (block, event_id))] if event_id else []
            text = ""
            if not units:
                row = db.execute("SELECT text_content FROM memory_blocks WHERE id=?",
                                 (block,)).fetchone()
                text = (row[0] or "") if row else ""
            out.setdefault(edge_id, []).append(Provenance(
                block=block, event_id=event_id, unit_id=units[-1] if units else "", turn=turn,
                candidates=units if len(units) > 1 else [], text=text))
        return out

    @_sqlite_errors
    def stats(self) -> dict[str, int]:
        db = self._open(create=False)
        have = legacy_g.tables(db) if db is not None else set()
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] if t in have else 0
                for t in _COLUMNS}

    @staticmethod
    def _incident(db: sqlite3.Connection, nodes: list[str]) -> list[tuple]:
        """Relation edges touching ``nodes``: active (or migrated, status unset) block
        edges, and legacy ``relations`` rows of ``ent:`` nodes."""
        have = legacy_g.tables(db)
        rows: list[tuple] = legacy_g.incident(db, have, nodes)
        blocks = [n for n in nodes if not n.startswith(legacy_g.ENT)]
        if "memory_block_edges" not in have:
            return rows
        cols, status = legacy_g.edge_select(db)
        for part in _chunks(blocks):
            q = ",".join("?" * len(part))
            for side in ("source", "target"):
                rows += db.execute(
                    f"SELECT {cols} "
                    f"FROM memory_block_edges WHERE {side}_kind='block' AND {side}_id IN ({q}) "
                    f"AND source_kind='block' AND target_kind='block' AND "
                    f"{status} AND edge_type NOT IN {STRUCTURAL!r}",
                    part).fetchall()
        return rows

    @staticmethod
    def _nodes(db: sqlite3.Connection, ids: list[str]) -> dict[str, tuple[str, str]]:
        have = legacy_g.tables(db)
        out = legacy_g.nodes(db, have, ids)
        if "memory_blocks" not in have:
            return out
        for part in _chunks([i for i in ids if not i.startswith(legacy_g.ENT)]):
            q = ",".join("?" * len(part))
            for bid, text, stype in db.execute(
                    f"SELECT id, text_content, semantic_type FROM memory_blocks WHERE id IN ({q})",
                    part):
                out[bid] = (text or "", stype or "")
        return out

    @staticmethod
    def _mentions(db: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
        """How many text blocks a node was read from (its ``derived_from`` edges); a legacy
        entity's own mention_count."""
        have = legacy_g.tables(db)
        out = legacy_g.mentions(db, have, ids)
        if "memory_block_edges" not in have:
            return out
        for part in _chunks([i for i in ids if not i.startswith(legacy_g.ENT)]):
            q = ",".join("?" * len(part))
            for bid, n in db.execute(
                    "SELECT source_id, count(*) FROM memory_block_edges WHERE source_kind='block' "
                    f"AND source_id IN ({q}) AND edge_type='derived_from' GROUP BY source_id",
                    part):
                out[bid] = n
        return out


class _Writer:
    """One ``BEGIN IMMEDIATE … COMMIT`` of check-then-insert rows, counting what it added."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.result = CommitResult()
        self.now = _db_time(Timestamp.now())

    def __enter__(self) -> "_Writer":
        self.graph._lock.acquire()
        try:
            self.db = self.graph.connection
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.graph._lock.release()
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None:
                self.db.execute("COMMIT")
            else:
                self.db.execute("ROLLBACK")
        except sqlite3.Error as err:
            if exc_type is None:
                raise FsmemError(f"{self.graph.path}: graph commit failed: {err}") from err
        finally:
            self.graph._lock.release()

    def block(self, bid: str, modality: str, *, text: str = "", source: str = "", mime: str = "",
              size: int = 0, width: int = 0, height: int = 0, tool: str = "",
              semantic_type: str = "", payload_digest: str = "",
              created_at: Timestamp | None = None) -> None:
        when = _db_time(created_at) if created_at is not None else self.now
        cur = self.db.execute(
            "INSERT OR IGNORE INTO memory_blocks(id, modality, text_content, payload_digest, mime, "
            "size, width, height, source, tool, semantic_type, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (bid, modality, text, payload_digest, mime, size, width or 0, height or 0, source,
             tool, semantic_type, when, when))
        if cur.rowcount:
            self.result.blocks_added += 1
        elif semantic_type:
            # HomeAgent's upsert fills semantic_type only with a non-empty value; we only fill
            # an empty one, so re-running never changes a row that is already typed.
            self.db.execute("UPDATE memory_blocks SET semantic_type=? WHERE id=? AND "
                            "(semantic_type IS NULL OR semantic_type='')", (semantic_type, bid))

    def document(self, unit_id: str, summary: str, created_at: Timestamp) -> None:
        cur = self.db.execute("INSERT OR IGNORE INTO documents(id, summary, created_at) "
                              "VALUES (?,?,?)", (unit_id, summary, _db_time(created_at)))
        self.result.documents_added += cur.rowcount

    def edge(self, skind: str, sid: str, tkind: str, tid: str, etype: str, *,
             session_id: str = "", turn_id: int = 0) -> int:
        """A structural edge, keyed by its ends, type and session (no UNIQUE in the DDL)."""
        row = self.db.execute(
            "SELECT id FROM memory_block_edges WHERE source_kind=? AND source_id=? AND "
            "target_kind=? AND target_id=? AND edge_type=? AND session_id=? LIMIT 1",
            (skind, sid, tkind, tid, etype, session_id)).fetchone()
        if row:
            return int(row[0])
        cur = self.db.execute(
            "INSERT OR IGNORE INTO memory_block_edges(source_kind, source_id, target_kind, "
            "target_id, edge_type, created_at, confidence, session_id, turn_id, status) "
            "VALUES (?,?,?,?,?,?,0,?,?,'')", (skind, sid, tkind, tid, etype, self.now,
                                               session_id, turn_id))
        return self._added(cur, skind, sid, tkind, tid, etype)

    def _added(self, cur: sqlite3.Cursor, *key: str) -> int:
        """The new row id; or, where an old HomeAgent DDL still has UNIQUE(kinds, ids, type)
        and ignored the insert, the id of the row that holds that key."""
        if cur.rowcount:
            self.result.edges_added += 1
            return int(cur.lastrowid or 0)
        row = self.db.execute(
            "SELECT id FROM memory_block_edges WHERE source_kind=? AND source_id=? AND "
            "target_kind=? AND target_id=? AND edge_type=? ORDER BY id LIMIT 1", key).fetchone()
        return int(row[0])

    def relation(self, t: Triple, *, session_id: str, turn_id: int) -> int | None:
        """The endpoint blocks and the active relation edge of a triple: one edge per
        (subject, relation, object), whichever session first asserted it."""
        subject, relation, obj = t.subject.strip(), t.relation.strip(), t.object.strip()
        if not subject or not relation or not obj or relation in STRUCTURAL:
            return None
        src, dst = triple_block_id(subject), triple_block_id(obj)
        self.block(src, "text", text=subject, source="triple", semantic_type=t.subject_type)
        self.block(dst, "text", text=obj, source="triple", semantic_type=t.object_type)
        row = self.db.execute(
            "SELECT id FROM memory_block_edges WHERE source_kind='block' AND source_id=? AND "
            "target_kind='block' AND target_id=? AND edge_type=? AND status='active' "
            "ORDER BY id LIMIT 1", (src, dst, relation)).fetchone()
        if row:
            return int(row[0])
        cur = self.db.execute(
            "INSERT OR IGNORE INTO memory_block_edges(source_kind, source_id, target_kind, "
            "target_id, edge_type, created_at, confidence, session_id, turn_id, status) "
            "VALUES ('block',?,'block',?,?,?,?,?,?,'active')",
            (src, dst, relation, self.now, float(t.confidence), session_id, turn_id))
        return self._added(cur, "block", src, "block", dst, relation)


def _ensure_schema(db: sqlite3.Connection) -> None:
    """CREATE TABLE IF NOT EXISTS in HomeAgent's DDL; add missing columns, never drop any."""
    for table, cols in _COLUMNS.items():
        db.execute(f"CREATE TABLE IF NOT EXISTS {table} (\n    "
                   + ",\n    ".join(f"{c} {decl}" for c, decl in cols) + "\n)")
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        for col, decl in cols:
            if col not in have:
                decl = decl.replace(" PRIMARY KEY", "").replace(" AUTOINCREMENT", "")
                decl = decl.replace(" NOT NULL", " DEFAULT ''" if "DEFAULT" not in decl else "")
                decl = decl.replace("DEFAULT CURRENT_TIMESTAMP", "DEFAULT NULL")
                log.info("%s: adding column %s.%s", db, table, col)
                db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")
    _drop_edge_unique(db)
    for ddl in _INDEXES:
        db.execute(ddl)


def _drop_edge_unique(db: sqlite3.Connection) -> None:
    """A v1.2-era ``memory_block_edges`` still has UNIQUE(kinds, ids, type). HomeAgent's
    ``ensureRelationEdgeUniqueness`` rebuilds such a table copying only the old DDL's
    columns, which resets every relation edge to status '' and confidence 0. Before fsmem's
    first write, the same rebuild is done here keeping every column, so HomeAgent's
    migration then finds nothing to do and the facts survive for both."""
    row = db.execute("SELECT sql FROM sqlite_master WHERE type='table' AND "
                     "name='memory_block_edges'").fetchone()
    if not row or "UNIQUE" not in (row[0] or "").upper():
        return
    cols = ", ".join(c for c, _ in _COLUMNS["memory_block_edges"])
    decl = ",\n    ".join(f"{c} {d}" for c, d in _COLUMNS["memory_block_edges"])
    log.warning("%s: memory_block_edges rebuilt without its old UNIQUE constraint (every "
                "column kept), as HomeAgent's own migration would", db)
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(f"CREATE TABLE memory_block_edges_fsmem_new (\n    {decl}\n)")
        db.execute(f"INSERT INTO memory_block_edges_fsmem_new ({cols}) SELECT {cols} "
                   "FROM memory_block_edges")
        db.execute("DROP TABLE memory_block_edges")
        db.execute("ALTER TABLE memory_block_edges_fsmem_new RENAME TO memory_block_edges")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _chunks(items: Sequence[Any]) -> Iterable[list[Any]]:
    items = list(items)
    for i in range(0, len(items), _CHUNK):
        yield items[i:i + _CHUNK]


def _check_regular(path: str) -> None:
    """graph.db must be a regular file (or absent): a FIFO, socket or symlink in its place
    is refused with a clear error before SQLite opens it."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise FsmemError(f"{path}: not a regular file; the graph is not opened")
