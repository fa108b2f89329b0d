"""Know the filesystem a store lives on, and refuse a writer where fsmem's promises cannot hold.

At open a writer reads the mount that holds the store from ``/proc/self/mountinfo`` (its type
and, for FUSE, its subtype: ``fuse.juicefs``) and classifies it:

- **local**: ext4, XFS, Btrfs, tmpfs, ZFS, overlay, ... one kernel sees every writer;
- **shared**, allowed: JuiceFS, CephFS, GlusterFS, NFSv4: flock(2) excludes writers on other
  hosts (docs/RELIABILITY.md says what fsmem relies on for each);
- anything else (sshfs, bindfs, SMB, NFSv3, an unknown FUSE filesystem) is **refused** to a
  writer, with one line naming it and the override (``FSMEM_ALLOW_FS=<type>``, or
  ``allow_fs = "<type>"`` in ``.fsmem/config.toml``). Readers take no lock and work anywhere.

JuiceFS is let in only where its mount keeps no kernel metadata cache (``.config`` at the
mount's root says: ``--attr-cache 0 --entry-cache 0 --dir-entry-cache 0``, no negative-entry or
readdir cache): with the 1 s defaults a writer holding the lock can see a unit another host
has just moved as still there, and recovery acts on a name that is gone.

The name is not trusted alone: the writer lock is probed (two open file descriptions of the lock
file; the second must not get the lock the first holds), and a filesystem whose flock excludes
nothing is refused whatever its name. What was chosen is logged once per mount.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from dataclasses import dataclass

from fsmem.format.errors import FormatError, UnsafeFilesystem

__all__ = ["Mount", "mount_of", "kind_of", "check_writer", "LOCAL", "SHARED", "polling_needed",
           "allowed_by", "describe", "juicefs_caches"]

log = logging.getLogger("fsmem.store")

#: filesystems of one kernel: every writer is on this host, flock and rename are the kernel's
LOCAL = frozenset({
    "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "zfs", "jfs", "reiserfs",
    "bcachefs", "nilfs2", "overlay", "vfat", "exfat", "ntfs3", "hfsplus",
})
#: filesystems shared between hosts whose locks exclude writers everywhere (type -> name)
SHARED = {
    "fuse.juicefs": "JuiceFS",
    "ceph": "CephFS",
    "fuse.ceph-fuse": "CephFS",
    "fuse.ceph": "CephFS",
    "fuse.glusterfs": "GlusterFS",
    "glusterfs": "GlusterFS",
    "nfs4": "NFSv4",
}
#: why a known filesystem is refused (the rest: "not known to keep fsmem's promises")
_WHY = {
    "fuse.sshfs": "flock(2) excludes nothing across two sshfs mounts, and it reports whole-second "
                  "times and changing inode numbers",
    "fuse.bindfs": "flock(2) excludes nothing across two bindfs mounts",
    "fuse": "a FUSE filesystem that does not name its kind (bindfs, for one): fsmem cannot tell "
            "whether its flock(2) excludes writers on other mounts",
    "cifs": "SMB locks are not flock(2) locks",
    "smb3": "SMB locks are not flock(2) locks",
    "nfs": "NFSv3 has no flock(2) that excludes other hosts (use NFSv4)",
    "9p": "9p passes no locks to the host",
    "virtiofs": "virtio-fs shares a host directory whose other writers take no part in the lock",
}


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mountinfo: where, what type (``fuse.<subtype>`` for FUSE),
    its source and the mount's id (the log-once key)."""

    point: str
    fstype: str
    source: str
    mount_id: int


def _unescape(field: str) -> str:
    r"""mountinfo escapes space, tab, newline and backslash as \040, \011, \012, \134."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _parse(line: str) -> Mount | None:
    """``36 35 98:0 /mnt1 /mnt/a rw,noatime master:1 - ext3 /dev/root rw``: the fields after
    the "-" separator are the type, the source and the super options."""
    parts = line.split()
    try:
        sep = parts.index("-", 6)
        return Mount(point=_unescape(parts[4]), fstype=parts[sep + 1],
                     source=_unescape(parts[sep + 2]) if len(parts) > sep + 2 else "",
                     mount_id=int(parts[0]))
    except (ValueError, IndexError):
        return None


def mount_of(path: str, table: str | None = None) -> Mount | None:
    """The mount that holds ``path`` (its nearest existing ancestor, symlinks resolved): the
    longest mount point that contains it, the last mounted of equals. None where mountinfo
    cannot be read (not Linux)."""
    if table is None:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
                table = fh.read()
        except OSError:
            return None
    target, rest = os.path.abspath(path), ""
    while not os.path.exists(target) and os.path.dirname(target) != target:
        target, rest = os.path.dirname(target), os.path.join(os.path.basename(target), rest)
    target = os.path.join(os.path.realpath(target), rest).rstrip("/") or "/"
    best: Mount | None = None
    for line in table.splitlines():
        m = _parse(line)
        if m is None:
            continue
        inside = target == m.point or target.startswith(m.point.rstrip("/") + "/")
        if inside and (best is None or len(m.point) >= len(best.point)):
            best = m
    return best


def kind_of(fstype: str) -> str:
    """"local", "shared" or "refused"."""
    if fstype in LOCAL:
        return "local"
    if fstype in SHARED:
        return "shared"
    return "refused"


def polling_needed(path: str) -> bool:
    """Whether inotify misses changes made to ``path`` (a filesystem other hosts write to, or
    one fsmem does not know): watch then polls."""
    mount = mount_of(path)
    return mount is not None and kind_of(mount.fstype) != "local"


def allowed_by(setting: str, fstype: str) -> bool:
    """``FSMEM_ALLOW_FS`` / ``allow_fs``: a comma-separated list of types (``fuse.sshfs``, or
    the bare subtype ``sshfs``), or ``any``."""
    names = {n.strip() for n in setting.split(",") if n.strip()}
    return "any" in names or fstype in names or fstype.removeprefix("fuse.") in names


def describe(root: str, allow: str) -> dict[str, str]:
    """What ``fsmem doctor`` says of the store's filesystem: its type and mount point, its
    kind, whether a writer is let in, and how ``watch`` sees changes there."""
    mount = mount_of(root)
    if mount is None:
        return {"type": "unknown", "mount": "", "kind": "unknown", "writer": "allowed",
                "watch": "inotify"}
    kind = kind_of(mount.fstype)
    writer = ("allowed" if kind != "refused" else "allowed by override"
              if allowed_by(allow, mount.fstype) else
              f"refused ({_WHY.get(mount.fstype, 'unknown filesystem')}; "
              f"FSMEM_ALLOW_FS={mount.fstype} overrides)")
    if _juicefs_refusal(root, mount, allow):
        writer = (f"refused (the JuiceFS mount caches metadata: mount it with {_JUICEFS_ASK}; "
                  f"FSMEM_ALLOW_FS={mount.fstype} overrides, one host only)")
    return {"type": mount.fstype, "name": SHARED.get(mount.fstype, mount.fstype),
            "mount": mount.point, "kind": kind, "writer": writer,
            "watch": "inotify" if kind == "local" else
            "polling (inotify sees no other host's writes)"}


#: JuiceFS's kernel metadata caches (its mount's ``.config`` key -> the mount flag)
_JUICEFS_CACHES = {"AttrTimeout": "--attr-cache", "EntryTimeout": "--entry-cache",
                   "DirEntryTimeout": "--dir-entry-cache",
                   "NegEntryTimeout": "--negative-entry-cache"}
_JUICEFS_ASK = "--attr-cache 0 --entry-cache 0 --dir-entry-cache 0"


def juicefs_caches(point: str) -> list[str] | None:
    """The kernel metadata caches a JuiceFS mount keeps, as its mount flags (``--attr-cache
    1s``, ``--readdir-cache``), from ``<point>/.config`` (JuiceFS's own file, readable by
    the user who mounted it); [] for none, None when it cannot be read."""
    import msgspec  # lazy: only a writer on JuiceFS reads it

    from fsmem.format.layout import read_small  # lazy: only a writer on JuiceFS reads it
    try:
        config = msgspec.json.decode(read_small(os.path.join(point, ".config"), 1 << 20))
    except (OSError, ValueError, FormatError, msgspec.DecodeError) as exc:
        log.debug("%s/.config: %s", point, exc)
        return None
    if not isinstance(config, dict):
        return None
    kept = [f"{flag} {config[key] / 1e9:g}s" for key, flag in _JUICEFS_CACHES.items()
            if isinstance(config.get(key), (int, float)) and config[key] > 0]
    if config.get("ReaddirCache") is True:
        kept.append("--readdir-cache")
    return kept


def _juicefs_refusal(root: str, mount: Mount, allow: str) -> str:
    """Why a writer may not use this JuiceFS mount ("" when it may)."""
    if mount.fstype != "fuse.juicefs" or allowed_by(allow, mount.fstype):
        return ""
    kept = juicefs_caches(mount.point)
    if kept is None:
        if (mount.mount_id, "juicefs-config") not in _logged:
            _logged.add((mount.mount_id, "juicefs-config"))
            log.warning("%s: cannot read %s/.config to check that the JuiceFS mount keeps no "
                        "metadata cache (many hosts need %s)", root, mount.point, _JUICEFS_ASK)
        return ""
    if not kept:
        return ""
    return (f"{root}: on fuse.juicefs ({mount.point}): the mount caches metadata in the kernel "
            f"({', '.join(kept)}): a writer holding the lock could see another host's renames "
            f"late; fsmem will not write there. Mount it with {_JUICEFS_ASK} (and no "
            f"--negative-entry-cache or --readdir-cache) for many hosts; to write anyway (one "
            f"host only): FSMEM_ALLOW_FS=fuse.juicefs or allow_fs = \"fuse.juicefs\" in "
            f".fsmem/config.toml")


_logged: set[tuple[int, str]] = set()
_probed: dict[tuple[int, str], bool | None] = {}


def check_writer(root: str, lock_path: str | None, allow: str) -> Mount | None:
    """Refuse a writer on a filesystem that cannot keep the writer lock's promise
    (UnsafeFilesystem, one line naming the filesystem and the override); log once per mount
    what was chosen. ``lock_path``: the store's lock file, probed when it exists."""
    mount = mount_of(root)
    if mount is None:   # no mountinfo (not Linux): nothing to tell
        return None
    kind = kind_of(mount.fstype)
    overridden = kind == "refused" and allowed_by(allow, mount.fstype)
    if kind == "refused" and not overridden:
        why = _WHY.get(mount.fstype, "not known to keep fsmem's writer lock and rename promises")
        raise UnsafeFilesystem(
            f"{root}: on {mount.fstype} ({mount.point}): {why}; fsmem will not write there. "
            f"Readers work. To write anyway (one host only): FSMEM_ALLOW_FS={mount.fstype} or "
            f'allow_fs = "{mount.fstype}" in .fsmem/config.toml')
    refusal = _juicefs_refusal(root, mount, allow)
    if refusal:
        raise UnsafeFilesystem(refusal)
    key = (mount.mount_id, mount.fstype)
    if key not in _probed and lock_path and os.path.isfile(lock_path):
        _probed[key] = probe_flock(lock_path)   # once per mount: a property of the filesystem
    flock_ok = _probed.get(key)
    if flock_ok is False and not allowed_by(allow, mount.fstype):
        raise UnsafeFilesystem(
            f"{root}: on {mount.fstype} ({mount.point}): flock(2) excludes nothing (a second "
            f"descriptor took the lock the first held); fsmem will not write there. To write "
            f"anyway (one writer only): FSMEM_ALLOW_FS={mount.fstype}")
    if key not in _logged:
        _logged.add(key)
        label = SHARED.get(mount.fstype, mount.fstype)
        log.info("%s: store on %s (%s at %s): %s%s", root, label, mount.fstype, mount.point,
                 "allowed by override" if overridden else f"{kind}, allowed",
                 "" if flock_ok is None else f"; flock excludes: {'yes' if flock_ok else 'no'}")
    return mount


def probe_flock(lock_path: str) -> bool | None:
    """Two open file descriptions of ``lock_path``: while the first holds LOCK_EX the second
    must be refused. True: it excludes; False: it does not; None: the lock is held by another
    writer right now (which itself shows it excludes) or the file cannot be opened."""
    try:
        a = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(a, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True   # someone holds it: it excludes us
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                return False
            return None
        b = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            fcntl.flock(b, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            fcntl.flock(b, fcntl.LOCK_UN)
            return False
        finally:
            os.close(b)
    finally:
        os.close(a)   # releases a's lock
