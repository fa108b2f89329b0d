"""Drop-in cost: a generated HomeAgent directory of 1,000 legacy documents and 400 media blobs
(about 250 MB), time from open to the first query result and recall of a legacy document with
media, beside the same operations on the same content already in fsmem's format.
Usage: python benchmarks/bench_legacy.py [--docs N] [--blobs N] [--blob-kb K] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import shutil
import statistics
import tempfile
import time

from _data import text

from fsmem import Event, MediaAttachment, Memory


def make_homeagent(root: str, rng: random.Random, docs: int, blobs: int, blob_kb: int) -> list:
    os.makedirs(f"{root}/documents")
    digests = []
    for i in range(blobs):
        data = b"\x89PNG\r\n\x1a\n" + rng.randbytes(blob_kb * 1024 - 8)
        d = hashlib.sha256(data).hexdigest()
        os.makedirs(f"{root}/media/blobs/{d[:2]}", exist_ok=True)
        with open(f"{root}/media/blobs/{d[:2]}/{d[2:]}", "wb") as fh:
            fh.write(data)
        digests.append(d)
    contents = []
    for i in range(docs):
        content = "\n".join(f"[08:{j:02d}] qq: {text(rng, 60)} → {text(rng, 100)}..."
                            for j in range(8)) + f" marker{i}"
        media = digests[i % blobs: i % blobs + 1] if i < blobs else []
        doc = {"id": f"doc_{1790000000000000000 + i}", "summary": f"来自 1 个来源的 8 条对话 {i}",
               "content": content, "tags": None, "entities": None,
               "created_at": "2026-10-04T08:04:00.123456789+08:00",
               "updated_at": "2026-10-04T08:04:00.123456789+08:00", "source": "context_archived",
               "meta": {"is_archived_context": "true"}, "access_count": 1,
               "last_access": "2026-10-04T08:04:00.123456789+08:00"}
        if media:
            doc["media"] = media
        with open(f"{root}/documents/{doc['id']}.json", "w", encoding="utf-8") as fh:
            json.dump(doc, fh, ensure_ascii=False, indent=2)
        contents.append((content, media))
    return contents


def make_native(root: str, contents: list, homeagent: str) -> None:
    mem = Memory.open(root, durability="off", auto_prune=False)
    for content, media in contents:
        atts = []
        for d in media:
            with open(f"{homeagent}/media/blobs/{d[:2]}/{d[2:]}", "rb") as fh:
                atts.append(MediaAttachment(data=fh.read(), mime="image/png"))
        mem.commit_events([Event(source="cold_storage", response=content, attachments=atts)])


def first_query(root: str, query: str) -> tuple[float, float]:
    """(seconds from open to the first result, seconds of a recall of one unit with media)."""
    t = time.perf_counter()
    mem = Memory.open(root, auto_prune=False)
    hits = mem.query(query, top_k=1)
    t_query = time.perf_counter() - t
    assert hits
    t = time.perf_counter()
    moved = mem.recall(query, top_k=1)
    t_recall = time.perf_counter() - t
    assert moved
    return t_query, t_recall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--blobs", type=int, default=400)
    ap.add_argument("--blob-kb", type=int, default=640)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    logging.getLogger("fsmem.legacy").setLevel(logging.ERROR)  # one line per document otherwise
    base = tempfile.mkdtemp(prefix="fsmem-legacy-", dir=args.dir)
    try:
        rng = random.Random(5)
        ha = f"{base}/homeagent"
        contents = make_homeagent(ha, rng, args.docs, args.blobs, args.blob_kb)
        make_native(f"{base}/native", contents, ha)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ha) for f in fs)
        rows = {"legacy (cold open)": [], "legacy (index built)": [], "fsmem (cold open)": [],
                "fsmem (index built)": []}
        for rep in range(args.reps):
            for kind, src in (("legacy", ha), ("fsmem", f"{base}/native")):
                work = f"{base}/run-{kind}-{rep}"
                shutil.copytree(src, work)
                shutil.rmtree(f"{work}/.fsmem/index", ignore_errors=True)
                rows[f"{kind} (cold open)"].append(first_query(work, f"marker{rep * 7 + 1}"))
                rows[f"{kind} (index built)"].append(first_query(work, f"marker{rep * 7 + 2}"))
                shutil.rmtree(work)
        print(f"{args.docs} legacy documents, {args.blobs} blobs, {size / 2**20:.0f} MB")
        print(f"{'store':<24}{'open→first result ms':>22}{'recall with media ms':>22}")
        for name, vals in rows.items():
            q = statistics.median(v[0] for v in vals) * 1000
            r = statistics.median(v[1] for v in vals) * 1000
            print(f"{name:<24}{q:>22.1f}{r:>22.1f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
