"""MCP servers (SPEC 9.1) against real servers written with the SDK's MCPServer: stdio
subprocesses, and streamable HTTP and SSE servers on loopback."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from runtime import events
from runtime.api import Runtime
from runtime.server import Authenticator, create_app
from runtime.surface.caller import Caller
from runtime.testing import RecordedRequest, ScriptedModel, reply, tool_call, tool_calls
from tests._harness import Harness, done, of_type

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).with_name("_mcp_server.py")
DESK_TOOLS = [
    "desk__add", "desk__crash", "desk__fail", "desk__grow", "desk__picture", "desk__pid",
    "desk__shout", "desk__sleep", "desk__token",
]  # fmt: skip


def stdio(**extra: Any) -> dict[str, Any]:
    return {"transport": "stdio", "command": "python", "args": [str(SERVER)], **extra}


def repo_files(servers: dict[str, Any], **files: Any) -> dict[str, Any]:
    return {
        "amodal.json": {"name": "t", "version": "1", "mcp": {"servers": servers}},
        "agents/default/AGENT.md": "You are the lead.\n",
        "agents/default/agent.json": {"mcp": ["desk"], "subagents": ["helper"]},
        "agents/plain/AGENT.md": "You use no server.\n",
        "agents/helper/AGENT.md": "You add.\n",
        "agents/helper/agent.json": {"tools": ["desk__add"]},
        "agents/gated/AGENT.md": "Managers only.\n",
        "agents/gated/agent.py": (
            "def is_manager(ctx):\n    return ctx.claims['role'] == 'manager'\n\n\n"
            "agent = {'mcp': [{'name': 'desk', 'conditional': is_manager}]}\n"
        ),
        **files,
    }


async def wait_for(condition: Callable[[], bool], seconds: float = 30) -> None:
    with anyio.fail_after(seconds):
        while not condition():  # noqa: ASYNC110 - polling the servers' snapshot is the point
            await anyio.sleep(0.05)


def results(streamed: list[events.Event]) -> dict[str, events.ToolResult]:
    return {e.name: e for e in of_type(streamed, events.ToolResult)}


async def test_an_agent_gets_the_tools_of_the_servers_it_lists_and_no_other_agent_does(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any]
) -> None:
    lab = await harness_for(make_repo(repo_files({"desk": stdio()})))
    rt: Runtime = lab.runtime
    assert rt.mcp.snapshot().servers["desk"].as_json() == {
        "status": "ready", "tools": len(DESK_TOOLS), "error": None,
    }  # fmt: skip
    lead = rt.inspect("default")
    assert [t for t in lead["tools"] if t.startswith("desk__")] == DESK_TOOLS
    assert not [t for t in rt.inspect("plain")["tools"] if t.startswith("desk__")]
    # Per caller: the predicate reads a verified claim; the context proves nothing.
    assert "desk__add" in rt.inspect("gated", claims={"role": "manager"})["tools"]
    viewer = rt.inspect("gated", claims={"role": "viewer"}, context={"role": "manager"})
    assert not [t for t in viewer["tools"] if t.startswith("desk__")]
    assert {(e["kind"], e["name"]) for e in viewer["excluded"]} == {("mcp", "desk")}
    # A specialist gets only what it declares; unscoped chat every ready server's tools.
    helper = rt.inspect("helper", subagent=True)
    assert [t for t in helper["tools"] if t.startswith("desk__")] == ["desk__add"]
    assert set(DESK_TOOLS) <= set(rt.inspect("main")["tools"])


async def test_calls_map_results_errors_and_timeouts_and_the_turn_goes_on(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
) -> None:
    lab = await harness_for(make_repo(repo_files({"desk": stdio(timeout=1)})))
    scripted_model.enqueue(
        tool_calls(
            [
                ("desk__add", {"a": 2, "b": 3}),
                ("desk__shout", {"text": "hi"}),
                ("desk__picture", {}),
                ("desk__fail", {"reason": "no"}),
                ("desk__sleep", {"seconds": 30}),
                ("desk__add", {"a": "two"}),
            ]
        ),
        tool_call("desk__add", {"a": 1, "b": 1}),
        reply("done"),
    )
    streamed = await lab.chat("go", Caller())
    assert done(streamed).reason == "model_stop"
    found = of_type(streamed, events.ToolResult)
    assert (found[0].status, found[0].result) == ("ok", {"result": 5})
    assert (found[1].status, found[1].result) == ("ok", {"result": "HI"})
    assert found[2].result == {
        "content": [{"type": "image", "mime_type": "image/png", "bytes": 32}]
    }
    assert (found[3].status, found[3].error) == ("error", "Error executing tool fail: refused: no")
    assert found[4].status == "timeout"
    assert found[5].status == "error" and "invalid arguments" in found[5].error
    assert (found[6].status, found[6].result) == ("ok", {"result": 2})  # a hang hung nothing
    offered = scripted_model.requests[0].tools
    assert set(DESK_TOOLS) <= set(offered)


async def test_a_server_that_fails_to_start_shows_on_health_and_inspect_and_the_rest_works(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
) -> None:
    files = repo_files(
        {"desk": {"transport": "stdio", "command": "no-such-mcp-server-program"}},
        **{"agents/default/agent.json": {"mcp": ["desk"], "tools": ["desk__add"]}},
    )
    lab = await harness_for(make_repo(files))
    rt: Runtime = lab.runtime
    state = rt.mcp.snapshot().servers["desk"]
    assert state.status == "failed" and "no-such-mcp-server-program" in (state.error or "")
    view = rt.inspect("default")
    excluded = {(e["kind"], e["name"]): e["reason"] for e in view["excluded"]}
    assert excluded[("mcp", "desk")].startswith("server failed: cannot start")
    assert excluded[("tool", "desk__add")].startswith("server failed:")
    assert "## Unavailable MCP servers" in view["system_prompt"]
    assert "- desk: failed; missing tools: desk__add" in view["system_prompt"]

    app = create_app(rt, Authenticator(rt.bundle.config.auth, {}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        health = (await client.get("/health")).json()
        metrics = (await client.get("/metrics")).text
    assert health["status"] == "ok"
    assert health["mcp"]["desk"]["status"] == "failed"
    assert health["mcp"]["desk"]["tools"] == 0 and "no-such" in health["mcp"]["desk"]["error"]
    assert 'amodal_mcp_servers{status="failed"} 1.0' in metrics

    scripted_model.reply("I cannot reach that server right now.")
    streamed = await lab.chat("add 2 and 2")
    assert done(streamed).reason == "model_stop"
    assert not [t for t in scripted_model.requests[0].tools if t.startswith("desk__")]


async def test_a_server_that_crashes_mid_session_is_noticed_and_restarted(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
) -> None:
    lab = await harness_for(make_repo(repo_files({"desk": stdio()})))
    rt: Runtime = lab.runtime
    before = await rt.mcp.call("desk", "pid", {})
    scripted_model.enqueue(tool_call("desk__crash", {}), reply("it crashed"))
    streamed = await lab.chat("crash it")
    assert done(streamed).reason == "model_stop"
    assert results(streamed)["desk__crash"].status == "error"
    await wait_for(lambda: rt.mcp.snapshot().servers["desk"].status == "failed", 10)
    assert "desk__add" in [e["name"] for e in rt.inspect("default")["excluded"]]
    await wait_for(lambda: rt.mcp.snapshot().servers["desk"].status == "ready")
    after = await rt.mcp.call("desk", "pid", {})
    assert after != before


async def test_a_server_that_never_answers_initialize_fails_after_ten_seconds(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any]
) -> None:
    hang = {
        "transport": "stdio",
        "command": "python",
        "args": ["-c", "import time; time.sleep(120)"],
    }
    clock = time.monotonic()
    lab = await harness_for(make_repo(repo_files({"desk": hang})))
    state = lab.runtime.mcp.snapshot().servers["desk"]
    assert state.status == "failed"
    assert state.error == "the server did not answer initialize and tools/list within 10 s"
    assert time.monotonic() - clock < 60  # the runtime opened anyway


async def test_a_changed_tool_list_reaches_the_agent_on_its_next_turn(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
) -> None:
    lab = await harness_for(make_repo(repo_files({"desk": stdio()})))
    rt: Runtime = lab.runtime
    scripted_model.enqueue(tool_call("desk__grow", {}), reply("grown"))
    first = await lab.chat("grow")
    await wait_for(lambda: rt.mcp.snapshot().tool("desk", "desk__extra") is not None, 10)
    scripted_model.enqueue(tool_call("desk__extra", {"text": "x"}), reply("used it"))
    second = await lab.chat("use it", session_id=done(first).session_id)
    assert results(second)["desk__extra"].result == {"result": "extra x"}
    assert of_type(second, events.SurfaceChanged)
    assert "desk__extra" in scripted_model.requests[-2].tools


async def test_a_confirm_tool_waits_for_a_person_and_approval_survives_a_restart(
    make_repo: Callable[..., Path],
    scripted_model: ScriptedModel,
    database_url: str | None,
    tmp_path: Path,
) -> None:
    root = make_repo(repo_files({"desk": stdio(confirm=["pid"])}))
    database = database_url or str(tmp_path / "shared.db")

    def respond(request: RecordedRequest) -> Any:
        if any(m["role"] == "tool" for m in request.messages):
            return reply("finished")
        return tool_call("desk__pid", {})

    scripted_model.respond(respond)
    async with Runtime.open(root, database=database) as rt:
        asked = await rt.chat("what is your pid?", operator=True)
        assert asked.reason == "awaiting_confirmation"
        [pending] = [e for e in asked.events if isinstance(e, events.ConfirmationRequired)]
        denied = await rt.chat("and again?", operator=True)
        [other] = [e for e in denied.events if isinstance(e, events.ConfirmationRequired)]
        no = await rt.confirm(denied.session_id, other.call_id, approve=False, operator=True)
        assert results(list(no.events))["desk__pid"].status == "denied"
    async with Runtime.open(root, database=database) as rt:  # a restart
        yes = await rt.confirm(asked.session_id, pending.call_id, approve=True, operator=True)
        result = results(list(yes.events))["desk__pid"]
        assert result.status == "ok" and isinstance(result.result["result"], int)
        with pytest.raises(Exception, match="confirmation"):
            await rt.confirm(asked.session_id, pending.call_id, approve=True, operator=True)


async def test_a_specialist_is_denied_a_confirm_tool(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
) -> None:
    lab = await harness_for(make_repo(repo_files({"desk": stdio(confirm=True)})))

    def respond(request: RecordedRequest) -> Any:
        lead = "You are the lead." in (request.system or "")
        if any(m["role"] == "tool" for m in request.messages):
            return reply("over")
        if lead:
            return tool_call("call_subagent", {"calls": [{"subagent": "helper", "task": "add"}]})
        return tool_call("desk__add", {"a": 1, "b": 2})

    scripted_model.respond(respond)
    streamed = await lab.chat("delegate")
    assert done(streamed).reason == "model_stop"
    assert results(streamed)["desk__add"].status == "denied"


async def test_env_secrets_never_reach_events_the_database_or_the_log(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "desk-secret-5c1f0e"
    monkeypatch.setenv("DESK_SECRET", secret)
    caplog.set_level("DEBUG")
    lab = await harness_for(
        make_repo(repo_files({"desk": stdio(env={"DESK_TOKEN": "env:DESK_SECRET"})}))
    )
    scripted_model.enqueue(tool_call("desk__token", {}), reply("ok"))
    streamed = await lab.chat("token?")
    assert results(streamed)["desk__token"].result == {"result": "my token is [redacted]"}
    assert secret not in json.dumps([e.to_json() for e in streamed])
    assert secret not in json.dumps([m for r in scripted_model.requests for m in r.messages])
    assert secret not in caplog.text and secret not in repr(lab.runtime.bundle.mcp_servers)
    assert secret.encode() not in stored_bytes(tmp_path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def served(transport: str, **env: str) -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), transport, str(port)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.parametrize(("transport", "path"), [("streamable-http", "/mcp"), ("sse", "/sse")])
async def test_http_and_sse_servers_on_loopback(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    transport: str,
    path: str,
) -> None:
    with served(transport, MCP_TEST_TOOLS="add,shout") as port:
        kind = "http" if transport == "streamable-http" else "sse"
        server = {"transport": kind, "url": f"http://127.0.0.1:{port}{path}",
                  "headers": {"X-Desk": "hello"}}  # fmt: skip
        lab = await harness_for(make_repo(repo_files({"desk": server})))
        assert lab.runtime.mcp.snapshot().servers["desk"].status == "ready"
        desk = lab.runtime.mcp.snapshot().servers["desk"]
        assert [tool.tool_name for tool in desk.tools] == ["desk__add", "desk__shout"]
        scripted_model.enqueue(tool_call("desk__add", {"a": 20, "b": 22}), reply("42"))
        streamed = await lab.chat("add")
        assert results(streamed)["desk__add"].result == {"result": 42}


async def test_a_reload_restarts_only_the_servers_whose_declaration_changed(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any]
) -> None:
    root = make_repo(repo_files({"desk": stdio(), "other": stdio()}))
    lab: Harness = await harness_for(root)
    rt: Runtime = lab.runtime
    desk, other = await rt.mcp.call("desk", "pid", {}), await rt.mcp.call("other", "pid", {})
    config = json.loads((root / "amodal.json").read_text())
    config["mcp"]["servers"]["desk"]["env"] = {"MCP_TEST_TOOLS": "add,pid"}
    (root / "amodal.json").write_text(json.dumps(config))
    assert await rt.reload()
    await wait_for(lambda: rt.mcp.snapshot().servers["desk"].status == "ready")
    assert sorted(rt.mcp.snapshot().servers["desk"].known) == ["desk__add", "desk__pid"]
    assert await rt.mcp.call("desk", "pid", {}) != desk
    assert await rt.mcp.call("other", "pid", {}) == other


def stored_bytes(folder: Path) -> bytes:
    """Every byte of the SQLite files under `folder` (the database, its WAL and journal)."""
    return b"".join(path.read_bytes() for path in sorted(folder.glob("*.db*")))
