"""The module paths of the flat 0.1 layout that the documentation names, kept importable.

fsmem grew folders (docs/ARCHITECTURE.md); ``from fsmem.render import render``,
``fsmem.embedders.E5SmallEmbedder``, ``python -m fsmem.watch`` and the rest of what README.md and
docs/ name still work: the old name is the new module itself (one object in ``sys.modules``,
so a patch through either name is seen by both). Only documented names are kept; the private
ones moved without a trace. Nothing here is imported until an old name is.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import types
    from importlib.machinery import ModuleSpec

__all__ = ["MOVED", "install"]

MOVED: dict[str, str] = {
    "fsmem.analyze": "fsmem.search.analyze",
    "fsmem.cli": "fsmem.interfaces.cli.main",
    "fsmem.config": "fsmem.store.config",
    "fsmem.embedders": "fsmem.search.embedders",
    "fsmem.errors": "fsmem.format.errors",
    "fsmem.inbox": "fsmem.ingest.inbox",
    "fsmem.mcp_server": "fsmem.interfaces.mcp_server",
    "fsmem.media": "fsmem.format.media",
    "fsmem.render": "fsmem.memory.render",
    "fsmem.stablemem": "fsmem.memory.stablemem",
    "fsmem.tools": "fsmem.interfaces.tools",
    "fsmem.watch": "fsmem.interfaces.cli.watch",
}


class _Alias:
    """A meta path finder and loader (importlib's protocols; its ABCs would cost every
    start-up an import): finds an old name and loads it as the module at its new path."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: Any = None) -> "ModuleSpec | None":
        new = MOVED.get(fullname)
        if new is None:
            return None
        import importlib.machinery  # lazy: here: only when an old name is imported (+importlib)
        import importlib.util  # lazy: start-up, loaded only when used (+importlib)
        real = importlib.util.find_spec(new)
        if real is None:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=real.origin)
        spec.has_location = real.has_location
        return spec

    def create_module(self, spec: "ModuleSpec") -> "types.ModuleType":
        import importlib  # lazy: start-up, loaded only when used (+importlib)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: "types.ModuleType") -> None:
        """The module ran under its new name already."""

    def get_code(self, fullname: str) -> "types.CodeType | None":
        """``python -m OLD`` (runpy) runs the new module's code as ``__main__``."""
        import importlib.util  # lazy: start-up, loaded only when used (+importlib)
        real = importlib.util.find_spec(MOVED[fullname])
        loader = real.loader if real is not None else None
        get_code = getattr(loader, "get_code", None)
        return get_code(real.name) if get_code is not None else None


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
