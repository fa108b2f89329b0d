"""Benchmark: fsmem.memory.render against HomeAgent's fixed-truncation timeline, same events, same budget.

    python benchmarks/bench_render.py [--events 10000] [--small 60] [--runs 7] [--seed 7]

10,000 events with heavy-tailed body lengths (lognormal inputs and responses, Pareto tool
outputs, seeded) are rendered under 8k, 32k and 128k token budgets; then a 60-event timeline,
the size HomeAgent's L1 holds (max_context_size 30, pruned past 2×30). For each renderer it
prints the median time over the runs and what the model gets to see for that budget. Then the
public path: ``Memory.render`` of the same events held in a store's L1, against SQLite load of
the same events plus the same ``render()`` (``--no-store`` skips it).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fsmem.format.model import BlockRef, Event, ToolOutput  # noqa: E402
from fsmem.memory.render import HeuristicEstimator, RuneEstimator, render  # noqa: E402
from fsmem.format.timestamps import Timestamp  # noqa: E402

BUDGETS = (8_000, 32_000, 128_000)
_ZH = ("今天", "天气", "我们", "需要", "检查", "配置", "文件", "服务器", "日志", "错误", "用户",
       "记忆", "文档", "时间", "模型", "回复", "工具", "结果", "已经", "完成", "，", "。")
_EN = ("the", "memory", "store", "event", "block", "render", "budget", "token", "agent",
       "config", "server", "error", "file", "status", "ok", "42", "2024-05-01", "{", "}", ":")


def _corpus(rng: random.Random, size: int) -> str:
    """Mixed Chinese/English text to slice bodies from (about half CJK by words)."""
    words, total = [], 0
    while total < size:
        words.append(rng.choice(_ZH) if rng.random() < 0.5 else " " + rng.choice(_EN))
        total += len(words[-1])
    return "".join(words)


def make_events(n: int, seed: int) -> list[Event]:
    """Seeded events whose body lengths are heavy-tailed, in shuffled order."""
    rng = random.Random(seed)
    corpus = _corpus(rng, 1_200_000)

    def body(length: float) -> str:
        length = max(1, min(int(length), 1_000_000))
        start = rng.randrange(0, max(1, len(corpus) - length))
        return corpus[start:start + length]

    t0 = Timestamp.parse("2024-01-01T00:00:00+08:00").ns
    events = []
    for i in range(n):
        tools = rng.random() < 0.25
        outputs = [ToolOutput(name=f"tool{j}", output=body(80 * rng.paretovariate(1.1)))
                   for j in range(rng.randint(1, 2))] if tools else []
        blocks = [BlockRef(digest=f"{rng.getrandbits(256):064x}", modality="image",
                           mime="image/png", size=1000, created_at=Timestamp(t0), role="input",
                           width=640, height=480)] if rng.random() < 0.05 else []
        events.append(Event(
            timestamp=Timestamp(t0 + i * 37_000_000_000, 8 * 3600),
            source=rng.choice(("user", "agent", "cold_storage")),
            input=body(rng.lognormvariate(3.5, 1.0)),
            response=body(rng.lognormvariate(5.0, 1.4)) if rng.random() < 0.6 else "",
            tools_used=[o.name for o in outputs], tool_results=outputs, blocks=blocks))
    rng.shuffle(events)
    return events


def naive_render(events: list[Event], max_tokens: int) -> str:
    """HomeAgent's formatMergedTimeline: newest first while the estimate fits (always >= 1),
    estimate = runes×2 of source and input + 40, + 120 with a response; responses cut at 120."""
    def est(text: str) -> int:
        return 2 * len(text)

    header = "【对话时序】\n"
    remaining = max_tokens - est(header)
    chosen = []
    for ev in reversed(sorted(events, key=lambda e: e.timestamp.ns)):
        cost = est(ev.source) + est(ev.input) + 40 + (120 if ev.response else 0)
        if remaining - cost < 0 and chosen:
            break
        remaining -= cost
        chosen.append(ev)
    lines = [header]
    for ev in reversed(chosen):
        line = f"[{ev.timestamp.strftime('%H:%M:%S')}] {ev.source}: {ev.input}"
        if ev.tools_used:
            line += " → 调用工具: " + ", ".join(ev.tools_used)
        if ev.response:
            resp = ev.response if len(ev.response) <= 120 else ev.response[:120] + "..."
            line += " → " + resp
        lines.append(line + "\n")
    return "".join(lines)


def _bodies(ev: Event) -> list[str]:
    return [t for t in [ev.input, ev.response] + [r.output for r in ev.tool_results] if t]


def fsmem_shown(events: list[Event], out: str) -> tuple[int, int, int]:
    """(events shown, bodies whole, body characters visible), read back from the output."""
    ordered = sorted(events, key=lambda e: e.timestamp.ns)
    m = re.search(r"^\((\d+) earlier events omitted\)$", out, re.M)
    shown = ordered[int(m.group(1)) if m else 0:] if out else []
    cuts = [int(c) for c in re.findall(r"…\[\+(\d+)字\]", out)]
    bodies = [b for ev in shown for b in _bodies(ev)]
    return len(shown), len(bodies) - len(cuts), sum(map(len, bodies)) - sum(cuts)


def naive_shown(events: list[Event], out: str) -> tuple[int, int, int]:
    """The same figures for the naive renderer (it never shows tool outputs)."""
    ordered = sorted(events, key=lambda e: e.timestamp.ns)
    shown = ordered[len(ordered) - len(re.findall(r"^\[\d\d:\d\d:\d\d\] ", out, re.M)):]
    whole = sum(1 for ev in shown if ev.input) + sum(
        1 for ev in shown if ev.response and len(ev.response) <= 120)
    chars = sum(len(ev.input) + min(len(ev.response), 120) for ev in shown)
    return len(shown), whole, chars


def _p50_ms(fn, runs: int) -> tuple[float, float, str]:
    """(p50 wall ms, p50 CPU ms, output). CPU time stays meaningful on a shared machine."""
    out = fn()  # warm-up, and the output to describe
    wall, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return statistics.median(wall), statistics.median(cpu), out


def table(events: list[Event], runs: int) -> None:
    """One markdown table: every renderer under every budget, on the same events."""
    lengths = sorted(len(b) for ev in events for b in _bodies(ev))
    print(f"{len(events):,} events, {len(lengths):,} bodies, {sum(lengths):,} characters; body "
          f"length p50 {lengths[len(lengths) // 2]:,}, p99 {lengths[len(lengths) * 99 // 100]:,}, "
          f"max {lengths[-1]:,}; p50 of {runs} timed runs\n")
    heur, rune = HeuristicEstimator(), RuneEstimator()
    renderers = [
        ("fsmem render (heuristic)", lambda b: render(events, b), fsmem_shown),
        ("fsmem render (runes×2)", lambda b: render(events, b, estimator=rune), fsmem_shown),
        ("HomeAgent fixed 120", lambda b: naive_render(events, b), naive_shown),
    ]
    print("| budget | renderer | p50 ms | p50 CPU ms | events shown | bodies whole "
          "| body chars shown | tokens (heuristic) | tokens (runes×2) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for budget in BUDGETS:
        for name, fn, shown in renderers:
            ms, cpu, out = _p50_ms(lambda: fn(budget), runs)
            n, whole, chars = shown(events, out)
            print(f"| {budget:,} | {name} | {ms:.1f} | {cpu:.1f} | {n:,} | {whole:,} | {chars:,} "
                  f"| {heur.count(out):,} | {rune.count(out):,} |")
    print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--small", type=int, default=60, help="a second, L1-sized timeline")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--no-store", action="store_true",
                    help="skip Memory.render from a store against SQLite load + render")
    args = ap.parse_args(argv)
    table(make_events(args.events, args.seed), args.runs)
    table(make_events(args.small, args.seed + 1), args.runs)
    if not args.no_store:
        store_table(make_events(args.events, args.seed), args.runs)
    return 0


def store_table(events: list[Event], runs: int) -> None:
    """The public path: ``Memory.render`` of the same events held in L1, against SQLite
    load of the same events plus the same ``render()``, interleaved (``_rows_read``)."""
    import shutil
    import tempfile

    import msgspec

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _rows_read import render_pair
    events = [msgspec.structs.replace(e, blocks=[]) for e in events]  # no fake media refs
    print(f"Memory.render of {len(events):,} L1 events (a store) against SQLite load + the "
          f"same render(), interleaved, p50 of {runs} runs:\n")
    print("| budget | Memory.render ms | SQLite load + render ms | ratio |")
    print("|---:|---:|---:|---:|")
    base = tempfile.mkdtemp(prefix="fsmem-render-")
    try:
        got = render_pair(base, events, BUDGETS, runs)
        for budget, res in got.items():
            f, q = statistics.median(res["fsmem"]), statistics.median(res["sqlite"])
            print(f"| {budget:,} | {f * 1000:.1f} | {q * 1000:.1f} | {f / q:.2f}x |")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()


if __name__ == "__main__":
    sys.exit(main())
