"""``FleetIndex``: the fleet index of many stores in one PostgreSQL database.

    idx = FleetIndex("postgresql://fleet@db/fleet")
    report = idx.sync(["/srv/agents/a", "/srv/agents/b"])   # from each store's change feed
    hits = idx.search("wifi password", agent="alice", limit=10)

Derived and droppable: the stores are the source of truth (``drop`` then ``sync`` gives the
same answers). docs/FLEET.md says what is kept and how it scales.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Callable, Iterable

from fsmem.fleet.schema import (
    STORES,
    FleetError,
    connect,
    describe_dsn,
    drop_schema,
    ensure_schema,
    has_schema,
    pg,
)
from fsmem.fleet.search import FleetHit, search
from fsmem.fleet.sync import StoreSync, SyncReport, sync_store

if TYPE_CHECKING:
    import psycopg

    from fsmem.search.embed import Embedder

__all__ = ["FleetIndex", "FleetHit", "StoreSync", "SyncReport", "FleetError"]

log = logging.getLogger("fsmem.fleet")


class FleetIndex:
    """One fleet database. ``partitions``: hash partitions of the units table by store, used
    when the table is created; ``vectors``: also keep a pgvector column where the extension
    can be created (skipped, logged once, where it cannot)."""

    def __init__(self, dsn: str, *, partitions: int = 0, vectors: bool = True,
                 embedder: "Embedder | None" = None) -> None:
        self.dsn = dsn
        self.partitions = partitions
        self.vectors = vectors
        self._embedder = embedder
        self._conn: "psycopg.Connection | None" = None
        self._vector: bool | None = None   # the vector column exists (known once synced)

    # -- the connection -------------------------------------------------------------------
    @property
    def conn(self) -> "psycopg.Connection":
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.dsn)
            self._vector = None
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "FleetIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _embedder_or_default(self) -> "Embedder":
        if self._embedder is None:
            # lazy: start-up, loaded only when used (+numpy)
            from fsmem.search.embed import HashEmbedder
            self._embedder = HashEmbedder()
        return self._embedder

    def _server_call(self, what: str, fn: Callable):
        """Run ``fn`` against the server; a lost connection or server error becomes a
        FleetError naming the DSN (the connection is dropped: the next call reconnects)."""
        psycopg = pg()
        try:
            try:
                return fn()
            except psycopg.OperationalError:   # e.g. the server restarted since the last call
                if self._conn is None or not self._conn.closed:
                    raise
                log.info("fleet: connection to %s lost; connecting again",
                         describe_dsn(self.dsn))
                self._conn = None
                return fn()   # each store's work is one transaction: doing it again is safe
        except psycopg.Error as exc:
            conn = self._conn
            if isinstance(exc, psycopg.OperationalError) or conn is None or conn.closed:
                self.close()
            else:
                try:
                    conn.rollback()
                except psycopg.Error:
                    self.close()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise FleetError(f"fleet {what} at {describe_dsn(self.dsn)}: {first}") from exc

    # -- the verbs ------------------------------------------------------------------------
    def sync(self, paths: Iterable[str | os.PathLike[str]]) -> SyncReport:
        """Bring the index in step with each store, from its change feed (listing it once
        when the feed cannot vouch for it). A store that cannot be read is reported in the
        result (``mode`` "error") and catches up from its feed next time; a server error
        raises FleetError (what was committed, store by store, stays)."""
        paths = [os.fspath(p) for p in paths]
        if not paths:
            raise FleetError("stores: none given (name at least one store directory)")
        report = SyncReport()

        def run() -> None:
            if self._vector is None:
                dim = self._embedder_or_default().dim if self.vectors else 0
                self._vector = ensure_schema(self.conn, partitions=self.partitions,
                                             vector_dim=dim)
            for path in paths:
                s = sync_store(self.conn, path, vector=bool(self._vector),
                               embedder=self._embedder_or_default() if self._vector else None)
                if s.mode == "error":
                    log.warning("fleet: %s skipped: %s", s.path, s.reason)
                report.stores.append(s)
        self._server_call("sync", run)
        return report

    def follow(self, paths: Iterable[str | os.PathLike[str]], *, interval: float = 5.0,
               rounds: int | None = None,
               on_round: Callable[[SyncReport | None, Exception | None], None] | None = None
               ) -> None:
        """``sync`` every ``interval`` seconds (``rounds``: that many, None: until
        interrupted). A round that fails (the server gone) is logged and retried next round;
        ``on_round(report, error)`` is told of each."""
        if interval <= 0:
            raise FleetError(f"interval: must be positive, got {interval}")
        paths = [os.fspath(p) for p in paths]
        n = 0
        while rounds is None or n < rounds:
            n += 1
            report, error = None, None
            try:
                report = self.sync(paths)
            except FleetError as exc:
                error = exc
                log.warning("fleet: sync round failed, retried in %.1f s: %s", interval, exc)
            if on_round is not None:
                on_round(report, error)
            if rounds is None or n < rounds:
                time.sleep(interval)

    def search(self, text: str, *, agent: str | None = None, store: str | None = None,
               layer: str | None = None, limit: int = 10) -> list[FleetHit]:
        """Units of every store matching ``text``, best first (fsmem.fleet.search)."""
        if store is not None and os.sep in store:
            store = os.path.abspath(store)

        def run() -> list[FleetHit]:
            if not has_schema(self.conn):
                self.conn.rollback()
                raise FleetError(f"no fleet index at {describe_dsn(self.dsn)} yet "
                                 "(run fsmem fleet sync first)")
            try:
                return search(self.conn, text, agent=agent, store=store, layer=layer,
                              limit=limit)
            finally:
                self.conn.rollback()   # a read: end the transaction, hold no snapshot
        return self._server_call("search", run)

    def stores(self) -> list[dict]:
        """What the index holds of each store: id, path, feed position, units, last sync."""
        def run() -> list[dict]:
            if not has_schema(self.conn):
                return []
            cur = self.conn.execute(f"SELECT store_id, path, id_source, feed, pos, units, "
                                    f"synced_at, listed_at, error FROM {STORES} ORDER BY path")
            names = [d.name for d in cur.description]
            out = [dict(zip(names, r)) for r in cur.fetchall()]
            self.conn.rollback()
            for r in out:
                for k in ("synced_at", "listed_at"):
                    r[k] = r[k].isoformat() if r[k] is not None else ""
            return out
        return self._server_call("status", run)

    def drop(self) -> None:
        """Drop the fleet tables (the stores are untouched; the next sync lists each once)."""
        self._server_call("drop", lambda: drop_schema(self.conn))
        self._vector = None
