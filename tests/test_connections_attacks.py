"""REST connections against a hostile model (SPEC 9.2, 12): encoded paths, redirects and
secrets in every wire form, with the scripted model asking for what it should not get and
a real HTTP API on loopback answering."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import events
from runtime.exceptions import ToolError
from runtime.outside.rest import Connections, Refused, needs_confirmation, normalise_path
from runtime.repo import load_bundle, load_repo
from runtime.surface.caller import Caller
from runtime.testing import ScriptedModel, reply, tool_call
from tests._harness import done, of_type
from tests._http_api import LoopbackApi
from tests.test_connections import stored_bytes

pytestmark = pytest.mark.anyio

TOKEN = "tok-9f8e7d6c5b4a3"
RULES = {
    "default": "allow-read",
    "endpoints": [
        {"method": "GET", "path": "/admin/**", "confirm": True},
        {"method": "POST", "path": "/items/admin", "confirm": True},
        {"method": "POST", "path": "/items/{id}"},
        {"method": "POST", "path": "/redirect"},
    ],
}
PROBE = """
async def attempt(call):
    try:
        return await call()
    except PermissionError as error:
        return "PermissionError: " + str(error)


async def handler(args, ctx):
    tool = {"connection": "api", "method": "GET", "path": "/%61dmin/users", "intent": "read"}
    return {
        "request": await attempt(lambda: ctx.request("api", "GET", "/%61dmin/users")),
        "head": await attempt(lambda: ctx.request("api", "HEAD", "/admin/users")),
        "post": await attempt(lambda: ctx.request("api", "POST", "/items/%61dmin", body={})),
        "call_tool": await attempt(lambda: ctx.call_tool("request", tool)),
    }
"""


def repo(url: str, spec: dict[str, Any] | None = None, **files: Any) -> dict[str, Any]:
    return {
        "amodal.json": {"name": "t", "version": "1"},
        "agents/default/AGENT.md": "You are the lead.\n",
        "agents/default/agent.json": {"connections": ["api"], "tools": ["probe"]},
        "connections/api/spec.json": {
            "baseUrl": url,
            "auth": {"type": "bearer", "token": "env:API_TOKEN"},
            **(spec or {}),
        },
        "connections/api/access.json": RULES,
        "tools/probe/tool.json": {"description": "Try the confirm rules from code."},
        "tools/probe/handler.py": PROBE,
        **files,
    }


@pytest.fixture
def api_repo(
    make_repo: Callable[..., Path], http_api: LoopbackApi, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Path]:
    monkeypatch.setenv("API_TOKEN", TOKEN)

    def make(spec: dict[str, Any] | None = None, url: str | None = None, **files: Any) -> Path:
        return make_repo(repo(url or http_api.url, spec, **files))

    return make


async def call(root: Path, method: str, path: str, **options: Any) -> dict[str, Any]:
    connections = Connections()
    try:
        connection = load_bundle(root).connections["api"]
        return await connections.call(connection, method, path, claims={}, **options)
    finally:
        await connections.aclose()


def request(method: str, path: str, intent: str = "read", **more: Any) -> dict[str, Any]:
    return {"connection": "api", "method": method, "path": path, "intent": intent, **more}


@pytest.mark.parametrize(
    ("method", "path", "intent"),
    [
        ("GET", "/%61dmin/users", "read"),
        ("GET", "/%61%64min/users", "read"),
        ("GET", "/adm%69n", "read"),
        ("HEAD", "/admin/users", "read"),
        ("HEAD", "/%61dmin", "read"),
        ("POST", "/items/%61dmin", "write"),
        ("POST", "/items/a%64m%69n", "write"),
    ],
)
async def test_an_encoded_letter_or_a_head_never_skips_a_confirm_rule(
    api_repo: Callable[..., Path],
    http_api: LoopbackApi,
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    method: str,
    path: str,
    intent: str,
) -> None:
    lab = await harness_for(api_repo())
    body = {"body": {}} if method == "POST" else {}
    scripted_model.enqueue(tool_call("request", request(method, path, intent, **body)))
    streamed = await lab.chat("go")
    assert done(streamed).reason == "awaiting_confirmation"
    assert http_api.requests == []


async def test_a_custom_tool_cannot_skip_a_confirm_rule_by_encoding_a_letter_either(
    api_repo: Callable[..., Path],
    http_api: LoopbackApi,
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
) -> None:
    lab = await harness_for(api_repo())
    scripted_model.enqueue(tool_call("probe", {}), reply("done"))
    [result] = of_type(await lab.chat("probe"), events.ToolResult)
    assert all(
        str(value).startswith("PermissionError") and "needs a person's approval" in value
        for value in result.result.values()
    ), result.result
    assert http_api.requests == []


async def test_the_path_matched_is_the_path_sent(
    api_repo: Callable[..., Path], http_api: LoopbackApi
) -> None:
    root = api_repo()
    assert (await call(root, "GET", "/%69tems/%31"))["body"] == {"id": "1", "title": "On Sources"}
    await call(root, "GET", "/caf\u00e9 au lait/%7e")
    assert [seen.path for seen in http_api.requests] == ["/items/1", "/caf%C3%A9%20au%20lait/~"]
    assert normalise_path("/items/%2a") == "/items/%2A"
    connection = load_bundle(root).connections["api"]
    assert needs_confirmation(connection, "GET", "/%61dmin/x")
    assert not needs_confirmation(connection, "GET", "/items/%61dmin")


@pytest.mark.parametrize("path", ["/x%zz", "/x%4", "/admin;jsessionid=1/users"])
async def test_a_broken_escape_or_a_path_parameter_is_refused(
    api_repo: Callable[..., Path], http_api: LoopbackApi, path: str
) -> None:
    with pytest.raises(Refused):
        await call(api_repo(), "GET", path)
    assert http_api.requests == []


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("/files/**/comments", "only be the last segment"),
        ("/items*", "a whole segment"),
        ("/a/../admin", "'.' and '..'"),
    ],
)
def test_a_rule_pattern_that_cannot_mean_what_it_says_is_a_validation_error(
    make_repo: Callable[..., Path], pattern: str, problem: str
) -> None:
    root = make_repo(
        {
            "connections/api/spec.json": {"baseUrl": "http://127.0.0.1:1"},
            "connections/api/access.json": {"endpoints": [{"method": "GET", "path": pattern}]},
        }
    )
    errors = [str(error) for error in load_repo(root).errors]
    assert any("access.json" in e and problem in e for e in errors), errors


async def test_a_redirect_goes_through_every_rule_of_a_first_call(
    api_repo: Callable[..., Path], http_api: LoopbackApi
) -> None:
    root = api_repo(url=http_api.url + "/v1")
    to_confirm = await call(root, "GET", "/redirect", query={"to": "/v1/admin/secret"})
    assert to_confirm["status"] == 302 and to_confirm["body"] is None
    assert (
        "GET /admin/secret was not followed: it needs a person's approval" in (to_confirm["error"])
    )
    assert to_confirm["headers"]["location"] == "/v1/admin/secret"
    outside = await call(root, "GET", "/redirect", query={"to": "/echo"})
    assert "outside the base path /v1" in outside["error"]
    encoded = await call(root, "GET", "/redirect", query={"to": "/v1/%61dmin/x"})
    assert "needs a person's approval" in encoded["error"]
    resent = await call(
        root, "POST", "/redirect", query={"to": "/v1/items/1/holds", "status": "307"}, body={}
    )
    assert "POST /items/1/holds was not followed" in resent["error"]
    assert "is not allowed" in resent["error"]
    assert http_api.holds == []
    followed = await call(root, "GET", "/redirect", query={"to": "/v1/%69tems/2"})
    assert followed["body"] == {"id": "2", "title": "Field Notes"}
    assert [seen.path for seen in http_api.requests] == [
        "/v1/redirect", "/v1/redirect", "/v1/redirect", "/v1/redirect", "/v1/redirect",
        "/v1/items/2",
    ]  # fmt: skip


async def test_a_key_in_the_query_is_scrubbed_from_an_echoed_url_in_every_encoding(
    make_repo: Callable[..., Path],
    http_api: LoopbackApi,
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    key = "qk/Ey+Val=ue&more é"
    monkeypatch.setenv("API_KEY", key)
    auth = {"type": "api_key", "token": "env:API_KEY", "queryParam": "api_key"}
    lab = await harness_for(make_repo(repo(http_api.url, {"auth": auth})))
    scripted_model.enqueue(
        tool_call("request", request("GET", "/url")),
        tool_call("request", request("GET", "/echo")),
        reply("ok"),
    )
    streamed = await lab.chat("echo")
    assert http_api.requests[0].query["api_key"] == [key]
    [url, echo] = of_type(streamed, events.ToolResult)
    assert url.result["body"].startswith("/url?api_key=[redacted]"), url.result
    assert echo.result["body"]["query"]["api_key"] == ["[redacted]"]
    stored = stored_bytes(tmp_path)
    wire = "qk%2FEy%2BVal%3Due%26more+%C3%A9"
    for shown in (json.dumps([e.to_json() for e in streamed]), stored.decode("latin-1")):
        assert wire not in shown and wire.lower() not in shown and key not in shown


async def test_a_basic_auth_pair_is_a_secret_as_base64_alone_too(
    api_repo: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_PASSWORD", "hunter2-pass")
    auth = {"type": "basic", "username": "ada", "password": "env:API_PASSWORD"}
    root = api_repo({"auth": auth})
    pair = base64.b64encode(b"ada:hunter2-pass").decode()
    assert pair in load_bundle(root).connections["api"].secrets
    echoed = json.dumps(await call(root, "GET", "/echo"))
    assert pair not in echoed and "hunter2-pass" not in echoed and "[redacted]" in echoed


@pytest.mark.parametrize("before", range(80, 100))
async def test_a_cut_at_max_response_bytes_never_leaves_part_of_a_token(
    api_repo: Callable[..., Path], before: int
) -> None:
    result = await call(api_repo({"maxResponseBytes": 100}), "GET", "/padded",
                        query={"before": str(before)})  # fmt: skip
    body = result["body"]
    assert result["truncated"] is True and len(body.encode()) <= 100
    for size in range(4, len(TOKEN) + 1):
        assert TOKEN[:size] not in body, (before, body)


@pytest.mark.parametrize("ending", ["\r", "\n", "\r\n"])
def test_a_secret_with_a_line_break_is_refused_at_load_naming_its_key(
    api_repo: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    monkeypatch.setenv("API_TOKEN", TOKEN + ending)
    errors = [str(error) for error in load_repo(api_repo()).errors]
    assert any("auth.token" in e and "line break" in e for e in errors), errors
    assert not any(TOKEN in e for e in errors)


async def test_an_http_client_error_showing_a_secret_as_repr_is_scrubbed(
    api_repo: Callable[..., Path], http_api: LoopbackApi
) -> None:
    # The loader refuses such a value (above); a connection built around that check still
    # has the client's error, which shows the header's repr, scrubbed.
    loaded = load_bundle(api_repo()).connections["api"]
    broken = TOKEN + "\r"
    connection = dataclasses.replace(
        loaded, auth_headers={"Authorization": f"Bearer {broken}"}, secrets=(broken,)
    )
    connections = Connections()
    try:
        with pytest.raises(ToolError, match="connection 'api'") as failed:
            await connections.call(connection, "GET", "/items", claims={})
    finally:
        await connections.aclose()
    assert "[redacted]" in str(failed.value)
    assert TOKEN[:6] not in str(failed.value)
    assert http_api.requests == []


async def test_a_hostile_model_gets_no_secret_into_the_session_or_the_stream(
    api_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
) -> None:
    lab = await harness_for(api_repo({"maxResponseBytes": 120}))
    scripted_model.enqueue(
        tool_call("request", request("GET", "/padded", query={"before": "95"})), reply("ok")
    )
    streamed = await lab.chat("pad", Caller(operator=True))
    dumped = json.dumps([e.to_json() for e in streamed])
    assert TOKEN[:6] not in dumped
