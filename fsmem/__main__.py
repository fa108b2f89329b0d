"""``python -m fsmem``: the ``fsmem`` command (fsmem.interfaces.cli.main), with its lazy imports.

Ctrl-C from here on is one line and exit 130 (issue 29; fsmem.interfaces.cli.sigint): during
the imports below nothing has been opened or written yet, and ``main`` handles the rest, the
process's exit included. Before this file runs the interpreter is starting and
``fsmem/__init__.py`` is being imported: a signal there meets Python's own handler.
"""

if __name__ == "__main__":
    try:
        import sys

        from fsmem.interfaces.cli import sigint
        sigint.install()
        sigint.catch_dropped()
        from fsmem.interfaces.cli.main import main
        code = main()   # it answers a Ctrl-C itself from its first line on, its exit included
    except KeyboardInterrupt:   # before main ran: nothing was opened or written yet
        import os
        os.write(2, b"fsmem: interrupted\n")
        os._exit(130)
    sys.exit(code)

__all__: list[str] = []
