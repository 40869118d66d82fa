"""MCP servers that attack their client (SPEC 9.1, 12): schemas that reach outside or
backtrack, results far too large, tool names that collide across servers. The hostile
server is a real stdio MCP server (tests/_hostile_mcp_server.py)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import events
from runtime.outside.mcp import McpSnapshot, McpTool, ServerState
from runtime.repo import load_bundle, load_repo
from runtime.surface.caller import Caller
from runtime.surface.resolution import resolve
from runtime.testing import ScriptedModel, reply, tool_calls
from runtime.tools import Tool
from runtime.tools.remote import mcp_tools
from tests._harness import done, of_type
from tests._http_api import LoopbackApi

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).with_name("_hostile_mcp_server.py")
WORD = "a" * 27 + "!"  # Python's re needs ~2**27 steps to refuse it against ^(a+)+$


def hostile(**env: str) -> dict[str, Any]:
    return {"transport": "stdio", "command": "python", "args": [str(SERVER)], "env": env}


def repo_files(servers: dict[str, Any], **files: Any) -> dict[str, Any]:
    return {
        "amodal.json": {"name": "t", "version": "1", "mcp": {"servers": servers}},
        "agents/default/AGENT.md": "You are the lead.\n",
        "agents/default/agent.json": {"mcp": sorted(servers)},
        **files,
    }


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "private.json"
    path.write_text(json.dumps({"type": "string", "title": "the-private-file-contents"}))
    return path


async def test_a_schema_that_reaches_outside_or_nowhere_is_a_bad_schema_for_that_tool_alone(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    http_api: LoopbackApi,
    secret_file: Path,
) -> None:
    env = {"HOSTILE_URL": http_api.url + "/schema.json", "HOSTILE_FILE": str(secret_file)}
    lab = await harness_for(make_repo(repo_files({"h": hostile(**env)})))
    seen = lab.runtime.inspect("default")
    offered = sorted(t for t in seen["tools"] if t.startswith("h__"))
    assert offered == ["h__backtrack", "h__delete", "h__huge", "h__keys", "h__local_ref",
                       "h__shaped"]  # fmt: skip
    why = {e["name"]: e["reason"] for e in seen["excluded"] if e["kind"] == "tool"}
    assert "only local references" in why["h__fetch_ref"]
    assert "only local references" in why["h__file_ref"]
    assert "does not resolve within the schema" in why["h__missing_ref"]
    assert "cannot run on RE2" in why["h__lookahead"]
    scripted_model.enqueue(
        tool_calls([("h__fetch_ref", {"x": 1}), ("h__file_ref", {"x": 1}),
                    ("h__missing_ref", {"x": 1}), ("h__local_ref", {"word": "too long"})]),
        reply("done"),
    )  # fmt: skip
    streamed = await lab.chat("go")
    assert done(streamed).reason == "model_stop"
    results = of_type(streamed, events.ToolResult)
    assert [r.status for r in results] == ["error"] * 4
    assert "'too long' is too long" in results[3].error
    assert http_api.requests == []  # no schema was fetched
    assert "the-private-file-contents" not in json.dumps([e.to_json() for e in streamed])


async def test_a_backtracking_pattern_never_blocks_the_event_loop(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
) -> None:
    lab = await harness_for(make_repo(repo_files({"h": hostile()})))
    scripted_model.enqueue(
        tool_calls([("h__backtrack", {"word": WORD}), ("h__keys", {WORD: 1}),
                    ("h__shaped", {"text": "x"})]),
        reply("done"),
    )  # fmt: skip
    longest_pause = 0.0

    async def tick() -> None:
        nonlocal longest_pause
        last = time.monotonic()
        while True:
            await anyio.sleep(0.05)
            now = time.monotonic()
            longest_pause, last = max(longest_pause, now - last), now

    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        streamed = await lab.chat("go")
        group.cancel_scope.cancel()
    assert done(streamed).reason == "model_stop"
    backtrack, keys, shaped = of_type(streamed, events.ToolResult)
    assert backtrack.status == "error" and "does not match '^(a+)+$'" in backtrack.error
    assert keys.status == "ok"  # the key does not match the pattern: nothing to check
    assert shaped.status == "error" and "broke its outputSchema" in shaped.error
    # Python's re would hold the loop for many seconds on each; RE2 answers at once.
    assert longest_pause < 2.0, longest_pause


async def test_a_huge_result_is_stored_cut_at_max_result_bytes(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    server = {**hostile(), "maxResultBytes": 10_000}
    lab = await harness_for(make_repo(repo_files({"h": server})))
    scripted_model.enqueue(tool_calls([("h__huge", {"bytes": 1_500_000})]), reply("done"))
    streamed = await lab.chat("go")
    [result] = of_type(streamed, events.ToolResult)
    assert result.result["truncated"] is True
    assert len(result.result["text"]) == 10_000
    session = await lab.runtime.storage.list_events(done(streamed).session_id)
    stored = json.dumps([entry.data for entry in session])
    assert "h" * 10_001 not in stored and "h" * 10_000 in stored


def test_a_result_limit_is_checked_like_every_field(make_repo: Callable[..., Path]) -> None:
    root = make_repo(repo_files({"h": {**hostile(), "maxResultBytes": 10}}))
    assert any("maxResultBytes" in str(e) for e in load_repo(root).errors)


@pytest.mark.parametrize(
    "names",
    [("docs", "docs__admin"), ("a", "a_"), ("my-db", "my_db"), ("x", "x__y__z")],
)
def test_servers_whose_tool_names_could_collide_are_refused(
    make_repo: Callable[..., Path], names: tuple[str, str]
) -> None:
    root = make_repo(repo_files({name: hostile() for name in names}))
    errors = [str(e) for e in load_repo(root).errors]
    assert any("could give two tools one name" in e for e in errors), errors


def test_servers_whose_names_only_look_alike_are_fine(make_repo: Callable[..., Path]) -> None:
    root = make_repo(repo_files({name: hostile() for name in ("docs", "docs-admin", "doc")}))
    assert not load_repo(root).errors


class _Recorder:
    """Stands for the runtime's MCP servers: records which server each call reached."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def call(self, server: str, tool: str, arguments: dict[str, Any]) -> Any:
        self.calls.append((server, tool))
        return "ok"


async def test_a_tool_is_found_and_called_on_the_server_it_was_granted_from(
    make_repo: Callable[..., Path],
) -> None:
    # Two servers offering one name can no longer be declared (above); should they meet
    # all the same, an agent that lists `docs` still reaches docs's tool, never the other.
    bundle = load_bundle(make_repo(repo_files({"docs": hostile()})))
    docs = bundle.mcp_servers["docs"]
    admin = dataclasses.replace(docs, name="docs__admin")
    bundle = dataclasses.replace(bundle, mcp_servers={"docs": docs, "docs__admin": admin})
    schema = {"type": "object"}
    own = McpTool("docs", "admin__delete", "docs__admin__delete", "docs's tool", schema)
    other = McpTool("docs__admin", "delete", "docs__admin__delete", "admin's tool", schema)
    snapshot = McpSnapshot.of(
        [ServerState("docs", "ready", (own,)), ServerState("docs__admin", "ready", (other,))]
    )
    caller = Caller().surface_context("default", {})
    surface = resolve(bundle, "default", caller, servers=snapshot)
    assert dict(surface.mcp_tools) == {"docs__admin__delete": "docs"}
    recorder = _Recorder()
    tools = mcp_tools(bundle, surface, snapshot, recorder)  # type: ignore[arg-type]
    assert tools["docs__admin__delete"].description == "docs's tool"
    await tools["docs__admin__delete"].handler({}, None)  # type: ignore[arg-type]
    assert recorder.calls == [("docs", "admin__delete")]


def test_a_schema_that_cannot_be_applied_is_an_argument_error_naming_the_tool() -> None:
    async def handler(arguments: dict[str, Any], context: Any) -> Any:
        return None

    broken = {"type": "object", "properties": {"x": {"$ref": "#/$defs/nowhere"}}}
    tool = Tool("h__broken", "", broken, handler)
    [problem] = tool.argument_errors({"x": 1})
    assert "inputSchema of tool 'h__broken' cannot be applied" in problem
    remote = {"type": "object", "properties": {"x": {"$ref": "http://127.0.0.1:1/s.json"}}}
    [problem] = Tool("h__remote", "", remote, handler).argument_errors({"x": 1})
    assert "h__remote" in problem


def test_a_schema_naming_an_unknown_dialect_or_fetching_through_its_id_is_refused() -> None:
    from runtime._jsonschema import schema_problem

    unknown = {"$schema": "http://127.0.0.1:1/dialect", "type": "object"}
    assert schema_problem(unknown) is None  # checked as 2020-12, nothing fetched
    relative = {"$id": "http://127.0.0.1:1/base/", "type": "object",
                "properties": {"x": {"$ref": "other.json"}}}  # fmt: skip
    assert "only local references" in (schema_problem(relative) or "")
