"""``python -m fsmem``: the ``fsmem`` command (fsmem.interfaces.cli.main), with its lazy imports."""

from __future__ import annotations

import sys

from fsmem.interfaces.cli.main import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
