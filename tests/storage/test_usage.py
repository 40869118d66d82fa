"""The usage records' contract (SPEC 22): every backend keeps each model call's spend,
sums it for the budgets, and reports it grouped and by time range."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import anyio
import pytest

from runtime.storage import Spend, Storage, UsageQuery, UsageRecord

from ._helpers import T0

pytestmark = pytest.mark.anyio


def call(**changes: object) -> UsageRecord:
    record = UsageRecord(
        session_id="s1",
        turn_id="turn-1",
        run_id="run-1",
        agent="writer",
        model="gpt-4.1-mini",
        owner="alice",
        scope_id="scope-a",
        at=T0,
        input_tokens=1_000,
        output_tokens=100,
        cached_tokens=200,
        cost_usd=0.01,
    )
    return replace(record, **changes)  # type: ignore[arg-type]


async def test_spend_is_summed_per_session_and_per_owner_and_utc_day(storage: Storage) -> None:
    await storage.record_usage(call())
    await storage.record_usage(call(run_id="run-2", cost_usd=0.02, session_id="s2"))
    await storage.record_usage(call(owner="bob", cost_usd=1.0))
    await storage.record_usage(call(at=T0 + timedelta(days=1), cost_usd=5.0))
    # 23:30 in UTC-5 is the next UTC day: days are UTC.
    late = datetime(2025, 1, 2, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    await storage.record_usage(call(at=late, cost_usd=7.0))
    await storage.record_usage(call(owner=None, cost_usd=0.5))
    day = T0.date().isoformat()
    assert await storage.owner_spent("alice", day) == Spend(2_200, pytest.approx(0.03))
    assert await storage.owner_spent("bob", day) == Spend(1_100, 1.0)
    assert await storage.owner_spent(None, day) == Spend(1_100, 0.5)
    assert (await storage.owner_spent("alice", "2025-01-03")).cost_usd == pytest.approx(12.0)
    assert (await storage.session_spent("s2")).cost_usd == pytest.approx(0.02)
    # Every call of a session, whatever its day or owner.
    assert await storage.session_spent("s1") == Spend(5_500, pytest.approx(13.51))
    await storage.record_usage(call(session_id="s3", cost_usd=None))  # a price nobody knows
    assert await storage.session_spent("s3") == Spend(1_100, 0.0)
    assert await storage.session_spent("unknown") == Spend(0, 0.0)


async def test_a_report_groups_filters_by_time_and_counts_turns(storage: Storage) -> None:
    # The runtime marks each turn's first call, and its agent's and its model's first.
    firsts = {"turn_first": True, "agent_first": True, "model_first": True}
    await storage.record_usage(call(**firsts))
    await storage.record_usage(
        call(run_id="run-2", agent="researcher", cost_usd=0.03, agent_first=True)
    )
    await storage.record_usage(call(turn_id="turn-2", at=T0 + timedelta(hours=1), **firsts))
    await storage.record_usage(
        call(model="local", cost_usd=None, at=T0 + timedelta(days=2), model_first=True)
    )
    rows, total = await storage.usage_report(UsageQuery(group_by="agent"))
    assert [(r.key, r.model_calls, r.turns) for r in rows] == [
        ({"agent": "researcher"}, 1, 1),  # most expensive first
        ({"agent": "writer"}, 3, 2),
    ]
    writer = next(r for r in rows if r.key == {"agent": "writer"})
    assert writer.cost_usd == pytest.approx(0.02)  # the unpriced call adds nothing
    assert (total.input_tokens, total.output_tokens, total.cached_tokens) == (4_000, 400, 800)
    assert total.model_calls == 4 and total.turns == 2
    assert total.as_json()["cost_usd"] == pytest.approx(0.05)

    rows, total = await storage.usage_report(
        UsageQuery(since=T0, until=T0 + timedelta(hours=1), group_by="day")
    )
    assert [(r.key, r.model_calls) for r in rows] == [({"day": "2025-01-02"}, 2)]
    days, _ = await storage.usage_report(UsageQuery(group_by="day"))
    assert [r.key["day"] for r in days] == ["2025-01-02", "2025-01-04"]  # in time order
    models, by_model = await storage.usage_report(UsageQuery(group_by="model"))
    assert {r.key["model"]: r.cost_usd for r in models}["local"] is None
    assert {r.key["model"]: r.turns for r in models} == {"gpt-4.1-mini": 2, "local": 1}
    assert by_model.turns == 2 and by_model.model_calls == 4
    # A report cut at `limit` still totals every call.
    (top,), cut = await storage.usage_report(UsageQuery(group_by="agent", limit=1))
    assert top.key == {"agent": "researcher"} and cut.model_calls == 4 and cut.turns == 2
    # By session (one row per session and day: its total is a second pass) the same.
    sessions, whole = await storage.usage_report(UsageQuery(group_by="session"))
    assert [r.key["session"] for r in sessions] == ["s1"] and whole == by_model
    await storage.record_usage(call(session_id="s2", turn_id="turn-3", cost_usd=0.5, **firsts))
    (costliest,), cut = await storage.usage_report(UsageQuery(group_by="session", limit=1))
    assert costliest.key == {"session": "s2"} and costliest.cost_usd == pytest.approx(0.5)
    assert cut.model_calls == 5 and cut.turns == 3 and cut.cost_usd == pytest.approx(0.55)
    # And by kind: every call so far was a run's; a summary is its own row, never a turn.
    await storage.record_usage(call(kind="compaction", cost_usd=0.25))
    kinds, everything = await storage.usage_report(UsageQuery(group_by="kind"))
    assert [(r.key["kind"], r.model_calls, r.turns) for r in kinds] == [
        ("run", 5, 3),
        ("compaction", 1, 0),
    ]
    assert everything.model_calls == 6 and everything.cost_usd == pytest.approx(0.8)


async def test_an_end_users_report_is_their_own(storage: Storage) -> None:
    await storage.record_usage(call())
    await storage.record_usage(call(owner="bob"))
    await storage.record_usage(call(scope_id="scope-b"))  # alice in another tenant
    rows, total = await storage.usage_report(
        UsageQuery(scope_id="scope-a", owner="alice", group_by="owner")
    )
    assert [r.key for r in rows] == [{"owner": "alice"}] and total.model_calls == 1
    _, everyone = await storage.usage_report(UsageQuery())
    assert everyone.model_calls == 3
    _, nobody = await storage.usage_report(UsageQuery(scope_id="scope-a", owner=None))
    assert nobody.model_calls == 0 and nobody.cost_usd is None


async def test_records_outlive_their_session(storage: Storage) -> None:
    from ._helpers import session_record

    await storage.create_session(session_record("s1"))
    await storage.record_usage(call())
    assert await storage.delete_session("s1")
    assert (await storage.owner_spent("alice", T0.date().isoformat())).cost_usd == 0.01


async def test_an_answer_and_its_usage_are_appended_together_or_not_at_all(
    storage: Storage,
) -> None:
    from runtime.exceptions import RecordNotFoundError
    from runtime.storage import NewEvent

    from ._helpers import session_record

    await storage.create_session(session_record("s1"))
    answer = NewEvent("answer", {"text": "hi"}, "run-1", "writer", None, usage=call())
    (stored,) = await storage.append_events("s1", [answer])
    assert stored.data == {"text": "hi"}
    assert await storage.session_spent("s1") == Spend(1_100, pytest.approx(0.01))
    # An append that fails keeps neither: no usage without its answer.
    with pytest.raises(RecordNotFoundError):
        await storage.append_event(
            "gone",
            "answer",
            {},
            run_id="r",
            agent="a",
            bundle_version=None,
            usage=call(session_id="gone"),
        )
    with pytest.raises(ValueError):  # bad usage fails the caller, and nothing is written
        await storage.append_events(
            "s1", [NewEvent("answer", {}, None, None, None, usage=call(cost_usd=-1.0))]
        )
    assert len(await storage.list_events("s1")) == 1
    assert (await storage.owner_spent("alice", T0.date().isoformat())).tokens == 1_100


async def test_bad_usage_is_refused_before_anything_is_written(storage: Storage) -> None:
    for bad in (
        call(input_tokens=-1),
        call(output_tokens=True),  # type: ignore[arg-type]
        call(cost_usd=-0.01),
        call(cost_usd=math.nan),
        call(cost_usd=math.inf),
        call(at=datetime(2025, 1, 2)),
        call(kind="tool"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValueError):
            await storage.record_usage(bad)
    with pytest.raises(ValueError, match="unknown usage group"):
        await storage.usage_report(UsageQuery(group_by="tool"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        await storage.usage_report(UsageQuery(limit=0))
    with pytest.raises(ValueError):
        await storage.usage_report(UsageQuery(since=datetime(2025, 1, 1)))
    _, total = await storage.usage_report(UsageQuery())
    assert total.model_calls == 0


async def test_concurrent_writers_on_two_storages_lose_no_record(
    storage: Storage, second_storage: Storage
) -> None:
    async def write(target: Storage, start: int) -> None:
        for index in range(start, start + 20):
            await target.record_usage(call(run_id=f"run-{index}", cost_usd=0.001))

    async with anyio.create_task_group() as group:
        group.start_soon(write, storage, 0)
        group.start_soon(write, second_storage, 100)
    spent = await storage.owner_spent("alice", T0.date().isoformat())
    assert spent.cost_usd == pytest.approx(0.04) and spent.tokens == 40 * 1_100


async def test_a_range_over_several_days_counts_each_call_once(storage: Storage) -> None:
    # Every 5 hours for four days: whole days come from the daily sums, the partial days at
    # either end from the calls themselves; the two must add up to exactly the calls in range.
    start = datetime(2025, 3, 1, 0, 30, tzinfo=UTC)
    times = [start + timedelta(hours=5 * index) for index in range(20)]
    for index, at in enumerate(times):
        await storage.record_usage(
            call(run_id=f"r{index}", turn_id=f"t{index}", at=at, turn_first=True,
                 agent="writer" if index % 2 else "researcher", cost_usd=0.001 * (index + 1))
        )  # fmt: skip
    for since, until in [
        (datetime(2025, 3, 1, 12, tzinfo=UTC), datetime(2025, 3, 3, 6, tzinfo=UTC)),
        (datetime(2025, 3, 2, tzinfo=UTC), datetime(2025, 3, 4, tzinfo=UTC)),
        (None, datetime(2025, 3, 2, 13, tzinfo=UTC)),
        (datetime(2025, 3, 2, 1, tzinfo=timezone(timedelta(hours=2))), None),
    ]:
        inside = [
            index
            for index, at in enumerate(times)
            if (since is None or at >= since) and (until is None or at < until)
        ]
        for group in (None, "agent", "day", "session"):
            rows, total = await storage.usage_report(
                UsageQuery(since=since, until=until, group_by=group)  # type: ignore[arg-type]
            )
            assert total.model_calls == len(inside) == total.turns, (since, until, group)
            assert total.cost_usd == pytest.approx(sum(0.001 * (i + 1) for i in inside))
            if group is not None:
                assert sum(row.model_calls for row in rows) == len(inside)
