"""Full-text search of the fleet index: one query across every store, each hit naming the
store (id and path) and the unit, so ``fsmem --root PATH show UNIT`` opens the original.

A query matches a unit when any of its words (``english`` configuration: stemmed, stop words
left out) or any of its CJK bigrams is in the unit's text; units rank by the sum of the two
``ts_rank`` scores (ties: the newer first). A unit that a present unit of the same store
supersedes (``meta["supersedes"]``) is hidden, as fsmem's own search hides it (whoever
may see the newer one). Visibility: with ``agent`` given, what that agent may see
(units not private, and its own private ones); without, the operator's view (everything).
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING, Any

import msgspec

from fsmem.fleet.rows import cjk_terms, latin_text
from fsmem.fleet.schema import STORES, UNITS, FleetError
from fsmem.format.layout import valid_layer
from fsmem.format.model import DEFAULT_AGENT, check_agent

if TYPE_CHECKING:
    import psycopg

__all__ = ["FleetHit", "search", "MAX_TERMS"]

MAX_TERMS = 32        # words (and, apart, bigrams) of a query taken
_WORD = re.compile(r"[^\W_]+")


class FleetHit(msgspec.Struct, kw_only=True, frozen=True):
    """One unit found: where it is (store id, store path, unit id, layer) and what it is."""

    store_id: str
    store_path: str
    unit_id: str
    layer: str
    agent: str              # "default" for the default agent
    private: bool
    score: float
    summary: str = ""
    snippet: str = ""
    created_at: str = ""    # RFC 3339, UTC
    first_at: str = ""      # the unit's first and last event
    last_at: str = ""


def _queries(text: str) -> tuple[str, str]:
    """(words joined by ``|`` for ``to_tsquery('english', ...)``, CJK bigrams as a tsquery
    literal): either may be "". Words are letters and digits only, so nothing in them is
    tsquery syntax; bigrams are CJK characters only, quoted."""
    norm = unicodedata.normalize("NFKC", text).lower()
    words = list(dict.fromkeys(_WORD.findall(latin_text(norm))))[:MAX_TERMS]
    bigrams = cjk_terms(norm, query=True)[:MAX_TERMS]
    cjk = " | ".join(f"'{b[:-2]}':*" if b.endswith(":*") else f"'{b}'" for b in bigrams)
    return " | ".join(words), cjk


def _iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z") if value is not None else ""


def search(conn: "psycopg.Connection", text: str, *, agent: str | None = None,
           store: str | None = None, layer: str | None = None, limit: int = 10
           ) -> list[FleetHit]:
    """The best ``limit`` units of the fleet for ``text`` (see the module docstring);
    ``store``: a store id or a store's path; ``layer``: one layer string as stored."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise FleetError(f"limit: must be a positive integer, got {limit!r}")
    if layer is not None and not valid_layer(layer):
        raise FleetError(f"layer: unknown layer {layer!r} (context, context@<agent>, "
                         "documents or stablemem)")
    who = None if agent is None else check_agent(agent, "agent")
    words, cjk = _queries(text)
    if not words and not cjk:
        return []
    params: dict[str, Any] = {"words": words, "cjk": cjk, "limit": limit}
    match, rank = [], []
    if words:
        match.append("u.tsv @@ to_tsquery('english', %(words)s)")
        rank.append("ts_rank(u.tsv, to_tsquery('english', %(words)s))")
    if cjk:
        match.append("u.cjk @@ %(cjk)s::tsquery")
        rank.append("ts_rank(u.cjk, %(cjk)s::tsquery)")
    where = ["(" + " OR ".join(match) + ")"]
    if who is not None:
        params["agent"] = who
        where.append("(NOT u.private OR u.agent = %(agent)s)")
    if store is not None:
        params["store"] = store
        where.append("(u.store_id = %(store)s OR s.path = %(store)s)")
    if layer is not None:
        params["layer"] = layer
        where.append("u.layer = %(layer)s")
    where.append(f"NOT EXISTS (SELECT 1 FROM {UNITS} n WHERE n.store_id = u.store_id "
                 "AND n.supersedes = u.unit_id)")
    sql = (f"SELECT u.store_id, s.path, u.unit_id, u.layer, u.agent, u.private, "
           f"{' + '.join(rank)} AS score, u.summary, u.snippet, u.created_at, u.first_at, "
           f"u.last_at FROM {UNITS} u JOIN {STORES} s ON s.store_id = u.store_id "
           f"WHERE {' AND '.join(where)} "
           f"ORDER BY score DESC, u.last_at DESC NULLS LAST, u.store_id, u.unit_id "
           f"LIMIT %(limit)s")
    rows = conn.execute(sql, params).fetchall()
    return [FleetHit(store_id=r[0], store_path=r[1], unit_id=r[2], layer=r[3],
                     agent=r[4] or DEFAULT_AGENT, private=r[5], score=float(r[6]),
                     summary=r[7], snippet=r[8], created_at=_iso(r[9]), first_at=_iso(r[10]),
                     last_at=_iso(r[11])) for r in rows]
