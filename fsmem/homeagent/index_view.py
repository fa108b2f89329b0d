"""What the index reads of a HomeAgent document, decoded without its vectors.

A HomeAgent document carries dense vectors of its own (``dense_vec``: 512 or 2048 floats, one
per block too), in another embedding space, never compared: nine tenths of a file's bytes.
The index needs only its text, source, summary and time. ``read_for_index`` decodes those with
msgspec into Structs of the Go document's fields, each vector kept as unparsed bytes
(``msgspec.Raw``) and checked to be a flat array of numbers, so no float is ever built.

The result is the one the fallback reader (``fsmem.homeagent.documents.read_legacy``) gives,
or that reader is used: any document this decoding is not sure of (an unknown field, a value
of another JSON type than Go writes, a vector that is not a flat array of numbers, an integer
of more digits than Python's json reads) goes through ``read_legacy`` itself, so a document
is readable, unreadable, reported and searched exactly as before.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import msgspec
from msgspec import UNSET, UnsetType

from fsmem.format.errors import FormatError
from fsmem.format.timestamps import Timestamp
from fsmem.homeagent.documents import (
    legacy_texts,
    read_bytes,
    read_legacy,
    report_served,
    searched_texts,
)

__all__ = ["LegacyForIndex", "read_for_index"]

_ABSENT = msgspec.Raw(b"")
_ZERO = "0001-01-01T00:00:00Z"


@dataclass
class LegacyForIndex:
    """A legacy document as the index sees it: ``texts`` is ``legacy_texts`` of it."""

    id: str
    version: str
    source: str
    summary: str
    created_at: Timestamp
    texts: list[str]


# The Go MemoryBlock and Doc, every field typed as Go writes it (strict: a value of another
# type is left to the fallback reader, which accepts more); unknown fields likewise, so no
# string is skipped undecoded (msgspec checks the UTF-8 of the strings it decodes only).
class _Block(msgspec.Struct, forbid_unknown_fields=True):
    id: str | None = None
    modality: str | None = None
    text: str | None = None
    payload_digest: str | None = None
    mime: str | None = None
    size: int | None = None
    width: int | None = None
    height: int | None = None
    vector: msgspec.Raw = _ABSENT
    fingerprint: str | None = None
    source: str | None = None
    tool: str | None = None
    scene: str | None = None
    semantic_type: str | None = None
    created_at: str | None = None
    updated_at: str | None = None


class _Doc(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    summary: str | None = None
    content: str | None = None
    tags: list[str] | None = None
    entities: list[str] | None = None
    created_at: str | None = None
    updated_at: str | None = None
    source: str | None = None
    meta: dict[str, str] | None = None
    access_count: int | None = None
    last_access: str | None = None
    media: list[str] | None | UnsetType = UNSET
    blocks: list[_Block] | None | UnsetType = UNSET
    vector: msgspec.Raw = _ABSENT   # sparse: {feature: weight}
    dense_vec: msgspec.Raw = _ABSENT
    dense_fp: str | None | UnsetType = UNSET


_DECODER = msgspec.json.Decoder(_Doc)


def read_for_index(path: str) -> LegacyForIndex:
    """The index's view of the legacy document at ``path``, reported once per store like
    every read of one; FormatError/OSError/ValueError as ``read_legacy`` raises them."""
    raw = read_bytes(path)
    got = _fast(raw)
    if got is None:
        doc = read_legacy(path, raw)
        return LegacyForIndex(doc.id, doc.version, doc.source, doc.summary, doc.created_at,
                              legacy_texts(doc))
    report_served(path, got.id, got.version)
    return got


def _fast(raw: bytes) -> LegacyForIndex | None:
    """The view decoded without the vectors, or None where only the fallback reader can
    tell (then it decides: the same document, or the same error)."""
    try:
        d = _DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not d.id or not _numbers(d.dense_vec) or not _features(d.vector):
        return None
    times: dict[str, Timestamp] = {}
    try:
        created = _ts(d.created_at, times)
        _ts(d.updated_at, times)
        if d.last_access:
            _ts(d.last_access, times)
        media = []   # (text, type) of each block kept (a v2 digest has neither)
        for b in d.blocks or ():
            if not _numbers(b.vector):   # checked in every block: its bytes were skipped
                return None
            digest, text = (b.payload_digest or "").lower(), b.text or ""
            if not digest and not text:
                continue   # dropped by the reader before its times are read
            _ts(b.created_at, times)
            if b.updated_at:
                _ts(b.updated_at, times)
            media.append(("" if digest else text, b.mime or ""))
    except (FormatError, ValueError):   # the reader raises it, with its own message
        return None
    version = ("v3" if d.blocks is not UNSET or d.dense_fp is not UNSET else
               "v2" if d.media is not UNSET or len(d.vector) or len(d.dense_vec) else "v1")
    summary = d.summary or ""
    return LegacyForIndex(d.id, version, d.source or "", summary, created, searched_texts(
        summary, d.content or "", d.tags or [], d.entities or [], media))


def _ts(value: str | None, seen: dict[str, Timestamp]) -> Timestamp:
    """``documents._ts``: Go's zero time for null or "", else the parsed time (memoised:
    a document repeats its times in every block)."""
    if not value:
        value = _ZERO
    got = seen.get(value)
    if got is None:
        got = seen[value] = Timestamp.parse(value)
    return got


def _numbers(raw: msgspec.Raw) -> bool:
    """Whether a skipped vector (valid JSON: msgspec checked its syntax) is absent, null, or
    a flat array of numbers that Python's json reads too."""
    b = bytes(raw)
    if not b or b == b"null":
        return True
    # An array holding no string, object, inner array, true, false or null: numbers only.
    if b[:1] != b"[" or b.find(b"[", 1) >= 0 or b'"' in b or b"{" in b or b"u" in b \
            or b"l" in b:
        return False
    return _short_numbers(b)


def _features(raw: msgspec.Raw) -> bool:
    """Whether a skipped sparse vector is absent, null, or an object (the reader takes its
    length only) whose strings are UTF-8, whose integers Python's json reads, and too
    shallow for json to run out of stack on (its features may hold brackets: char n-grams)."""
    b = bytes(raw)
    if not b or b == b"null":
        return True
    if b[:1] != b"{" or b.count(b"{") + b.count(b"[") > 256:
        return False
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return _short_numbers(b)


def _short_numbers(b: bytes) -> bool:
    """Python's json refuses an integer of more digits than sys.get_int_max_str_digits()
    (msgspec skips it): a run of that many digits fills a whole window of half its length,
    which then holds no comma (a false alarm only sends the document to the reader)."""
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    w = limit // 2
    return not limit or all(b.find(b",", s, s + w) >= 0 for s in range(0, len(b) - w + 1, w))
