"""One search over every layer: ``Reader.search``.

Why: ``query`` is HomeAgent's ``coldcontext_query``, L2 only, so a fact recalled into L1 or
distilled into L3 vanished from it. ``search`` ranks this agent's L1, L2 (with HomeAgent's
documents) and L3 together, each hit labelled with its layer, and adds the graph facts of
L3 that the query names: beside the unit they were read from when that unit is a hit, as
hits of their own otherwise. A unit is found wherever it lives now.

How: each layer has its own index (fsmem.search.index.Index: documents/ and stablemem/ saved,
L1 in memory: small and changing at every append); BM25 counts the rows of every layer
searched as one corpus (``Index.hits(others=...)``), so the scores of the layers are on one
scale and merge by score; a fact scores as BM25 of its "subject relation object" text over
the same corpus statistics. An update hides the version it supersedes in every layer.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Sequence

from fsmem.format.errors import FsmemError
from fsmem.format.views import Fact, Hit

if TYPE_CHECKING:
    from fsmem.search.index import Index

Reader = Any   # fsmem.memory.reader.Reader (which imports this module: no cycle)

log = logging.getLogger("fsmem.search_all")

__all__ = ["SEARCH_LAYERS", "search", "layer_indexes"]

#: the layer names ``search`` takes ("context": this memory's own L1)
SEARCH_LAYERS = ("context", "documents", "stablemem")
_FACT_WORDS = 8          # query words looked up in the graph
_FACTS_PER_WORD = 20
_WORD = re.compile(r"\w{3,}|[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]{2,}")


def _layers(mem: "Reader", layers: Sequence[str] | None) -> list[str]:
    names = list(SEARCH_LAYERS if layers is None else layers)
    bad = [n for n in names if n not in SEARCH_LAYERS]
    if bad or not names:
        raise ValueError(f"layers must be some of {', '.join(SEARCH_LAYERS)}, got "
                         f"{', '.join(map(repr, bad)) or 'none'}")
    return [mem.l1 if n == "context" else n for n in dict.fromkeys(names)]


def layer_indexes(mem: "Reader", layers: Sequence[str]) -> "dict[str, Index]":
    """The index of each layer, loaded (or built) and in step with its directory."""
    out = {}
    for layer in layers:
        if layer == "documents":
            out[layer] = mem.index
            continue
        with mem._index_lock:
            idx = mem._layer_indexes.get(layer)
            if idx is None:
                # lazy: start-up, loaded only when used (+numpy, ctypes)
                from fsmem.search.index import Index
                idx = Index(mem, layer)
                if not idx.writable or not idx.load():
                    idx.rebuild()
                mem._layer_indexes[layer] = idx
            idx.sync()
            out[layer] = idx
    return out


def search(mem: "Reader", text: str, top_k: int = 5, *, layers: Sequence[str] | None = None,
           scope: str = "all", agent: str | None = None, facts: bool = True,
           count: bool = True) -> list[Hit]:
    """The ``top_k`` best units (and graph facts) for ``text`` in ``layers`` (default: every
    layer: this agent's L1, L2 with HomeAgent's documents, L3), best first; what this
    agent may see (``scope``/``agent`` as ``Reader.query``). Read-only; each unit hit's
    access is logged when the log is writable (``count``)."""
    names = _layers(mem, layers)
    who = mem.who(scope, agent)
    if top_k <= 0 or not text.strip():
        return []
    # lazy: start-up, loaded only when used (+numpy)
    from fsmem.search.query_vectors import one_query
    with one_query():   # every layer's index embeds the query once between them
        return _search(mem, text, top_k, names, who, facts, count)


def _search(mem: "Reader", text: str, top_k: int, names: list[str], who: Any,
            facts: bool, count: bool) -> list[Hit]:
    indexes = layer_indexes(mem, names)
    hidden: set[str] = set()
    for idx in indexes.values():
        hidden |= idx.superseded()
    want = top_k + min(len(hidden), 50)
    found: dict[str, Hit] = {}
    for layer, idx in indexes.items():
        others = [o for name, o in indexes.items() if name != layer]
        for hit in idx.hits(text, want, mem.ranker, who, others=others):
            if hit.unit_id in hidden:
                continue
            prev = found.get(hit.unit_id)
            if prev is None or hit.score > prev.score:   # (seen in two layers mid-move)
                found[hit.unit_id] = hit
    hits = sorted(found.values(), key=lambda h: (-round(h.score, 6), h.unit_id))[:top_k]
    if count and hits:
        mem.access.record(h.unit_id for h in hits)
    if facts and "stablemem" in names:
        hits = _with_facts(mem, text, hits, list(indexes.values()), top_k)
    return hits


def _with_facts(mem: "Reader", text: str, hits: list[Hit], indexes: "list[Index]",
                top_k: int) -> list[Hit]:
    """``hits`` with the graph facts the query names: each beside the unit hit it was read
    from, else a hit of its own (kind "fact") where its score places it."""
    found = _graph_facts(mem, text)
    if not found:
        return hits
    scores = _fact_scores(text, [f.text for f in found], indexes)
    by_unit = {h.unit_id: h for h in hits}
    alone: list[Hit] = []
    for fact, score in sorted(zip(found, scores), key=lambda p: -p[1]):
        if score <= 0:
            continue
        owner = by_unit.get(fact.unit_id) if fact.unit_id else None
        if owner is not None:
            owner.facts.append(fact)
        else:
            alone.append(Hit(unit_id=fact.unit_id, score=float(score), summary=fact.text,
                             layer="stablemem", kind="fact", facts=[fact]))
    merged = sorted([*hits, *alone], key=lambda h: (-round(h.score, 6), h.kind != "unit",
                                                    h.unit_id))
    return merged[:top_k]


def _graph_facts(mem: "Reader", text: str) -> list[Fact]:
    """The relations of graph.db whose entity or relation names contain a query word."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))[:_FACT_WORDS]
    if not words:
        return []
    out: dict[tuple[str, str, str], Fact] = {}
    for word in words:
        try:
            recall = mem.graph.search(word, limit=_FACTS_PER_WORD)
        except FsmemError as exc:   # a damaged graph.db (fsck reports it): units still found
            log.warning("graph facts not searched: %s", exc)
            return list(out.values())
        for rel in recall.relations:
            key = (rel.source_name, rel.relation_type, rel.target_name)
            if key in out:
                continue
            prov = next((p for p in rel.provenance if p.unit_id), None)
            out[key] = Fact(subject=rel.source_name, relation=rel.relation_type,
                            object=rel.target_name, confidence=rel.confidence,
                            unit_id=prov.unit_id if prov else "",
                            event_id=prov.event_id if prov else "")
    return list(out.values())


def _fact_scores(text: str, facts: list[str], indexes: "list[Index]") -> list[float]:
    """BM25 of each fact's text for ``text``, with the idf and mean length of the layers'
    rows searched (one scale with the units' scores)."""
    import numpy as np  # lazy: numpy arrives with the index

    from fsmem.search import ranking  # lazy: start-up (+numpy), loaded with the index
    from fsmem.search.analyze import is_pair  # lazy: the same
    from fsmem.search.index_entry import query_terms, term_counts  # lazy: the same
    q_terms = query_terms(text)
    if not len(q_terms):
        return [0.0] * len(facts)
    df = np.zeros(len(q_terms), np.float32)
    n = total = 0.0
    for idx in indexes:
        d, k, t = idx.term_stats(q_terms)
        df, n, total = df + d, n + k, total + t
    avgdl = max(total / max(n, 1.0), 1e-9)
    idf = np.log1p((max(n, 1.0) - df + 0.5) / (df + 0.5)).astype(np.float32)
    idf[is_pair(q_terms)] *= np.float32(ranking.PAIR_WEIGHT)
    out = []
    for fact in facts:
        terms, tfs = term_counts([fact])
        j = np.minimum(np.searchsorted(q_terms, terms), len(q_terms) - 1)
        hit = q_terms[j] == terms
        tf = tfs[hit].astype(np.float32)
        dl = float(tfs[~is_pair(terms)].sum())
        denom = tf + ranking.K1 * (1 - ranking.B + ranking.B * dl / avgdl)
        out.append(float((idf[j[hit]] * tf * (ranking.K1 + 1) / denom).sum()))
    return out
