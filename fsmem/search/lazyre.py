"""Regular expressions compiled on first use instead of at import.

The tokenisers' patterns carry the CJK ranges, whose character classes take ``re`` 4-6 ms
each to compile: paid at every start of a process that imports the module (a CLI call),
used or not. ``lazy_compile`` stands in for ``re.compile`` at module level: the first
attribute taken from the stand-in compiles the pattern and rebinds the module's global to
the compiled pattern itself, so every later use is a plain ``re.Pattern`` (no per-call cost).
"""

from __future__ import annotations

import re
import sys
from typing import Any

__all__ = ["lazy_compile"]


class _LazyPattern:
    """Compiles ``pattern`` on first use and puts the result in place of itself at
    ``module.name`` (a holder of the stand-in itself keeps working, through the cache)."""

    __slots__ = ("_module", "_name", "_pattern", "_flags", "_compiled")

    def __init__(self, module: str, name: str, pattern: str, flags: int) -> None:
        self._module, self._name, self._pattern, self._flags = module, name, pattern, flags
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, attr: str) -> Any:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._pattern, self._flags)
            module = sys.modules.get(self._module)
            if module is not None and getattr(module, self._name, None) is self:
                setattr(module, self._name, compiled)
        return getattr(compiled, attr)

    def __repr__(self) -> str:
        return f"lazy_compile({self._pattern!r})"


def lazy_compile(module: str, name: str, pattern: str, flags: int = 0) -> Any:
    """``re.compile(pattern, flags)``, deferred to its first use; call it as
    ``NAME = lazy_compile(__name__, "NAME", pattern)`` so the global can be rebound."""
    return _LazyPattern(module, name, pattern, flags)
