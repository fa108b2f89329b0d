"""The living agent loop (issue 12), side by side with the package before it, in one run.

Two measures, each run in a fresh child process per package (the baseline is ``git archive``d
from ``--baseline``, default fa7f7be: main before issue 12; the current one is this worktree):

1. ``archives``: a synthetic 2,000-turn two-person conversation (Alice and Bob alternate;
   sessions of 40 turns a day apart, turns a minute apart), lived through ``Memory.append`` at
   the defaults (capacity 30, protected 10): the number of L2 units, events per unit
   (min/median/max), events left in L1, every event in exactly one layer, p50 ms per append.
2. ``retrieval``: fixtures/conversations (two year-long chats, English and Chinese, 392 turns,
   182 questions with evidence turns) lived in time order at the defaults, through ``append``
   (both packages) and through ``Memory.turn`` with the zero InjectOptions (current only: the
   baseline has no turn API), then every question is asked with the read-only query: evidence
   recall@5 = the share of questions with an evidence turn in one of the top 5 L2 units
   (``L2@5``), and with the events still in L1 credited as in the model's view (``view@5``).
   ``turns/hit`` is the mean number of turns a top-5 unit carries (what a recall brings back).

Both use ``durability="off"`` (atomic, not synced: the layer moves are the same) so the run
stays short on a shared machine. Usage:
    python benchmarks/bench_agent_loop.py [--baseline COMMIT] [--turns 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

__all__ = ["main"]

CHILD = r'''
import json, os, statistics, sys, tempfile, time
from fsmem import Event, Memory, Timestamp
sys.path.insert(0, os.path.join(sys.argv[1], "benchmarks"))
from _conversations import load_conversations

TURNS = int(sys.argv[2])
T0 = Timestamp.parse("2026-01-05T19:00:00+08:00").ns
MIN, DAY = 60 * 10**9, 86400 * 10**9
TOPICS = ["the garden and the tomatoes", "Bob's new job at the bakery", "the cat's vet visit",
          "a weekend hike to the lake", "the piano recital", "groceries for the week",
          "the leaking coffee machine", "Alice's trip to Chengdu", "a book about bridges",
          "the neighbour's loud dog", "saving for a bicycle", "the school reunion"]

def layers(mem):
    out = {}
    for layer in ("context", "documents"):
        for u in mem.units(layer):
            out[layer] = out.get(layer, 0) + 0
            for e in mem.document(u).events:
                out.setdefault(e.id, []).append(layer)
    return out

def archives(root):
    mem = Memory.open(root, durability="off")
    times, ids = [], []
    for k in range(TURNS):
        session, i = divmod(k, 40)
        who = "alice" if k % 2 == 0 else "bob"
        topic = TOPICS[(session * 3 + i // 8) % len(TOPICS)]
        ev = Event(timestamp=Timestamp(T0 + session * DAY + i * MIN, 8 * 3600), source=who,
                   input=f"{who}: about {topic}, turn {k}: " + ("what do you think?" if k % 2 == 0
                         else "I think we should talk it over tonight."))
        t = time.perf_counter()
        ids.append(mem.append(ev))
        times.append((time.perf_counter() - t) * 1000)
    sizes = [len(mem.document(u).events) for u in mem.units("documents")]
    where = {}
    for layer in ("context", "documents"):
        for u in mem.units(layer):
            for e in mem.document(u).events:
                where[e.id] = where.get(e.id, 0) + 1
    return {"l2_units": len(sizes), "min": min(sizes), "median": statistics.median(sizes),
            "max": max(sizes), "one_event_units": sum(1 for s in sizes if s == 1),
            "l1_events": len(mem.timeline()),
            "exactly_once": sorted(where) == sorted(ids) and set(where.values()) == {1},
            "append_p50_ms": statistics.median(times)}

def retrieval(root, via):
    sessions, questions = load_conversations()
    pairs = sorted(((s, t) for s in sessions for t in s["turns"]),
                   key=lambda p: (Timestamp.parse(p[1]["timestamp"]).ns, p[1]["id"]))
    mem = Memory.open(root, durability="off")
    for _s, t in pairs:
        ev = Event(id=t["id"], timestamp=Timestamp.parse(t["timestamp"]), source=t["speaker"],
                   input=f"{t['speaker']}: {t['text']}")
        mem.turn(ev) if via == "turn" else mem.append(ev)
    held = {u: {e.id for e in mem.document(u).events} for u in mem.units("documents")}
    in_view = {e.id for e in mem.timeline()}
    l2 = view = 0
    carried = []
    by_lang = {}
    for q in questions:
        ev = set(q["evidence"])
        top = [u for u, _ in mem.index.search(q["question"], 5)]
        carried += [len(held.get(u, ())) for u in top]
        hit = any(ev & held.get(u, set()) for u in top)
        seen = hit or bool(ev & in_view)
        l2 += hit
        view += seen
        lang = by_lang.setdefault(q["lang"], [0, 0, 0])
        lang[0] += hit; lang[1] += seen; lang[2] += 1
    sizes = [len(v) for v in held.values()]
    n = len(questions)
    return {"questions": n, "l2_at5": l2 / n, "view_at5": view / n,
            "by_lang": {k: {"l2_at5": v[0] / v[2], "view_at5": v[1] / v[2]}
                        for k, v in sorted(by_lang.items())},
            "turns_per_hit": sum(carried) / max(1, len(carried)),
            "l2_units": len(sizes), "l1_events": len(in_view),
            "events_per_unit": [min(sizes), statistics.median(sizes), max(sizes)] if sizes else []}

with tempfile.TemporaryDirectory() as tmp:
    out = {"archives": archives(os.path.join(tmp, "a")),
           "append": retrieval(os.path.join(tmp, "r1"), "append")}
    if hasattr(Memory, "turn"):
        out["turn"] = retrieval(os.path.join(tmp, "r2"), "turn")
print(json.dumps(out))
'''


def _run(pkg_root: str, turns: int) -> dict:
    env = {**os.environ, "PYTHONPATH": pkg_root}
    proc = subprocess.run([sys.executable, "-c", CHILD, REPO, str(turns)], cwd=pkg_root,
                          env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"child failed for {pkg_root}:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _baseline(commit: str, into: str) -> str:
    """The fsmem package as it was at ``commit``, extracted into ``into``."""
    archive = subprocess.run(["git", "-C", REPO, "archive", commit, "fsmem"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def _row(name: str, r: dict) -> str:
    return (f"| {name} | {r['l2_at5']:.3f} | {r['view_at5']:.3f} | "
            + " | ".join(f"{v['l2_at5']:.3f} / {v['view_at5']:.3f}" for v in r["by_lang"].values())
            + f" | {r['turns_per_hit']:.1f} | {r['l2_units']} | {r['l1_events']} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="fa7f7be", help="commit of the package before")
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        results = {f"before ({args.baseline})": _run(_baseline(args.baseline, tmp), args.turns),
                   "after (this tree)": _run(REPO, args.turns)}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{args.turns}-turn two-person conversation through append at the defaults (30/10):")
    print("| package | L2 units | events/unit min | median | max | one-event units | "
          "L1 events | exactly once | append p50 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for name, r in results.items():
        a = r["archives"]
        print(f"| {name} | {a['l2_units']} | {a['min']} | {a['median']} | {a['max']} | "
              f"{a['one_event_units']} | {a['l1_events']} | {a['exactly_once']} | "
              f"{a['append_p50_ms']:.1f} |")
    print("\nfixtures/conversations lived at the defaults, evidence recall@5:")
    langs = " | ".join(f"{k} L2 / view" for k in next(iter(results.values()))["append"]["by_lang"])
    print(f"| run | L2@5 | view@5 | {langs} | turns/hit | L2 units | L1 events |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(_row(f"{name}, append", r["append"]))
        if "turn" in r:
            print(_row(f"{name}, turn()", r["turn"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
