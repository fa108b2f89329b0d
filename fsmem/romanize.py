"""Toneless pinyin of Chinese characters, so a Latin-script query finds a Chinese note and a
Chinese query finds a Latin-script one (issue 17: "How heavy is Niangao now" for a note
about 年糕; "乐乐" for a note about Lele).

The optional extra ``pinyin`` (``pip install 'fsmem[pinyin]'``) installs ``pypinyin``, whose
character dictionary (code point -> readings with tone marks) is read here; nothing else of
that package is used, so its phrase dictionary (1 s and 40 MB to load) is never loaded. The
table is built lazily, on the first Chinese text analyzed. Without the extra ``enabled()`` is
False and the analyzer's terms are exactly those of ANALYZER_VERSION 2.

A character's syllable is its first (most common) reading, tone marks dropped, ü written u.
Polyphonic characters are not disambiguated by context (that is what the phrase dictionary
would cost); names and everyday words mostly take their first reading. ``FSMEM_PINYIN=0`` in
the environment turns the terms off even with the extra installed.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import unicodedata
from pathlib import Path

__all__ = ["enabled", "syllables", "pair_terms"]

log = logging.getLogger(__name__)

_table: dict[str, str] | None = None


def enabled() -> bool:
    """Whether pinyin terms are produced: the extra is installed and not switched off."""
    if os.environ.get("FSMEM_PINYIN", "1") == "0":
        return False
    return importlib.util.find_spec("pypinyin") is not None


def _toneless(reading: str) -> str:
    base = "".join(c for c in unicodedata.normalize("NFKD", reading)
                   if not unicodedata.combining(c))
    return base   # NFKD splits ü into u + a combining diaeresis, dropped with the tones


def _load_raw() -> dict[str, str]:
    """pypinyin's character dictionary ({"code point": "reading,reading"}), read from its
    JSON file without importing the package (whose import loads the phrase dictionary too);
    through the module if the file is not where it was."""
    spec = importlib.util.find_spec("pypinyin")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        path = Path(loc) / "pinyin_dict.json"
        if path.is_file():
            with open(path, encoding="utf-8") as fp:
                raw: dict[str, str] = json.load(fp)
            return raw
    from pypinyin.pinyin_dict import pinyin_dict  # type: ignore[import-not-found]
    return {str(k): v for k, v in pinyin_dict.items()}


def _load() -> dict[str, str]:
    global _table
    if _table is None:
        raw = _load_raw()
        _table = {chr(int(cp)): _toneless(r.split(",", 1)[0]) for cp, r in raw.items()}
        log.debug("pinyin table: %d characters", len(_table))
    return _table


def syllables(run: str) -> list[str]:
    """The toneless syllable of each character of ``run`` ("" for one without a reading:
    kana, hangul, a character the dictionary lacks)."""
    table = _load()
    return [table.get(ch, "") for ch in run]


def pair_terms(run: str) -> list[str]:
    """The pinyin terms of a run of CJK characters: each two adjacent syllables written as
    one word ("年糕" -> "niangao", "乐乐" -> "lele"), as a romanised name or word is
    written in Latin text. Single syllables are not terms: "he", "an", "men", "long" are
    English words too (measured: docs/DECISIONS.md "Search")."""
    syl = syllables(run)
    out = [a + b for a, b in zip(syl[:-1], syl[1:]) if a and b]
    if os.environ.get("H17X_SINGLES"):
        out += [a for a in syl if len(a) >= int(os.environ["H17X_SINGLES"])]
    return out
