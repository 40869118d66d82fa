"""Summaries spend money too (SPEC 20 and 22): the summariser's calls are admitted by the
turn's budget like any other call, recorded as usage of kind `compaction`, and counted in
the session's spend; a summary the budget cannot afford is skipped like a failing
summariser (stage one's view, the turn goes on). Through the runtime and the scripted
model over loopback HTTP."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import events
from runtime.testing import ScriptedModel
from tests._harness import Harness, done, of_type
from tests.test_compaction import desk, is_summariser, repo, talk

pytestmark = pytest.mark.anyio

CHEAP = {"input": 1.0, "output": 1.0}  # USD per million tokens
DEAR = {"input": 100.0, "output": 100.0}


def priced_session(
    result_chars: int, *, summariser: dict[str, Any], limits: dict[str, Any], **compaction: Any
) -> dict[str, Any]:
    """The compaction tests' repo, priced, with its summaries written by the `advanced` tier
    (another model name on the same scripted endpoint)."""
    files = repo(result_chars, model="advanced", **compaction)
    models = files["amodal.json"]["models"]
    models["main"]["price"] = CHEAP
    models["advanced"] = {"model": "summariser", "maxOutputTokens": 500, **summariser}
    files["amodal.json"]["limits"] = limits
    return files


async def test_a_summary_is_spent_on_the_turn_and_recorded_as_compaction_usage(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    files = priced_session(1_900, summariser={"price": DEAR}, limits={"maxTurnCostUsd": 5.0})
    harness: Harness = await harness_for(make_repo(files))
    scripted_model.respond(desk())
    streamed = await talk(harness, range(1, 12))
    summaries = [r for r in scripted_model.requests if is_summariser(r)]
    assert summaries and all(r.body["model"] == "summariser" for r in summaries)
    # The turn that summarised: its `done` counts the summary's tokens and dollars, which
    # no `usage` event of its runs reports.
    turns: list[list[Any]] = []
    for event in streamed:
        if isinstance(event, events.Session):
            turns.append([])
        turns[-1].append(event)
    (summarised,) = [t for t in turns if any(getattr(e, "stage", "") == "summary" for e in t)]
    finished = done(summarised)
    calls = of_type(summarised, events.ModelUsage)
    runs_cost = sum(call.cost_usd or 0.0 for call in calls)
    runs_tokens = sum(c.usage.input_tokens + c.usage.output_tokens for c in calls)
    assert finished.cost_usd is not None and finished.cost_usd > runs_cost
    spent = finished.usage.input_tokens + finished.usage.output_tokens
    assert spent > runs_tokens
    # Recorded with its kind, model, agent and session; GET /usage shows it by kind.
    report = await harness.runtime.usage(group_by="kind", operator=True)
    by_kind = {row.key["kind"]: row for row in report.rows}
    assert set(by_kind) == {"run", "compaction"}
    compaction = by_kind["compaction"]
    assert compaction.model_calls == len(summaries)
    assert compaction.cost_usd == pytest.approx(finished.cost_usd - runs_cost)
    assert by_kind["run"].turns == 11 and report.total.turns == 11  # a summary is no turn
    models = await harness.runtime.usage(group_by="model", operator=True)
    assert {row.key["model"] for row in models.rows} == {"scripted", "summariser"}
    # The log's compaction entry says what it cost: the session's spend counts it.
    logged = (await harness.session(streamed[0].session_id)).entries
    (entry,) = [e for e in logged if e.type == "compaction" and e.data["stage"] == "summary"]
    assert entry.data["cost_usd"] == pytest.approx(compaction.cost_usd)
    assert entry.data["usage"]["input"] == compaction.input_tokens
    assert entry.agent == "default" and entry.run_id == finished.run_id


async def test_a_summary_the_budget_cannot_afford_is_skipped_and_the_turn_goes_on(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    # One summary would cost dollars; the turn may spend five cents: never asked for.
    files = priced_session(
        2_500, summariser={"price": DEAR}, limits={"maxTurnCostUsd": 0.05}, threshold=0.25
    )
    harness: Harness = await harness_for(make_repo(files))
    scripted_model.respond(desk())
    streamed = await talk(harness, range(1, 8))  # every turn ends model_stop
    assert {c.stage for c in of_type(streamed, events.Compaction)} == {"mask"}
    assert not any(is_summariser(r) for r in scripted_model.requests)
    assert not of_type(streamed, events.Error)
    report = await harness.runtime.usage(group_by="kind", operator=True)
    assert [row.key["kind"] for row in report.rows] == ["run"]


async def test_a_summary_counts_toward_the_session_limit_of_the_turns_after_it(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    # Manual compaction is spent like a turn of its own: recorded, and in the session's
    # spend (its log entry), so the next turn reads it against the session's limit.
    files = priced_session(100, summariser={"price": DEAR}, limits={})
    root, database = make_repo(files), str(tmp_path / "kept.db")
    harness: Harness = await harness_for(root, database)
    scripted_model.respond(desk())
    streamed = await talk(harness, range(1, 5))
    session_id = streamed[0].session_id
    compaction = await harness.runtime.compact(session_id, operator=True)
    assert compaction is not None and compaction.stage == "summary"
    report = await harness.runtime.usage(group_by="kind", operator=True)
    (summary,) = [row for row in report.rows if row.key["kind"] == "compaction"]
    assert summary.model_calls == 1 and summary.cost_usd is not None
    spent = report.total.cost_usd
    assert spent is not None and summary.cost_usd > 0.01  # the main model's next call: < $0.002
    # A limit a hair above what the session spent: the next call cannot fit, and only
    # because the summary counts (without it, $0.01 would be left).
    files["amodal.json"]["limits"] = {"maxSessionCostUsd": spent + 0.0005}
    restarted: Harness = await harness_for(make_repo(files), database)
    asked = len(scripted_model.requests)
    after = done(await restarted.chat("read page 9", session_id=session_id))
    assert after.reason == "budget_exhausted"
    assert after.budget is not None and after.budget["limit"] == "maxSessionCostUsd"
    assert after.budget["used"] == pytest.approx(spent)
    assert len(scripted_model.requests) == asked


async def test_a_summariser_without_a_price_under_a_cost_limit_is_skipped_not_fatal(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # amodal.json prices its summariser, but the environment swaps in a model nobody
    # priced: the budget cannot bound its calls, so none is made; the turns go on.
    monkeypatch.setenv("MODEL_ADVANCED", "unpriced-summariser")
    files = priced_session(
        2_500, summariser={"price": CHEAP}, limits={"maxTurnCostUsd": 1.0}, threshold=0.25
    )
    harness: Harness = await harness_for(make_repo(files))
    scripted_model.respond(desk())
    streamed = await talk(harness, range(1, 8))  # every turn ends model_stop
    assert {c.stage for c in of_type(streamed, events.Compaction)} == {"mask"}
    assert not any(is_summariser(r) for r in scripted_model.requests)
    assert not of_type(streamed, events.Error)
