"""HomeAgent's older graph tables, read for recall and search: ``entities``, ``relations``,
``sentences``, ``scenes``/``scene_refs``, and the block tables' legacy rows.

A legacy entity is the graph node ``ent:<entities.id>``; a legacy relation row is the edge
``-<relations.id>`` (negative, so it never collides with a ``memory_block_edges`` id). Every
function only reads, and each one answers empty when its table is absent, so any of the three
schema generations (entities only; v1.2 with UNIQUE edges; latest) is read as it is.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable, Sequence

__all__ = ["tables", "edge_select", "ENT", "entity_seeds", "incident", "nodes", "mentions", "sentence_texts",
           "search_rows", "NODE_SOURCES", "EDGE_STATUSES"]

ENT = "ent:"
# Block-graph endpoints: triple endpoints, and legacy entities migrated into blocks.
NODE_SOURCES = ("triple", "legacy-entity")
# Relation edges: active ones, and migrated ones whose status was never set ('' or NULL).
EDGE_STATUSES = "(status='active' OR status='' OR status IS NULL)"
_CHUNK = 500


def edge_select(db: sqlite3.Connection) -> tuple[str, str]:
    """(select list, status condition) for relation edges in whatever generation of
    ``memory_block_edges`` this file has: a v1.2-era table has no confidence, session_id
    or status column (read as 0, '' and "any")."""
    have = {r[1] for r in db.execute("PRAGMA table_info(memory_block_edges)")}
    conf = "confidence" if "confidence" in have else "0"
    sess = "session_id" if "session_id" in have else "''"
    status = EDGE_STATUSES if "status" in have else "1"
    return f"id, source_id, target_id, edge_type, {conf}, {sess}", status


def tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _chunks(items: Sequence) -> Iterable[list]:
    items = list(items)
    for i in range(0, len(items), _CHUNK):
        yield items[i:i + _CHUNK]


def _ids(nodes_: Iterable[str]) -> list[int]:
    return [int(n[len(ENT):]) for n in nodes_ if n.startswith(ENT) and n[len(ENT):].isdigit()]


def entity_seeds(db: sqlite3.Connection, have: set[str], name: str, pattern: str,
                 limit: int) -> list[str]:
    """``ent:`` nodes for a name: the exact name, else a LIKE over entity names."""
    if "entities" not in have:
        return []
    row = db.execute("SELECT id FROM entities WHERE name=?", (name,)).fetchone()
    if row:
        return [f"{ENT}{row[0]}"]
    return [f"{ENT}{r[0]}" for r in db.execute(
        "SELECT id FROM entities WHERE name LIKE ? ESCAPE '\\' ORDER BY length(name), id LIMIT ?",
        (pattern, limit))]


def _relation_rows(db: sqlite3.Connection, where: str, args: Sequence) -> list[tuple]:
    return [(-rid, f"{ENT}{s}", f"{ENT}{t}", rtype, conf, sess or "")
            for rid, s, t, rtype, conf, sess in db.execute(
                "SELECT id, source_id, target_id, relation_type, confidence, session_id "
                f"FROM relations WHERE (status='active' OR status IS NULL) AND {where}", args)]


def incident(db: sqlite3.Connection, have: set[str], nodes_: list[str]) -> list[tuple]:
    """Legacy relation rows touching ``ent:`` nodes, as edge tuples."""
    ids = _ids(nodes_)
    if "relations" not in have or not ids:
        return []
    rows: list[tuple] = []
    for part in _chunks(ids):
        q = ",".join("?" * len(part))
        rows += _relation_rows(db, f"(source_id IN ({q}) OR target_id IN ({q}))", part + part)
    return rows


def nodes(db: sqlite3.Connection, have: set[str], ids: list[str]) -> dict[str, tuple[str, str]]:
    """``ent:`` node -> (name, type)."""
    out: dict[str, tuple[str, str]] = {}
    if "entities" not in have:
        return out
    for part in _chunks(_ids(ids)):
        q = ",".join("?" * len(part))
        for eid, name, etype in db.execute(
                f"SELECT id, name, type FROM entities WHERE id IN ({q})", part):
            out[f"{ENT}{eid}"] = (name or "", etype or "")
    return out


def mentions(db: sqlite3.Connection, have: set[str], ids: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    if "entities" not in have:
        return out
    for part in _chunks(_ids(ids)):
        q = ",".join("?" * len(part))
        for eid, n in db.execute(f"SELECT id, mention_count FROM entities WHERE id IN ({q})",
                                 part):
            out[f"{ENT}{eid}"] = int(n or 0)
    return out


def sentence_texts(db: sqlite3.Connection, have: set[str],
                   edge_ids: Sequence[int]) -> dict[int, tuple[int, str]]:
    """Legacy edge id -> (sentence id, sentence text) asserting it."""
    rel_ids = [-e for e in edge_ids if e < 0]
    out: dict[int, tuple[int, str]] = {}
    if not rel_ids or not {"relations", "sentences"} <= have:
        return out
    for part in _chunks(rel_ids):
        q = ",".join("?" * len(part))
        for rid, sid, text in db.execute(
                "SELECT r.id, s.id, s.text FROM relations r JOIN sentences s ON "
                f"s.id = r.sentence_id WHERE r.id IN ({q})", part):
            out[-rid] = (sid, text or "")
    return out


def search_rows(db: sqlite3.Connection, have: set[str], pattern: str,
                limit: int) -> tuple[list[str], list[tuple]]:
    """Legacy matches of a LIKE pattern: entities by name, and relations by type, by the
    sentence that asserts them, or by a scene key that refers to their entities."""
    if not {"entities", "relations"} <= have:
        return [], []
    ents = [f"{ENT}{r[0]}" for r in db.execute(
        "SELECT id FROM entities WHERE name LIKE ? ESCAPE '\\' ORDER BY length(name), id "
        "LIMIT ?", (pattern, limit))]
    rows = _relation_rows(db, "relation_type LIKE ? ESCAPE '\\' ORDER BY id LIMIT ?",
                          (pattern, limit))
    if "sentences" in have:
        rows += _relation_rows(db, "sentence_id IN (SELECT id FROM sentences WHERE text LIKE ? "
                               "ESCAPE '\\') ORDER BY id LIMIT ?", (pattern, limit))
    if {"scenes", "scene_refs"} <= have:
        scene_ents = [f"{ENT}{r[0]}" for r in db.execute(
            "SELECT r.ref_id FROM scene_refs r JOIN scenes s ON s.id = r.scene_id WHERE "
            "r.kind='entity' AND s.key LIKE ? ESCAPE '\\' LIMIT ?", (pattern, limit))]
        ents += [e for e in scene_ents if e not in ents]
    return ents, rows
