"""Delegation (SPEC 7): call_subagent's bounds, results, isolation, approvals and run tree."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.testing import RecordedRequest, ScriptedModel, error, reply, tool_call
from tests._harness import Harness, done

pytestmark = pytest.mark.anyio

SPECIALISTS = [f"s{index:02d}" for index in range(1, 14)]


def team(**extra: Any) -> dict[str, Any]:
    files: dict[str, Any] = {
        "agents/default/AGENT.md": "You are the lead.\n",
        "agents/default/CONTEXT.md": "Page: {{ scope.page }}\n",
        "agents/default/agent.json": {"subagents": SPECIALISTS, "tools": ["load_knowledge"]},
        "knowledge/secret.md": "# Secret\n\nlead only\n",
    }
    for name in SPECIALISTS:
        files[f"agents/{name}/AGENT.md"] = f"You are specialist {name}.\n"
        files[f"agents/{name}/agent.json"] = {"description": f"Specialist {name}."}
    files.update(extra)
    return files


def agent_of(request: RecordedRequest) -> str:
    system = request.system or ""
    if "You are specialist " in system:
        return system.split("You are specialist ")[1].split(".")[0]
    return "lead"


def has_results(request: RecordedRequest) -> bool:
    return any(m["role"] == "tool" for m in request.messages)


def tool_results(request: RecordedRequest) -> list[Any]:
    return [json.loads(m["content"]) for m in request.messages if m["role"] == "tool"]


def fan_out(tasks: list[dict[str, Any]]) -> Callable[[RecordedRequest], Any]:
    def respond(request: RecordedRequest) -> Any:
        who = agent_of(request)
        if who == "lead":
            if has_results(request):
                return reply("combined")
            return tool_call("call_subagent", {"calls": tasks})
        return reply(f"result from {who}")

    return respond


@pytest.fixture
async def lead(make_repo: Callable[..., Path], harness_for: Callable[[Path], Any]) -> Harness:
    return await harness_for(make_repo(team()))  # type: ignore[no-any-return]


async def test_twelve_tasks_come_back_in_order_with_never_more_than_five_in_flight(
    lead: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.latency = 0.2
    tasks = [{"subagent": name, "task": f"task {name}"} for name in SPECIALISTS[:12]]
    scripted_model.respond(fan_out(tasks))
    events = await lead.chat("go")
    assert done(events).reason == "model_stop"
    assert scripted_model.max_in_flight == 5
    results = tool_results(scripted_model.requests[-1])[0]["results"]
    assert [r["subagent"] for r in results] == SPECIALISTS[:12]
    assert [r["result"] for r in results] == [f"result from {n}" for n in SPECIALISTS[:12]]


async def test_a_thirteenth_task_fails_the_whole_call_and_nothing_runs(
    lead: Harness, scripted_model: ScriptedModel
) -> None:
    tasks = [{"subagent": name, "task": "t"} for name in SPECIALISTS]
    scripted_model.respond(fan_out(tasks))
    events = await lead.chat("go")
    result = next(e for e in events if e.type == "tool_result")
    assert result.status == "error"
    assert "at most 12 tasks" in result.error and "nothing ran" in result.error
    assert {agent_of(r) for r in scripted_model.requests} == {"lead"}


async def test_one_task_returns_subagent_and_result(
    lead: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(fan_out([{"subagent": "s01", "task": "one"}]))
    await lead.chat("go")
    assert tool_results(scripted_model.requests[-1])[0] == {
        "subagent": "s01",
        "result": "result from s01",
    }


async def test_one_failed_specialist_never_fails_the_batch(
    lead: Harness, scripted_model: ScriptedModel
) -> None:
    base = fan_out([{"subagent": n, "task": "t"} for n in ("s01", "s02", "s03")])

    def respond(request: RecordedRequest) -> Any:
        return error(400, "bad request for s02") if agent_of(request) == "s02" else base(request)

    scripted_model.respond(respond)
    events = await lead.chat("go")
    results = tool_results(scripted_model.requests[-1])[0]["results"]
    assert results[0] == {"subagent": "s01", "result": "result from s01"}
    assert results[1]["subagent"] == "s02" and "400" in results[1]["error"]
    assert results[2] == {"subagent": "s03", "result": "result from s03"}
    assert done(events).reason == "model_stop"
    ends = [e.status for e in events if e.type == "subagent_end"]
    assert sorted(ends) == ["error", "ok", "ok"]


async def test_an_unknown_specialist_is_an_invalid_argument_listing_the_callable_ones(
    lead: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(fan_out([{"subagent": "ghost", "task": "t"}]))
    events = await lead.chat("go")
    result = next(e for e in events if e.type == "tool_result")
    assert result.status == "error" and "s01" in result.error


async def test_a_specialist_sees_only_its_own_prompt_and_the_task_with_input_as_json(
    lead: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("earlier answer from the lead")
    first = await lead.chat("my secret history", context={"page": "billing"})
    scripted_model.respond(
        fan_out([{"subagent": "s01", "task": "Summarise.", "input": {"ids": [1, 2]}}])
    )
    await lead.chat("delegate", session_id=first[0].session_id, context={"page": "billing"})
    specialist = next(r for r in scripted_model.requests if agent_of(r) == "s01")
    assert [m["role"] for m in specialist.messages] == ["system", "user"]
    assert "You are specialist s01." in specialist.system
    assert "You are the lead." not in specialist.system and "Page:" not in specialist.system
    assert specialist.messages[1]["content"] == (
        'Summarise.\n\n```json\n{\n  "ids": [\n    1,\n    2\n  ]\n}\n```'
    )
    lead_request = scripted_model.requests[-1]
    assert any(
        m["content"] == "Page: billing" for m in lead_request.messages if m["role"] == "system"
    )


async def test_specialists_get_no_approvals_confirm_tools_and_ask_choice_are_denied(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    files = team(
        **{
            "tools/pay/tool.json": {"description": "Pay.", "confirm": True},
            "tools/pay/handler.py": (
                "async def handler(args, ctx):\n    raise AssertionError('ran')\n"
            ),
            "agents/s01/agent.json": {"description": "Payer.", "tools": ["pay"]},
        }
    )
    h = await harness_for(make_repo(files))

    def respond(request: RecordedRequest) -> Any:
        who = agent_of(request)
        if who == "s01":
            if has_results(request):
                return reply("could not pay")
            return (
                tool_call("pay", {})
                if not request.messages[-1]["content"].startswith("ask")
                else tool_call("ask_choice", {"question": "?", "options": ["a", "b"]})
            )
        return fan_out(
            [{"subagent": "s01", "task": "pay it"}, {"subagent": "s01", "task": "ask them"}]
        )(request)

    scripted_model.respond(respond)
    events = await h.chat("go")
    denied = [e.to_json() for e in events if e.type == "tool_result" and e.status == "denied"]
    assert sorted(d["name"] for d in denied) == ["ask_choice", "pay"]
    assert done(events).reason == "model_stop"
    assert not any(e.type == "confirmation_required" for e in events)


async def test_nesting_stops_at_depth_five_with_a_clear_error(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    chain = [f"c{index}" for index in range(1, 8)]
    files: dict[str, Any] = {
        "agents/default/AGENT.md": "You are the lead.\n",
        "agents/default/agent.json": {"subagents": ["c1"]},
    }
    for index, name in enumerate(chain):
        files[f"agents/{name}/AGENT.md"] = f"You are specialist {name}.\n"
        if index + 1 < len(chain):
            files[f"agents/{name}/agent.json"] = {"subagents": [chain[index + 1]]}
    h = await harness_for(make_repo(files))

    def respond(request: RecordedRequest) -> Any:
        who = agent_of(request)
        if has_results(request):
            return reply(f"{who} done")
        following = "c1" if who == "lead" else f"c{int(who[1:]) + 1}"
        return tool_call("call_subagent", {"calls": [{"subagent": following, "task": "go on"}]})

    scripted_model.respond(respond)
    events = await h.chat("go")
    assert done(events).reason == "model_stop"
    assert sorted({agent_of(r) for r in scripted_model.requests}) == [
        "c1",
        "c2",
        "c3",
        "c4",
        "c5",
        "lead",
    ]
    c5_results = tool_results([r for r in scripted_model.requests if agent_of(r) == "c5"][-1])
    assert c5_results == [{"error": c5_results[0]["error"]}]
    assert "delegation depth limit" in c5_results[0]["error"]
    depths = [e.depth for e in events if e.type == "subagent_start"]
    assert depths == [1, 2, 3, 4, 5]


async def test_runs_per_turn_bound_answers_with_errors(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    files = team(
        **{"amodal.json": {"name": "t", "version": "1", "delegation": {"maxRunsPerTurn": 3}}}
    )
    h = await harness_for(make_repo(files))
    scripted_model.respond(fan_out([{"subagent": n, "task": "t"} for n in SPECIALISTS[:5]]))
    await h.chat("go")
    results = tool_results(scripted_model.requests[-1])[0]["results"]
    assert [("result" in r) for r in results].count(True) == 3
    errors = [r["error"] for r in results if "error" in r]
    assert len(errors) == 2 and all("at most 3 specialist runs" in e for e in errors)


async def test_a_specialist_out_of_budget_returns_a_partial_answer(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    files = team(**{"agents/s01/agent.json": {"tools": ["load_knowledge"], "maxToolCalls": 1}})
    h = await harness_for(make_repo(files))

    def respond(request: RecordedRequest) -> Any:
        if agent_of(request) == "s01":
            if not request.tools:
                return reply("what I have so far")
            return tool_call("load_knowledge", {"name": "secret"})
        return fan_out([{"subagent": "s01", "task": "dig"}])(request)

    scripted_model.respond(respond)
    await h.chat("go")
    assert tool_results(scripted_model.requests[-1])[0] == {
        "subagent": "s01",
        "result": "what I have so far",
        "partial": True,
    }


async def test_the_run_tree_is_recorded_and_streamed_with_run_ids(
    lead: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(
        fan_out([{"subagent": n, "task": f"Task for {n}"} for n in ("s01", "s02")])
    )
    events = await lead.chat("go")
    root_run = events[0].run_id
    starts = [e for e in events if e.type == "subagent_start"]
    assert {e.parent_run_id for e in starts} == {root_run}
    child_runs = {e.run_id for e in starts}
    assert len(child_runs) == 2 and root_run not in child_runs
    nested = [e for e in events if e.type == "text_delta" and e.run_id in child_runs]
    assert nested, "a specialist's text streams with its own run_id"
    runs = await lead.runs(events[0].session_id)
    by_id = {r.id: r for r in runs}
    assert by_id[root_run].depth == 0 and by_id[root_run].status == "ok"
    children = [r for r in runs if r.parent_run_id == root_run]
    assert sorted(r.label for r in children) == ["Task for s01", "Task for s02"]
    assert all(r.status == "ok" and r.ended_at is not None for r in children)
    assert all(r.usage["input"] > 0 for r in children)
    total = done(events).usage.as_json()["input"]
    assert total == sum(r.usage["input"] for r in runs)


async def test_the_active_root_is_never_callable(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    files = team(**{"agents/s01/agent.json": {"subagents": ["s01", "s02"]}})
    h = await harness_for(make_repo(files))
    scripted_model.reply("ok")
    await h.chat("hi", agent="s01")
    offered = scripted_model.requests[0].body["tools"]
    schema = next(t for t in offered if t["function"]["name"] == "call_subagent")
    enum = schema["function"]["parameters"]["properties"]["calls"]["items"]["properties"][
        "subagent"
    ]["enum"]
    assert enum == ["s02"]


async def test_a_specialists_model_tier_picks_its_model(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODEL_SIMPLE", "small-one")
    files = team(**{"agents/s01/agent.json": {"modelTier": "simple"}})
    h = await harness_for(make_repo(files))
    scripted_model.respond(fan_out([{"subagent": "s01", "task": "t"}]))
    await h.chat("go")
    models = {agent_of(r): r.model for r in scripted_model.requests}
    assert models == {"lead": "scripted", "s01": "small-one"}
