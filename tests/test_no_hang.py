"""No verb hangs or crashes on a FIFO or a directory in place of any ``.fsmem/`` file
(issue 29, item 3).

A real store is built by the verbs themselves (commit, append, prune, recall, query,
distill, watch --once), so the files damaged are the ones fsmem really writes. Then, for each
file and each kind of damage (a FIFO, a directory), a child process runs every verb on a
fresh copy of the store with the damage planted, under a deadline (generous: the check is
"it finished", not "it was fast"), and reports any traceback; afterwards ``fsck --fix`` is
run, then a commit and a query of it must work and a second fsck is clean or names the file.

The default run damages a representative set of files (every kind of store file: the access
log, the feed, the epoch, the config, the index's CURRENT, meta.json and an array, graph.db,
the ledger, the locks, the marker, an old release's SEEN); FSMEM_STRESS=1 damages every file
found under ``.fsmem/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PKG_ROOT, REPO, STRESS

# The verbs, in the order the child runs them (each on its own fresh damaged copy).
VERBS: dict[str, list[str]] = {
    "query": ["query", "alpha"],
    "search": ["search", "alpha"],
    "render": ["render", "--budget", "500"],
    "fsck": ["fsck"],
    "commit": ["commit", "delta epsilon"],
    "append": ["append", "--input", "more alpha", "--response", "noted"],
    "recall": ["recall", "alpha"],
    "prune": ["prune", "--capacity", "1", "--protected", "0"],
    "distill": ["distill", "--max-age", "0", "--max-access", "1000"],
    "snapshot": ["snapshot", "{snap}"],
    "watch": ["watch", "--once"],
    "fsck --fix": ["fsck", "--fix"],
}
# Files a store cannot do without (its identity, its lock, its settings, the directory that
# keeps what was set aside): a verb may refuse with a clean one-line error naming the file. Every other file is derived state: every verb
# works around it (rebuilds or ignores it).
ESSENTIAL = ("marker.json", "lock", "config.toml", "quarantine")

_BUILD = r"""
import os, sys
from fsmem.interfaces.cli.main import main
root = sys.argv[1]
def run(*argv):
    rc = main(["--root", root, *argv])
    assert rc == 0, (argv, rc)
run("init")
run("commit", "alpha beta gamma")
run("commit", "Bob likes jazz.")
run("commit", "Carol plays chess on sundays")
for i in range(3):
    run("append", "--input", f"alpha question {i}", "--response", f"answer {i}")
run("prune", "--capacity", "1", "--protected", "0")
run("query", "alpha")
run("recall", "chess")
run("distill", "--max-age", "0", "--max-access", "1000")
os.makedirs(os.path.join(root, "inbox"), exist_ok=True)
with open(os.path.join(root, "inbox", "note.txt"), "w") as fh:
    fh.write("an inbox note about alpha")
run("watch", "--once")
run("snapshot", root + ".snap")
"""

_DRIVER = r"""
import contextlib, faulthandler, io, json, os, shutil, sys, traceback
from fsmem.interfaces.cli.main import main
template, work, kind, deadline = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
verbs = json.loads(sys.argv[5])
rels = sys.argv[6:]

def plant(root, rel):
    path = os.path.join(root, ".fsmem", rel)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.mkdir(path)
        with open(os.path.join(path, "inside"), "w") as fh:
            fh.write("x")

def run(root, argv):
    out, err = io.StringIO(), io.StringIO()
    faulthandler.dump_traceback_later(deadline, exit=True)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(["--root", root, *argv])
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                rc = "traceback"
                traceback.print_exc()
    finally:
        faulthandler.cancel_dump_traceback_later()
    return rc, out.getvalue(), err.getvalue()

n = 0
for rel in rels:
    for verb, argv in verbs.items():
        n += 1
        root = os.path.join(work, f"s{n}")
        shutil.copytree(template, root, symlinks=True)
        plant(root, rel)
        print(json.dumps({"file": rel, "verb": verb, "start": True}), flush=True)
        argv = [a.replace("{snap}", root + ".snap") for a in argv]
        rc, out, err = run(root, argv)
        print(json.dumps({"file": rel, "verb": verb, "rc": rc, "err": err[-3000:],
                          "out": out[-3000:]}), flush=True)
        if verb != "fsck --fix":
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(root + ".snap", ignore_errors=True)
            continue
        # the last verb's copy: repaired by fsck --fix, it must be usable
        after = {}
        for name, a in (("commit", ["commit", "zeta eta theta"]), ("query", ["query", "theta"]),
                        ("fsck", ["fsck"])):
            after[name] = run(root, a)
        print(json.dumps({"file": rel, "verb": "after", "rc": {k: v[0] for k, v in after.items()},
                          "out": {k: v[1][-2000:] for k, v in after.items()},
                          "err": {k: v[2][-2000:] for k, v in after.items()}}), flush=True)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(root + ".snap", ignore_errors=True)
"""

# Representative files (relative to .fsmem/; graph.db is in the root): one of each kind.
DEFAULT = ["access.log", "epoch", "config.toml", "changes/ID", "changes/*.jsonl",
           "index/CURRENT", "index/gen-*/meta.json", "index/gen-*/ids_utf8.npy", "index/SEEN",
           "../graph.db", "inbox.ledger", "watch.lock", "lock", "marker.json", "access.state",
           "pins.json", "legacy-reported", "maintenance", "vectors", "quarantine"]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("nohang")
    root = base / "store"
    proc = subprocess.run([sys.executable, "-c", _BUILD, str(root)], capture_output=True,
                          text=True, cwd=str(REPO), timeout=300,
                          env={**os.environ, "PYTHONPATH": str(PKG_ROOT)})
    assert proc.returncode == 0, proc.stderr
    shutil.rmtree(f"{root}.snap")
    return root


def _store_files(root: Path) -> list[str]:
    meta = root / ".fsmem"
    files = sorted(str(p.relative_to(meta)) for p in meta.rglob("*")
                   if p.is_file() and not p.is_symlink())
    return files + ["../graph.db"] * (root / "graph.db").is_file()


def _expand(root: Path, pattern: str) -> str:
    """A DEFAULT entry made a real path (a glob picks the first match; a missing file is
    planted anyway: an old release's file, or one a verb writes later)."""
    matches = sorted((root / ".fsmem").glob(pattern))
    return str(matches[0].relative_to(root / ".fsmem")) if matches else pattern


def test_template_has_the_store_files(template):
    """The representative set is real: these files exist in a store the verbs built."""
    files = _store_files(template)
    for want in ("access.log", "epoch", "config.toml", "changes/ID", "index/CURRENT",
                 "../graph.db", "inbox.ledger", "watch.lock", "lock", "marker.json"):
        assert want in files, (want, files)


def _check(template: Path, tmp_path: Path, kind: str, rels: list[str]) -> None:
    deadline = 60.0
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(template), str(tmp_path), kind, str(deadline),
         json.dumps(VERBS), *rels],
        capture_output=True, text=True, cwd=str(REPO),
        timeout=deadline * (len(VERBS) + 3) * len(rels) + 60,
        # (the default run skips the fsyncs, which only cost time on a shared disk here)
        env={**os.environ, "PYTHONPATH": str(PKG_ROOT),
             **({} if STRESS else {"FSMEM_DURABILITY": "off"})})
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    done = [r for r in lines if "rc" in r]
    problems = []
    if proc.returncode != 0:
        last = lines[-1] if lines else {}
        problems.append(f"child exit {proc.returncode} at {last} (a hang or a crash):\n"
                        f"{proc.stderr[-4000:]}")
    for r in done:
        rel, verb = r["file"], r["verb"]
        essential = os.path.basename(rel) in ESSENTIAL
        if verb == "after":
            rc, out, err = r["rc"], r["out"], r["err"]
            if essential and rc["commit"] != 0:
                # an essential file fsck --fix cannot rebuild: a clean error naming it
                if "Traceback" in err["commit"] or rel.split("/")[-1] not in err["commit"]:
                    problems.append(f"{kind} {rel}: after fsck --fix, commit: {err['commit']}")
                continue
            if rc["commit"] != 0 or rc["query"] != 0 or "zeta" not in out["query"]:
                problems.append(f"{kind} {rel}: store unusable after fsck --fix: {r}")
            if rc["fsck"] != 0 and os.path.basename(rel) not in out["fsck"] + err["fsck"]:
                problems.append(f"{kind} {rel}: fsck after --fix neither clean nor naming "
                                f"the file: {out['fsck']}{err['fsck']}")
            continue
        rc, err = r["rc"], r["err"]
        if rc == "traceback" or "Traceback" in err:
            problems.append(f"{kind} {rel}: {verb}: a traceback:\n{err}")
        elif verb.startswith("fsck"):
            if rc not in (0, 1):
                problems.append(f"{kind} {rel}: {verb}: exit {rc}: {err}")
            elif verb == "fsck" and not (kind == "dir" and (template / ".fsmem" / rel).is_dir()) \
                    and (rc != 1 or os.path.basename(rel) not in r["out"] + err):
                problems.append(f"{kind} {rel}: fsck does not name the damage: {r['out']}")
        elif rc != 0 and not (essential and os.path.basename(rel) in err):
            problems.append(f"{kind} {rel}: {verb}: exit {rc} (a derived file must be "
                            f"rebuilt or ignored): {err}")
    assert not problems, "\n\n".join(problems)
    assert len(done) == len(rels) * (len(VERBS) + 1)


@pytest.mark.parametrize("kind", ["fifo", "dir"])
@pytest.mark.parametrize("part", [0, 1])
def test_damaged_store_file_no_verb_hangs(template, tmp_path, kind, part):
    rels = [_expand(template, p) for p in DEFAULT]
    _check(template, tmp_path, kind, rels[part::2])


@pytest.mark.stress
@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_every_store_file_no_verb_hangs(template, tmp_path, kind):
    files = _store_files(template)
    assert len(files) > 10
    # every file found, and the representative ones a store may lack (planted anyway)
    files += [f for f in (_expand(template, p) for p in DEFAULT) if f not in files]
    _check(template, tmp_path, kind, files)
