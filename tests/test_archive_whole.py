"""A whole-store export (issue 30, item 4): units of every layer, graph.db, config.toml, access
statistics, pins and the change feed position travel; every entry is checked against the
archive's manifest before anything is published; ``-`` is stdout/stdin; old archives import.
All through the real CLI in child processes (conftest.run_cli) and a real shell pipe."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import PKG_ROOT, REPO, fsmem_process, run_cli
from fsmem import Memory
from fsmem.graph.graph import Graph
from fsmem.ingest.archive import HEADER_NAME, MANIFEST_NAME

V1 = Path(REPO) / "fixtures" / "archive" / "v1.tar"


def tree(root: Path) -> dict[str, str]:
    """Every file and directory under ``root`` with the sha256 of its bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def answers(root: Path) -> dict:
    """What a user asks a store: search, graph recall, config, access counts, pins."""
    mem = Memory.open(root, readonly=True)
    with mem:
        hits = {q: [(h.unit_id, h.layer, h.summary) for h in mem.query(q, count=False)]
                for q in ("coffee maker", "garage code", "water tank")}
        hits.update({f"search {q}": [(h.unit_id, h.layer, h.kind, round(h.score, 4),
                                      [f.text for f in h.facts])
                                     for h in mem.search(q, count=False)]
                     for q in ("coffee maker", "garage code", "water tank", "Boston")})
        units = {layer: sorted(mem.units(layer)) for layer in mem.layout.layers()}
        access = {uid: mem.document(uid).access_count for ids in units.values() for uid in ids}
    with Graph(root) as g:
        facts = sorted((r.source_name, r.relation_type, r.target_name)
                       for r in g.search("Boston").relations)
    cfg = run_cli("config", "--json", root=root)
    assert cfg.returncode == 0, cfg.stderr
    pins = {n: (root / ".fsmem" / n).read_bytes() for n in sorted(os.listdir(root / ".fsmem"))
            if n.startswith("pins")}
    return {"hits": hits, "units": units, "access": access, "facts": facts,
            "config": json.loads(cfg.stdout), "pins": pins}


@pytest.fixture
def src(tmp_path: Path) -> Path:
    """A store with every kind of state: capacity 6/2 in config.toml, L2 and L3 units,
    graph facts, access counts, a pinned recall in L1, another agent's L1."""
    root = tmp_path / "src"
    r = run_cli("init", "--capacity", "6", "--protected", "2", root=root)
    assert r.returncode == 0, r.stderr
    mem = Memory.open(root)
    mem.commit("My sister lives in Boston. I work at Airbus.", summary="family")
    assert mem.distill(max_age_s=0, max_access=100).distilled
    mem.commit("The coffee maker leaks under the water tank", summary="coffee",
               timestamp="2026-05-01T08:00:00Z")
    mem.commit("the garage code is 4711", summary="garage")
    for _ in range(3):
        assert mem.query("coffee maker")
    assert mem.recall("garage code")           # moved into L1 and pinned
    mem.close()
    other = Memory.open(root, agent="kitchen")
    other.append({"role": "user", "content": "the oven timer beeps twice",
                  "timestamp": "2026-05-02T09:00:00Z"})
    other.close()
    assert (root / "graph.db").exists() and (root / ".fsmem" / "pins.json").exists()
    return root


def test_whole_export_restores_every_answer(src, tmp_path):
    want = answers(src)
    assert want["facts"] and want["config"]["context_capacity"] == 6
    assert any(n > 1 for n in want["access"].values()) and want["pins"]
    assert "context@kitchen" in want["units"]
    out = tmp_path / "backup.tar"
    r = run_cli("export", str(out), root=src)
    assert r.returncode == 0, r.stderr
    assert "graph.db" in r.stdout and "config.toml" in r.stdout
    dst = tmp_path / "restored"
    r = run_cli("import", "--json", str(out), root=dst)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["version"] == 2 and rep["skipped"] == [] and rep["kept"] == []
    assert {"graph.db", "config.toml"} <= set(rep["restored"]) and rep["pins_restored"]
    assert rep["source_feed"]["id"] and rep["source_feed"]["last"] > 0
    assert answers(dst) == want
    assert Memory.open(dst).fsck() == []
    again = run_cli("import", str(out), root=dst)      # a second run adds nothing
    assert again.returncode == 0, again.stderr
    assert "imported 0 units" in again.stdout and "skipped" in again.stdout
    assert answers(dst) == want


def test_into_a_store_with_its_own_graph_and_config(src, tmp_path):
    out = tmp_path / "b.tar"
    assert run_cli("export", str(out), root=src).returncode == 0
    dst = tmp_path / "dst"
    assert run_cli("init", "--capacity", "40", root=dst).returncode == 0
    mine = Memory.open(dst)
    mine.commit("Anna lives in Paris.", summary="anna")
    mine.distill(max_age_s=0, max_access=100)
    mine.close()
    graph_before = (dst / "graph.db").read_bytes()
    r = run_cli("import", str(out), root=dst)
    assert r.returncode == 0, r.stderr
    assert "kept the store's own config.toml" in r.stdout
    assert "kept the store's own graph.db" in r.stdout
    assert (dst / "graph.db").read_bytes() == graph_before
    assert json.loads(run_cli("config", "--json", root=dst).stdout)["context_capacity"] == 40


def test_export_dash_pipes_into_import_dash(src, tmp_path):
    dst = tmp_path / "piped"
    fsmem = f"{shlex.quote(sys.executable)} -m fsmem.cli"
    cmd = (f"{fsmem} export - --root {shlex.quote(str(src))} | "
           f"{fsmem} import - --root {shlex.quote(str(dst))}")
    r = subprocess.run(["sh", "-c", f"set -e; {cmd}"], capture_output=True, text=True,
                       cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(PKG_ROOT)},
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "-").exists()
    assert "imported" in r.stdout and "exported" in r.stderr    # the archive owns stdout
    assert answers(dst) == answers(src)


def _cli_stdin(data: bytes, *args: str) -> subprocess.CompletedProcess:
    return fsmem_process(list(args), input=data, timeout=120, text=False)


@pytest.mark.parametrize("data", [b"", b"hello, not an archive\n" * 50])
def test_empty_or_junk_stdin_is_one_line(tmp_path, data):
    dst = tmp_path / "d"
    Memory.open(dst).close()
    before = tree(dst)
    r = _cli_stdin(data, "import", "-", "--root", str(dst))
    err = r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("fsmem: stdin") or "stdin" in err, err
    assert tree(dst) == before


def _members(path: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(path) as tar:
        return [(m, tar.extractfile(m).read()) for m in tar.getmembers()]


def _write(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for m, blob in members:
            m = tarfile.TarInfo(m.name) if m.size != len(blob) else m
            m.size = len(blob)
            tar.addfile(m, io.BytesIO(blob))
    return path


def _flip(blob: bytes, at: int) -> bytes:
    b = bytearray(blob)
    b[at % len(b)] ^= 0x01
    return bytes(b)


def test_tampered_archives_are_refused_with_nothing_stored(src, tmp_path):
    good = tmp_path / "good.tar"
    assert run_cli("export", str(good), root=src).returncode == 0
    members = _members(good)
    names = [m.name for m, _ in members]
    assert names[0] == HEADER_NAME and names[-1] == MANIFEST_NAME
    block = next(i for i, n in enumerate(names) if n.startswith("units/") and n.endswith(".txt"))
    graph = names.index("store/graph.db")
    config = names.index("store/config.toml")
    extra = tarfile.TarInfo("store/pins.json" if "store/pins.json" not in names
                            else "units/zz/manifest.json")

    def with_blob(i: int, blob: bytes) -> list:
        return [(m, blob if j == i else b) for j, (m, b) in enumerate(members)]
    cases = {
        "block": (with_blob(block, _flip(members[block][1], 3)), names[block]),
        "graph": (with_blob(graph, _flip(members[graph][1], 5000)), "store/graph.db"),
        "config": (with_blob(config, members[config][1].replace(b"6", b"7")),
                   "store/config.toml"),
        "header": (with_blob(0, members[0][1].replace(b'"whole": true', b'"whole": false')),
                   HEADER_NAME),
        "manifest": (with_blob(len(names) - 1, _flip(members[-1][1], 200)), ""),
        "missing": ([x for j, x in enumerate(members) if j != block], names[block]),
        "added": (members[:-1] + [(extra, b"{}")] + members[-1:], extra.name),
        "no manifest": (members[:-1], MANIFEST_NAME),
    }
    dst = tmp_path / "dst"
    Memory.open(dst).close()
    before = tree(dst)
    for label, (mem_list, needle) in cases.items():
        bad = _write(tmp_path / f"{label.replace(' ', '_')}.tar", mem_list)
        r = run_cli("import", str(bad), root=dst)
        assert r.returncode == 1, (label, r.stdout, r.stderr)
        line = r.stderr.strip()
        assert "\n" not in line and "Traceback" not in line and needle in line, (label, line)
        assert tree(dst) == before, label                  # nothing stored, byte for byte
    fresh = tmp_path / "fresh"                             # nor into a new directory
    r = run_cli("import", str(tmp_path / "graph.tar"), root=fresh)
    assert r.returncode == 1
    assert not (fresh / "graph.db").exists() and not (fresh / ".fsmem" / "config.toml").exists()


def test_an_old_archive_still_imports(tmp_path):
    with tarfile.open(V1) as tar:
        header = json.loads(tar.extractfile(HEADER_NAME).read())
        assert header["version"] == 1 and MANIFEST_NAME not in tar.getnames()
    dst = tmp_path / "d"
    r = run_cli("import", "--json", str(V1), root=dst)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["version"] == 1 and len(rep["imported"]) == 2 and rep["restored"] == []
    mem = Memory.open(dst)
    assert mem.query("coffee maker")[0].summary == "coffee"
    assert any("4711" in e.input for e in mem.timeline())
    assert mem.fsck() == []


def test_usage_mistakes_exit_2(tmp_path, src):
    r = run_cli("export", root=src)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_partial_export_carries_no_graph_or_config(src, tmp_path):
    out = tmp_path / "docs.tar"
    assert run_cli("export", "--layer", "documents", str(out), root=src).returncode == 0
    with tarfile.open(out) as tar:
        header = json.loads(tar.extractfile(HEADER_NAME).read())
    assert header["whole"] is False
    assert "graph.db" not in header["store_files"] and "config.toml" not in header["store_files"]
