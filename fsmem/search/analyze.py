"""The lexical analyzer of BM25: text to search terms (strings) and their 64-bit hashes.

Latin text: NFKC, lowercase, words; English stop words dropped; every other word stemmed with
the Snowball English stemmer (PyStemmer's C code; the pure-Python ``snowballstemmer``, which
gives the same stems, where PyStemmer cannot be imported: ``_load_stemmer``), an irregular
form as its base word ("bought" as "buy": ``_IRREGULAR``), a variant as its usual word ("mum"
as "mother": ``_VARIANTS``) and a practitioner as the field ("pediatrician" as "pediatric":
``_FIELD``); every two words
adjacent once stop words are dropped also give one pair term
("group support", either order: phrase evidence; its hash has ``PAIR_BIT`` set, so BM25 can
leave pairs out of a document's length and weigh them apart); numbers normalised ("1,000" ->
"1000", "07" -> "7", "7th" -> "7"); written
dates ("7 May 2023", "May 7th, 2023", "2023-05-07"; not "7/5", which is ambiguous) also give one canonical day term (``@2023-05-07``) and month term (``@2023-05``). CJK text:
character unigrams and bigrams (word segmentation with jieba was measured and did not win:
docs/BENCHMARKS.md). The dense features of ``HashEmbedder`` are a separate vector space and
do not use this module.

An event's timestamp is made searchable by ``date_text``: its local date written out as
words plus the canonical terms, so "what did we do on 7 May" finds the turns of that day.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from datetime import datetime, timedelta, timezone
from hashlib import blake2b  # the public module (its private _blake2 saved ~3 ms: DECISIONS)
from itertools import chain
from operator import itemgetter
from typing import Callable, Iterable, Sequence, overload

import numpy as np

from fsmem.search.lazyre import lazy_compile

__all__ = ["ANALYZER_VERSION", "CJK_CHARS", "STOP_WORDS", "ZH_QUESTION_WORDS", "analyze",
           "unasked", "date_text", "term_hashes",
           "term_hashes_rows", "hash_terms", "memo_sizes", "trim_memos", "cjk_unigram_hashes",
           "cjk_unigram_mask", "is_pair", "PAIR_BIT", "PAIR_MAX_WORDS", "field_terms"]

ANALYZER_VERSION = 9   # part of the index version: a change here rebuilds saved indexes
# Word pair terms grow with a text's length (nearly one per word) where word terms grow with its
# vocabulary: a text of more words than this gives word terms only (phrase evidence is for
# turns and notes; a 1 MB part of an ingested file would hold ~150k distinct pairs).
PAIR_MAX_WORDS = 1000
# 2: CJK unigram/bigram hashes computed from code points (``_cjk_hashes``), not BLAKE2b
# 3: word pair terms (``PAIR_BIT`` set; every other term's top bit clear)
# 5: irregular English forms taken as their base word (``_IRREGULAR``)
# 6: a practitioner ("-ician") stemmed as the field (``_FIELD``)
# 7: one thing's two words taken as one (``_VARIANTS``: mum -> mother, kids -> child)
# 8: so are "-therapist" and "-dontist" (``_FIELD``)
# 9: a practitioners' plural as the field ("orthodontists" was "orthodonticss")

# The Snowball project's English stop word list (snowballstem.org/algorithms/english/stop.txt).
STOP_WORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom this
that these those am is are was were be been being have has had having do does did doing would
should could ought i'm you're he's she's it's we're they're i've you've we've they've i'd
you'd he'd she'd we'd they'd i'll you'll he'll she'll we'll they'll isn't aren't wasn't
weren't hasn't haven't hadn't doesn't don't didn't won't wouldn't shan't shouldn't can't
cannot couldn't mustn't let's that's who's what's here's there's when's where's why's how's a
an the and but if or because as until while of at by for with about against between into
through during before after above below to from up down in out on off over under again
further then once here there when where why how all any both each few more most other some
such no nor not only own same so than too very s t d ll m re ve don can will just
""".split())

# A Chinese question's interrogative words: how it asks, not what. BM25 over bigrams takes
# 什么时候 as three terms (什么, 么时, 时候) that every turn asking "when" holds, so "周宇是什么
# 时候去爬雪山的" ranked 周宇's "什么时候搬的？" above his turn about the mountain. English
# question words are stop words already. Left out of a query's own terms (``unasked``).
ZH_QUESTION_WORDS = frozenset((
    "什么时候", "什么样", "什么", "为什么", "怎么样", "怎么", "怎样", "如何", "哪里", "哪儿", "哪个",
    "哪些", "哪天", "哪家", "哪一", "多少", "多久", "几点", "几个", "几次", "是不是", "有没有", "是否"))

_CJK = CJK_CHARS = (r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
                    r"\U00020000-\U0002ffff")   # a character class: the CJK text analyzed
# CJK runs | ISO dates | words (letters/digits, inner apostrophes, digit groups "1,000")
_ISO_WORD = (rf"(\d{{4}}-\d{{1,2}}-\d{{1,2}})|"
             rf"((?:\d{{1,3}}(?:,\d{{3}})+)|[^\W_{_CJK}]+(?:'[^\W_{_CJK}]+)*)")
# the reference analyzer's (``analyze``; term hashing uses ``_WORD_RE``): compiled on first
# use, not at every import (~6 ms of each CLI query and pruning append)
_TOKEN_RE = lazy_compile(__name__, "_TOKEN_RE", rf"([{_CJK}]+)|" + _ISO_WORD)
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_MONTH_OF = {m: i + 1 for i, m in enumerate(_MONTHS)}
_MONTH_OF.update({m[:3]: i + 1 for i, m in enumerate(_MONTHS)})
_MONTH_OF["sept"] = 9
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_ORDINAL_RE = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
_CACHE_MAX = 1_000_000


def _load_stemmer() -> Callable[[str], str]:
    """The English stemmer's ``stemWord``: PyStemmer's (C, ~50x faster per word: a core
    dependency wherever it ships wheels, docs/DECISIONS.md), else the pure-Python
    snowballstemmer's. Both are Snowball 3.1 and give the same stems (tests/test_analyze.py
    pins them on a word list), so the index's terms do not depend on which one is installed."""
    try:
        import Stemmer  # lazy: start-up, loaded only when used (+Stemmer)
    except ImportError:   # the pure class (``snowballstemmer.stemmer`` is PyStemmer's if found)
        # lazy: start-up, loaded only when used (+snowballstemmer)
        from snowballstemmer.english_stemmer import EnglishStemmer
        return EnglishStemmer().stemWord
    stemmer = Stemmer.Stemmer("english")
    stemmer.maxCacheSize = 0   # ``_stems`` is the memo: PyStemmer's own would only see misses
    return stemmer.stemWord


_stem_word: Callable[[str], str] | None = None   # loaded on first use (CLI start-up)
# A stemmer object (either library's) keeps the word it works on in itself: two threads
# stemming at once corrupt each other's word (wrong stems, or IndexError inside the pure
# one). Memo hits need no lock; a miss stems under it.
_stem_lock = threading.Lock()
_stems: dict[str, str] = {}
_hashes: dict[str, int] = {}


def _stem(word: str) -> str:
    global _stem_word
    s = _stems.get(word)
    if s is None:
        with _stem_lock:
            if _stem_word is None:
                _stem_word = _load_stemmer()
            base = _BASE.get(word, word)
            if base not in _NOT_FIELD:
                base = _field(base)
            s = _stem_word(base)
        if len(_stems) > _CACHE_MAX:
            _stems.clear()
        _stems[word] = s
    return s


def _number(word: str) -> str:
    """Digits without grouping commas or leading zeros; an ordinal's digits ("7th" -> "7")."""
    m = _ORDINAL_RE.match(word)
    if m:
        word = m.group(1)
    word = word.replace(",", "")
    return word.lstrip("0") or "0"


def _day_terms(y: int, m: int, d: int) -> list[str]:
    try:
        datetime(y, m, d)
    except ValueError:
        return []
    return [f"@{y:04d}-{m:02d}-{d:02d}", f"@{y:04d}-{m:02d}"]


def _dates(words: list[str]) -> list[str]:
    """Canonical terms of written dates: "7 May 2023", "May 7(th)(,) 2023", "May 2023"."""
    out = []
    for i, w in enumerate(words):
        month = _MONTH_OF.get(w)
        if month is None or (w == "may" and not _is_day_or_year(words, i)):
            continue
        prev = words[i - 1] if i else ""
        nxt = words[i + 1] if i + 1 < len(words) else ""
        nxt2 = words[i + 2] if i + 2 < len(words) else ""
        if _day(nxt):
            day, after = _day(nxt), nxt2      # May 7(th)(,) 2023
        else:
            day, after = _day(prev), nxt      # 7 May 2023; May 2023
        year = int(after) if _digits(after) and len(after) == 4 else 0
        if day and year:
            out += _day_terms(year, month, day)
        elif year:
            out.append(f"@{year:04d}-{month:02d}")
    return out


def _digits(word: str) -> bool:
    """Decimal digits (any script's, as ``int`` reads them): ``str.isdigit`` is also true
    of '፩' or '²', which ``int`` refuses."""
    return word.isdecimal()


def _day(word: str) -> int:
    word = _number(word) if _digits(word[:1]) else ""
    return int(word) if _digits(word) and 1 <= int(word) <= 31 and len(word) <= 2 else 0


def _is_day_or_year(words: list[str], i: int) -> bool:
    """"may" is a month only beside a day or a year (else it is the verb)."""
    near = words[max(i - 1, 0):i] + words[i + 1:i + 3]
    return any(w[:1].isdigit() for w in near)


_ASKED_RE = lazy_compile(__name__, "_ASKED_RE",
                         "|".join(sorted(ZH_QUESTION_WORDS, key=len, reverse=True)))


def unasked(query: str) -> str:
    """A query as its own terms are taken: each of its Chinese interrogative words
    (``ZH_QUESTION_WORDS``) a space, so neither it nor a bigram across it is a term. Every
    lexical scorer of a query uses it (an index, a unit's events at prune, the facts)."""
    return _ASKED_RE.sub(" ", query)


# English forms no suffix rule reaches, each taken as its base word before stemming, so
# "what did she buy" meets "I bought", "where did they find a flat" meets "we found one",
# "children" meets "child". Left to the stemmer: forms that are also a common word of their
# own ("bit": a bit; "rose", "bore", "ground", "wound", "bound", "led": LED, "shot", "lay"
# of lie, "lives": he lives), and the light verbs (come, get, give, go, know, make, mean,
# say, see, take, tell, think), whose forms in every other turn would only add a frequent
# term to a question (measured: docs/DECISIONS.md "Search").
_IRREGULAR = """
    arise/arose/arisen awake/awoke/awoken beat/beaten become/became begin/began/begun bend/bent
    bite/bitten bleed/bled blow/blew/blown break/broke/broken breed/bred bring/brought
    build/built burn/burnt buy/bought catch/caught choose/chose/chosen cling/clung creep/crept
    deal/dealt dig/dug draw/drew/drawn dream/dreamt drink/drank/drunk drive/drove/driven
    eat/ate/eaten fall/fell/fallen feed/fed feel/felt fight/fought find/found flee/fled
    fly/flew/flown forbid/forbade/forbidden forget/forgot/forgotten forgive/forgave/forgiven
    freeze/froze/frozen grow/grew/grown hang/hung hear/heard hide/hid/hidden hold/held
    keep/kept kneel/knelt lay/laid lean/leant leap/leapt learn/learnt leave/left lend/lent
    lose/lost meet/met pay/paid ride/rode/ridden ring/rang/rung run/ran seek/sought sell/sold
    send/sent shake/shook/shaken shine/shone show/shown shrink/shrank/shrunk sing/sang/sung
    sink/sank/sunk sit/sat sleep/slept slide/slid speak/spoke/spoken spend/spent spill/spilt
    spin/spun spit/spat spring/sprang/sprung stand/stood steal/stole/stolen stick/stuck
    sting/stung strike/struck/stricken swear/swore/sworn sweep/swept swim/swam/swum swing/swung
    teach/taught tear/tore/torn throw/threw/thrown understand/understood wake/woke/woken
    wear/wore/worn weep/wept win/won write/wrote/written child/children man/men woman/women
    person/people foot/feet tooth/teeth mouse/mice goose/geese wife/wives knife/knives
    shelf/shelves wolf/wolves half/halves loaf/loaves thief/thieves calf/calves
"""
# One thing in two registers or spellings, taken as one word: family words (Mum, Dad, the
# kids), British and American words, short forms (TV, fridge, bike, photo). A question says
# "mother" where the turn says "Mum". Not a word with another common sense ("vet": a
# veteran, to vet; "ma", "pa"; "flat", "holiday", "fall", "lift", "mobile").
_VARIANTS = """
    mother/mum/mom/mummy/mommy/mama/mums/moms father/dad/daddy/papa/dads
    grandmother/grandma/granny/grandmas grandfather/grandpa/grandad/granddad/grandpas
    child/kid/kids television/tv/telly refrigerator/fridge/fridges bicycle/bike/bikes
    photograph/photo/photos film/movie/movies couch/sofa/sofas
"""
_BASE = {form: r.split("/")[0] for r in (_IRREGULAR + _VARIANTS).split()
         for form in r.split("/")[1:]}
# A practitioner named for the field is stemmed as the field: a pediatrician's note answers
# a question about pediatrics (儿科), a physiotherapist's one about physiotherapy (理疗), an
# orthodontist's orthodontics (正畸), a musician's music; "physician" is not physics. (The
# stemmer itself takes "dermatologist" and "dermatology" to one stem.)
_FIELD = re.compile(r"((?<=...)ician|therapist|(?<=..)dontist)s?$")   # (a plural as one)
_FIELD_OF = {"ician": "ic", "therapist": "therapy", "dontist": "dontics"}
_NOT_FIELD = frozenset(("physician", "physicians"))


def _field(word: str) -> str:
    """A practitioner's word as the field's ("physiotherapists" -> "physiotherapy",
    "orthodontists" -> "orthodontics"); any other word as it is."""
    return _FIELD.sub(lambda m: _FIELD_OF[m.group(1)], word)


def analyze(text: str) -> list[str]:
    """The BM25 terms of ``text``, in text order (see the module docstring)."""
    norm = unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'")
    out: list[str] = []
    words: list[str] = []
    seq: list[str] = []   # the word terms in text order, for the pair terms
    for cjk, iso, word in _TOKEN_RE.findall(norm):
        if cjk:
            out.extend(cjk)
            if len(cjk) > 1:
                out.extend(map(str.__add__, cjk[:-1], cjk[1:]))
        elif iso:
            y, m, d = (int(p) for p in iso.split("-"))
            out += [str(y), str(m), str(d)] + _day_terms(y, m, d)
        else:
            if word in STOP_WORDS:
                continue
            word = word.replace("'", "")
            if word[:1].isdigit():
                word = _number(word)
                words.append(word)
                out.append(word)
                seq.append(word)
                continue
            words.append(word)
            out.append(_stem(word))
            seq.append(out[-1])
    if words:
        out += _dates(words)
    if len(seq) <= PAIR_MAX_WORDS:
        out += [" ".join(sorted(p)) for p in zip(seq, seq[1:])]   # word pairs
    return out


def date_text(ns: int, offset: int) -> str:
    """An instant's local date as words: "Sunday 7 May 2023" (``analyze`` adds its terms)."""
    dt = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(
        microseconds=(ns + offset * 1_000_000_000) // 1000)
    return (f"{_WEEKDAYS[dt.weekday()].capitalize()} {dt.day} "
            f"{_MONTHS[dt.month - 1].capitalize()} {dt.year}")


_M64 = (1 << 64) - 1
_CJK_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x3040, 0x30FF),
               (0xAC00, 0xD7AF), (0x20000, 0x2FFFF))   # the ranges of ``_CJK``
_UNI, _BI = 1 << 42, 2 << 42     # tags: code points are < 2**21, so keys never collide
_SEED = 0x9E3779B97F4A7C15
# Word pair terms have the top bit set, every other term has it clear: a document's length
# and a query's idf mass count words only, and a pair is weighed apart (``is_pair``).
PAIR_BIT = 1 << 63
_WORD_MASK = PAIR_BIT - 1
_PAIR_MUL, _PAIR_TAG = 0xD6E8FEB86659FD93, 0x5851F42D4C957F2D
_WORD_RE = re.compile(_ISO_WORD)   # ``_TOKEN_RE`` without CJK runs (hashed by numpy)
_tokens: dict[str, "tuple[list[int], list[str], bool, list[int], bool]"] = {}
_date_memo: dict[str, list[int]] = {}   # short text holding a month -> its date term hashes


def _is_cjk(ch: str) -> bool:
    c = ord(ch)
    return any(lo <= c <= hi for lo, hi in _CJK_RANGES)


def _mix(key: int) -> int:
    """SplitMix64's finalizer of one 64-bit key (the scalar twin of ``_mix_array``)."""
    z = (key ^ _SEED) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return (z ^ (z >> 31)) & _WORD_MASK


def _mix_array(keys: np.ndarray) -> np.ndarray:
    """``_mix`` of every uint64 key (numpy wraps uint64 products modulo 2**64)."""
    z = keys ^ np.uint64(_SEED)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) & np.uint64(_WORD_MASK)


def _hash(term: str) -> int:
    """A term's stable 64-bit hash: a CJK unigram or bigram from its code points (so that
    ``_cjk_hashes`` computes it vectorised), any other term BLAKE2b-64 of its UTF-8."""
    h = _hashes.get(term)
    if h is None:
        if len(_hashes) > _CACHE_MAX:
            _hashes.clear()
        if len(term) == 1 and _is_cjk(term):
            h = _mix(ord(term) | _UNI)
        elif len(term) == 2 and _is_cjk(term[0]) and _is_cjk(term[1]):
            h = _mix((ord(term[0]) << 21) | ord(term[1]) | _BI)
        elif " " in term:   # a word pair of ``analyze``
            a, b = term.split(" ")
            h = _pair_hash(_hash(a), _hash(b))
        else:
            h = int.from_bytes(blake2b(term.encode("utf-8"), digest_size=8).digest(),
                               "little") & _WORD_MASK
        _hashes[term] = h
    return h


def _pair_hash(a: int, b: int) -> int:
    """The term of two adjacent words (either order): their hashes combined, then mixed."""
    if a > b:
        a, b = b, a
    return _mix(((a * _PAIR_MUL) ^ b ^ _PAIR_TAG) & _M64) | PAIR_BIT


def hash_terms(terms: Iterable[str]) -> np.ndarray:
    """uint64 hashes of terms (stable across processes and machines: ``_hash``)."""
    return np.fromiter(map(_hash, terms), dtype=np.uint64)


def _cjk_table() -> np.ndarray:
    table = np.zeros(_CJK_RANGES[-1][1] + 2, dtype=bool)   # the last entry: beyond them all
    for lo, hi in _CJK_RANGES:
        table[lo:hi + 1] = True
    return table


_IS_CJK = _cjk_table()


def _cjk_split(text: str) -> tuple[np.ndarray, np.ndarray, str]:
    """A normalised text's code points, which of them are CJK, and the text with every CJK
    character made a space. A match of ``_WORD_RE`` never holds a CJK character (nor can
    one start there), so the rest has the text's matches, in order; split at whitespace
    alone, Chinese (few spaces) would make nearly every clause a token of its own, each a
    miss of the token memo. The CJK characters are hashed apart (``_cjk_hashes``)."""
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    mask = _IS_CJK[np.minimum(cps, len(_IS_CJK) - 1)]
    if not mask.any():
        return cps, mask, text
    return cps, mask, np.where(mask, np.uint32(32), cps).tobytes().decode("utf-32-le")


def _pieces(rest: str, lengths: Iterable[int]) -> list[str]:
    """``rest`` cut back into texts of these lengths, each followed by one separator."""
    out, at = [], 0
    for n in lengths:
        out.append(rest[at:at + n])
        at += n + 1
    return out


@overload
def _cjk_hashes(cps: np.ndarray, mask: np.ndarray) -> np.ndarray: ...
@overload
def _cjk_hashes(cps: np.ndarray, mask: np.ndarray, lengths: list[int]
                ) -> tuple[np.ndarray, np.ndarray]: ...


def _cjk_hashes(cps: np.ndarray, mask: np.ndarray, lengths: list[int] | None = None):
    """The hashes of every CJK unigram and bigram of a normalised text (``_cjk_split``),
    without a Python call per term: bigrams where two CJK code points are adjacent (exactly
    the runs of ``analyze``). With ``lengths`` (the text is rows of these lengths, each
    ending in a non-CJK character) also the row of each hash."""
    if not mask.any():
        empty = np.zeros(0, np.uint64)
        return empty if lengths is None else (empty, np.zeros(0, np.int64))
    wide = cps.astype(np.uint64)
    uni = wide[mask] | np.uint64(_UNI)
    pair = mask[:-1] & mask[1:]
    bi = (wide[:-1][pair] << np.uint64(21)) | wide[1:][pair] | np.uint64(_BI)
    hashes = _mix_array(np.concatenate([uni, bi]))
    if lengths is None:
        return hashes
    row = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    return hashes, np.concatenate([row[mask], row[:-1][pair]])


def _token(token: str) -> "tuple[list[int], list[str], bool, list[int], bool]":
    """One whitespace-free token's non-CJK term hashes, its date-parsing words, whether one
    is a month name, its words' hashes, and whether it has terms beyond its words' (an ISO
    date's) or a month name, cached (a match of ``_WORD_RE`` never spans whitespace, so a
    text's matches are its tokens' matches in turn)."""
    try:
        return _tokens[token]
    except KeyError:
        pass
    if len(_tokens) > _CACHE_MAX:
        _tokens.clear()
    hashes: list[int] = []
    words: list[str] = []
    seq: list[int] = []
    for iso, word in _WORD_RE.findall(token):
        if iso:
            y, m, d = (int(p) for p in iso.split("-"))
            hashes.extend(map(_hash, [str(y), str(m), str(d)] + _day_terms(y, m, d)))
        elif word not in STOP_WORDS:
            w = word.replace("'", "")
            if w[:1].isdigit():
                w = _number(w)
                hashes.append(_hash(w))
            else:
                hashes.append(_hash(_stem(w)))
            seq.append(hashes[-1])
            words.append(w)
    month = not _MONTH_OF.keys().isdisjoint(words)
    out = _tokens[token] = (hashes, words, month, seq, month or len(hashes) != len(seq))
    return out


def _text_hashes(norm: str, out: list[int], seqs: list[list[int]] | None = None) -> None:
    """Append the hashes of the non-CJK terms of one normalised text with its CJK characters
    made spaces (``_cjk_split``) to ``out`` (the token memo looked up by ``map``, the hashes
    chained: no Python-level loop per token), and its words' hashes in text order to
    ``seqs`` (their pair terms: ``_pair_hashes``)."""
    tokens = norm.split()
    hits = list(map(_tokens.get, tokens))
    if None in hits:
        hits = [hit or _token(token) for hit, token in zip(hits, tokens)]
    seq = list(chain.from_iterable(map(itemgetter(3), hits)))
    if any(map(itemgetter(4), hits)):   # rare: an ISO date's terms, or a month name
        out.extend(chain.from_iterable(map(itemgetter(0), hits)))
        if any(map(itemgetter(2), hits)):   # the words of the whole text give the dates
            out.extend(_date_hashes(norm, tokens))
    else:   # every token's terms are its words': the one chained pass serves both
        out.extend(seq)
    if seqs is not None:   # one entry per text (a too long one's empty): rows stay aligned
        seqs.append(seq if len(seq) <= PAIR_MAX_WORDS else [])


def _pair_hashes(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """``_pair_hash`` of every two adjacent words of each sequence (never across two), in
    one numpy pass, and the sequence each pair term comes from."""
    lengths = np.fromiter(map(len, seqs), np.int64, len(seqs))
    flat = np.fromiter(chain.from_iterable(seqs), np.uint64, int(lengths.sum()))
    which = np.repeat(np.arange(len(seqs), dtype=np.int64), lengths)
    inner = which[:-1] == which[1:]
    a, b = flat[:-1][inner], flat[1:][inner]
    key = (np.minimum(a, b) * np.uint64(_PAIR_MUL)) ^ np.maximum(a, b) ^ np.uint64(_PAIR_TAG)
    return _mix_array(key) | np.uint64(PAIR_BIT), which[:-1][inner]


_DIGIT_RE = re.compile(r"\d")


def _has_digit(norm: str) -> bool:
    """Whether any character of ``norm`` is one ``str.isdigit`` accepts (a decimal digit; or,
    outside ASCII, also another digit character: checked one by one)."""
    return bool(_DIGIT_RE.search(norm)) or (not norm.isascii()
                                            and any(map(str.isdigit, norm)))


def _date_hashes(norm: str, tokens: list[str]) -> list[int]:
    """The hashes of the written dates of a text holding a month name; memoised for short
    texts (every event's ``date_text`` is one)."""
    got = _date_memo.get(norm)
    if got is None:
        # A written date needs a day or a year, a word that begins with a digit: a text
        # without one ("you may", "in March") has none (most English text that names a
        # month or says "may" is such a text), and ``_dates`` is a Python loop over its words.
        got = list(map(_hash, _dates([w for t in tokens for w in _token(t)[1]]))) \
            if _has_digit(norm) else []
        if len(norm) <= 64:
            if len(_date_memo) > 4096:
                _date_memo.clear()
            _date_memo[norm] = got
    return got


def _normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'")


def term_hashes(texts: Sequence[str], pairs: bool = True) -> np.ndarray:
    """The hashed BM25 terms of every text, concatenated: the multiset of
    ``hash_terms(analyze(text))`` (in another order), several times faster. ``pairs=False``
    leaves out the word pair terms."""
    other: list[int] = []
    seqs: list[list[int]] | None = [] if pairs else None
    norms = list(map(_normal, texts))
    joined = "\n".join(norms)
    cps, mask, rest = _cjk_split(joined)
    for norm in norms if rest is joined else _pieces(rest, map(len, norms)):
        _text_hashes(norm, other, seqs)
    cjk = _cjk_hashes(cps, mask)
    pair = _pair_hashes(seqs)[0] if seqs else np.zeros(0, np.uint64)
    return np.concatenate([cjk, np.array(other, dtype=np.uint64), pair])


_uni_sorted: np.ndarray | None = None


def cjk_unigram_hashes() -> np.ndarray:
    """The hashes of every CJK character (unigram) term, sorted: every code point of the CJK
    ranges (about 100k), computed once. A row's or a query's share of CJK terms tells which
    script its lexical evidence is in (``fsmem.search.ranking.reach``)."""
    global _uni_sorted
    if _uni_sorted is None:
        cps = np.concatenate([np.arange(lo, hi + 1, dtype=np.uint64) for lo, hi in _CJK_RANGES])
        _uni_sorted = np.sort(_mix_array(cps | np.uint64(_UNI)))
    return _uni_sorted


def cjk_unigram_mask(hashes: np.ndarray) -> np.ndarray:
    """Which of ``hashes`` (a few: a query's) are CJK character terms."""
    table = cjk_unigram_hashes()
    if not len(hashes):
        return np.zeros(0, bool)
    pos = np.minimum(np.searchsorted(table, hashes), len(table) - 1)
    return table[pos] == hashes


def term_hashes_rows(rows: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
    """``term_hashes`` of several rows of texts in one pass: (hashes, row of each hash), the
    hashes of row i being the multiset ``term_hashes(rows[i])``. One numpy pass over the CJK
    text of every row instead of one per row (an index entry's events are its rows)."""
    other: list[int] = []
    n_other: list[int] = []
    seqs: list[list[int]] = []
    seq_row: list[int] = []
    joined: list[str] = []
    norms = [list(map(_normal, texts)) for texts in rows]
    for row in norms:
        joined.append("\n".join(row) + "\n")   # the newline: no bigram spans two rows
    text = "".join(joined)
    cps, mask, rest = _cjk_split(text)
    at = 0   # each text is followed by one newline; a row without texts is one newline
    for i, row in enumerate(norms):
        start = len(other)
        for norm in row:
            _text_hashes(rest[at:at + len(norm)], other, seqs)
            at += len(norm) + 1
        at += not row
        seq_row.extend([i] * len(row))
        n_other.append(len(other) - start)
    cjk, cjk_rows = _cjk_hashes(cps, mask, [len(j) for j in joined])
    row_ids = np.arange(len(rows), dtype=np.int64)
    pair, pair_seq = _pair_hashes(seqs)
    return (np.concatenate([cjk, np.array(other, dtype=np.uint64), pair]),
            np.concatenate([cjk_rows, np.repeat(row_ids, n_other),
                            np.array(seq_row, dtype=np.int64)[pair_seq]]))


def memo_sizes() -> dict[str, int]:
    """Entries in each per-term memo table (stems, term hashes, token hashes)."""
    return {"stems": len(_stems), "hashes": len(_hashes), "tokens": len(_tokens)}


def trim_memos(limit: int) -> None:
    """Empty each memo table holding more than ``limit`` entries. They are speed memos only
    (emptying one costs re-hashing); a long ingest of distinct tokens calls this between
    parts so memory stays flat (fsmem.ingest.inbox.trim_term_memos)."""
    for table in (_stems, _hashes, _tokens, _date_memo):
        if len(table) > limit:
            table.clear()


def field_terms(hashes: np.ndarray, tag: int) -> np.ndarray:
    """Terms of a field (the speaker of a row: ``fsmem.search.speakers``) from the hashes of
    the words in it: each hash mixed with the field's ``tag``, pair bit set (a field term, like
    a pair term, is extra evidence: no part of a row's length or a query's idf mass)."""
    keys = np.asarray(hashes, np.uint64) ^ np.uint64(((tag * _PAIR_MUL) & _M64) | 1)
    return _mix_array(keys) | np.uint64(PAIR_BIT)


def is_pair(hashes: np.ndarray) -> np.ndarray:
    """Which of ``hashes`` are word pair terms (``PAIR_BIT`` set)."""
    return (np.asarray(hashes, np.uint64) & np.uint64(PAIR_BIT)) != 0
