"""`GET /memory` and `DELETE /memory/{id}` over real HTTP (SPEC 21; docs/memory.md): a person
reviews and deletes what an agent remembers about them; nobody else ever sees it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.surface.prompt import MEMORY_HEADING
from runtime.testing import ScriptedModel
from tests.server.conftest import ServeProcess

OPERATOR = "operator-token-memory-0123456789"
ALICE = "key-alice-memory-0123456789"
BOB = "key-bob-memory-0123456789"
REPO = {
    "amodal.json": {
        "name": "memory",
        "version": "1",
        "auth": {
            "apiKeys": [
                {"key": "env:KEY_ALICE", "claims": {"sub": "alice", "scope": "acme"}},
                {"key": "env:KEY_BOB", "claims": {"sub": "bob", "scope": "acme"}},
            ]
        },
    },
    "agents/default/AGENT.md": "You are the assistant.\n",
    "agents/default/agent.json": {"memory": True},
}
NOTE = "The person prefers metric units"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def chat(server: ServeProcess, token: str, message: str) -> dict[str, Any]:
    response = httpx.post(
        f"{server.url}/chat",
        json={"message": message, "stream": False},
        headers=bearer(token),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def memory(server: ServeProcess, token: str, query: str = "agent=default") -> httpx.Response:
    return httpx.get(f"{server.url}/memory?{query}", headers=bearer(token), timeout=30)


def entries(server: ServeProcess, token: str, query: str = "agent=default") -> list[str]:
    response = memory(server, token, query)
    assert response.status_code == 200, response.text
    return [entry["text"] for entry in response.json()["entries"]]


def delete(server: ServeProcess, token: str, entry_id: str) -> httpx.Response:
    return httpx.delete(f"{server.url}/memory/{entry_id}", headers=bearer(token), timeout=30)


def per_turn(model: ScriptedModel) -> str:
    messages = model.requests[-1].messages
    return "\n".join(str(m["content"]) for m in messages[1:] if m["role"] == "system")


@pytest.fixture
def server(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    database_url: str | None,
    scripted_model: ScriptedModel,
) -> ServeProcess:
    env = {
        "AMODAL_OPERATOR_TOKEN": OPERATOR,
        "KEY_ALICE": ALICE,
        "KEY_BOB": BOB,
        "MODEL_MAIN": "scripted",
        **({"DATABASE_URL": database_url} if database_url else {}),
    }
    process = serve(make_repo(REPO), env, "--no-reload")
    process.wait_ready()
    return process


def test_a_person_lists_and_deletes_their_note_and_nobody_else_sees_it(
    server: ServeProcess, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("memory__add", {"text": NOTE}).reply("I will remember that.")
    chat(server, ALICE, "remember that I prefer metric units")

    listed = memory(server, ALICE).json()
    (entry,) = listed["entries"]
    assert entry["text"] == NOTE and entry["agent"] == "default"
    assert (entry["kind"], entry["scope"], entry["owner"]) == ("user", "acme", "alice")
    assert entries(server, BOB) == []
    assert entries(server, OPERATOR) == []  # the operator's own notes: none
    assert entries(server, OPERATOR, "agent=default&owner=alice") == [NOTE]

    forbidden = memory(server, BOB, "agent=default&owner=alice")
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["code"] == "forbidden"
    refused = delete(server, BOB, entry["id"])
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "unknown_memory"
    assert entries(server, ALICE) == [NOTE]

    scripted_model.reply("5 km is about 3 miles.")
    chat(server, ALICE, "how far is 5 km?")  # a new session, a day later
    assert MEMORY_HEADING in per_turn(scripted_model) and NOTE in per_turn(scripted_model)
    scripted_model.reply("hello bob")
    chat(server, BOB, "hello")
    assert NOTE not in per_turn(scripted_model)

    assert delete(server, ALICE, entry["id"]).status_code == 204
    assert entries(server, ALICE) == []
    assert delete(server, ALICE, entry["id"]).status_code == 404
    scripted_model.reply("ok")
    chat(server, ALICE, "hi again")
    assert NOTE not in per_turn(scripted_model)


def test_the_operator_deletes_any_entry_and_bad_requests_are_refused(
    server: ServeProcess, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("memory__add", {"text": "likes tea"}).reply("ok")
    chat(server, BOB, "remember I like tea")
    (entry_id,) = [e["id"] for e in memory(server, BOB).json()["entries"]]
    assert delete(server, OPERATOR, entry_id).status_code == 204
    assert entries(server, BOB) == []

    unknown = memory(server, ALICE, "agent=nobody")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_agent"
    assert memory(server, ALICE, "").status_code == 422  # `agent` is required
    assert httpx.get(f"{server.url}/memory?agent=default", timeout=30).status_code == 401
    assert delete(server, ALICE, "not%20an%20id").status_code == 422
