"""Relative dates in a query, resolved to the days (or month, or year) they point at.

Every event row holds its local date as terms (``analyze.date_text``: the day ``@2023-05-07``,
the month ``@2023-05`` and the year), so a query naming a date finds the turns of that day. A
question about a conversation names dates relative to it: "last week", "three days ago",
"two weeks before the trip", "上周", "两周前". ``resolve`` turns those into the same terms:
relative to ``ref`` (the newest event the index holds, the conversation's "now", unless the
caller gives one), or to an anchor, the time of the row that best matches the words after
"before"/"after" ("the trip"). A window around the point absorbs how loosely people count
("two weeks" is 12 to 16 days). Pure functions, no I/O.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Callable

__all__ = ["resolve", "day_terms", "may_name_dates"]

_NUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
        "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
        "couple": 2, "few": 3, "several": 3}
_ZH_NUM = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
           "九": 9, "十": 10, "半": 0.5, "几": 3}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365, "天": 1, "日": 1, "周": 7,
              "星期": 7, "礼拜": 7, "月": 30, "年": 365}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_N = r"(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|" \
     r"(?:a\s+)?couple(?:\s+of)?|(?:a\s+)?few|several)"
_U = r"(day|week|month|year)s?"
_AGO = re.compile(rf"\b{_N}\s+{_U}\s+(?:ago|earlier|back)\b", re.I)
_REL = re.compile(rf"\b(?:{_N}\s+{_U}|the\s+{_U})\s+(before|after|prior\s+to|following)"
                  r"\s+(.+)$", re.I)
_RECENT = re.compile(rf"\b(?:last|past)\s+{_N}\s+days\b", re.I)
_LAST = re.compile(r"\b(last|this|past|previous)\s+(week|month|year|weekend|"
                   + "|".join(_WEEKDAYS) + r")\b", re.I)
_ZH_AGO = re.compile(r"(\d+|[一两二三四五六七八九十半几]+)\s*(?:个)?(天|日|周|星期|礼拜|月|年)(?:以前|之前|前)")
_ZH_REL = re.compile(r"(.+?)(?:的)?(?:之|以)?(前|后)\s*(\d+|[一两二三四五六七八九十半几]+)\s*(?:个)?"
                     r"(天|日|周|星期|礼拜|月|年)")
_ZH_WORDS = {"昨天": ("day", -1), "前天": ("day", -2), "今天": ("day", 0),
             "上周": ("week", -1), "上个星期": ("week", -1), "上星期": ("week", -1),
             "上礼拜": ("week", -1), "这周": ("week", 0), "本周": ("week", 0),
             "上个月": ("month", -1), "上月": ("month", -1), "这个月": ("month", 0),
             "本月": ("month", 0), "去年": ("year", -1), "今年": ("year", 0)}


_HINT = re.compile(r"\b(?:ago|earlier|back|last|past|this|previous|before|after|prior|following|"
                   r"yesterday)\b|[天日周期拜月年]", re.I)


def may_name_dates(query: str) -> bool:
    """A cheap first look: False when ``query`` cannot name a relative date (most queries),
    so a search spends nothing more on it."""
    return _HINT.search(query) is not None


def _count(word: str) -> float:
    word = word.strip().lower()
    if word.isdigit():
        return float(word)
    last = re.sub(r"\s+of$", "", word).split()[-1:] or [""]
    if last[0] in _NUM:
        return float(_NUM[last[0]])
    if all(ch in _ZH_NUM for ch in word):
        if word.startswith("十") and len(word) > 1:
            return 10.0 + _ZH_NUM.get(word[1:], 0)
        if len(word) == 2 and word[1] == "十":
            return 10.0 * _ZH_NUM[word[0]]
        return float(_ZH_NUM.get(word, 0) or 0)
    return 0.0


def _local(ns: int, offset: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(
        microseconds=(ns + offset * 1_000_000_000) // 1000)


def day_terms(first: datetime, last: datetime) -> list[str]:
    """The day terms of every day from ``first`` to ``last`` (inclusive, at most 62)."""
    out, day = [], first.date()
    while day <= last.date() and len(out) < 62:
        out.append(f"@{day.year:04d}-{day.month:02d}-{day.day:02d}")
        day += timedelta(days=1)
    return out


def _around(centre: datetime, days: float) -> list[str]:
    """The days around a point ``days`` away from where the count started: a window of a
    sixth of the distance each side (at least a day, at most a fortnight), or the month or
    the year for counts of months and years."""
    half = min(max(days / 6, 1.0), 14.0)
    return day_terms(centre - timedelta(days=half), centre + timedelta(days=half))


def _period(now: datetime, unit: str, back: int) -> list[str]:
    """A calendar period: the week (Monday to Sunday), month or year ``back`` before now's."""
    if unit == "day":
        d = now + timedelta(days=back)
        return day_terms(d, d)
    if unit == "week":
        monday = now - timedelta(days=now.weekday()) + timedelta(weeks=back)
        return day_terms(monday, min(monday + timedelta(days=6), now) if back == 0
                         else monday + timedelta(days=6))
    if unit == "weekend":
        saturday = now - timedelta(days=now.weekday()) + timedelta(days=5 + 7 * back)
        return day_terms(saturday, saturday + timedelta(days=1))
    if unit == "month":
        y, m = now.year, now.month + back
        while m < 1:
            y, m = y - 1, m + 12
        return [f"@{y:04d}-{m:02d}"]
    return [str(now.year + back)]


def _shift(point: datetime, n: float, unit: str, sign: int) -> list[str]:
    days = n * _UNIT_DAYS[unit]
    centre = point + timedelta(days=sign * days)
    if unit in ("month", "月") and n >= 1 and sign < 0 and n == int(n) and days > 45:
        return _period(point, "month", -int(n))
    if unit in ("year", "年") and n >= 1:
        return [str(centre.year)]
    return _around(centre, days)


def resolve(query: str, ref_ns: int, offset: int = 0,
            anchor: "Callable[[str], int | None] | None" = None) -> tuple[list[str], str]:
    """(the date terms: ``@YYYY-MM-DD``, ``@YYYY-MM`` or a year, the relative dates of
    ``query`` point at; the query without the words that named an anchor), from ``ref_ns``
    (local offset ``offset`` seconds). ``anchor(words)``: the time (ns) of the event those
    words describe best, or None. The anchor's words describe another event than the one
    asked about ("the trip" of "two weeks before the trip"), so the caller leaves them out
    of the lexical query. No dates and the query unchanged when it names no relative date."""
    text = query.lower()
    now = _local(ref_ns, offset)
    out: list[str] = []
    rest = query
    m = _REL.search(query)
    if m and anchor is not None:
        n = _count(m.group(1)) if m.group(1) else 1.0
        unit = (m.group(2) or m.group(3)).lower()
        at = anchor(m.group(5))
        if at is not None and n > 0:
            sign = -1 if m.group(4).lower() in ("before", "prior to") else 1
            out += _shift(_local(at, offset), n, unit, sign)
            rest = query[:m.start(5)]
    zm = _ZH_REL.search(query)
    if zm and anchor is not None and not out:
        n = _count(zm.group(3))
        at = anchor(zm.group(1))
        if at is not None and n > 0:
            out += _shift(_local(at, offset), n, zm.group(4), -1 if zm.group(2) == "前" else 1)
            rest = query[:zm.start(1)] + query[zm.end(1):]
    for m in _AGO.finditer(query):
        n = _count(m.group(1))
        if n > 0:
            out += _shift(now, n, m.group(2), -1)
    for m in _ZH_AGO.finditer(query):
        n = _count(m.group(1))
        if n > 0:
            out += _shift(now, n, m.group(2), -1)
    for m in _RECENT.finditer(query):   # "the last few days": up to now
        n = _count(m.group(1))
        if n > 0:
            out += day_terms(now - timedelta(days=n), now)
    for m in _LAST.finditer(query):
        back = 0 if m.group(1).lower() == "this" else -1
        what = m.group(2).lower()
        if what in _WEEKDAYS:
            delta = (now.weekday() - _WEEKDAYS.index(what)) % 7 or (7 if back else 0)
            d = now - timedelta(days=delta)
            out += day_terms(d, d)
        else:
            out += _period(now, what, back)
    if "yesterday" in text:
        out += _period(now, "day", -1)
    for word, (unit, back) in _ZH_WORDS.items():
        if word in query:
            out += _period(now, unit, back)
    return list(dict.fromkeys(out)), rest.strip() or query
