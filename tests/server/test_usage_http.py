"""`GET /usage` (SPEC 22): spend grouped and by time range; an end user sees their own,
the operator everyone's. And `/metrics` counts tokens and dollars by agent and model."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime.testing import ScriptedModel, reply
from tests.server.conftest import Api

pytestmark = pytest.mark.anyio

OPERATOR = "operator-token-0123456789abcdef"
ALICE = "key-alice-0123456789abcdef"
BOB = "key-bob-0123456789abcdef"
REPO = {
    "amodal.json": {
        "name": "usage",
        "version": "1",
        "models": {"main": {"model": "scripted", "price": {"input": 1.0, "output": 4.0}}},
        "auth": {
            "apiKeys": [
                {"key": "env:KEY_ALICE", "claims": {"sub": "alice", "scope": "acme"}},
                {"key": "env:KEY_BOB", "claims": {"sub": "bob", "scope": "acme"}},
            ]
        },
    },
    "agents/writer/AGENT.md": "You write.\n",
}
ENVIRON = {"AMODAL_OPERATOR_TOKEN": OPERATOR, "KEY_ALICE": ALICE, "KEY_BOB": BOB}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def api(make_repo: Callable[..., Path], api_for: Callable[..., Any]) -> Api:
    return await api_for(make_repo(REPO), ENVIRON)  # type: ignore[no-any-return]


async def chat(api: Api, token: str, agent: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": "hello", "stream": False}
    if agent:
        body["agent"] = agent
    response = await api.client.post("/chat", json=body, headers=bearer(token))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def usage(api: Api, token: str, query: str = "") -> dict[str, Any]:
    response = await api.client.get(f"/usage{query}", headers=bearer(token))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_each_caller_reads_their_own_usage_and_the_operator_everyones(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(lambda request: reply("x" * 400))
    first = await chat(api, ALICE)
    await chat(api, ALICE, agent="writer")
    await chat(api, BOB)
    done = first["events"][-1]
    assert done["type"] == "done" and done["cost_usd"] > 0
    (call,) = [e for e in first["events"] if e["type"] == "usage"]
    assert call["cost_usd"] == pytest.approx(
        (call["usage"]["input"] * 1.0 + call["usage"]["output"] * 4.0) / 1e6
    )

    mine = await usage(api, ALICE, "?group_by=agent")
    assert {row["agent"] for row in mine["rows"]} == {"default", "writer"}
    assert mine["total"]["model_calls"] == 2 and mine["total"]["turns"] == 2
    assert set(mine["total"]) == {
        "input_tokens", "output_tokens", "cached_tokens", "cost_usd", "model_calls", "turns"
    }  # fmt: skip
    assert (await usage(api, BOB))["total"]["model_calls"] == 1
    everyone = await usage(api, OPERATOR, "?group_by=owner")
    assert {row["owner"]: row["model_calls"] for row in everyone["rows"]} == {
        "alice": 2,
        "bob": 1,
    }
    assert everyone["total"]["cost_usd"] == pytest.approx(
        sum(row["cost_usd"] for row in everyone["rows"])
    )
    today = datetime.now(UTC).date().isoformat()
    by_day = await usage(api, OPERATOR, "?group_by=day")
    assert [row["day"] for row in by_day["rows"]] == [today]


async def test_a_time_range_bounds_the_report(api: Api, scripted_model: ScriptedModel) -> None:
    scripted_model.respond(lambda request: "ok")
    await chat(api, ALICE)
    later = (datetime.now(UTC) + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    assert (await usage(api, ALICE, f"?since={later}"))["total"]["model_calls"] == 0
    assert (await usage(api, ALICE, f"?until={later}"))["total"]["model_calls"] == 1


@pytest.mark.parametrize(
    "query",
    ["?group_by=tool", "?since=yesterday", "?since=2025-01-02T00:00:00", "?limit=0",
     "?since=2025-01-03T00:00:00Z&until=2025-01-02T00:00:00Z"],
)  # fmt: skip
async def test_bad_queries_are_422_and_say_why(api: Api, query: str) -> None:
    response = await api.client.get(f"/usage{query}", headers=bearer(ALICE))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"]


async def test_usage_needs_a_credential(api: Api) -> None:
    response = await api.client.get("/usage")
    assert response.status_code == 401


async def test_metrics_count_tokens_and_dollars_by_agent_and_model(
    api: Api, scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(lambda request: reply("x" * 400))
    await chat(api, ALICE, agent="writer")
    text = (await api.client.get("/metrics", headers=bearer(OPERATOR))).text
    assert 'amodal_model_tokens_total{agent="writer",kind="output",model="scripted"} 100.0' in text
    cost = next(
        line for line in text.splitlines() if line.startswith("amodal_model_cost_usd_total{")
    )
    assert 'agent="writer"' in cost and float(cost.split()[-1]) > 0
