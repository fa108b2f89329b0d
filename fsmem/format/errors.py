"""The one error tree of fsmem: every failure a caller can see is an FsmemError."""

from __future__ import annotations

__all__ = [
    "FsmemError",
    "FormatError",
    "ChecksumMismatch",
    "NotFound",
    "StoreLocked",
    "InvalidName",
    "AlreadyExists",
    "AmbiguousDigest",
    "StorageError",
    "MissingDependency",
    "UnsafeFilesystem",
]


class FsmemError(Exception):
    """Base of every fsmem error; the message names the path or field at fault."""


class FormatError(FsmemError):
    """A file could not be decoded, or has a format version this code does not know."""


class ChecksumMismatch(FsmemError):
    """A block's bytes do not hash to the digest it is stored under."""


class NotFound(FsmemError, KeyError):
    """A unit, block or digest does not exist."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class StoreLocked(FsmemError):
    """Another process holds the store's writer lock past the timeout."""


class UnsafeFilesystem(FsmemError):
    """A writer refused: the store's filesystem cannot keep the writer lock's promise
    (fsmem.store.filesystems); the message names it and the override."""


class InvalidName(FsmemError, ValueError):
    """A unit id, digest or event id is not of the allowed shape (no '/', '..', NUL, ...)."""


class AlreadyExists(FsmemError):
    """The publish target already exists; nothing was replaced."""


class AmbiguousDigest(FsmemError, ValueError):
    """A digest prefix matches more than one block."""


class StorageError(FsmemError, OSError):
    """The filesystem refused a write (ENOSPC, EIO, ...); nothing was published."""


class MissingDependency(FsmemError, ImportError):
    """An optional extra is not installed; the message says what to pip install."""
