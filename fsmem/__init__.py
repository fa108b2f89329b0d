"""fsmem: a filesystem-native, three-layer memory store for LLM agents.

The public names are imported on first use (PEP 562 ``__getattr__``), so ``import fsmem`` and
``fsmem --version`` stay fast; ``from fsmem import Memory`` works as before.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING, Any

from fsmem import _moved
from fsmem._version import __version__

_moved.install()   # the documented module paths of the flat 0.1 layout (fsmem._moved)

_WHERE: dict[str, str] = {   # public name -> the module that defines it
    "DistillError": "graph.distill", "LLMDistiller": "graph.distill",
    "RuleDistiller": "graph.distill", "Triple": "graph.distill",
    "Doc": "interfaces.docmemory", "DocMemory": "interfaces.docmemory",
    "AlreadyExists": "format.errors", "AmbiguousDigest": "format.errors",
    "ChecksumMismatch": "format.errors", "FormatError": "format.errors",
    "FsmemError": "format.errors", "InvalidName": "format.errors",
    "MissingDependency": "format.errors", "NotFound": "format.errors",
    "StorageError": "format.errors", "StoreLocked": "format.errors",
    "UnsafeFilesystem": "format.errors",
    "Memory": "memory.facade",
    "Reader": "memory.reader",
    "NotAStore": "format.layout",
    "InjectOptions": "memory.turn",
    "Finding": "memory.fsck",
    "FORMAT_VERSION": "format.model", "BlockRef": "format.model", "Event": "format.model",
    "MediaAttachment": "format.model", "TextEvent": "format.model", "ToolOutput": "format.model",
    "ChannelDef": "format.plugins", "Plugins": "format.plugins", "ToolDef": "format.plugins",
    "BudgetSplit": "memory.render", "HeuristicEstimator": "memory.render",
    "RuneEstimator": "memory.render", "TiktokenEstimator": "memory.render",
    "TokenEstimator": "memory.render", "budget_split": "memory.render", "render": "memory.render",
    "Graph": "graph.graph",
    "Timestamp": "format.timestamps",
    "Document": "format.views", "Hit": "format.views",
}

__all__ = [
    "Memory", "Reader", "NotAStore", "InjectOptions", "Doc", "DocMemory", "Event", "TextEvent",
    "MediaAttachment", "ToolOutput", "BlockRef", "Document",
    "Hit", "Finding", "Timestamp", "ToolDef", "ChannelDef", "Plugins", "FORMAT_VERSION",
    "FsmemError", "FormatError", "ChecksumMismatch", "NotFound", "StoreLocked", "InvalidName",
    "AlreadyExists", "AmbiguousDigest", "StorageError", "Graph", "Triple", "RuleDistiller",
    "LLMDistiller", "DistillError", "MissingDependency", "UnsafeFilesystem", "render", "budget_split", "BudgetSplit",
    "TokenEstimator", "HeuristicEstimator", "RuneEstimator", "TiktokenEstimator",
]


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` on first use (then cache the attribute).
    A submodule (``fsmem.render``) wins over a same-named function once imported."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fsmem' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """``fsmem.render`` is the function, as when this package imported it eagerly: importing
    the submodule ``fsmem.render`` must not rebind the package attribute to the module."""

    @property
    def render(self) -> Any:
        return import_module(".memory.render", __name__).render

    @render.setter
    def render(self, value: Any) -> None:
        pass   # the import system setting the submodule; sys.modules keeps it


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from fsmem.format.errors import (
        AlreadyExists,
        AmbiguousDigest,
        ChecksumMismatch,
        FormatError,
        FsmemError,
        InvalidName,
        MissingDependency,
        NotFound,
        StorageError,
        StoreLocked,
        UnsafeFilesystem,
    )
    from fsmem.format.layout import NotAStore
    from fsmem.format.model import (
        FORMAT_VERSION,
        BlockRef,
        Event,
        MediaAttachment,
        TextEvent,
        ToolOutput,
    )
    from fsmem.format.plugins import ChannelDef, Plugins, ToolDef
    from fsmem.format.timestamps import Timestamp
    from fsmem.format.views import Document, Hit
    from fsmem.graph.distill import DistillError, LLMDistiller, RuleDistiller, Triple
    from fsmem.graph.graph import Graph
    from fsmem.interfaces.docmemory import Doc, DocMemory
    from fsmem.memory.facade import Memory
    from fsmem.memory.fsck import Finding
    from fsmem.memory.reader import Reader
    from fsmem.memory.render import (
        BudgetSplit,
        HeuristicEstimator,
        RuneEstimator,
        TiktokenEstimator,
        TokenEstimator,
        budget_split,
        render,
    )
    from fsmem.memory.turn import InjectOptions
