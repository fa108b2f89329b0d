"""Plugin declarations (SDK ToolDef / ChannelDef): how a host tells fsmem about its sources.

The kernel names no plugin or channel. Behaviour differences are declared by the host:
``no_memory`` keeps an event's text out of the compute layer (vectors, keywords, summary,
distillation) while the original is still stored; ``cleaner`` rewrites compute-layer text
only, never the stored original. ``context_policy`` / ``recall_policy`` act in
``Memory.turn`` (fsmem.memory.turn): a channel's for its input events (unless the turn's
InjectOptions set them), a tool's for its outputs in the turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

__all__ = ["ToolDef", "ChannelDef", "Plugins", "Cleaner"]

Cleaner = Callable[[str], str]
_POLICIES = {"context_policy": ("", "none", "prune"), "recall_policy": ("", "none", "auto")}


@dataclass(frozen=True)
class ToolDef:
    """A tool as the host registers it; looked up by tool name."""

    name: str
    no_memory: bool = False
    cleaner: Cleaner | None = None
    context_policy: str = ""      # "" or "none": no prune trigger; "prune": prune after its output
    recall_policy: str = ""       # "" or "none": no query; "auto": query L2 with its output
    plugin: str = ""
    description: str = ""


@dataclass(frozen=True)
class ChannelDef:
    """A channel (event source) as the host registers it; looked up by event source."""

    name: str
    no_memory: bool = False
    cleaner: Cleaner | None = None
    context_policy: str = ""      # "" or "none" (default): no prune; "prune": prune on input
    recall_policy: str = "auto"   # "auto" (default, also ""): query L2 with the input; "none"


@dataclass
class Plugins:
    """The registry the kernel consults; empty means: remember everything, clean nothing."""

    tools: dict[str, ToolDef] = field(default_factory=dict)
    channels: dict[str, ChannelDef] = field(default_factory=dict)

    @classmethod
    def of(cls, defs: "Plugins | Iterable[ToolDef | ChannelDef] | None") -> "Plugins":
        if isinstance(defs, Plugins):
            return defs
        reg = cls()
        for d in defs or ():
            reg.register(d)
        return reg

    def register(self, d: ToolDef | ChannelDef) -> None:
        """Add a declaration; ValueError naming the field for a policy value it cannot have."""
        if isinstance(d, (ToolDef, ChannelDef)):
            for name, value in (("context_policy", d.context_policy),
                                ("recall_policy", d.recall_policy)):
                allowed = _POLICIES[name]
                if value not in allowed:
                    raise ValueError(f"{type(d).__name__}({d.name!r}).{name}: {value!r} is "
                                     f"not one of {', '.join(repr(a) for a in allowed)}")
        if isinstance(d, ToolDef):
            self.tools[d.name] = d
        elif isinstance(d, ChannelDef):
            self.channels[d.name] = d
        else:
            raise TypeError(f"not a ToolDef or ChannelDef: {d!r}")

    def source_text(self, source: str, text: str) -> str:
        """Compute-layer text of an event's own input/response ('' when no_memory)."""
        ch = self.channels.get(source)
        if ch is None:
            return text
        if ch.no_memory:
            return ""
        return ch.cleaner(text) if ch.cleaner else text

    def tool_text(self, source: str, tool: str, output: str) -> str:
        """Compute-layer text of a tool output: the tool's and the channel's rules both apply."""
        td = self.tools.get(tool)
        if td is not None:
            if td.no_memory:
                return ""
            if td.cleaner:
                output = td.cleaner(output)
        return self.source_text(source, output)

    def no_memory(self, source: str) -> bool:
        ch = self.channels.get(source)
        return bool(ch and ch.no_memory)
