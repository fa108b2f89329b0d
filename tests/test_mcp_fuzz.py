"""Hostile tool arguments (issue 29, item 5): every tool in fsmem.interfaces.tools.TOOLS, called
with hostile numbers (1e308, -1e308, inf and nan as floats and as strings, 10**30, negatives,
floats where ints are expected, booleans) and hostile strings (empty, blank, 1 MB, NUL bytes,
lone surrogates, path traversal, non-hex ids) and wrong types (lists, objects, null) for every
property, returns a valid result or a tool error (an FsmemError: BadArgument naming the argument,
NotFound, InvalidName; the MCP server turns it into ``isError``), never another exception (a
raw ValueError or UnicodeEncodeError names nothing), and a refused call changes nothing stored.
In process through ``tools.call`` (hypothesis, a bounded number of examples per tool), and a
sample through the real MCP server over the SDK's stdio client, which keeps serving after.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO
from fsmem import Event, Memory, Timestamp
from fsmem.format.errors import FsmemError
from fsmem.interfaces import tools
from fsmem.interfaces.tools import TOOLS

pytest.importorskip("jsonschema")

HOSTILE_NUMBERS = [1e308, -1e308, float("inf"), float("-inf"), float("nan"), "inf", "nan",
                   "1e308", "-1", 10**30, -10**30, 2**63, -1, 0, -0.0, 1.5, 3.0, True, False]
BIG = "x" * 1_000_000   # 1 MB: every property at once (test_through_the_root_...)
HOSTILE_STRINGS = ["", " ", "\t\n", "\x00", "a\x00b", "\ud800", "x\udfffy",
                   "../../etc/passwd", "/etc/passwd", "..", ".", "zzzzzzzz", "u-" + "g" * 30,
                   "u-20261130T054012-" + "0" * 12, "\u202egnp.exe", "😀" * 10, "a" * 300,
                   "2026-13-45T99:99:99Z", "0000-01-01T00:00:00-05:00", "9999-12-31T23:59:59-14:00"]
WRONG_TYPES = [None, [], {}, [1, 2], {"a": 1}, ["\x00"], [None], [{"name": None}],
               [{"name": "x", "output": "\ud800"}], [["nested"]]]
HOSTILE = HOSTILE_NUMBERS + HOSTILE_STRINGS + WRONG_TYPES

hostile_value = st.one_of(
    st.sampled_from(HOSTILE),
    st.lists(st.sampled_from(HOSTILE), max_size=3),
    st.text(max_size=40),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
)


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every stored file's inode, size and mtime, derived and ephemeral state aside (the
    index, the lock, the access log)."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("index",)]
        for f in files:
            if f in ("lock", "access.log", "legacy-reported"):
                continue
            st = os.lstat(os.path.join(d, f))
            out[os.path.relpath(os.path.join(d, f), root)] = (st.st_ino, st.st_size,
                                                              st.st_mtime_ns)
    return out


@pytest.fixture
def store(tmp_path) -> tuple[Memory, str]:
    """A small store of its own per test (what an accepted call writes stays in it), one
    writer kept open and flushes off: the calls are many, and a flush proves nothing here."""
    mem = Memory.open(tmp_path / "m", durability="off")
    for i in range(4):
        mem.append(Event(timestamp=Timestamp.parse(f"2026-05-01T09:0{i}:00+08:00"), source="qq",
                         role="user", input=f"piano recital {i} at seven"))
    uid = mem.commit("the recital is at seven in the small hall", summary="recital")
    yield mem, uid
    mem.close()


def valid_args(spec: tools.ToolSpec, uid: str) -> dict:
    """Arguments that the tool accepts, for the properties the fuzz does not replace."""
    base = {"query": "piano", "text": "piano", "name": "piano", "content": "a note",
            "unit_id": uid}
    return {k: base[k] for k in spec.required if k in base}


def check(mem: Memory, name: str, args, *, by_root: bool = False) -> None:
    """One call: a result that is JSON, or an FsmemError and nothing stored changed."""
    root = mem.root
    before = tree(root)
    try:
        result = tools.call(root if by_root else mem, name, args)
    except FsmemError:
        assert tree(root) == before, (name, repr(args)[:200])   # refused: nothing changed
        return
    json.dumps(result)   # a valid result is JSON


@pytest.mark.parametrize("spec", TOOLS, ids=lambda t: t.name)
def test_every_property_hostile_is_a_tool_error_or_a_result(store, spec):
    mem, uid = store
    props = sorted(spec.properties)

    @settings(max_examples=20, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.dictionaries(st.sampled_from(props), hostile_value, min_size=1, max_size=3)
           if props else st.just({}))
    def run(hostile: dict) -> None:
        check(mem, spec.name, {**valid_args(spec, uid), **hostile})

    run()


@pytest.mark.parametrize("spec", TOOLS, ids=lambda t: t.name)
def test_each_hostile_value_in_each_property(store, spec):
    """The fixed list, exhaustively: each hostile value in each property (and as the whole
    arguments, and under an unknown name)."""
    mem, uid = store
    for prop, schema in spec.properties.items():
        for value in hostile_for(schema):
            check(mem, spec.name, {**valid_args(spec, uid), prop: value})
    for value in HOSTILE:
        check(mem, spec.name, value if not isinstance(value, (int, float)) else {"x": value})
        check(mem, spec.name, {**valid_args(spec, uid), "no_such_argument": value})


def hostile_for(schema: dict) -> list:
    """The hostile values for one property: all of its own kind, a few of every other kind."""
    kind = schema.get("type")
    if kind in ("integer", "number", "boolean"):
        return HOSTILE_NUMBERS + HOSTILE_STRINGS[:8] + WRONG_TYPES[:5]
    if kind == "string":
        return HOSTILE_STRINGS + HOSTILE_NUMBERS[:8] + WRONG_TYPES[:5]
    return WRONG_TYPES + [[v] for v in HOSTILE_STRINGS[:10]] + HOSTILE_NUMBERS[:5]


def test_unknown_tool_names_and_argument_strings(store):
    mem, uid = store
    for name in ("", "\x00", "../../etc/passwd", "memory_search\x00", None, 1, ["memory_list"]):
        with pytest.raises(FsmemError):
            tools.call(mem, name, {})
    for raw in ("{", "[]", "null", "1e308", '{"query": NaN}', '{"top_k": Infinity}', "\ud800",
                '{"query": "\\ud800"}', "\x00", " " * 10):
        check(mem, "memory_search", raw)


def test_through_the_root_and_the_store_is_clean_after(store):
    """``tools.call`` on the store's root (each call opens its own reader or writer), NUL
    bytes and lone surrogates in every property at once; then the store reads back fsck
    clean, whatever was stored."""
    mem, uid = store
    mem.close()
    for spec in TOOLS:
        for bad in ("\x00", "\ud800", BIG):
            check(mem, spec.name, {**valid_args(spec, uid), **{p: bad for p in spec.properties}},
                  by_root=True)
    with Memory.open(mem.root) as again:
        assert again.fsck() == []


#: a sample through the real server: (tool, arguments) the fuzz above refuses or answers
MCP_SAMPLE = [
    ("memory_distill", {"max_age_hours": 1e308}),
    ("memory_distill", {"max_age_hours": -1e308, "dry_run": False}),
    ("memory_distill", {"max_age_hours": "nan"}),
    ("memory_distill", {"max_access": 10**30}),
    ("memory_search", {"query": "piano", "top_k": 10**30}),
    ("memory_search", {"query": "\x00"}),
    ("memory_search", {"query": ["piano"]}),
    ("memory_search", {"query": None}),
    ("memory_list", {"limit": 2.5, "offset": -1}),
    ("memory_list", {"limit": True}),
    ("memory_render", {"budget_tokens": -1e308}),
    ("memory_show", {"unit_id": "../../etc/passwd"}),
    ("memory_show", {"unit_id": "zzzzzzzz"}),
    ("memory_remove", {"unit_id": "u-20261130T054012-000000000000"}),
    ("memory_append", {"input": "a\x00b", "timestamp": "0000-01-01T00:00:00-05:00"}),
    ("memory_append", {"input": "x", "media_digests": ["../../etc"]}),
    ("coldcontext_commit", {"content": "x\x00y", "source": "../../etc/passwd"}),
    ("coldcontext_commit", {"content": "a note", "tags": {"a": 1}}),
    ("graph_neighbors", {"name": "piano", "depth": 1e308}),
    ("memory_update", {"unit_id": None, "content": "x"}),
]


def test_a_sample_through_the_real_mcp_server(tmp_path):
    """The same hostile arguments over the SDK's stdio client: each is a tool error
    (``isError``) or a result, the server keeps serving, and a refused call stored nothing.
    (The SDK's client cannot send a lone surrogate at all: its JSON encoder refuses it.)"""
    pytest.importorskip("mcp")
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    root = tmp_path / "m"
    with Memory.open(root) as mem:
        mem.commit("the recital is at seven", summary="recital")
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "fsmem", "mcp", "--root", str(root)],
                                   cwd=str(REPO), env={"PYTHONPATH": str(REPO)})

    async def main() -> None:
        async with stdio_client(params, errlog=open(os.devnull, "w")) as (r, w), \
                ClientSession(r, w) as s:
            await s.initialize()
            for name, args in MCP_SAMPLE:
                before = tree(root)
                with anyio.fail_after(60):   # a deadline against a hang, not a measurement
                    res = await s.call_tool(name, args)
                if res.is_error:
                    assert tree(root) == before, (name, args)
                    assert res.content and res.content[0].text.strip(), (name, args)
                else:
                    json.dumps(res.structured_content)
                listed = await s.call_tool("memory_list", {})   # still serving
                assert not listed.is_error

    anyio.run(main)
    with Memory.open(root) as mem:
        assert mem.fsck() == []
