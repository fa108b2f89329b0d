"""Evidence recall@5 on a held-out multi-session conversation benchmark (LoCoMo-style JSON),
kept OUTSIDE this repository: nothing of it (text, questions, derived figures per item) is
written anywhere but a temporary directory that is removed afterwards.

The file is a list of samples; each has ``conversation`` (``session_N``: list of turns with
``dia_id``/``speaker``/``text``; ``session_N_date_time`` like "1:56 pm on 8 May, 2023") and
``qa`` (``question``, ``evidence``: [dia_id], ``category``; category 5, adversarial, is
skipped). A question counts as found when any of its evidence turns is in the top 5.

Two ways in, each sample in a store of its own:
- ``direct``: one L2 unit per turn (``commit_events``), timestamps from the session dates;
- ``lived``: every turn through ``Memory.append`` with a small L1 capacity, so prune archives
  turns into L2; a question whose evidence is still in L1 counts as found (it is in the view).
Rankers: the lexical default (bm25, no embedder), the light embedder fused, and dense alone.

Usage: python benchmarks/eval_heldout.py PATH [--limit N] [--capacity 20] [--no-e5] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fsmem import Event, Memory, Timestamp  # noqa: E402

__all__ = ["load", "build_direct", "build_lived", "evaluate", "main"]

K = 5
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y")


def _session_time(text: str, field: str) -> datetime:
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    raise SystemExit(f"{field}: unreadable session date {text!r}")


def _turn_id(sample: int, dia_id: str) -> str:
    return f"s{sample}-" + re.sub(r"[^A-Za-z0-9_-]", "-", dia_id.strip())


def load(path: str) -> list[dict]:
    """[{"turns": [(turn id, session, speaker, text, Timestamp)], "questions": [(question,
    {evidence turn id}, category)]}] in time order per sample."""
    data = json.loads(Path(path).read_text("utf-8"))
    if not isinstance(data, list):
        raise SystemExit(f"{path}: expected a JSON list of samples")
    out = []
    for si, sample in enumerate(data):
        conv = sample["conversation"]
        turns = []
        n = 1
        while f"session_{n}" in conv:
            field = f"session_{n}_date_time"
            start = _session_time(conv[field], f"sample {si} {field}")
            for i, t in enumerate(conv[f"session_{n}"]):
                ts = Timestamp.parse(datetime.fromtimestamp(start.timestamp() + 30 * i,
                                                            timezone.utc).isoformat())
                turns.append((_turn_id(si, t["dia_id"]), f"s{si}-session{n}", t["speaker"],
                              t.get("text", ""), ts))
            n += 1
        known = {t[0] for t in turns}
        questions = []
        for qa in sample["qa"]:
            if qa.get("category") == 5:
                continue
            ev = {_turn_id(si, d) for e in qa.get("evidence", []) for d in re.split(r"[;,]", e)
                  if d.strip()}
            ev &= known
            if ev:
                questions.append((qa["question"], ev, int(qa.get("category", 0))))
        turns.sort(key=lambda t: t[4].ns)
        out.append({"turns": turns, "questions": questions})
    return out


def _event(turn: tuple) -> Event:
    tid, _session, speaker, text, ts = turn
    return Event(id=tid, timestamp=ts, source=speaker, input=f"{speaker}: {text}")


def _flush(mem: Memory) -> None:
    """Deferred vectors (if this fsmem defers them) are filled before the queries."""
    flush = getattr(mem, "flush_vectors", None)
    if flush is not None:
        flush()


def build_direct(root: str, sample: dict, embedder: object | None) -> tuple[Memory, dict]:
    mem = Memory.open(root, durability="off", embedder=embedder, auto_prune=False)
    answers = {}
    for turn in sample["turns"]:
        uid = mem.commit_events([_event(turn)], source=turn[2], meta={"session": turn[1]})
        answers[uid] = {turn[0]}
    _flush(mem)
    return mem, answers


def build_lived(root: str, sample: dict, embedder: object | None, capacity: int
                ) -> tuple[Memory, dict, set]:
    mem = Memory.open(root, durability="off", embedder=embedder, context_capacity=capacity,
                      context_protected=min(5, capacity))
    for turn in sample["turns"]:
        mem.append(_event(turn))
    _flush(mem)
    answers = {uid: {e.id for e in mem.document(uid).events} for uid in mem.units("documents")}
    in_view = {e.id for e in mem.timeline()}
    return mem, answers, in_view


def evaluate(mem: Memory, answers: dict, questions: list, ranker: str,
             in_view: set = frozenset(), weight: float | None = None) -> list[tuple[int, bool]]:
    """(category, found in the top K) per question (``weight``: a fixed fusion weight)."""
    out = []
    for text, evidence, cat in questions:
        found = bool(evidence & in_view)
        if not found:
            hits = mem.index.search(text, K, ranker, weight=weight)
            found = any(evidence & answers.get(uid, set()) for uid, _s in hits)
        out.append((cat, found))
    return out


class _Memo:
    """The embedder with its vectors memoised in memory by text (never on disk), so the
    lived run and both rankers reuse what the direct run embedded."""

    def __init__(self, inner) -> None:
        self.inner, self.fingerprint, self.dim = inner, inner.fingerprint, inner.dim
        for name in ("fusion_weight", "fusion_weights"):   # an embedder's own fusion setting
            if hasattr(inner, name):
                setattr(self, name, getattr(inner, name))
        self.memo: dict = {}

    def _get(self, texts, query: bool):
        import numpy as np
        texts = list(texts)
        todo = [t for t in dict.fromkeys(texts) if (query, t) not in self.memo]
        if todo:
            fn = self.inner.embed_query if query else self.inner.embed
            self.memo.update(((query, t), v) for t, v in zip(todo, fn(todo)))
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.memo[(query, t)] for t in texts]).astype(np.float32)

    def embed(self, texts):
        return self._get(texts, False)

    def embed_query(self, texts):
        return self._get(texts, True)


def _summary(results: list[tuple[int, bool]]) -> dict:
    by: dict = {}
    for cat, ok in results:
        by.setdefault(cat, []).append(ok)
    return {"n": len(results), "recall@5": sum(ok for _c, ok in results) / max(1, len(results)),
            "by_category": {c: round(sum(v) / len(v), 3) for c, v in sorted(by.items())}}


def run(samples: list[dict], capacity: int, use_e5: bool) -> dict:
    configs: list[tuple] = [("lexical (bm25, no embedder)", None, "bm25")]
    e5 = None
    if use_e5:
        from fsmem.search.embedders import E5SmallEmbedder
        e5 = _Memo(E5SmallEmbedder())
        configs += [("e5 fused", e5, "fusion"), ("e5 dense alone", e5, "dense"),
                    ("e5 fused, fixed 0.85 (before)", e5, "fusion", 0.85)]
    res: dict = {}
    with tempfile.TemporaryDirectory(prefix="fsmem-heldout-") as tmp:
        for si, sample in enumerate(samples):
            for emb_name, emb in (("hash", None), ("e5", e5)):
                if emb_name == "e5" and e5 is None:
                    continue
                t0 = time.perf_counter()
                mem, answers = build_direct(f"{tmp}/d-{emb_name}-{si}", sample, emb)
                for name, e, ranker, *w in configs:
                    if e is emb:
                        res.setdefault(("direct", name), []).extend(
                            evaluate(mem, answers, sample["questions"], ranker, set(), *w))
                mem.close()
                mem, answers, in_view = build_lived(f"{tmp}/l-{emb_name}-{si}", sample, emb,
                                                    capacity)
                for name, e, ranker, *w in configs:
                    if e is emb:
                        res.setdefault(("lived", name), []).extend(
                            evaluate(mem, answers, sample["questions"], ranker, in_view, *w))
                mem.close()
                print(f"sample {si} ({emb_name}): {time.perf_counter() - t0:.0f} s; so far "
                      + "; ".join(f"{w} {n}: {_summary(r)['recall@5']:.3f}"
                                  for (w, n), r in res.items()), file=sys.stderr)
    return {f"{way} | {name}": _summary(r) for (way, name), r in res.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path")
    ap.add_argument("--limit", type=int, default=0, help="only the first N samples")
    ap.add_argument("--capacity", type=int, default=20, help="L1 capacity for lived")
    ap.add_argument("--no-e5", action="store_true", help="lexical default only")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    samples = load(args.path)
    if args.limit:
        samples = samples[:args.limit]
    out = run(samples, args.capacity, not args.no_e5)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for name, s in out.items():
        print(f"{name:<42} n={s['n']:<5} recall@5 {s['recall@5']:.3f}  by category "
              f"{s['by_category']}")


if __name__ == "__main__":
    main()
