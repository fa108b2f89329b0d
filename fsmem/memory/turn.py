"""The agent loop: one call per turn (HomeAgent's memoryPass), and the pins that make a recall
stick.

``Memory.turn(input_event, response_event, options=InjectOptions())`` appends the turn's
events to L1 and then acts on the declarations, as HomeAgent does: ``context_policy``
``prune`` prunes with the cleaned text as the focus, ``recall_policy`` ``auto`` runs a
read-only query of L2 with the cleaned text (hits returned for the model's view), and the
periodic maintenance prunes with an empty query when L1 holds more than twice its capacity.
The policies come from the options when set, else from the declaration of the input's
channel (``ChannelDef``), and from each ``ToolDef`` for its outputs in this turn.

Pins: ``recall`` moves units into L1 and pins them in ``.fsmem/pins.json`` (never inside a
unit: units are immutable). A prune never evicts a pinned unit. A pin lasts through the
recall's own prune and the next write call (``append`` or ``turn``: the rest of the turn in
which the recall happened), and is released after it; from then on the recalled events are
evicted only by relevance, like any other.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from fsmem.format.errors import FsmemError
from fsmem.format.model import Event, TextEvent
from fsmem.format.plugins import _POLICIES, ChannelDef, Plugins
from fsmem.format.views import Hit
from fsmem.memory.appending import append_burst, prune_after
from fsmem.memory.l1cache import load_context
from fsmem.memory.maintenance import after_write
from fsmem.memory.prune import prune_context
from fsmem.memory.writer import as_event
from fsmem.store.pins import tick_pins

if TYPE_CHECKING:
    from fsmem.memory.writer import Writer

__all__ = ["InjectOptions", "TurnResult", "run_turn",
           "CONTEXT_POLICIES", "RECALL_POLICIES", "PRIORITIES", "RECALL_TOP_K"]

log = logging.getLogger("fsmem.turn")

CONTEXT_POLICIES = _POLICIES["context_policy"]
RECALL_POLICIES = _POLICIES["recall_policy"]
PRIORITIES = ("", "L1", "L2", "L3", "L4")
RECALL_TOP_K = 3            # HomeAgent injects Query(input, top 3)


@dataclass(frozen=True)
class InjectOptions:
    """HomeAgent's InjectOptions. The zero value means: remember, no prune, recall auto.

    ``""`` leaves a policy to the input channel's declaration (a ``ChannelDef`` defaults to
    no prune and recall auto). ``cleaner_name`` uses the cleaner of the registered channel of
    that name instead of the input's own. ``priority`` (``L1``..``L4``) only matters to
    interrupts; an external ``L4`` is clamped to ``L3``."""

    no_memory: bool = False
    context_policy: str = ""
    recall_policy: str = ""
    cleaner_name: str = ""
    priority: str = ""

    def check(self, plugins: Plugins) -> None:
        """ValueError naming the field for a value the declarations do not allow."""
        for name, value, allowed in (("context_policy", self.context_policy, CONTEXT_POLICIES),
                                     ("recall_policy", self.recall_policy, RECALL_POLICIES),
                                     ("priority", self.priority, PRIORITIES)):
            if value not in allowed:
                raise ValueError(f"InjectOptions.{name}: {value!r} is not one of "
                                 f"{', '.join(repr(a) for a in allowed)}")
        if self.cleaner_name and self.cleaner_name not in plugins.channels:
            raise ValueError(f"InjectOptions.cleaner_name: no channel {self.cleaner_name!r} "
                             "is registered")


@dataclass
class TurnResult:
    """What the host needs after a turn: the ids of the events appended, the read-only query
    hits for the model's view, the L2 units a prune wrote, the cleaned input text used as
    focus and query ("" under no_memory), and the effective priority."""

    event_ids: list[str] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    focus: str = ""
    priority: str = ""


# -- pins ---------------------------------------------------------------------------------

# -- the turn -----------------------------------------------------------------------------

def _clean(plugins: Plugins, event: Event, opts: InjectOptions) -> str:
    """The compute-layer text of the input event under the options ('' when no_memory)."""
    if opts.no_memory:
        return ""
    texts = [event.input, event.response]
    if opts.cleaner_name:
        cleaner = plugins.channels[opts.cleaner_name].cleaner
        out = [cleaner(t) if cleaner else t for t in texts]
    else:
        out = [plugins.source_text(event.source, t) for t in texts]
    return " ".join(t for t in out if t.strip())


def _overlay(plugins: Plugins, source: str, opts: InjectOptions) -> Plugins | None:
    """A registry for writing this turn's input: its channel's rule replaced by the
    options' no_memory / named cleaner (None when the options change nothing)."""
    if not opts.no_memory and not opts.cleaner_name:
        return None
    base = plugins.channels.get(source) or ChannelDef(name=source)
    cleaner = plugins.channels[opts.cleaner_name].cleaner if opts.cleaner_name else base.cleaner
    channels = {**plugins.channels,
                source: replace(base, no_memory=opts.no_memory or base.no_memory,
                                cleaner=cleaner)}
    return Plugins(tools=dict(plugins.tools), channels=channels)


def _policies(plugins: Plugins, source: str, opts: InjectOptions) -> tuple[str, str]:
    """(context policy, recall policy) of the input: the options', else its channel's."""
    ch = plugins.channels.get(source)
    context = opts.context_policy or (ch.context_policy if ch else "")
    recall = opts.recall_policy or (ch.recall_policy if ch else "auto") or "auto"
    return context, recall


def _tool_focus(plugins: Plugins, events: list[Event]) -> tuple[list[str], list[str]]:
    """Cleaned tool outputs of this turn whose ToolDef declares prune / recall auto."""
    prune, recall = [], []
    for ev in events:
        for tr in ev.tool_results:
            td = plugins.tools.get(tr.name)
            if td is None:
                continue
            text = plugins.tool_text(ev.source, tr.name, tr.output)
            if not text.strip():
                continue
            if td.context_policy == "prune":
                prune.append(text)
            if td.recall_policy == "auto":
                recall.append(text)
    return prune, recall


def run_turn(mem: "Writer", input_event: Event | TextEvent | dict,
             response_event: Event | TextEvent | dict | None = None, *,
             options: InjectOptions | None = None,
             context_tokens: int | None = None) -> TurnResult:
    """One turn (see the module docstring); ``context_tokens`` overrides the Memory's token
    budget for this turn's watermark."""
    opts = options if options is not None else InjectOptions()
    opts.check(mem.plugins)
    first = as_event(input_event)
    events = [first] + ([as_event(response_event)] if response_event is not None else [])
    result = TurnResult(priority="L3" if opts.priority == "L4" else opts.priority)
    overlay = _overlay(mem.plugins, first.source, opts)
    result.focus = _clean(mem.plugins, first, opts)
    context, recall = _policies(mem.plugins, first.source, opts)
    tool_prune, tool_recall = _tool_focus(mem.plugins, events)
    focus = ([result.focus] if context == "prune" and result.focus else []) + tool_prune
    tokens = context_tokens if context_tokens is not None else mem.context_tokens
    due = context == "prune" or bool(tool_prune)
    # All of the turn's events or none, by one journal entry, with the prune the policies
    # ask for when it can go with them (fsmem.memory.appending).
    ids, archived, outcome = append_burst(
        mem, events, plugins=[overlay, *[None] * (len(events) - 1)], dedupe=False,
        prune=" ".join(focus) if due else None, context_tokens=tokens)
    result.event_ids.extend(ids)
    result.archived.extend(archived)
    # The events are durable: a failing prune is logged and owed, never the turn's failure.
    step = prune_after(outcome, lambda: result.archived.extend(
        prune_context(mem, " ".join(focus), context_tokens=tokens))) if due else None
    if step is not None:
        after_write(mem.store, step)
    if _l1_events(mem) > 2 * mem.context_capacity:
        after_write(mem.store, lambda: result.archived.extend(   # maintenance
            prune_context(mem, "", context_tokens=tokens)))
    queries = ([result.focus] if recall == "auto" and result.focus else []) + tool_recall
    seen: set[str] = set()
    for text in queries:
        for hit in mem.query(text, top_k=RECALL_TOP_K):
            if hit.unit_id not in seen:
                seen.add(hit.unit_id)
                result.hits.append(hit)
    try:
        tick_pins(mem.store, mem.l1)
    except (OSError, FsmemError) as exc:   # the events are durable: the next write retries
        log.warning("%s: pins not released after a durable turn (the next write "
                    "releases them): %s", mem.root, exc)
    return result


def _l1_events(mem: "Writer") -> int:
    """L1's event count, from the writer's L1 cache (fsmem.memory.l1cache: only units changed since
    are read; reading every manifest here cost ~30 reads a turn)."""
    return sum(len(u.manifest.events) for u in load_context(mem, with_vectors=False))
