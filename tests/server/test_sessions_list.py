"""`GET /sessions`: a caller lists its own sessions, exactly those `GET /sessions/{id}` opens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.testing import ScriptedModel
from tests.server.conftest import Api

pytestmark = pytest.mark.anyio

OPERATOR = "operator-token-0123456789abcdef"
KEYS = {
    "alice": "key-alice-0123456789abcdef",
    "bob": "key-bob-0123456789abcdef",
    "carol": "key-carol-0123456789abcdef",
    "nobody": "key-nobody-0123456789abcdef",
}
REPO = {
    "amodal.json": {
        "name": "listing",
        "version": "1",
        "auth": {
            "apiKeys": [
                {"key": "env:KEY_ALICE", "claims": {"sub": "alice", "scope": "acme"}},
                {"key": "env:KEY_BOB", "claims": {"sub": "bob", "scope": "acme"}},
                # alice's user id in another scope: a user id alone opens nothing
                {"key": "env:KEY_CAROL", "claims": {"sub": "alice", "scope": "globex"}},
                # no `sub`: its sessions have no owner, and it must not see the operator's
                {"key": "env:KEY_NOBODY", "claims": {"role": "viewer"}},
            ]
        },
    },
}
ENVIRON = {"AMODAL_OPERATOR_TOKEN": OPERATOR, **{f"KEY_{k.upper()}": v for k, v in KEYS.items()}}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def api(make_repo: Callable[..., Path], api_for: Callable[..., Any]) -> Api:
    return await api_for(make_repo(REPO), ENVIRON)  # type: ignore[no-any-return]


async def start(api: Api, token: str, message: str = "hi") -> str:
    response = await api.client.post(
        "/chat", json={"message": message, "stream": False}, headers=bearer(token)
    )
    assert response.status_code == 200, response.text
    return str(response.json()["session_id"])


async def listed(api: Api, token: str, query: str = "") -> list[str]:
    response = await api.client.get(f"/sessions{query}", headers=bearer(token))
    assert response.status_code == 200, response.text
    return [session["id"] for session in response.json()["sessions"]]


async def test_each_caller_lists_only_the_sessions_it_may_open(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(lambda request: "ok")
    sessions = {name: await start(api, key) for name, key in KEYS.items()}
    sessions["operator"] = await start(api, OPERATOR)

    for name, key in KEYS.items():
        assert await listed(api, key) == [sessions[name]], name
    assert sorted(await listed(api, OPERATOR)) == sorted(sessions.values())


async def test_the_list_is_newest_activity_first_with_each_sessions_root(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(lambda request: "ok")
    first = await start(api, KEYS["alice"], "Who is on this team?")
    second = await start(api, KEYS["alice"])
    # A later turn of the first session brings it back to the top.
    response = await api.client.post(
        "/chat",
        json={"message": "again", "session_id": first, "stream": False},
        headers=bearer(KEYS["alice"]),
    )
    assert response.status_code == 200

    body = (await api.client.get("/sessions", headers=bearer(KEYS["alice"]))).json()

    assert [s["id"] for s in body["sessions"]] == [first, second]
    assert set(body["sessions"][0]) == {
        "id",
        "agent",
        "kind",
        "first_message",
        "created_at",
        "updated_at",
    }
    # Each session is named by its first message, not by the later one.
    assert body["sessions"][0]["first_message"] == "Who is on this team?"
    assert body["sessions"][0]["kind"] == "chat"
    assert body["sessions"][0]["agent"] == "default"
    assert (body["limit"], body["offset"]) == (20, 0)


async def test_a_long_first_message_is_listed_on_one_line_cut_to_80_characters(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(lambda request: "ok")
    message = "Compare\n\nthe   three plans " + "and their costs " * 20
    await start(api, KEYS["bob"], message)

    body = (await api.client.get("/sessions", headers=bearer(KEYS["bob"]))).json()

    listed_message = body["sessions"][0]["first_message"]
    assert len(listed_message) == 80
    assert listed_message.startswith("Compare the three plans and their costs and")
    assert listed_message.endswith("…")
    # The session's log keeps the message whole.
    session_id = body["sessions"][0]["id"]
    log = (await api.client.get(f"/sessions/{session_id}", headers=bearer(KEYS["bob"]))).json()
    assert message in [event.get("text") for event in log["events"] if event["type"] == "user"]


async def test_limit_and_offset_page_through_the_list(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(lambda request: "ok")
    started = [await start(api, KEYS["bob"]) for _ in range(3)]

    assert await listed(api, KEYS["bob"], "?limit=2") == started[::-1][:2]
    assert await listed(api, KEYS["bob"], "?limit=2&offset=2") == started[:1]


@pytest.mark.parametrize(
    "query", ["?limit=0", "?limit=101", "?offset=-1", "?limit=x", "?offset=99999999999999999999"]
)
async def test_a_page_out_of_bounds_is_a_422(api: Api, query: str) -> None:
    response = await api.client.get(f"/sessions{query}", headers=bearer(OPERATOR))

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"


async def test_listing_needs_a_credential(api: Api) -> None:
    response = await api.client.get("/sessions")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
