"""``python -m fsmem ...`` for the tests, forked from one interpreter that imported fsmem once.

The suite starts the ``fsmem`` command hundreds of times; each fresh interpreter spends ~0.3 s
of CPU importing Python, msgspec, blake3 and fsmem before the verb runs. Here a server per test
worker imports them once and forks one child per command: the child has its own pid, its own
working directory, environment, argv and standard streams (files), runs the module as ``python
-m`` does (runpy, ``__main__``) and exits with its code, after its exit handlers and a flush,
as an interpreter does. What a fork cannot give, a command gets from a fresh interpreter
(tests/conftest.py ``fsmem_process``): an interactive stdin, a different PYTHON* setting, or
FSMEM_TEST_FRESH_CLI=1, which runs every command fresh (the check that the two agree).

Only what the command's own start imports is preloaded (fsmem's CLI module and its imports):
the lazily imported modules (numpy, the index, the HomeAgent reader) are imported by each child
as a fresh process would, so a verb's ``sys.modules`` checks see what they would see.

Protocol, one JSON line each way: request {module, args, env, cwd, stdin, stdout, stderr};
the server answers {"pid": N} at once and {"status": S} (waitpid's) when the child ends.
"""

from __future__ import annotations

import json
import os
import sys


def _child(req: dict) -> None:
    """In the forked child: become the command, run it, exit with its code."""
    code = 1
    try:
        os.setsid()   # a group of its own: a timeout kills the command and its children
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        for fd, (path, flags) in enumerate(((req["stdin"], os.O_RDONLY),
                                            (req["stdout"], os.O_WRONLY | os.O_TRUNC),
                                            (req["stderr"], os.O_WRONLY | os.O_TRUNC))):
            opened = os.open(path, flags)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
        # fresh text streams on the new descriptors (the server's buffers hold nothing of ours)
        sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False,
                          buffering=1)
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        sys.argv = [req["module"], *req["args"]]
        import runpy
        try:
            runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            if stop.code is None:
                code = 0
            elif isinstance(stop.code, int):
                code = stop.code
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            code = 130
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        import atexit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    finally:
        os._exit(code & 0xFF)


def serve(tests_dir: str) -> None:
    sys.path.remove(tests_dir)   # the child's path is a fresh ``python -m``'s
    import fsmem  # noqa: F401
    import fsmem.interfaces.cli.main  # noqa: F401  (what the command's start imports)
    requests = os.fdopen(0, "r", encoding="utf-8")
    answers = os.fdopen(1, "w", encoding="utf-8", buffering=1)
    for line in requests:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            requests.close()
            answers.close()
            _child(req)
        answers.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"status": status}) + "\n")

