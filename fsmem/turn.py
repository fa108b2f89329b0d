"""stub"""
from dataclasses import dataclass
__all__ = ["InjectOptions"]


@dataclass(frozen=True)
class InjectOptions:
    no_memory: bool = False
