"""The floor of fsmem's format: the least filesystem work its on-disk layout needs for a
commit or an append, in plain Python, with the same barriers as fsmem's default sync
strategy ("batch": one wave of fdatasyncs and directory fsyncs from a thread pool).

What a floor leaves out is fsmem's own CPU: hashing, tokenising and indexing, ranking what to
prune, manifests as msgspec structs, the epoch, recovery checks. What it keeps is the format:
one file per distinct block, one directory per unit, a manifest, a publish rename, and the two
barriers a publish needs (the unit's files before the rename that makes it visible, then the
rename itself). So between SQLite and a floor is the price of the format; between a floor and
fsmem is fsmem's code. The rows of ``python -m benchmarks`` and ``bench_append_floor.py`` time
a floor interleaved with fsmem and SQLite on the same events.
"""

from __future__ import annotations

import json
import os
import uuid

from fsmem import Event
from fsmem.format import fsops as fsops

__all__ = ["CommitFloor", "AppendFloor"]

_DIRS = ("staging", "journal", "trash", "context", "documents")


class _Units:
    """Unit directories under ``root`` (the layer names of fsmem), written the least way."""

    def __init__(self, root: str, durable: bool) -> None:
        self.root, self.durable = root, durable
        for d in _DIRS:
            os.makedirs(os.path.join(root, d), exist_ok=True)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def stage(self, blocks: list[bytes], links: list[str], manifest: object) -> tuple[str, list[str]]:
        """A staged unit: one file per distinct block (named by a cheap stand-in for its
        digest), hard links to other units' blocks, then the manifest; (dir, file paths)."""
        path = self.path("staging", uuid.uuid4().hex)
        os.mkdir(path)
        files = []
        for data in {hash(b): b for b in blocks}.values():   # deduplicated, as fsmem does
            name = os.path.join(path, uuid.uuid4().hex)
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            os.write(fd, data)
            os.close(fd)
            files.append(name)
        for src in links:
            os.link(src, os.path.join(path, os.path.basename(src)))
        name = os.path.join(path, "manifest.json")
        with open(name, "w") as fh:
            json.dump(manifest, fh)
        files.append(name)
        return path, files

    def barrier(self, files: list[str], dirs: list[str]) -> None:
        if self.durable:
            fsops.flush_many(files, dirs)


def _event_blocks(ev: Event) -> list[bytes]:
    out = [t.encode() for t in (ev.input, ev.response) if t]
    out += [tr.output.encode() for tr in ev.tool_results]
    return out + [att.data for att in ev.attachments if att.data is not None]


def _event_fields(ev: Event) -> dict:
    return {"ts": ev.timestamp.ns, "source": ev.source, "tools": list(ev.tools_used)}


class CommitFloor(_Units):
    """``commit``: one unit into documents/: stage, barrier, rename, barrier."""

    def commit(self, events: list[Event]) -> None:
        blocks = [b for ev in events for b in _event_blocks(ev)]
        staged, files = self.stage(blocks, [], [_event_fields(ev) for ev in events])
        self.barrier(files, [staged, self.path("staging")])
        os.rename(staged, self.path("documents", os.path.basename(staged)))
        self.barrier([], [self.path("documents")])


class AppendFloor(_Units):
    """``append`` into a bounded L1 as fsmem does it: the new unit, and when L1 is over
    ``capacity`` the prune down to ``keep`` units, published under ONE journal entry: stage
    the new unit (and the L2 unit of the evicted events: their blocks hard-linked, no byte
    copied), write the entry, barrier; rename the new unit into context/, the L2 unit into
    documents/, the evicted units into the trash; barrier. The entry's deletion rides the
    next barrier (as fsmem's does)."""

    def __init__(self, root: str, durable: bool, capacity: int, keep: int) -> None:
        super().__init__(root, durable)
        self.capacity, self.keep = capacity, keep
        self.l1: list[tuple[str, list[str]]] = []   # (unit dir, block names), arrival order
        self.retired = False   # an entry was deleted: journal/ rides the next barrier

    def append(self, ev: Event) -> None:
        staged, files = self.stage(_event_blocks(ev), [], [_event_fields(ev)])
        blocks = [os.path.basename(f) for f in files[:-1]]
        over = len(self.l1) + 1 - self.capacity
        evicted = self.l1[:len(self.l1) + 1 - self.keep] if over > 0 else []
        dirs = [staged, self.path("staging")] + [self.path("journal")] * self.retired
        moves = [(staged, self.path("context", os.path.basename(staged)))]
        if evicted:
            links = [os.path.join(unit, b) for unit, names in evicted for b in names]
            l2, l2_files = self.stage([], links, {"events": len(evicted)})
            entry = self.path("journal", uuid.uuid4().hex)
            with open(entry, "w") as fh:
                json.dump({"publish": [staged, l2], "remove": [u for u, _ in evicted]}, fh)
            files += l2_files + [entry]
            dirs += [l2, self.path("journal")]
            moves += [(l2, self.path("documents", os.path.basename(l2)))]
            moves += [(u, self.path("trash", os.path.basename(u))) for u, _ in evicted]
        self.barrier(files, sorted(set(dirs)))
        for src, dst in moves:
            os.rename(src, dst)
        self.barrier([], sorted({os.path.dirname(dst) for _src, dst in moves}))
        self.retired = bool(evicted)
        if evicted:
            os.unlink(entry)
            for _src, dst in moves[2:]:   # the trash emptied (fsmem does it in batches)
                for name in os.listdir(dst):
                    os.unlink(os.path.join(dst, name))
                os.rmdir(dst)
        self.l1 = self.l1[len(evicted):] + [(moves[0][1], blocks)]
