"""The "year" fixture: a seeded year of generated two-person conversations, and the stores of
``python -m benchmarks --only year`` built from it through fsmem's public API.

Text: sessions of 6-40 turns between two people (speakers alternate), dated through one year,
each turn ~250 characters on average: sentences from templates written for this fixture (no
text of any public benchmark) with a vocabulary of several thousand English words
(benchmarks/_yearwords.py, inflected) drawn Zipf-like (rank^-1.07 within each part of speech),
person names, places, weekdays and dates, clock times, numbers, prices, flight codes, short
replies ("ok, thanks"), and a modest share of Chinese (about 1 session in 9 in Chinese, and a
Chinese sentence in about 1 English turn in 25). ``turns(n)`` is deterministic: the same
seed gives the same texts in every process (the anchors index exactly what fsmem stores).

Stores (``build_units``, ``build_events``), all with ``Memory.open(root, durability="off",
auto_prune=False)`` (the build is not what is measured: no fsync; the stores are the same
bytes a durable build writes) and the index loaded *before* the first commit, so each commit
hands its unit to the index as written and the index is saved once at ``close()``:
- ``year1-units-N`` (1: ``FIXTURE_VERSION``): N L2 units of one turn each (``commit_events``, meta ``session``);
- ``year1-events-N``: N events in units of one whole session each (an archive of a
  conversation, as prune writes them: many events per unit), ~23 events per unit.

    python benchmarks/_year.py --cache DIR --units 100000     # build (or reuse) one store
    python benchmarks/_year.py --sample 5                      # print sample turns
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import _yearwords as W  # noqa: E402

__all__ = ["Turn", "turns", "sessions", "queries", "FIRST_QUERY", "build_units",
           "build_events", "vocabulary_size", "unit_text"]

SEED = 2027
#: in the names of the cached stores (``year<N>-units-…``): bump it when the generated text
#: changes, so a cache never serves a store of other texts than the anchors index
FIXTURE_VERSION = 1
YEAR_START_S = 1_767_225_600   # 2026-01-01T00:00:00Z
ZIPF_S = 1.07
ZH_SESSION_SHARE = 1 / 9
ZH_SENTENCE_SHARE = 1 / 25
REPLY_SHARE = 0.10
FIRST_QUERY = "dentist appointment Tuesday"   # every word of it is in the fixture's vocabulary


# -- the vocabulary ----------------------------------------------------------------------------

_NO_PLURAL = {"sheep", "fish", "rice", "milk", "money", "furniture", "jewelry", "advice",
              "homework", "luggage", "traffic", "weather", "bread", "butter", "flour",
              "spinach", "garlic", "ginger", "honey", "salt", "sugar", "wool", "dust", "soil",
              "snow", "rain", "ice", "cash", "laundry", "music", "grass", "gold", "ham",
              "jeans", "pants", "scissors", "news", "yogurt", "toast", "credit", "staff",
              "earth", "ink", "oil", "fuel", "blood", "fabric", "health"}
_PLURAL = {"child": "children", "foot": "feet", "tooth": "teeth", "mouse": "mice",
           "knife": "knives", "wife": "wives", "leaf": "leaves", "wolf": "wolves",
           "shelf": "shelves", "life": "lives", "person": "people", "loaf": "loaves",
           "teeth": "teeth"}
_DOUBLE = {"stop", "plan", "drop", "skip", "slip", "jog", "hug", "nod", "rub", "step", "grab",
           "drag", "ship", "trim", "wrap", "shop", "chat", "beg", "pat", "tap", "rob", "scan",
           "ban", "hop", "mop", "pin", "sip", "knit"}


def _s(w: str) -> str:
    if w.endswith(("s", "x", "z", "ch", "sh", "o")) and not w.endswith(("oo", "eo")):
        return w + "es"
    if w.endswith("y") and w[-2:-1] not in "aeiou":
        return w[:-1] + "ies"
    return w + "s"


def _plural(w: str) -> str:
    if w in _NO_PLURAL:
        return w
    return _PLURAL.get(w) or (w + "s" if w.endswith("o") and w[-2:-1] in "aeiou"
                              or w in ("photo", "piano", "radio", "studio", "zoo", "video",
                                       "avocado") else _s(w))


def _ed(w: str) -> str:
    if w in W.IRREGULAR_PAST:
        return W.IRREGULAR_PAST[w]
    if w.endswith("e"):
        return w + "d"
    if w.endswith("y") and w[-2:-1] not in "aeiou":
        return w[:-1] + "ied"
    if w in _DOUBLE:
        return w + w[-1] + "ed"
    return w + "ed"


def _ing(w: str) -> str:
    if w.endswith("ie"):
        return w[:-2] + "ying"
    if w.endswith("e") and not w.endswith(("ee", "ye", "oe")):
        return w[:-1] + "ing"
    if w in _DOUBLE:
        return w + w[-1] + "ing"
    return w + "ing"


class _Zipf:
    """Words of one part of speech in a seeded rank order; ``draw`` picks one with
    probability proportional to (rank + 1) ** -ZIPF_S."""

    def __init__(self, words: list[str], rng: random.Random) -> None:
        self.words = list(dict.fromkeys(words))
        rng.shuffle(self.words)
        self.cum = list(itertools.accumulate((r + 1) ** -ZIPF_S for r in range(len(self.words))))
        self.total = self.cum[-1]

    def draw(self, rng: random.Random) -> str:
        return self.words[bisect.bisect(self.cum, rng.random() * self.total)]


@dataclass
class _Vocab:
    noun: _Zipf
    nouns: _Zipf
    verb: _Zipf
    verbs: _Zipf
    past: _Zipf
    gerund: _Zipf
    adj: _Zipf
    adv: _Zipf
    name: _Zipf
    last: _Zipf
    place: _Zipf
    zh_name: _Zipf
    zh_place: _Zipf
    zh_noun: _Zipf
    zh_verb: _Zipf
    zh_adj: _Zipf


def _vocab() -> _Vocab:
    rng = random.Random(SEED)
    verbs = W.VERBS + sorted(W.IRREGULAR_PAST)
    # the irregular verbs' base forms rank among the most frequent (as they do in speech)
    return _Vocab(noun=_Zipf(W.NOUNS, rng), nouns=_Zipf([_plural(n) for n in W.NOUNS], rng),
                  verb=_Zipf(verbs, rng), verbs=_Zipf([_s(v) for v in verbs], rng),
                  past=_Zipf([_ed(v) for v in verbs], rng),
                  gerund=_Zipf([_ing(v) for v in verbs], rng), adj=_Zipf(W.ADJECTIVES, rng),
                  adv=_Zipf(W.ADVERBS, rng), name=_Zipf(W.FIRST_NAMES, rng),
                  last=_Zipf(W.LAST_NAMES, rng), place=_Zipf(W.PLACES, rng),
                  zh_name=_Zipf(W.ZH_NAMES, rng), zh_place=_Zipf(W.ZH_PLACES, rng),
                  zh_noun=_Zipf(W.ZH_NOUNS, rng), zh_verb=_Zipf(W.ZH_VERBS, rng),
                  zh_adj=_Zipf(W.ZH_ADJ, rng))


V = _vocab()


def vocabulary_size() -> int:
    """Distinct English word forms the generator can write (names, places included)."""
    forms = set()
    for z in (V.noun, V.nouns, V.verb, V.verbs, V.past, V.gerund, V.adj, V.adv, V.name,
              V.last, V.place):
        forms.update(w.lower() for w in z.words)
    forms.update(W.FUNCTION)
    forms.update(w.lower() for w in W.WEEKDAYS + W.MONTHS)
    return len(forms)


# -- sentences ---------------------------------------------------------------------------------

def _time(r: random.Random) -> str:
    h, m = r.randrange(6, 23), r.choice((0, 0, 15, 30, 45, 10, 20, 40, 50, 5))
    if r.random() < 0.5:
        return f"{h:02d}:{m:02d}"
    return f"{(h - 1) % 12 + 1}:{m:02d} {'am' if h < 12 else 'pm'}" if m else \
        f"{(h - 1) % 12 + 1} {'am' if h < 12 else 'pm'}"


def _date(r: random.Random, day_s: int) -> str:
    t = time.gmtime(day_s + r.randrange(0, 40) * 86400)
    k = r.random()
    if k < 0.4:
        return f"{W.MONTHS[t.tm_mon - 1]} {t.tm_mday}"
    if k < 0.7:
        return f"{t.tm_year}-{t.tm_mon:02d}-{t.tm_mday:02d}"
    if k < 0.85:
        return f"{t.tm_mday}/{t.tm_mon}"
    return f"next {r.choice(W.WEEKDAYS)}"


def _price(r: random.Random) -> str:
    pre, post = r.choice(W.CURRENCIES)
    amount = r.choice((r.randrange(2, 60), r.randrange(10, 500), round(r.uniform(1, 99), 2)))
    return f"{pre}{amount}{post}"


def _num(r: random.Random) -> str:
    return str(r.choice((r.randrange(2, 12), r.randrange(10, 100), r.randrange(100, 2000))))


_PREP = ("in", "on", "at", "near", "behind", "under", "next to", "by", "for", "with")
_WHEN = ("this morning", "tonight", "tomorrow", "last night", "on the weekend", "after work",
         "before lunch", "yesterday", "later today", "next week")


def _en_sentence(r: random.Random, day_s: int) -> str:
    k = r.randrange(16)
    n, a, v = V.noun.draw, V.adj.draw, V.verb.draw
    if k == 0:
        s = f"{V.name.draw(r)} {V.past.draw(r)} the {a(r)} {n(r)} {r.choice(_PREP)} the {n(r)}."
    elif k == 1:
        s = f"can we move the {n(r)} to {r.choice(W.WEEKDAYS)} at {_time(r)}?"
    elif k == 2:
        s = f"I paid {_price(r)} for the {n(r)} at the {n(r)} in {V.place.draw(r)}."
    elif k == 3:
        s = f"the {n(r)} {V.verbs.draw(r)} {V.adv.draw(r)} {r.choice(_WHEN)}."
    elif k == 4:
        s = f"did you {v(r)} the {a(r)} {n(r)} yet?"
    elif k == 5:
        s = (f"{V.name.draw(r)} {V.last.draw(r)} flies to {V.place.draw(r)} on "
             f"{_date(r, day_s)}, flight {r.choice('ABCDEFKLU')}{r.choice('AXYZHL')}"
             f"{r.randrange(100, 999)} leaves at {_time(r)}.")
    elif k == 6:
        s = f"remember to {v(r)} the {n(r)} before {r.choice(W.WEEKDAYS)}, it costs {_price(r)}."
    elif k == 7:
        s = f"we have {_num(r)} {V.nouns.draw(r)} left and {_num(r)} more in the {n(r)}."
    elif k == 8:
        s = f"my {n(r)} is {V.adv.draw(r)} {a(r)} because the {n(r)} {V.past.draw(r)} again."
    elif k == 9:
        s = f"I'm {V.gerund.draw(r)} the {n(r)} with {V.name.draw(r)} {r.choice(_WHEN)}."
    elif k == 10:
        s = (f"it was {a(r)} and {a(r)} in {V.place.draw(r)} on {_date(r, day_s)}, about "
             f"{r.randrange(-5, 35)} degrees.")
    elif k == 11:
        s = (f"the {n(r)} appointment is on {r.choice(W.WEEKDAYS)} {_date(r, day_s)} at "
             f"{_time(r)}, room {r.randrange(1, 400)}.")
    elif k == 12:
        s = f"{V.name.draw(r)} said the {n(r)} {r.choice(_PREP)} the {n(r)} looks {a(r)}."
    elif k == 13:
        s = (f"should I {v(r)} {r.choice(('a', 'the', 'another', 'one more'))} {n(r)} or "
             f"{v(r)} the {V.nouns.draw(r)} first?")
    elif k == 14:
        s = f"the {a(r)} {V.nouns.draw(r)} {V.past.draw(r)} {V.adv.draw(r)}, {_num(r)} of them."
    else:
        s = f"{V.gerund.draw(r)} {V.nouns.draw(r)} {r.choice(_PREP)} {V.place.draw(r)} is {a(r)}."
    return s[0].upper() + s[1:]


def _zh_sentence(r: random.Random, day_s: int) -> str:
    k = r.randrange(8)
    n, p = V.zh_noun.draw, V.zh_place.draw
    t = time.gmtime(day_s + r.randrange(0, 30) * 86400)
    if k == 0:
        return f"{V.zh_name.draw(r)}说{p(r)}的{n(r)}太{V.zh_adj.draw(r)}了。"
    if k == 1:
        return f"我们周{'一二三四五六日'[r.randrange(7)]}{_time(r)}在{p(r)}{V.zh_verb.draw(r)}{n(r)}吧。"
    if k == 2:
        return f"{n(r)}花了{r.randrange(5, 3000)}元，比上次{V.zh_adj.draw(r)}。"
    if k == 3:
        return f"记得{V.zh_verb.draw(r)}{n(r)}，{t.tm_mon}月{t.tm_mday}日之前要{V.zh_verb.draw(r)}。"
    if k == 4:
        return f"{V.zh_name.draw(r)}明天去{p(r)}，{_time(r)}的航班，记得带{n(r)}。"
    if k == 5:
        return f"家里的{n(r)}又坏了，{V.zh_name.draw(r)}说要{V.zh_verb.draw(r)}。"
    if k == 6:
        return f"今天{p(r)}很{V.zh_adj.draw(r)}，气温{r.randrange(-10, 38)}度。"
    return f"{n(r)}和{n(r)}都放在{n(r)}旁边了，{r.randrange(2, 20)}个。"


def _utterance(r: random.Random, zh: bool, day_s: int) -> str:
    if r.random() < REPLY_SHARE:
        return r.choice(W.ZH_REPLIES if zh else W.REPLIES)
    if zh:
        return "".join(_zh_sentence(r, day_s) for _ in range(r.randrange(3, 10)))
    out = [_en_sentence(r, day_s) for _ in range(r.randrange(3, 10))]
    if r.random() < ZH_SENTENCE_SHARE:
        out.insert(r.randrange(len(out) + 1), _zh_sentence(r, day_s))
    return " ".join(out)


# -- turns -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Turn:
    session: str
    speaker: str
    ts_ns: int
    offset_s: int
    text: str

    @property
    def input(self) -> str:
        return f"{self.speaker}: {self.text}"


def sessions(seed: int = SEED) -> Iterator[list[Turn]]:
    """An endless stream of sessions, dated through the year in order (then the next year)."""
    r = random.Random(seed)
    day_s, k = YEAR_START_S, 0
    while True:
        zh = r.random() < ZH_SESSION_SHARE
        a, b = (r.sample(W.ZH_NAMES, 2) if zh else
                [f"{V.name.draw(r)}" for _ in range(2)])
        if a == b:
            b = r.choice(W.ZH_NAMES if zh else W.FIRST_NAMES)
        off = 8 * 3600 if zh else r.choice((0, 3600, -5 * 3600))
        t = day_s * 10**9 + r.randrange(7 * 3600, 22 * 3600) * 10**9
        out = []
        for i in range(r.randrange(6, 41)):
            t += r.randrange(5, 600) * 10**9
            out.append(Turn(f"s{k:07d}", (a, b)[i % 2], t, off, _utterance(r, zh, day_s)))
        yield out
        k += 1
        day_s += r.choice((0, 0, 0, 3600, 86400 // 4))   # ~hundreds of sessions a day


def turns(n: int, seed: int = SEED) -> list[Turn]:
    """The first ``n`` turns of the stream (deterministic)."""
    return list(itertools.islice(itertools.chain.from_iterable(sessions(seed)), n))


def unit_text(t: Turn) -> str:
    """The text of the one-turn unit (what fsmem indexes, and the anchors too)."""
    return t.input


def queries(n: int, seed: int = SEED + 1) -> list[str]:
    """Queries of 2-4 words of the fixture's vocabulary (one in eight in Chinese)."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        if r.random() < 1 / 8:
            out.append(f"{V.zh_place.draw(r)}{V.zh_noun.draw(r)}")
            continue
        parts = [V.noun.draw(r)]
        k = r.random()
        if k < 0.3:
            parts += [V.name.draw(r)]
        elif k < 0.5:
            parts += [V.place.draw(r)]
        elif k < 0.7:
            parts += [r.choice(W.WEEKDAYS)]
        parts += [r.choice((V.noun, V.adj, V.verb)).draw(r) for _ in range(r.randrange(0, 3))]
        r.shuffle(parts)
        out.append(" ".join(parts))
    return out


# -- building stores ---------------------------------------------------------------------------

def _event(t: Turn):
    from fsmem import Event, Timestamp
    return Event(timestamp=Timestamp(t.ts_ns, t.offset_s), source="chat", input=t.input)


def build_units(root: str, n: int, progress: Callable[[int], None] | None = None) -> float:
    """``n`` L2 units of one turn each; seconds taken."""
    from fsmem import Memory
    t0 = time.perf_counter()
    mem = Memory.open(root, durability="off", auto_prune=False)
    try:
        len(mem.index)   # loaded (empty) first: every commit is indexed as written
        for i, t in enumerate(turns(n)):
            mem.commit_events([_event(t)], meta={"session": t.session})
            if progress and (i + 1) % 10_000 == 0:
                progress(i + 1)
    finally:
        mem.close()      # one index save
    return time.perf_counter() - t0


def build_events(root: str, n: int, progress: Callable[[int], None] | None = None
                 ) -> tuple[float, int]:
    """``n`` events in L2 units of one session each (the last one cut at ``n``);
    (seconds taken, units written)."""
    from fsmem import Memory
    t0 = time.perf_counter()
    mem = Memory.open(root, durability="off", auto_prune=False)
    done = units = 0
    try:
        len(mem.index)
        for sess in sessions():
            sess = sess[:n - done]
            mem.commit_events([_event(t) for t in sess],
                              meta={"session": sess[0].session, "is_archived_context": "true"},
                              source="context_archived")
            done += len(sess)
            units += 1
            if progress and done // 50_000 != (done - len(sess)) // 50_000:
                progress(done)
            if done >= n:
                break
    finally:
        mem.close()
    return time.perf_counter() - t0, units


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, help="print this many turns and the statistics")
    ap.add_argument("--cache", help="directory of built stores (python -m benchmarks --cache)")
    ap.add_argument("--units", type=int, help="build year1-units-N in --cache")
    ap.add_argument("--events", type=int, help="build year1-events-N in --cache")
    args = ap.parse_args(argv)
    if args.sample:
        ts = turns(20_000)
        for t in ts[:args.sample]:
            print(t.session, t.ts_ns, t.input)
        lens = [len(unit_text(t)) for t in ts]
        zh = sum(any("\u4e00" <= c <= "\u9fff" for c in t.text) for t in ts)
        words = {w.lower().strip(".,?!:") for t in ts for w in t.text.split()}
        print(f"mean {sum(lens) / len(lens):.0f} chars per unit; {zh / len(ts):.1%} with "
              f"Chinese; {len(words)} distinct tokens in 20k turns; vocabulary "
              f"{vocabulary_size()} English forms")
    if args.cache and (args.units or args.events):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _harness import Workdir
        wd = Workdir(cache=args.cache)
        try:
            t = time.perf_counter()
            if args.units:
                wd.store(f"year{FIXTURE_VERSION}-units-{args.units}", lambda root: _record(
                    root, build_units(root, args.units, _tick(t))))
            if args.events:
                wd.store(f"year{FIXTURE_VERSION}-events-{args.events}", lambda root: _record(
                    root, *build_events(root, args.events, _tick(t))))
        finally:
            wd.close()
    return 0


def _tick(t0: float) -> Callable[[int], None]:
    def tick(done: int) -> None:
        print(f"  {done}, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return tick


def _record(root: str, secs: float, units: int | None = None) -> None:
    """BUILD-SECONDS beside the store root: how long the build took (the document says)."""
    Path(os.path.dirname(root), "build-seconds").write_text(
        f"{secs:.1f}" + (f" {units}" if units is not None else "") + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
