"""fsmem mcp driven by the MCP SDK's real stdio client: a real server subprocess, every tool,
bad arguments, a missing store, resources; the store ends fsck clean holding what was said."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from conftest import REPO, make_png, make_wav  # noqa: E402
from fsmem import MediaAttachment, Memory, Timestamp  # noqa: E402
from fsmem.interfaces.tools import TOOLS  # noqa: E402


def session(root: Path, *extra: str):
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "fsmem.cli", "mcp", "--root", str(root), *extra],
                                   cwd=str(REPO), env={"PYTHONPATH": str(REPO)})
    return stdio_client(params, errlog=open(os.devnull, "w"))


async def _call(s: ClientSession, name: str, args: dict) -> dict:
    res = await s.call_tool(name, args)
    assert not res.is_error, (name, res.content)
    data = json.loads(res.content[0].text)
    assert data == res.structured_content
    return data


async def _error(s: ClientSession, name: str, args: dict) -> str:
    res = await s.call_tool(name, args)
    assert res.is_error, (name, args)
    return res.content[0].text


def test_tools_listed_with_schemas_and_annotations(tmp_path):
    async def main() -> None:
        async with session(tmp_path / "m", "--init") as (r, w), ClientSession(r, w) as s:
            init = await s.initialize()
            assert init.server_info.name == "fsmem"
            assert init.capabilities.tools is not None and init.capabilities.resources
            listed = {t.name: t for t in (await s.list_tools()).tools}
            assert list(listed) == [t.name for t in TOOLS]
            for spec in TOOLS:
                tool = listed[spec.name]
                assert tool.input_schema == spec.schema and tool.description == spec.description
                a = tool.annotations
                assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint) == \
                    (spec.read_only, spec.destructive, spec.idempotent)
            assert listed["memory_remove"].annotations.destructive_hint is True
            assert listed["coldcontext_query"].annotations.read_only_hint is True
    anyio.run(main)


def test_every_tool_over_stdio(tmp_path):
    root = tmp_path / "m"
    mem = Memory.open(root)
    png, wav = make_png(seed=5), make_wav()
    photo = mem.commit("balcony photo", summary="photo",
                       attachments=[MediaAttachment(data=png, mime="image/png"),
                                    MediaAttachment(data=wav, mime="audio/wav")])
    png_digest = next(b.digest for b in mem.document(photo).blocks if b.mime == "image/png")
    mem.close()
    seen: dict = {}

    async def main() -> None:
        async with session(root) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            made = await _call(s, "coldcontext_commit", {
                "content": "屋顶光伏板今天发电 14.2 kWh", "summary": "solar",
                "tags": ["energy"], "media_digests": [png_digest[:10]]})
            seen["solar"] = made["unit_id"]
            raw = await s.call_tool("coldcontext_commit", {"content": "again", "media_digests":
                                                           [png_digest]})
            assert [c.type for c in raw.content] == ["text", "resource_link"]
            seen["again"] = raw.structured_content["unit_id"]
            assert str(raw.content[1].uri).endswith(f"/block/{png_digest}")
            en = await _call(s, "coldcontext_commit", {
                "content": "My sister lives in Boston. I work at Airbus."})
            seen["en"] = en["unit_id"]
            hits = (await _call(s, "coldcontext_query", {"query": "光伏板发电"}))["hits"]
            assert hits[0]["unit_id"] == made["unit_id"] and "14.2" in hits[0]["text"]
            Timestamp.parse(hits[0]["created_at"])

            shown = await s.call_tool("memory_show", {"unit_id": photo})
            kinds = [c.type for c in shown.content]
            assert kinds == ["text", "image", "resource"], kinds
            assert base64.b64decode(shown.content[1].data) == png
            assert shown.content[1].mime_type == "image/png"
            assert base64.b64decode(shown.content[2].resource.blob) == wav
            assert str(shown.content[2].resource.uri).startswith(f"fsmem://unit/{photo}/block/")

            ts = "2026-05-06T07:08:09.987654321-03:00"
            ev = await _call(s, "memory_append", {"input": "咖啡机漏水", "response": "换密封圈",
                                                  "timestamp": ts})
            seen["event"], seen["ts"] = ev["event_id"], ts
            text = (await _call(s, "memory_render", {"budget_tokens": 500}))["text"]
            assert "咖啡机漏水" in text
            listed = await _call(s, "memory_list", {"layer": "documents"})
            assert {u["unit_id"] for u in listed["units"]} == {photo, made["unit_id"],
                                                               en["unit_id"], seen["again"]}
            rec = await _call(s, "memory_recall", {"query": "光伏板", "top_k": 1})
            assert rec["recalled"] == [made["unit_id"]]
            # recalled into L1: the L2 query no longer has it, the default search does
            assert made["unit_id"] not in {h["unit_id"] for h in (await _call(
                s, "coldcontext_query", {"query": "光伏板", "top_k": 5}))["hits"]}
            found = await _call(s, "memory_search", {"query": "光伏板", "top_k": 5})
            assert [(h["unit_id"], h["layer"]) for h in found["hits"]][:1] == \
                [(made["unit_id"], "context")]
            assert (await _call(s, "memory_remove", {"unit_id": photo}))["removed"] is True

            dry = await _call(s, "memory_distill", {"max_age_hours": 0, "max_access": 100})
            assert dry["dry_run"] is True and dry["distilled"] == []
            done = await _call(s, "memory_distill", {"dry_run": False, "max_age_hours": 0,
                                                     "max_access": 100})
            assert en["unit_id"] in done["distilled"]
            facts = await _call(s, "memory_search", {"query": "Boston", "layers": ["stablemem"]})
            assert facts["hits"] and all(h["layer"] == "stablemem" for h in facts["hits"])
            assert any("Boston" in f["object"] + f["subject"]
                       for h in facts["hits"] for f in h["facts"])
            found = await _call(s, "graph_search", {"text": "Boston"})
            assert "Boston" in {e["name"] for e in found["entities"]}
            near = await _call(s, "graph_neighbors", {"name": "Boston"})
            assert near["relations"]

            for name, args, needle in [
                    ("coldcontext_query", {"query": "x", "top_k": "many"}, "'top_k'"),
                    ("coldcontext_query", {}, "'query'"),
                    ("memory_show", {"unit_id": "../etc"}, "'unit_id'"),
                    ("memory_show", {"unit_id": photo}, photo),       # removed above
                    ("memory_remove", {"unit_id": "u-nope"}, "u-nope"),
                    ("coldcontext_commit", {"content": "x", "media_digests": ["ffffffffff"]},
                     "ffffffffff"),
                    ("memory_append", {"input": "x", "when": "now"}, "'when'"),
                    ("no_such_tool", {}, "no_such_tool")]:
                assert needle in await _error(s, name, args)
            assert len((await s.list_tools()).tools) == len(TOOLS)   # still serving

            res = await s.list_resources()
            uris = {str(x.uri) for x in res.resources}
            assert f"fsmem://unit/{made['unit_id']}" in uris and len(uris) == 4
            unit = await s.read_resource(f"fsmem://unit/{made['unit_id']}")
            body = json.loads(unit.contents[0].text)
            assert body["layer"] == "context" and body["events"][0]["input"].startswith("屋顶")
            block = await s.read_resource(f"fsmem://unit/{made['unit_id']}/block/{png_digest}")
            assert base64.b64decode(block.contents[0].blob) == png
    anyio.run(main)

    mem = Memory.open(root)
    assert mem.fsck() == []
    assert mem.units("documents") == [seen["again"]]
    assert sorted(mem.units("stablemem")) == [seen["en"]]
    context = mem.units("context")
    assert seen["solar"] in context
    tl = {e.id: e for e in mem.timeline()}
    assert tl[seen["event"]].timestamp == Timestamp.parse(seen["ts"])
    assert tl[seen["event"]].response == "换密封圈"
    assert photo not in mem.units("documents") and photo not in context


def test_missing_store_is_a_clear_tool_error(tmp_path):
    root = tmp_path / "absent"

    async def main() -> None:
        async with session(root) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            assert "not an fsmem store" in await _error(s, "memory_list", {})
            assert "not an fsmem store" in await _error(s, "coldcontext_query", {"query": "x"})
            assert "'top_k'" in await _error(s, "coldcontext_query", {"query": "x", "top_k": -1})
    anyio.run(main)
    assert not root.exists()


def _free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_on_loopback(tmp_path):
    import socket
    import subprocess
    import time
    from mcp.client.streamable_http import streamable_http_client
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fsmem.cli", "mcp", "--http", "--port",
                             str(port), "--root", str(tmp_path / "m"), "--init"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        listening = Path("/proc/net/tcp").read_text() if Path("/proc/net/tcp").exists() else ""
        rows = [ln.split() for ln in listening.splitlines()[1:]]
        local = {r[1] for r in rows if r[3] == "0A" and int(r[1].split(":")[1], 16) == port}
        if rows:
            assert local == {f"0100007F:{port:04X}"}  # 127.0.0.1 only, never 0.0.0.0

        async def main() -> None:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (r, w), \
                    ClientSession(r, w) as s:
                await s.initialize()
                assert len((await s.list_tools()).tools) == len(TOOLS)
                made = await _call(s, "coldcontext_commit", {"content": "over http"})
                listed = await _call(s, "memory_list", {})
                assert listed["units"][0]["unit_id"] == made["unit_id"]
        anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert Memory.open(tmp_path / "m").fsck() == []


def test_a_server_per_agent_shares_l2_and_keeps_private_units_and_l1_apart(tmp_path):
    """issue 34: ``fsmem mcp --agent NAME``: the tools act as that agent."""
    root = tmp_path / "m"

    async def main() -> None:
        async with session(root, "--init", "--agent", "kitchen") as (r, w), \
                ClientSession(r, w) as s:
            await s.initialize()
            shared = (await _call(s, "coldcontext_commit",
                                  {"content": "the wifi password is on the fridge"}))["unit_id"]
            secret = (await _call(s, "coldcontext_commit",
                                  {"content": "the wifi router admin code is 4711",
                                   "private": True}))["unit_id"]
            await _call(s, "memory_append", {"input": "kitchen timer for the bread"})
            own = await _call(s, "coldcontext_query", {"query": "wifi", "top_k": 5,
                                                       "scope": "own"})
            assert {h["unit_id"] for h in own["hits"]} == {shared, secret}
        async with session(root, "--agent", "garage") as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            hits = await _call(s, "coldcontext_query", {"query": "wifi router code", "top_k": 5})
            assert [(h["unit_id"], h["agent"]) for h in hits["hits"]] == [(shared, "kitchen")]
            assert "not found" in await _error(s, "memory_show", {"unit_id": secret})
            listed = await _call(s, "memory_list", {})
            assert secret not in {u["unit_id"] for u in listed["units"]}
            assert not [u for u in listed["units"] if u["layer"] == "context"]   # kitchen's L1
            resources = {str(x.uri) for x in (await s.list_resources()).resources}
            assert f"fsmem://unit/{shared}" in resources
            assert f"fsmem://unit/{secret}" not in resources
    anyio.run(main)
