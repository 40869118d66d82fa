"""`GET /metrics` (SPEC 16): Prometheus' text format, counting what the server did."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runtime.testing import ScriptedModel
from tests.server.conftest import Api

pytestmark = pytest.mark.anyio

REPO: dict[str, Any] = {
    "agents/default/agent.json": {"tools": ["load_knowledge"]},
    "knowledge/faq.md": "# FAQ\n\nAsk.\n",
}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_metrics_count_turns_tools_tokens_and_reload_failures(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    root = make_repo(REPO)
    api: Api = await api_for(root)
    scripted_model.tool_call("load_knowledge", {"name": "faq"}).reply("Here.")
    await api.chat(message="hi")
    scripted_model.reply("Again.")
    await api.chat(message="again")
    (root / "agents/default/agent.json").write_text("{not json")
    await api.client.post("/admin/reload")

    response = await api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    got = samples(response.text)
    assert got[("amodal_turns_total", (("face", "chat"), ("reason", "model_stop")))] == 2
    assert got[("amodal_turn_duration_seconds_count", ())] == 2
    status = (("status", "ok"), ("tool", "load_knowledge"))
    assert got[("amodal_tool_calls_total", status)] == 1
    assert got[("amodal_model_call_duration_seconds_count", (("model", "scripted"),))] == 3
    assert got[("amodal_tokens_total", (("kind", "input"),))] > 0
    assert got[("amodal_running_turns", ())] == 0
    assert got[("amodal_reload_failures_total", ())] == 1


async def test_metrics_are_for_operators(
    make_repo: Callable[..., Path], api_for: Callable[..., Any]
) -> None:
    files = {
        **REPO,
        "amodal.json": {
            "name": "t",
            "version": "1",
            "auth": {"apiKeys": [{"key": "user-key", "claims": {"sub": "u1"}}]},
        },
    }
    api: Api = await api_for(make_repo(files), {"AMODAL_OPERATOR_TOKEN": "op-token"})
    user = await api.client.get("/metrics", headers={"Authorization": "Bearer user-key"})
    anonymous = await api.client.get("/metrics")
    operator = await api.client.get("/metrics", headers={"Authorization": "Bearer op-token"})
    assert (user.status_code, anonymous.status_code, operator.status_code) == (403, 401, 200)


async def test_tool_names_the_run_does_not_have_share_one_label(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    api: Api = await api_for(make_repo(REPO))
    invented = ["x" * 3000, "drop_tables", "load_knowledge\n"]
    for name in invented:
        scripted_model.tool_call(name, {})
    scripted_model.tool_call("load_knowledge", {"name": "faq"}).reply("Done.")
    await api.chat(message="hi")

    got = samples((await api.client.get("/metrics")).text)
    tools = {dict(labels)["tool"] for name, labels in got if name == "amodal_tool_calls_total"}
    assert tools == {"(unknown)", "load_knowledge"}
    assert got[("amodal_tool_calls_total", (("status", "error"), ("tool", "(unknown)")))] == 3
