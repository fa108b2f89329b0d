"""Export and import: a self-contained, versioned tar of a whole store (docs/FORMAT.md §10).

An archive (version 2) is an uncompressed POSIX tar whose first entry, ``fsmem-archive.json``,
is a header (format name and version, creation time, every unit with its layer, arrival time
and the BLAKE3 of its manifest bytes, and the change feed's id and last sequence number),
followed by ``units/<unit-id>/<file>`` entries (each unit's ``manifest.json``, block files and
``vectors.npy`` byte for byte), the store's own files under ``store/`` (``graph.db`` as a
SQLite backup, ``config.toml``, ``access.json``: the logged access statistics, ``pins.json``),
and last ``fsmem-manifest.json``: the size and BLAKE3 of every other entry.

Import extracts everything into the store's staging area and verifies it (every entry against
the manifest, the header, every unit manifest, every block's BLAKE3 and size, the settings,
the graph's integrity, no stray or missing entry) BEFORE anything is published; then one journal
entry publishes every new unit (a crash completes it on the next open), and the store's files
are restored where the target has none of its own: graph.db and config.toml only when the
target has no graph.db / config.toml (otherwise the target's are kept, and the report says
so: facts are not merged), access statistics for units the target has none for, pins for an
L1 without pins. Each of those is "fill what is missing", so running an interrupted import
again completes it. Import is exactly once: a unit already in the store with the same content
is skipped; the same id with different content is refused, and the whole archive with it.
Archives of version 1 (units only, no manifest) still import.
"""

from __future__ import annotations

import io
import logging
import sqlite3
import tempfile
import os
import re
import shutil
import stat
import sys
import tarfile
import uuid
from typing import IO, Any, Iterable, Sequence

import blake3
import msgspec

from fsmem.format import fsops as fsops
from fsmem.format.blocks import BLOCK_MODE, CHUNK, block_filename, verify_block
from fsmem.format.errors import AlreadyExists, ChecksumMismatch, FormatError, FsmemError, NotFound
from fsmem.format.model import (
    FORMAT_VERSION,
    HASH_ALGORITHM,
    Manifest,
    check_name,
    decode_manifest,
    encode,
    encode_pretty,
)
from fsmem.format.timestamps import Timestamp
from fsmem.format.unit import MANIFEST, VECTORS, read_manifest, read_vectors, staging_name
from fsmem.format.layout import valid_layer
from fsmem.store.access import AccessLog, AccessStats
from fsmem.store.changes import FEED_DIR, feed_id, read_recent
from fsmem.store.config import CONFIG_NAME, parse_value
from fsmem.store.pins import pin_units, read_pins
from fsmem.store.store import JournalEntry, Store, new_unit_id

__all__ = ["ARCHIVE_FORMAT", "ARCHIVE_VERSION", "HEADER_NAME", "MANIFEST_NAME", "ArchiveHeader",
           "ArchiveUnit", "ArchiveManifest", "FeedPosition", "ExportReport", "ImportReport",
           "export_archive", "import_archive", "publish_staged"]

log = logging.getLogger("fsmem.archive")

ARCHIVE_FORMAT = "fsmem-archive"
ARCHIVE_VERSION = 2
HEADER_NAME = "fsmem-archive.json"
MANIFEST_NAME = "fsmem-manifest.json"
STORE_FILES = ("graph.db", "config.toml", "access.json", "pins.json")
MAX_STORE_FILE = 1 << 34
MAX_HEADER = 256 << 20
MAX_MANIFEST = 64 << 20
_FILE_RE = re.compile(r"^(manifest\.json|vectors\.npy|[0-9a-f]{64}(\.[a-z0-9]{1,10})?)$")


class ArchiveUnit(msgspec.Struct, kw_only=True):
    """One unit as the header lists it."""

    id: str
    layer: str
    manifest_blake3: str
    manifest_size: int
    arrival_ns: int
    created_at: Timestamp
    events: int


class FeedPosition(msgspec.Struct, kw_only=True, frozen=True):
    """Where the exported store's change feed stood (``fsmem changes``): recorded, not
    replayed; the importing store keeps its own feed."""

    id: str = ""
    last: int = 0


class ArchiveHeader(msgspec.Struct, kw_only=True):
    """``fsmem-archive.json``: what the archive holds; new fields get defaults."""

    format: str
    version: int
    created_at: Timestamp
    hash: str = HASH_ALGORITHM
    store_format: int = FORMAT_VERSION
    tool: str = "fsmem"
    units: list[ArchiveUnit] = []
    whole: bool = False          # v2: every unit (no --layer/--since): graph and config carried
    store_files: list[str] = []  # v2: the ``store/<name>`` entries present
    feed: FeedPosition = FeedPosition()


class ArchiveMember(msgspec.Struct, array_like=True):
    size: int
    blake3: str


class ArchiveManifest(msgspec.Struct, kw_only=True):
    """``fsmem-manifest.json``, the last entry: every other entry's size and BLAKE3."""

    format: str = "fsmem-archive-manifest"
    hash: str = HASH_ALGORITHM
    members: dict[str, ArchiveMember] = {}


class ExportReport(msgspec.Struct, kw_only=True):
    path: str
    units: int
    bytes: int
    store_files: list[str] = []
    feed: FeedPosition = FeedPosition()


class ImportReport(msgspec.Struct, kw_only=True):
    imported: list[str] = []
    skipped: list[str] = []          # units already present with the same content
    version: int = 0                 # the archive's version
    restored: list[str] = []         # store files restored: graph.db, config.toml, ...
    kept: list[str] = []             # store files the target had: kept, the archive's unused
    access_restored: int = 0         # units whose access statistics came from the archive
    pins_restored: list[str] = []    # L1 layers whose pins came from the archive
    source_feed: FeedPosition = FeedPosition()

    def lines(self) -> list[str]:
        """The human report."""
        out = [f"imported {len(self.imported)} units, {len(self.skipped)} already present "
               "with the same content (skipped)"]
        if self.restored:
            out.append("restored " + ", ".join(self.restored))
        for what in self.kept:
            out.append(f"kept {what}")
        if self.source_feed.id:
            out.append(f"source change feed {self.source_feed.id} at "
                       f"{self.source_feed.last} (this store keeps its own feed)")
        return out


def _dec_hook(typ: type, obj: Any) -> Any:
    if typ is Timestamp:
        return Timestamp.parse(obj)
    raise NotImplementedError


_header_decoder = msgspec.json.Decoder(ArchiveHeader, dec_hook=_dec_hook)
_manifest_decoder = msgspec.json.Decoder(ArchiveManifest)
_access_decoder = msgspec.json.Decoder(dict[str, AccessStats])
_pins_decoder = msgspec.json.Decoder(dict[str, dict[str, int]])


# -- export ---------------------------------------------------------------------------------

def _read_regular(path: str, cap: int) -> bytes:
    """A file's bytes, refusing links, FIFOs and files over ``cap``."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            raise FormatError(f"{path}: not a regular file of at most {cap} bytes")
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read()
    finally:
        os.close(fd)


class _HashingReader:
    """Feeds a block file to tarfile while hashing it, so a damaged block is never exported."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.hasher = blake3.blake3()

    def read(self, n: int = CHUNK) -> bytes:
        data = os.read(self.fd, n)
        self.hasher.update(data)
        return data


def _snapshot(store: Store, layers: Sequence[str], since: Timestamp | None
              ) -> list[tuple[ArchiveUnit, str, bytes, Manifest]]:
    """Every unit to export with the manifest bytes read once (the archive holds those)."""
    out = []
    for layer in layers:
        for unit_id in store.iter_units(layer):
            path = store.unit_dir(layer, unit_id)
            try:
                raw = _read_regular(os.path.join(path, MANIFEST), MAX_MANIFEST)
                manifest = decode_manifest(raw, os.path.join(path, MANIFEST))
                arrival = os.stat(path).st_mtime_ns
            except FileNotFoundError:
                continue  # moved by another process while we listed; it is elsewhere
            if since is not None and manifest.created_at.ns < since.ns:
                continue
            unit = ArchiveUnit(id=unit_id, layer=layer, manifest_size=len(raw),
                               manifest_blake3=blake3.blake3(raw).hexdigest(),
                               arrival_ns=arrival, created_at=manifest.created_at,
                               events=len(manifest.events))
            out.append((unit, path, raw, manifest))
    return out


class _Writer:
    """A tar being written, recording every entry's size and BLAKE3 for the manifest."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.members: dict[str, ArchiveMember] = {}

    def add_bytes(self, name: str, data: bytes, mtime: float) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), int(mtime), 0o644
        self.tar.addfile(info, io.BytesIO(data))
        self.members[name] = ArchiveMember(len(data), blake3.blake3(data).hexdigest())

    def add_file(self, name: str, path: str, size: int, digest: str | None,
                 mtime: float) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if size < 0:
                size = st.st_size
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                raise ChecksumMismatch(f"{path}: not a regular file of the {size} bytes its "
                                       "manifest records; run fsmem fsck")
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = size, int(mtime), 0o444
            reader = _HashingReader(fd)
            self.tar.addfile(info, reader)  # type: ignore[arg-type]
        finally:
            os.close(fd)
        got = reader.hasher.hexdigest()
        if digest is not None and got != digest:
            raise ChecksumMismatch(f"{path}: bytes do not hash to {digest}; run fsmem fsck")
        self.members[name] = ArchiveMember(size, got)


def _unit_files(manifest: Manifest) -> list[tuple[str, int, str | None]]:
    files: dict[str, tuple[int, str | None]] = {}
    for ev in manifest.events:
        for ref in ev.blocks:
            if not ref.absent:   # a record only: no file
                files[block_filename(ref.digest, ref.mime)] = (ref.size, ref.digest)
    out = [(name, size, digest) for name, (size, digest) in sorted(files.items())]
    if manifest.vectors is not None:
        out.append((VECTORS, -1, None))
    return out


def _is_l1(layer: str) -> bool:
    return layer == "context" or layer.startswith("context@")


def _graph_backup(root: str, dst: str) -> bool:
    """graph.db as of now into ``dst`` through SQLite's backup API (a consistent copy while
    HomeAgent or a distil writes it); False when the store has none."""
    path = os.path.join(root, "graph.db")
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise FormatError(f"{path}: not a regular file; not exported")
    except FileNotFoundError:
        return False
    try:
        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            out = sqlite3.connect(dst)
            try:
                src.backup(out)
            finally:
                out.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        raise FsmemError(f"{path}: cannot back up the graph: {exc}") from exc
    return True


def _store_files(store: Store, units: list[tuple[ArchiveUnit, str, bytes, Manifest]],
                 whole: bool, tmpdir: str) -> dict[str, bytes | str]:
    """``store/<name>`` entry -> bytes (or a file path): the store's files as of now (the
    caller holds the writer lock, so they agree with the unit listing)."""
    out: dict[str, bytes | str] = {}
    ids = {u.id for u, _, _, _ in units}
    if whole:
        if _graph_backup(store.root, os.path.join(tmpdir, "graph.db")):
            out["graph.db"] = os.path.join(tmpdir, "graph.db")
        try:
            out["config.toml"] = _read_regular(os.path.join(store.meta, CONFIG_NAME), 64 << 10)
        except FileNotFoundError:
            pass
    logged = AccessLog(store.meta).stats()
    access = {uid: logged[uid] for uid in sorted(ids) if uid in logged}
    if access:
        out["access.json"] = msgspec.json.encode(access)
    pins: dict[str, dict[str, int]] = {}
    for layer in store.layers():
        if _is_l1(layer):
            mine = {uid: n for uid, n in read_pins(store, layer).items() if uid in ids}
            if mine:
                pins[layer] = mine
    if pins:
        out["pins.json"] = msgspec.json.encode(pins)
    return out


def _feed_position(store: Store) -> FeedPosition:
    try:
        return FeedPosition(id=feed_id(os.path.join(store.meta, FEED_DIR)),
                            last=read_recent(store.meta).last)
    except FsmemError as exc:
        log.warning("%s: change feed position not recorded: %s", store.meta, exc)
        return FeedPosition()


def export_archive(store: Store, out: str, *, layers: Sequence[str] | None = None,
                   since: object = None, stream: IO[bytes] | None = None) -> ExportReport:
    """Write the units of ``layers`` (all by default) created at or after ``since`` into a
    new archive ``out`` (written beside it, then renamed: a failed export leaves nothing), or
    into ``stream`` (``out`` is then only its name, e.g. "-" for stdout). A whole export (no
    ``layers``/``since``) carries graph.db and config.toml too; every export carries the
    access statistics and pins of its units and the change feed's position."""
    for layer in layers or ():
        store.layer_dir(layer)  # ValueError naming an unknown layer
    since_ts = Timestamp.coerce(since, field="since") if since not in (None, "") else None
    whole = not layers and since_ts is None
    with tempfile.TemporaryDirectory(prefix="fsmem-export-") as tmpdir:
        with store.locked():   # one point in time: units, graph, settings, statistics, feed
            units = _snapshot(store, list(layers or store.layers()), since_ts)
            files = _store_files(store, units, whole, tmpdir)
            feed = _feed_position(store)
        header = ArchiveHeader(format=ARCHIVE_FORMAT, version=ARCHIVE_VERSION,
                               created_at=Timestamp.now(), units=[u for u, _, _, _ in units],
                               whole=whole, store_files=sorted(files), feed=feed)
        if stream is not None:
            tar = tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT)
            _write_all(tar, header, units, files)
            tar.close()
            stream.flush()
            return ExportReport(path=out, units=len(units), bytes=-1,
                                store_files=header.store_files, feed=feed)
        out = os.path.abspath(out)
        tmp = f"{out}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            with os.fdopen(fd, "wb") as fh, \
                    tarfile.open(fileobj=fh, mode="w", format=tarfile.PAX_FORMAT) as tar:
                _write_all(tar, header, units, files)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, out)
        except BaseException:
            _quiet_unlink(tmp)
            raise
    return ExportReport(path=out, units=len(units), bytes=os.path.getsize(out),
                        store_files=header.store_files, feed=feed)


def _write_all(tar: tarfile.TarFile, header: ArchiveHeader,
               units: list[tuple[ArchiveUnit, str, bytes, Manifest]],
               files: dict[str, bytes | str]) -> None:
    """Header, units, store files, then the manifest of all of them."""
    w = _Writer(tar)
    now = header.created_at.unix()
    w.add_bytes(HEADER_NAME, encode_pretty(header), now)
    try:
        for unit, path, raw, manifest in units:
            mtime = unit.arrival_ns / 1e9
            w.add_bytes(f"units/{unit.id}/{MANIFEST}", raw, mtime)
            for name, size, digest in _unit_files(manifest):
                w.add_file(f"units/{unit.id}/{name}", os.path.join(path, name), size, digest,
                           mtime)
    except FileNotFoundError as exc:
        raise NotFound(f"{exc.filename}: vanished during export (a unit was removed or "
                       "moved); nothing written, run the export again") from exc
    for name, data in sorted(files.items()):
        if isinstance(data, bytes):
            w.add_bytes(f"store/{name}", data, now)
        else:
            w.add_file(f"store/{name}", data, -1, None, now)
    w.add_bytes(MANIFEST_NAME, encode_pretty(ArchiveManifest(members=w.members)), now)


# -- import ---------------------------------------------------------------------------------

def _open_tar(path: str) -> tuple[tarfile.TarFile, IO[bytes] | None]:
    where = "stdin" if path == "-" else path
    fh: IO[bytes] | None = None
    try:
        if path == "-":
            return tarfile.open(fileobj=sys.stdin.buffer, mode="r|"), None
        fh = open(path, "rb")
        return tarfile.open(fileobj=fh, mode="r|"), fh
    except (tarfile.TarError, OSError) as exc:
        if fh is not None:
            fh.close()
        if isinstance(exc, FileNotFoundError):
            raise NotFound(f"{path}: no such archive") from exc
        raise FormatError(f"{where}: not an fsmem archive (empty, not a tar archive, or "
                          f"truncated: {exc})") from exc


def _read_header(tar: tarfile.TarFile, src: str) -> tuple[ArchiveHeader, bytes]:
    try:
        first = tar.next()
        raw = tar.extractfile(first).read() if first is not None and first.isreg() \
            and first.size <= MAX_HEADER else b""  # type: ignore[union-attr]
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise FormatError(f"{src}: entry {HEADER_NAME!r}: truncated or unreadable: {exc}") \
            from exc
    if first is None or first.name != HEADER_NAME or not first.isreg():
        raise FormatError(f"{src}: not an fsmem archive (first entry is "
                          f"{first.name if first else 'missing'!r}, want {HEADER_NAME!r})")
    if first.size > MAX_HEADER:
        raise FormatError(f"{src}: entry {HEADER_NAME}: {first.size} bytes is too large")
    if len(raw) != first.size:
        raise FormatError(f"{src}: entry {HEADER_NAME}: truncated")
    try:
        probe = msgspec.json.decode(raw)
        if isinstance(probe, dict) and isinstance(probe.get("version"), int) \
                and probe.get("format") == ARCHIVE_FORMAT and probe["version"] > ARCHIVE_VERSION:
            raise FormatError(f"{src}: entry {HEADER_NAME}: archive version {probe['version']} "
                              f"is newer than this fsmem reads ({ARCHIVE_VERSION}); upgrade")
        header = _header_decoder.decode(raw)
    except (msgspec.DecodeError, ValueError) as exc:
        raise FormatError(f"{src}: entry {HEADER_NAME}: {exc}") from exc
    if header.format != ARCHIVE_FORMAT or header.hash != HASH_ALGORITHM or header.version < 1:
        raise FormatError(f"{src}: entry {HEADER_NAME}: format {header.format!r} hash "
                          f"{header.hash!r}, want {ARCHIVE_FORMAT!r} {HASH_ALGORITHM!r}")
    seen: set[str] = set()
    for u in header.units:
        check_name(u.id, f"unit id in {src} {HEADER_NAME}")
        if not valid_layer(u.layer) or u.id in seen:
            raise FormatError(f"{src}: entry {HEADER_NAME}: unit {u.id}: bad layer "
                              f"{u.layer!r} or listed twice")
        seen.add(u.id)
    if header.version < 2 and header.store_files:
        raise FormatError(f"{src}: entry {HEADER_NAME}: version 1 lists store files")
    for name in header.store_files:
        if name not in STORE_FILES:
            raise FormatError(f"{src}: entry {HEADER_NAME}: unknown store file {name!r}")
    return header, raw


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dst: str, sync: bool,
                    *, block: bool = True) -> ArchiveMember:
    """Copy one entry into a new file in staging (exclusive create, never following links);
    its size and BLAKE3."""
    fd = fsops.open_(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
    hasher = blake3.blake3()
    try:
        src = tar.extractfile(member)
        left = member.size
        while left > 0:
            chunk = src.read(min(CHUNK, left))  # type: ignore[union-attr]
            if not chunk:
                raise EOFError("unexpected end of data")
            hasher.update(chunk)
            fsops.write_all(fd, chunk)
            left -= len(chunk)
        if block and os.path.basename(dst) not in (MANIFEST, VECTORS):
            os.fchmod(fd, BLOCK_MODE)
        if sync:
            fsops.fsync(fd)
    finally:
        os.close(fd)
    return ArchiveMember(member.size, hasher.hexdigest())


class _Extracted:
    """What the archive put into staging: unit directories, the store files' directory,
    every entry's size and digest, and the manifest's bytes (version 2)."""

    def __init__(self) -> None:
        self.staged: dict[str, str] = {}     # unit id -> staging directory
        self.extras = ""                     # staging directory of the store/ entries
        self.seen: dict[str, ArchiveMember] = {}
        self.manifest: bytes | None = None

    def cleanup(self) -> None:
        for path in [*self.staged.values(), *([self.extras] if self.extras else [])]:
            shutil.rmtree(path, ignore_errors=True)


def _extract_all(tar: tarfile.TarFile, header: ArchiveHeader, store: Store, src: str,
                 got: _Extracted) -> None:
    """Every unit entry into ``store.staging/<staging name>/``, the store files into one
    staging directory of their own (the caller removes them on failure)."""
    listed = {u.id for u in header.units}
    sync = store.sync and store.sync_strategy == "fsync"
    name = HEADER_NAME
    try:
        while (member := tar.next()) is not None:  # stream mode: never seek back
            name = member.name
            if got.manifest is not None:
                raise FormatError(f"{src}: entry {name!r}: after {MANIFEST_NAME}, which must "
                                  "be the last entry")
            if not member.isreg():
                raise FormatError(f"{src}: entry {name!r}: not a regular file")
            if name == MANIFEST_NAME and header.version >= 2:
                if member.size > MAX_HEADER:
                    raise FormatError(f"{src}: entry {name!r}: too large")
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                if len(data) != member.size:
                    raise EOFError("unexpected end of data")
                got.manifest = data
                continue
            if name in got.seen:
                raise FormatError(f"{src}: entry {name!r}: appears twice")
            parts = name.split("/")
            if len(parts) == 2 and parts[0] == "store" and parts[1] in header.store_files:
                if not got.extras:
                    got.extras = os.path.join(store.staging, staging_name("archive-store"))
                    fsops.mkdir(got.extras, 0o755)
                got.seen[name] = _extract_member(tar, member, os.path.join(
                    got.extras, parts[1]), sync, block=False)
                continue
            if len(parts) != 3 or parts[0] != "units" or parts[1] not in listed \
                    or not _FILE_RE.match(parts[2]):
                raise FormatError(f"{src}: entry {name!r}: not a file of a unit the header "
                                  "lists")
            if parts[2] == MANIFEST and member.size > MAX_MANIFEST:
                raise FormatError(f"{src}: entry {name!r}: manifest too large")
            uid = parts[1]
            if uid not in got.staged:
                got.staged[uid] = os.path.join(store.staging, staging_name(uid))
                fsops.mkdir(got.staged[uid], 0o755)
            try:
                got.seen[name] = _extract_member(tar, member, os.path.join(
                    got.staged[uid], parts[2]), sync)
            except FileExistsError as exc:
                raise FormatError(f"{src}: entry {name!r}: appears twice") from exc
        name = "end of archive"
        if sync:
            for path in got.staged.values():
                fsops.fsync_dir(path)
    except (tarfile.TarError, EOFError, msgspec.DecodeError) as exc:
        raise FormatError(f"{src}: entry {name!r}: truncated or unreadable: {exc}") from exc


def _verify_manifest(header: ArchiveHeader, raw_header: bytes, got: _Extracted,
                     src: str) -> None:
    """Version 2: every entry (the header too) is in the manifest with its size and BLAKE3,
    and nothing the manifest lists is missing."""
    if header.version < 2:
        return
    if got.manifest is None:
        raise FormatError(f"{src}: entry {MANIFEST_NAME!r}: missing (a truncated archive?)")
    try:
        manifest = _manifest_decoder.decode(got.manifest)
    except (msgspec.DecodeError, ValueError) as exc:
        raise FormatError(f"{src}: entry {MANIFEST_NAME!r}: {exc}") from exc
    if manifest.hash != HASH_ALGORITHM:
        raise FormatError(f"{src}: entry {MANIFEST_NAME!r}: hash {manifest.hash!r}, want "
                          f"{HASH_ALGORITHM!r}")
    seen = {HEADER_NAME: ArchiveMember(len(raw_header), blake3.blake3(raw_header).hexdigest()),
            **got.seen}
    for name in sorted(set(manifest.members) | set(seen)):
        want, have = manifest.members.get(name), seen.get(name)
        if want is None:
            raise FormatError(f"{src}: entry {name!r}: not listed in {MANIFEST_NAME}")
        if have is None:
            raise FormatError(f"{src}: entry {name!r}: listed in {MANIFEST_NAME} but missing")
        if (want.size, want.blake3) != (have.size, have.blake3):
            raise ChecksumMismatch(f"{src}: entry {name!r}: does not match its digest in "
                                   f"{MANIFEST_NAME}")
    for name in header.store_files:
        if f"store/{name}" not in seen:
            raise FormatError(f"{src}: entry 'store/{name}': listed in {HEADER_NAME} but "
                              "missing")


def _verify_staged(header: ArchiveHeader, staged: dict[str, str], src: str) -> None:
    """Each listed unit is present, its manifest is the one the header names and decodes,
    and every block hashes to its digest with its recorded size."""
    for u in header.units:
        path = staged.get(u.id)
        if path is None:
            raise FormatError(f"{src}: unit {u.id}: listed in {HEADER_NAME} but has no entries")
        mpath = os.path.join(path, MANIFEST)
        try:
            raw = _read_regular(mpath, MAX_MANIFEST)
        except FileNotFoundError as exc:
            raise FormatError(f"{src}: entry 'units/{u.id}/{MANIFEST}': missing") from exc
        if len(raw) != u.manifest_size or blake3.blake3(raw).hexdigest() != u.manifest_blake3:
            raise ChecksumMismatch(f"{src}: entry 'units/{u.id}/{MANIFEST}': does not match "
                                   f"the digest in {HEADER_NAME}")
        _verify_unit_files(path, u.id, src)


def _verify_unit_files(path: str, uid: str, src: str) -> None:
    """verify_unit for a staged directory (whose name is not the unit id): the manifest
    decodes, every block has its size and BLAKE3, vectors match, nothing else is there."""
    where = f"{src}: entry 'units/{uid}/"
    try:
        manifest = read_manifest(path, expect_id=uid)
    except (FsmemError, ValueError) as exc:
        raise FormatError(f"{where}{MANIFEST}': {exc}") from exc
    if manifest.format > FORMAT_VERSION:
        raise FormatError(f"{where}{MANIFEST}': format {manifest.format} is newer than "
                          f"this fsmem reads ({FORMAT_VERSION}); upgrade")
    expected = {MANIFEST}
    for ev in manifest.events:
        for ref in ev.blocks:
            if ref.absent:   # a record only (format 4): no file to carry
                continue
            name = block_filename(ref.digest, ref.mime)
            expected.add(name)
            problem = verify_block(os.path.join(path, name), ref.digest, ref.size)
            if problem:
                raise ChecksumMismatch(f"{where}{name}': {problem}")
    if manifest.vectors is not None:
        expected.add(VECTORS)
        try:
            read_vectors(path, manifest)
        except (OSError, FormatError, ValueError) as exc:
            raise ChecksumMismatch(f"{where}{VECTORS}': {exc}") from exc
    for name in sorted(set(os.listdir(path)) - expected):
        raise FormatError(f"{where}{name}': not part of the unit's manifest")


def _comparable(m: Manifest) -> bytes:
    """A manifest without its access statistics (they change on query; the unit does not)."""
    return encode(msgspec.structs.replace(m, access_count=0, last_access=None))


def _plan(store: Store, header: ArchiveHeader, staged: dict[str, str], src: str
          ) -> tuple[list[str], list[str]]:
    """(unit ids to publish, unit ids already present); AlreadyExists for a conflict: the
    same unit id with other content, or an event id another unit of the store holds."""
    new, present = [], []
    for u in header.units:
        try:
            _, path = store.locate(u.id)
        except NotFound:
            new.append(u.id)
            continue
        mine = read_manifest(staged[u.id], expect_id=u.id)
        theirs = read_manifest(path)
        if _comparable(mine) != _comparable(theirs):
            raise AlreadyExists(f"{src}: unit {u.id}: the store already holds a unit with this "
                                f"id and different content ({path}); nothing imported")
        present.append(u.id)
    if new:
        _check_event_ids(store, {uid: staged[uid] for uid in new}, src)
    return new, present


def _check_event_ids(store: Store, staged: dict[str, str], src: str) -> None:
    incoming: dict[str, str] = {}
    for uid, path in staged.items():
        for ev in read_manifest(path, expect_id=uid).events:
            incoming[ev.id] = uid
    for layer in store.layers():
        for unit_id in store.iter_units(layer):
            try:
                manifest = read_manifest(store.unit_dir(layer, unit_id))
            except (FsmemError, OSError):
                continue
            for ev in manifest.events:
                if ev.id in incoming:
                    raise AlreadyExists(f"{src}: unit {incoming[ev.id]}: event {ev.id} is "
                                        f"already in {layer}/{unit_id}; nothing imported")


def publish_staged(store: Store, items: Iterable[tuple[str, str, str, int | None]],
                   op: str) -> None:
    """Publish staged unit directories ([(staging path, layer, unit id, arrival ns)]) through
    one journal entry: after its durable commit every unit appears, even across a crash."""
    entry = JournalEntry(id=new_unit_id("j"), op=op, created_at=Timestamp.now())
    items = list(items)
    for path, layer, uid, arrival in items:
        entry.publish.append((os.path.basename(path), layer, uid))
        if arrival is not None:
            entry.mtimes[uid] = arrival
    if not entry.publish:
        return
    for layer in {layer for _path, layer, _uid, _arrival in items}:
        store.ensure_layer(layer)   # an agent's L1 this store has not had yet
    with store.locked():
        if store.sync and store.sync_strategy == "syncfs":
            fsops.syncfs(store.staging)
        store.journal_commit(entry)
        store.journal_apply(entry)


class _StoreFiles(msgspec.Struct, kw_only=True):
    """The archive's store files, decoded and checked (before anything is published)."""

    config: bytes | None = None
    graph: str = ""
    access: dict[str, AccessStats] = {}
    pins: dict[str, dict[str, int]] = {}


def _verify_store_files(header: ArchiveHeader, got: _Extracted, src: str) -> _StoreFiles:
    out = _StoreFiles()
    for name in header.store_files:
        path = os.path.join(got.extras, name)
        where = f"{src}: entry 'store/{name}'"
        if name == "graph.db":
            try:
                db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
                try:
                    rows = [r[0] for r in db.execute("PRAGMA integrity_check")]
                finally:
                    db.close()
            except sqlite3.Error as exc:
                raise FormatError(f"{where}: not a SQLite database: {exc}") from exc
            if rows != ["ok"]:
                raise FormatError(f"{where}: integrity_check: {'; '.join(rows[:3])}")
            out.graph = path
            continue
        raw = _read_regular(path, 64 << 10 if name == "config.toml" else MAX_HEADER)
        try:
            if name == "config.toml":
                _check_config(raw, where)
                out.config = raw
            elif name == "access.json":
                out.access = _access_decoder.decode(raw)
            elif name == "pins.json":
                out.pins = _pins_decoder.decode(raw)
                for layer in out.pins:
                    if not _is_l1(layer) or not valid_layer(layer):
                        raise FormatError(f"{where}: {layer!r} is not an L1 layer")
        except (msgspec.DecodeError, ValueError) as exc:
            raise FormatError(f"{where}: {exc}") from exc
    return out


def _check_config(raw: bytes, where: str) -> None:
    """The settings parse as this fsmem reads them (a store it restores must open)."""
    if sys.version_info >= (3, 11):
        import tomllib  # lazy: only an import with settings needs it
    else:  # Python 3.10: the same parser from PyPI
        import tomli as tomllib  # lazy: as above
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise FormatError(f"{where}: not valid UTF-8 TOML: {exc}") from exc
    for key, value in data.items():
        parse_value(key, value, where)


def _restore_store_files(store: Store, files: _StoreFiles, units: dict[str, str],
                         rep: ImportReport) -> None:
    """Under the writer lock, after the units are published: each store file only where the
    target has none of its own (so a second run completes an interrupted first)."""
    config = os.path.join(store.meta, CONFIG_NAME)
    if files.config is not None:
        if not os.path.lexists(config):
            store.write_file_atomic(config, files.config)
            rep.restored.append("config.toml")
        elif _read_regular(config, 64 << 10) != files.config:
            rep.kept.append("the store's own config.toml (the archive's differs; not applied)")
    graph = os.path.join(store.root, "graph.db")
    if files.graph:
        if not any(os.path.lexists(graph + x) for x in ("", "-wal", "-journal")):
            fsops.link(files.graph, graph)
            if store.sync:
                fsops.fsync_dir(store.root)
            rep.restored.append("graph.db")
        else:
            rep.kept.append("the store's own graph.db (the archive's facts are not merged)")
    access = {uid: s for uid, s in files.access.items() if uid in units}
    if access:
        rep.access_restored = len(AccessLog(store.meta).restore(access))
        if rep.access_restored:
            rep.restored.append(f"access statistics of {rep.access_restored} units")
    for layer, pins in sorted(files.pins.items()):
        ids = [uid for uid in pins if units.get(uid) == layer
               and os.path.isdir(store.unit_dir(layer, uid))]
        if ids and not read_pins(store, layer):
            pin_units(store, ids, layer)
            rep.pins_restored.append(layer)
            rep.restored.append(f"pins of {layer}")


def import_archive(mem: Any, src: str) -> ImportReport:
    """Read an archive (a path, or "-" for stdin) into the store behind ``mem`` exactly
    once; every entry is verified before anything is published, or nothing is stored."""
    store: Store = mem.store
    where = "stdin" if src == "-" else src
    tar, fh = _open_tar(src)
    got = _Extracted()
    try:
        with tar:
            header, raw_header = _read_header(tar, where)
            _extract_all(tar, header, store, where, got)
        _verify_manifest(header, raw_header, got, where)
        _verify_staged(header, got.staged, where)
        files = _verify_store_files(header, got, where)
        rep = ImportReport(version=header.version, source_feed=header.feed)
        with store.locked():
            new, present = _plan(store, header, got.staged, where)
            layers = {u.id: (u.layer, u.arrival_ns) for u in header.units}
            publish_staged(store, [(got.staged.pop(uid), layers[uid][0], uid, layers[uid][1])
                                   for uid in new], "import")
            rep.imported, rep.skipped = new, present
            _restore_store_files(store, files, {u: layers[u][0] for u in new + present}, rep)
    finally:
        if fh is not None:
            fh.close()
        got.cleanup()
    for uid in new:
        mem._indexed(uid, layers[uid][0], added=True)
    queue = getattr(mem, "queue_vectors", None)   # deferred vectors: embedded after import
    if queue is not None:
        queue((layers[uid][0], uid) for uid in new)
    log.info("imported %d units from %s (%d already present)", len(new), where, len(present))
    return rep


def _quiet_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
