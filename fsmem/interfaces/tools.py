"""Agent-facing tools: one source of truth for their definitions, and a dispatcher.

Each ``ToolSpec`` holds a tool's name, a description written for a model, the JSON schema of
its arguments, the JSON schema of its result and its MCP annotations (readOnlyHint /
destructiveHint / idempotentHint). ``definitions(fmt)`` renders them for OpenAI function
calling, Anthropic tool use (arguments only: neither takes a result schema) or MCP
(``inputSchema`` and ``outputSchema``); the MCP server (fsmem.interfaces.mcp_server) and
``fsmem tools`` both read them from here, never a copy.

``call(mem_or_root, name, arguments)`` validates the arguments with ``jsonschema`` against the
very schema the tool publishes (what it accepts runs, ``top_k: 3.0`` included; what must not
be blank says so there, ``"pattern": "\\S"``), fills in that schema's defaults (an error
names the argument and nothing stored changes), runs the tool and returns a JSON-able dict
that fits the tool's result schema: ids, scores, RFC 3339 timestamps and text; media are
listed by reference (``media``: unit id, digest, mime, size) so a host can fetch the bytes
(the MCP server turns them into image or resource content). A unit's ``summary`` in every
result is its label (fsmem.format.views.summary_label), the same as ``fsmem ls`` shows.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Iterable, Iterator, Literal

import msgspec

from fsmem.format.errors import FsmemError, MissingDependency, NotFound
from fsmem.format.model import Event, MediaAttachment, ToolOutput
from fsmem.format.timestamps import Timestamp
from fsmem.format.views import unit_label
from fsmem.memory.facade import Memory
from fsmem.memory.reader import Reader

__all__ = ["ToolSpec", "TOOLS", "BadArgument", "call", "definitions", "tool_names",
           "jsonable", "unit_json", "TEXT_PREVIEW_CHARS"]

log = logging.getLogger("fsmem.tools")

TEXT_PREVIEW_CHARS = 4000   # per query hit; memory_show returns a unit whole
Format = Literal["openai", "anthropic", "mcp"]


class BadArgument(FsmemError, ValueError):
    """A tool call's arguments do not fit the tool's schema; the message names the argument."""


@dataclass(frozen=True)
class ToolSpec:
    """One agent-facing tool: what a model reads, what it may pass, and what it does."""

    name: str
    title: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...] = ()
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    read_only_if: str = ""   # a boolean argument that, when true, makes the call read-only
    output: dict[str, Any] = field(default_factory=dict, repr=False)  # its result's schema
    run: Callable[[Memory, dict[str, Any]], dict[str, Any]] = field(
        default=lambda mem, a: {}, repr=False, compare=False)

    def reads_only(self, args: dict[str, Any]) -> bool:
        """Whether this call only reads (then it goes through ``_reader``)."""
        return self.read_only or bool(self.read_only_if and args.get(self.read_only_if))

    @property
    def schema(self) -> dict[str, Any]:
        """The JSON schema (draft 2020-12 subset) of the tool's arguments."""
        return {"type": "object", "properties": self.properties,
                "required": list(self.required), "additionalProperties": False}

    @property
    def output_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's result (MCP ``outputSchema``; ``structuredContent``
        validates against it)."""
        return self.output

    @property
    def annotations(self) -> dict[str, Any]:
        return {"title": self.title, "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive, "idempotentHint": self.idempotent,
                "openWorldHint": False}


# -- results ------------------------------------------------------------------------------

def _enc(obj: object) -> object:
    if isinstance(obj, Timestamp):
        return obj.isoformat()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


def jsonable(obj: object) -> Any:
    """msgspec Structs, Timestamps (RFC 3339 strings) and containers as plain JSON values."""
    return msgspec.to_builtins(obj, enc_hook=_enc)


def _media_of(doc: Any) -> list[dict[str, Any]]:
    return [{"unit_id": doc.id, "event_id": ev.id, "digest": ref.digest, "mime": ref.mime,
             "modality": ref.modality, "size": ref.size, "name": ref.name,
             "uri": f"fsmem://unit/{doc.id}/block/{ref.digest}"}
            for ev in doc.events for ref in ev.blocks if ref.modality != "text"]


def _event_json(ev: Any) -> dict[str, Any]:
    return {"id": ev.id, "timestamp": ev.timestamp.isoformat(), "source": ev.source,
            "role": ev.role, "input": ev.input, "response": ev.response,
            "tools_used": list(ev.tools_used),
            "tool_results": [{"name": t.name, "output": t.output} for t in ev.tool_results],
            "media": [ref.digest for ref in ev.blocks if ref.modality != "text"]}


def unit_json(doc: Any) -> dict[str, Any]:
    """A unit read back whole: manifest fields, events with their text, media references."""
    return {"unit_id": doc.id, "layer": doc.layer, "summary": doc.label,
            "tags": list(doc.tags), "source": doc.source,
            "created_at": doc.created_at.isoformat(), "updated_at": doc.updated_at.isoformat(),
            "events": [_event_json(ev) for ev in doc.events], "text": doc.content,
            "media": _media_of(doc), "supersedes": doc.meta.get("supersedes", "")}


# -- the read path and the write path ------------------------------------------------------

@contextmanager
def _reader(target: "Reader | str | os.PathLike[str]") -> Iterator[Reader]:
    """Every read tool goes through here: a lock-free reader (nothing created or written;
    a Memory handed in is used as it is, being a Reader too)."""
    if isinstance(target, Reader):
        yield target
        return
    with Reader.open(target) as mem:
        yield mem


@contextmanager
def _writer(target: "Memory | str | os.PathLike[str]") -> Iterator[Memory]:
    """Every tool that changes the store goes through here."""
    if isinstance(target, Memory):
        yield target
        return
    with Memory.open(target, create=False) as mem:
        yield mem


def _owner(a: dict[str, Any]) -> str | None:
    return a.get("owner") or None


def _hit_json(mem: Memory, h: Any) -> dict[str, Any]:
    """One hit of ``coldcontext_query`` or ``memory_search``, with a preview of its text."""
    text = ""
    if h.kind == "unit":
        try:
            text = mem.document(h.unit_id).content
        except (NotFound, FsmemError, OSError):
            text = ""  # a legacy HomeAgent document: its summary is the label
    return {"unit_id": h.unit_id, "score": round(float(h.score), 6),
            "summary": h.summary, "layer": h.layer, "agent": h.agent or "default",
            "created_at": h.created_at.isoformat() if h.created_at else None,
            "events": h.events, "text": text[:TEXT_PREVIEW_CHARS],
            "truncated": len(text) > TEXT_PREVIEW_CHARS}


def _q_query(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    hits = mem.query(a["query"], top_k=a["top_k"], scope=a.get("scope", "all"),
                     agent=_owner(a))
    return {"query": a["query"], "hits": [_hit_json(mem, h) for h in hits]}


def _q_search(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    hits = mem.search(a["query"], top_k=a["top_k"], layers=a.get("layers") or None,
                      scope=a.get("scope", "all"), agent=_owner(a))
    return {"query": a["query"], "hits": [
        {**_hit_json(mem, h), "kind": h.kind,
         "facts": [{"subject": f.subject, "relation": f.relation, "object": f.object,
                    "unit_id": f.unit_id} for f in h.facts]} for h in hits]}


def _q_commit(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    # the summary stored is what the caller gave, as from Python and the CLI; every view
    # labels a unit without one by the start of its text (fsmem.format.views.summary_label)
    uid = mem.commit(a["content"], summary=a["summary"], tags=a["tags"], source=a["source"],
                     media_digests=a["media_digests"], private=a.get("private", False))
    doc = mem.document(uid)
    return {"unit_id": uid, "layer": doc.layer, "summary": doc.label,
            "created_at": doc.created_at.isoformat(), "media": _media_of(doc)}


def _q_recall(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    return {"query": a["query"], "recalled": mem.recall(
        a["query"], top_k=a["top_k"], scope=a.get("scope", "all"), agent=_owner(a))}


def _q_append(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    if not a["input"] and not a["response"]:
        raise BadArgument("memory_append: argument 'input' or 'response': give at least one")
    ts = Timestamp.coerce(a["timestamp"] or None, field="argument 'timestamp'")
    event = Event(timestamp=ts, source=a["source"], role=a["role"], input=a["input"],
                  response=a["response"], tools_used=list(a["tools_used"]),
                  tool_results=[ToolOutput(name=r["name"], output=r["output"])
                                for r in a["tool_results"]],
                  attachments=[MediaAttachment(digest=d) for d in a["media_digests"]])
    event_id = mem.append(event, event_id=a["event_id"] or None)
    return {"event_id": event_id, "timestamp": ts.isoformat()}


def _q_render(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    query = a.get("query", "")
    hits = mem.query(query, top_k=a.get("top_k", 5)) if query.strip() else []
    return {"budget_tokens": a["budget_tokens"],
            "text": mem.render(a["budget_tokens"], hits=hits)}


def _q_show(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    return unit_json(mem.visible(a["unit_id"]))


def _q_list(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    # this agent's view: its own L1 ("context"), the shared layers without others' private units
    layers = [a["layer"]] if a["layer"] else ["context", "documents", "stablemem"]
    rows = []
    for layer in layers:
        for unit in mem._load_layer(mem.l1 if layer == "context" else layer,
                                    with_vectors=False):
            m = unit.manifest
            if not mem.sees(m):
                continue
            rows.append({"unit_id": unit.unit_id, "layer": layer,
                         "summary": unit_label(unit.path, m),
                         "agent": m.agent or "default", "private": m.private,
                         "events": len(m.events), "created_at": m.created_at.isoformat(),
                         "_ns": m.created_at.ns})
    rows.sort(key=lambda r: (-r["_ns"], r["unit_id"]))
    for r in rows:
        del r["_ns"]
    return {"total": len(rows), "units": rows[a["offset"]:a["offset"] + a["limit"]]}


def _q_update(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    old = mem.visible(a["unit_id"])
    uid = mem.update(old.id, a["content"], summary=a["summary"] or None)
    doc = mem.document(uid)
    return {"unit_id": uid, "supersedes": old.id, "layer": doc.layer, "summary": doc.label,
            "created_at": doc.created_at.isoformat()}


def _q_history(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    chain = mem.history(a["unit_id"])
    return {"unit_id": a["unit_id"], "versions": [
        {"unit_id": d.id, "layer": d.layer, "summary": d.label,
         "created_at": d.created_at.isoformat(), "supersedes": d.meta.get("supersedes", ""),
         "current": i == len(chain) - 1, "text": d.content}
        for i, d in enumerate(chain)]}


def _q_remove(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    layer, _ = mem.store.locate(a["unit_id"])
    mem.remove(a["unit_id"], layer)
    return {"unit_id": a["unit_id"], "layer": layer, "removed": True}


def _q_graph_search(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    return jsonable(mem.graph.search(a["text"], limit=a["limit"]))


def _q_graph_neighbors(mem: Memory, a: dict[str, Any]) -> dict[str, Any]:
    return jsonable(mem.graph.neighbors(a["name"], depth=a["depth"]))


def _q_distill(mem: Reader, a: dict[str, Any]) -> dict[str, Any]:
    kw = dict(max_age_s=a["max_age_hours"] * 3600.0, max_access=a["max_access"])
    if a["dry_run"]:   # a read: runs on the reader, writes nothing
        # lazy: start-up, loaded only when used (+sqlite3, shutil, hashlib)
        from fsmem.memory.stablemem import distill
        report = distill(mem, dry_run=True, **kw)  # type: ignore[arg-type]
    else:
        report = mem.distill(**kw)  # type: ignore[union-attr]
    return jsonable(report)


# -- the definitions -----------------------------------------------------------------------

_UNIT_ID = {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$",
            "description": "a unit id as returned by another tool, e.g. u-20261130T054012-3f2a91c0d4e5"}
_DIGESTS = {"type": "array", "items": {"type": "string", "pattern": "^[0-9a-fA-F]{8,64}$"},
            "default": [], "description": "digests (or unique prefixes of at least 8 hex) of "
            "media blocks already in the memory, to attach"}


_NOT_BLANK = r"\S"   # a text that must hold more than whitespace: the schema says so itself


# The largest age a caller may name: over a century, far past any store's first event, and
# small enough that hours * 3600 stays an exact, finite float (1e308 overflowed the distill).
MAX_AGE_HOURS = 1_000_000


def _s(description: str, **kw: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **kw}


def _t(description: str, **kw: Any) -> dict[str, Any]:
    """A text that must not be blank."""
    return _s(description, minLength=1, pattern=_NOT_BLANK, **kw)


def _i(description: str, default: int, lo: int, hi: int) -> dict[str, Any]:
    return {"type": "integer", "description": description, "default": default,
            "minimum": lo, "maximum": hi}


# Several agents may share one memory (each its own context): which documents a search sees.
_SCOPE = {"scope": _s("own: documents this agent wrote; shared: documents every agent sees; "
                      "all: both", enum=["own", "shared", "all"], default="all"),
          "owner": _s("only documents written by this agent (its name; 'default' for the "
                      "memory's default agent)", default="")}

# -- what each tool returns (MCP outputSchema; every result validates against its schema) --

def _obj(props: dict[str, Any], required: Iterable[str] | None = None) -> dict[str, Any]:
    """A closed object: these properties (all required unless said), nothing else."""
    return {"type": "object", "properties": props,
            "required": list(props if required is None else required),
            "additionalProperties": False}


def _arr(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


_STR, _INT, _NUM, _BOOL = ({"type": t} for t in ("string", "integer", "number", "boolean"))
_TIME = {"type": "string", "format": "date-time", "description": "RFC 3339, to the nanosecond"}
_STRS = _arr(_STR)
_MEDIA_OUT = _arr(_obj({"unit_id": _STR, "event_id": _STR, "digest": _STR, "mime": _STR,
                        "modality": _STR, "size": _INT, "name": _STR, "uri": _STR}))
_HIT = {"unit_id": _STR, "score": _NUM, "summary": _STR, "layer": _STR, "agent": _STR,
        "created_at": {"type": ["string", "null"], "format": "date-time"}, "events": _INT,
        "text": _STR, "truncated": _BOOL}
_FACT = _obj({"subject": _STR, "relation": _STR, "object": _STR, "unit_id": _STR})
_O_SEARCH = _obj({"query": _STR, "hits": _arr(_obj({
    **_HIT, "kind": {"type": "string", "enum": ["unit", "fact"]}, "facts": _arr(_FACT)}))})
_O_QUERY = _obj({"query": _STR, "hits": _arr(_obj(_HIT))})
_O_COMMIT = _obj({"unit_id": _STR, "layer": _STR, "summary": _STR, "created_at": _TIME,
                  "media": _MEDIA_OUT})
_O_RECALL = _obj({"query": _STR, "recalled": _STRS})
_O_APPEND = _obj({"event_id": _STR, "timestamp": _TIME})
_O_RENDER = _obj({"budget_tokens": _INT, "text": _STR})
_O_UPDATE = _obj({"unit_id": _STR, "supersedes": _STR, "layer": _STR, "summary": _STR,
                  "created_at": _TIME})
_EVENT_OUT = _obj({"id": _STR, "timestamp": _TIME, "source": _STR, "role": _STR, "input": _STR,
                   "response": _STR, "tools_used": _STRS,
                   "tool_results": _arr(_obj({"name": _STR, "output": _STR})),
                   "media": _STRS})
_O_SHOW = _obj({"unit_id": _STR, "layer": _STR, "summary": _STR, "tags": _STRS, "source": _STR,
                "created_at": _TIME, "updated_at": _TIME, "events": _arr(_EVENT_OUT),
                "text": _STR, "media": _MEDIA_OUT,
                "supersedes": {"type": "string", "description": "the unit this one updated "
                               "(kept whole as history), or \"\""}})
_O_LIST = _obj({"total": _INT, "units": _arr(_obj({
    "unit_id": _STR, "layer": _STR, "summary": _STR, "agent": _STR, "private": _BOOL,
    "events": _INT, "created_at": _TIME}))})
_O_HISTORY = _obj({"unit_id": _STR, "versions": _arr(_obj({
    "unit_id": _STR, "layer": _STR, "summary": _STR, "created_at": _TIME, "supersedes": _STR,
    "current": _BOOL, "text": _STR}))})
_O_REMOVE = _obj({"unit_id": _STR, "layer": _STR, "removed": {"const": True}})
# fsmem.graph.graph.Recall as JSON (Provenance omits its defaults)
_O_GRAPH = _obj({
    "entities": _arr(_obj({"name": _STR, "type": _STR, "block_id": _STR,
                           "mention_count": _INT})),
    "relations": _arr(_obj({
        "source_name": _STR, "target_name": _STR, "relation_type": _STR, "confidence": _NUM,
        "edge_id": _INT, "source_id": _STR, "target_id": _STR, "session_id": _STR,
        "provenance": _arr(_obj({"block": _STR, "event_id": _STR, "unit_id": _STR,
                                 "turn": _INT, "candidates": _STRS, "text": _STR},
                                required=["block"]))}))})
# fsmem.memory.stablemem.DistillReport as JSON
_O_DISTILL = _obj({
    "dry_run": _BOOL, "distiller": _STR, "cold": _INT, "distilled": _STRS, "no_facts": _STRS,
    "kept_private": _STRS, "triples": _INT, "blocks_added": _INT, "edges_added": _INT,
    "units": _arr(_obj({"unit_id": _STR, "events": _STRS, "moved": _BOOL, "triples": _arr(_obj({
        "subject": _STR, "relation": _STR, "object": _STR, "subject_type": _STR,
        "object_type": _STR, "confidence": _NUM, "sentence_text": _STR}))})),
    "committed": _INT, "error": _STR})

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("memory_search", "Search all memory",
             "Search every layer of memory at once: the recent conversation (context, L1), "
             "the long-term documents (L2) and the distilled knowledge (L3) with its graph "
             "facts. Each match says which layer holds it. Read-only: nothing moves. The "
             "default search: a fact is found wherever it lives now (coldcontext_query "
             "searches L2 only).",
             {"query": _t("what to look for, in the user's words"),
              "top_k": _i("how many matches to return", 5, 1, 50),
              "layers": {"type": "array", "default": [], "description": "only these layers "
                         "(default: all)", "items": {"type": "string", "enum": [
                             "context", "documents", "stablemem"]}}, **_SCOPE},
             ("query",), read_only=True, idempotent=True, output=_O_SEARCH, run=_q_search),
    ToolSpec("coldcontext_query", "Search document memory",
             "Search the long-term document memory (L2) for what is relevant to a query and "
             "return the best matches with their ids, scores, timestamps and text. Read-only: "
             "nothing moves. Use it before answering questions about past conversations, facts "
             "the user told you, or documents committed earlier.",
             {"query": _t("what to look for, in the user's words"),
              "top_k": _i("how many matches to return", 3, 1, 50), **_SCOPE},
             ("query",), read_only=True, idempotent=True, output=_O_QUERY, run=_q_query),
    ToolSpec("coldcontext_commit", "Commit a document",
             "Write one document into long-term memory (L2): important information worth "
             "keeping beyond this conversation. Optionally attach media blocks already in "
             "memory by digest. Returns the new unit id.",
             {"content": _t("the full text to remember"),
              "summary": _s("a one-line label (default: none; lists and searches then show "
                            "the start of the text)", default=""),
              "tags": {"type": "array", "items": {"type": "string"}, "default": [],
                       "description": "keywords"},
              "media_digests": _DIGESTS,
              "source": _s("who is writing", default="manual"),
              "private": {"type": "boolean", "default": False,
                          "description": "only this agent will see it (other agents sharing "
                          "the memory will not)"}},
             ("content",), output=_O_COMMIT, run=_q_commit),
    ToolSpec("memory_recall", "Recall documents into context",
             "Move the documents best matching a query from long-term memory back into the "
             "working context (L1), whole, so they become part of the timeline. Returns the "
             "unit ids moved.",
             {"query": _t("what to bring back"),
              "top_k": _i("at most this many documents", 3, 1, 20), **_SCOPE},
             ("query",), output=_O_RECALL, run=_q_recall),
    ToolSpec("memory_append", "Append an event",
             "Add one event (a user input and/or an agent response, with tool results) to the "
             "working context (L1). Durable on return; older events overflow into document "
             "memory by relevance.",
             {"input": _s("the user's (or caller's) text", default=""),
              "response": _s("the agent's answer", default=""),
              "source": _t("where the event comes from", default="agent"),
              "role": _s("the speaker's role, e.g. user or assistant", default=""),
              "timestamp": _s("RFC 3339 time of the event (default: now)", default=""),
              "tools_used": {"type": "array", "items": {"type": "string"}, "default": []},
              "tool_results": {"type": "array", "default": [], "items": {
                  "type": "object", "required": ["name", "output"],
                  "additionalProperties": False,
                  "properties": {"name": {"type": "string"}, "output": {"type": "string"}}}},
              "media_digests": _DIGESTS,
              "event_id": _s("an idempotency key: a retry with an id already stored stores "
                             "nothing (default: a new id)", default="")},
             (), output=_O_APPEND, run=_q_append),
    ToolSpec("memory_render", "Render the context",
             "The working context (L1) as the model should see it, fitted fairly under a "
             "token budget; with a query, the query's hits from long-term memory first, best "
             "first, in what the context leaves of the budget (the context takes at most "
             "half). Read-only.",
             {"budget_tokens": _i("the token budget", 4000, 1, 10_000_000),
              "query": _s("a query whose hits come first in the view (default: none)",
                          default=""),
              "top_k": _i("how many hits at most", 5, 1, 100)},
             (), read_only=True, idempotent=True, output=_O_RENDER, run=_q_render),
    ToolSpec("memory_update", "Update a document",
             "Write a new version of a document in long-term memory (L2): the new text "
             "replaces the old one in every search, and the old version is kept whole as "
             "history. Returns the new unit id.",
             {"unit_id": _UNIT_ID, "content": _t("the document's new full text"),
              "summary": _s("a one-line label (default: the old version's)", default="")},
             ("unit_id", "content"), output=_O_UPDATE, run=_q_update),
    ToolSpec("memory_history", "Every version of a memory",
             "Every version of an updated memory (memory_update), oldest first, from the id "
             "of any of them: each with its full text, and which one is current. Read-only.",
             {"unit_id": _UNIT_ID}, ("unit_id",), read_only=True, idempotent=True,
             output=_O_HISTORY, run=_q_history),
    ToolSpec("memory_show", "Show a unit",
             "One memory unit whole: its summary, every event with its full text and "
             "timestamps, and its media. Read-only.",
             {"unit_id": _UNIT_ID}, ("unit_id",), read_only=True, idempotent=True,
             output=_O_SHOW, run=_q_show),
    ToolSpec("memory_list", "List units",
             "List memory units, newest first: id, layer (context, documents, stablemem), "
             "summary, event count and creation time. Read-only.",
             {"layer": _s("only this layer", enum=["", "context", "documents", "stablemem"],
                          default=""),
              "limit": _i("at most this many units", 50, 1, 1000),
              "offset": _i("skip this many units first", 0, 0, 10_000_000)},
             (), read_only=True, idempotent=True, output=_O_LIST, run=_q_list),
    ToolSpec("memory_remove", "Delete a unit",
             "Delete one memory unit and everything in it, permanently. Only on the user's "
             "explicit request.",
             {"unit_id": _UNIT_ID}, ("unit_id",), destructive=True, idempotent=True,
             output=_O_REMOVE, run=_q_remove),
    ToolSpec("graph_search", "Search the knowledge graph",
             "Search the stable knowledge graph (L3) for entities whose name, or relations "
             "whose type, contains a text; returns entities and relations with where each "
             "fact was read. Read-only.",
             {"text": _t("a name or word"),
              "limit": _i("at most this many entities", 20, 1, 200)},
             ("text",), read_only=True, idempotent=True, output=_O_GRAPH, run=_q_graph_search),
    ToolSpec("graph_neighbors", "Explore around an entity",
             "The facts around one entity in the stable knowledge graph (L3), up to a depth "
             "of hops, with their provenance. Read-only.",
             {"name": _t("the entity's name"),
              "depth": _i("hops from the entity", 2, 1, 4)},
             ("name",), read_only=True, idempotent=True, output=_O_GRAPH, run=_q_graph_neighbors),
    ToolSpec("memory_distill", "Distil cold documents",
             "Distil cold documents (old and rarely accessed) into knowledge-graph facts and "
             "move each original, whole, into stable memory (L3). dry_run (the default) only "
             "reports what would happen.",
             {"dry_run": {"type": "boolean", "default": True,
                          "description": "report only; change nothing"},
              "max_age_hours": {"type": "number", "default": 72, "minimum": 0,
                                "maximum": MAX_AGE_HOURS,
                                "description": "cold when last accessed this long ago"},
              "max_access": _i("cold when accessed at most this often", 2, 0, 1_000_000)},
             (), read_only_if="dry_run", output=_O_DISTILL, run=_q_distill),
)

_BY_NAME = {t.name: t for t in TOOLS}


def tool_names() -> list[str]:
    return [t.name for t in TOOLS]


def definitions(fmt: Format = "openai") -> list[dict[str, Any]]:
    """The tool definitions, generated from ``TOOLS``, in a host's format."""
    if fmt == "openai":
        return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                   "parameters": t.schema}} for t in TOOLS]
    if fmt == "anthropic":
        return [{"name": t.name, "description": t.description, "input_schema": t.schema}
                for t in TOOLS]
    if fmt == "mcp":
        return [{"name": t.name, "title": t.title, "description": t.description,
                 "inputSchema": t.schema, "outputSchema": t.output_schema,
                 "annotations": t.annotations} for t in TOOLS]
    raise BadArgument(f"format {fmt!r}: want openai, anthropic or mcp")


# -- validation ------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _validator(name: str) -> Any:
    """The compiled JSON Schema (draft 2020-12) validator of a tool's published schema."""
    try:
        # lazy: start-up, loaded only when a tool is called (+attrs, referencing, rpds)
        from jsonschema import Draft202012Validator
    except ImportError as exc:
        raise MissingDependency("checking a tool call's arguments needs jsonschema: "
                                "pip install 'fsmem[tools]'") from exc
    return Draft202012Validator(_BY_NAME[name].schema)


def _where(path: Iterable[Any]) -> str:
    """An argument's path as a model wrote it: ``top_k``, ``tool_results[0].output``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problem(error: Any) -> str:
    """One jsonschema error as ``argument: what is wrong``."""
    path = list(error.absolute_path)
    if error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        return f"{_where(path + missing[:1])}: is required"
    if error.validator == "additionalProperties":
        known = list(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in known]
        return (f"{_where(path + extra[:1])}: unknown argument (known: "
                f"{', '.join(known) or 'none'})")
    if error.validator == "pattern" and error.validator_value == _NOT_BLANK:
        return f"{_where(path)}: must not be blank"
    message = error.message if len(error.message) <= 300 else error.message[:297] + "..."
    return f"{_where(path) or 'arguments'}: {message}"


def _completed(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` (already valid) with every absent property that has a ``default`` filled in
    (a fresh copy), and integral numbers of ``integer`` properties as ints (JSON Schema calls
    ``3.0`` an integer; Python's slices do not)."""
    kind = schema.get("type")
    if kind == "integer" and isinstance(value, float):
        return int(value)
    if kind == "array" and isinstance(value, list) and "items" in schema:
        return [_completed(v, schema["items"]) for v in value]
    if kind == "object" and isinstance(value, dict):
        props = schema.get("properties", {})
        out = {k: _completed(v, props[k]) if k in props else v for k, v in value.items()}
        for key, sub in props.items():
            if key not in out and "default" in sub:
                out[key] = json.loads(json.dumps(sub["default"]))
        return out
    return value


def validate(name: str, arguments: "dict[str, Any] | str | None") -> tuple[ToolSpec, dict]:
    """The tool and its arguments, validated with jsonschema against the very schema the
    tool publishes and completed with that schema's defaults; BadArgument (naming the
    argument: ``coldcontext_query: top_k: -1 is less than the minimum of 1``) else."""
    spec = _BY_NAME.get(name) if isinstance(name, str) else None
    if spec is None:
        raise BadArgument(f"unknown tool {name!r} (known: {', '.join(_BY_NAME)})")
    if arguments is None or arguments == "":
        arguments = {}
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise BadArgument(f"{name}: arguments are not valid JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise BadArgument(f"{name}: arguments must be a JSON object, got "
                          f"{type(arguments).__name__}")
    validator = _validator(name)
    # lazy: start-up, loaded only when a tool is called (jsonschema is loaded by now)
    from jsonschema.exceptions import best_match
    error = best_match(validator.iter_errors(arguments))
    if error is not None:
        raise BadArgument(f"{name}: {_problem(error)}")
    problem = _unstorable(arguments, [])
    if problem:
        raise BadArgument(f"{name}: {problem}")
    return spec, _completed(arguments, spec.schema)


def _unstorable(value: Any, path: list[Any]) -> str:
    """What JSON Schema lets through but no tool can take: a number that is not finite (NaN
    passes every ``minimum``/``maximum``; JSON has neither) or a string that is not Unicode
    text (a lone surrogate, which a model's JSON may carry as ``\\ud800``, cannot be written as
    UTF-8). Empty when there is none."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{_where(path) or 'arguments'}: {value!r} is not a finite number"
    if isinstance(value, str):
        bad = _SURROGATE.search(value)
        if bad:
            return (f"{_where(path) or 'arguments'}: not Unicode text: a lone surrogate "
                    f"U+{ord(bad.group()):04X} at character {bad.start()}")
    elif isinstance(value, dict):
        for key, item in value.items():
            problem = _unstorable(key, path) or _unstorable(item, [*path, key])
            if problem:
                return problem
    elif isinstance(value, list):
        for i, item in enumerate(value):
            problem = _unstorable(item, [*path, i])
            if problem:
                return problem
    return ""


_SURROGATE = re.compile("[\ud800-\udfff]")


__all__.append("validate")


def call(target: "Memory | str | os.PathLike[str]", name: str,
         arguments: "dict[str, Any] | str | None" = None) -> dict[str, Any]:
    """Run the tool ``name`` on the store (a Memory or its root) with a model's arguments
    (a dict or the JSON string a model emits). Arguments are validated before anything is
    opened or written; errors are FsmemError subclasses whose message names what is wrong."""
    spec, args = validate(name, arguments)
    log.debug("tool %s %s", name, args)
    with (_reader if spec.reads_only(args) else _writer)(target) as mem:
        return spec.run(mem, args)
