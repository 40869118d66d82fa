"""The MCP server face (SPEC 24): `amodal mcp` over stdio and `/mcp` over streamable HTTP,
driven with the `mcp` package's own client."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from runtime.testing import ScriptedModel
from tests.server.faces.conftest import ANN_KEY, BOB_KEY, CREDENTIALS, FACES_REPO, Served

pytestmark = pytest.mark.anyio


def over_http(served: Served, token: str | None) -> Client:
    http = httpx2.AsyncClient(headers=served.headers(token), timeout=30)
    served.closed_after(http)
    return Client(streamable_http_client(f"{served.url}/mcp", http_client=http))


def over_stdio(repo: Path, model: ScriptedModel, data: Path, *args: str) -> Client:
    amodal = str(Path(sys.executable).with_name("amodal"))
    environ = {
        **os.environ,
        **CREDENTIALS,
        "OPENAI_BASE_URL": model.base_url,
        "MODEL_MAIN": "scripted",
        "AMODAL_DATA_DIR": str(data),
    }
    return Client(
        StdioServerParameters(command=amodal, args=["--repo", str(repo), "mcp", *args], env=environ)
    )


async def test_the_mcp_client_lists_the_agents_as_tools_and_calls_one_over_http(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Drafted.").reply("Polished.")

    async with over_http(faces, ANN_KEY) as client:
        tools = (await client.list_tools()).tools
        first = await client.call_tool("writer", {"message": "draft a note"})
        session = first.structured_content["session_id"]  # type: ignore[index]
        again = await client.call_tool("writer", {"message": "polish it", "session_id": session})

    assert [tool.name for tool in tools] == ["counter", "default", "helper", "writer"]
    writer = next(tool for tool in tools if tool.name == "writer")
    assert writer.description == "Writes notes.\nAnd charges cards."
    assert writer.input_schema["required"] == ["message"]
    assert set(writer.input_schema["properties"]) == {"message", "session_id"}
    assert first.content[0].text == "Drafted."  # type: ignore[union-attr]
    assert first.structured_content == {
        "session_id": session,
        "agent": "writer",
        "done_reason": "model_stop",
    }
    assert not first.is_error
    assert again.content[0].text == "Polished."  # type: ignore[union-attr]
    users = [m["content"] for m in scripted_model.requests[1].messages if m["role"] == "user"]
    assert users == ["draft a note", "polish it"]


async def test_amodal_mcp_serves_over_stdio_as_the_operator(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    repo = make_repo(FACES_REPO, base=False)
    scripted_model.reply("From stdio.")

    async with over_stdio(repo, scripted_model, tmp_path / "data") as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        result = await client.call_tool("default", {"message": "hello"})

    assert tools == ["counter", "default", "helper", "writer", "main"]
    assert result.content[0].text == "From stdio."  # type: ignore[union-attr]
    assert result.structured_content["agent"] == "default"  # type: ignore[index]


async def test_amodal_mcp_offers_only_the_agents_named_and_acts_as_the_token(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    repo = make_repo(FACES_REPO, base=False)

    async with over_stdio(
        repo, scripted_model, tmp_path / "data", "--agent", "writer", "--token", ANN_KEY
    ) as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        with pytest.raises(MCPError, match="unknown tool 'main'"):
            await client.call_tool("main", {"message": "hello"})

    assert tools == ["writer"]


def test_amodal_mcp_refuses_an_agent_the_caller_may_not_root(
    make_repo: Callable[..., Path], amodal: Callable[..., Any]
) -> None:
    repo = make_repo(FACES_REPO, base=False)

    result = amodal(
        "--repo", str(repo), "mcp", "--agent", "main", "--token", ANN_KEY, env=CREDENTIALS
    )

    assert result.code == 1
    assert "--agent main: no such agent for this caller" in result.stderr


async def test_a_turn_awaiting_confirmation_says_how_a_person_answers_it(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("charge", {"amount": 3}, id="call_3")

    async with over_http(faces, ANN_KEY) as client:
        result = await client.call_tool("writer", {"message": "charge 3"})

    reply = result.structured_content
    assert reply is not None and reply["done_reason"] == "awaiting_confirmation"
    text = result.content[0].text  # type: ignore[union-attr]
    assert "approve `charge`" in text
    assert f"/sessions/{reply['session_id']}/confirmations/call_3" in text
    pending = await faces.runtime.turns(reply["session_id"], operator=True)
    assert pending[-1].done is not None and pending[-1].done.reason == "awaiting_confirmation"


async def test_another_owners_session_is_a_tool_error_and_unknown_tools_a_protocol_error(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Ann's.")
    async with over_http(faces, ANN_KEY) as ann:
        mine = await ann.call_tool("default", {"message": "hi"})
    session = mine.structured_content["session_id"]  # type: ignore[index]

    async with over_http(faces, BOB_KEY) as bob:
        guessed = await bob.call_tool("default", {"message": "hi", "session_id": session})
        bad = await bob.call_tool("default", {"message": "hi", "extra": 1})
        with pytest.raises(MCPError, match="unknown tool 'main'"):
            await bob.call_tool("main", {"message": "hi"})

    assert guessed.is_error and "unknown session" in guessed.content[0].text  # type: ignore[union-attr]
    assert bad.is_error and "extra" in bad.content[0].text  # type: ignore[union-attr]


async def test_the_http_transport_wants_credentials_and_answers_json_rpc_errors(
    faces: Served,
) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=faces.url) as http:
        anonymous = await http.post("/mcp", json=message, headers=accept)
        garbled = await http.post(
            "/mcp",
            content=b"{not json",
            headers={**accept, **faces.headers(ANN_KEY), "Content-Type": "application/json"},
        )
        null_id = await http.post(
            "/mcp", json={**message, "id": None}, headers={**accept, **faces.headers(ANN_KEY)}
        )
        plain = await http.post(
            "/mcp",
            content=b"{}",
            headers={**accept, **faces.headers(ANN_KEY), "Content-Type": "text/plain"},
        )

    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == "Bearer"
    assert anonymous.json()["jsonrpc"] == "2.0" and "error" in anonymous.json()
    assert garbled.status_code == 400
    assert garbled.json()["error"]["code"] == -32700
    assert null_id.status_code == 400 and "an id" in null_id.json()["error"]["message"]
    assert plain.status_code == 415 and plain.json()["jsonrpc"] == "2.0"
