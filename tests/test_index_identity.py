"""The derived index's identity of a unit cannot collide, and saving it never gets in the way:
``rm -r`` + ``cp -a`` onto a reused inode is re-indexed (issue 16 item 10); a snapshot that
cannot be written (full disk) is not saved, reads go on and no partial generation is left
(item 11); saves run only under the writer lock (item 14)."""

from __future__ import annotations

import fcntl
import os
import shutil

import blake3
import pytest

from fsmem import Memory

from conftest import run_py


def _hits(mem: Memory, text: str) -> list[str]:
    return [h.unit_id for h in mem.query(text, 5, count=False)]


def _same_size_replacement(src: str, dst: str, old: bytes, new: bytes) -> None:
    """Copy unit ``src`` to ``dst`` with its text block's ``old`` word replaced by ``new``
    (same length): a valid unit of the same id whose manifest has the same size and, as
    ``cp -a`` of an older copy would leave it, the same mtime."""
    assert len(old) == len(new)
    shutil.copytree(src, dst)
    man_path = os.path.join(dst, "manifest.json")
    manifest = open(man_path, "rb").read()
    for name in os.listdir(dst):
        if not name.endswith(".txt"):
            continue
        data = open(os.path.join(dst, name), "rb").read()
        if old not in data:
            continue
        fresh = data.replace(old, new)
        digest = blake3.blake3(fresh).hexdigest()
        os.unlink(os.path.join(dst, name))
        with open(os.path.join(dst, digest + ".txt"), "wb") as fh:
            fh.write(fresh)
        manifest = manifest.replace(name[:-4].encode(), digest.encode())
    st = os.stat(man_path)
    with open(man_path, "wb") as fh:
        fh.write(manifest)
    os.utime(man_path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(man_path).st_size == st.st_size
    shutil.copystat(src, dst)   # the directory's mtime too (its arrival time in a layer)


def _rm_and_cp_a_reusing(unit: str, copy: str, old_ino: int) -> bool:
    """``rm -r unit && cp -a copy unit``, with the files copied in each order in turn until
    the new manifest lands on the old manifest's freed inode (ext4 hands freed inodes out
    again at once; the order decides which file gets which)."""
    names = sorted(os.listdir(copy))
    for k in list(range(len(names))) * 4:   # other processes may take a freed inode first
        shutil.rmtree(unit)
        os.mkdir(unit)
        for name in names[k:] + names[:k]:
            shutil.copy2(os.path.join(copy, name), os.path.join(unit, name))
        shutil.copystat(copy, unit)
        if os.stat(os.path.join(unit, "manifest.json")).st_ino == old_ino:
            return True
    return False


def test_rm_r_and_cp_a_onto_a_reused_inode_is_reindexed(root, tmp_path):
    mem = Memory.open(root, durability="off", auto_prune=False)
    uid = mem.commit("the garden gate squeaks at dawn", summary="gate")
    mem.commit("the bakery opens at seven", summary="bread")
    assert _hits(mem, "squeaks") == [uid]
    mem.close()   # the saved index knows the unit by its identity
    unit = os.path.join(root, "documents", uid)
    _same_size_replacement(unit, str(tmp_path / "copy"), b"squeaks", b"rattles")
    old_ino = os.stat(os.path.join(unit, "manifest.json")).st_ino
    reused = _rm_and_cp_a_reusing(unit, str(tmp_path / "copy"), old_ino)

    mem = Memory.open(root, durability="off", auto_prune=False)
    assert not [f for f in mem.fsck() if uid in str(f)]   # a valid unit
    assert _hits(mem, "rattles") == [uid]
    assert _hits(mem, "squeaks") == []
    mem.close()
    if not reused:
        pytest.skip("this filesystem did not reuse the inode (the answer above is still right)")


def test_full_disk_index_not_saved_reads_go_on(root):
    """RLIMIT_FSIZE makes the kernel refuse the index's big files (EFBIG: its vectors, saved
    for the fusion ranker) while the small files of units and the change feed still fit:
    query, reindex and close answer, no gen-* or delta is left half."""
    mem = Memory.open(root, durability="off", auto_prune=False, ranker="fusion")
    for i in range(70):
        mem.commit(f"note {i} about the orchard and pear tree number {i}", summary=f"n{i}")
    mem.close()
    index_dir = os.path.join(root, ".fsmem", "index")
    before = sorted(os.listdir(index_dir))
    proc = run_py(f"""
        import os, resource, signal
        from fsmem import Memory
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (98304, 98304))
        mem = Memory.open({str(root)!r}, durability="off", auto_prune=False, ranker="fusion")
        for i in range(70):   # enough changes that query wants to save the index
            mem.commit(f"more {{i}} pear", summary=f"m{{i}}")
        print(len(mem.query("orchard pear", 3)))
        print(mem.reindex())
        print(len(mem.query("pear tree number 7", 3)))
        mem.close()
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "140", "3", "ok"], proc.stdout + proc.stderr
    assert "index not saved" in proc.stderr
    assert sorted(os.listdir(index_dir)) == before   # nothing half-written stays
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert len(mem.index) == 140
    assert len(_hits(mem, "pear")) == 5


def test_save_only_under_the_writer_lock(root):
    mem = Memory.open(root, durability="off", auto_prune=False, lock_timeout=0.2)
    mem.commit("the lighthouse keeper's log", summary="log")
    assert mem.index.save()
    index_dir = os.path.join(root, ".fsmem", "index")
    gens = sorted(n for n in os.listdir(index_dir) if n.startswith("gen-"))
    fd = os.open(os.path.join(root, ".fsmem", "lock"), os.O_RDWR)
    try:   # another writer holds the lock (an open file description of our own: flock)
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert mem.index.save() is False
        assert sorted(n for n in os.listdir(index_dir) if n.startswith("gen-")) == gens
    finally:
        os.close(fd)
    assert mem.index.save()
    mem.close()


def test_two_processes_reindexing_and_querying(root):
    mem = Memory.open(root, durability="off", auto_prune=False)
    for i in range(20):
        mem.commit(f"entry {i} on the tide tables", summary=f"t{i}")
    mem.close()
    code = f"""
        from fsmem import Memory
        mem = Memory.open({str(root)!r}, durability="off", auto_prune=False)
        for i in range(6):
            mem.reindex()
            mem.commit(f"extra {{i}} tide")
            assert mem.query("tide tables", 3, count=False)
            mem.recall("extra tide", 1)
        mem.close()
        print("ok")
    """
    import subprocess
    import sys
    import textwrap
    from conftest import REPO
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=str(REPO),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "ok", err
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert mem.fsck() == []
    assert len(mem.index) == len(mem.units("documents"))


def _restore(src: str, dst: str) -> None:
    """``cp -a src dst``: every directory and file new (new inodes, new ctimes), the
    modification times and contents kept."""
    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copy2)


def test_a_store_restored_with_cp_a_is_not_reindexed(tmp_path):
    """A backup restored by ``cp -a``/``rsync -a`` gives every unit a new identity (inodes,
    directory ctimes), yet no unit changed: the first open checks each unit's manifest against
    the one it indexed and keeps the rows, instead of indexing the whole store again."""
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    mem = Memory.open(src, durability="off", auto_prune=False)
    uids = [mem.commit(f"note {i}: the heron fishes at pond {i}", summary=f"n{i}")
            for i in range(30)]
    assert _hits(mem, "heron pond 7")[0] == uids[7]
    mem.close()
    _restore(src, dst)
    edited = os.path.join(dst, "documents", uids[3])
    _same_size_replacement(edited, str(tmp_path / "copy"), b"heron", b"egret")
    shutil.rmtree(edited)
    _restore(str(tmp_path / "copy"), edited)   # one unit really changed in the backup

    mem = Memory.open(dst, durability="off", auto_prune=False)
    assert mem.index.last_sync == {"kept": 29, "reindexed": 1}   # open's sync
    stats = mem.index.sync(force=True)
    assert stats == {"added": 0, "removed": 0}, stats   # in step after it
    assert _hits(mem, "heron pond 7")[0] == uids[7]
    assert _hits(mem, "egret") == [uids[3]]
    mem.close()
    mem = Memory.open(dst, durability="off", auto_prune=False)   # the new identities saved
    assert mem.index.sync(force=True) == {"added": 0, "removed": 0}
    assert mem.index.last_sync == {"kept": 0, "reindexed": 0}
    assert _hits(mem, "egret") == [uids[3]]
    mem.close()


def test_an_index_saved_before_manifest_keys_loads_without_a_rebuild(root):
    """A snapshot without ``mkeys.npy`` (saved by an fsmem before manifest keys) is used as it
    is: its rows count as unknown (a unit under a new identity is indexed again, as then)."""
    mem = Memory.open(root, durability="off", auto_prune=False)
    uid = mem.commit("the lantern hangs by the well", summary="lantern")
    assert mem.index.save()
    mem.close()
    index_dir = os.path.join(root, ".fsmem", "index")
    gen = open(os.path.join(index_dir, "CURRENT")).read().strip()
    os.unlink(os.path.join(index_dir, gen, "mkeys.npy"))
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert _hits(mem, "lantern") == [uid]
    assert open(os.path.join(index_dir, "CURRENT")).read().strip() == gen   # not rebuilt
    assert list(mem.index.mkeys) == [0]
    mem.close()


def test_the_same_store_through_another_mount_keeps_every_identity(tmp_path):
    """Issue 28 item 4: a unit's identity holds no device number, so the store seen through a
    second mount (another device: bindfs, a FUSE passthrough, as one JuiceFS volume mounted on
    two hosts) is the same store to the index: nothing is indexed again or even re-checked.
    (``mount --bind`` keeps the device number, so it could not show this.)"""
    from fsmem import Reader
    from fsmem.search.index_entry import unit_ident
    from fuse_mounts import bindfs
    src = tmp_path / "store"
    mem = Memory.open(src, durability="off", auto_prune=False)
    uids = [mem.commit(f"document {i} about subject{i % 3}", summary=f"d{i}")
            for i in range(12)]
    assert mem.index.save()
    mem.close()
    with bindfs(src, tmp_path / "mnt") as mnt:
        assert os.stat(src).st_dev != os.stat(mnt).st_dev   # two devices, one store
        for u in uids:
            assert unit_ident(str(src / "documents" / u)) == \
                unit_ident(str(mnt / "documents" / u)) is not None, u
        reader = Reader.open(mnt)
        index = reader.index
        assert index.sync(force=True) == {"added": 0, "removed": 0}
        assert index.last_sync == {"kept": 0, "reindexed": 0}   # every identity the same
        assert [h.unit_id for h in reader.query("subject1", 3, count=False)]
        reader.close()


def _whole_second(path: str, t: int) -> None:
    os.utime(path, ns=(t * 10**9, t * 10**9))


def test_whole_second_times_fall_back_to_the_manifest_key(root):
    """Issue 28 item 4: where a filesystem keeps whole seconds (sshfs), inode, size and mtime
    cannot tell two versions of a manifest apart: the identity then folds in the manifest's
    key. A manifest rewritten in place (same inode, same size, its whole-second mtime put
    back, the directory untouched) is indexed again; an unchanged one is not."""
    mem = Memory.open(root, durability="off", auto_prune=False)
    uid = mem.commit("the garden gate squeaks at dawn", summary="gate")
    other = mem.commit("the bakery opens at seven", summary="bread")
    mem.close()
    t = int(os.stat(root).st_mtime) - 100
    for u in (uid, other):
        _whole_second(os.path.join(root, "documents", u, "manifest.json"), t)
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert mem.reconcile(full=True) == {"added": 0, "removed": 0}
    assert mem.index.last_sync == {"kept": 2, "reindexed": 0}   # new mtimes, same manifests
    assert mem.index.save()
    mem.close()

    mem = Memory.open(root, durability="off", auto_prune=False)   # unchanged: kept as it is
    assert mem.reconcile(full=True) == {"added": 0, "removed": 0}
    assert mem.index.last_sync == {"kept": 0, "reindexed": 0}
    mem.close()

    man = os.path.join(root, "documents", uid, "manifest.json")
    ino, size = os.stat(man).st_ino, os.stat(man).st_size
    data = open(man, "rb").read()
    assert data.count(b'"gate"') == 1
    with open(man, "r+b") as fh:   # in place: the same inode, the directory untouched
        fh.write(data.replace(b'"gate"', b'"yard"'))
    _whole_second(man, t)
    assert (os.stat(man).st_ino, os.stat(man).st_size) == (ino, size)
    mem = Memory.open(root, durability="off", auto_prune=False)
    assert not [f for f in mem.fsck() if uid in str(f)]   # a valid unit
    mem.reconcile(full=True)
    assert mem.index.last_sync == {"kept": 0, "reindexed": 1}
    assert _hits(mem, "yard") == [uid]
    assert _hits(mem, "bread") == [other]
    mem.close()


def test_l1_cache_with_whole_second_times_checks_the_manifest(root):
    """The L1 cache's stamp of a unit directory (inode, mtime, ctime; never the device)
    folds in the manifest's key where a time is a whole second: a manifest rewritten in
    place under such a stamp is read again; an unchanged unit is still a cache hit."""
    from fsmem import Event
    from fsmem.memory.l1cache import _cache_of, load_context
    mem = Memory.open(root, durability="off", auto_prune=False)
    mem.append(Event(source="alpha", input="the kettle sings", response="tea is ready"))
    [unit] = load_context(mem)
    _whole_second(unit.path, int(os.stat(unit.path).st_mtime) - 100)
    assert [u.manifest.events[0].source for u in load_context(mem)] == ["alpha"]
    cache = _cache_of(mem)
    hits = cache.hits
    assert [u.manifest.events[0].source for u in load_context(mem)] == ["alpha"]
    assert cache.hits == hits + 1   # unchanged: not read again
    man = os.path.join(unit.path, "manifest.json")
    data = open(man, "rb").read()
    with open(man, "r+b") as fh:   # in place: the directory's times do not move
        fh.write(data.replace(b'"alpha"', b'"omega"'))
    assert [u.manifest.events[0].source for u in load_context(mem)] == ["omega"]
    mem.close()
