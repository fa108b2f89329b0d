"""One unit directory: ``manifest.json``, ``vectors.npy`` and block files named by digest.

``UnitBuilder`` assembles a unit in staging (blocks first, the manifest last, the commit record);
``read_manifest``/``verify_unit`` read one back. Nothing here knows what an event means
beyond the manifest's shape, and nothing here decides which layer a unit lives in.
"""

from __future__ import annotations

import io
import os
import stat
import threading
import time
from typing import TYPE_CHECKING, NamedTuple

import blake3

from fsmem.format.blocks import (
    block_filename,
    check_digest,
    hash_bytes,
    link_block,
    verify_block,
    write_block,
    write_block_from_fd,
)
from fsmem.format.errors import FormatError, NotFound
from fsmem.format.hosts import owner_token
from fsmem.format.layout import read_small
from fsmem.format.media import image_size, modality_of
from fsmem.format.model import (
    FORMAT_VERSION,
    BlockRef,
    Manifest,
    VectorsRef,
    check_name,
    decode_manifest,
    encode_pretty,
)
from fsmem.format.timestamps import Timestamp

if TYPE_CHECKING:   # numpy loads where vectors are written or read (CLI start-up)
    import numpy as np

__all__ = [
    "MANIFEST", "VECTORS", "TEXT_MIME", "UnitBuilder", "read_manifest", "verify_unit",
    "block_path", "read_vectors", "staging_name", "is_stray", "damaged", "Written",
    "manifest_key", "read_manifest_key", "load_npy",
]

MANIFEST = "manifest.json"
VECTORS = "vectors.npy"
TEXT_MIME = "text/plain; charset=utf-8"
DIR_MODE = 0o755
MANIFEST_CAP = 64 << 20   # a manifest of a million events is ~300 MB; 64 MiB is generous


class Written(NamedTuple):
    """A unit as this process just wrote it (its manifest, the vectors' row keys and matrix,
    text block digest -> text): what indexing it needs, without reading it back."""
    manifest: Manifest
    vectors: tuple[list[str], np.ndarray] | None
    texts: dict[str, str]
    mkey: int = 0   # manifest_key of the manifest written (0: not known)


def staging_name(unit_id: str) -> str:
    """``<unit-id>~<pid>@<host>~<random>`` (format 5; ``fsmem.format.hosts``): recovery can
    tell whose it is and whether it is alive, on this host or another."""
    return f"{unit_id}~{owner_token()}~{os.urandom(6).hex()}"


def block_path(unit_dir: str, ref: BlockRef) -> str:
    return os.path.join(unit_dir, block_filename(ref.digest, ref.mime))


class UnitBuilder:
    """Builds one unit directory in staging; ``finish`` writes the manifest last."""

    def __init__(self, staging_root: str, unit_id: str, *, sync: bool) -> None:
        from fsmem.format import fsops as fsops  # lazy: start-up, loaded only when used (+ctypes)
        self.unit_id = check_name(unit_id)
        self.sync = sync
        self.path = os.path.join(staging_root, staging_name(unit_id))
        fsops.mkdir(self.path, DIR_MODE)
        self._files: set[str] = set()
        # What this builder wrote, kept so that indexing the new unit reads nothing back:
        # text block digest -> its text; the vectors' (row keys, matrix).
        self.texts: dict[str, str] = {}
        self.vectors: tuple[list[str], np.ndarray] | None = None
        self.manifest_key = 0   # of the manifest written by ``finish``

    def add_bytes(self, data: bytes | memoryview, mime: str, *, role: str, created_at: Timestamp,
                  name: str = "", semantic_type: str = "", sha256: str = "") -> BlockRef:
        """Store ``data`` as a block (deduplicated within the unit) and return its reference."""
        digest, path = write_block(self.path, data, mime, sync=self.sync)
        self._files.add(os.path.basename(path))
        dims = image_size(bytes(data[:65536]), mime) if mime.startswith("image/") else None
        return BlockRef(digest=digest, modality=modality_of(mime), mime=mime, size=len(data),
                        created_at=created_at, role=role, name=name, sha256=sha256,
                        semantic_type=semantic_type,
                        width=dims[0] if dims else None, height=dims[1] if dims else None)

    def add_text(self, text: str, *, role: str, created_at: Timestamp) -> BlockRef:
        ref = self.add_bytes(text.encode("utf-8"), TEXT_MIME, role=role, created_at=created_at)
        self.texts[ref.digest] = text
        return ref

    def add_fd(self, fd: int, mime: str, *, role: str, created_at: Timestamp, name: str = "",
               size_cap: int | None = None, head: bytes = b"") -> BlockRef:
        """Store an open file's bytes as a block, hashing exactly what is written."""
        digest, path, size = write_block_from_fd(self.path, fd, mime, sync=self.sync,
                                                 size_cap=size_cap)
        self._files.add(os.path.basename(path))
        dims = image_size(head, mime) if mime.startswith("image/") else None
        return BlockRef(digest=digest, modality=modality_of(mime), mime=mime, size=size,
                        created_at=created_at, role=role, name=name,
                        width=dims[0] if dims else None, height=dims[1] if dims else None)

    def add_existing(self, src_unit_dir: str, ref: BlockRef) -> BlockRef:
        """Link a block of another unit into this one: same inode, no bytes copied (a block
        kept as a record only, ``absent``, has no file: its record goes along)."""
        if ref.absent:
            return ref
        link_block(block_path(src_unit_dir, ref), self.path, ref.digest, ref.mime, sync=self.sync)
        self._files.add(block_filename(ref.digest, ref.mime))
        return ref

    def set_vectors(self, rows: list[str], matrix: np.ndarray, embedder: str) -> VectorsRef:
        """Write ``vectors.npy`` (float32, one row per key) and return its reference."""
        import numpy as np  # lazy: start-up, loaded only when used (+numpy, ctypes)
        mat = np.ascontiguousarray(matrix, dtype=np.float32)
        if mat.ndim != 2 or mat.shape[0] != len(rows):
            raise ValueError(f"vectors: {mat.shape} does not match {len(rows)} rows")
        buf = io.BytesIO()
        np.save(buf, mat, allow_pickle=False)
        data = buf.getvalue()
        self._write_file(VECTORS, data)
        self.vectors = (list(rows), mat)
        return VectorsRef(file=VECTORS, digest=hash_bytes(data), embedder=embedder,
                          dim=int(mat.shape[1]), rows=list(rows))

    def finish(self, manifest: Manifest) -> str:
        """Write the manifest (the commit record) and make the directory durable."""
        from fsmem.format import fsops as fsops  # lazy: start-up, loaded only when used (+ctypes)
        if manifest.id != self.unit_id:
            raise ValueError(f"manifest id {manifest.id!r} != unit id {self.unit_id!r}")
        data = encode_pretty(manifest)
        self.manifest_key = manifest_key(data)
        self._write_file(MANIFEST, data)
        now = time.time_ns()  # the directory's mtime is its arrival time in a layer
        fsops.utime(self.path, (now, now))
        if self.sync:
            fsops.fsync_dir(self.path)
        return self.path

    def _write_file(self, name: str, data: bytes) -> None:
        """Write a file of the staged unit under its final name: no temp file and rename,
        since nothing reads a staged directory before it is published (a staged unit left
        by a crash is dead staging, removed whole by recovery; one a journal entry names was
        finished, and under ``sync`` flushed, before the entry was written)."""
        from fsmem.format import fsops as fsops  # lazy: start-up, loaded only when used (+ctypes)
        path = os.path.join(self.path, name)
        fd = fsops.open_(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fsops.write_all(fd, data)
            if self.sync:
                fsops.fsync(fd)
        finally:
            os.close(fd)


def manifest_key(data: bytes) -> int:
    """The key of a manifest's bytes as an int64, never 0: the first 8 bytes of their
    BLAKE3. The manifest names every block and the vectors by digest and a published unit
    is immutable, so the key stands for the unit's content (the index's ``mkeys``)."""
    return int.from_bytes(blake3.blake3(data).digest(8), "little", signed=True) or 1


def read_manifest_key(unit_dir: str) -> int:
    """``manifest_key`` of a unit's manifest file (OSError if it cannot be read)."""
    return manifest_key(read_small(os.path.join(unit_dir, MANIFEST), MANIFEST_CAP))


def read_manifest(unit_dir: str, *, expect_id: str | None = None) -> Manifest:
    """Decode a unit's manifest strictly; the id must match the directory name."""
    path = os.path.join(unit_dir, MANIFEST)
    try:
        raw = read_small(path, MANIFEST_CAP)
    except FileNotFoundError as exc:
        raise NotFound(f"{path}: no manifest") from exc
    except OSError as exc:
        raise FormatError(f"{path}: cannot open manifest: {exc.strerror}") from exc
    try:
        manifest = decode_manifest(raw, path)
    except RecursionError as exc:  # msgspec's depth limit: say what is wrong, no traceback
        raise FormatError(f"{path}: JSON nested too deeply") from exc
    if manifest.format < 1:
        raise FormatError(f"{path}: format version {manifest.format} is not valid")
    want = expect_id if expect_id is not None else os.path.basename(unit_dir)
    if manifest.id != want:
        raise FormatError(f"{path}: field 'id' is {manifest.id!r}, directory is {want!r}")
    _check_refs(manifest, path)
    return manifest


def _check_refs(manifest: Manifest, path: str) -> None:
    check_name(manifest.id, f"unit id in {path}")
    for ev in manifest.events:
        check_name(ev.id, f"event id in {path}")
        for ref in ev.blocks:
            check_digest(ref.digest, f"block digest in {path} event {ev.id}")
            if ref.size < 0:
                raise FormatError(f"{path}: event {ev.id}: negative block size")
        digests = {r.digest for r in ev.blocks}
        for tr in ev.tool_results:
            if tr.block not in digests:
                raise FormatError(f"{path}: event {ev.id}: tool result {tr.name!r} names "
                                  f"block {tr.block[:12]} that the event does not hold")
    if manifest.vectors is not None:
        check_digest(manifest.vectors.digest, f"vectors digest in {path}")
        if manifest.vectors.file != VECTORS:
            raise FormatError(f"{path}: vectors.file must be {VECTORS!r}")


_NPY_LOCK = threading.Lock()


def load_npy(source: "str | io.BytesIO", **kwargs: object) -> "np.ndarray":
    """``np.load`` under one process-wide lock. numpy parses a .npy header with
    ``ast.literal_eval``, and CPython 3.11's AST conversion keeps a recursion depth that is
    not safe across threads: one query thread reading a unit's vectors while others indexed
    raised ``SystemError: AST constructor recursion depth mismatch`` (seen once in .ci/run,
    tests/test_search_threads.py). The arrays read here are small, or mapped (no copy)."""
    import numpy as np  # lazy: start-up, loaded only when used (+numpy, ctypes)
    with _NPY_LOCK:
        return np.load(source, **kwargs)


def read_vectors(unit_dir: str, manifest: Manifest) -> tuple[list[str], np.ndarray] | None:
    """The unit's stored vectors as (row keys, float32 matrix), or None if it has none."""
    ref = manifest.vectors
    if ref is None:
        return None
    path = os.path.join(unit_dir, VECTORS)
    data = read_small(path, 1 << 31)
    if hash_bytes(data) != ref.digest:
        raise FormatError(f"{path}: bytes do not match the digest in the manifest")
    mat = load_npy(io.BytesIO(data), allow_pickle=False)
    if mat.shape != (len(ref.rows), ref.dim):
        raise FormatError(f"{path}: shape {mat.shape} != ({len(ref.rows)}, {ref.dim})")
    return ref.rows, mat


def is_stray(problem: str) -> bool:
    """A ``verify_unit`` problem that is a file or symlink the manifest does not name (the
    unit's own content is intact), as opposed to damage."""
    return problem.endswith(("unexpected entry", "unexpected symlink"))


def damaged(unit_dir: str, unit_id: str) -> list[str]:
    """The damage ``verify_unit`` finds in a unit (stray entries left out); [] when intact."""
    return [p for p in verify_unit(unit_dir, expect_id=unit_id)[1] if not is_stray(p)]


def verify_unit(unit_dir: str, *, read_data: bool = True, expect_id: str | None = None
                ) -> tuple[Manifest | None, list[str]]:
    """Check a unit: manifest, every block (size, BLAKE3), vectors, no stray files."""
    problems: list[str] = []
    try:
        manifest = read_manifest(unit_dir, expect_id=expect_id)
    except (FormatError, NotFound, ValueError) as exc:
        return None, [str(exc)]
    if manifest.format > FORMAT_VERSION:
        return manifest, [f"format {manifest.format} newer than {FORMAT_VERSION}"]
    expected = {MANIFEST}
    for ev in manifest.events:
        for ref in ev.blocks:
            if ref.absent:   # a record only (format 4): no file; fsck says media-missing
                continue
            name = block_filename(ref.digest, ref.mime)
            expected.add(name)
            path = os.path.join(unit_dir, name)
            problem = verify_block(path, ref.digest, ref.size) if read_data else (
                None if os.path.isfile(path) else "missing block")
            if problem:
                problems.append(f"{name}: {problem}")
    if manifest.vectors is not None:
        expected.add(VECTORS)
        try:
            read_vectors(unit_dir, manifest)
        except (OSError, FormatError, ValueError) as exc:
            problems.append(f"{VECTORS}: {exc}")
    try:
        names = sorted(os.listdir(unit_dir))
    except OSError as exc:
        return manifest, problems + [f"cannot list: {exc.strerror}"]
    for name in names:
        if name not in expected:
            try:
                st = os.lstat(os.path.join(unit_dir, name))
            except FileNotFoundError:
                continue
            kind = "symlink" if stat.S_ISLNK(st.st_mode) else "entry"
            problems.append(f"{name}: unexpected {kind}")
    return manifest, problems
