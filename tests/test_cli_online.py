"""`amodal inspect` with MCP servers, and `amodal validate --online`, through the real CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests._http_api import LoopbackApi

SERVER = Path(__file__).with_name("_mcp_server.py")
Amodal = Callable[..., Any]


def repo(make_repo: Callable[..., Path], api: str, tools: list[str]) -> Path:
    return make_repo(
        {
            "amodal.json": {
                "name": "t",
                "version": "1",
                "mcp": {
                    "servers": {
                        "desk": {"transport": "stdio", "command": "python", "args": [str(SERVER)],
                                 "env": {"MCP_TEST_TOOLS": "add,shout"}},
                        "broken": {"transport": "stdio", "command": "no-such-mcp-program"},
                    }
                },
            },
            "agents/default/agent.json": {"mcp": ["desk", "broken"], "tools": tools},
            "connections/library/spec.json": {"baseUrl": api, "testPath": "/items"},
            "connections/down/spec.json": {"baseUrl": "http://127.0.0.1:1", "testPath": "/"},
        }
    )  # fmt: skip


def test_inspect_starts_the_servers_and_shows_what_a_failed_one_takes_away(
    amodal: Amodal, make_repo: Callable[..., Path], http_api: LoopbackApi
) -> None:
    root = repo(make_repo, http_api.url, ["broken__lookup"])
    text = amodal("--repo", str(root), "inspect", "default")
    assert text.code == 0, text.stderr
    assert "mcp servers: broken (server failed: cannot start 'no-such-mcp-program'" in text.stdout
    assert "desk (ready, 2 tools)" in text.stdout
    assert "tool broken__lookup: server failed: cannot start" in text.stdout
    view = amodal("--repo", str(root), "inspect", "default", "--json").json()
    assert {"desk__add", "desk__shout"} <= set(view["tools"])
    assert {(e["kind"], e["name"]) for e in view["excluded"]} == {
        ("mcp", "broken"), ("tool", "broken__lookup"),
    }  # fmt: skip


def test_validate_online_checks_servers_tools_and_test_paths(
    amodal: Amodal, make_repo: Callable[..., Path], http_api: LoopbackApi
) -> None:
    root = repo(make_repo, http_api.url, ["desk__add", "desk__nope"])
    offline = amodal("--repo", str(root), "validate")
    assert offline.code == 0, offline.stdout  # names only: both tools could exist
    online = amodal("--repo", str(root), "validate", "--online", "--json")
    assert online.code == 1
    errors = {(e["file"], e["field"]): e["message"] for e in json.loads(online.stdout)}
    assert errors[("amodal.json", "mcp.servers.broken")].startswith("server failed: cannot start")
    nope = errors[("agents/default/agent.json", "tools[1]")]
    assert "MCP server 'desk' has no tool 'desk__nope' (it offers: desk__add, desk__shout)" == nope
    assert len(errors) == 2
    assert "connections/down/spec.json: warning: testPath: testPath / failed" in online.stderr
    assert "connections/library" not in online.stderr
    assert [r.path for r in http_api.requests] == ["/items"]
