"""Content-addressed block files inside a unit directory.

A block file's name is a pure function of its validated BLAKE3 digest and its MIME type
(``<64 hex><ext>``), so ``ls`` and ``cat`` work and no path is ever built from input bytes.
Blocks are written to a temp file while being hashed, then linked to their digest name.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import stat

import blake3

from fsmem.format.errors import ChecksumMismatch, FormatError, InvalidName, NotFound
from fsmem.format.layout import open_regular, read_fd
from fsmem.format.media import extension_for

__all__ = [
    "DIGEST_RE", "check_digest", "block_filename", "hash_bytes", "write_block",
    "write_block_from_fd", "link_block", "verify_block", "BLOCK_MODE", "CHUNK", "hash_fd",
]

DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
BLOCK_MODE = 0o444
CHUNK = 1 << 20
BLOCK_READ_CAP = 1 << 31   # read_block loads a block whole: never more than this


def check_digest(digest: object, what: str = "digest") -> str:
    """Return ``digest`` if it is 64 lowercase hex, else raise InvalidName naming it."""
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise InvalidName(f"invalid {what}: {digest!r} (want 64 lowercase hex BLAKE3)")
    return digest


def block_filename(digest: str, mime: str) -> str:
    """``<digest><ext>``: the only way a block's file name is ever made."""
    return check_digest(digest) + extension_for(mime)


def hash_bytes(data: bytes | memoryview) -> str:
    return blake3.blake3(data, max_threads=blake3.blake3.AUTO if len(data) > (8 << 20) else 1
                         ).hexdigest()


def hash_fd(fd: int, cap: int, path: str = "") -> tuple[str, int]:
    """BLAKE3 and size of what is left to read of ``fd``, read in CHUNKs; FormatError (naming
    ``path``) past ``cap`` bytes."""
    hasher, size = blake3.blake3(), 0
    while chunk := os.read(fd, CHUNK):
        size += len(chunk)
        if size > cap:
            raise FormatError(f"{path + ': ' if path else ''}over the size cap of {cap} bytes")
        hasher.update(chunk)
    return hasher.hexdigest(), size


_tmp_counter = itertools.count()


def _tmp_name() -> str:
    """Unique within a staging unit (one writer per staged directory), cheap to make."""
    return f".tmp-{os.getpid()}-{next(_tmp_counter)}"


def _finish(dir_path: str, tmp: str, digest: str, mime: str) -> str:
    """Link the finished temp file to its digest name; an existing name is a dedupe hit."""
    from fsmem.format import fsops as fsops  # lazy: start-up, loaded only when used (+ctypes)
    final = os.path.join(dir_path, block_filename(digest, mime))
    try:
        fsops.link(tmp, final)
    except FileExistsError:
        pass
    fsops.unlink(tmp)
    return final


def write_block(dir_path: str, data: bytes | memoryview, mime: str, *, sync: bool) -> tuple[str, str]:
    """Write ``data`` as a block in ``dir_path`` (a unit being staged: one writer, never
    published until its manifest is written); returns (digest, path). fsync when ``sync``.

    The digest is known before the bytes are written, so they go straight to the block's
    name (no temp file, link and unlink: two metadata operations fewer per block); an
    existing name is a dedupe hit. A write that fails removes its partial file."""
    from fsmem.format import fsops as fsops  # lazy: start-up, loaded only when used (+ctypes)
    digest = hash_bytes(data)
    final = os.path.join(dir_path, block_filename(digest, mime))
    try:
        fd = fsops.open_(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, BLOCK_MODE)
    except FileExistsError:
        return digest, final
    try:
        if len(data):
            fsops.write_all(fd, data)
        if sync:
            fsops.fsync(fd)
    except BaseException:
        os.close(fd)
        _discard(final)
        raise
    os.close(fd)
    return digest, final


def write_block_from_fd(dir_path: str, src_fd: int, mime: str, *, sync: bool,
                        size_cap: int | None = None) -> tuple[str, str, int]:
    """Copy an open file into a block, hashing the same bytes it writes: (digest, path, size)."""
    from fsmem.format import fsops as fsops  # lazy: start-up, loaded only when used (+ctypes)
    tmp = os.path.join(dir_path, _tmp_name())
    fd = fsops.open_(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, BLOCK_MODE)
    hasher = blake3.blake3()
    size = 0
    try:
        while True:
            chunk = os.read(src_fd, CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size_cap is not None and size > size_cap:
                raise OSError(errno.EFBIG, f"over the size cap of {size_cap} bytes")
            hasher.update(chunk)
            fsops.write_all(fd, chunk)
        if sync:
            fsops.fsync(fd)
    except BaseException:
        os.close(fd)
        _discard(tmp)
        raise
    os.close(fd)
    digest = hasher.hexdigest()
    try:
        return digest, _finish(dir_path, tmp, digest, mime), size
    except BaseException:
        _discard(tmp)
        raise


def link_block(src_path: str, dir_path: str, digest: str, mime: str, *, sync: bool) -> str:
    """Put an existing block into ``dir_path`` without copying bytes (a hard link).

    Across filesystems (EXDEV) the bytes are copied, re-hashed and checked instead.
    """
    from fsmem.format import fsops as fsops  # lazy: start-up, loaded only when used (+ctypes)
    final = os.path.join(dir_path, block_filename(digest, mime))
    try:
        fsops.link(src_path, final)
        return final
    except FileExistsError:
        return final
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
    src_fd = _open_block(src_path)
    try:
        got, path, _ = write_block_from_fd(dir_path, src_fd, mime, sync=sync)
    finally:
        os.close(src_fd)
    if got != digest:
        _discard(path)
        raise ChecksumMismatch(f"{src_path}: bytes hash to {got}, expected {digest}")
    return path


def verify_block(path: str, digest: str, size: int | None = None) -> str | None:
    """None if the file at ``path`` holds exactly the block, else a one-line problem."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return "missing block"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "block is a symlink"
        return f"unreadable block: {exc.strerror}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "block is not a regular file"
        if size is not None and st.st_size != size:
            return f"size {st.st_size} != {size} recorded"
        hasher = blake3.blake3()
        while chunk := os.read(fd, CHUNK):
            hasher.update(chunk)
    finally:
        os.close(fd)
    got = hasher.hexdigest()
    return None if got == digest else f"digest mismatch: bytes hash to {got}"


def read_block(path: str, digest: str, *, verify: bool = True) -> bytes:
    """Read a block's bytes, refusing symlinks; with ``verify`` the BLAKE3 is checked."""
    try:
        fd = _open_block(path)
    except FileNotFoundError as exc:
        raise NotFound(f"{path}: missing block") from exc
    except OSError as exc:
        raise ChecksumMismatch(f"{path}: cannot read block: {exc.strerror}") from exc
    try:
        data = read_fd(fd, BLOCK_READ_CAP, path)
    except FormatError as exc:
        raise ChecksumMismatch(str(exc)) from exc
    finally:
        os.close(fd)
    if verify and hash_bytes(data) != digest:
        raise ChecksumMismatch(f"{path}: bytes do not match digest {digest}")
    return data


def _open_block(path: str) -> int:
    """A block opened for reading: no symlink, no FIFO (never hangs), a regular file.
    A symlink or special file raises ChecksumMismatch (the block is damaged)."""
    try:
        return open_regular(path, cap=BLOCK_READ_CAP)
    except FormatError as exc:
        raise ChecksumMismatch(f"cannot read block: {exc}") from exc


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


__all__.append("read_block")
