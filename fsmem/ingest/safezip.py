"""A zip archive read as hostile input: its members are checked before any is read, and read
into memory only, never extracted to disk.

Every member of the central directory is looked at first: no absolute name and no ``..``
component, no NUL, no symbolic link or other special file, no encryption, only stored or
deflated data, at most ``ZipLimits.members`` members, each at most ``member_size`` bytes
uncompressed and all together at most ``total``, and no member that inflates more than
``ratio`` times (above 1 MiB: a zip bomb). One bad member refuses the whole archive, with a
FormatError naming the archive and the member. A member is then read with its declared size as
a hard cap (``zipfile`` checks its CRC-32 at the end).
"""

from __future__ import annotations

import re
import stat
import zipfile
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from fsmem.format.errors import FormatError

__all__ = ["ZipLimits", "SafeZip", "is_zip"]

_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")   # a local file header; an empty archive's end record
_DRIVE = re.compile(r"^[A-Za-z]:")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ZipLimits:
    """What one archive may hold (uncompressed sizes as its central directory declares them,
    enforced again while reading)."""

    members: int = 200_000
    member_size: int = 2 << 30
    total: int = 32 << 30
    ratio: int = 200
    ratio_floor: int = 1 << 20


def is_zip(head: bytes) -> bool:
    """True if ``head`` (a file's first bytes) starts like a zip archive."""
    return head[:4] in _MAGIC


class SafeZip:
    """The members of the zip in the open file ``fh`` (named ``path`` in errors), checked
    whole on opening (see the module docstring); ``names`` lists the regular files."""

    def __init__(self, path: str, fh: BinaryIO, limits: ZipLimits = ZipLimits()) -> None:
        self.path = path
        self.limits = limits
        try:
            self._zip = zipfile.ZipFile(fh)
            infos = self._zip.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError,
                NotImplementedError) as exc:
            raise FormatError(f"{path}: not a valid zip archive: {exc}") from exc
        if len(infos) > limits.members:
            raise FormatError(f"{path}: {len(infos)} members, over the cap of {limits.members}")
        self._infos: dict[str, zipfile.ZipInfo] = {}
        total = 0
        for info in infos:
            self._check(info)
            if info.filename in self._infos:
                raise FormatError(f"{path}: member {info.filename!r} appears twice")
            total += info.file_size
            if total > limits.total:
                raise FormatError(f"{path}: members total over {limits.total} bytes "
                                  f"uncompressed (at {info.filename!r}): a zip bomb?")
            self._infos[info.filename] = info
        self.names = sorted(n for n, i in self._infos.items() if not i.is_dir())

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> "SafeZip":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, info: zipfile.ZipInfo) -> None:
        raw = info.orig_filename
        where = f"{self.path}: member {raw!r}"
        parts = re.split(r"[/\\]", raw)
        if "\x00" in raw:
            raise FormatError(f"{where}: a NUL byte in its name")
        if raw.startswith(("/", "\\")) or _DRIVE.match(raw):
            raise FormatError(f"{where}: an absolute name (never extracted, refused)")
        if ".." in parts:
            raise FormatError(f"{where}: a '..' component in its name (refused)")
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if kind == stat.S_IFLNK:
            raise FormatError(f"{where}: a symbolic link (refused)")
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise FormatError(f"{where}: not a regular file (mode {oct(mode)})")
        if info.flag_bits & 0x1:
            raise FormatError(f"{where}: encrypted (an export is never encrypted; refused)")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise FormatError(f"{where}: compression method {info.compress_type} "
                              "(only stored and deflated are read)")
        if info.file_size > self.limits.member_size:
            raise FormatError(f"{where}: {info.file_size} bytes uncompressed, over the cap "
                              f"of {self.limits.member_size}")
        if (info.file_size > self.limits.ratio_floor
                and info.file_size > info.compress_size * self.limits.ratio):
            ratio = info.file_size // max(info.compress_size, 1)
            raise FormatError(f"{where}: inflates {ratio}:1 ({info.compress_size} -> "
                              f"{info.file_size} bytes): a zip bomb? refused")

    def size(self, name: str) -> int:
        """The declared uncompressed size of member ``name``."""
        return self._infos[name].file_size

    def read(self, name: str) -> bytes:
        """Member ``name``'s bytes, in memory; its declared size is the cap (a member that
        gives more or less, or fails its CRC-32, is a FormatError naming it)."""
        info = self._infos[name]
        where = f"{self.path}: member {name!r}"
        parts, size = [], 0
        try:
            with self._zip.open(info) as fh:
                while chunk := fh.read(_CHUNK):
                    size += len(chunk)
                    if size > info.file_size:
                        raise FormatError(f"{where}: more bytes than its declared "
                                          f"{info.file_size}")
                    parts.append(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError,
                RuntimeError) as exc:
            raise FormatError(f"{where}: cannot be read ({exc})") from exc
        if size != info.file_size:
            raise FormatError(f"{where}: {size} bytes, not its declared {info.file_size}")
        return b"".join(parts)
