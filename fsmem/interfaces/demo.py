"""``fsmem demo``: build a memory from the shipped conversation, one readable step at a time."""

from __future__ import annotations

import os
import sys
from importlib import resources
from typing import Any

from fsmem.format.event_json import events_from_jsonl
from fsmem.format.model import encode
from fsmem.format.views import event_text
from fsmem.memory.facade import Memory
from fsmem.store.config import write_config

__all__ = ["run_demo"]


_quiet = False


def _print(text: str) -> None:
    if not _quiet:   # with --json, stdout carries only the JSON document
        print(text)


def _say(title: str, lines: list[str] | str = ()) -> None:
    _print(f"\n== {title}")
    for line in [lines] if isinstance(lines, str) else lines:
        _print(f"   {line}")


def _short(text: str, n: int = 90) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= n else text[:n] + f"…(+{len(text) - n})"


def run_demo(directory: str, *, as_json: bool = False) -> int:
    """Append a Chinese/English conversation (tools, an image) with a small L1, so prune runs;
    then query, recall and show the timeline. Leaves ``directory`` to browse."""
    data = resources.files("fsmem.interfaces") / "demo_data"
    with resources.as_file(data) as data_dir:
        events = events_from_jsonl((data_dir / "conversation.jsonl").read_text("utf-8"),
                                   "conversation.jsonl", base_dir=str(data_dir))
    global _quiet
    if os.path.isdir(directory) and os.listdir(directory):
        print(f"fsmem demo: error: argument DIR: {directory} is not empty; give a new directory",
              file=sys.stderr)
        return 2
    _quiet = as_json
    try:
        return _run(directory, events, as_json)
    finally:
        _quiet = False


def _run(directory: str, events: list[Any], as_json: bool) -> int:
    mem = Memory.open(directory, context_capacity=6, context_protected=2, auto_prune=False)
    with mem.store.locked():   # the store remembers its settings: later tools agree
        write_config(mem.root, {"context_capacity": 6, "context_protected": 2})
    _say(f"store at {mem.root}  (L1 capacity 6 events, 2 most recent protected)")
    for ev in events:
        mem.append(ev)
        what = ev.input if ev.role != "assistant" else ev.response
        extra = f"  tools: {', '.join(ev.tools_used)}" if ev.tools_used else ""
        extra += "  + image" if ev.attachments else ""
        _print(f"   append  {ev.timestamp.strftime('%m-%d %H:%M:%S')} {ev.source:<5} "
              f"{_short(what, 60)}{extra}")
    unit = first_unit = mem.prune(query="周末 钢琴课 piano lesson")
    stats = mem.stats()
    _say("prune (focus: '周末 钢琴课'): 10 events > capacity 6, the least relevant moved whole "
         "into ONE L2 unit", [f"new L2 unit {unit}",
                              f"L1 context: {stats['context_events']} events   "
                              f"L2 documents: {stats['documents_events']} events"])
    hits = mem.query("咖啡机漏水 密封圈", top_k=2)
    _say("query '咖啡机漏水 密封圈' (read-only: nothing moves)",
         [f"{h.score:.3f}  {h.unit_id}  {_short(h.summary, 70)}" for h in hits] or ["no match"])
    moved = mem.recall("咖啡机漏水 密封圈", top_k=1)
    _say("recall: the best unit renamed back into L1, each event at its own timestamp",
         [f"moved {u} documents/ -> context/" for u in moved])
    timeline = mem.timeline()
    _say(f"timeline: {len(timeline)} events in original-timestamp order",
         [_short(event_text(e).splitlines()[0], 110) for e in timeline])
    findings = mem.fsck()
    _say("fsck", [str(f) for f in findings] or ["clean"])
    unit = moved[0] if moved else (mem.units("context") or [""])[0]
    _say("browse it with plain tools:", [
        f"ls {os.path.join(directory, 'context')}",
        f"cat {os.path.join(directory, 'context', unit, 'manifest.json')}",
        f"fsmem show {unit} --root {directory}      # the unit as a transcript",
        f"fsmem timeline --root {directory}",
        f"fsmem render --root {directory} --budget 400",
        f"fsmem search '咖啡机漏水' --root {directory}   # every layer: the recalled unit is in L1",
        f"fsmem serve --root {directory}      # a read-only web view on http://127.0.0.1:8765/"])
    if as_json:
        sys.stdout.write(encode({"root": mem.root, "pruned_unit": first_unit, "hits": hits,
                                 "recalled": moved, "timeline_events": len(timeline),
                                 "findings": findings}).decode() + "\n")
    return 0 if not findings else 1
