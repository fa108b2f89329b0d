"""A realistic HomeAgent memory directory at scale, written as HomeAgent's Go code writes it.

``documents/<id>.json`` in ``json.MarshalIndent(doc, "", "  ")`` (struct field order,
``omitempty``, nil slices as ``null``, every float of a vector on its own line), in the
proportions of a store that lived through the three document versions
(/work/shared/reference/homeagent-format.md §1, §2, §11):

* v1 (25 %): summary, flattened ``content`` of archived turns, tags, entities, meta;
* v2 (30 %): + ``media`` digests, the sparse ``vector`` (jieba word -> tf/maxTF) and a 512-d
  ``dense_vec`` (chineseclip);
* v3 (45 %): + ``blocks`` (triple endpoints and sentence blocks with their 512-d vectors,
  images with their CLIP vectors), ``dense_vec`` + ``dense_fp``: chineseclip 512-d, or
  qwen3vl 2048-d for one v3 document in four.

Each document's ``content`` names ``marker<i>`` once, so a query can find exactly one. The
media blobs are small (the index never reads them). Seeded, stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random

__all__ = ["make_homeagent_store", "go_json", "marker"]

_ZH = """咖啡机 除垢 猫粮 光伏板 发电 体检 报告 钢琴 演奏会 签证 护照 照片 天气 下雨 周末 计划
快递 物业 停车 充电桩 空调 滤网 洗衣机 冰箱 牛奶 鸡蛋 妈妈 生日 蛋糕 会议 项目 预算 机票 酒店
杭州 成都 年糕 橘猫 疫苗 医院 牙医 预约 提醒 密码 路由器 电费 水费 燃气""".split()
_EN = """memory coffee solar panel piano concert visa passport weather rain weekend plan parcel
parking charger router password invoice meeting budget flight hotel vaccine dentist appointment
reminder battery firmware update backup schedule recipe""".split()
_SOURCES = ("qq", "wechat", "terminal", "agent")
_TOOLS = ("search_manual", "web_search", "image_describe", "calendar", "weather")


def marker(i: int) -> str:
    """The word only document ``i``'s content carries."""
    return f"marker{i}"


def go_json(obj: object) -> bytes:
    """Go's ``MarshalIndent(obj, "", "  ")`` (dict order is the struct field order)."""
    text = json.dumps(obj, ensure_ascii=False, indent=2, separators=(",", ": "))
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(ch, esc)
    return text.encode("utf-8")


def _omit(d: dict, *keys: str) -> dict:
    return {k: v for k, v in d.items() if not (k in keys and v in ("", 0, None, [], {}))}


def _words(rng: random.Random, n: int) -> str:
    out = ""
    for _ in range(n):
        w = rng.choice(_ZH) if rng.random() < 0.7 else rng.choice(_EN)
        glue = out and (w.isascii() or out[-1].isascii())
        out += (" " if glue else "") + w
    return out


def _unit_vector(rng: random.Random, dim: int) -> list[float]:
    v = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


def _time(base_s: int, off_h: int, nanos: int) -> str:
    import datetime as dt
    tz = dt.timezone(dt.timedelta(hours=off_h))
    t = dt.datetime.fromtimestamp(base_s, tz)
    frac = f".{nanos:09d}".rstrip("0") if nanos else ""
    off = "Z" if off_h == 0 else f"{'+' if off_h > 0 else '-'}{abs(off_h):02d}:00"
    return t.strftime("%Y-%m-%dT%H:%M:%S") + frac + off


def _content(rng: random.Random, i: int) -> tuple[str, list[str]]:
    """Flattened archived turns (format §1b): ``[HH:MM] src: input → response...`` lines and
    ``  [工具] name: output...``; returns the text and its keywords."""
    lines, keys = [], []
    for j in range(rng.randint(6, 30)):
        src = rng.choice(_SOURCES)
        inp = _words(rng, rng.randint(4, 30))
        line = f"[{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}] {src}: {inp}"
        if rng.random() < 0.6:
            line += f" → {_words(rng, rng.randint(10, 40))[:100]}..."
        if rng.random() < 0.25:
            tool = _words(rng, rng.randint(20, 80))[:200]
            line += f"\n  [工具] {rng.choice(_TOOLS)}: {tool}..."
        lines.append(line)
        keys.extend(inp.split()[:2])
    lines.insert(rng.randrange(len(lines) + 1), f"[09:30] qq: 记住 {marker(i)} 这件事")
    return "\n".join(lines), keys


def _blob(root: str, rng: random.Random) -> tuple[str, int]:
    data = b"\x89PNG\r\n\x1a\n" + rng.randbytes(rng.randint(2_000, 6_000))
    d = hashlib.sha256(data).hexdigest()
    os.makedirs(f"{root}/media/blobs/{d[:2]}", exist_ok=True)
    with open(f"{root}/media/blobs/{d[:2]}/{d[2:]}", "wb") as fh:
        fh.write(data)
    return d, len(data)


def _block(bid: str, modality: str, t: str, **fields: object) -> dict:
    keys = ("text", "payload_digest", "mime", "size", "width", "height", "vector",
            "fingerprint", "source", "tool", "scene", "semantic_type")
    d = {"id": bid, "modality": modality, **{k: fields.get(k, "") for k in keys},
         "created_at": t, "updated_at": t}
    return _omit(d, *keys)


def _doc(rng: random.Random, root: str, i: int, version: str) -> dict:
    ns = 1_789_000_000_000_000_000 + i * 3_600_000_000_123 + rng.randrange(10**9)
    t = _time(ns // 10**9, 8, ns % 10**9)
    content, keys = _content(rng, i)
    uniq = list(dict.fromkeys(keys))
    doc = {"id": f"doc_{ns}",
           "summary": f"来自 {rng.randint(1, 3)} 个来源的 {content.count(chr(10)) + 1} 条对话 "
                      f"(qq, agent) 涉及: {', '.join(uniq[:5])}",
           "content": content, "tags": uniq[:10] or None,
           "entities": uniq[:rng.randint(0, 20)] or None, "created_at": t, "updated_at": t,
           "source": "context_archived" if rng.random() < 0.8 else "manual",
           "meta": {"content_hash": "h%08x" % rng.getrandbits(32), "is_archived_context": "true"},
           "access_count": rng.randint(1, 6), "last_access": t}
    if version == "v2":
        doc["media"] = [_blob(root, rng)[0] for _ in range(rng.randint(0, 2))]
        feats = dict.fromkeys(w for w in content.split() if len(w) > 1)
        doc["vector"] = {w: round(rng.random(), 6) for w in list(feats)[:300]}
        doc["dense_vec"] = _unit_vector(rng, 512)
    elif version == "v3":
        blocks = []
        for name in uniq[:rng.randint(1, 4)]:
            blocks.append(_block("blk_ent_" + hashlib.sha256(name.encode()).hexdigest()[:24],
                                 "text", t, text=name, vector=_unit_vector(rng, 512),
                                 fingerprint="chineseclip", source="triple", tool="doc_commit",
                                 scene="chan:qq", semantic_type="Concept"))
        for _ in range(rng.randint(0, 2)):
            digest, size = _blob(root, rng)
            blocks.append(_block(f"blk_{ns}_{len(blocks) + 1}", "image", t,
                                 payload_digest=digest, mime="image/png", size=size, width=640,
                                 height=480, vector=_unit_vector(rng, 512),
                                 fingerprint="chineseclip", tool="camera"))
        wide = rng.random() < 0.25
        doc["blocks"] = blocks
        doc["dense_vec"] = _unit_vector(rng, 2048 if wide else 512)
        doc["dense_fp"] = "qwen3vl:d2048" if wide else "chineseclip:d512"
    return _omit(doc, "meta", "media", "blocks", "vector", "dense_vec", "dense_fp")


def make_homeagent_store(root: str, docs: int = 1000, seed: int = 27
                         ) -> tuple[list[str], int]:
    """Write ``docs`` HomeAgent documents (and their media) under ``root``; returns the id of
    each (document i names ``marker(i)``) and the bytes of ``documents/``."""
    rng = random.Random(seed)
    os.makedirs(f"{root}/documents")
    ids, total = [], 0
    for i in range(docs):
        r = rng.random()
        version = "v1" if r < 0.25 else "v2" if r < 0.55 else "v3"
        doc = _doc(rng, root, i, version)
        raw = go_json(doc)
        with open(f"{root}/documents/{doc['id']}.json", "wb") as fh:
            fh.write(raw)
        ids.append(doc["id"])
        total += len(raw)
    return ids, total


if __name__ == "__main__":
    import sys
    _, n = make_homeagent_store(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
    print(f"{n / 2**20:.1f} MB of documents/")
