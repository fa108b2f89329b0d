"""The SDK-shaped API: TextEvent, MediaAttachment references, DocMemory, plugin declarations."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, make_png, make_wav
from fsmem import (AmbiguousDigest, ChannelDef, Doc, DocMemory, Event, InvalidName,
                   MediaAttachment, Memory, NotFound, TextEvent, Timestamp, ToolDef, ToolOutput)
from fsmem.search.embed import HashEmbedder
from fsmem.format.unit import read_manifest, read_vectors


def test_text_event_shapes(mem):
    uid_ts = 1_790_000_000
    eid = mem.append(TextEvent(role="user", content="你好", timestamp=uid_ts, channel="qq"))
    mem.append(TextEvent(role="assistant", content="hi there", timestamp=uid_ts + 1))
    tl = mem.timeline()
    assert [(e.source, e.role, e.input, e.response) for e in tl] == [
        ("qq", "user", "你好", ""), ("agent", "assistant", "", "hi there")]
    assert tl[0].id == eid and tl[0].timestamp == Timestamp.from_unix(uid_ts)
    mem.append({"role": "user", "content": "from a dict", "channel": "cli"})
    assert mem.timeline()[-1].input == "from a dict"


def test_media_attachment_by_digest_links_without_copying(mem):
    png = make_png()
    first = mem.commit("the photo", attachments=[MediaAttachment(data=png, mime="image/png")])
    ref = next(b for b in mem.document(first).blocks if b.modality == "image")
    second = mem.commit("same photo again", attachments=[MediaAttachment(digest=ref.digest[:8])])
    ref2 = next(b for b in mem.document(second).blocks if b.modality == "image")
    assert ref2.digest == ref.digest and ref2.width == 64
    p1 = os.path.join(mem.root, "documents", first, ref.digest + ".png")
    p2 = os.path.join(mem.root, "documents", second, ref.digest + ".png")
    assert os.stat(p1).st_ino == os.stat(p2).st_ino          # linked, not copied
    assert mem.read_block(ref.digest[:12]) == png


def test_unknown_or_ambiguous_digest_writes_nothing(mem):
    mem.commit("a", attachments=[MediaAttachment(data=make_png(seed=1), mime="image/png")])
    before = sorted(mem.units("documents"))
    with pytest.raises(NotFound, match="0123abcd"):
        mem.commit("ref", attachments=[MediaAttachment(digest="0123abcd")])
    with pytest.raises(InvalidName):
        mem.commit("ref", attachments=[MediaAttachment(digest="0123abc")])  # under 8 hex
    # Forge a second block sharing the first 8 hex (as a damaged copy would) to get ambiguity.
    uid = before[0]
    src = os.path.join(mem.root, "documents", uid)
    doc = mem.document(uid)
    img = next(b for b in doc.blocks if b.modality == "image")
    fake = img.digest[:8] + ("0" if img.digest[8] != "0" else "1") + img.digest[9:]
    clone = os.path.join(mem.root, "documents", "u-forged")
    os.mkdir(clone)
    m = json.load(open(os.path.join(src, "manifest.json")))
    m["id"] = "u-forged"
    m.pop("vectors", None)
    m["events"][0]["blocks"] = [b | {"digest": fake} for b in m["events"][0]["blocks"]
                                if b["modality"] == "image"]
    json.dump(m, open(os.path.join(clone, "manifest.json"), "w"))
    with pytest.raises(AmbiguousDigest):
        mem.commit("ref", attachments=[MediaAttachment(digest=img.digest[:8])])
    assert sorted(mem.units("documents")) == sorted(before + ["u-forged"])
    assert os.listdir(os.path.join(mem.root, ".fsmem", "staging")) == []


def test_doc_memory_facade(mem):
    docs = DocMemory(mem, source="plugin:notes")
    wav = make_wav()
    plain = docs.insert(Doc(title="光伏板", content="屋顶光伏板今天发电 12 度"))
    media = docs.insert_with_media(Doc(title="录音", content="钢琴课录音"),
                                   [MediaAttachment(data=wav, mime="audio/wav", name="p.wav")])
    hits = docs.query("钢琴课", top_k=1)
    assert hits[0].id == media and "钢琴课录音" in hits[0].content and hits[0].score > 0
    assert len(hits[0].media_digests) == 1 and hits[0].attachments[0].data is None
    assert hits[0].title == "录音"
    assert mem.document(plain).source == "plugin:notes"
    assert docs.stats()["documents_units"] == 2
    docs.remove(plain)
    assert docs.stats()["documents_units"] == 1
    with pytest.raises(NotFound):
        docs.remove(plain)


def test_no_memory_and_cleaner_shape_only_the_compute_layer(tmp_path):
    emb = HashEmbedder()
    plugins = [ChannelDef(name="term", no_memory=True),
               ChannelDef(name="chat", cleaner=lambda s: s.replace("NOISE", "")),
               ToolDef(name="status", no_memory=True),
               ToolDef(name="fetch", cleaner=lambda s: s.upper())]
    mem = Memory.open(tmp_path / "m", plugins=plugins, embedder=emb, auto_prune=False,
                      vectors="inline")   # vectors stored, to look at what was embedded
    mem.append(Event(source="term", input="$ ls -la secret-ish status line"))
    mem.append(Event(source="chat", input="hello NOISE world",
                     tool_results=[ToolOutput(name="status", output="cpu 99%"),
                                   ToolOutput(name="fetch", output="page text")]))
    units = {read_manifest(os.path.join(mem.root, "context", u)).events[0].source: u
             for u in mem.units("context")}
    term = os.path.join(mem.root, "context", units["term"])
    assert read_manifest(term).vectors is None                      # nothing computed
    assert [e.input for e in mem.timeline()][0] == "$ ls -la secret-ish status line"  # stored
    chat = os.path.join(mem.root, "context", units["chat"])
    m = read_manifest(chat)
    keys, mat = read_vectors(chat, m)
    by_role = {next(b.role + ":" + (b.digest) for b in m.events[0].blocks
                    if b.digest == k.split(":")[1]): mat[i] for i, k in enumerate(keys)}
    inp = next(v for k, v in by_role.items() if k.startswith("input"))
    assert np.allclose(inp, emb.embed(["hello  world"])[0])        # cleaned text embedded
    outs = [b for b in m.events[0].blocks if b.role == "tool_output"]
    assert len(keys) == 2                                            # status output left out
    fetch_vec = next(v for k, v in by_role.items() if k.startswith("tool_output"))
    assert np.allclose(fetch_vec, emb.embed(["PAGE TEXT"])[0])
    ev = [e for e in mem.timeline() if e.source == "chat"][0]
    assert ev.input == "hello NOISE world" and ev.tool_results[1].output == "page text"
    assert len(outs) == 2


def test_kernel_names_no_plugin_or_channel():
    """Premise F: no plugin or channel name in the kernel, and no branch on a source literal."""
    names = {"agentcli", "terminal", "qq", "wechat", "telegram", "discord", "slack", "feishu",
             "dingtalk", "email", "shell"}
    pkg = Path(REPO) / "fsmem"
    for path in pkg.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert node.value.lower() not in names, f"{path.name}: literal {node.value!r}"
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                names_in = {getattr(s, "attr", getattr(s, "id", "")) for s in sides}
                if names_in & {"source", "channel", "tool", "tool_name"}:
                    assert not any(isinstance(s, ast.Constant) and isinstance(s.value, str)
                                   for s in sides), f"{path.name}:{node.lineno} branches on a source"


def test_append_is_durable_and_in_same_unit_format_as_l2(mem):
    eid = mem.append(Event(source="cli", input="in L1", response="answer"))
    (unit,) = mem.units("context")
    m = read_manifest(os.path.join(mem.root, "context", unit))
    assert m.events[0].id == eid and {b.role for b in m.events[0].blocks} == {"input", "response"}
    assert mem.fsck() == []
