"""Crash sweeps over the HomeAgent paths that rewrite a store in place: context.json adoption,
legacy recall (a legacy JSON becomes a context unit) and cold conversion before distillation.
At every sampled crash point (every point under FSMEM_STRESS=1) no HomeAgent document or
context event is lost: each is still in its JSON file or in exactly one unit, and fsck is clean
after recovery."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import homeagent_gen as gen
from conftest import crash_sweep
from fsmem import Memory
from fsmem.homeagent.documents import legacy_id

CHILD = """
import sys
from fsmem import Memory
from fsmem.homeagent.context import adopt
mem = Memory.open(sys.argv[1])
adopt(mem)
print("recalled", mem.recall("咖啡机", top_k=1), flush=True)
mem.distill(max_age_s=0, max_access=10 ** 6)
print("distilled", flush=True)
"""


def _legacy_docs(root: Path) -> set[str]:
    out = set()
    for p in (root / "documents").glob("*.json"):
        try:
            if isinstance(json.loads(p.read_bytes() or b"null"), dict) and p.name != "settings.json":
                out.add(p.name)
        except ValueError:
            pass
    return out


def test_crash_sweep_adoption_legacy_recall_and_cold_conversion(tmp_path):
    template = gen.build(tmp_path / "template")
    docs = _legacy_docs(template)
    assert len(docs) >= 4
    context_events = len(json.loads((template / "context.json").read_bytes()))

    def check(root: Path, label: str) -> None:
        mem = Memory.open(root)        # recovery runs here
        units = Counter(u for layer in ("context", "documents", "stablemem")
                        for u in os.listdir(root / layer) if (root / layer / u).is_dir())
        assert all(c == 1 for c in units.values()), f"{label}: a unit in two layers: {units}"
        for name in docs:
            in_json = (root / "documents" / name).is_file()
            assert in_json or units[legacy_id(name)] == 1, f"{label}: {name} lost"
        if not (root / "context.json").exists():
            adopted = [u for u in units if (root / "context" / u).is_dir()
                       and "adopted_from" in mem.document(u).meta]
            assert len(adopted) == 1, f"{label}: context.json gone, its events not in context/"
            assert len(mem.document(adopted[0]).events) == context_events, label
        damage = [f for f in mem.fsck() if not f.kind.startswith("legacy")]   # the fixture's own odd files
        assert damage == [], f"{label}: {damage}"
    total, proc = crash_sweep(tmp_path, template, CHILD, check, sample=12, limit=2000)
    assert total > 30 and "distilled" in proc.stdout
