"""Who said an event, as search evidence: the speaker read from an event's ``source``.

A conversation stored one turn at a time with ``commit(text, source="Caroline")`` must rank as
well as one stored as "Caroline: text" with a session: the speaker is a field the ranker
matches (its name as a word of the row, plus a speaker field term that only the speaker's own
turns hold, so "what did Caroline say" favours Caroline's turns over "Wow, Caroline, ..."),
the dense text reads "Caroline: text", and turns of different speakers close in time are
conversation neighbours (``fsmem.search.ranking.link_neighbours``).

A source reads as a speaker when it looks like a name: it starts with a capital or a letter of
a script without case (CJK), holds no path, URL or address characters, and is not a role word
of the event format capitalised (``ROLE_SOURCES``: "User", "Assistant", ...). The rule is the
shape, not a list of names: a source in lower case (a channel, or one fsmem sets itself, such
as "inbox" or "manual") is not a speaker, whoever declared it.
"""

from __future__ import annotations

import numpy as np


__all__ = ["ROLE_SOURCES", "SPEAKER_TAG", "speaker_of", "spoken_text", "names_speaker",
           "speaker_terms", "query_speaker_terms"]

#: the roles of an event, capitalised: a source that names a role, not a person (the lower
#: case forms, like every lower-case source, fail the shape rule already)
ROLE_SOURCES = frozenset({"User", "Agent", "Assistant", "System", "Tool"})
SPEAKER_TAG = 0x5350454B   # "SPEK": the field of the speaker terms (``analyze.field_terms``)
_NOT_IN_NAMES = frozenset("/\\:@<>|{}[]#=")
_MAX_NAME = 64


def speaker_of(source: str) -> str:
    """The speaker ``source`` names (stripped), or "" when it does not read as a person."""
    name = source.strip()
    if not name or len(name) > _MAX_NAME or name in ROLE_SOURCES:
        return ""
    first = name[0]
    if not first.isalpha() or first.islower():
        return ""
    if not _NOT_IN_NAMES.isdisjoint(name) or "." in name and " " not in name:
        return ""   # a path, a URL, an address, a file or module name
    return name


def names_speaker(name: str, text: str) -> bool:
    """Whether ``text`` already begins with "<name>:" (a transcript line)."""
    head = text.lstrip()[:len(name) + 2]
    return head.startswith(name) and head[len(name):len(name) + 1] in (":", "：")


def spoken_text(source: str, text: str) -> str:
    """The text an embedder reads for one text block of an event: "<speaker>: <text>" when the
    source is a speaker the text does not already name; else the text itself."""
    name = speaker_of(source)
    if not name or not text.strip() or names_speaker(name, text):
        return text
    return f"{name}: {text}"


def speaker_terms(name: str) -> np.ndarray:
    """The speaker field terms of a row spoken by ``name``: one per lexical term of the name
    (pair bit set: they add nothing to a row's length nor to a query's idf mass)."""
    from fsmem.search.analyze import field_terms, term_hashes   # lazy: an append embeds
    words = term_hashes([name], pairs=False)                    # without the analyzer
    return np.unique(field_terms(words, SPEAKER_TAG)) if len(words) else words


def query_speaker_terms(q_terms: np.ndarray) -> np.ndarray:
    """The speaker field term of every word term of a query: a row spoken by someone the
    query names holds one of them."""
    from fsmem.search.analyze import field_terms, is_pair   # lazy: (as speaker_terms)
    words = q_terms[~is_pair(q_terms)]
    return field_terms(words, SPEAKER_TAG) if len(words) else words
