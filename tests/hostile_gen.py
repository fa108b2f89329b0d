"""The ``hostile`` fixture set: entries that must never hang, crash or leak fsmem.

FIFOs, sockets and hard links cannot live in git, so the set is built by code in a temp
directory. ``inbox_entries`` drops hostile entries (and two good ones) into a store's inbox;
``plant_in_store`` damages a store the way a hostile local user or a plain-tool mistake could
(a FIFO named manifest.json in a layer, a FIFO in place of a block, symlinks). Every builder
returns what it made, with the outcome fsmem must give it, so the tests check each by name.

Sparse files stand in for huge ones: the default suite stays cheap (no real gigabytes).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Entry", "inbox_entries", "plant_in_store", "nested_json", "GOOD_TEXT",
           "NON_UTF8_NAME", "LONG_NAME", "SPARSE_SIZE"]

SPARSE_SIZE = 1 << 30
GOOD_TEXT = {"good.md": b"# a good note\nthe hostile set leaves this one alone\n",
             "good.jsonl": b'{"input": "ping", "response": "pong"}\n'}
NON_UTF8_NAME = b"caf\xe9-\xff.md"        # latin-1 bytes: not UTF-8
LONG_NAME = "n" * 240 + ".md"             # the claim prefix pushes it past NAME_MAX


@dataclass
class Entry:
    """One hostile entry: its name in the inbox (str, surrogateescape for bytes), what it is,
    and the outcome fsmem must give it (``rejected`` or ``ingested``)."""

    name: str
    kind: str
    expect: str


def nested_json(depth: int) -> bytes:
    """One JSON record nested ``depth`` levels deep (lists inside an object's field)."""
    return b'{"input": ' + b"[" * depth + b"]" * depth + b"}\n"


def _sparse(path: Path, size: int = SPARSE_SIZE, head: bytes = b"") -> None:
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)


def _socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(str(path))
    finally:
        s.close()   # the socket inode stays in the directory


def inbox_entries(root: Path, outside: Path) -> list[Entry]:
    """Drop the hostile set into ``root/inbox``; ``outside`` is a directory outside the store
    (targets of links). Returns every entry with the outcome it must get."""
    inbox = root / "inbox"
    outside.mkdir(parents=True, exist_ok=True)
    secret = outside / "secret.txt"
    secret.write_bytes(b"# outside the store\nnever read by fsmem\n")
    out: list[Entry] = []

    def add(name: str, kind: str, expect: str = "rejected") -> Path:
        out.append(Entry(name, kind, expect))
        return inbox / name

    os.mkfifo(add("fifo.jsonl", "fifo"))
    os.mkfifo(add("fifo.md", "fifo"))
    _socket(add("sock.md", "socket"))
    os.symlink(secret, add("link-out.md", "symlink out of the store"))
    os.symlink(root / ".fsmem" / "marker.json", add("link-in.json", "symlink into the store"))
    os.link(secret, add("hardlink.md", "hard link to outside"))
    add("nested.json", "nested JSON").write_bytes(nested_json(100_000))
    _sparse(add("sparse.md", "sparse 1 GiB text"))
    add("traversal.jsonl", "traversal path attachment").write_text(
        json.dumps({"input": "x", "attachments": [{"path": "../secret.txt"}]}) + "\n"
        + json.dumps({"input": "y", "attachments": [{"path": str(secret)}]}) + "\n")
    # dropped unit directories
    unit = add("u-fifo-manifest", "unit dir with a FIFO manifest.json")
    unit.mkdir()
    os.mkfifo(unit / "manifest.json")
    unit = add("u-sparse-manifest", "unit dir with a sparse 1 GiB manifest.json")
    unit.mkdir()
    _sparse(unit / "manifest.json", head=b'{"format": 1, "id": "u-sparse-manifest", ')
    unit = add("u-link-manifest", "unit dir with a symlinked manifest.json")
    unit.mkdir()
    os.symlink(secret, unit / "manifest.json")
    unit = add("u-traversal", "unit manifest with a traversal id")
    unit.mkdir()
    (unit / "manifest.json").write_text(json.dumps(
        {"format": 1, "id": "../../etc", "created_at": "2026-01-01T00:00:00Z", "events": []}))
    folder = add("records-hardlink", "record folder: record file hard-linked to outside")
    folder.mkdir()
    outside_rec = outside / "rec.jsonl"
    outside_rec.write_text('{"input": "outside record"}\n')
    os.link(outside_rec, folder / "r.jsonl")
    folder = add("records-fifo", "record folder: FIFO record file")
    folder.mkdir()
    os.mkfifo(folder / "r.jsonl")
    folder = add("records-att", "record folder: attachment hard-linked / FIFO")
    folder.mkdir()
    os.link(secret, folder / "hl.png")
    os.mkfifo(folder / "ff.png")
    (folder / "r.jsonl").write_text(
        json.dumps({"input": "a", "attachments": [{"path": "hl.png"}]}) + "\n"
        + json.dumps({"input": "b", "attachments": [{"path": "ff.png"}]}) + "\n")
    # names
    (inbox / os.fsdecode(NON_UTF8_NAME)).write_bytes(b"# latin-1 name\nstored all the same\n")
    out.append(Entry(os.fsdecode(NON_UTF8_NAME), "non-UTF-8 name", "ingested"))
    (inbox / LONG_NAME).write_bytes(b"# a long name\nits extension must survive the claim\n")
    out.append(Entry(LONG_NAME, "long name", "ingested"))
    for name, data in GOOD_TEXT.items():
        (inbox / name).write_bytes(data)
        out.append(Entry(name, "good", "ingested"))
    return out


def plant_in_store(root: Path, outside: Path) -> dict[str, str]:
    """Damage a store with hostile inodes; returns {what: unit id or path} planted.

    Needs at least two L2 units and one L1 unit already stored; the first L2 unit's manifest
    becomes a FIFO, the second loses a block to a FIFO, the L1 unit's block becomes a symlink,
    and a foreign FIFO unit directory and a sparse-manifest unit appear in documents/."""
    outside.mkdir(parents=True, exist_ok=True)
    docs = sorted(p for p in (root / "documents").iterdir())
    ctx = sorted(p for p in (root / "context").iterdir())
    planted: dict[str, str] = {}
    victim = docs[0]
    (victim / "manifest.json").unlink()
    os.mkfifo(victim / "manifest.json")
    planted["fifo manifest"] = victim.name
    victim = docs[1]
    block = next(p for p in sorted(victim.iterdir()) if p.suffix == ".txt")
    block.chmod(0o644)
    block.unlink()
    os.mkfifo(block)
    planted["fifo block"] = victim.name
    victim = ctx[0]
    block = next(p for p in sorted(victim.iterdir()) if p.suffix == ".txt")
    block.unlink()
    (outside / "target").write_bytes(b"outside")
    os.symlink(outside / "target", block)
    planted["symlink block"] = victim.name
    foreign = root / "documents" / "u-foreign-fifo"
    foreign.mkdir()
    os.mkfifo(foreign / "manifest.json")
    planted["foreign fifo unit"] = foreign.name
    sparse = root / "documents" / "u-foreign-sparse"
    sparse.mkdir()
    _sparse(sparse / "manifest.json", head=b'{"format": 1, ')
    planted["foreign sparse unit"] = sparse.name
    return planted
