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

import argparse
import functools
import hashlib
import logging
import os
import sqlite3
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import msgspec

from . import _fsops as fsops
from .blocks import hash_bytes
from .distill import DistillError, Distiller, RuleDistiller, TextPiece, Triple, unit_texts
from .errors import FsmemError, NotFound
from .timestamps import Timestamp
from .unit import read_manifest
from .views import Document

if TYPE_CHECKING:
    from .flows import Memory

__all__ = [
    "GRAPH_FILE", "Graph", "Entity", "Relation", "Provenance", "Recall", "CommitResult",
    "TextPiece", "UnitFacts", "BlockRow", "DistillReport", "UnitReport", "find_cold", "distill",
    "recall_from_graph", "unit_texts", "unit_facts", "triple_block_id", "sentence_block_id",
    "add_cli",
]

log = logging.getLogger(__name__)

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

class Graph:
    """``graph.db``: HomeAgent's block graph, opened lazily; reads never create the file.

    ``Graph(mem)`` uses ``ROOT/graph.db`` with the store's durability; ``Graph(path)`` any file.
    Writes from a Memory should run under ``mem.store.locked()`` (distil and recall do).
    """

    def __init__(self, target: "Memory | str | os.PathLike[str]", *, sync: bool | None = None,
                 busy_timeout_s: float = 10.0) -> None:
        store = getattr(target, "store", None)
        if store is not None:
            self.path = os.path.join(store.root, GRAPH_FILE)
            self.sync = store.sync if sync is None else sync
        else:
            path = os.fspath(target)  # type: ignore[arg-type]
            self.path = os.path.join(path, GRAPH_FILE) if os.path.isdir(path) else path
            self.sync = True if sync is None else sync
        self.busy_timeout_s = busy_timeout_s
        self._db: sqlite3.Connection | None = None
        self._lock = threading.RLock()

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    @property
    def connection(self) -> sqlite3.Connection:
        """The open connection, creating graph.db and its schema if needed."""
        db = self._open(create=True)
        assert db is not None
        return db

    def _open(self, *, create: bool) -> sqlite3.Connection | None:
        with self._lock:
            if self._db is not None:
                return self._db
            if not create and not os.path.exists(self.path):
                return None
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
        return bool(db and db.execute("SELECT 1 FROM documents WHERE id=?", (unit_id,)).fetchone())

    @_sqlite_errors
    def seeds(self, names: Sequence[str], *, like_limit: int = 20) -> list[str]:
        """Node ids for names: the exact endpoint id first, else a LIKE over endpoint texts."""
        db = self._open(create=False)
        if db is None:
            return []
        out: dict[str, None] = {}
        for name in names:
            name = name.strip()
            if not name:
                continue
            bid = triple_block_id(name)
            if db.execute("SELECT 1 FROM memory_blocks WHERE id=?", (bid,)).fetchone():
                out.setdefault(bid, None)
                continue
            for (found,) in db.execute(
                    "SELECT id FROM memory_blocks WHERE modality='text' AND source='triple' "
                    "AND text_content LIKE ? ESCAPE '\\' ORDER BY length(text_content), id LIMIT ?",
                    (_like(name), like_limit)):
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
        ids = [r[0] for r in db.execute(
            "SELECT id FROM memory_blocks WHERE modality='text' AND source='triple' AND "
            "text_content LIKE ? ESCAPE '\\' ORDER BY length(text_content), id LIMIT ?",
            (pattern, limit))]
        rows = {r[0]: r for r in self._incident(db, ids)} if ids else {}
        for row in db.execute(
                "SELECT id, source_id, target_id, edge_type, confidence, session_id "
                "FROM memory_block_edges WHERE source_kind='block' AND target_kind='block' AND "
                f"status='active' AND edge_type NOT IN {STRUCTURAL!r} AND edge_type LIKE ? "
                "ESCAPE '\\' ORDER BY id LIMIT ?", (pattern, limit)):
            rows.setdefault(row[0], row)
        return self._answer(db, ids, rows, True)

    def _answer(self, db: sqlite3.Connection, entity_ids: list[str], rows: dict[int, tuple],
                provenance: bool) -> Recall:
        """Entities (with names, types, mention counts) and relations (with provenance)."""
        ends = [n for r in rows.values() for n in (r[1], r[2])]
        nodes = self._nodes(db, list(dict.fromkeys(entity_ids + ends)))
        prov = self.provenance(list(rows)) if provenance else {}
        rels = [Relation(source_name=nodes.get(s, ("", ""))[0],
                         target_name=nodes.get(d, ("", ""))[0], relation_type=t,
                         confidence=float(c or 0), edge_id=e, source_id=s, target_id=d,
                         session_id=ss or "", provenance=prov.get(e, []))
                for e, s, d, t, c, ss in sorted(rows.values())]
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
        keys = [str(e) for e in edge_ids]
        found: list[tuple[int, str, str, int]] = []
        for part in _chunks(keys):
            q = ",".join("?" * len(part))
            found += [(int(t), s, ev or "", turn or 0) for s, t, ev, turn in db.execute(
                "SELECT source_id, target_id, session_id, turn_id FROM memory_block_edges "
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
        if db is None:
            return {"memory_blocks": 0, "memory_block_edges": 0, "documents": 0}
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _COLUMNS}

    @staticmethod
    def _incident(db: sqlite3.Connection, nodes: list[str]) -> list[tuple]:
        rows: list[tuple] = []
        for part in _chunks(nodes):
            q = ",".join("?" * len(part))
            for side in ("source", "target"):
                rows += db.execute(
                    "SELECT id, source_id, target_id, edge_type, confidence, session_id "
                    f"FROM memory_block_edges WHERE {side}_kind='block' AND {side}_id IN ({q}) "
                    f"AND source_kind='block' AND target_kind='block' AND status='active' "
                    f"AND edge_type NOT IN {STRUCTURAL!r}", part).fetchall()
        return rows

    @staticmethod
    def _nodes(db: sqlite3.Connection, ids: list[str]) -> dict[str, tuple[str, str]]:
        out: dict[str, tuple[str, str]] = {}
        for part in _chunks(ids):
            q = ",".join("?" * len(part))
            for bid, text, stype in db.execute(
                    f"SELECT id, text_content, semantic_type FROM memory_blocks WHERE id IN ({q})",
                    part):
                out[bid] = (text or "", stype or "")
        return out

    @staticmethod
    def _mentions(db: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
        """How many text blocks a node was read from (its ``derived_from`` edges)."""
        out: dict[str, int] = {}
        for part in _chunks(ids):
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
    for ddl in _INDEXES:
        db.execute(ddl)


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _chunks(items: Sequence[Any]) -> Iterable[list[Any]]:
    items = list(items)
    for i in range(0, len(items), _CHUNK):
        yield items[i:i + _CHUNK]


# -- from a unit to graph rows ------------------------------------------------------------

def unit_blocks(mem: "Memory", doc: Document) -> list[BlockRow]:
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
                                 semantic_type=ref.semantic_type, payload_digest=ref.sha256))
    return rows


def unit_facts(mem: "Memory", doc: Document, distiller: Distiller,
               texts: Callable[["Memory", Document], list[TextPiece]] = unit_texts) -> UnitFacts:
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
    triples: int = 0
    blocks_added: int = 0
    edges_added: int = 0
    units: list[UnitReport] = []


def find_cold(mem: "Memory", max_age_s: float = 72 * 3600, max_access: int = 2, *,
              now: Timestamp | None = None) -> list[str]:
    """L2 units with ``access_count <= max_access`` whose last access (else creation) is at
    least ``max_age_s`` old, oldest first (HomeAgent FindColdDocs, thresholds as parameters)."""
    now_ns = (now or Timestamp.now()).ns
    limit = now_ns - int(max_age_s * 1e9)
    found = []
    for unit_id in mem.store.iter_units("documents"):
        try:
            m = read_manifest(mem.store.unit_dir("documents", unit_id))
        except (FsmemError, OSError) as exc:
            log.warning("find_cold: skipping %s: %s", unit_id, exc)
            continue
        ref = (m.last_access or m.created_at).ns
        if m.access_count <= max_access and ref <= limit:
            found.append((ref, unit_id))
    return [u for _, u in sorted(found)]


def distill(mem: "Memory", *, max_age_s: float = 72 * 3600, max_access: int = 2,
            distiller: Distiller | None = None, dry_run: bool = False,
            now: Timestamp | None = None, move_empty: bool = False,
            texts: Callable[["Memory", Document], list[TextPiece]] = unit_texts) -> DistillReport:
    """Distil cold L2 units into graph.db and move each, whole, into stablemem/.

    Per unit: extract (outside the lock: an LLM may be slow), then under the writer lock one
    graph transaction and one rename. A unit with no triple stays in documents/ unless
    ``move_empty``. A DistillError stops the run: nothing is written for that unit.
    """
    distiller = distiller or RuleDistiller()
    report = DistillReport(dry_run=dry_run, distiller=distiller.name)
    cold = find_cold(mem, max_age_s, max_access, now=now)
    report.cold = len(cold)
    graph: Graph | None = None
    try:
        for unit_id in cold:
            try:
                doc = mem.document(unit_id)
            except NotFound:
                continue  # recalled by someone else since the listing
            except (FsmemError, OSError) as exc:
                log.warning("distill: skipping unreadable unit %s: %s", unit_id, exc)
                continue
            if doc.layer != "documents":
                continue
            try:
                unit = unit_facts(mem, doc, distiller, texts)
            except DistillError as exc:
                raise DistillError(f"unit {unit_id}: {exc} (nothing written for it; "
                                   f"{len(report.distilled)} unit(s) distilled before it)") from exc
            entry = UnitReport(unit_id=unit_id, triples=[t for _, t in unit.facts],
                               events=[p.event_id for p, _ in unit.facts])
            report.triples += len(unit.facts)
            if not unit.facts and not move_empty:
                report.no_facts.append(unit_id)
                report.units.append(entry)
                continue
            if not dry_run:
                graph = graph or Graph(mem)
                if not _commit_and_move(mem, graph, unit, report):
                    continue
                entry.moved = True
                report.distilled.append(unit_id)
            report.units.append(entry)
    finally:
        if graph is not None:
            graph.close()
    return report


def _commit_and_move(mem: "Memory", graph: Graph, unit: UnitFacts, report: DistillReport) -> bool:
    with mem.store.locked():
        if not os.path.isdir(mem.store.unit_dir("documents", unit.unit_id)):
            return False  # moved by another process after we read it
        result = graph.commit_unit(unit)
        mem.store.move(unit.unit_id, "documents", "stablemem")
    report.blocks_added += result.blocks_added
    report.edges_added += result.edges_added
    return True


def recall_from_graph(mem: "Memory", names: Sequence[str] | str, depth: int = 2) -> list[str]:
    """Bring the original units of the facts around ``names`` back into L1, each by one
    rename (stablemem/ or documents/ -> context/), as ``Memory.recall`` does; returns them."""
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
            if layer in ("stablemem", "documents") and unit_id not in moved:
                src = mem.store.unit_dir(layer, unit_id)
                os.utime(src, ns=(Timestamp.now().ns,) * 2)  # arrival in L1
                if mem.store.sync:
                    fsops.fsync_dir(src)
                mem.store.move(unit_id, layer, "context")
                moved.append(unit_id)
    if moved and mem.auto_prune:
        mem.prune(query=" ".join(names))
    return moved


def _locate(mem: "Memory", unit_id: str, event_id: str) -> tuple[str, str]:
    """(layer, unit id) holding the fact: the unit named by the graph, else (after a prune
    regrouped events) whichever unit now holds the event."""
    try:
        layer, _ = mem.store.locate(unit_id)
        return layer, unit_id
    except (NotFound, FsmemError):
        pass
    if event_id:
        for layer in ("stablemem", "documents", "context"):
            for uid in mem.store.iter_units(layer):
                try:
                    m = read_manifest(mem.store.unit_dir(layer, uid))
                except (FsmemError, OSError):
                    continue
                if any(ev.id == event_id for ev in m.events):
                    return layer, uid
    return "", unit_id


# -- command line -------------------------------------------------------------------------

def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    from .model import encode
    if getattr(args, "json", False):
        sys.stdout.write(encode(data).decode() + "\n")
    elif text:
        print(text)


def _fmt(rec: Recall) -> list[str]:
    return [f"{r.source_name} -[{r.relation_type}]-> {r.target_name}  ({r.confidence:.2f})"
            + "".join(f"  from {p.unit_id or '?'}/{p.event_id or '?'}" for p in r.provenance)
            for r in rec.relations]


def cmd_distill(args: argparse.Namespace) -> int:
    from .distill import LLMDistiller
    from .flows import Memory
    distiller: Distiller = RuleDistiller() if args.distiller == "rules" else LLMDistiller(
        base_url=args.llm_base_url or "", model=args.llm_model or "", timeout=args.llm_timeout)
    report = Memory.open(args.root).distill(max_age_s=args.max_age * 3600,
                                            max_access=args.max_access, distiller=distiller,
                                            dry_run=args.dry_run)
    done = len(report.units) - len(report.no_facts) if report.dry_run else len(report.distilled)
    lines = [f"{'would distil' if report.dry_run else 'distilled'} {done} of {report.cold} cold "
             f"unit(s): {report.triples} triple(s), +{report.blocks_added} block(s), "
             f"+{report.edges_added} edge(s)"]
    if report.no_facts:
        lines.append(f"{len(report.no_facts)} cold unit(s) gave no triple and stay in documents/")
    lines += [f"  {u.unit_id}: {t.subject} -[{t.relation}]-> {t.object}"
              for u in report.units if report.dry_run for t in u.triples]
    _emit(args, report, "\n".join(lines))
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    from .flows import Memory
    with Graph(Memory.open(args.root)) as graph:
        if args.graph_verb == "neighbors":
            rec = graph.neighbors(args.name, depth=args.depth)
            text = "\n".join(_fmt(rec)) or f"no relation within {args.depth} hop(s) of {args.name!r}"
        else:
            rec = graph.search(args.text, limit=args.limit)
            text = "\n".join([f"{e.name} [{e.type}] {e.block_id}" for e in rec.entities]
                             + _fmt(rec)) or "no match"
    _emit(args, rec, text)
    return 0


def add_cli(subparsers: Any, common_parents: Sequence[argparse.ArgumentParser]) -> None:
    """Register ``distill`` and ``graph neighbors|search`` on the ``fsmem`` command."""
    parents = list(common_parents)
    sp = subparsers.add_parser("distill", parents=parents, help="distil cold L2 units into L3",
                               description="distil cold L2 units into graph.db and move them, "
                               "whole, into stablemem/")
    sp.add_argument("--max-age", type=float, default=72.0, metavar="HOURS",
                    help="cold when the last access (else creation) is this old (default 72)")
    sp.add_argument("--max-access", type=int, default=2,
                    help="cold when accessed at most this many times (default 2)")
    sp.add_argument("--dry-run", action="store_true", help="show the triples; change nothing")
    sp.add_argument("--distiller", choices=["rules", "llm"], default="rules")
    sp.add_argument("--llm-base-url", help="OpenAI-compatible base URL (or FSMEM_LLM_BASE_URL)")
    sp.add_argument("--llm-model", help="model (or FSMEM_LLM_MODEL); key from FSMEM_LLM_API_KEY")
    sp.add_argument("--llm-timeout", type=float, default=60.0, metavar="SECONDS")
    sp.set_defaults(fn=cmd_distill)
    gp = subparsers.add_parser("graph", help="query the L3 graph (graph.db)")
    gsub = gp.add_subparsers(dest="graph_verb", required=True)
    np_ = gsub.add_parser("neighbors", parents=parents, help="relations around an entity")
    np_.add_argument("name")
    np_.add_argument("--depth", type=int, default=2)
    np_.set_defaults(fn=cmd_graph)
    sp2 = gsub.add_parser("search", parents=parents, help="entities and relations by text")
    sp2.add_argument("text")
    sp2.add_argument("--limit", type=int, default=20)
    sp2.set_defaults(fn=cmd_graph)
