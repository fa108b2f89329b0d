"""One unit as a fleet row: its searchable text and what a hit shows, read from its directory.

The text is what fsmem's own index reads of a unit (``fsmem.search.index_entry.event_texts``:
each event's text blocks through the host's plugin declarations, its media names) plus its
summary, tags and entities. PostgreSQL splits it two ways: the Latin text goes to the
``english`` configuration, and CJK runs become character bigrams (``cjk_terms``), stored as
lexemes of their own (``array_to_tsvector``: no parser, so no locale decides what a CJK word is).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from fsmem.format.layout import is_l1, layer_agent
from fsmem.format.unit import read_manifest
from fsmem.search.analyze import CJK_CHARS
from fsmem.search.index_entry import event_texts, unit_ident

if TYPE_CHECKING:
    from fsmem.format.plugins import Plugins

__all__ = ["UnitRow", "read_row", "cjk_terms", "latin_text", "ns_datetime", "TEXT_CAP",
           "SNIPPET_CHARS"]

TEXT_CAP = 200_000     # chars of a unit's text indexed: a tsvector holds at most 1 MB
SNIPPET_CHARS = 200
# The CJK ranges of fsmem.search.analyze (Han, extension A and B+, compatibility ideographs,
# kana, Hangul syllables).
_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class UnitRow:
    """What the fleet index keeps of one unit (all derivable from its directory)."""

    unit_id: str
    layer: str
    agent: str
    private: bool
    supersedes: str
    summary: str
    snippet: str
    tags: list[str]
    created_ns: int
    first_ns: int | None
    last_ns: int | None
    events: int
    ident: int
    text: str                    # the unit's searchable text (capped)
    cjk: list[str] = field(default_factory=list)


def cjk_terms(text: str, *, query: bool = False) -> list[str]:
    """The CJK character bigrams of ``text`` (NFKC), each once; a run of one character is
    itself a term. ``query``: a lone character becomes a prefix (it may start a bigram)."""
    out: dict[str, None] = {}
    for run in _CJK_RUN.findall(unicodedata.normalize("NFKC", text)):
        if len(run) == 1:
            out[run + (":*" if query else "")] = None
        else:
            out.update(dict.fromkeys(run[i:i + 2] for i in range(len(run) - 1)))
    return list(out)


def latin_text(text: str) -> str:
    """``text`` without its CJK runs (those are indexed as bigrams)."""
    return _CJK_RUN.sub(" ", text)


def ns_datetime(ns: int | None) -> datetime | None:
    """An instant in ns as an aware datetime (None outside datetime's years 1-9999)."""
    if ns is None:
        return None
    try:
        return _EPOCH + timedelta(microseconds=ns // 1000)
    except OverflowError:
        return None


def read_row(plugins: "Plugins", layer: str, unit_id: str, path: str) -> UnitRow:
    """The fleet row of the unit directory ``path`` in ``layer`` (FsmemError or OSError if it
    cannot be read: a caller tells a unit that moved away from a damaged one)."""
    ident = unit_ident(path)
    if ident is None:
        raise FileNotFoundError(f"{path}: no manifest")
    manifest = read_manifest(path, expect_id=unit_id)
    said: list[str] = []
    times = []
    for ev in manifest.events:
        said += event_texts(plugins, path, ev)
        times.append(ev.timestamp.ns)
    text = "\n".join(t for t in [manifest.summary, *manifest.tags, *manifest.entities, *said]
                     if t)[:TEXT_CAP]
    agent = manifest.agent or (layer_agent(layer) if is_l1(layer) else "")
    first = next((t for t in (*said, manifest.summary) if t.strip()), "")
    text = text.replace("\0", " ")   # PostgreSQL text holds no NUL
    return UnitRow(unit_id=unit_id, layer=layer, agent=agent, private=manifest.private,
                   supersedes=manifest.meta.get("supersedes", ""),
                   summary=manifest.summary.replace("\0", " "),
                   snippet=" ".join(first.replace("\0", " ").split())[:SNIPPET_CHARS],
                   tags=[t.replace("\0", " ") for t in manifest.tags],
                   created_ns=manifest.created_at.ns, first_ns=min(times) if times else None,
                   last_ns=max(times) if times else None, events=len(manifest.events),
                   ident=ident, text=text, cjk=cjk_terms(text))
