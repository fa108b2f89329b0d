"""Long queries (a turn's whole message as its focus) with the light embedder: recall and the
query's cost when e5 embeds the whole message, against embedding its beginning and end only
(``E5SmallEmbedder.bounded``, ``QUERY_TOKENS``), with the lexical ranker beside them.

Each question of fixtures/retrieval3 is asked inside a long message of our own chatter
(``FILLER``, in the question's language, about 200 e5 tokens), the question at the end
("tail") or at the start ("head"), and alone ("short"), over the plain store of its
conversation (one unit a turn). Prints recall@5 per placement and the p50 of a fused query
(its embedding included), same run, interleaved.

Usage: python benchmarks/eval_long_queries.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import eval_retrieval3 as r3  # noqa: E402

from fsmem.search import embedders  # noqa: E402

__all__ = ["FILLER", "main"]

FILLER = {
    "en": ("Sorry for the wall of text, it has been one of those weeks. The car needed new "
           "wipers, my sister called twice about the holidays, and I still have not answered "
           "half of my messages. Work was busy too: two deadlines moved, the printer jammed "
           "again and the coffee machine is broken, so everyone queues at the café downstairs. "
           "Anyway, I finally sat down tonight with a cup of tea to sort out a few things I "
           "keep forgetting, and I would like your help with one of them before I lose track "
           "of it again. "),
    "zh": ("不好意思，消息有点长，这周实在太忙了。车的雨刮器要换了，姐姐为了过节的事打了两次电话，"
           "还有一半的消息没回。上班也忙，两个截止日期都提前了，打印机又卡纸，咖啡机也坏了，大家只好"
           "去楼下咖啡店排队。总之今晚终于坐下来，泡了杯茶，想把几件老是忘的事情理一理，其中一件想请你"
           "帮我想想，免得又忘了。"),
}


def _lang(text: str) -> str:
    return "zh" if sum("\u4e00" <= c <= "\u9fff" for c in text) > len(text) // 4 else "en"


def main() -> None:
    convs, questions = r3.load_fixture()
    e5 = embedders.E5SmallEmbedder()
    whole = embedders.E5SmallEmbedder()
    whole.bounded = lambda text: text      # the same model, every token embedded
    found: dict = {}
    times: dict = {}
    with tempfile.TemporaryDirectory(prefix="fsmem-longq-") as tmp:
        for conv in convs:
            qs = [q for q in questions if q["conversation"] == conv["id"]]
            mem, answers = r3.build_store(os.path.join(tmp, conv["id"]), conv, "plain", e5)
            mem.index.search("warm up", 10, "fusion")
            for q in qs:
                filler = FILLER[_lang(q["question"])]
                asked = {"short": q["question"], "tail": filler + q["question"],
                         "head": q["question"] + " " + filler}
                for place, text in asked.items():
                    for side, emb in (("lexical", None), ("fused, bounded", e5),
                                      ("fused, whole", whole)):
                        if emb is not None:
                            mem.embedder = emb
                        t = time.perf_counter()
                        got = [u for u, _s in mem.index.search(
                            text, 10, "bm25" if emb is None else "fusion")]
                        times.setdefault((place, side), []).append(time.perf_counter() - t)
                        rank = r3.ranks(got, answers, set(q["evidence"]))
                        found.setdefault((place, side), []).append(0 < rank <= 5)
            mem.embedder = e5
            mem.close()
    tokens = {p: statistics.median(e5._model.token_count(
        {"short": q["question"], "tail": FILLER[_lang(q["question"])] + q["question"],
         "head": q["question"] + " " + FILLER[_lang(q["question"])]}[p], True)
        for q in questions) for p in ("short", "tail", "head")}
    print(f"fixtures/retrieval3, {len(questions)} questions, plain store; QUERY_TOKENS "
          f"{embedders.QUERY_TOKENS}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'placement':<10} {'e5 tokens':>9}  " + "  ".join(
        f"{s:>22}" for s in ("lexical", "fused, bounded", "fused, whole")))
    for place in ("short", "tail", "head"):
        cells = []
        for side in ("lexical", "fused, bounded", "fused, whole"):
            v = found[place, side]
            ms = statistics.median(times[place, side]) * 1000
            cells.append(f"{sum(v) / len(v):.3f} r@5 {ms:6.1f} ms")
        print(f"{place:<10} {tokens[place]:>9.0f}  " + "  ".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
