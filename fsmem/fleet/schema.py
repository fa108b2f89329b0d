"""The fleet index's tables in PostgreSQL, and the one way to connect to it.

Three tables, all derived from the stores and droppable (docs/FLEET.md): ``fsmem_fleet_units``
(one row per unit of every store: its layer, agent, private flag, times, provenance and two
``tsvector`` columns with GIN indexes: ``tsv``, the ``english`` configuration of its Latin
text, and ``cjk``, its CJK character bigrams as lexemes), ``fsmem_fleet_stores`` (one row per
store: its path and its position in its change feed) and ``fsmem_fleet_meta`` (the schema
version). Vectors live in a ``embedding vector(dim)`` column only where the ``pgvector``
extension can be created; elsewhere the column is left out (logged once).

psycopg (3) is imported here only, on first use: ``pip install 'fsmem[fleet]'``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fsmem.format.errors import FsmemError, MissingDependency

if TYPE_CHECKING:
    import psycopg

__all__ = ["FleetError", "UNITS", "STORES", "META", "SCHEMA_VERSION", "pg", "connect",
           "ensure_schema", "drop_schema", "has_schema", "has_vector", "describe_dsn"]

log = logging.getLogger("fsmem.fleet")

UNITS = "fsmem_fleet_units"
STORES = "fsmem_fleet_stores"
META = "fsmem_fleet_meta"
SCHEMA_VERSION = 1
_LOCK_KEY = 0x66736D656D   # pg_advisory_xact_lock: one DDL at a time ("fsmem")
_vector_said = False        # "no pgvector" is logged once a process


class FleetError(FsmemError):
    """The fleet index cannot do what was asked (bad DSN, no server, no index yet)."""


def pg() -> Any:
    """The psycopg module, or MissingDependency naming the extra to install."""
    try:
        import psycopg  # lazy: optional extra "fleet" (+psycopg, libpq)
    except ImportError as exc:
        raise MissingDependency("the fleet index needs psycopg 3: "
                                "pip install 'fsmem[fleet]'") from exc
    return psycopg


def describe_dsn(dsn: str) -> str:
    """The DSN for messages: host, port, database and user, never a password."""
    try:
        parts = pg().conninfo.conninfo_to_dict(dsn)
    except Exception:   # noqa: BLE001 - only for a message
        return "(unparsable DSN)"
    shown = {k: v for k, v in parts.items() if k in ("host", "hostaddr", "port", "dbname",
                                                      "user")}
    return " ".join(f"{k}={v}" for k, v in shown.items()) or "(defaults)"


def connect(dsn: str) -> "psycopg.Connection":
    """A connection to the fleet database; FleetError naming ``dsn`` if the string is not a
    connection string or the server does not answer."""
    psycopg = pg()
    if not isinstance(dsn, str) or not dsn.strip():
        raise FleetError("dsn: empty (give --dsn postgresql://USER@HOST:PORT/DB or set "
                         "FSMEM_FLEET_DSN)")
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise FleetError(f"dsn: not a PostgreSQL connection string: {str(exc).strip()}") from exc
    try:
        return psycopg.connect(dsn, connect_timeout=10, autocommit=True)
    except psycopg.Error as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FleetError(f"dsn {describe_dsn(dsn)}: cannot connect: {msg}") from exc


def _ddl(partitions: int) -> list[str]:
    part = " PARTITION BY HASH (store_id)" if partitions else ""
    out = [
        f"CREATE TABLE IF NOT EXISTS {META} (key text PRIMARY KEY, value text NOT NULL)",
        f"""CREATE TABLE IF NOT EXISTS {STORES} (
            store_id text PRIMARY KEY,
            path text NOT NULL,
            id_source text NOT NULL,
            feed text NOT NULL DEFAULT '',
            pos bigint NOT NULL DEFAULT 0,
            hint_segment text NOT NULL DEFAULT '',
            hint_offset bigint NOT NULL DEFAULT 0,
            units integer NOT NULL DEFAULT 0,
            synced_at timestamptz,
            listed_at timestamptz,
            error text NOT NULL DEFAULT '')""",
        f"CREATE INDEX IF NOT EXISTS {STORES}_path ON {STORES} (path)",
        f"""CREATE TABLE IF NOT EXISTS {UNITS} (
            store_id text NOT NULL,
            unit_id text NOT NULL,
            layer text NOT NULL,
            agent text NOT NULL DEFAULT '',
            private boolean NOT NULL DEFAULT false,
            supersedes text NOT NULL DEFAULT '',
            summary text NOT NULL DEFAULT '',
            snippet text NOT NULL DEFAULT '',
            tags text[] NOT NULL DEFAULT '{{}}',
            created_at timestamptz,
            first_at timestamptz,
            last_at timestamptz,
            events integer NOT NULL DEFAULT 0,
            ident bigint NOT NULL DEFAULT 0,
            tsv tsvector NOT NULL,
            cjk tsvector NOT NULL,
            PRIMARY KEY (store_id, unit_id)){part}""",
    ]
    out += [f"CREATE TABLE IF NOT EXISTS {UNITS}_p{i} PARTITION OF {UNITS} "
            f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})" for i in range(partitions)]
    out += [
        f"CREATE INDEX IF NOT EXISTS {UNITS}_tsv ON {UNITS} USING gin (tsv)",
        f"CREATE INDEX IF NOT EXISTS {UNITS}_cjk ON {UNITS} USING gin (cjk)",
        f"CREATE INDEX IF NOT EXISTS {UNITS}_supersedes ON {UNITS} (store_id, supersedes) "
        "WHERE supersedes <> ''",
    ]
    return out


def has_schema(conn: "psycopg.Connection") -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                        (UNITS, STORES)).fetchone()[0]


def has_vector(conn: "psycopg.Connection") -> bool:
    """Whether the units table has its ``embedding`` column (pgvector was available)."""
    return conn.execute("SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE "
                        "table_name = %s AND column_name = 'embedding')", (UNITS,)).fetchone()[0]


def ensure_schema(conn: "psycopg.Connection", *, partitions: int = 0,
                  vector_dim: int = 0) -> bool:
    """Create what is missing (one DDL at a time across processes); True if the vector column
    exists. ``partitions``: hash partitions by store when the units table is created (an
    existing table keeps its shape); ``vector_dim``: try pgvector (0: never)."""
    psycopg = pg()
    if partitions < 0:
        raise FleetError(f"partitions: must be 0 or more, got {partitions}")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        for stmt in _ddl(partitions):
            conn.execute(stmt)
        row = conn.execute(f"SELECT value FROM {META} WHERE key = 'schema'").fetchone()
        if row is None:
            conn.execute(f"INSERT INTO {META} VALUES ('schema', %s)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise FleetError(f"{META}: schema version {row[0]} is newer than this fsmem "
                             f"knows ({SCHEMA_VERSION}); upgrade fsmem or drop the fleet index")
        if vector_dim and not has_vector(conn):
            try:
                with conn.transaction():   # a savepoint: its failure leaves the rest
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    conn.execute(f"ALTER TABLE {UNITS} ADD COLUMN IF NOT EXISTS embedding "
                                 f"vector({int(vector_dim)})")
            except psycopg.Error as exc:
                _say_no_vector(exc)
    return has_vector(conn)


def _say_no_vector(exc: Exception) -> None:
    global _vector_said
    if not _vector_said:
        _vector_said = True
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.info("pgvector is not available (%s): the fleet index has no vector column, "
                 "full-text search only", first)


def drop_schema(conn: "psycopg.Connection") -> None:
    """Drop the fleet tables (the stores are untouched; a sync builds them again)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(f"DROP TABLE IF EXISTS {UNITS}, {STORES}, {META} CASCADE")
