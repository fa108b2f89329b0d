"""Export and import: a self-contained, versioned tar of unit directories (docs/FORMAT.md).

An archive is an uncompressed POSIX tar whose first entry, ``fsmem-archive.json``, is a header
(format name and version, creation time, and every unit with its layer, arrival time and the
BLAKE3 of its manifest bytes), followed by ``units/<unit-id>/<file>`` entries: each unit's
``manifest.json``, block files and ``vectors.npy`` byte for byte. Blocks are never re-encoded.

Import extracts everything into the store's staging area and verifies it (header, every
manifest decodes, every block's BLAKE3 and size, no stray entry) BEFORE anything is published;
then one journal entry publishes every new unit (a crash completes it on the next open).
Import is exactly once: a unit already in the store with the same content is skipped; the same
id with different content is refused, and the whole archive with it.
"""

from __future__ import annotations

import io
import logging
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
from fsmem.store.store import JournalEntry, Store, new_unit_id

__all__ = ["ARCHIVE_FORMAT", "ARCHIVE_VERSION", "HEADER_NAME", "ArchiveHeader", "ArchiveUnit",
           "ExportReport", "ImportReport", "export_archive", "import_archive",
           "publish_staged"]

log = logging.getLogger("fsmem.archive")

ARCHIVE_FORMAT = "fsmem-archive"
ARCHIVE_VERSION = 1
HEADER_NAME = "fsmem-archive.json"
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


class ArchiveHeader(msgspec.Struct, kw_only=True):
    """``fsmem-archive.json``: what the archive holds; new fields get defaults."""

    format: str
    version: int
    created_at: Timestamp
    hash: str = HASH_ALGORITHM
    store_format: int = FORMAT_VERSION
    tool: str = "fsmem"
    units: list[ArchiveUnit] = []


class ExportReport(msgspec.Struct, kw_only=True):
    path: str
    units: int
    bytes: int


class ImportReport(msgspec.Struct, kw_only=True):
    imported: list[str] = []
    skipped: list[str] = []


def _dec_hook(typ: type, obj: Any) -> Any:
    if typ is Timestamp:
        return Timestamp.parse(obj)
    raise NotImplementedError


_header_decoder = msgspec.json.Decoder(ArchiveHeader, dec_hook=_dec_hook)


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


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(mtime), 0o644
    tar.addfile(info, io.BytesIO(data))


def _add_file(tar: tarfile.TarFile, name: str, path: str, size: int, digest: str | None,
              mtime: float) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            raise ChecksumMismatch(f"{path}: not a regular file of the {size} bytes its "
                                   "manifest records; run fsmem fsck")
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = size, int(mtime), 0o444
        reader = _HashingReader(fd)
        tar.addfile(info, reader)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    if digest is not None and reader.hasher.hexdigest() != digest:
        raise ChecksumMismatch(f"{path}: bytes do not hash to {digest}; run fsmem fsck")


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


def export_archive(store: Store, out: str, *, layers: Sequence[str] | None = None,
                   since: object = None) -> ExportReport:
    """Write the units of ``layers`` (all by default) created at or after ``since`` into a
    new archive ``out`` (written beside it, then renamed: a failed export leaves nothing)."""
    for layer in layers or ():
        store.layer_dir(layer)  # ValueError naming an unknown layer
    since_ts = Timestamp.coerce(since, field="since") if since not in (None, "") else None
    units = _snapshot(store, list(layers or store.layers()), since_ts)
    header = ArchiveHeader(format=ARCHIVE_FORMAT, version=ARCHIVE_VERSION,
                           created_at=Timestamp.now(), units=[u for u, _, _, _ in units])
    out = os.path.abspath(out)
    tmp = f"{out}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh, \
                tarfile.open(fileobj=fh, mode="w", format=tarfile.PAX_FORMAT) as tar:
            _add_bytes(tar, HEADER_NAME, encode_pretty(header), header.created_at.unix())
            for unit, path, raw, manifest in units:
                mtime = unit.arrival_ns / 1e9
                _add_bytes(tar, f"units/{unit.id}/{MANIFEST}", raw, mtime)
                for name, size, digest in _unit_files(manifest):
                    if size < 0:
                        size = os.lstat(os.path.join(path, name)).st_size
                    _add_file(tar, f"units/{unit.id}/{name}", os.path.join(path, name),
                              size, digest, mtime)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    except FileNotFoundError as exc:
        _quiet_unlink(tmp)
        raise NotFound(f"{exc.filename}: vanished during export (a unit was removed or "
                       "moved); nothing written, run the export again") from exc
    except BaseException:
        _quiet_unlink(tmp)
        raise
    return ExportReport(path=out, units=len(units), bytes=os.path.getsize(out))


# -- import ---------------------------------------------------------------------------------

def _open_tar(path: str) -> tuple[tarfile.TarFile, IO[bytes] | None]:
    if path == "-":
        return tarfile.open(fileobj=sys.stdin.buffer, mode="r|"), None
    fh = open(path, "rb")
    try:
        return tarfile.open(fileobj=fh, mode="r|"), fh
    except (tarfile.TarError, OSError) as exc:
        fh.close()
        raise FormatError(f"{path}: entry {HEADER_NAME!r}: not a tar archive, or truncated: "
                          f"{exc}") from exc


def _read_header(tar: tarfile.TarFile, src: str) -> ArchiveHeader:
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
    if header.format != ARCHIVE_FORMAT or header.hash != HASH_ALGORITHM:
        raise FormatError(f"{src}: entry {HEADER_NAME}: format {header.format!r} hash "
                          f"{header.hash!r}, want {ARCHIVE_FORMAT!r} {HASH_ALGORITHM!r}")
    seen: set[str] = set()
    for u in header.units:
        check_name(u.id, f"unit id in {src} {HEADER_NAME}")
        if not valid_layer(u.layer) or u.id in seen:
            raise FormatError(f"{src}: entry {HEADER_NAME}: unit {u.id}: bad layer "
                              f"{u.layer!r} or listed twice")
        seen.add(u.id)
    return header


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dst: str, sync: bool) -> None:
    """Copy one entry into a new file in staging (exclusive create, never following links)."""
    fd = fsops.open_(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
    try:
        src = tar.extractfile(member)
        left = member.size
        while left > 0:
            chunk = src.read(min(CHUNK, left))  # type: ignore[union-attr]
            if not chunk:
                raise EOFError("unexpected end of data")
            fsops.write_all(fd, chunk)
            left -= len(chunk)
        if os.path.basename(dst) not in (MANIFEST, VECTORS):
            os.fchmod(fd, BLOCK_MODE)
        if sync:
            fsops.fsync(fd)
    finally:
        os.close(fd)


def _extract_all(tar: tarfile.TarFile, header: ArchiveHeader, store: Store, src: str,
                 staged: dict[str, str]) -> None:
    """Every unit entry into ``store.staging/<staging name>/``; ``staged`` maps unit id to
    its staging directory (the caller removes them on failure)."""
    listed = {u.id for u in header.units}
    sync = store.sync and store.sync_strategy == "fsync"
    name = HEADER_NAME
    try:
        while (member := tar.next()) is not None:  # stream mode: never seek back
            name = member.name
            parts = name.split("/")
            if len(parts) != 3 or parts[0] != "units" or parts[1] not in listed \
                    or not _FILE_RE.match(parts[2]):
                raise FormatError(f"{src}: entry {name!r}: not a file of a unit the header "
                                  "lists")
            if not member.isreg():
                raise FormatError(f"{src}: entry {name!r}: not a regular file")
            if parts[2] == MANIFEST and member.size > MAX_MANIFEST:
                raise FormatError(f"{src}: entry {name!r}: manifest too large")
            uid = parts[1]
            if uid not in staged:
                staged[uid] = os.path.join(store.staging, staging_name(uid))
                fsops.mkdir(staged[uid], 0o755)
            try:
                _extract_member(tar, member, os.path.join(staged[uid], parts[2]), sync)
            except FileExistsError as exc:
                raise FormatError(f"{src}: entry {name!r}: appears twice") from exc
        name = "end of archive"
        if sync:
            for path in staged.values():
                fsops.fsync_dir(path)
    except (tarfile.TarError, EOFError, msgspec.DecodeError) as exc:
        raise FormatError(f"{src}: entry {name!r}: truncated or unreadable: {exc}") from exc


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


def import_archive(mem: Any, src: str) -> ImportReport:
    """Read an archive into the store behind ``mem`` exactly once; all or nothing."""
    store: Store = mem.store
    tar, fh = _open_tar(src)
    staged: dict[str, str] = {}
    try:
        with tar:
            header = _read_header(tar, src)
            _extract_all(tar, header, store, src, staged)
        _verify_staged(header, staged, src)
        with store.locked():
            new, present = _plan(store, header, staged, src)
            layers = {u.id: (u.layer, u.arrival_ns) for u in header.units}
            publish_staged(store, [(staged.pop(uid), layers[uid][0], uid, layers[uid][1])
                                   for uid in new], "import")
    finally:
        if fh is not None:
            fh.close()
        for path in staged.values():
            shutil.rmtree(path, ignore_errors=True)
    for uid in new:
        mem._indexed(uid, layers[uid][0], added=True)
    queue = getattr(mem, "queue_vectors", None)   # deferred vectors: embedded after import
    if queue is not None:
        queue((layers[uid][0], uid) for uid in new)
    log.info("imported %d units from %s (%d already present)", len(new), src, len(present))
    return ImportReport(imported=new, skipped=present)


def _quiet_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
