"""REST connections and the `request` tool (SPEC 9.2) against a real HTTP API on loopback."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import events
from runtime.api import Runtime
from runtime.outside.rest import Connections, Refused, path_problem
from runtime.repo import load_bundle
from runtime.surface.caller import Caller
from runtime.testing import RecordedRequest, ScriptedModel, reply, tool_call
from tests._harness import done, of_type
from tests._http_api import LoopbackApi

pytestmark = pytest.mark.anyio

TOKEN = "tok-9f8e7d6c5b4a"


def api_repo(url: str, *, spec: dict[str, Any] | None = None, **files: Any) -> dict[str, Any]:
    return {
        "amodal.json": {"name": "t", "version": "1"},
        "agents/default/AGENT.md": "You are the lead.\n",
        "agents/default/agent.json": {"connections": ["library"], "subagents": ["helper"]},
        "agents/helper/AGENT.md": "You help.\n",
        "agents/helper/agent.json": {"connections": ["library"]},
        "agents/plain/AGENT.md": "No connections.\n",
        "connections/library/spec.json": {
            "baseUrl": url,
            "auth": {"type": "bearer", "token": "env:LIBRARY_TOKEN"},
            "contextInjection": [{"from": "claim:tenant", "in": "header", "name": "X-Tenant"}],
            **(spec or {}),
        },
        "connections/library/access.json": {
            "default": "allow-read",
            "endpoints": [{"method": "POST", "path": "/items/{id}/holds", "confirm": True}],
        },
        "connections/library/surface.md": "The library's catalogue of books.\n",
        "connections/library/rules.md": "Place a hold only when asked.\n",
        **files,
    }


@pytest.fixture
def library(make_repo: Callable[..., Path], http_api: LoopbackApi, monkeypatch: Any) -> Path:
    monkeypatch.setenv("LIBRARY_TOKEN", TOKEN)
    return make_repo(api_repo(http_api.url))


TENANT = {"tenant": "acme-corp"}


async def call(root: Path, method: str, path: str, **options: Any) -> dict[str, Any]:
    bundle = load_bundle(root)
    connections = Connections()
    try:
        options.setdefault("claims", TENANT)
        return await connections.call(bundle.connections["library"], method, path, **options)
    finally:
        await connections.aclose()


@pytest.mark.parametrize(
    "path",
    [
        "http://evil.example/x",
        "//evil.example/x",
        "items",
        "/a/../b",
        "/a/./b",
        "/a/%2e%2e/b",
        "/a/%2E%2E/b",
        "/a/%252e%252e/b",
        "/a%2fb",
        "/a%2Fb",
        "/a%5cb",
        "/a\\b",
        "/user@evil.example",
        "/items?x=1",
        "/items#top",
        "/a\nb",
        "/a%0ab",
        "/a\x00b",
    ],
)
async def test_every_path_that_could_leave_the_origin_is_refused_before_a_byte_is_sent(
    library: Path, http_api: LoopbackApi, path: str
) -> None:
    assert path_problem(path) is not None
    with pytest.raises(Refused):
        await call(library, "GET", path)
    assert http_api.requests == []


async def test_a_read_sends_auth_and_the_injected_claim_and_shapes_the_response(
    library: Path, http_api: LoopbackApi
) -> None:
    result = await call(library, "GET", "/items/1", query={"fields": "title"})
    assert result == {
        "status": 200,
        "headers": {"content-type": "application/json", "etag": '"v1"'},
        "body": {"id": "1", "title": "On Sources"},
    }
    [seen] = http_api.requests
    assert seen.headers["Authorization"] == f"Bearer {TOKEN}"
    assert seen.headers["X-Tenant"] == "acme-corp"
    assert seen.query == {"fields": ["title"]}


async def test_non_json_bodies_non_2xx_statuses_and_head(library: Path) -> None:
    assert (await call(library, "GET", "/text"))["body"] == "plain words"
    missing = await call(library, "GET", "/missing")
    assert (missing["status"], missing["body"]) == (404, {"error": "nothing at /missing"})
    assert (await call(library, "HEAD", "/items"))["body"] == ""


async def test_an_api_that_echoes_secrets_gives_them_back_redacted(library: Path) -> None:
    echoed = json.dumps(await call(library, "GET", "/echo"))
    assert TOKEN not in echoed and "acme-corp" not in echoed
    assert "[redacted]" in echoed


async def test_access_rules_refuse_unlisted_writes_and_list_what_is_allowed(
    library: Path, http_api: LoopbackApi
) -> None:
    with pytest.raises(Refused) as refused:
        await call(library, "DELETE", "/items/1")
    assert "POST /items/{id}/holds (needs a person's approval)" in str(refused.value)
    assert "GET and HEAD on any path" in str(refused.value)
    with pytest.raises(Refused, match="has no body"):
        await call(library, "GET", "/items", body={"x": 1})
    assert http_api.requests == []
    held = await call(library, "POST", "/items/2/holds", body={"reader": "r1"})
    assert held["status"] == 201 and http_api.holds == [{"item": "2", "body": {"reader": "r1"}}]


async def test_deny_by_default_allows_only_listed_endpoints(
    make_repo: Callable[..., Path], http_api: LoopbackApi, monkeypatch: Any
) -> None:
    monkeypatch.setenv("LIBRARY_TOKEN", TOKEN)
    root = make_repo(
        api_repo(
            http_api.url,
            **{
                "connections/library/access.json": {
                    "default": "deny",
                    "endpoints": [{"method": "GET", "path": "/items/*"}],
                }
            },
        )
    )
    assert (await call(root, "GET", "/items/1"))["status"] == 200
    with pytest.raises(Refused):
        await call(root, "GET", "/items")


async def test_a_caller_without_the_injected_claim_is_refused(
    library: Path, http_api: LoopbackApi
) -> None:
    with pytest.raises(Refused, match="claim 'tenant'"):
        await call(library, "GET", "/items", claims={})
    spec = json.loads((library / "connections/library/spec.json").read_text())
    spec["contextInjection"] = [{"from": "claim:tenant", "in": "query", "name": "tenant"}]
    (library / "connections/library/spec.json").write_text(json.dumps(spec))
    with pytest.raises(Refused, match="set by the connection"):
        await call(library, "GET", "/items", query={"tenant": "globex"})
    assert http_api.requests == []


async def test_redirects_are_followed_within_the_origin_only(
    library: Path, http_api: LoopbackApi
) -> None:
    same = await call(library, "GET", "/redirect", query={"to": "/items/2"})
    assert same["body"] == {"id": "2", "title": "Field Notes"}
    away = await call(library, "GET", "/away", query={"port": "1"})
    assert away["status"] == 302 and "not followed" in away["error"]
    assert [r.path for r in http_api.requests] == ["/redirect", "/items/2", "/away"]


async def test_large_bodies_are_cut_at_max_response_bytes(
    make_repo: Callable[..., Path], http_api: LoopbackApi, monkeypatch: Any
) -> None:
    monkeypatch.setenv("LIBRARY_TOKEN", TOKEN)
    root = make_repo(api_repo(http_api.url, spec={"maxResponseBytes": 100}))
    cut = await call(root, "GET", "/big", query={"bytes": "5000"})
    assert (len(cut["body"]), cut["truncated"]) == (100, True)


async def test_a_slow_api_times_out_and_a_down_api_is_an_error(
    make_repo: Callable[..., Path], http_api: LoopbackApi, monkeypatch: Any
) -> None:
    monkeypatch.setenv("LIBRARY_TOKEN", TOKEN)
    root = make_repo(api_repo(http_api.url, spec={"timeout": 0.5}))
    with pytest.raises(TimeoutError, match=r"did not answer within 0\.5 s"):
        await call(root, "GET", "/slow", query={"seconds": "3"})
    down = make_repo(api_repo("http://127.0.0.1:1"))
    with pytest.raises(Exception, match="connection 'library'") as failed:
        await call(down, "GET", "/items")
    assert TOKEN not in str(failed.value)


def respond_with(first: dict[str, Any]) -> Callable[[RecordedRequest], Any]:
    def respond(request: RecordedRequest) -> Any:
        if any(m["role"] == "tool" for m in request.messages):
            return reply("done")
        return tool_call("request", first)

    return respond


HOLD = {"connection": "library", "method": "POST", "path": "/items/1/holds",
        "body": {"reader": "r9"}, "intent": "write"}  # fmt: skip


async def test_a_confirm_endpoint_waits_for_a_person_and_runs_once_after_a_restart(
    library: Path,
    http_api: LoopbackApi,
    scripted_model: ScriptedModel,
    database_url: str | None,
    tmp_path: Path,
) -> None:
    database = database_url or str(tmp_path / "shared.db")
    scripted_model.respond(respond_with(HOLD))
    async with Runtime.open(library, database=database) as rt:
        asked = await rt.chat("hold book 1", claims=TENANT)
        assert asked.reason == "awaiting_confirmation"
        [pending] = [e for e in asked.events if isinstance(e, events.ConfirmationRequired)]
        other = await rt.chat("hold it again", claims=TENANT)
        [second] = [e for e in other.events if isinstance(e, events.ConfirmationRequired)]
        denied = await rt.confirm(other.session_id, second.call_id, approve=False, claims=TENANT)
        assert [e.status for e in of_type(list(denied.events), events.ToolResult)] == ["denied"]
    assert http_api.holds == []
    async with Runtime.open(library, database=database) as rt:
        approved = await rt.confirm(asked.session_id, pending.call_id, approve=True, claims=TENANT)
        [result] = of_type(list(approved.events), events.ToolResult)
        assert (result.status, result.result["status"]) == ("ok", 201)
        with pytest.raises(Exception, match="confirmation"):
            await rt.confirm(asked.session_id, pending.call_id, approve=True, claims=TENANT)
    assert http_api.holds == [{"item": "1", "body": {"reader": "r9"}}]


async def test_a_read_runs_at_once_and_a_read_intent_cannot_write(
    library: Path, harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    lab = await harness_for(library)
    read = {"connection": "library", "method": "GET", "path": "/items", "intent": "read"}
    sneaky = {**HOLD, "intent": "read"}
    scripted_model.enqueue(tool_call("request", read), tool_call("request", sneaky), reply("ok"))
    streamed = await lab.chat("list", Caller(claims=TENANT))
    found = of_type(streamed, events.ToolResult)
    assert found[0].status == "ok" and found[0].result["status"] == 200
    assert found[1].status == "error" and "intent 'read'" in found[1].error
    assert done(streamed).reason == "model_stop"
    system = scripted_model.requests[0].system or ""
    assert "### library" in system and "The library's catalogue of books." in system
    assert "Place a hold only when asked." in system
    assert "POST /items/{id}/holds (needs a person's approval)" in system


async def test_a_specialist_is_denied_a_confirm_endpoint(
    library: Path,
    http_api: LoopbackApi,
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
) -> None:
    lab = await harness_for(library)

    def respond(request: RecordedRequest) -> Any:
        if any(m["role"] == "tool" for m in request.messages):
            return reply("over")
        if "You are the lead." in (request.system or ""):
            return tool_call("call_subagent", {"calls": [{"subagent": "helper", "task": "hold"}]})
        return tool_call("request", HOLD)

    scripted_model.respond(respond)
    streamed = await lab.chat("delegate", Caller(claims=TENANT))
    [denied] = [e for e in of_type(streamed, events.ToolResult) if e.name == "request"]
    assert denied.status == "denied"
    assert http_api.holds == []


async def test_context_injection_reads_claims_never_the_request_context(
    library: Path,
    http_api: LoopbackApi,
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
) -> None:
    lab = await harness_for(library)
    read = {"connection": "library", "method": "GET", "path": "/items", "intent": "read"}
    scripted_model.enqueue(tool_call("request", read), reply("ok"))
    forged = await lab.chat("list", Caller(claims={}), context={"tenant": "globex"})
    [refused] = of_type(forged, events.ToolResult)
    assert refused.status == "error" and "claim 'tenant'" in refused.error
    assert http_api.requests == []
    scripted_model.enqueue(tool_call("request", read), reply("ok"))
    await lab.chat("list", Caller(claims=TENANT), context={"tenant": "globex"})
    assert http_api.requests[0].headers["X-Tenant"] == "acme-corp"


async def test_no_secret_reaches_events_the_database_the_model_or_the_log(
    library: Path,
    http_api: LoopbackApi,
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    lab = await harness_for(library)
    echo = {"connection": "library", "method": "GET", "path": "/echo", "intent": "read"}
    scripted_model.enqueue(tool_call("request", echo), reply("ok"))
    streamed = await lab.chat("echo", Caller(claims=TENANT))
    assert http_api.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"
    for secret in (TOKEN, "acme-corp"):
        assert secret not in json.dumps([e.to_json() for e in streamed])
        assert secret not in json.dumps([r.messages for r in scripted_model.requests])
        assert secret not in caplog.text
        assert secret.encode() not in stored_bytes(tmp_path)
    assert TOKEN not in repr(lab.runtime.bundle.connections)


async def test_no_secret_reaches_a_postgresql_row_either(
    library: Path,
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    postgres_url: str,
) -> None:
    import psycopg

    lab = await harness_for(library, postgres_url)
    echo = {"connection": "library", "method": "GET", "path": "/echo", "intent": "read"}
    scripted_model.enqueue(tool_call("request", echo), reply("ok"))
    streamed = await lab.chat("echo", Caller(claims=TENANT))
    assert done(streamed).reason == "model_stop"
    with psycopg.connect(postgres_url) as connection:
        rows = connection.execute("SELECT type, data::text FROM events").fetchall()
        rows += connection.execute("SELECT * FROM runs").fetchall()
    dumped = " ".join(str(row) for row in rows)
    assert "[redacted]" in dumped  # the echo was stored, scrubbed
    assert TOKEN not in dumped and "acme-corp" not in dumped


async def test_a_down_api_is_a_tool_error_and_the_chat_goes_on(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    monkeypatch: Any,
) -> None:
    monkeypatch.setenv("LIBRARY_TOKEN", TOKEN)
    lab = await harness_for(make_repo(api_repo("http://127.0.0.1:1")))
    read = {"connection": "library", "method": "GET", "path": "/items", "intent": "read"}
    scripted_model.enqueue(tool_call("request", read), reply("the API is down"))
    streamed = await lab.chat("list", Caller(claims=TENANT))
    [failed] = of_type(streamed, events.ToolResult)
    assert failed.status == "error" and "ConnectError" in failed.error
    assert done(streamed).reason == "model_stop"


async def test_only_agents_that_list_a_connection_get_request(
    library: Path, harness_for: Callable[..., Any]
) -> None:
    lab = await harness_for(library)
    assert "request" in lab.runtime.inspect("default")["tools"]
    assert "request" not in lab.runtime.inspect("plain")["tools"]


def stored_bytes(folder: Path) -> bytes:
    """Every byte of the SQLite files under `folder` (the database, its WAL and journal)."""
    return b"".join(path.read_bytes() for path in sorted(folder.glob("*.db*")))
