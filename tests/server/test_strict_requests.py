"""SPEC 12: request bodies are strict, every string of a request is text, numbers are bounded;
no input gives a 5xx, and a refused request changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.server.errors import error_response
from runtime.testing import ScriptedModel
from tests.server.conftest import Api, parse_sse

pytestmark = pytest.mark.anyio

MARKING_HANDLER = (
    "from pathlib import Path\n\n"
    "async def handler(args, ctx):\n"
    "    with Path(__file__).with_name('ran.log').open('a') as log:\n"
    "        log.write('ran\\n')\n"
    "    return {'charged': True}\n"
)

REPO: dict[str, Any] = {
    "stores/notes.json": {
        "entity": {
            "name": "Note",
            "key": "note:{slug}",
            "schema": {"slug": {"type": "string"}, "topic": {"type": "string"}},
        }
    },
    "tools/charge/tool.json": {"description": "Charge a card.", "confirm": True},
    "tools/charge/handler.py": MARKING_HANDLER,
    "agents/default/agent.json": {"tools": ["charge"], "stores": {"notes": "rw"}},
}

JSON = {"content-type": "application/json"}


@pytest.fixture
async def api(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], database_url: str | None
) -> Api:
    environ = {"DATABASE_URL": database_url} if database_url else {}
    return await api_for(make_repo(REPO), environ)  # type: ignore[no-any-return]


def assert_422(response: httpx.Response, *fragments: str) -> str:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] in {"invalid_request", "invalid_query"}, error
    for fragment in fragments:
        assert fragment in error["message"], error
    return str(error["message"])


# ---------------------------------------------------------------- /stores: five former 500s


@pytest.mark.parametrize(
    ("method", "path", "body", "where"),
    [
        ("PUT", "/stores/notes/note:a", r'{"slug": "a", "topic": "a\u0000b"}', "topic"),
        ("PUT", "/stores/notes/note:a", r'{"slug": "a", "topic": "\ud800"}', "topic"),
        ("GET", '/stores/notes?filter={"topic":"a\\u0000b"}', None, "filter.topic"),
        ("GET", "/stores/notes?offset=99999999999999999999", None, "offset"),
        # A lone surrogate in the key: the path's bytes are no UTF-8, and the body's key field
        # is the same character (the error message once echoed it and could not be encoded).
        ("PUT", "/stores/notes/note:%ED%A0%80", r'{"slug": "\ud800", "topic": "x"}', "path"),
    ],
)
async def test_store_inputs_that_are_not_text_or_out_of_range_are_422(
    api: Api, method: str, path: str, body: str | None, where: str
) -> None:
    response = await api.client.request(
        method, path, content=body, headers=JSON if body is not None else {}
    )

    assert_422(response, where)
    listed = (await api.client.get("/stores/notes")).json()
    assert listed["total"] == 0


async def test_the_error_shape_encodes_whatever_it_echoes() -> None:
    response = error_response(404, "unknown_document", "no document 'note:\ud800'")

    assert json.loads(response.body) == {
        "error": {"code": "unknown_document", "message": "no document 'note:\ud800'"}
    }


async def test_a_body_nested_too_deeply_is_422_on_every_route(api: Api) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    chat = await api.client.post("/chat", content=f'{{"message": {deep}}}', headers=JSON)
    put = await api.client.put("/stores/notes/note:a", content=deep, headers=JSON)

    assert_422(chat, "nested too deeply")
    assert_422(put, "nested too deeply")


# ---------------------------------------------------------------- strict bodies


@pytest.mark.parametrize("approve", ["yes", 1, "on", "true", "1", 0, None, []])
async def test_only_a_json_boolean_approves_a_confirmation(
    api: Api, scripted_model: ScriptedModel, tmp_path: Path, approve: object
) -> None:
    scripted_model.tool_call("charge", {}, id="c1")
    events = await api.chat(message="charge it")
    session_id = events[0]["session_id"]
    assert events[-1]["reason"] == "awaiting_confirmation"
    marks = tmp_path / "repo/tools/charge/ran.log"  # make_repo's root

    refused = await api.client.post(
        f"/sessions/{session_id}/confirmations/c1", json={"approve": approve}
    )

    assert_422(refused, "approve", "boolean")
    assert not marks.exists()
    scripted_model.reply("Charged.")  # the call is still pending: a real approval runs it once
    approved = await api.client.post(
        f"/sessions/{session_id}/confirmations/c1", json={"approve": True}
    )
    results = [e for e in parse_sse(approved.text) if e["type"] == "tool_result"]
    assert [r["status"] for r in results] == ["ok"]
    assert marks.read_text() == "ran\n"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message": "hi", "stream": "yes"}, "stream"),
        ({"message": "hi", "stream": 1}, "stream"),
        ({"message": "hi", "autonomous": 0}, "autonomous"),
        ({"message": "hi", "autonomous": "false"}, "autonomous"),
        ({"message": 7}, "message"),
        ({"message": "hi", "agent": 3}, "agent"),
        ({"message": "hi", "session_id": 12345}, "session_id"),
    ],
)
async def test_chat_bodies_are_never_coerced(api: Api, body: dict[str, Any], field: str) -> None:
    assert_422(await api.client.post("/chat", json=body), field)


# ---------------------------------------------------------------- every string is text


@pytest.mark.parametrize("bad", ["a\x00b", "\ud800", "x\udfffy"], ids=["nul", "high", "low"])
@pytest.mark.parametrize(
    ("make_body", "where"),
    [
        (lambda bad: {"message": bad}, "message"),
        (lambda bad: {"message": "hi", "context": {"page": bad}}, "context.page"),
        (lambda bad: {"message": "hi", "context": {bad: "x"}}, "context: a key"),
        (lambda bad: {"message": "hi", "agent": bad}, "agent"),
        (lambda bad: {"message": "hi", "session_id": bad}, "session_id"),
    ],
    ids=["message", "context-value", "context-key", "agent", "session-id"],
)
async def test_a_string_that_is_not_text_is_422_wherever_it_is_in_a_chat(
    api: Api, scripted_model: ScriptedModel, make_body: Callable[[str], Any], where: str, bad: str
) -> None:
    # Encoded by hand: httpx (like any careful client) refuses to encode a lone surrogate.
    content = json.dumps(make_body(bad))

    response = await api.client.post("/chat", content=content, headers=JSON)

    message = assert_422(response, where)
    assert bad not in message  # never echoed
    assert scripted_model.requests == []  # nothing ran


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/sessions/a%00b"),
        ("GET", "/agents/%ED%A0%80"),
        ("GET", "/agents/default/surface?context.page=%00"),
        ("GET", "/agents?role=%ff"),
        ("POST", "/sessions/abc/confirmations/c%00"),
        ("GET", "/stores/notes/note%00"),
        ("DELETE", "/stores/notes/%ED%B0%80"),
        ("GET", "/stores/notes?scope=a%00"),
        ("GET", "/stores/notes?sort=%00"),
    ],
)
async def test_a_path_or_query_that_is_not_text_is_422(api: Api, method: str, path: str) -> None:
    body = b'{"approve": true}' if method == "POST" else None
    response = await api.client.request(method, path, content=body, headers=JSON)

    assert_422(response)


async def test_a_chat_refused_for_bad_text_leaves_the_session_intact(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("first")
    session_id = (await api.chat(message="one"))[0]["session_id"]
    before = (await api.client.get(f"/sessions/{session_id}")).json()["events"]
    content = json.dumps({"message": "two", "session_id": session_id, "context": {"p": "\ud800"}})

    assert_422(await api.client.post("/chat", content=content, headers=JSON), "context.p")

    assert (await api.client.get(f"/sessions/{session_id}")).json()["events"] == before
    scripted_model.reply("second")
    events = await api.chat(message="two", session_id=session_id)
    assert events[-1]["reason"] == "model_stop"
