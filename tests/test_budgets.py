"""Bounded spend (SPEC 22): token, cost and time budgets over the whole delegation tree,
checked before every model call, ending in a partial answer instead of an exception."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import events
from runtime.storage import UsageQuery, open_storage
from runtime.surface.caller import Caller
from runtime.testing import RecordedRequest, ScriptedModel, reply, tool_call
from tests._harness import Harness, done, of_type

pytestmark = pytest.mark.anyio

SPECIALISTS = [f"s{index:02d}" for index in range(1, 13)]
PRICE = {"input": 2.0, "output": 2.0}  # USD per million tokens: 2e-6 a token
MAX_OUTPUT = 200
BIG = "lorem ipsum " * 350  # about 1,000 tokens a load


def priced(limits: dict[str, Any], *, team: bool = True, **extra: Any) -> dict[str, Any]:
    """A repo on the scripted model, priced, with these limits and a big knowledge doc; the
    lead has twelve specialists when `team`."""
    files: dict[str, Any] = {
        "amodal.json": {
            "name": "budgets",
            "version": "1.0.0",
            "models": {
                "main": {"model": "scripted", "price": PRICE, "maxOutputTokens": MAX_OUTPUT}
            },
            "limits": limits,
        },
        "knowledge/big.md": f"# Big\n\n{BIG}\n",
        "agents/default/AGENT.md": "You are the lead.\n",
        "agents/default/agent.json": {
            "subagents": SPECIALISTS if team else [],
            "tools": ["load_knowledge"],
        },
    }
    for name in SPECIALISTS if team else []:
        files[f"agents/{name}/AGENT.md"] = f"You are specialist {name}.\n"
        # Long descriptions: the lead's tool schemas weigh about 3,000 tokens, which its
        # last call (made without tools) does not send.
        files[f"agents/{name}/agent.json"] = {
            "description": f"Specialist {name}. " + "Knows a great many things. " * 10,
            "tools": ["load_knowledge"],
        }
    files.update(extra)
    return files


def who(request: RecordedRequest) -> str:
    system = request.system or ""
    if "You are specialist " in system:
        return system.split("You are specialist ")[1].split(".")[0]
    return "lead"


def results(request: RecordedRequest) -> list[Any]:
    return [json.loads(m["content"]) for m in request.messages if m["role"] == "tool"]


def reading(request: RecordedRequest) -> Any:
    """Load the big document again and again, until the tools are taken away."""
    if not request.tools:
        return reply(f"partial answer after {len(results(request))} reads")
    return tool_call("load_knowledge", {"name": "big"})


async def test_a_lead_fanning_out_twelve_specialists_stops_at_five_cents_with_a_partial_answer(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    def respond(request: RecordedRequest) -> Any:
        if who(request) != "lead":
            return reading(request)
        if not request.tools:
            return reply("partial: here is what the team found")
        if not results(request):
            tasks = [{"subagent": name, "task": f"research {name}"} for name in SPECIALISTS]
            return tool_call("call_subagent", {"calls": tasks})
        return tool_call("load_knowledge", {"name": "big"})

    scripted_model.respond(respond)
    harness: Harness = await harness_for(make_repo(priced({"maxTurnCostUsd": 0.05})))
    streamed = await harness.chat("research everything")

    finished = done(streamed)
    assert finished.reason == "budget_exhausted"
    assert finished.budget is not None
    assert finished.budget["limit"] == "maxTurnCostUsd" and finished.budget["value"] == 0.05
    # The last call had no tools, and its text is the turn's answer.
    assert scripted_model.requests[-1].tools == []
    text = "".join(
        e.text for e in of_type(streamed, events.TextDelta) if e.run_id == finished.run_id
    )
    assert text.endswith("partial: here is what the team found")
    # Specialists that would have crossed the budget failed as specialists.
    batch = next(r for r in of_type(streamed, events.ToolResult) if r.name == "call_subagent")
    errors = [item["error"] for item in batch.result["results"] if "error" in item]
    assert errors and all(error.startswith("budget_exhausted") for error in errors)
    # Every call is priced and on the done event; the whole turn stays under the limit
    # plus one call's estimate (at most MAX_OUTPUT tokens more than it sent).
    calls = of_type(streamed, events.ModelUsage)
    assert all(call.cost_usd is not None for call in calls)
    total = sum(call.cost_usd for call in calls)
    assert finished.cost_usd == pytest.approx(total)
    largest = max(call.cost_usd for call in calls)
    assert total <= 0.05 + largest
    # From 80% of the limit the lead was told to finish, in the tool results it read.
    read = [item for r in scripted_model.requests if who(r) == "lead" for item in results(r)]
    notices = [item["_budget"]["spend"] for item in read if "spend" in item.get("_budget", {})]
    assert notices and notices[-1]["limit"] == "maxTurnCostUsd"
    assert notices[-1]["used"] >= 0.8 * 0.05


def looping(request: RecordedRequest) -> Any:
    """A root that reads the big document until its tools are taken away."""
    if not request.tools:
        return reply("what I have so far")
    return tool_call("load_knowledge", {"name": "big"})


async def test_the_wall_clock_limit_ends_the_turn_with_a_last_answer(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    scripted_model.latency = 0.15
    scripted_model.respond(looping)
    harness: Harness = await harness_for(make_repo(priced({"maxTurnSeconds": 0.5}, team=False)))
    streamed = await harness.chat("go")
    finished = done(streamed)
    assert finished.reason == "budget_exhausted"
    assert finished.budget is not None and finished.budget["limit"] == "maxTurnSeconds"
    assert finished.budget["used"] >= 0.5
    assert scripted_model.requests[-1].tools == []
    # Stopped near 0.5 s (a few 0.15 s calls, or none on a very loaded machine), not at the
    # 25th tool call: every call had tools but the last, made after the limit to answer.
    requests = scripted_model.requests
    assert len(requests) < 12 and all(request.tools for request in requests[:-1])


async def test_session_limits_count_the_earlier_turns(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(lambda request: reply("x" * 2_000))
    harness: Harness = await harness_for(make_repo(priced({"maxSessionTokens": 3_000}, team=False)))
    first = await harness.chat("hello")
    assert done(first).reason == "model_stop"
    spent = done(first).usage
    assert spent.input_tokens + spent.output_tokens > 0
    second = await harness.chat("again", session_id=first[0].session_id)
    assert done(second).reason == "model_stop"
    calls = len(scripted_model.requests)
    third = await harness.chat("and again", session_id=first[0].session_id)
    finished = done(third)
    # The third turn's call sends both earlier answers (~1,300 tokens with the prompts) and
    # its answer may take 200 more: with the ~1,950 the first two spent, that crosses.
    assert finished.reason == "budget_exhausted"
    assert finished.budget is not None and finished.budget["limit"] == "maxSessionTokens"
    assert finished.budget["used"] > 1_900
    assert len(scripted_model.requests) == calls  # no call was made past the limit


async def test_a_session_cost_limit_holds_across_a_restart(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    scripted_model.respond(lambda request: reply("y" * 2_000))
    repo = make_repo(priced({"maxSessionCostUsd": 0.003}, team=False))
    database = str(tmp_path / "shared.db")
    first: Harness = await harness_for(repo, database)
    streamed = await first.chat("hello")
    assert done(streamed).reason == "model_stop"
    again: Harness = await harness_for(repo, database)  # another process, the same database
    later = await again.chat("more", session_id=streamed[0].session_id)
    assert done(later).reason == "budget_exhausted"
    assert done(later).budget["limit"] == "maxSessionCostUsd"  # type: ignore[index]


async def test_an_agent_overrides_the_repo_limits_for_turns_it_roots(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    files = priced({"maxTurnTokens": 1_000_000}, team=False)
    files["agents/default/agent.json"] = {
        "tools": ["load_knowledge"],
        "limits": {"maxTurnTokens": 4_000},
    }
    scripted_model.respond(looping)
    harness: Harness = await harness_for(make_repo(files))
    finished = done(await harness.chat("go"))
    assert finished.reason == "budget_exhausted"
    assert finished.budget == {
        "limit": "maxTurnTokens",
        "value": 4_000,
        "used": pytest.approx(
            finished.budget["used"]  # type: ignore[index]
        ),
    }
    assert finished.usage.input_tokens + finished.usage.output_tokens <= 4_000


async def test_usage_a_provider_does_not_report_is_estimated_and_marked(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with ScriptedModel(quirks=["no_usage"]) as model:
        monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
        monkeypatch.setenv("MODEL_MAIN", "scripted")
        model.respond(lambda request: reply("z" * 400))
        database = str(tmp_path / "estimated.db")
        harness: Harness = await harness_for(make_repo(priced({}, team=False)), database)
        streamed = await harness.chat("hello")
    (call,) = of_type(streamed, events.ModelUsage)
    assert call.estimated and call.to_json()["estimated"] is True
    assert call.usage.output_tokens == 100 and call.usage.input_tokens > 0
    assert call.cost_usd == pytest.approx((call.usage.input_tokens + 100) * 2e-6)
    storage = await open_storage(database)
    try:
        rows, total = await storage.usage_report(UsageQuery(group_by="model"))
    finally:
        await storage.close()
    assert total.output_tokens == 100 and total.model_calls == 1
    assert rows[0].key == {"model": "scripted"}


async def test_concurrent_turns_of_one_owner_overshoot_the_daily_limit_by_one_estimate_each(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    limit = 0.03
    scripted_model.latency = 0.02
    scripted_model.respond(looping)
    repo = make_repo(priced({"maxDailyCostUsdPerOwner": limit}, team=False))
    database = str(tmp_path / "daily.db")
    one: Harness = await harness_for(repo, database)
    two: Harness = await harness_for(repo, database)  # a second process on the same database
    alice = Caller(claims={"sub": "alice"})
    finished: list[events.Done] = []

    async def turn(harness: Harness) -> None:
        finished.append(done(await harness.chat("read", caller=alice)))

    async with anyio.create_task_group() as group:
        for harness in (one, two, one, two):
            group.start_soon(turn, harness)
    assert {d.reason for d in finished} == {"budget_exhausted"}
    assert {d.budget["limit"] for d in finished if d.budget} == {"maxDailyCostUsdPerOwner"}
    spent = sum(d.cost_usd or 0.0 for d in finished)
    largest = max(u.cost_usd for u in await _calls(database))
    assert spent <= limit + len(finished) * largest
    # Another person's day is their own.
    bob = await one.chat("read", caller=Caller(claims={"sub": "bob"}))
    assert done(bob).cost_usd and done(bob).cost_usd > 0  # type: ignore[operator]
    # And alice's next turn is refused before any call.
    calls = len(scripted_model.requests)
    late = done(await two.chat("more", caller=alice))
    assert late.reason == "budget_exhausted" and len(scripted_model.requests) == calls


async def _calls(database: str) -> list[Any]:
    storage = await open_storage(database)
    try:
        rows, _ = await storage.usage_report(UsageQuery(group_by="session"))
        return rows
    finally:
        await storage.close()


def _errors(root: Path) -> list[str]:
    from runtime.repo.loader import load_repo

    return [
        f"{e.file}:{e.line}: {e.field}: {e.message}" for e in load_repo(root, environ={}).errors
    ]


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        (
            {"maxTurnCostUsd": -1},
            "amodal.json:14: limits.maxTurnCostUsd: Input should be greater than 0 (got -1)",
        ),
        (
            {"maxTurnTokens": "5000"},
            "amodal.json:14: limits.maxTurnTokens: Input should be a valid integer (got '5000')",
        ),
        (
            {"maxTurnSeconds": True},
            "amodal.json:14: limits.maxTurnSeconds: Input should be a valid number (got True)",
        ),
        (
            {"maxSessionTokens": 0},
            "amodal.json:14: limits.maxSessionTokens: "
            "Input should be greater than or equal to 1 (got 0)",
        ),
    ],
)
def test_negative_or_non_numeric_limits_are_errors_with_their_line(
    make_repo: Callable[..., Path], limits: dict[str, Any], expected: str
) -> None:
    files = priced({"maxTurnTokens": 1}, team=False)
    files["amodal.json"] = {
        "name": "budgets",
        "version": "1.0.0",
        "models": {"main": {"model": "scripted", "price": PRICE}},
        "limits": limits,
    }
    assert _errors(make_repo(files)) == [expected]


def test_a_cost_limit_on_a_model_without_a_price_names_the_model(
    make_repo: Callable[..., Path],
) -> None:
    files = priced({}, team=False)
    files["amodal.json"] = {
        "name": "budgets",
        "version": "1.0.0",
        "models": {"main": "in-house-llm", "simple": "gpt-4.1-mini"},
        "limits": {"maxTurnTokens": 10_000, "maxDailyCostUsdPerOwner": 5},
    }
    (error,) = _errors(make_repo(files))
    assert error.startswith(
        "amodal.json:10: limits.maxDailyCostUsdPerOwner: maxDailyCostUsdPerOwner is a cost limit"
    )
    assert "'in-house-llm' has no known price" in error  # gpt-4.1-mini is in the catalog


def test_an_agents_cost_limit_on_an_unpriced_model_is_its_files_error(
    make_repo: Callable[..., Path],
) -> None:
    files = priced({}, team=False)
    files["amodal.json"] = {"name": "b", "version": "1", "models": {"main": "in-house-llm"}}
    files["agents/default/agent.json"] = {"limits": {"maxTurnCostUsd": 0.5}}
    (error,) = _errors(make_repo(files))
    assert error.startswith(
        "agents/default/agent.json:2: limits.maxTurnCostUsd: maxTurnCostUsd is a cost limit"
    )
    assert "'in-house-llm'" in error


def test_amodal_validate_prints_the_limit_error_as_path_line(
    make_repo: Callable[..., Path], amodal: Callable[..., Any]
) -> None:
    files = priced({"maxTurnCostUsd": "0.05"}, team=False)
    result = amodal("--repo", str(make_repo(files)), "validate", "--offline")
    assert result.code == 1
    assert (
        "amodal.json:15: limits.maxTurnCostUsd: Input should be a valid number (got '0.05')"
        in result.stdout + result.stderr
    )


CRASHING_TOOL = """
import os


async def handler(args, ctx):
    os._exit(3)  # the process dies mid-turn, after the model call that asked for this
"""


def test_a_crash_mid_turn_keeps_the_usage_of_the_calls_it_made(
    make_repo: Callable[..., Path], amodal: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    files = priced({}, team=False)
    files["tools/crash/tool.json"] = {"description": "Crash the process."}
    files["tools/crash/handler.py"] = CRASHING_TOOL
    files["agents/default/agent.json"] = {"tools": ["crash"]}
    repo = make_repo(files)
    scripted_model.respond(lambda request: tool_call("crash", {}))
    result = amodal("--repo", str(repo), "chat", "go", env={"AMODAL_DATA_DIR": str(repo / ".data")})
    assert result.code == 3, result.stderr

    async def rows() -> Any:
        storage = await open_storage(repo / ".data" / "amodal.db")
        try:
            return await storage.usage_report(UsageQuery(group_by="agent"))
        finally:
            await storage.close()

    by_agent, total = anyio.run(rows)
    assert total.model_calls == 1 and total.input_tokens > 0
    assert by_agent[0].key == {"agent": "default"}
    assert total.cost_usd == pytest.approx((total.input_tokens + total.output_tokens) * 2e-6)


def team_of_three(miser: dict[str, Any]) -> dict[str, Any]:
    """A lead with three specialists: `miser` (these `limits`; it delegates to `helper`),
    `reader` (its own 3,000 tokens) and `free` (no limits); every specialist but miser
    reads the big document until it is stopped."""
    files = priced({"maxTurnTokens": 1_000_000}, team=False)
    files["agents/default/agent.json"] = {"subagents": ["miser", "reader", "free"]}
    files["agents/miser/AGENT.md"] = "You are specialist miser.\n"
    files["agents/miser/agent.json"] = {
        "description": "Delegates the reading.",
        "subagents": ["helper"],
        "limits": miser,
    }
    for name in ("helper", "reader", "free"):
        files[f"agents/{name}/AGENT.md"] = f"You are specialist {name}.\n"
        files[f"agents/{name}/agent.json"] = {
            "description": f"Reads, as {name}.",
            "tools": ["load_knowledge"],
            "maxToolCalls": 6,
        }
    files["agents/reader/agent.json"]["limits"] = {"maxTurnTokens": 3_000}
    return files


def lead_and_team(request: RecordedRequest) -> Any:
    name = who(request)
    if name == "lead":
        if not results(request):
            tasks = [{"subagent": name, "task": "find"} for name in ("miser", "reader", "free")]
            return tool_call("call_subagent", {"calls": tasks})
        return reply("the lead's answer")
    if name == "miser":
        if not results(request):
            return tool_call("call_subagent", {"calls": [{"subagent": "helper", "task": "read"}]})
        return reply("miser's summary")
    return reading(request)


def delegated(streamed: list[Any], run_id: str) -> events.ToolResult:
    (batch,) = [
        r
        for r in of_type(streamed, events.ToolResult)
        if r.name == "call_subagent" and r.run_id == run_id
    ]
    return batch


async def test_a_specialists_own_limit_bounds_its_subtree_and_the_root_goes_on(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(lead_and_team)
    harness: Harness = await harness_for(make_repo(team_of_three({"maxTurnTokens": 5_000})))
    streamed = await harness.chat("find it")
    finished = done(streamed)
    assert finished.reason == "model_stop" and finished.budget is None
    runs = {run.agent: run for run in await harness.runs(streamed[0].session_id)}
    # The reader stopped at its own limit, a failed specialist; the helper, under miser,
    # at miser's; `free`, unbounded, read on to its last tool call; the lead answered.
    _, reader, free = delegated(streamed, finished.run_id).result["results"]
    assert reader["error"].startswith(
        "budget_exhausted: the next model call would cross reader's own maxTurnTokens"
    )
    helper = delegated(streamed, runs["miser"].id).result
    assert helper["error"].startswith(
        "budget_exhausted: the next model call would cross miser's own maxTurnTokens"
    )
    assert "error" not in free and free.get("partial") is True  # its 6 tool calls, spent
    # What miser's subtree took stayed under its 5,000 tokens (the check adds every
    # call's estimate before it is made); the turn, bounded at a million, took more.
    subtree_runs = {runs["miser"].id, runs["helper"].id}
    calls = of_type(streamed, events.ModelUsage)
    subtree = sum(
        c.usage.input_tokens + c.usage.output_tokens for c in calls if c.run_id in subtree_runs
    )
    assert 0 < subtree <= 5_000
    assert finished.usage.input_tokens + finished.usage.output_tokens > 5_000
    reader_tokens = sum(
        c.usage.input_tokens + c.usage.output_tokens for c in calls if c.run_id == runs["reader"].id
    )
    assert 0 < reader_tokens <= 3_000
    assert runs["reader"].status == "error" and runs["helper"].status == "error"
    assert runs["free"].status == "partial"


async def test_the_stricter_of_the_turns_budget_and_a_specialists_own_holds(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    # Miser's own limit is looser than the turn's: the turn's still bounds it (and ends
    # the turn at its limit with the lead's last answer).
    files = team_of_three({"maxTurnTokens": 900_000})
    files["amodal.json"]["limits"] = {"maxTurnTokens": 6_000}
    scripted_model.respond(lead_and_team)
    harness: Harness = await harness_for(make_repo(files))
    streamed = await harness.chat("find it")
    runs = {run.agent: run for run in await harness.runs(streamed[0].session_id)}
    helper = delegated(streamed, runs["miser"].id).result
    assert helper["error"].startswith(
        "budget_exhausted: the next model call would cross maxTurnTokens"
    )
    finished = done(streamed)
    assert finished.usage.input_tokens + finished.usage.output_tokens <= 6_000
