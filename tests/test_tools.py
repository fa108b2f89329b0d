"""fsmem.interfaces.tools: OpenAI-style tool calls (name + JSON arguments string) dispatched to a real
store for every tool, bad arguments refused by name with nothing stored changed."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, make_png
from fsmem import FsmemError, HeuristicEstimator, MediaAttachment, Memory, Timestamp
from fsmem.interfaces.tools import TOOLS, BadArgument, call, definitions, tool_names

FORMATS = ("openai", "anthropic", "mcp")


def snapshot(root: Path) -> dict[str, str]:
    """Every file of the store outside .fsmem (the derived index and staging), hashed."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".fsmem" not in p.parts}


def tool_call(target, name: str, args: dict) -> dict:
    """What a host does with a model's tool call: JSON arguments string in, JSON out."""
    model_says = {"id": "call_1", "type": "function",
                  "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
    result = call(target, model_says["function"]["name"], model_says["function"]["arguments"])
    return json.loads(json.dumps(result))   # must be JSON-able


def test_definitions_generated_from_one_source():
    names = [t.name for t in TOOLS]
    assert len(set(names)) == len(names) == 14 and names == tool_names()
    oa = definitions("openai")
    assert [d["function"]["name"] for d in oa] == names
    an = definitions("anthropic")
    mc = definitions("mcp")
    for t, o, a, m in zip(TOOLS, oa, an, mc):
        assert o["function"]["parameters"] == a["input_schema"] == m["inputSchema"] == t.schema
        assert t.schema["type"] == "object" and t.schema["additionalProperties"] is False
        assert set(t.schema["required"]) <= set(t.schema["properties"])
        assert len(t.description) > 60
        assert m["annotations"]["readOnlyHint"] is t.read_only
        assert m["annotations"]["destructiveHint"] is t.destructive
    # each provider's own shape, no key it does not know (Anthropic refuses unknown keys)
    assert all(set(o) == {"type", "function"} and set(o["function"]) ==
               {"name", "description", "parameters"} for o in oa)
    assert all(set(a) == {"name", "description", "input_schema"} for a in an)
    assert all(m["outputSchema"] == t.output_schema and m["outputSchema"]["type"] == "object"
               for t, m in zip(TOOLS, mc))
    by = {m["name"]: m["annotations"] for m in mc}
    assert by["coldcontext_query"]["readOnlyHint"] and by["memory_show"]["readOnlyHint"]
    assert by["memory_remove"]["destructiveHint"] and not by["coldcontext_commit"]["readOnlyHint"]
    q = {d["name"]: d for d in an}["coldcontext_query"]["input_schema"]
    assert q["required"] == ["query"] and q["properties"]["top_k"]["default"] == 3
    c = {d["name"]: d for d in an}["coldcontext_commit"]["input_schema"]["properties"]
    assert set(c) >= {"content", "summary", "tags", "media_digests"}
    d = {d["name"]: d for d in an}["memory_distill"]["input_schema"]["properties"]
    assert d["dry_run"]["default"] is True


@pytest.mark.parametrize("fmt", FORMATS)
def test_cli_prints_the_same_definitions(fmt):
    out = subprocess.run([sys.executable, "-m", "fsmem.cli", "tools", "--format", fmt],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == definitions(fmt)


def test_every_tool_through_openai_style_calls(root):
    mem = Memory.open(root)
    png = make_png(seed=7)
    photo = mem.commit("roof photo", attachments=[MediaAttachment(data=png, mime="image/png")])
    digest = mem.document(photo).blocks[-1].digest

    made = tool_call(mem, "coldcontext_commit", {
        "content": "屋顶光伏板今天发电 14.2 kWh，比昨天多", "summary": "solar",
        "tags": ["energy"], "media_digests": [digest[:12]]})
    uid = made["unit_id"]
    assert made["layer"] == "documents" and made["summary"] == "solar"
    assert [(m["digest"], m["mime"], m["size"]) for m in made["media"]] == \
        [(digest, "image/png", len(png))]
    Timestamp.parse(made["created_at"])

    hits = tool_call(mem, "coldcontext_query", {"query": "光伏板发电"})["hits"]
    assert hits and hits[0]["unit_id"] == uid and isinstance(hits[0]["score"], float)
    assert "14.2 kWh" in hits[0]["text"] and Timestamp.parse(hits[0]["created_at"])
    assert mem.document(uid).layer == "documents"        # query moved nothing

    shown = tool_call(mem, "memory_show", {"unit_id": uid})
    assert shown["events"][0]["input"].startswith("屋顶光伏板") and shown["tags"] == ["energy"]
    assert shown["media"][0]["uri"] == f"fsmem://unit/{uid}/block/{digest}"

    ts = "2026-03-04T05:06:07.123456789+08:00"
    app = tool_call(mem, "memory_append", {
        "input": "咖啡机漏水", "response": "检查密封圈", "source": "agent", "timestamp": ts,
        "tools_used": ["search_manual"],
        "tool_results": [{"name": "search_manual", "output": "BES870 §4.2"}]})
    assert app["timestamp"] == ts
    ev = next(e for e in mem.timeline() if e.id == app["event_id"])
    assert ev.timestamp == Timestamp.parse(ts) and ev.tool_results[0].output == "BES870 §4.2"

    text = tool_call(mem, "memory_render", {"budget_tokens": 2000})["text"]
    assert "咖啡机漏水" in text and "检查密封圈" in text
    assert "【相关记忆】" not in text
    # with a query: its hits from long-term memory first, in what the context leaves
    seen = tool_call(mem, "memory_render", {"budget_tokens": 2000, "query": "光伏板"})["text"]
    assert seen.startswith("【相关记忆】") and mem.document(uid).events[0].input[:20] in seen
    assert "咖啡机漏水" in seen and HeuristicEstimator().count(seen) <= 2000

    listed = tool_call(mem, "memory_list", {"layer": "documents"})
    assert {u["unit_id"] for u in listed["units"]} == {uid, photo} and listed["total"] == 2
    assert tool_call(mem, "memory_list", {"limit": 1})["units"][0]["layer"] == "context"

    assert tool_call(mem, "memory_recall", {"query": "光伏板", "top_k": 1})["recalled"] == [uid]
    assert mem.document(uid).layer == "context"

    assert tool_call(mem, "memory_remove", {"unit_id": photo}) == \
        {"unit_id": photo, "layer": "documents", "removed": True}
    with pytest.raises(FsmemError):
        mem.document(photo)
    assert mem.fsck() == []


def test_distill_dry_run_by_default_then_graph_tools(root):
    mem = Memory.open(root)
    uid = mem.commit("My sister lives in Boston. I work at Airbus.", summary="en")
    before = snapshot(root)
    dry = tool_call(mem, "memory_distill", {"max_age_hours": 0, "max_access": 100})
    assert dry["dry_run"] is True and dry["triples"] >= 1 and dry["distilled"] == []
    assert snapshot(root) == before and mem.document(uid).layer == "documents"
    done = tool_call(mem, "memory_distill", {"dry_run": False, "max_age_hours": 0,
                                              "max_access": 100})
    assert done["distilled"] == [uid] and mem.document(uid).layer == "stablemem"
    found = tool_call(mem, "graph_search", {"text": "Boston"})
    assert "Boston" in {e["name"] for e in found["entities"]}
    assert any(p["unit_id"] == uid for r in found["relations"] for p in r["provenance"])
    near = tool_call(mem, "graph_neighbors", {"name": "Boston", "depth": 1})
    assert near["relations"] and "Boston" in {e["name"] for e in near["entities"]}
    assert mem.fsck() == []


BAD = [
    ("coldcontext_query", {}, "query: is required"),
    ("coldcontext_query", {"query": "x", "top_k": "3"}, "top_k:"),
    ("coldcontext_query", {"query": "x", "top_k": 0}, "top_k:"),
    ("coldcontext_query", {"query": "x", "top_k": -1}, "top_k: -1 is less than the minimum of 1"),
    ("coldcontext_query", {"query": "x", "top_k": 3.5}, "top_k: 3.5 is not of type 'integer'"),
    ("memory_update", {"unit_id": "u-x", "content": " \n\t"}, "content: must not be blank"),
    ("coldcontext_query", {"query": "   "}, "query:"),
    ("coldcontext_query", {"query": "x", "topk": 3}, "topk:"),
    ("coldcontext_commit", {"content": 42}, "content:"),
    ("coldcontext_commit", {"content": "x", "tags": "energy"}, "tags:"),
    ("coldcontext_commit", {"content": "x", "media_digests": ["zz"]}, "media_digests[0]:"),
    ("coldcontext_commit", {"content": "x", "media_digests": ["deadbeefdeadbeef"]}, "deadbeef"),
    ("memory_recall", {"query": "x", "top_k": True}, "top_k:"),
    ("memory_append", {}, "'input' or 'response'"),
    ("memory_append", {"input": "x", "timestamp": "yesterday"}, "timestamp"),
    ("memory_append", {"input": "x", "tool_results": [{"name": "a"}]}, "output:"),
    ("memory_render", {"budget_tokens": -5}, "budget_tokens:"),
    ("memory_show", {"unit_id": "../../etc"}, "unit_id:"),
    ("memory_show", {"unit_id": "u-missing"}, "u-missing"),
    ("memory_list", {"layer": "attic"}, "layer:"),
    ("memory_remove", {"unit_id": "u-missing"}, "u-missing"),
    ("memory_remove", {}, "unit_id:"),
    ("graph_search", {"text": ""}, "text:"),
    ("graph_neighbors", {"name": "x", "depth": 9}, "depth:"),
    ("memory_distill", {"dry_run": "no"}, "dry_run:"),
    ("memory_distill", {"max_age_hours": -1}, "max_age_hours:"),
    ("no_such_tool", {}, "no_such_tool"),
]


def test_bad_arguments_name_the_argument_and_change_nothing(root):
    mem = Memory.open(root)
    mem.commit("屋顶光伏板今天发电 14.2 kWh", summary="solar")
    mem.append({"role": "user", "content": "hello"})
    before = snapshot(root)
    for name, args, needle in BAD:
        with pytest.raises(FsmemError) as info:
            tool_call(mem, name, args)
        assert needle in str(info.value), (name, args, str(info.value))
    for raw in ("{not json", "[1, 2]", '"query"'):
        with pytest.raises(BadArgument, match="coldcontext_query"):
            call(mem, "coldcontext_query", raw)
    assert snapshot(root) == before
    assert mem.fsck() == []


def test_root_path_target_and_missing_store(tmp_path):
    root = tmp_path / "mem"
    with pytest.raises(FsmemError, match="not an fsmem store"):
        call(str(root), "memory_list", "{}")
    assert not root.exists()                      # a read never creates a store
    Memory.open(root).commit("one fact", summary="f")
    assert call(str(root), "memory_list", "{}")["total"] == 1


def _readme_blocks() -> list[tuple[str, str]]:
    import re
    text = (Path(REPO) / "README.md").read_text("utf-8")
    section = text.split("## Use it from an agent", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def _mcp_lists_tools(config: dict, *, cwd: Path, env: dict) -> None:
    """Start the server as a desktop client would, from its config, over the SDK's stdio
    client, somewhere else than the store, and list its tools."""
    pytest.importorskip("mcp")
    import os

    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    params = StdioServerParameters(command=config["command"], args=config["args"],
                                   cwd=str(cwd), env=env)

    async def main() -> None:
        async with stdio_client(params, errlog=open(os.devnull, "w")) as (r, w), \
                ClientSession(r, w) as s:
            await s.initialize()
            assert len((await s.list_tools()).tools) == len(TOOLS)
    anyio.run(main)


def test_readme_agent_section_runs(tmp_path):
    """Every code block of README "Use it from an agent" runs as written."""
    import os
    import runpy
    blocks = _readme_blocks()
    assert [lang for lang, _ in blocks] == ["sh", "json", "python", "sh", "sh"]
    example = json.loads(blocks[1][1])["mcpServers"]["fsmem"]
    assert os.path.isabs(example["command"]) and example["command"].endswith(".venv/bin/fsmem")
    assert example["args"][:2] == ["mcp", "--root"] and os.path.isabs(example["args"][2])
    work = tmp_path / "work"
    (work / "fixtures" / "chatgpt").mkdir(parents=True)
    for name in ("conversations.json", "export.zip"):
        (work / "fixtures" / "chatgpt" / name).write_bytes(
            (Path(REPO) / "fixtures" / "chatgpt" / name).read_bytes())
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "fsmem"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m fsmem.cli "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    printed = subprocess.run(["bash", "-e", "-c", blocks[0][1]], cwd=work, env=env, check=True,
                             capture_output=True, text=True).stdout
    config = json.loads(printed.splitlines()[-1])["mcpServers"]["fsmem"]
    # absolute paths: what a desktop client, started without this PATH or cwd, can run
    assert config == {"command": str(shim.resolve()),
                      "args": ["mcp", "--root", str((work / "memory").resolve())]}
    _mcp_lists_tools(config, cwd=tmp_path, env={"PYTHONPATH": str(REPO)})
    subprocess.run(["bash", "-e", "-c", blocks[3][1]], cwd=work, env=env, check=True,
                   capture_output=True)
    restored = Memory.open(work / "restored")
    assert len(restored.units("documents")) == 3 and restored.fsck() == []
    zipped = subprocess.run(["bash", "-e", "-c", blocks[4][1]], cwd=work, env=env, check=True,
                            capture_output=True, text=True)
    assert "1 images stored, 0 missing" in zipped.stdout
    chats = Memory.open(work / "chats")
    assert any(b.modality == "image" for u in chats.units("documents")
               for ev in chats.document(u).events for b in ev.blocks) and chats.fsck() == []
    script = tmp_path / "snippet.py"
    script.write_text(blocks[2][1], "utf-8")
    cwd = os.getcwd()
    os.chdir(work)
    try:
        ns = runpy.run_path(str(script))
    finally:
        os.chdir(cwd)
    assert ns["result"]["hits"][0]["summary"] == "solar"
    assert ns["definitions"] == definitions("openai")


def test_memory_update_replaces_the_text_in_search_and_keeps_the_old_version(tmp_path):
    mem = Memory.open(tmp_path / "m")
    old = call(mem, "coldcontext_commit", {"content": "the bin goes out on tuesday",
                                           "summary": "bin day"})["unit_id"]
    got = call(mem, "memory_update", {"unit_id": old, "content": "the bin goes out on friday"})
    assert got["supersedes"] == old and got["summary"] == "bin day"
    hits = call(mem, "coldcontext_query", {"query": "bin goes out", "top_k": 5})["hits"]
    assert [h["unit_id"] for h in hits] == [got["unit_id"]] and "friday" in hits[0]["text"]
    shown = call(mem, "memory_show", {"unit_id": old})
    assert "tuesday" in json.dumps(shown, ensure_ascii=False)
    hist = call(mem, "memory_history", {"unit_id": got["unit_id"]})["versions"]
    assert [(v["unit_id"], v["current"], v["supersedes"]) for v in hist] == [
        (old, False, ""), (got["unit_id"], True, old)]
    with pytest.raises(FsmemError, match="updated by"):
        call(mem, "memory_update", {"unit_id": old, "content": "again"})
    with pytest.raises(BadArgument, match="content"):
        call(mem, "memory_update", {"unit_id": old})


def test_arguments_are_checked_by_the_published_schema_itself(root):
    """issue 30: one source of truth. jsonschema (draft 2020-12) against the schema the tool
    publishes: what it accepts runs (``top_k: 3.0`` is an integer there), what it refuses is
    refused, and a text that must not be blank says so in the schema a model reads."""
    jsonschema = pytest.importorskip("jsonschema")
    mem = Memory.open(root)
    uid = mem.commit("the boiler pressure should stay near 1.5 bar", summary="boiler")
    got = call(mem, "coldcontext_query", {"query": "boiler pressure", "top_k": 3.0})
    assert [h["unit_id"] for h in got["hits"]] == [uid]
    assert call(mem, "memory_list", {"limit": 2.0})["total"] == 1
    samples = [("coldcontext_query", {"query": "boiler", "top_k": 3.0}),
               ("coldcontext_query", {"query": "   "}), ("coldcontext_query", {"query": "x\x00"}),
               ("coldcontext_commit", {"content": "\t"}), ("memory_append", {"source": " "}),
               ("memory_list", {"limit": 0}), ("memory_show", {"unit_id": uid}),
               ("graph_neighbors", {"name": "x", "depth": 2.0})]
    for name, args in samples:
        schema = {d["name"]: d for d in definitions("anthropic")}[name]["input_schema"]
        valid = jsonschema.Draft202012Validator(schema).is_valid(args)
        try:
            call(mem, name, args)
            accepted = True
        except BadArgument:
            accepted = False
        except FsmemError:
            accepted = True    # past validation: the store answered
        assert accepted is valid, (name, args)
    blank = {t.name: t.schema for t in TOOLS}["coldcontext_commit"]["properties"]["content"]
    assert blank["pattern"] == r"\S"
