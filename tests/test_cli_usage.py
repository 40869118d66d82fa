"""`amodal usage` (SPEC 22): where the money went, as a user reads it after a turn that ran
into its budget."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import pytest

from runtime.cli.usage import since_option
from runtime.testing import RecordedRequest, ScriptedModel, reply, tool_call
from tests._harness import Harness, done
from tests.test_budgets import SPECIALISTS, priced, reading, who


@pytest.mark.anyio
async def test_after_a_fan_out_hits_its_budget_amodal_usage_by_agent_shows_where_it_went(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    amodal: Callable[..., Any],
    tmp_path: Path,
) -> None:
    def respond(request: RecordedRequest) -> Any:
        if who(request) != "lead":
            return reading(request)
        if not request.tools:
            return reply("partial: what the team found")
        tasks = [{"subagent": name, "task": f"research {name}"} for name in SPECIALISTS]
        return tool_call("call_subagent", {"calls": tasks})

    scripted_model.respond(respond)
    repo = make_repo(priced({"maxTurnCostUsd": 0.05}))
    data = tmp_path / "data"
    data.mkdir()
    harness: Harness = await harness_for(repo, str(data / "amodal.db"))
    finished = done(await harness.chat("research everything"))
    assert finished.reason == "budget_exhausted"

    env = {"AMODAL_DATA_DIR": str(data)}
    result = amodal("--repo", str(repo), "usage", "--by", "agent", "--json", env=env)
    assert result.code == 0, result.stderr
    body = result.json()
    agents = {row["agent"]: row for row in body["rows"]}
    assert "default" in agents and len(agents) > 2  # the lead and the specialists that ran
    assert body["total"]["cost_usd"] == pytest.approx(finished.cost_usd)
    assert body["total"]["turns"] == 1
    costs = [row["cost_usd"] for row in body["rows"]]
    assert costs == sorted(costs, reverse=True)  # the most expensive first

    table = amodal("--repo", str(repo), "usage", "--by", "agent", "--since", "1d", env=env)
    assert table.code == 0, table.stderr
    assert "AGENT" in table.stdout and "COST (USD)" in table.stdout
    assert "total" in table.stdout and "default" in table.stdout
    total = amodal("--repo", str(repo), "usage", "--json", env=env).json()
    assert total["rows"] == [] and total["total"]["model_calls"] == body["total"]["model_calls"]


def test_since_takes_a_date_a_time_or_an_age() -> None:
    now = datetime(2025, 1, 2, 12, 0, tzinfo=UTC)
    assert since_option("7d", now) == now - timedelta(days=7)
    assert since_option("24h", now) == now - timedelta(hours=24)
    assert since_option("2025-01-01") == datetime(2025, 1, 1, tzinfo=UTC)
    assert since_option("2025-01-01T09:00+02:00") == datetime(2025, 1, 1, 7, 0, tzinfo=UTC)
    assert since_option(None) is None
    with pytest.raises(click.BadParameter, match="7d, 24h"):
        since_option("last week")


def test_a_bad_since_is_a_usage_error(
    make_repo: Callable[..., Path], amodal: Callable[..., Any]
) -> None:
    result = amodal("--repo", str(make_repo()), "usage", "--since", "yesterday")
    assert result.code == 2 and "--since" in result.stderr
