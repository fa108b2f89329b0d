"""The stored data model (msgspec Structs) and the shapes callers hand in.

Stored Structs (``BlockRef``, ``EventRecord``, ``Manifest``) follow msgspec's schema-evolution
rules: every field added after format 1 gets a default, no field is ever retyped, and decoders
ignore unknown fields so that an older reader can open a newer minor revision. The caller-facing
shapes (``Event``, ``TextEvent``, ``MediaAttachment``) carry text inline; on disk the text lives
only in blocks.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from fsmem.format.errors import FormatError, InvalidName
from fsmem.format.timestamps import Timestamp

__all__ = [
    "FORMAT_VERSION", "HASH_ALGORITHM", "Modality", "Role", "BlockRef", "ToolResult",
    "EventRecord", "VectorsRef", "Manifest", "Marker", "ToolOutput", "Event", "TextEvent",
    "MediaAttachment", "encode", "encode_pretty", "decode_manifest", "decode_marker",
    "check_name", "NAME_RE", "AGENT_RE", "DEFAULT_AGENT", "check_agent", "Scope", "SCOPES",
]

FORMAT_VERSION = 5
HASH_ALGORITHM = "blake3"

Modality = Literal["text", "image", "audio", "video", "file"]
Role = Literal["input", "response", "tool_output", "attachment"]

# Unit and event ids: safe as one path component on every filesystem, no dots at all.
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$")


# Agent names (format 4): lower case, so two agents never share a directory on a
# case-insensitive filesystem; "default" (or "") is the agent of every unit written before.
AGENT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DEFAULT_AGENT = "default"
Scope = Literal["own", "shared", "all"]
SCOPES: tuple[str, ...] = ("own", "shared", "all")


def check_agent(name: object, what: str = "agent") -> str:
    """The stored form of an agent name: "" for the default agent (None, "", "default"),
    else the name itself; InvalidName naming ``what`` for anything else."""
    if name is None or name == "" or name == DEFAULT_AGENT:
        return ""
    if not isinstance(name, str) or not AGENT_RE.match(name):
        raise InvalidName(f"invalid {what}: {name!r} (allowed: lower-case letters, digits, "
                          "'_' and '-', at most 64, starting with a letter or digit)")
    return name


def check_name(name: object, what: str = "unit id") -> str:
    """Return ``name`` if it is a valid id, else raise InvalidName naming it."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidName(f"invalid {what}: {name!r} (allowed: letters, digits, '_' and '-')")
    return name


class BlockRef(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A block as an event holds it: the bytes live in a file named by ``digest``."""

    digest: str
    modality: Modality
    mime: str
    size: int
    created_at: Timestamp
    role: Role
    width: int | None = None
    height: int | None = None
    semantic_type: str = ""
    name: str = ""
    sha256: str = ""
    # Format 2: a HomeAgent MemoryBlock's own fields, kept on adoption and recall
    # (docs/FORMAT.md, "HomeAgent fields"). Empty/None for blocks fsmem made itself.
    legacy_id: str = ""           # the ``blk_…`` id; find_block resolves it
    source: str = ""
    tool: str = ""
    scene: str = ""
    vector: list[float] = []      # the legacy dense vector, in the space named by fingerprint
    fingerprint: str = ""
    updated_at: Timestamp | None = None
    # Format 4: the block's bytes were missing when it was adopted (HomeAgent named a media
    # file that is gone): only its record is kept, no block file; ``digest`` is then the only
    # digest known, HomeAgent's sha256 (also in ``sha256``). fsck reports it (media-missing).
    absent: bool = False


class ToolResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One tool's output: the text is the block ``block`` (role tool_output) of the same event."""

    name: str
    block: str


class EventRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An event as stored in a manifest: metadata plus references to its blocks."""

    id: str
    timestamp: Timestamp
    source: str
    role: str = ""
    tools_used: list[str] = []
    tool_results: list[ToolResult] = []
    blocks: list[BlockRef] = []
    legacy_id: str = ""           # format 2: a context.json event id that is not a valid id


class VectorsRef(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The unit's vectors file: one float32 row per ``rows`` key ("<event id>:<block digest>")."""

    file: str
    digest: str
    embedder: str
    dim: int
    rows: list[str]


class Manifest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The commit record of a unit directory; written last, after every block is durable."""

    format: int
    id: str
    created_at: Timestamp
    updated_at: Timestamp
    events: list[EventRecord]
    summary: str = ""
    tags: list[str] = []
    entities: list[str] = []
    source: str = ""
    meta: dict[str, str] = {}
    access_count: int = 0
    last_access: Timestamp | None = None
    embedder: str = ""
    vectors: VectorsRef | None = None
    # Format 4: the agent whose events these are ("" = the default agent) and whether only
    # that agent sees the unit (docs/FORMAT.md, "Agents"). A unit never mixes agents.
    agent: str = ""
    private: bool = False


class Marker(msgspec.Struct, kw_only=True):
    """``.fsmem/marker.json``: what this directory is and how it is written."""

    format: int
    hash: str
    created_at: Timestamp
    tool: str = "fsmem"
    id: str = ""          # format 4: the store's id (random hex), written once by a writer


# -- caller-facing shapes ---------------------------------------------------------------

class ToolOutput(msgspec.Struct, kw_only=True):
    """A tool result with its full output text."""

    name: str
    output: str


class MediaAttachment(msgspec.Struct, kw_only=True, omit_defaults=True):
    """SDK MediaAttachment: ``data`` + ``mime`` is new content; ``digest`` alone refers to a
    block already in the store (full or a unique prefix of at least 8 hex)."""

    digest: str = ""
    mime: str = ""
    data: bytes | None = None
    name: str = ""


class Event(msgspec.Struct, kw_only=True):
    """An event with its text inline, as the API returns it and as ``append`` takes it."""

    timestamp: Timestamp | None = None
    source: str = ""
    role: str = ""
    input: str = ""
    response: str = ""
    tools_used: list[str] = []
    tool_results: list[ToolOutput] = []
    blocks: list[BlockRef] = []
    attachments: list[MediaAttachment] = []
    id: str = ""
    unit_id: str = ""
    texts: dict[str, str] = {}    # text attachment blocks (HomeAgent v3 text blocks) by digest
    agent: str = ""               # format 4: the agent of its unit ("" = the default agent)


class TextEvent(msgspec.Struct, kw_only=True):
    """SDK TextEvent: ``timestamp`` is Unix seconds (int) or anything Timestamp.coerce takes;
    0 (Go's zero value) means now, as None does."""

    role: str
    content: str
    timestamp: Any = None
    channel: str = ""
    attachments: list[MediaAttachment] = []

    def to_event(self) -> Event:
        """Assistant text is a response (source ``channel`` or ``agent``); other roles are input."""
        zero = type(self.timestamp) in (int, float) and self.timestamp == 0
        ts = Timestamp.coerce(None if zero else self.timestamp, field="TextEvent.timestamp")
        if self.role == "assistant":
            return Event(timestamp=ts, source=self.channel or "agent", role=self.role,
                         response=self.content, attachments=list(self.attachments))
        return Event(timestamp=ts, source=self.channel or self.role or "user", role=self.role,
                     input=self.content, attachments=list(self.attachments))


# -- codec ------------------------------------------------------------------------------

def _enc_hook(obj: object) -> object:
    if isinstance(obj, Timestamp):
        return obj.isoformat()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


# Timestamps decoded, by their text: a Timestamp is immutable, and a manifest repeats its
# texts (a unit's created_at is its updated_at, an event's time its blocks' created_at), so
# reading one parses each text once (Timestamp.parse is ~5 us; a prune re-reads the manifest
# of every unit it removes).
_parsed: dict[str, Timestamp] = {}


def _dec_hook(typ: type, obj: object) -> object:
    if typ is Timestamp:
        if not isinstance(obj, str):
            raise ValueError(f"expected an RFC 3339 string, got {type(obj).__name__}")
        ts = _parsed.get(obj)
        if ts is None:
            try:
                ts = Timestamp.parse(obj)
            except FormatError as exc:
                raise ValueError(str(exc)) from exc
            if len(_parsed) >= 4096:
                _parsed.clear()
            _parsed[obj] = ts
        return ts
    raise NotImplementedError(f"cannot decode {typ}")


_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)
_manifest_decoder = msgspec.json.Decoder(Manifest, dec_hook=_dec_hook)
_marker_decoder = msgspec.json.Decoder(Marker, dec_hook=_dec_hook)
_version_probe = msgspec.json.Decoder(dict)


def encode(obj: object) -> bytes:
    return _encoder.encode(obj)


def encode_pretty(obj: object) -> bytes:
    """Indented JSON, so ``cat manifest.json`` reads well; newline-terminated."""
    return msgspec.json.format(_encoder.encode(obj), indent=2) + b"\n"


def _check_version(raw: bytes, path: str) -> None:
    try:
        probe = _version_probe.decode(raw)
    except msgspec.DecodeError as exc:
        raise FormatError(f"{path}: invalid JSON: {exc}") from exc
    version = probe.get("format")
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise FormatError(
            f"{path}: format version {version} is newer than this fsmem reads "
            f"(version {FORMAT_VERSION}); upgrade fsmem")


def decode_manifest(raw: bytes, path: str) -> Manifest:
    """Strictly decode a manifest; errors name the file and the field."""
    try:
        return _manifest_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        _check_version(raw, path)
        raise FormatError(f"{path}: {exc}") from exc


def decode_marker(raw: bytes, path: str) -> Marker:
    try:
        return _marker_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        _check_version(raw, path)
        raise FormatError(f"{path}: {exc}") from exc
