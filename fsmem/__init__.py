"""fsmem: a filesystem-native, three-layer memory store for LLM agents."""

from .distill import DistillError, LLMDistiller, RuleDistiller, Triple
from .docmemory import Doc, DocMemory
from .errors import (AlreadyExists, AmbiguousDigest, ChecksumMismatch, FormatError, FsmemError,
                     InvalidName, MissingDependency, NotFound, StorageError, StoreLocked)
from .flows import Memory
from .reader import Reader
from .layout import NotAStore
from .turn import InjectOptions
from .fsck import Finding
from .model import (FORMAT_VERSION, BlockRef, Event, MediaAttachment, TextEvent, ToolOutput)
from .plugins import ChannelDef, Plugins, ToolDef
from .render import (BudgetSplit, HeuristicEstimator, RuneEstimator, TiktokenEstimator,
                     TokenEstimator, budget_split, render)
from .graph import Graph
from .timestamps import Timestamp
from .views import Document, Hit

__all__ = [
    "Memory", "Reader", "NotAStore", "InjectOptions", "Doc", "DocMemory", "Event", "TextEvent",
    "MediaAttachment", "ToolOutput", "BlockRef", "Document",
    "Hit", "Finding", "Timestamp", "ToolDef", "ChannelDef", "Plugins", "FORMAT_VERSION",
    "FsmemError", "FormatError", "ChecksumMismatch", "NotFound", "StoreLocked", "InvalidName",
    "AlreadyExists", "AmbiguousDigest", "StorageError", "Graph", "Triple", "RuleDistiller",
    "LLMDistiller", "DistillError", "MissingDependency", "render", "budget_split", "BudgetSplit",
    "TokenEstimator", "HeuristicEstimator", "RuneEstimator", "TiktokenEstimator",
]
__version__ = "0.1.0"
