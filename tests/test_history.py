"""Updates keep history (issue 30 item 3): every version of a unit, oldest first, from any of
its ids (Python, `fsmem history`), and fsck checks the chain of `supersedes` links."""

from __future__ import annotations

import json

from conftest import run_cli

from fsmem.memory.facade import Memory
from fsmem.memory.reader import Reader


def _chain(root):
    mem = Memory.open(root, auto_prune=False)
    a = mem.commit("the door code is 1234", summary="door code")
    b = mem.update(a, "the door code is 5678")
    c = mem.update(b, "the door code is 9876")
    other = mem.commit("the bin goes out on monday")
    mem.close()
    return a, b, c, other


def test_history_lists_every_version_oldest_first_from_any_of_its_ids(tmp_path):
    a, b, c, other = _chain(tmp_path)
    r = Reader.open(tmp_path)
    for uid in (a, b, c):
        assert [d.id for d in r.history(uid)] == [a, b, c]
    assert [d.id for d in r.history(other)] == [other]
    texts = [d.events[0].input for d in r.history(b)]
    assert texts == ["the door code is 1234", "the door code is 5678", "the door code is 9876"]
    # search shows the newest only; the old versions stay whole on disk
    assert [h.unit_id for h in r.search("door code", count=False)] == [c]


def test_cli_history_prints_the_chain_and_marks_the_current_version(tmp_path):
    a, b, c, _ = _chain(tmp_path)
    out = run_cli("history", a, "--json", root=tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert [v["unit_id"] for v in got] == [a, b, c]
    assert [v["current"] for v in got] == [False, False, True]
    assert [v["supersedes"] for v in got] == ["", a, b]
    assert got[2]["text"] == "the door code is 9876"
    text = run_cli("history", c, root=tmp_path).stdout
    assert text.index(a) < text.index(b) < text.index(c) and "current" in text
    missing = run_cli("history", "nosuchunit", root=tmp_path)
    assert missing.returncode == 1 and "nosuchunit" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_fsck_checks_the_chain_of_updates(tmp_path):
    a, b, c, other = _chain(tmp_path)
    assert run_cli("fsck", root=tmp_path).stdout.strip() == "clean"
    mem = Memory.open(tmp_path, auto_prune=False)
    # two units that both claim to update b: two "current" versions of one memory
    fork = mem.commit("the door code is 0000", meta={"supersedes": b})
    bad = mem.commit("points nowhere sane", meta={"supersedes": "../etc"})
    mem.close()
    r = Reader.open(tmp_path)
    kinds = {(f.kind, f.unit) for f in r.fsck()}
    assert ("update-chain", fork) in kinds or ("update-chain", c) in kinds, kinds
    assert ("update-chain", bad) in kinds, kinds
    details = " ".join(f.detail for f in r.fsck() if f.kind == "update-chain")
    assert "updated twice" in details and "not a unit id" in details
    out = run_cli("fsck", root=tmp_path)
    assert out.returncode == 1 and "update-chain" in out.stdout


def test_fsck_accepts_an_update_whose_old_version_was_removed(tmp_path):
    """History removed by hand (or not in a partial export) is not damage: the update stands."""
    import shutil
    a, b, c, _ = _chain(tmp_path)
    shutil.rmtree(tmp_path / "documents" / a)
    assert run_cli("fsck", root=tmp_path).stdout.strip() == "clean"
    assert [d.id for d in Reader.open(tmp_path).history(c)] == [b, c]
