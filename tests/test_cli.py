"""The fsmem command: verbs, --root/--json, exit codes 0/1/2, messages naming the file."""

from __future__ import annotations

import json
import os

from conftest import cli_env, fsmem_process, make_png


def fsmem(*args: str, stdin: str | None = None, env: dict | None = None):
    return fsmem_process(list(args), input=stdin, timeout=60, env=cli_env(**(env or {})))


def test_init_commit_ls_show_fsck(tmp_path):
    root = str(tmp_path / "m")
    assert fsmem("init", "--root", root).returncode == 0
    png = tmp_path / "p.png"
    png.write_bytes(make_png())
    r = fsmem("commit", "--root", root, "--json", "--attach", str(png), "--summary", "s",
              "咖啡机的说明书")
    assert r.returncode == 0, r.stderr
    uid = json.loads(r.stdout)["unit_id"]
    r = fsmem("commit", "--root", root, stdin="from stdin 🐱")
    assert r.returncode == 0
    uid2 = r.stdout.strip()
    ls = json.loads(fsmem("ls", "--root", root, "--json", "--layer", "documents").stdout)
    assert {row["unit_id"] for row in ls} == {uid, uid2}
    show = fsmem("show", "--root", root, uid)
    assert show.returncode == 0 and "咖啡机的说明书" in show.stdout and "image/png 64×48" in show.stdout
    data = json.loads(fsmem("show", "--root", root, "--json", uid2).stdout)
    assert data["events"][0]["input"] == "from stdin 🐱"
    assert fsmem("fsck", "--root", root).returncode == 0


def test_root_from_environment(tmp_path):
    root = str(tmp_path / "envroot")
    r = fsmem("commit", "hello", env={"FSMEM_ROOT": root})
    assert r.returncode == 1 and "not an fsmem store" in r.stderr and not os.path.exists(root)
    assert fsmem("commit", "--init", "hello", env={"FSMEM_ROOT": root}).returncode == 0
    assert os.path.isdir(os.path.join(root, "documents"))


def test_exit_codes_and_messages(tmp_path):
    root = str(tmp_path / "m")
    assert fsmem("init", "--root", root).returncode == 0
    assert fsmem("frobnicate").returncode == 2
    assert fsmem("show").returncode == 2
    r = fsmem("show", "--root", root, "u-missing")
    assert r.returncode == 1 and "u-missing" in r.stderr
    r = fsmem("commit", "--root", root, "--attach", str(tmp_path / "nope.png"), "x")
    assert r.returncode == 1 and "nope.png" in r.stderr
    uid = fsmem("commit", "--root", root, "x").stdout.strip()
    manifest = os.path.join(root, "documents", uid, "manifest.json")
    with open(manifest, "w") as fh:
        fh.write("{broken")
    r = fsmem("fsck", "--root", root, "--json")
    assert r.returncode == 1
    findings = json.loads(r.stdout)
    assert findings[0]["kind"] == "damaged-unit" and uid in findings[0]["path"]
    r = fsmem("show", "--root", root, uid)
    assert r.returncode == 1 and "manifest.json" in r.stderr
    assert fsmem("fsck", "--root", root, "--fix").returncode == 0
    assert fsmem("fsck", "--root", root).returncode == 0


def test_demo_builds_a_browsable_memory(tmp_path):
    demo = tmp_path / "demo"
    r = fsmem("demo", str(demo))
    assert r.returncode == 0, r.stderr
    for step in ("append", "prune", "query", "recall", "timeline", "fsck"):
        assert step in r.stdout
    assert "咖啡机" in r.stdout and "clean" in r.stdout
    units = os.listdir(demo / "context")
    assert units and all((demo / "context" / u / "manifest.json").is_file() for u in units)
    png = [f for u in units for f in os.listdir(demo / "context" / u) if f.endswith(".png")]
    assert len(png) == 1
    tl = json.loads(fsmem("timeline", "--root", str(demo), "--json").stdout)
    assert len(tl) == 10 and tl[0]["timestamp"] == "2026-11-28T08:01:12.120000001+08:00"
    assert fsmem("demo", str(demo)).returncode == 2   # refuses a non-empty directory


def test_render_verb_and_memory_render_stay_within_budget(tmp_path):
    from fsmem import HeuristicEstimator, Memory
    demo = tmp_path / "demo"
    assert fsmem("demo", str(demo)).returncode == 0
    r = fsmem("render", "--root", str(demo), "--budget", "300")
    assert r.returncode == 0 and r.stdout.startswith("【对话时序】")
    assert HeuristicEstimator().count(r.stdout.rstrip("\n")) <= 300
    full = Memory.open(demo).render(100_000)
    assert "Breville BES870" in full and "400元/节" in full    # ample budget: everything whole
    mem = Memory.open(demo)
    mem.commit("钢琴课改到周六上午十点，老师是周老师，一节课三百元")
    mem.close()
    seen = fsmem("render", "--root", str(demo), "--budget", "600", "--query", "周老师 钢琴课")
    assert seen.returncode == 0 and seen.stdout.startswith("【相关记忆】"), seen.stderr
    assert "老师是周老师" in seen.stdout.split("【对话时序】")[0]   # the hit, before the timeline
    assert HeuristicEstimator().count(seen.stdout.rstrip("\n")) <= 600


def test_ls_limit_reads_only_the_newest_units(tmp_path):
    from fsmem import Event, Memory
    root = tmp_path / "m"
    mem = Memory.open(root)
    ids = [mem.commit_events([Event(input=f"note {i}")], summary=f"s{i}",
                             unit_id=f"u-2026010{i}T000000-00000000000{i}") for i in range(5)]
    mem.close()
    (root / "documents" / ids[0] / "manifest.json").write_bytes(b"{")   # never read with --limit
    rows = json.loads(fsmem("ls", "--root", str(root), "--json", "--limit", "2").stdout)
    assert [r["unit_id"] for r in rows] == ids[3:]
    assert fsmem("ls", "--root", str(root), "--limit", "0").returncode == 2
