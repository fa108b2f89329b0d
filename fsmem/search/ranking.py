"""Ranking arithmetic over event rows: BM25, conversation neighbours, fusion, unit scores.

Pure numpy, no I/O. The index (``fsmem.search.index``) holds one row per event (a unit's summary and
a legacy document are rows of their own) and calls these functions; the parameters below were
chosen by measurement on the fixtures (docs/BENCHMARKS.md, "Analyzer and ranking").

Neighbours: two events are neighbours when they are adjacent in time among the events of the
same conversation key (the unit's ``meta["session"]`` when set, else their source; the default
user/agent sources of one chat share a key), at most ``WINDOW_NS`` apart, and either in the
same unit or both conversation turns (events with a role, or of a unit with a session).
Events with neither whose source is a speaker (``KIND_SPOKEN``: plain ``commit(text,
source="Caroline")`` turns) are ordered as one group and neighbour where speakers alternate.
Independent documents committed in a burst have none of these: they are never neighbours.
"""

from __future__ import annotations

import numpy as np

__all__ = ["K1", "B", "PAIR_WEIGHT", "SMOOTH", "WINDOW_NS", "MATCH_RATIO", "KIND_PSEUDO",
           "KIND_EVENT", "KIND_TURN", "KIND_SPOKEN", "KIND_ASKS",
           "REPLY_WEIGHT", "SPEAKER_WEIGHT", "DATE_WEIGHT",
           "TRANSLATION_WEIGHT", "GLOSS_WEIGHT", "SYNONYM_WEIGHT",
           "DENSE_WEIGHTS", "REACH_POWER", "FULL_COVERAGE", "SCRIPT_BALANCE",
           "conversation_key", "event_kind", "asks", "base_kind", "asking", "neighbour_group",
           "link_neighbours", "bm25_add_term", "smooth",
           "unit_max", "minmax", "coverage", "dense_weight", "lexical_share", "fuse",
           "cjk_share", "reach", "balance_scripts", "DEFAULT_RANKER"]

DEFAULT_RANKER = "bm25"   # the best on fixtures/retrieval (docs/BENCHMARKS.md)
K1, B = 1.2, 0.35         # BM25; weaker length normalisation than the textbook 0.75
PAIR_WEIGHT = 0.3         # a query's word pair terms (fsmem.search.analyze) count at this share
                          # of their idf: phrase evidence, not a second copy of the words
SMOOTH = 0.5              # a turn's score + SMOOTH x its best neighbour's
WINDOW_NS = 30 * 60 * 1_000_000_000   # turns further apart are not neighbours
SMOOTH_FUSED = True       # with an embedder, smooth the fused score (measured better than
                          # smoothing the lexical score before fusion)
MATCH_RATIO = 0.5         # events_matched: events scoring at least this share of the best
# Dense weight of "fusion", per query, from the lexical coverage c of the query (``coverage``):
# hi - (hi - lo) x c. A query whose words the best row holds (c near 1) keeps the lexical
# order; one that shares few words with anything (a paraphrase, another language) leans on
# the embedder. A fixed weight cannot be right for both: 0.85 (chosen on paraphrase-heavy
# fixtures) lost to lexical on keyword questions (docs/DECISIONS.md "Fusion").
DENSE_WEIGHTS = (0.3, 0.9)
# Script reach (``reach``): where the lexical signal cannot see a row (an English query, a
# Chinese note), the row's lexical part is stood in for by its scaled dense score d raised to
# this power: a close match counts nearly in full, a middling one little (e5's cross-language
# similarities of unrelated notes sit mid-band). 1 (d itself) pushed such notes past English
# ones on paraphrase questions; 2.5 was chosen from 1-4 (docs/DECISIONS.md "Search").
REACH_POWER = 2.5
# Lexical share (``lexical_share``): min-max scaling makes the best lexical row 1 however
# little of the query it holds (a row naming only the speakers of a chat, whose names are in
# every question). Below this coverage the lexical scores count in proportion to it.
# Chosen on our sets from 0.2-1 (docs/DECISIONS.md "Search").
FULL_COVERAGE = 0.5

# Script balance (``balance_scripts``): a multilingual embedder's cosines between a query and
# passages in the other script sit lower as a whole (e5-small: an English note's best match
# among Chinese notes ranked below most English ones), so a note in the other language could
# not reach the top however well it answered. Per query, each script's rows are shifted down
# by this share of their median cosine. 1 lifts the other script's noise with its answers
# (paraphrase -3 questions, lived conversations -3); 0.5-0.85 were measured, 0.85 kept
# (docs/DECISIONS.md "Search").
SCRIPT_BALANCE = 0.85
KIND_PSEUDO, KIND_EVENT, KIND_TURN = -1, 0, 1   # summary/legacy row; event; turn (has a role)
KIND_SPOKEN = 2   # an event without role or session whose source is a speaker (a plain
                  # ``commit(text, source="Caroline")`` turn): neighbours in a dialogue only
# A flag on a row's kind (never on KIND_PSEUDO): the event asks (its text ends in a question
# mark). The turn after it is its answer and takes REPLY_WEIGHT of its score, where any
# other neighbour takes SMOOTH: "Got it! I start on the 17th" is found by the words of
# "Tom, any news from the bakery interview?". Lexical and fusion only (dense and rrf scores
# sit too close together). 0.5 / 0.7 / 0.8 / 1.0 measured, with the question keeping 0.5 /
# 0.7 / all of its own score, and asking only when its question sentences are half of it
# (docs/DECISIONS.md "Search": an answer takes more of its question's score).
KIND_ASKS = 8
REPLY_WEIGHT = 0.7
_QUESTION_MARKS = ("?", "？")
# A query word naming the speaker of a row (``fsmem.search.speakers``) counts at this share of
# its idf, on top of the word itself (which the turns addressing that person hold too).
SPEAKER_WEIGHT = 0.5
# A day a query's relative date points at (``fsmem.search.when``) counts at this share of the
# day term's idf.
DATE_WEIGHT = 3.0
# A query word's translation into the other script (``fsmem.search.bridge``: "vet" -> 兽医)
# counts at this share of its idf: a translation is the same word (0.6 / 1.0 / 1.2 measured:
# docs/DECISIONS.md "Search").
TRANSLATION_WEIGHT = 1.0
# A Chinese query word's English glosses (烤箱 -> "oven") count at this share: in its own script
# the word matches as its characters and its bigram, in English as one stem, so at 1.0 an
# English note is outranked by any Chinese note sharing a phrase (1.0 / 1.5 / 2.0 / 3.0
# measured: docs/DECISIONS.md "Search").
GLOSS_WEIGHT = 1.5
# A Chinese query word's synonyms (the Chinese words sharing a meaning with it: 车胎 -> 轮胎)
# count at this share: another word for the same thing, less sure than the word (0.3 / 0.5 /
# 0.6 / 0.75 / 1.0 measured: docs/DECISIONS.md "Search").
SYNONYM_WEIGHT = 0.75
_DEFAULT_CHAT = ("user", "agent", "assistant")


def conversation_key(source: str, role: str, session: str = "") -> str:
    """The key under which events are neighbours: the unit's ``session`` (its meta) when it
    has one, else the source, except that the sources a chat turn gets by default
    (``TextEvent`` without a channel: user / agent) share one key."""
    if session:
        return "\0session:" + session
    if role and source in _DEFAULT_CHAT:
        return "\0chat"
    return source


def event_kind(role: str, session: str = "", speaker: str = "", asks: bool = False) -> int:
    """A turn (may neighbour events of other units) has a role or belongs to a session; an
    event of neither spoken by a ``speaker`` may neighbour the turns of other speakers.
    ``asks``: flagged KIND_ASKS (the event's text ends in a question mark)."""
    kind = KIND_TURN if role or session else KIND_SPOKEN if speaker else KIND_EVENT
    return kind | KIND_ASKS if asks else kind


def asks(texts: list[str]) -> bool:
    """Whether an event asks: its last non-empty text ends in a question mark ("?", "？")."""
    last = next((t for t in reversed(texts) if t.strip()), "")
    return last.rstrip().endswith(_QUESTION_MARKS)


def base_kind(kind: np.ndarray) -> np.ndarray:
    """Rows' kinds without the KIND_ASKS flag."""
    return np.where(kind >= 0, kind & ~np.int8(KIND_ASKS), kind).astype(kind.dtype)


def asking(kind: np.ndarray) -> np.ndarray:
    """Which rows ask (their kind has the KIND_ASKS flag)."""
    return (kind >= 0) & ((kind & np.int8(KIND_ASKS)) != 0)


def neighbour_group(key: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """The group a row is sorted in to find its neighbours: its key's code (>= 0), or -1 for
    every spoken row (``KIND_SPOKEN``, flagged or not): they are one group."""
    return np.where(base_kind(np.asarray(kind)) == KIND_SPOKEN, np.int64(-1),
                    np.asarray(key, np.int64))


def link_neighbours(unit: np.ndarray, key: np.ndarray, time: np.ndarray, kind: np.ndarray,
                    window_ns: int | None = None, tie: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(prev, next) row of each row (-1: none), from one stable sort by (key, time, tie):
    ``tie`` orders rows of equal key and time (the rank of their unit's id), so a live index
    and one rebuilt from the directories, whose rows come in other orders, link the same
    neighbours; rows of one unit stay in event order.

    Spoken rows (``KIND_SPOKEN``: their key is their speaker's source) are sorted as one
    group: two adjacent ones are neighbours when their speakers differ (a dialogue), or when
    both are part of a dialogue (one speaker's two turns in a row). A burst of documents
    from one source never is."""
    window_ns = WINDOW_NS if window_ns is None else window_ns
    n = len(unit)
    prev = np.full(n, -1, np.int32)
    nxt = np.full(n, -1, np.int32)
    if n < 2:
        return prev, nxt
    key = np.asarray(key, np.int64)
    kind = base_kind(np.asarray(kind))
    group = neighbour_group(key, kind)
    spoken = group < 0
    order = np.lexsort((time, group) if tie is None else (tie, time, group))
    a, b = order[:-1], order[1:]
    near = (group[a] == group[b]) & (time[b] - time[a] <= window_ns) \
        & (kind[a] != KIND_PSEUDO) & (kind[b] != KIND_PSEUDO)
    ok = near & ((unit[a] == unit[b]) | ((kind[a] == KIND_TURN) & (kind[b] == KIND_TURN)))
    both = near & spoken[a] & spoken[b]
    if both.any():
        change = both & (key[a] != key[b])
        talk = np.zeros(n, bool)
        talk[a[change]] = True
        talk[b[change]] = True
        ok |= both & (change | (talk[a] & talk[b]))
    prev[b[ok]] = a[ok]
    nxt[a[ok]] = b[ok]
    return prev, nxt


def bm25_add_term(scores: np.ndarray, rows: np.ndarray, tf: np.ndarray, idf: np.float32,
                  doclen: np.ndarray, avgdl: float) -> None:
    """Add the Okapi BM25 contribution of one query term's postings (``rows`` distinct, with
    their ``tf``; one ``idf``) into ``scores``, by plain indexing (``np.add.at`` is much
    slower and only needed for repeated rows)."""
    k1, b = K1, B
    denom = tf + k1 * (1 - b + b * doclen[rows] / avgdl)
    scores[rows] += idf * tf * (k1 + 1) / denom


def smooth(scores: np.ndarray, prev: np.ndarray, nxt: np.ndarray,
           extra: tuple[np.ndarray, np.ndarray] | None = None,
           weight: float | None = None, asks: np.ndarray | None = None) -> np.ndarray:
    """score + weight x max(previous, next neighbour's score); ``extra`` adds (i, j) edges
    (both directions) found at query time for rows not yet compacted. ``asks``: rows that
    ask a question; the row after one takes REPLY_WEIGHT of its score."""
    weight = SMOOTH if weight is None else weight
    if weight == 0 or not len(scores):
        return scores
    w = np.float32(weight)
    ext = np.append(scores, np.float32(0))   # row -1 reads the appended 0
    if asks is None or not asks.any():
        nb = w * np.maximum(ext[prev], ext[nxt])
    else:
        # never below the caller's weight: an answer takes at least what any neighbour does
        answers = np.append(asks, False)[prev]
        nb = np.maximum(np.where(answers, np.float32(max(REPLY_WEIGHT, weight)), w) * ext[prev],
                        w * ext[nxt])
    if extra is not None and len(extra[0]):
        i, j = extra
        np.maximum.at(nb, i, w * scores[j])
        np.maximum.at(nb, j, w * scores[i])
    return scores + nb


def unit_max(scores: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per unit, the best of its event rows; rows of a unit are contiguous from ``starts``
    (every unit has at least one row)."""
    if not len(starts):
        return np.zeros(0, scores.dtype)
    return np.maximum.reduceat(scores, starts)


def minmax(x: np.ndarray, live: np.ndarray | None = None) -> np.ndarray:
    """Scaled to [0, 1] by the min and max over ``live`` entries (all when None)."""
    if not x.size:
        return x
    v = x if live is None else x[live]
    if not v.size:
        return np.zeros_like(x)
    lo, hi = float(v.min()), float(v.max())
    if hi <= lo:
        return np.where(x > 0, 1.0, 0.0).astype(np.float32) if hi > 0 else np.zeros_like(x)
    return ((x - lo) / (hi - lo)).astype(np.float32)


def coverage(best: float, idf_mass: float) -> float:
    """How much of the query's lexical evidence its best row holds, in [0, 1]: the row's BM25
    over the sum of the query terms' idf (what a row of average length holding each term once
    scores; a term no row holds counts at the highest idf, as unmatched evidence)."""
    if idf_mass <= 0 or best <= 0:
        return 0.0
    return min(best / idf_mass, 1.0)


def dense_weight(cov: float, weights: tuple[float, float] | None = None) -> float:
    """The dense weight of ``fuse`` for a query of lexical coverage ``cov``."""
    lo, hi = DENSE_WEIGHTS if weights is None else weights
    return hi - (hi - lo) * min(max(cov, 0.0), 1.0)


def lexical_share(cov: float) -> float:
    """How much of its min-max scaled lexical signal a query of coverage ``cov`` fuses: all
    from ``FULL_COVERAGE`` up, below it cov / FULL_COVERAGE (the best row's share of the
    query's evidence, relative to a match that counts in full)."""
    if FULL_COVERAGE <= 0:
        return 1.0
    return min(max(cov, 0.0) / FULL_COVERAGE, 1.0)


def cjk_share(unigrams: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per row (or query), the share of its lexical terms that are CJK, from its count of CJK
    character terms and its count of all terms: a character gives a unigram and about one
    bigram, so min(1, 2 x unigrams / terms)."""
    return np.minimum(2 * unigrams / np.maximum(lengths, 1), 1).astype(np.float32)


def reach(query_share: float, row_share: np.ndarray) -> np.ndarray:
    """How far the lexical signal can see a row for this query, in [0, 1]: the chance that a
    query term's script (CJK or not) is one the row is written in. An English query cannot
    match the words of a Chinese note, whatever they mean; its zero there is no evidence."""
    q = np.float32(min(max(query_share, 0.0), 1.0))
    return (q * row_share + (1 - q) * (1 - row_share)).astype(np.float32)


def balance_scripts(dense: np.ndarray, row_share: np.ndarray,
                    alpha: float | None = None) -> np.ndarray:
    """The dense scores with each script's rows (CJK share of at least a half, or less)
    shifted down by ``alpha`` (``SCRIPT_BALANCE``) x their median, then up so the lowest row
    with a vector scores just above 0 (a row without one stays exactly 0: ``fuse`` tells
    them apart so). ``dense`` itself when either script has fewer than two rows with a
    vector: a store in one language is ranked as before."""
    alpha = SCRIPT_BALANCE if alpha is None else alpha
    has = dense != 0
    groups = [has & (row_share >= 0.5), has & (row_share < 0.5)]
    if alpha == 0 or any(np.count_nonzero(g) < 2 for g in groups):
        return dense
    out = dense.astype(np.float32, copy=True)
    for g in groups:
        out[g] -= np.float32(alpha * float(np.median(dense[g])))
    out[has] += np.float32(1e-3) - out[has].min()
    return out


def fuse(lexical: np.ndarray, dense: np.ndarray, how: str, *, weight: float = 0.5,
         live: np.ndarray | None = None, rrf_k: int = 60,
         reach: np.ndarray | None = None, lexical_share: float = 1.0,
         reach_dense: np.ndarray | None = None,
         reach_lexical: np.ndarray | None = None) -> np.ndarray:
    """Combine the two signals: ``fusion`` = weighted sum of min-max scaled scores (a real
    embedder's similarities sit in a narrow band, so dividing by the maximum would flatten
    them); ``rrf`` = reciprocal-rank fusion over each signal's positive scores.

    ``reach`` (per row, ``ranking.reach``) makes the lexical part of a row count only as far
    as the lexical signal can see that row, its scaled dense score (to ``REACH_POWER``)
    standing in for the rest: a row in the query's script is fused as before, one wholly in
    the other script by the embedder alone, or by ``reach_lexical`` where that is better.
    ``lexical_share`` (the query's, from the function of that name) multiplies the min-max
    scaled lexical scores first.
    ``reach_dense``: the dense scores that stand in for the lexical part (default ``dense``;
    the search passes the cosines before ``balance_scripts``, which was measured better).
    ``reach_lexical``: the lexical scores with the query's words in the other script too
    (``fsmem.search.bridge``); scaled like the others, the better of them and the stand-in
    is an out-of-reach row's (their mean, a weighted mix, or the translations added to every
    row measured worse: docs/DECISIONS.md "Search")."""
    if how == "rrf":
        out = np.zeros_like(lexical)
        for s in (lexical, dense):
            pos = np.flatnonzero(s > 0)
            order = pos[np.argsort(-s[pos], kind="stable")]
            out[order] += 1.0 / (rrf_k + np.arange(1, len(order) + 1))
        return out
    # Rows without a vector (summaries, other embedding spaces) score exactly 0: they take
    # no part in the dense min and max, and add nothing.
    has = dense != 0 if live is None else live & (dense != 0)
    d = np.where(has, minmax(dense, has), np.float32(0))
    lex = minmax(lexical, live)
    if lexical_share < 1:
        lex = (lex * np.float32(max(lexical_share, 0.0))).astype(np.float32)
    if reach is not None:   # only the rows out of full reach change
        sel = np.flatnonzero(has & (reach < 1))
        r = reach[sel]
        stand = d if reach_dense is None or reach_dense is dense else \
            np.where(has, minmax(reach_dense, has), np.float32(0))
        other = stand[sel] ** np.float32(REACH_POWER)
        if reach_lexical is not None:
            other = np.maximum(other, minmax(reach_lexical, live)[sel])
        lex[sel] = r * lex[sel] + (1 - r) * other
    return ((1 - weight) * lex + weight * d).astype(np.float32)
