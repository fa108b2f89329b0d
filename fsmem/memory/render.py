"""The model's view of a timeline under a token budget: pure functions, no I/O.

HomeAgent cut every body at 120 runes whatever the budget (failure 5 of the repair plan), so a
whole stored text never reached the model. ``render`` spends the budget it is given, max-min
fairly: everything whole when it fits, else one common cap for every body, else the oldest
events collapse into one line. docs/RENDER.md describes the layout and the rules.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence, runtime_checkable

from fsmem.format.errors import MissingDependency
from fsmem.format.model import BlockRef, Event
from fsmem.format.timestamps import Timestamp
from fsmem.format.views import said_by

if TYPE_CHECKING:   # budget_split's ratios only: rendering never needs fractions
    from fractions import Fraction

__all__ = [
    "HEADER", "MIN_BODY_TOKENS", "DEFAULT_CONTEXT_WINDOW", "TokenEstimator",
    "AdditiveEstimator", "HeuristicEstimator", "RuneEstimator", "TiktokenEstimator",
    "BudgetSplit", "render", "budget_split", "HITS_HEADER", "HitView",
]

log = logging.getLogger("fsmem.render")

HEADER = "【对话时序】"
HITS_HEADER = "【相关记忆】"     # the turn's query hits (HomeAgent injects Query(input, top 3))
MIN_BODY_TOKENS = 32            # a cut body keeps about this much: its beginning stays readable
DEFAULT_CONTEXT_WINDOW = 32768  # HomeAgent's window when the provider's is unknown
_MARKER = "…[+{}字]"            # what a cut removed, in characters
_OMITTED = "({} earlier events omitted)\n"
_MORE_HITS = "({} more hits omitted)\n"
_UNKNOWN_TIME = "????-??-?? ??:??:??"
_BY_TIME = attrgetter("timestamp.ns")
_ATTEMPTS = 12                  # plans allowed when a non-additive estimator overshoots


@runtime_checkable
class TokenEstimator(Protocol):
    """Counts the tokens of a text: 0 for "", never negative, monotone (a longer text never
    counts less) and roughly additive (the parts' counts predict the whole's)."""

    def count(self, text: str) -> int: ...


@runtime_checkable
class AdditiveEstimator(TokenEstimator, Protocol):
    """An estimator ``render`` can plan with exactly, measuring each text about once.

    ``units`` is exactly additive over concatenation, every character costs at least one unit,
    and ``count(t) == ceil(units(t) / scale)``; ``prefix(t, u)`` returns ``(k, units(t[:k]))``
    for the largest ``k`` with ``units(t[:k]) <= u``. Both built-in estimators are additive.
    """

    scale: int

    def units(self, text: str) -> int: ...

    def prefix(self, text: str, max_units: int) -> tuple[int, int]: ...


# Cost class of each UTF-8 byte: a(scii letter), space/tab, p(unctuation, control), x(other:
# digits and every byte of a non-ASCII character).
_CLASS = bytes(ord("x" if c > 127 or chr(c).isdigit() else "a" if chr(c).isalpha()
                   else " " if chr(c) in " \t" else "p") for c in range(256))
_ASCII_UNITS = bytes({"a": 2, " ": 1, "p": 6, "x": 3}[chr(c)] for c in _CLASS[:128])


def _class_units(cls: bytes) -> int:
    """Units of class-translated bytes: x=3, a=2, space=1, p=6 (in sixths of a token)."""
    return 3 * len(cls) - cls.count(b"a") - 2 * cls.count(b" ") + 3 * cls.count(b"p")


_PY_CHARS = 50_000   # below, a loop costs less than importing numpy (the render command)


def _heuristic_many_py(texts: list[str], limits: list[int]) -> tuple[list[int], ...]:
    """``_heuristic_many`` without numpy: the same weights, sums and cuts, one character at a
    time (for a process that has not loaded numpy and few characters to weigh)."""
    totals, keeps, kepts = [], [], []
    for text, limit in zip(texts, limits):
        units = keep = kept = 0
        for ch in text:
            cp = ord(ch)
            units += _ASCII_UNITS[cp] if cp < 128 else 6 if cp < 0x800 else 9 if cp < 0x10000 \
                else 12
            if units <= limit:   # every weight is positive: the kept prefix ends at the first miss
                keep, kept = keep + 1, units
        totals.append(units)
        keeps.append(keep)
        kepts.append(kept)
    return totals, keeps, kepts


def _heuristic_many(texts: list[str], limits: list[int]) -> tuple[list[int], ...]:
    """``HeuristicEstimator`` over many texts in one numpy pass: (units, keep, kept) of each,
    with (keep, kept) = prefix(text, limit). A character weighs what its UTF-8 bytes weigh."""
    if "numpy" not in sys.modules and sum(map(len, texts)) <= _PY_CHARS:
        return _heuristic_many_py(texts, limits)
    import numpy as np  # lazy: start-up, loaded only when used (+numpy, ctypes, struct)

    lens = np.fromiter(map(len, texts), np.int64, len(texts))
    ends = np.cumsum(lens)
    starts = ends - lens
    cp = np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), "<u4")
    weights = np.frombuffer(_ASCII_UNITS + b"\x06", np.uint8)[np.minimum(cp, 128)]  # 2 bytes
    weights += (cp >= 0x800).view(np.uint8) * np.uint8(3)  # a 3-byte character
    weights += (cp >= 0x10000).view(np.uint8) * np.uint8(3)  # a 4-byte one
    cum = np.zeros(len(cp) + 1, np.int64)
    np.cumsum(weights, dtype=np.int64, out=cum[1:])
    base = cum[starts]
    cut = np.searchsorted(cum, base + np.asarray(limits, np.int64), "right") - 1
    cut = np.clip(cut, starts, ends)
    return (cum[ends] - base).tolist(), (cut - starts).tolist(), (cum[cut] - base).tolist()


class HeuristicEstimator:
    """The default: a weight per UTF-8 byte, in sixths of a token, meant to over-estimate BPE
    tokenizers (cl100k, o200k, Qwen, DeepSeek) on mixed Chinese/English text.

    ASCII letter 1/3, digit 1/2, space or tab 1/6, other ASCII (punctuation, newline) 1; each
    byte of a non-ASCII character 1/2, i.e. 1.5 per CJK character, 1 per Cyrillic or accented
    letter, 2 per emoji. Exactly additive and monotone; ``count`` rounds the sum up.
    """

    scale = 6

    def units(self, text: str) -> int:
        return _class_units(text.encode("utf-8", "surrogatepass").translate(_CLASS))

    def count(self, text: str) -> int:
        return -(-self.units(text) // 6)

    def prefix(self, text: str, max_units: int) -> tuple[int, int]:
        limit = max(0, max_units)  # every character costs at least one unit
        _, keeps, kepts = _heuristic_many([text[:limit]], [limit])
        return keeps[0], kepts[0]


class RuneEstimator:
    """HomeAgent's ``EstimateTokens``: 0 for "", else runes × 2 (for figures identical to it)."""

    scale = 1

    def units(self, text: str) -> int:
        return 2 * len(text)

    def count(self, text: str) -> int:
        return 2 * len(text)

    def prefix(self, text: str, max_units: int) -> tuple[int, int]:
        keep = max(0, min(len(text), max_units // 2))
        return keep, 2 * keep


class TiktokenEstimator:
    """Exact counts with a tiktoken encoding (optional dependency, imported on construction).
    Not additive: ``render`` plans with counts of the parts, then checks the whole."""

    def __init__(self, encoding: str = "cl100k_base") -> None:
        try:
            import tiktoken  # lazy: start-up, loaded only when used (+tiktoken)
        except ImportError as exc:
            raise MissingDependency("TiktokenEstimator needs the optional package tiktoken: "
                                    "pip install 'fsmem[tiktoken]'") from exc
        self.encoding = encoding
        try:
            self._enc = tiktoken.get_encoding(encoding)
        except Exception as exc:   # noqa: BLE001 - tiktoken downloads the encoding at first use
            raise MissingDependency(
                f"tiktoken's encoding {encoding!r} is not on this machine and could not be "
                f"downloaded ({type(exc).__name__}): run once with network access, or copy its "
                "cache and set TIKTOKEN_CACHE_DIR to it (tiktoken fetches encodings at run time)"
            ) from exc

    def count(self, text: str) -> int:
        return len(self._enc.encode(text, disallowed_special=())) if text else 0


@dataclass(frozen=True)
class HitView:
    """One query hit as the model sees it: a label (the unit's summary) and its text (the
    unit's content view, every event whole; render cuts it to the hits' share)."""

    label: str
    text: str


@dataclass(slots=True)
class _Body:
    """One body and what is known of its cost, in units."""

    text: str
    mark: int = 0        # its cut marker (an upper bound)
    cost: int = 0        # the whole text; a lower bound while not exact
    exact: bool = True
    keep: int = 0        # prefix(text, at) == (keep, kept): where it is cut under allowance ``at``
    kept: int = 0
    at: int = 0


@dataclass(slots=True)
class _Entry:
    """One event's layout: literal pieces and bodies, in output order."""

    pieces: list[str | _Body]
    bodies: list[_Body]
    fixed: int = 0       # units of the literal pieces
    least: int = 0       # fixed + every body at the floor allowance


_heuristic_marks: list[int] | None = None   # _Meter.marks of HeuristicEstimator, made once


class _Meter:
    """Planning arithmetic over one estimator: exact units when additive, part counts if not."""

    def __init__(self, est: TokenEstimator) -> None:
        self.est = est
        # The default estimator is additive and its marks are constants: an isinstance check
        # against a runtime Protocol and the marks cost ~50 us, a tenth of a render of L1.
        heuristic = type(est) is HeuristicEstimator
        self.additive = heuristic or isinstance(est, AdditiveEstimator)
        self.scale: int = est.scale if self.additive else 1  # type: ignore[attr-defined]
        self.units = est.units if self.additive else est.count  # type: ignore[attr-defined]
        self.prefix = est.prefix if self.additive else self._search  # type: ignore[attr-defined]
        # Units of the cut marker by digits of the body's length: an upper bound for any cut.
        global _heuristic_marks
        if heuristic and _heuristic_marks is not None:
            self.marks = _heuristic_marks
        else:
            self.marks = [self.units(_MARKER.format(10 ** d - 1)) for d in range(21)]
            if heuristic:
                _heuristic_marks = self.marks

    def _search(self, text: str, limit: int) -> tuple[int, int]:
        """``prefix`` by counting: gallop, then halve (needs a monotone estimator)."""
        lo, hi = 0, min(len(text), 4 * limit + 4)
        while hi < len(text) and self.units(text[:hi]) <= limit:
            lo, hi = hi, min(len(text), 2 * hi)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.units(text[:mid]) <= limit else (lo, mid - 1)
        return lo, self.units(text[:lo])

    def many(self, texts: list[str], limits: list[int]) -> tuple[list[int], ...]:
        """(units, keep, kept) for each text; a negative limit skips the prefix."""
        if isinstance(self.est, HeuristicEstimator):
            return _heuristic_many(texts, limits)
        totals, keeps, kepts = [], [], []
        for text, limit in zip(texts, limits):
            total = self.units(text)
            keep, kept = self.prefix(text, limit) if 0 <= limit < total else (len(text), total)
            totals.append(total)
            keeps.append(keep)
            kepts.append(kept)
        return totals, keeps, kepts

    def measure(self, batch: list[_Entry], floor: int) -> None:
        """Fixed and least units of each entry, and each body's cut at ``floor``. An additive
        estimator reads only a body's first floor + mark + 1 characters: past them, at >= 1
        unit a character, the rest gives a lower bound that already proves the body is cut."""
        marks, heads = self.marks, []
        for e in batch:
            for b in e.bodies:
                b.mark = mark = marks[len(str(len(b.text)))]
                b.at = floor
                heads.append(b.text[:floor + mark + 1] if self.additive else b.text)
        fixed = ["".join([p for p in e.pieces if p.__class__ is str]) for e in batch]
        totals, keeps, kepts = self.many(fixed + heads, [-1] * len(batch) + [floor] * len(heads))
        found = zip(totals[len(batch):], keeps[len(batch):], kepts[len(batch):], heads)
        for e, fixed_units in zip(batch, totals):
            e.fixed = e.least = fixed_units
            for b, (total, keep, kept, head) in zip(e.bodies, found):  # found: one iterator
                b.keep, b.kept, b.exact = keep, kept, len(head) == len(b.text)
                b.cost = total + len(b.text) - len(head)
                e.least += min(b.cost, floor + b.mark)

    def settle(self, bodies: list[_Body]) -> None:
        """Measure whole costs exactly."""
        for b, total in zip(bodies, self.many([b.text for b in bodies], [-1] * len(bodies))[0]):
            b.cost, b.exact = total, True

    def extend(self, bodies: list[_Body], level: int) -> None:
        """Move cuts from the floor out to allowance ``level``; additive ones continue from
        the floor cut, reading at most ``level - kept`` more characters."""
        if not self.additive:
            for b in bodies:
                b.keep = b.kept = 0
        texts = [b.text[b.keep:b.keep + level - b.kept] if self.additive else b.text
                 for b in bodies]
        _, keeps, kepts = self.many(texts, [level - b.kept for b in bodies])
        for b, keep, kept in zip(bodies, keeps, kepts):
            b.keep, b.kept, b.at = b.keep + keep, b.kept + kept, level


_HHMM = tuple(f" {h:02d}:{m:02d}:" for h in range(24) for m in range(60))
_SS = tuple(f"{s:02d}" for s in range(60))


def _clock(ts: Timestamp | None, days: dict[int, str]) -> str:
    """Wall-clock in the event's own offset, as ``ts.strftime("%Y-%m-%d %H:%M:%S")`` writes
    it; strftime goes through datetime (~4 µs), so the date is cached per day."""
    if ts is None:
        return _UNKNOWN_TIME
    day, sec = divmod(ts.ns // 1_000_000_000 + ts.offset, 86400)
    date = days.get(day)
    if date is None:
        try:
            date = ts.strftime("%Y-%m-%d")
        except (OverflowError, ValueError):  # beyond datetime's years 1..9999
            date = _UNKNOWN_TIME[:10]
        days[day] = date
    return f"{date}{_HHMM[sec // 60]}{_SS[sec % 60]}"  # tables: format specs cost ~1.5 µs


def _placeholder(block: BlockRef) -> str:
    """``[image/png 640×480 name 3f2a91c0]``: what it is and how to fetch it, in a few tokens."""
    parts = [block.mime or block.modality]
    if block.width and block.height:
        parts.append(f"{block.width}×{block.height}")
    if block.name:
        name = " ".join(block.name.split())
        parts.append(name if len(name) <= 40 else name[:39] + "…")
    parts.append(block.digest[:8])
    return "[" + " ".join(parts) + "]"


def _entry(ev: Event, days: dict[int, str]) -> _Entry:
    """The event's lines: ``[time] source: input → 调用工具: a, b → response``, then one line
    per tool output and one for media placeholders (text blocks are the bodies already)."""
    said = said_by(ev.source, ev.input)
    pieces: list[str | _Body] = [f"[{_clock(ev.timestamp, days)}]" + ("" if said else
                                                                    f" {ev.source}:")]
    bodies = []
    if ev.input:
        bodies.append(_Body(ev.input))
        pieces += (" ", bodies[-1])
    if ev.tools_used:
        pieces.append(" → 调用工具: " + ", ".join(ev.tools_used))
    if ev.response:
        bodies.append(_Body(ev.response))
        pieces += (" → ", bodies[-1])
    pieces.append("\n")
    for tr in ev.tool_results:
        if tr.output:
            bodies.append(_Body(tr.output))
            pieces += (f"  [工具] {tr.name}: ", bodies[-1], "\n")
        else:
            pieces.append(f"  [工具] {tr.name}:\n")
    for text in ev.texts.values():   # text attachments (HomeAgent v3 text blocks): bodies too
        if text:
            bodies.append(_Body(text))
            pieces += ("  [文本] ", bodies[-1], "\n")
    media = [_placeholder(b) for b in ev.blocks if b.modality != "text"] if ev.blocks else None
    if media:
        pieces.append("  [媒体] " + " ".join(media) + "\n")
    return _Entry(pieces, bodies)


def _level(bodies: list[_Body], room: int, floor: int) -> int | None:
    """Water-filling: the largest allowance T >= floor with sum(min(cost, T + mark)) <= room,
    or None when every body fits whole. A body is whole iff T >= cost - mark."""
    if sum(b.cost for b in bodies) <= room:
        return None
    order = sorted(bodies, key=lambda b: b.cost - b.mark)
    whole, marked, best, n = 0, sum(b.mark for b in bodies), floor, len(order)
    for j, b in enumerate(order):
        # order[:j] is whole and the rest is cut at T, for T < b.cost - b.mark.
        t = (room - whole - marked) // (n - j)
        if t < b.cost - b.mark - 1:
            return max(best, t)
        best = max(best, b.cost - b.mark - 1)
        whole += b.cost
        marked -= b.mark
    return best


def _fill(bodies: list[_Body], room: int, floor: int, meter: _Meter) -> int | None:
    """``_level`` with exact costs where they matter: a body known by a lower bound is
    measured once that bound no longer proves it is cut at the level found."""
    while True:
        level = _level(bodies, room, floor)
        stale = [b for b in bodies if not b.exact and (level is None or b.cost <= level + b.mark)]
        if not stale:
            return level
        meter.settle(stale)


def _select(make: Callable[[int], _Entry], n: int, budget: int, meter: _Meter, floor: int,
            head_text: str, omit_fmt: str) -> tuple[int, list[_Entry]]:
    """In priority order (``make(0)`` first), the most entries whose least forms fit with
    the header and, when any is left out, the omitted line: (how many, their entries in
    priority order), or (-1, []). Measured in batches sized by the mean least cost so far,
    to keep numpy passes few."""
    size = 64
    head, omit = meter.units(head_text), meter.units(omit_fmt.format(n))
    best, used, done, chosen = (0 if head + omit <= budget else -1), head, 0, []
    while done < n and used <= budget:
        batch = [make(i) for i in range(done, min(n, done + size))]
        meter.measure(batch, floor)
        for entry in batch:
            done, used = done + 1, used + entry.least
            if used > budget:
                break
            chosen.append(entry)
            if used + (omit if done < n else 0) <= budget:
                best = done
        size = max(16, (budget - used) * done // max(1, used - head) * 21 // 20 + 1)
    return best, chosen[:max(best, 0)]


@dataclass(frozen=True)
class _Section:
    """How one section is laid out: its first line, its omitted line, and whether its first
    entry is always shown (the timeline's newest event) even over budget."""

    head: str
    omit_fmt: str
    oldest_first: bool   # entries were made newest first: show them reversed
    force_first: bool


_TIMELINE = _Section(HEADER + "\n", _OMITTED, oldest_first=True, force_first=True)
_CUT = _Section("", "", oldest_first=False, force_first=False)   # one hit cut (_cut_hit)


def _layout(make: Callable[[int], _Entry], n: int, budget: int, meter: _Meter, floor: int,
            sec: _Section) -> tuple[str, bool]:
    """One plan in units: select entries, water-fill their bodies, build the text once.
    Returns (text, forced): forced when only the always-shown first entry, at the floor,
    is given although it does not fit."""
    shown, chosen = _select(make, n, budget, meter, floor, sec.head, sec.omit_fmt)
    forced = False
    if shown <= 0 and sec.force_first and n:
        chosen = [make(0)]
        meter.measure(chosen, floor)
        shown, forced = 1, True
    if shown <= 0:
        return "", False
    if sec.oldest_first:
        chosen = chosen[::-1]
    extra = [sec.omit_fmt.format(n - shown)] if shown < n else []
    room = budget - meter.units(sec.head + "".join(extra)) - sum(e.fixed for e in chosen)
    bodies = [b for e in chosen for b in e.bodies]
    level = _fill(bodies, room, floor, meter)
    if level is not None:
        meter.extend([b for b in bodies if b.cost > level + b.mark and level > b.at], level)
    out = [sec.head, *extra]
    for e in chosen:
        out += [p if p.__class__ is str else _show(p, level) for p in e.pieces]  # type: ignore
    return "".join(out), forced


def _show(body: _Body, level: int | None) -> str:
    """The body as shown under allowance ``level`` (None: everything whole)."""
    if level is None or body.cost <= level + body.mark:
        return body.text
    return body.text[:body.keep] + _MARKER.format(len(body.text) - body.keep)


def render(events: Iterable[Event], budget_tokens: int, *,
           estimator: TokenEstimator | None = None,
           min_body_tokens: int = MIN_BODY_TOKENS, hits: Sequence[HitView] = (),
           memory_tokens: int = 0) -> str:
    """The timeline as the model sees it, within ``budget_tokens`` by ``estimator``.

    Events are shown oldest first (stable for equal timestamps). Every body is whole when all
    fit; otherwise each gets min(its cost, one common cap), cut with ``…[+N字]``; when not
    even every event with bodies at ``min_body_tokens`` fits, the oldest collapse into one
    line. The newest event is always shown, at least its bodies' beginnings at the floor,
    however small the budget (HomeAgent also always shows one event): that minimal view is
    the one output that may exceed the budget. "" when there are no events.

    ``hits`` (the read-only query hits of the turn, best first) come first as their own
    section, ``【相关记忆】``, within ``memory_tokens`` (budget_split's memory share): each
    hit whole while it fits, the first that does not cut line by line, the rest left out
    (``_render_hits``). Deterministic.
    """
    for name, value in (("budget_tokens", budget_tokens), ("memory_tokens", memory_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}: expected an int >= 0, got {value!r}")
    est = estimator if estimator is not None else HeuristicEstimator()
    meter = _Meter(est)
    floor = max(1, min_body_tokens) * meter.scale
    section = _render_hits(list(hits), memory_tokens, meter, floor) if hits else ""
    ordered = list(events)
    try:
        ordered.sort(key=_BY_TIME)
    except AttributeError:  # some event has no timestamp: those sort first
        ordered.sort(key=lambda e: (0, 0) if e.timestamp is None else (1, e.timestamp.ns))
    if not ordered:
        return section
    days: dict[int, str] = {}
    n = len(ordered)
    return section + _fit(lambda i: _entry(ordered[n - 1 - i], days), n, budget_tokens, meter,
                          floor, _TIMELINE)


def _render_hits(hits: list[HitView], budget: int, meter: _Meter, floor: int) -> str:
    """The query hits section, best first: each hit whole (``#k label``, then its text) while
    it fits; the first that does not is cut into the room left (``_cut_hit``); the hits
    after it are left out, ``(N more hits omitted)`` under the header. "" when not even the
    first hit fits at the floor. Checked by the estimator on the whole text."""
    est, n = meter.est, len(hits)
    shown: list[str] = []
    for i, hit in enumerate(hits):
        label = " ".join(str(hit.label).split())
        whole = f"#{i + 1} {label}\n{hit.text}\n"
        head = HITS_HEADER + "\n" + (_MORE_HITS.format(n - i - 1) if i < n - 1 else "")
        if est.count(head + "".join(shown) + whole) <= budget:
            shown.append(whole)
            continue
        head = HITS_HEADER + "\n" + _MORE_HITS.format(n - i)   # the most left out from here
        room = budget - est.count(head + "".join(shown))
        cut = _cut_hit(i, hit, label, room, meter, floor) if room > 0 else ""
        if cut and est.count(head + "".join(shown) + cut) <= budget:
            shown.append(cut)
        break
    if not shown:
        return ""
    rest = n - len(shown)
    return HITS_HEADER + "\n" + (_MORE_HITS.format(rest) if rest else "") + "".join(shown)


def _cut_hit(i: int, hit: HitView, label: str, room: int, meter: _Meter, floor: int) -> str:
    """Hit ``i`` cut into ``room`` tokens by the timeline's rule, each line of its text (an
    event of the view: ``views.matched_view``) a body of its own, so the matched event in
    the middle keeps its beginning too; "…" lines stay whole. When its lines do not all fit
    at the floor, its text is one body (its beginning). "" when neither fits."""
    def by_line(_: int) -> _Entry:
        pieces: list[str | _Body] = [f"#{i + 1} {label}\n"]
        bodies = []
        for line in hit.text.split("\n"):
            if line == "…":
                pieces.append("…\n")
                continue
            bodies.append(_Body(line))
            pieces += (bodies[-1], "\n")
        return _Entry(pieces, bodies)

    def whole(_: int) -> _Entry:
        body = _Body(hit.text)
        return _Entry([f"#{i + 1} {label}\n", body, "\n"], [body])
    for make in (by_line, whole):
        text = _fit(make, 1, room, meter, floor, _CUT)
        if text:
            return text
    return ""


def _fit(make: Callable[[int], _Entry], n: int, budget: int, meter: _Meter, floor: int,
         sec: _Section) -> str:
    """Plan for the whole budget and check the text once. Only a non-additive estimator can
    overshoot (its parts' counts under-predict the whole); then the planning budget is
    searched, in proportion to the overshoot or by halves, keeping the best text that fits.
    The forced minimal view (the newest event only, at the floor) is returned as it is."""
    plan, lo, hi, best = budget, 0, budget + 1, ""  # plans <= lo fit (best), plans >= hi do not
    for _ in range(_ATTEMPTS):
        text, forced = _layout(make, n, plan * meter.scale, meter, floor, sec)
        if forced:
            return text
        used = meter.est.count(text)
        if used <= budget:
            if plan == budget:
                return text
            lo, best = plan, text
        else:
            log.debug("render: a plan for %d tokens counts %d of %d by %s",
                      plan, used, budget, type(meter.est).__name__)
            hi = plan
        if hi - lo <= 1:
            break
        guess = plan * budget // used if used > budget else (lo + hi) // 2
        plan = min(hi - 1, max(lo + 1, guess))
    if not best and sec.force_first and n:
        return _layout(make, n, 0, meter, floor, sec)[0]
    return best


@dataclass(frozen=True)
class BudgetSplit:
    """HomeAgent's ``ComputeTokenBudget`` result: how one context window is shared."""

    max_context: int
    target_usage: int
    fixed_tokens: int
    memory_tokens: int
    context_tokens: int
    reserved: int


def _ratio(value: float | Fraction, name: str) -> Fraction:
    """An exact ratio, so 0.8 × 32768 floors like HomeAgent's integer 80/100 (no 0.79999…)."""
    from fractions import Fraction  # lazy: start-up, loaded only when used (+fractions)
    ratio = Fraction(value).limit_denominator(1_000_000)
    if not 0 <= ratio <= 1:
        raise ValueError(f"{name}: expected a ratio in [0, 1], got {value!r}")
    return ratio


def budget_split(context_window: int, system_prompt: str, *, utilization: float = 0.8,
                 memory_ratio: float = 1 / 3, max_target: int = 600000,
                 estimator: TokenEstimator | None = None) -> BudgetSplit:
    """Split a window as HomeAgent does: target = window × utilization capped at max_target
    (negative: no cap), reserved = window − target, fixed = est(system_prompt),
    available = max(0, target − fixed), memory = available × memory_ratio, context = the rest.

    A window <= 0 means unknown: 32768, as in HomeAgent. ``RuneEstimator()`` reproduces
    HomeAgent's figures exactly; the default estimator is ``render``'s.
    """
    est = estimator if estimator is not None else HeuristicEstimator()
    window = context_window if context_window > 0 else DEFAULT_CONTEXT_WINDOW
    target = int(window * _ratio(utilization, "utilization"))
    if max_target >= 0:
        target = min(target, max_target)
    fixed = est.count(system_prompt)
    available = max(0, target - fixed)
    memory = int(available * _ratio(memory_ratio, "memory_ratio"))
    return BudgetSplit(max_context=window, target_usage=target, fixed_tokens=fixed,
                       memory_tokens=memory, context_tokens=available - memory,
                       reserved=window - target)
