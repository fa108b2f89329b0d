"""fsmem: a filesystem-native, three-layer memory store for LLM agents.

The public names are imported on first use (PEP 562 ``__getattr__``), so ``import fsmem`` and
``fsmem --version`` stay fast; ``from fsmem import Memory`` works as before.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_WHERE: dict[str, str] = {
    "DistillError": "distill", "LLMDistiller": "distill", "RuleDistiller": "distill",
    "Triple": "distill", "Doc": "docmemory", "DocMemory": "docmemory",
    "AlreadyExists": "errors", "AmbiguousDigest": "errors", "ChecksumMismatch": "errors",
    "FormatError": "errors", "FsmemError": "errors", "InvalidName": "errors",
    "MissingDependency": "errors", "NotFound": "errors", "StorageError": "errors",
    "StoreLocked": "errors", "Memory": "flows", "Reader": "reader", "NotAStore": "layout",
    "InjectOptions": "turn", "Finding": "fsck", "FORMAT_VERSION": "model", "BlockRef": "model",
    "Event": "model", "MediaAttachment": "model", "TextEvent": "model", "ToolOutput": "model",
    "ChannelDef": "plugins", "Plugins": "plugins", "ToolDef": "plugins",
    "BudgetSplit": "render", "HeuristicEstimator": "render", "RuneEstimator": "render",
    "TiktokenEstimator": "render", "TokenEstimator": "render", "budget_split": "render",
    "render": "render", "Graph": "graph", "Timestamp": "timestamps", "Document": "views",
    "Hit": "views",
}

__all__ = [
    "Memory", "Reader", "NotAStore", "InjectOptions", "Doc", "DocMemory", "Event", "TextEvent",
    "MediaAttachment", "ToolOutput", "BlockRef", "Document",
    "Hit", "Finding", "Timestamp", "ToolDef", "ChannelDef", "Plugins", "FORMAT_VERSION",
    "FsmemError", "FormatError", "ChecksumMismatch", "NotFound", "StoreLocked", "InvalidName",
    "AlreadyExists", "AmbiguousDigest", "StorageError", "Graph", "Triple", "RuleDistiller",
    "LLMDistiller", "DistillError", "MissingDependency", "render", "budget_split", "BudgetSplit",
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
        return import_module(".render", __name__).render

    @render.setter
    def render(self, value: Any) -> None:
        pass   # the import system setting the submodule; sys.modules keeps it


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from .distill import DistillError, LLMDistiller, RuleDistiller, Triple
    from .docmemory import Doc, DocMemory
    from .errors import (AlreadyExists, AmbiguousDigest, ChecksumMismatch, FormatError,
                         FsmemError, InvalidName, MissingDependency, NotFound, StorageError,
                         StoreLocked)
    from .flows import Memory
    from .fsck import Finding
    from .graph import Graph
    from .layout import NotAStore
    from .model import FORMAT_VERSION, BlockRef, Event, MediaAttachment, TextEvent, ToolOutput
    from .plugins import ChannelDef, Plugins, ToolDef
    from .reader import Reader
    from .render import (BudgetSplit, HeuristicEstimator, RuneEstimator, TiktokenEstimator,
                         TokenEstimator, budget_split, render)
    from .timestamps import Timestamp
    from .turn import InjectOptions
    from .views import Document, Hit
