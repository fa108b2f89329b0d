"""Write a HomeAgent memory directory by hand, the way HomeAgent's Go code would.

Not fsmem's reader and not fsmem's writer: JSON is serialised here as Go's ``encoding/json``
does (struct field order, ``omitempty``, nil slices as ``null``, ``<``/``>``/``&`` and
U+2028/U+2029 escaped, ``MarshalIndent(doc, "", "  ")`` for documents, compact ``Marshal``
for ``context.json``), times as RFC3339Nano with ``Z`` or offsets and Go's zero time, and the
SQLite files with the DDL of the reference (/work/shared/reference/homeagent-format.md §1-4),
in each of its schema generations. Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import struct
import zlib
from pathlib import Path
from typing import Any

__all__ = ["go_json", "build", "ZERO", "Blob", "DOC", "GRAPH_GENERATIONS", "blk_ent",
           "ha_relation_edge_uniqueness_migration", "EV_DUP"]

ZERO = "0001-01-01T00:00:00Z"
GRAPH_GENERATIONS = ("entities-only", "v1.2-unique-edges", "latest")


def go_json(obj: Any, *, indent: bool) -> bytes:
    """Go's encoding/json output for ``obj`` (dict key order is the struct field order)."""
    text = json.dumps(obj, ensure_ascii=False, indent=2 if indent else None,
                      separators=(",", ": ") if indent else (",", ":"))
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text.encode("utf-8")


def _omit(d: dict, *keys: str) -> dict:
    """Drop ``omitempty`` keys whose value is Go's zero value."""
    return {k: v for k, v in d.items() if not (k in keys and v in ("", 0, None, [], {}))}


def blk_ent(name: str) -> str:
    """TripleBlockID: blk_ent_ + hex of the first 12 bytes of sha256(TrimSpace(name))."""
    return "blk_ent_" + hashlib.sha256(name.strip().encode()).hexdigest()[:24]


def block(bid: str, modality: str, *, text: str = "", digest: str = "", mime: str = "",
          size: int = 0, width: int = 0, height: int = 0, vector: list[float] | None = None,
          fingerprint: str = "", source: str = "", tool: str = "", scene: str = "",
          semantic_type: str = "", created_at: str = ZERO, updated_at: str = ZERO) -> dict:
    """A MemoryBlock in Go field order (reference §2)."""
    return _omit({"id": bid, "modality": modality, "text": text, "payload_digest": digest,
                  "mime": mime, "size": size, "width": width, "height": height,
                  "vector": vector, "fingerprint": fingerprint, "source": source, "tool": tool,
                  "scene": scene, "semantic_type": semantic_type, "created_at": created_at,
                  "updated_at": updated_at},
                 "text", "payload_digest", "mime", "size", "width", "height", "vector",
                 "fingerprint", "source", "tool", "scene", "semantic_type")


def doc(doc_id: str, *, summary: str = "", content: str = "", tags: list[str] | None = None,
        entities: list[str] | None = None, created_at: str = ZERO, updated_at: str = ZERO,
        source: str = "", meta: dict | None = None, access_count: int = 0,
        last_access: str = ZERO, media: list[str] | None = None,
        blocks: list[dict] | None = None, vector: dict | None = None,
        dense_vec: list[float] | None = None, dense_fp: str = "") -> dict:
    """A Doc in Go field order (reference §1a); absent versions' fields are omitempty."""
    return _omit({"id": doc_id, "summary": summary, "content": content, "tags": tags,
                  "entities": entities, "created_at": created_at, "updated_at": updated_at,
                  "source": source, "meta": meta, "access_count": access_count,
                  "last_access": last_access, "media": media, "blocks": blocks,
                  "vector": vector, "dense_vec": dense_vec, "dense_fp": dense_fp},
                 "meta", "media", "blocks", "vector", "dense_vec", "dense_fp")


# -- media ---------------------------------------------------------------------------------

class Blob:
    """A media file and its sha256 (the CAS digest)."""

    def __init__(self, data: bytes, kind: str, mime: str, width: int = 0, height: int = 0):
        self.data, self.kind, self.mime, self.width, self.height = data, kind, mime, width, height
        self.sha256 = hashlib.sha256(data).hexdigest()


def _png(w: int, h: int) -> bytes:
    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    raw = b"".join(b"\x00" + bytes([(x * 7 + y) % 256 for x in range(w * 3)]) for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _amr() -> bytes:
    # AMR-NB storage format: magic, then 20 ms frames (12.2 kbit/s: header 0x3c + 31 bytes).
    return b"#!AMR\n" + b"".join(b"\x3c" + bytes((i * 13 + j) % 256 for j in range(31))
                                 for i in range(50))


def _m4a() -> bytes:
    ftyp = b"ftypM4A \x00\x00\x00\x00M4A mp42isom"
    moov = b"moov" + b"\x00" * 24
    return struct.pack(">I", 4 + len(ftyp)) + ftyp + struct.pack(">I", 4 + len(moov)) + moov


PNG = Blob(_png(8, 6), "image", "image/png", 8, 6)
AMR = Blob(_amr(), "audio", "audio/amr")
M4A = Blob(_m4a(), "audio", "audio/mp4")
CTX_PNG = Blob(_png(4, 4), "image", "image/png", 4, 4)

# -- the documents -------------------------------------------------------------------------

T1 = "2026-10-04T08:04:00.123456789+08:00"
T2 = "2026-10-05T23:59:59.5Z"
T3 = "2026-10-06T11:00:02.413370001-05:00"
FAR = "9999-12-31T23:59:59.999999999-05:00"
YEAR1 = "0001-01-01T08:05:43+08:05"   # Go prints LMT offsets of year 1 like this

DOC = {
    "v1": "doc_1789175727183004211", "v2": "doc_1790315272901276334",
    "v3": "doc_1791205784650000001", "explicit": "note-kitchen", "far": "doc_1791999999999999999",
}
V3_TEXT_BLOCK = blk_ent("王小明")
V3_IMAGE_BLOCK = "blk_1791205784650000001_1"
V3_AUDIO_BLOCK = "blk_1791205784650000001_2"
V3_EMPTY_BLOCK = "blk_1791205784650000001_3"
EV_DUP = {"timestamp": "2026-10-07T09:00:00+08:00", "source": "qq", "input": "在吗"}


def _docs() -> dict[str, dict]:
    vec = [round(0.1 * i, 3) for i in range(8)]
    return {
        DOC["v1"]: doc(DOC["v1"], summary="咖啡机除垢", content="[08:04] qq: 咖啡机每月除垢一次",
                       tags=None, entities=None, created_at=T1, updated_at=T1,
                       source="context_archived",
                       meta={"content_hash": "h1a2b3c4d", "is_archived_context": "true"},
                       access_count=1, last_access=T1),
        DOC["v2"]: doc(DOC["v2"], summary="语音留言 光伏板", content="光伏板清洗 <提醒> & 语音",
                       tags=["光伏板"], entities=["光伏板"], created_at=T2, updated_at=T3,
                       source="manual", access_count=3, last_access=T2,
                       media=[AMR.sha256, PNG.sha256], vector={"光伏": 0.5, "板": 0.25},
                       dense_vec=vec),
        DOC["v3"]: doc(DOC["v3"], summary="签证材料", content="签证材料: 护照照片 录音",
                       tags=["签证"], entities=["王小明"], created_at=T3, updated_at=FAR,
                       source="plugin:travel", access_count=2, last_access=T3,
                       blocks=[
                           block(V3_IMAGE_BLOCK, "image", digest=PNG.sha256, mime="image/png",
                                 size=len(PNG.data), width=8, height=6, vector=vec,
                                 fingerprint="chineseclip:d8", tool="camera", created_at=T3,
                                 updated_at=T3),
                           block(V3_AUDIO_BLOCK, "audio", digest=M4A.sha256,
                                 size=len(M4A.data), source="upload", created_at=T3,
                                 updated_at=T3),
                           block(V3_TEXT_BLOCK, "text", text="王小明", vector=[1.0, 0.0],
                                 fingerprint="chineseclip:d2", source="triple",
                                 tool="doc_commit", scene="chan:qq", semantic_type="Person",
                                 created_at=T2, updated_at=T3),
                           block(V3_EMPTY_BLOCK, "text", created_at=T3, updated_at=T3)],
                       dense_vec=vec, dense_fp="chineseclip:d8"),
        # HomeAgent's Insert with an explicit id leaves every time at Go's zero time.
        DOC["explicit"]: doc(DOC["explicit"], summary="厨房插座", content="厨房插座 分机 三号",
                             tags=["厨房"], entities=None),
        DOC["far"]: doc(DOC["far"], summary="远期计划", content="远期计划 火星 基地",
                        created_at=FAR, updated_at=FAR, last_access=YEAR1, source="manual"),
    }


def _context() -> list[dict]:
    ev = [
        _omit({"id": "", "timestamp": "2026-10-07T08:59:00+08:00", "source": "qq",
               "input": "看看 <b>这张</b> & 那张", "media": [CTX_PNG.sha256]}, "id", "media"),
        dict(EV_DUP), dict(EV_DUP),
        {"timestamp": "2026-10-07T09:00:05.000000001+08:00", "source": "agent", "input": "在吗",
         "response": "在的", "tools_used": ["doc_query"],
         "tool_results": [{"name": "doc_query", "output": "未找到相关文档记忆"}]},
        {"id": "evt_1791300000000000001", "timestamp": "2026-10-07T09:01:00Z", "source": "qq",
         "input": "发给你一张图",
         "blocks": [block("blk_1791300000000000001_1", "image", digest=CTX_PNG.sha256,
                          mime="image/png", size=len(CTX_PNG.data), width=4, height=4,
                          created_at="2026-10-07T09:01:00Z", updated_at="2026-10-07T09:01:00Z"),
                    block(blk_ent("小雨"), "text", text="小雨", semantic_type="Person",
                          scene="chan:qq", source="triple", created_at="2026-10-07T09:01:00Z",
                          updated_at="2026-10-07T09:01:00Z")]},
    ]
    return ev


# -- SQLite ----------------------------------------------------------------------------------

_MEDIA_OLD = ("CREATE TABLE media (digest TEXT PRIMARY KEY, kind TEXT NOT NULL, mime TEXT, "
              "size INTEGER, width INTEGER, height INTEGER, origin_path TEXT, tool TEXT, "
              "description TEXT, described_by TEXT, ref_count INTEGER DEFAULT 0, "
              "first_seen TIMESTAMP, last_seen TIMESTAMP)")
_MEDIA_REFS = ("CREATE TABLE media_refs (digest TEXT NOT NULL, owner_kind TEXT NOT NULL, "
               "owner_id TEXT NOT NULL, PRIMARY KEY (digest, owner_kind, owner_id))")


def _media_db(path: Path, schema: str, blobs: list[Blob]) -> None:
    db = sqlite3.connect(path)
    db.execute(_MEDIA_OLD)
    db.execute(_MEDIA_REFS)
    if schema == "new":
        db.execute("ALTER TABLE media ADD COLUMN vec TEXT DEFAULT ''")
        db.execute("ALTER TABLE media ADD COLUMN vec_model TEXT DEFAULT ''")
    for b in blobs:
        db.execute("INSERT INTO media(digest, kind, mime, size, width, height, origin_path, "
                   "tool, description, described_by, ref_count, first_seen, last_seen) "
                   "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   (b.sha256, b.kind, b.mime, len(b.data), b.width, b.height,
                    f"/tmp/{b.sha256[:8]}", "qq", "", "", 1,
                    "2026-10-05 23:59:59.5+00:00", "2026-10-05 23:59:59.5+00:00"))
        if schema == "new":
            db.execute("UPDATE media SET vec=?, vec_model=? WHERE digest=?",
                       ("[0.5,0.5]", "chineseclip", b.sha256))
        db.execute("INSERT INTO media_refs VALUES (?,?,?)", (b.sha256, "document", DOC["v2"]))
    db.commit()
    db.close()


_G_LEGACY = [
    "CREATE TABLE entities (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE NOT NULL, "
    "type TEXT DEFAULT 'Concept', mention_count INTEGER DEFAULT 1, "
    "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)",
    "CREATE TABLE sentences (id INTEGER PRIMARY KEY AUTOINCREMENT, text TEXT UNIQUE NOT NULL, "
    "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)",
    "CREATE TABLE relations (id INTEGER PRIMARY KEY AUTOINCREMENT, source_id INTEGER REFERENCES "
    "entities(id), target_id INTEGER REFERENCES entities(id), relation_type TEXT NOT NULL, "
    "confidence REAL DEFAULT 1.0, status TEXT DEFAULT 'active', session_id TEXT, "
    "turn_id INTEGER DEFAULT 0, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, "
    "updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, date_bucket TEXT, sentence_id INTEGER "
    "DEFAULT 0, sentence_ref TEXT DEFAULT '', "
    "UNIQUE(source_id, target_id, relation_type, session_id))",
]
_G_BLOCKS = (
    "CREATE TABLE memory_blocks (id TEXT PRIMARY KEY, modality TEXT NOT NULL, text_content TEXT "
    "DEFAULT '', payload_digest TEXT DEFAULT '', mime TEXT DEFAULT '', size INTEGER DEFAULT 0, "
    "width INTEGER DEFAULT 0, height INTEGER DEFAULT 0, vector TEXT DEFAULT '', fingerprint TEXT "
    "DEFAULT '', source TEXT DEFAULT '', tool TEXT DEFAULT '', scene TEXT DEFAULT '', "
    "semantic_type TEXT DEFAULT '', created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, "
    "updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)")
_G_EDGES_UNIQUE = (
    "CREATE TABLE memory_block_edges (id INTEGER PRIMARY KEY AUTOINCREMENT, source_kind TEXT NOT "
    "NULL, source_id TEXT NOT NULL, target_kind TEXT NOT NULL, target_id TEXT NOT NULL, "
    "edge_type TEXT NOT NULL, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, "
    "UNIQUE(source_kind, source_id, target_kind, target_id, edge_type))")
_G_EDGES_LATEST = (
    "CREATE TABLE memory_block_edges (id INTEGER PRIMARY KEY AUTOINCREMENT, source_kind TEXT NOT "
    "NULL, source_id TEXT NOT NULL, target_kind TEXT NOT NULL, target_id TEXT NOT NULL, "
    "edge_type TEXT NOT NULL, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, confidence REAL "
    "DEFAULT 0, session_id TEXT DEFAULT '', turn_id INTEGER DEFAULT 0, status TEXT DEFAULT '', "
    "merged_into TEXT DEFAULT '')")
_G_DOCS = ("CREATE TABLE documents (id TEXT PRIMARY KEY, summary TEXT DEFAULT '', "
           "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)")
_G_SCENES = [
    "CREATE TABLE scenes (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT UNIQUE, strength "
    "INTEGER DEFAULT 1, origin TEXT DEFAULT 'emergent', created_at TIMESTAMP, updated_at TIMESTAMP)",
    "CREATE TABLE scene_refs (scene_id INTEGER, kind TEXT, ref_id INTEGER, ref_text TEXT DEFAULT "
    "'', weight REAL, decayed_at TIMESTAMP, created_at TIMESTAMP, "
    "UNIQUE(scene_id, kind, ref_id, ref_text))",
]
# Facts about the extension 分机 (four active relations) in the legacy tables.
LEGACY_FACTS = [("厨房", "有", "分机"), ("分机", "号码是", "8021"), ("小雨", "常用", "分机"),
                ("分机", "位于", "二楼")]
MIGRATED = [("老王", "Person"), ("成都", "Place")]   # legacy entities migrated into blocks


def migrated_block_id(entity_id: int, name: str) -> str:
    """``blk_ent_<entityID>_<hash>`` (row-id based) for a migrated legacy entity."""
    return f"blk_ent_{entity_id}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _graph_db(path: Path, generation: str) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    for ddl in _G_LEGACY:
        db.execute(ddl)
    names = sorted({n for s, _, o in LEGACY_FACTS for n in (s, o)} | {n for n, _ in MIGRATED})
    ids = {}
    for n in names:
        ids[n] = db.execute("INSERT INTO entities(name, type, created_at, updated_at) "
                            "VALUES (?, 'Concept', ?, ?)",
                            (n, "2026-10-01 10:00:00+08:00", "2026-10-01 10:00:00+08:00")
                            ).lastrowid
    sid = db.execute("INSERT INTO sentences(text) VALUES ('厨房有分机，号码是8021')").lastrowid
    for s, r, o in LEGACY_FACTS:
        db.execute("INSERT INTO relations(source_id, target_id, relation_type, confidence, status, "
                   "session_id, turn_id, sentence_id) VALUES (?,?,?,0.9,'active','sess_1',3,?)",
                   (ids[s], ids[o], r, sid))
    db.execute("INSERT INTO relations(source_id, target_id, relation_type, status, session_id) "
               "VALUES (?,?,'住在','active','sess_2')", (ids["老王"], ids["成都"]))
    if generation != "entities-only":
        db.execute(_G_BLOCKS)
        db.execute(_G_EDGES_UNIQUE if generation == "v1.2-unique-edges" else _G_EDGES_LATEST)
        db.execute(_G_DOCS)
        db.execute("INSERT INTO memory_blocks(id, modality, payload_digest, mime, size) VALUES "
                   "(?, 'image', ?, 'image/png', ?)", (V3_IMAGE_BLOCK, PNG.sha256, len(PNG.data)))
    if generation == "latest":
        for ddl in _G_SCENES:
            db.execute(ddl)
        mig = {}
        for n, t in MIGRATED:
            mig[n] = migrated_block_id(ids[n], n)
            db.execute("INSERT INTO memory_blocks(id, modality, text_content, source, "
                       "semantic_type) VALUES (?, 'text', ?, 'legacy-entity', ?)", (mig[n], n, t))
        db.execute("INSERT INTO memory_block_edges(source_kind, source_id, target_kind, target_id, "
                   "edge_type, confidence, session_id, status) VALUES "
                   "('block', ?, 'block', ?, '住在', 1.0, 'sess_2', '')", (mig["老王"], mig["成都"]))
        scene = db.execute("INSERT INTO scenes(key, origin) VALUES ('家里电话', 'declared')").lastrowid
        db.execute("INSERT INTO scene_refs(scene_id, kind, ref_id, weight) VALUES (?, 'entity', ?, 1)",
                   (scene, ids["分机"]))
    db.commit()
    db.close()


def ha_relation_edge_uniqueness_migration(db: sqlite3.Connection) -> None:
    """HomeAgent's ``ensureRelationEdgeUniqueness`` as the reference describes it (§4): a
    ``memory_block_edges`` whose DDL still has UNIQUE(kinds, ids, type) is rebuilt without it,
    copying the columns of the old DDL only (so migrated columns come back at their defaults:
    status '' and confidence 0), then the migrated columns are ensured by ADD COLUMN."""
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name='memory_block_edges'").fetchone()
    if sql and "UNIQUE" in sql[0].upper():
        base = "id, source_kind, source_id, target_kind, target_id, edge_type, created_at"
        db.executescript(
            "BEGIN;" + _G_EDGES_LATEST.replace("memory_block_edges", "memory_block_edges_new")
            + f";INSERT INTO memory_block_edges_new ({base}) SELECT {base} FROM memory_block_edges;"
            "DROP TABLE memory_block_edges;"
            "ALTER TABLE memory_block_edges_new RENAME TO memory_block_edges;COMMIT;")
    have = {r[1] for r in db.execute("PRAGMA table_info(memory_block_edges)")}
    for col, decl in (("confidence", "REAL DEFAULT 0"), ("session_id", "TEXT DEFAULT ''"),
                      ("turn_id", "INTEGER DEFAULT 0"), ("status", "TEXT DEFAULT ''"),
                      ("merged_into", "TEXT DEFAULT ''")):
        if col not in have:
            db.execute(f"ALTER TABLE memory_block_edges ADD COLUMN {col} {decl}")
    db.commit()


def build(root: str | os.PathLike, *, graph: str = "latest", media_schema: str = "new",
          context: bool = True) -> Path:
    """Write a whole HomeAgent memory directory at ``root``; returns it."""
    root = Path(root)
    (root / "documents").mkdir(parents=True)
    for did, d in _docs().items():
        (root / "documents" / f"{did}.json").write_bytes(go_json(d, indent=True))
    (root / "documents" / "doc_1791000000000000000.json").write_bytes(b"")   # an empty file
    (root / "documents" / "settings.json").write_bytes(b'{"theme": "dark"}')  # not a document
    blobs = [PNG, AMR, M4A, CTX_PNG]
    for b in blobs:
        d = root / "media" / "blobs" / b.sha256[:2]
        d.mkdir(parents=True, exist_ok=True)
        (d / b.sha256[2:]).write_bytes(b.data)
    _media_db(root / "media" / "media.db", media_schema, blobs)
    _graph_db(root / "graph.db", graph)
    if context:
        (root / "context.json").write_bytes(go_json(_context(), indent=False))
    (root / "text").mkdir()
    (root / "text" / "2026-10-07.jsonl").write_bytes(go_json({"t": "x"}, indent=False) + b"\n")
    return root
