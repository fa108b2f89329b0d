"""Bringing the fleet index in step with one store, from the store's change feed.

A store is read as a reader (``fsmem.memory.reader.Reader``: no lock, nothing created or
written). Its position (feed id, sequence number) is kept in ``fsmem_fleet_stores``; a sync
reads the records after it, looks each named unit up in the layers (a record is an intent: the
unit may be elsewhere, or nowhere) and upserts or deletes its row, and moves the position, all
in one transaction per store. With no position yet, a feed started again (another id) or
records compacted away (``ChangesTruncated``) the store is listed once, every layer, and rows of
that store not seen are deleted. A writer session still open (a ``begin`` mark with no ``end``)
is looked at but its records are read again next time: a record is written before its change.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import blake3

from fsmem.fleet.rows import UnitRow, latin_text, ns_datetime, read_row
from fsmem.fleet.schema import STORES, UNITS, pg
from fsmem.format.errors import FsmemError
from fsmem.format.layout import Layout, View
from fsmem.format.model import NAME_RE
from fsmem.memory.reader import Reader
from fsmem.search.index_entry import unit_ident
from fsmem.store.changes import UNIT_KINDS, Change, ChangesTruncated, read_changes, read_recent

if TYPE_CHECKING:
    import psycopg

    from fsmem.search.embed import Embedder

__all__ = ["StoreSync", "SyncReport", "store_identity", "sync_store", "BATCH"]

log = logging.getLogger("fsmem.fleet")

BATCH = 500   # rows a statement batch upserts


@dataclass
class StoreSync:
    """What one sync did to one store. ``mode``: ``incremental`` (from the feed), ``full``
    (listed: ``reason`` says why) or ``error`` (``reason``: what failed; nothing of the store
    changed, it catches up next time). ``records``: the feed's unit records read."""

    path: str
    store_id: str = ""
    mode: str = ""
    reason: str = ""
    records: int = 0
    upserted: int = 0
    deleted: int = 0
    unchanged: int = 0
    unreadable: int = 0
    feed: str = ""
    pos: int = 0


@dataclass
class SyncReport:
    """Every store of one sync round, in the order given."""

    stores: list[StoreSync] = field(default_factory=list)

    @property
    def errors(self) -> list[StoreSync]:
        return [s for s in self.stores if s.mode == "error"]

    def total(self, what: str) -> int:
        return sum(getattr(s, what) for s in self.stores)


def store_identity(layout: Layout) -> tuple[str, str]:
    """(store id, where it came from): the marker's ``id`` (format 4: ``marker``); for an
    older store that no writer opened since, ``p-`` + a BLAKE3 of the store's real path
    (``path``: stable while the store stays where it is; the feed's id is not used, as a
    store without a feed yet gets one later)."""
    sid = layout.store_id()
    if sid:
        return sid, "marker"
    real = os.path.realpath(layout.root)
    return "p-" + blake3.blake3(real.encode("utf-8", "surrogateescape")).hexdigest()[:32], "path"


def _safe_pos(records: Sequence[Change], since: int) -> int:
    """The position to keep after ``records``: before the ``begin`` of a writer session still
    open (its records name changes that may not be made yet), else the last record."""
    open_at = 0
    for r in records:
        if r.kind == "begin":
            open_at = r.seq
        elif r.kind == "end":
            open_at = 0
    if open_at:
        return open_at - 1
    return records[-1].seq if records else since


def _locate(layout: Layout, layers: Sequence[str], unit_id: str) -> tuple[str, str] | None:
    """(layer, path) of ``unit_id`` in this store now (pending journal entries applied), the
    copy with a manifest first; None if it is in no layer."""
    view: View = layout.view(tuple(layers), only=unit_id)
    found = [(layer, path) for layer in layers
             if (path := view.units.get(layer, {}).get(unit_id)) is not None]
    for layer, path in found:
        if os.path.isfile(os.path.join(path, "manifest.json")):
            return layer, path
    return found[0] if found else None


class _Writer:
    """Batched upserts and deletes of one store's rows, inside the caller's transaction."""

    def __init__(self, conn: "psycopg.Connection", store_id: str, vector: bool,
                 embedder: "Embedder | None") -> None:
        self.conn, self.store_id = conn, store_id
        self.vector = vector and embedder is not None
        self.embedder = embedder
        self.rows: list[UnitRow] = []
        cols = ("store_id, unit_id, layer, agent, private, supersedes, summary, snippet, tags, "
                "created_at, first_at, last_at, events, ident, tsv, cjk")
        vals = "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, " \
               "to_tsvector('english', %s), array_to_tsvector(%s::text[])"
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols.split(", ")[2:])
        if self.vector:
            cols, vals, sets = cols + ", embedding", vals + ", %s::vector", \
                sets + ", embedding = EXCLUDED.embedding"
        self.sql = (f"INSERT INTO {UNITS} ({cols}) VALUES ({vals}) "
                    f"ON CONFLICT (store_id, unit_id) DO UPDATE SET {sets}")

    def add(self, row: UnitRow) -> None:
        self.rows.append(row)
        if len(self.rows) >= BATCH:
            self.flush()

    def _params(self, r: UnitRow, vec: Any) -> tuple:
        out = (self.store_id, r.unit_id, r.layer, r.agent, r.private, r.supersedes,
               r.summary, r.snippet, r.tags, ns_datetime(r.created_ns), ns_datetime(r.first_ns),
               ns_datetime(r.last_ns), r.events, r.ident, latin_text(r.text), r.cjk)
        return out + ("[" + ",".join(f"{x:.6g}" for x in vec) + "]",) if self.vector else out

    def flush(self) -> None:
        if not self.rows:
            return
        vecs: Any = self.embedder.embed([r.text for r in self.rows]) if self.vector \
            else [None] * len(self.rows)
        with self.conn.cursor() as cur:
            cur.executemany(self.sql, [self._params(r, v) for r, v in zip(self.rows, vecs)])
        self.rows.clear()

    def delete(self, unit_ids: Iterable[str]) -> int:
        ids = list(unit_ids)
        if not ids:
            return 0
        cur = self.conn.execute(f"DELETE FROM {UNITS} WHERE store_id = %s AND unit_id = ANY(%s)",
                                (self.store_id, ids))
        return cur.rowcount


def _known(conn: "psycopg.Connection", store_id: str, unit_ids: Iterable[str] | None
           ) -> dict[str, tuple[int, str]]:
    """unit id -> (identity, layer) of the rows the index holds for this store (``unit_ids``:
    only those; None: every row)."""
    if unit_ids is None:
        cur = conn.execute(f"SELECT unit_id, ident, layer FROM {UNITS} WHERE store_id = %s",
                           (store_id,))
    else:
        cur = conn.execute(f"SELECT unit_id, ident, layer FROM {UNITS} WHERE store_id = %s "
                           "AND unit_id = ANY(%s)", (store_id, list(unit_ids)))
    return {u: (i, layer) for u, i, layer in cur}


def _take(reader: Reader, w: _Writer, out: StoreSync, known: dict[str, tuple[int, str]],
          layers: Sequence[str], unit_id: str, found: tuple[str, str] | None) -> bool:
    """Bring one unit's row in step with where it is (``found``: from a listing or a
    lookup); False if it is in no layer (the caller deletes its row)."""
    for _attempt in range(3):
        if found is None:
            return False
        layer, path = found
        ident = unit_ident(path)
        if ident is not None and known.get(unit_id) == (ident, layer):
            out.unchanged += 1
            return True
        try:
            w.add(read_row(reader.plugins, layer, unit_id, path))
            out.upserted += 1
            return True
        except (FsmemError, OSError, ValueError) as exc:
            if not reader.layout.vanished(path):
                log.warning("fleet: skipping unreadable unit %s: %s", path, exc)
                out.unreadable += 1
                return True   # damaged, not gone: its row (if any) stays
        found = _locate(reader.layout, layers, unit_id)   # it moved while read: look again
    return found is not None


def _register(conn: "psycopg.Connection", out: StoreSync, id_source: str
              ) -> tuple[str, int, tuple[str, int]] | None:
    """Claim this store's row (locked for the transaction); the (feed, position) kept, or
    None when there is none yet. FsmemError when the id is held by a store at another path
    that still has it (a copy, e.g. ``cp -a``: give one of them a new marker id)."""
    conn.execute(f"INSERT INTO {STORES} (store_id, path, id_source) VALUES (%s, %s, %s) "
                 "ON CONFLICT (store_id) DO NOTHING", (out.store_id, out.path, id_source))
    path, feed, pos, seg, off, listed = conn.execute(
        f"SELECT path, feed, pos, hint_segment, hint_offset, listed_at FROM {STORES} "
        "WHERE store_id = %s FOR UPDATE", (out.store_id,)).fetchone()
    if path != out.path:
        if os.path.isdir(path) and store_identity(Layout(path))[0] == out.store_id:
            raise FsmemError(f"{out.path}: store id {out.store_id} is also the id of the store "
                             f"at {path} (a copy?); skipped: one path per store id")
        conn.execute(f"UPDATE {STORES} SET path = %s WHERE store_id = %s",
                     (out.path, out.store_id))   # the store moved
    # one path holds one store: another id registered here was replaced or upgraded
    stale = [r[0] for r in conn.execute(f"SELECT store_id FROM {STORES} WHERE path = %s "
                                        "AND store_id <> %s", (out.path, out.store_id))]
    if stale:
        conn.execute(f"DELETE FROM {UNITS} WHERE store_id = ANY(%s)", (stale,))
        conn.execute(f"DELETE FROM {STORES} WHERE store_id = ANY(%s)", (stale,))
    return (feed, pos, (seg, off)) if listed is not None else None


def sync_store(conn: "psycopg.Connection", path: str, *, vector: bool = False,
               embedder: "Embedder | None" = None) -> StoreSync:
    """Bring the rows of the store at ``path`` in step with it, in one transaction. A store
    that cannot be read (missing, not a store, unreadable) is reported (``mode`` "error") and
    left as the index has it; PostgreSQL errors propagate (the transaction is rolled back)."""
    out = StoreSync(path=os.path.abspath(os.fspath(path)))
    try:
        reader = Reader.open(out.path)
        out.store_id, id_source = store_identity(reader.layout)
    except (FsmemError, OSError) as exc:
        out.mode, out.reason = "error", str(exc)
        return out
    try:
        with conn.transaction():
            kept = _register(conn, out, id_source)
            _follow(conn, reader, out, kept, vector, embedder)
    except (FsmemError, OSError, pg().DataError) as exc:   # this store's, not the server's
        out.mode, out.reason = "error", str(exc)
        out.upserted = out.deleted = out.unchanged = 0
        _note_error(conn, out)
    finally:
        reader.close()
    return out


def _note_error(conn: "psycopg.Connection", out: StoreSync) -> None:
    try:
        with conn.transaction():
            conn.execute(f"UPDATE {STORES} SET error = %s WHERE store_id = %s",
                         (out.reason[:2000], out.store_id))
    except Exception as exc:   # noqa: BLE001 - the report carries the error already
        log.debug("fleet: could not note the error of %s: %s", out.path, exc)


def _follow(conn: "psycopg.Connection", reader: Reader, out: StoreSync,
            kept: tuple[str, int, tuple[str, int]] | None, vector: bool,
            embedder: "Embedder | None") -> None:
    meta = reader.layout.meta
    layers = reader.layout.layers()
    w = _Writer(conn, out.store_id, vector, embedder)
    reason = "no position yet" if kept is None else ""
    if kept is not None:
        try:
            fr = read_changes(meta, kept[1], hint=kept[2], feed=kept[0])
        except ChangesTruncated as exc:
            reason = f"feed truncated ({exc})"
    if reason:
        fr = read_recent(meta)   # the position is taken before the listing
        out.mode, out.reason = "full", reason
        _list(conn, reader, w, out, layers)
    else:
        out.mode = "incremental"
        names = {r.unit for r in fr.records if r.kind in UNIT_KINDS}
        out.records = sum(1 for r in fr.records if r.kind in UNIT_KINDS)
        names = {n for n in names if NAME_RE.match(n)}   # "<id>.json": a HomeAgent file
        known = _known(conn, out.store_id, names)
        gone = [u for u in sorted(names)
                if not _take(reader, w, out, known, layers, u, _locate(reader.layout, layers, u))]
        w.flush()
        out.deleted = w.delete(u for u in gone if u in known)
    out.feed, out.pos = fr.feed, _safe_pos(fr.records, fr.last if reason else kept[1])
    # where the next read starts in the segment: only when nothing before it is read again
    hint = fr.hint if out.pos == fr.last else ("", 0)
    now = datetime.now(timezone.utc)
    count = f", units = (SELECT count(*) FROM {UNITS} WHERE store_id = %s)" \
        if reason or out.upserted or out.deleted else ""
    conn.execute(f"UPDATE {STORES} SET feed = %s, pos = %s, hint_segment = %s, "
                 f"hint_offset = %s, synced_at = %s, error = ''{count}"
                 + (", listed_at = %s" if reason else "") + " WHERE store_id = %s",
                 (out.feed, out.pos, hint[0], hint[1], now,
                  *((out.store_id,) if count else ()), *((now,) if reason else ()),
                  out.store_id))


def _list(conn: "psycopg.Connection", reader: Reader, w: _Writer, out: StoreSync,
          layers: Sequence[str]) -> None:
    """Every unit of every layer (one consistent view), and rows not seen deleted."""
    def listing(view: View) -> dict[str, tuple[str, str]]:
        seen: dict[str, tuple[str, str]] = {}
        for layer in layers:
            for uid, path in view.layer(layer):
                if uid not in seen or not os.path.isfile(os.path.join(seen[uid][1],
                                                                      "manifest.json")):
                    seen[uid] = (layer, path)
        return seen
    units = reader.consistent(listing, tuple(layers))
    known = _known(conn, out.store_id, None)
    present = set()
    for uid in sorted(units):
        if _take(reader, w, out, known, layers, uid, units[uid]):
            present.add(uid)
    w.flush()
    out.deleted = w.delete(u for u in known if u not in present)
