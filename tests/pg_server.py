"""A throw-away PostgreSQL server for the fleet tests and benchmark: ``initdb`` into a temp
dir, ``pg_ctl start`` on a free local port (socket in the temp dir, 127.0.0.1 only, trust
auth, fsync off), stopped and removed by ``close``. Run as root, the server runs as the
``postgres`` system user (``runuser -u postgres --``), since PostgreSQL refuses root.

``find_bindir()`` is None when no server is installed: the caller skips (or fails under CI).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time

__all__ = ["PgServer", "find_bindir"]


def find_bindir() -> str | None:
    """The bin directory of the newest installed PostgreSQL (Debian layout, else PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if found:
        return os.path.dirname(found[-1])
    on_path = shutil.which("initdb")
    return os.path.dirname(on_path) if on_path else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One server: ``dsn`` to connect; ``stop``/``start`` keep its data (a restart)."""

    def __init__(self, bindir: str, parent: str | None = None) -> None:
        self.bindir = bindir
        self.tmp = tempfile.mkdtemp(prefix="fsmem-pg-", dir=parent)
        self.data = os.path.join(self.tmp, "data")
        self.sock = os.path.join(self.tmp, "sock")
        self.log = os.path.join(self.tmp, "server.log")
        self.port = _free_port()
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.user = "postgres" if self._as else None
        os.mkdir(self.sock)
        if self._as:
            shutil.chown(self.tmp, "postgres", "postgres")
            shutil.chown(self.sock, "postgres", "postgres")
        self._run("initdb", "-D", self.data, "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8",
                  "-U", "postgres", "--no-sync")
        self.running = False
        self.start()

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, prog: str, *args: str) -> None:
        cmd = [*self._as, os.path.join(self.bindir, prog), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode:
            log = ""
            try:
                with open(self.log, encoding="utf-8", errors="replace") as fh:
                    log = fh.read()[-2000:]
            except OSError:
                pass
            raise RuntimeError(f"{prog} failed ({proc.returncode}): {proc.stderr[-2000:]}{log}")

    def start(self) -> None:
        opts = (f"-c listen_addresses=127.0.0.1 -c port={self.port} -c fsync=off "
                f"-c synchronous_commit=off -c full_page_writes=off "
                f"-c unix_socket_directories={self.sock} -c max_connections=40")
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-o", opts, "-w", "-t", "60",
                  "start")
        self.running = True
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:   # -w waited for it; a last look at the port
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                time.sleep(0.05)

    def stop(self) -> None:
        if self.running:
            self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
            self.running = False

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
