"""The storage contract (SPEC 6.1, 7.6, 10): every backend must pass every test here."""

from __future__ import annotations

import copy
import math
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any

import anyio
import pytest

from runtime.storage import (
    AgentRunRecord,
    NewEvent,
    PendingConfirmation,
    RecordExistsError,
    RecordNotFoundError,
    RunEnd,
    Storage,
    StorageClosedError,
    utc_now,
)

from ._helpers import PAYLOAD, T0, session_record

pytestmark = pytest.mark.anyio


def new_event(i: int = 0, **data: object) -> NewEvent:
    return NewEvent("text", {"i": i, **data}, run_id="run-1", agent="default", bundle_version="v1")


async def append(storage: Storage, session_id: str, **data: object) -> int:
    event = await storage.append_event(
        session_id, "text", dict(data), run_id="run-1", agent="default", bundle_version="v1"
    )
    return event.seq


def pending(
    call_id: str = "call-1", session_id: str = "s1", **changes: object
) -> PendingConfirmation:
    fields: dict[str, Any] = {
        "session_id": session_id,
        "call_id": call_id,
        "run_id": "run-1",
        "agent": "default",
        "tool": "store__notes__delete",
        "arguments": {"key": "n1"},
        "state": {"messages": [{"role": "user", "content": "delete n1"}]},
        "created_at": T0,
    }
    fields.update(changes)
    return PendingConfirmation(**fields)


def run(run_id: str = "run-1", session_id: str = "s1", **changes: object) -> AgentRunRecord:
    fields: dict[str, Any] = {
        "id": run_id,
        "session_id": session_id,
        "parent_run_id": None,
        "depth": 0,
        "agent": "default",
        "label": "answer the user",
        "started_at": T0,
    }
    fields.update(changes)
    return AgentRunRecord(**fields)


# --- migrations -------------------------------------------------------------


async def test_opening_a_new_database_applies_every_migration_once_in_order(backend, storage):
    applied = backend.applied_migrations()

    assert [name for name, _ in applied] == backend.migration_names
    assert all(datetime.fromisoformat(at).tzinfo is not None for _, at in applied)


async def test_running_migrate_again_is_a_no_op(backend, storage):
    before = backend.applied_migrations()

    assert await storage.migrate() == []
    assert backend.applied_migrations() == before


async def test_reopening_a_database_does_not_reapply_its_migrations(backend, storage):
    before = backend.applied_migrations()

    reopened = await backend.open()
    try:
        assert await reopened.migrate() == []
    finally:
        await reopened.close()
    assert backend.applied_migrations() == before


# --- sessions ---------------------------------------------------------------


async def test_a_created_session_reads_back_equal(storage):
    record = session_record(metadata=copy.deepcopy(PAYLOAD))
    await storage.create_session(record)

    assert await storage.get_session("s1") == record


async def test_a_session_without_owner_reads_back_with_owner_none(storage):
    await storage.create_session(session_record(owner=None, root_agent="main"))

    found = await storage.get_session("s1")

    assert found is not None
    assert (found.owner, found.root_agent) == (None, "main")


async def test_an_unknown_session_reads_as_none(storage):
    assert await storage.get_session("nope") is None


async def test_creating_a_session_with_a_taken_id_fails_and_keeps_the_first(storage):
    first = session_record(scope_id="scope-a")
    await storage.create_session(first)

    with pytest.raises(RecordExistsError, match="'s1'"):
        await storage.create_session(session_record(scope_id="scope-b"))

    assert await storage.get_session("s1") == first


async def test_list_sessions_gives_a_callers_own_sessions_newest_first(storage):
    mine = [session_record(f"m{i}", updated_at=T0 + timedelta(minutes=i)) for i in (1, 3, 2)]
    others = [
        session_record("other-owner", owner="user-2"),
        session_record("other-scope", scope_id="scope-b"),
        session_record("no-owner", owner=None),
    ]
    for record in [*mine, *others]:
        await storage.create_session(record)

    listed = await storage.list_sessions("scope-a", "user-1")

    assert [s.id for s in listed] == ["m3", "m2", "m1"]
    assert listed[0] == mine[1]


async def test_list_sessions_with_owner_none_matches_only_sessions_without_owner(storage):
    await storage.create_session(session_record("owned"))
    await storage.create_session(session_record("anonymous", owner=None))

    assert [s.id for s in await storage.list_sessions("scope-a", None)] == ["anonymous"]


async def test_list_sessions_without_a_scope_lists_every_session(storage):
    await storage.create_session(session_record("a", updated_at=T0 + timedelta(seconds=2)))
    await storage.create_session(session_record("b", scope_id="scope-b", owner=None))
    await storage.create_session(session_record("c", updated_at=T0 + timedelta(seconds=2)))

    # The same updated_at: ties go by id, descending, so paging never repeats a session.
    assert [s.id for s in await storage.list_sessions()] == ["c", "a", "b"]


async def test_list_sessions_pages_by_limit_and_offset(storage):
    for i in range(5):
        await storage.create_session(session_record(f"s{i}", updated_at=T0 + timedelta(hours=i)))

    first = await storage.list_sessions("scope-a", "user-1", limit=2)
    rest = await storage.list_sessions("scope-a", "user-1", limit=2, offset=2)
    past_the_end = await storage.list_sessions("scope-a", "user-1", offset=5)

    assert [s.id for s in first] == ["s4", "s3"]
    assert [s.id for s in rest] == ["s2", "s1"]
    assert past_the_end == []


async def test_appending_to_a_session_moves_it_to_the_top_of_the_list(storage):
    await storage.create_session(session_record("old", updated_at=T0))
    await storage.create_session(session_record("new", updated_at=T0 + timedelta(hours=1)))

    await append(storage, "old")

    assert [s.id for s in await storage.list_sessions("scope-a", "user-1")] == ["old", "new"]


@pytest.mark.parametrize(
    ("limit", "offset", "message"),
    [
        (0, 0, "limit must be 1 to 100, got 0"),
        (101, 0, "limit must be 1 to 100, got 101"),
        (10, -1, "offset must be an int of 0 or more, got -1"),
        (True, 0, "limit must be an int, got True"),
    ],
)
async def test_list_sessions_refuses_a_page_out_of_bounds(storage, limit, offset, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        await storage.list_sessions(limit=limit, offset=offset)


async def test_datetimes_of_any_timezone_come_back_as_the_same_instant_in_utc(storage):
    plus_two = timezone(timedelta(hours=2))
    local = datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=plus_two)
    await storage.create_session(session_record(created_at=local, updated_at=local))

    found = await storage.get_session("s1")

    assert found is not None
    assert found.created_at == local
    assert found.created_at.utcoffset() == timedelta(0)


async def test_naive_datetimes_are_refused_before_anything_is_written(storage):
    with pytest.raises(ValueError, match="naive datetime"):
        await storage.create_session(session_record(created_at=datetime(2025, 1, 1)))

    assert await storage.get_session("s1") is None


async def test_set_root_changes_the_root_agent_and_bumps_updated_at(storage):
    await storage.create_session(session_record(root_agent="default"))

    await storage.set_root("s1", "researcher")

    found = await storage.get_session("s1")
    assert found is not None
    assert found.root_agent == "researcher"
    assert found.updated_at > T0 + timedelta(seconds=1)


async def test_touch_session_bumps_updated_at_and_nothing_else(storage):
    record = session_record()
    await storage.create_session(record)

    await storage.touch_session("s1")

    found = await storage.get_session("s1")
    assert found is not None
    assert found.updated_at > record.updated_at
    assert (found.root_agent, found.created_at, found.metadata) == (
        record.root_agent,
        record.created_at,
        record.metadata,
    )


async def test_set_root_and_touch_of_an_unknown_session_raise_not_found(storage):
    with pytest.raises(RecordNotFoundError, match="'ghost'"):
        await storage.set_root("ghost", "researcher")
    with pytest.raises(RecordNotFoundError, match="'ghost'"):
        await storage.touch_session("ghost")


async def test_deleting_a_session_removes_its_events_runs_pendings_and_lease(storage):
    for session_id in ("s1", "s2"):
        await storage.create_session(session_record(session_id))
        await append(storage, session_id, text="hi")
        await storage.save_pending(pending(session_id=session_id))
        await storage.start_run(run(f"run-{session_id}", session_id))
        assert await storage.try_acquire_turn(session_id, "turn-a", 60)

    assert await storage.delete_session("s1") is True

    assert await storage.get_session("s1") is None
    assert await storage.list_events("s1") == []
    assert await storage.list_pending("s1") == []
    assert await storage.list_runs("s1") == []
    assert await storage.try_acquire_turn("s1", "turn-b", 60)
    # The other session is untouched.
    assert await storage.get_session("s2") is not None
    assert [event.seq for event in await storage.list_events("s2")] == [1]
    assert len(await storage.list_pending("s2")) == 1
    assert len(await storage.list_runs("s2")) == 1
    assert not await storage.try_acquire_turn("s2", "turn-b", 60)


async def test_deleting_an_unknown_session_returns_false(storage):
    assert await storage.delete_session("ghost") is False


async def test_a_session_id_can_be_reused_after_delete_and_starts_at_seq_one(storage):
    await storage.create_session(session_record())
    await append(storage, "s1")
    await append(storage, "s1")
    await storage.delete_session("s1")

    await storage.create_session(session_record())

    assert await append(storage, "s1") == 1


# --- the event log ----------------------------------------------------------


async def test_appended_events_get_seqs_from_one_with_every_field_kept(storage):
    await storage.create_session(session_record())

    first = await storage.append_event(
        "s1", "user", {"text": "hi"}, run_id=None, agent=None, bundle_version="v1"
    )
    second = await storage.append_event(
        "s1",
        "assistant",
        {"text": "hello"},
        run_id="run-1",
        agent="researcher",
        bundle_version="v2",
    )

    assert (first.seq, second.seq) == (1, 2)
    assert (second.session_id, second.type, second.run_id, second.agent, second.bundle_version) == (
        "s1",
        "assistant",
        "run-1",
        "researcher",
        "v2",
    )
    assert second.created_at.tzinfo is not None
    assert abs(second.created_at - utc_now()) < timedelta(minutes=1)
    assert await storage.list_events("s1") == [first, second]


async def test_list_events_after_a_seq_returns_only_later_events_in_order(storage):
    await storage.create_session(session_record())
    for i in range(5):
        await append(storage, "s1", i=i)

    later = await storage.list_events("s1", after_seq=2)

    assert [(event.seq, event.data["i"]) for event in later] == [(3, 2), (4, 3), (5, 4)]
    assert await storage.list_events("s1", after_seq=5) == []


async def test_list_events_of_an_unknown_session_is_empty(storage):
    assert await storage.list_events("ghost") == []


async def test_each_session_numbers_its_events_from_one(storage):
    await storage.create_session(session_record("s1"))
    await storage.create_session(session_record("s2"))

    seqs = [await append(storage, "s1"), await append(storage, "s2"), await append(storage, "s1")]

    assert seqs == [1, 1, 2]


async def test_event_data_round_trips_unicode_and_nested_json(storage):
    await storage.create_session(session_record())

    stored = await storage.append_event(
        "s1", "tool_result", copy.deepcopy(PAYLOAD), run_id="r", agent="a", bundle_version="v"
    )

    (listed,) = await storage.list_events("s1")
    assert stored.data == PAYLOAD
    assert listed.data == PAYLOAD
    assert listed == stored


async def test_odd_strings_from_tool_output_round_trip_exactly(storage):
    await storage.create_session(session_record())
    odd = {"nul": "a\x00b", "controls": "\x01\x1f\x7f", "lone surrogate": "broken \ud800 pair"}

    await storage.append_event("s1", "tool_result", odd, run_id="r", agent="a", bundle_version="v")

    (event,) = await storage.list_events("s1")
    assert event.data == odd


async def test_fifty_concurrent_appends_get_seqs_one_to_fifty_without_gaps(storage):
    await storage.create_session(session_record())
    seqs: list[int] = []

    async def one(i: int) -> None:
        seqs.append(await append(storage, "s1", i=i))

    async with anyio.create_task_group() as group:
        for i in range(50):
            group.start_soon(one, i)

    events = await storage.list_events("s1")
    assert sorted(seqs) == list(range(1, 51))
    assert [event.seq for event in events] == list(range(1, 51))
    assert sorted(event.data["i"] for event in events) == list(range(50))


async def test_concurrent_appends_from_two_storages_on_one_database_never_collide(
    storage, second_storage
):
    await storage.create_session(session_record())

    async def many(target: Storage, writer: str) -> None:
        for i in range(20):
            await append(target, "s1", writer=writer, i=i)

    async with anyio.create_task_group() as group:
        group.start_soon(many, storage, "a")
        group.start_soon(many, second_storage, "b")

    events = await second_storage.list_events("s1")
    assert [event.seq for event in events] == list(range(1, 41))
    for writer in ("a", "b"):
        mine = [event.data["i"] for event in events if event.data["writer"] == writer]
        assert mine == list(range(20))


async def test_append_events_gives_consecutive_seqs_in_the_given_order(storage):
    await storage.create_session(session_record())
    await append(storage, "s1", i=-1)

    stored = await storage.append_events("s1", [new_event(i) for i in range(10)])

    assert [(event.seq, event.data["i"]) for event in stored] == [(i + 2, i) for i in range(10)]
    assert (await storage.list_events("s1"))[1:] == stored


async def test_concurrent_batches_each_stay_contiguous(storage):
    await storage.create_session(session_record())

    async def batch(b: int) -> None:
        await storage.append_events("s1", [new_event(i, batch=b) for i in range(5)])

    async with anyio.create_task_group() as group:
        for b in range(10):
            group.start_soon(batch, b)
            group.start_soon(append, storage, "s1")

    events = await storage.list_events("s1")
    assert [event.seq for event in events] == list(range(1, 61))
    for b in range(10):
        seqs = [event.seq for event in events if event.data.get("batch") == b]
        assert seqs == list(range(seqs[0], seqs[0] + 5))
        assert [event.data["i"] for event in events if event.data.get("batch") == b] == [
            0,
            1,
            2,
            3,
            4,
        ]


async def test_append_events_with_no_events_writes_nothing(storage):
    await storage.create_session(session_record())

    assert await storage.append_events("s1", []) == []
    assert await append(storage, "s1") == 1


async def test_appending_to_an_unknown_session_raises_not_found_and_stores_nothing(storage):
    with pytest.raises(RecordNotFoundError, match="'ghost'"):
        await append(storage, "ghost")
    with pytest.raises(RecordNotFoundError, match="'ghost'"):
        await storage.append_events("ghost", [new_event(1), new_event(2)])

    assert await storage.list_events("ghost") == []


@pytest.mark.parametrize(
    "bad",
    [{"x": math.nan}, {"x": math.inf}, {"x": {1, 2}}, {"x": object()}],
    ids=["nan", "infinity", "set", "object"],
)
async def test_data_that_is_not_json_is_refused_and_the_whole_batch_is_not_written(storage, bad):
    await storage.create_session(session_record())

    with pytest.raises((ValueError, TypeError), match="not JSON"):
        await storage.append_events(
            "s1", [new_event(1), NewEvent("text", bad, "r", "a", "v"), new_event(3)]
        )

    assert await storage.list_events("s1") == []
    assert await append(storage, "s1") == 1


async def test_appending_bumps_the_sessions_updated_at(storage):
    await storage.create_session(session_record())

    event = await storage.append_event(
        "s1", "user", {"text": "hi"}, run_id=None, agent=None, bundle_version=None
    )

    found = await storage.get_session("s1")
    assert found is not None
    assert found.updated_at == event.created_at


# --- pending confirmations --------------------------------------------------


async def test_a_pending_confirmation_round_trips(storage):
    await storage.create_session(session_record())
    confirmation = pending(
        arguments=copy.deepcopy(PAYLOAD), state={"resume": copy.deepcopy(PAYLOAD)}
    )

    await storage.save_pending(confirmation)

    assert await storage.get_pending("s1", "call-1") == confirmation
    assert await storage.list_pending("s1") == [confirmation]


async def test_a_call_that_is_not_pending_reads_as_none(storage):
    await storage.create_session(session_record())

    assert await storage.get_pending("s1", "nope") is None
    assert await storage.list_pending("s1") == []


async def test_list_pending_returns_the_sessions_calls_oldest_first(storage):
    await storage.create_session(session_record("s1"))
    await storage.create_session(session_record("s2"))
    await storage.save_pending(pending("late", created_at=T0 + timedelta(seconds=5)))
    await storage.save_pending(pending("early", created_at=T0))
    await storage.save_pending(pending("other", session_id="s2"))

    assert [c.call_id for c in await storage.list_pending("s1")] == ["early", "late"]


async def test_saving_the_same_pending_call_twice_fails_and_keeps_the_first(storage):
    await storage.create_session(session_record())
    await storage.save_pending(pending(tool="first"))

    with pytest.raises(RecordExistsError, match="call-1"):
        await storage.save_pending(pending(tool="second"))

    found = await storage.get_pending("s1", "call-1")
    assert found is not None
    assert found.tool == "first"


async def test_saving_a_pending_call_for_an_unknown_session_raises_not_found(storage):
    with pytest.raises(RecordNotFoundError, match="'ghost'"):
        await storage.save_pending(pending(session_id="ghost"))


async def test_delete_pending_returns_true_once_then_false(storage):
    await storage.create_session(session_record())
    await storage.save_pending(pending())

    assert await storage.delete_pending("s1", "call-1") is True
    assert await storage.delete_pending("s1", "call-1") is False
    assert await storage.get_pending("s1", "call-1") is None


async def test_racing_deletes_of_one_pending_call_let_exactly_one_caller_win(
    storage, second_storage
):
    await storage.create_session(session_record())
    await storage.save_pending(pending())
    outcomes: list[bool] = []

    async def approve(target: Storage) -> None:
        outcomes.append(await target.delete_pending("s1", "call-1"))

    async with anyio.create_task_group() as group:
        for i in range(20):
            group.start_soon(approve, storage if i % 2 else second_storage)

    assert sorted(outcomes) == [False] * 19 + [True]


# --- runs -------------------------------------------------------------------


async def test_a_started_run_reads_back_running(storage):
    await storage.create_session(session_record())
    record = run()

    await storage.start_run(record)

    (found,) = await storage.list_runs("s1")
    assert found == record
    assert (found.status, found.ended_at, found.usage, found.error) == ("running", None, {}, None)


async def test_end_run_records_status_usage_error_and_end_time(storage):
    await storage.create_session(session_record())
    await storage.start_run(run())
    ended = T0 + timedelta(seconds=3)
    usage = {"input_tokens": 120, "output_tokens": 30, "cached_tokens": 0}

    await storage.end_run("run-1", "error", usage, "provider failed: 503", ended)

    (found,) = await storage.list_runs("s1")
    assert (found.status, found.usage, found.error, found.ended_at) == (
        "error",
        usage,
        "provider failed: 503",
        ended,
    )


async def test_end_run_without_an_end_time_uses_now(storage):
    await storage.create_session(session_record())
    await storage.start_run(run())

    await storage.end_run("run-1", "partial", {"output_tokens": 1})

    (found,) = await storage.list_runs("s1")
    assert found.status == "partial"
    assert found.ended_at is not None
    assert abs(found.ended_at - utc_now()) < timedelta(minutes=1)


async def test_ending_an_unknown_run_raises_not_found(storage):
    with pytest.raises(RecordNotFoundError, match="'ghost'"):
        await storage.end_run("ghost", "ok", {})


async def test_run_statuses_outside_the_allowed_ones_are_refused(storage):
    await storage.create_session(session_record())

    with pytest.raises(ValueError, match="'done'"):
        await storage.start_run(run(status="done"))
    await storage.start_run(run())
    with pytest.raises(ValueError, match="'running'"):
        await storage.end_run("run-1", "running", {})

    (found,) = await storage.list_runs("s1")
    assert found.status == "running"


async def test_list_runs_returns_the_delegation_tree_in_start_order(storage):
    await storage.create_session(session_record())
    await storage.create_session(session_record("s2"))
    root = run("root", started_at=T0)
    child_b = run(
        "b", parent_run_id="root", depth=1, agent="writer", started_at=T0 + timedelta(seconds=2)
    )
    child_a = run(
        "a", parent_run_id="root", depth=1, agent="research", started_at=T0 + timedelta(seconds=1)
    )
    grandchild = run("a1", parent_run_id="a", depth=2, started_at=T0 + timedelta(seconds=3))
    for record in (child_b, grandchild, root, child_a):
        await storage.start_run(record)
    await storage.start_run(run("elsewhere", "s2"))

    assert await storage.list_runs("s1") == [root, child_a, child_b, grandchild]


async def test_a_run_id_cannot_be_started_twice(storage):
    await storage.create_session(session_record())
    await storage.start_run(run())

    with pytest.raises(RecordExistsError, match="'run-1'"):
        await storage.start_run(run(label="again"))


async def test_starting_a_run_for_an_unknown_session_raises_not_found(storage):
    with pytest.raises(RecordNotFoundError, match="'ghost'"):
        await storage.start_run(run(session_id="ghost"))


# --- turn leases ------------------------------------------------------------


async def test_a_free_turn_lease_is_taken(storage):
    assert await storage.try_acquire_turn("s1", "turn-a", 30) is True


async def test_a_second_holder_is_refused_while_the_lease_is_held(storage):
    await storage.try_acquire_turn("s1", "turn-a", 30)

    assert await storage.try_acquire_turn("s1", "turn-b", 30) is False


async def test_the_holder_may_take_its_own_lease_again(storage):
    await storage.try_acquire_turn("s1", "turn-a", 30)

    assert await storage.try_acquire_turn("s1", "turn-a", 30) is True


async def test_an_expired_lease_is_taken_by_another_holder(storage):
    await storage.try_acquire_turn("s1", "crashed", 0.05)
    await anyio.sleep(0.15)

    assert await storage.try_acquire_turn("s1", "turn-b", 30) is True
    assert await storage.try_acquire_turn("s1", "crashed", 30) is False


async def test_a_released_lease_can_be_taken_at_once(storage):
    await storage.try_acquire_turn("s1", "turn-a", 30)

    assert await storage.release_turn("s1", "turn-a") is True

    assert await storage.try_acquire_turn("s1", "turn-b", 30) is True


async def test_only_the_holder_can_release_a_lease(storage):
    await storage.try_acquire_turn("s1", "turn-a", 30)

    assert await storage.release_turn("s1", "turn-b") is False
    assert await storage.release_turn("s1", "turn-a") is True
    assert await storage.release_turn("s1", "turn-a") is False
    assert await storage.try_acquire_turn("s1", "turn-b", 30) is True


# --- a turn's bookkeeping, in the transaction of its entries --------------------


async def test_an_append_can_start_a_run_then_end_it_and_release_the_lease(storage):
    await storage.create_session(session_record())
    await storage.try_acquire_turn("s1", "turn-a", 30)
    ended = T0 + timedelta(seconds=5)

    await storage.append_events("s1", [new_event(1), replace(new_event(2), starts_run=run())])
    (started,) = await storage.list_runs("s1")
    assert started == run()
    end = RunEnd("run-1", "partial", {"output_tokens": 7}, "the budget ran out", ended)
    await storage.append_events("s1", [replace(new_event(3), ends_run=end, releases_turn="turn-a")])

    (found,) = await storage.list_runs("s1")
    assert (found.status, found.usage, found.error, found.ended_at) == (
        "partial",
        {"output_tokens": 7},
        "the budget ran out",
        ended,
    )
    assert [e.seq for e in await storage.list_events("s1")] == [1, 2, 3]
    assert await storage.try_acquire_turn("s1", "turn-b", 30) is True  # released


async def test_an_append_whose_run_end_names_no_run_writes_nothing(storage):
    await storage.create_session(session_record())
    await storage.try_acquire_turn("s1", "turn-a", 30)
    end = RunEnd("ghost", "ok", {})

    with pytest.raises(RecordNotFoundError, match="'ghost'"):
        await storage.append_events(
            "s1", [replace(new_event(1), starts_run=run(), ends_run=end, releases_turn="turn-a")]
        )

    assert await storage.list_events("s1") == []
    assert await storage.list_runs("s1") == []
    assert await storage.try_acquire_turn("s1", "turn-b", 30) is False  # still held


async def test_an_append_starting_a_taken_run_id_writes_nothing(storage):
    await storage.create_session(session_record())
    await storage.start_run(run(label="first"))

    with pytest.raises(RecordExistsError, match="'run-1'"):
        await storage.append_events("s1", [replace(new_event(1), starts_run=run(label="again"))])

    assert await storage.list_events("s1") == []
    assert [r.label for r in await storage.list_runs("s1")] == ["first"]


async def test_a_bad_run_end_is_refused_before_anything_is_written(storage):
    await storage.create_session(session_record())
    await storage.start_run(run())

    with pytest.raises(ValueError, match="'running'"):
        await storage.append_events(
            "s1", [replace(new_event(1), ends_run=RunEnd("run-1", "running", {}))]
        )

    assert await storage.list_events("s1") == []
    assert (await storage.list_runs("s1"))[0].status == "running"


async def test_an_append_leaves_a_lease_another_holder_took(storage):
    await storage.create_session(session_record())
    await storage.try_acquire_turn("s1", "turn-b", 30)

    await storage.append_events("s1", [replace(new_event(1), releases_turn="turn-a")])

    assert [e.seq for e in await storage.list_events("s1")] == [1]
    assert await storage.try_acquire_turn("s1", "turn-a", 30) is False


async def test_renewing_keeps_the_lease_past_its_first_expiry(storage):
    await storage.try_acquire_turn("s1", "turn-a", 0.2)

    assert await storage.renew_turn("s1", "turn-a", 30) is True
    await anyio.sleep(0.3)

    assert await storage.try_acquire_turn("s1", "turn-b", 30) is False


async def test_renewing_fails_once_another_holder_took_the_expired_lease(storage):
    await storage.try_acquire_turn("s1", "turn-a", 0.05)
    await anyio.sleep(0.15)
    await storage.try_acquire_turn("s1", "turn-b", 30)

    assert await storage.renew_turn("s1", "turn-a", 30) is False
    assert await storage.renew_turn("s1", "turn-b", 30) is True


async def test_renewing_a_lease_nobody_holds_fails(storage):
    assert await storage.renew_turn("s1", "turn-a", 30) is False


async def test_leases_of_different_sessions_are_independent(storage):
    await storage.try_acquire_turn("s1", "turn-a", 30)

    assert await storage.try_acquire_turn("s2", "turn-b", 30) is True


async def test_of_many_racing_holders_on_two_storages_exactly_one_gets_the_lease(
    storage, second_storage
):
    winners: list[str] = []

    async def contend(target: Storage, holder: str) -> None:
        if await target.try_acquire_turn("s1", holder, 30):
            winners.append(holder)

    async with anyio.create_task_group() as group:
        for i in range(20):
            group.start_soon(contend, storage if i % 2 else second_storage, f"turn-{i}")

    assert len(winners) == 1
    assert await second_storage.try_acquire_turn("s1", "late", 30) is False


async def test_a_lease_ttl_that_is_not_positive_is_refused(storage):
    with pytest.raises(ValueError, match="ttl_seconds"):
        await storage.try_acquire_turn("s1", "turn-a", 0)
    with pytest.raises(ValueError, match="ttl_seconds"):
        await storage.renew_turn("s1", "turn-a", -1)


# --- restart ----------------------------------------------------------------


async def test_a_reopened_database_keeps_everything(backend):
    first = await backend.open()
    record = session_record(metadata={"title": "Zürich ✓"})
    await first.create_session(record)
    events = await first.append_events("s1", [new_event(i, payload=PAYLOAD) for i in range(3)])
    await first.save_pending(pending())
    await first.start_run(run())
    await first.end_run("run-1", "ok", {"output_tokens": 7}, None, T0 + timedelta(seconds=1))
    await first.start_run(run("child", parent_run_id="run-1", depth=1))
    await first.try_acquire_turn("s1", "turn-a", 30)
    runs = await first.list_runs("s1")
    session = await first.get_session("s1")
    await first.close()

    again = await backend.open()
    try:
        assert await again.get_session("s1") == session
        assert await again.list_events("s1") == events
        assert await again.list_pending("s1") == [pending()]
        assert await again.list_runs("s1") == runs
        assert await again.try_acquire_turn("s1", "turn-b", 30) is False
        assert await append(again, "s1") == 4
    finally:
        await again.close()


# --- cancellation -----------------------------------------------------------


async def test_cancelled_appends_still_complete_and_their_callers_see_the_cancellation(
    backend, storage
):
    await storage.create_session(session_record())
    returned: list[int] = []

    async def append_and_note(i: int) -> None:
        returned.append(await append(storage, "s1", i=i))

    block = backend.block_writes()
    try:
        async with anyio.create_task_group() as group:
            for i in range(3):  # one waits for the write lock, two queue behind it
                group.start_soon(append_and_note, i)
            await anyio.sleep(0.1)
            group.cancel_scope.cancel()
            block.release()
    finally:
        block.release()

    events = await storage.list_events("s1")
    assert sorted(event.data["i"] for event in events) == [0, 1, 2]
    assert [event.seq for event in events] == [1, 2, 3]
    assert returned == []
    assert await append(storage, "s1") == 4


async def test_cancelling_a_burst_of_appends_leaves_a_gapless_intact_log(storage):
    await storage.create_session(session_record())

    for _ in range(5):
        with anyio.move_on_after(0.002):
            async with anyio.create_task_group() as group:
                for i in range(20):
                    group.start_soon(partial(append, storage, "s1", i=i, payload=PAYLOAD))

    events = await storage.list_events("s1")
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert all(event.data["payload"] == PAYLOAD for event in events)
    assert await append(storage, "s1") == len(events) + 1


async def test_a_cancelled_batch_is_written_whole(storage):
    await storage.create_session(session_record())

    with anyio.CancelScope() as scope:
        scope.cancel()
        await storage.append_events("s1", [new_event(i) for i in range(10)])

    assert [event.data["i"] for event in await storage.list_events("s1")] in ([], list(range(10)))


# --- closing ----------------------------------------------------------------


async def test_operations_after_close_raise_storage_closed_and_close_is_idempotent(backend):
    opened = await backend.open()
    await opened.close()
    await opened.close()

    with pytest.raises(StorageClosedError):
        await opened.get_session("s1")
    with pytest.raises(StorageClosedError):
        await opened.create_session(session_record())


async def test_interrupting_closes_the_running_runs_of_one_session_only(storage):
    await storage.create_session(session_record("s1"))
    await storage.create_session(session_record("s2"))
    await storage.start_run(run("r1", "s1"))
    await storage.start_run(
        run("r2", "s1", parent_run_id="r1", depth=1, started_at=T0 + timedelta(seconds=1))
    )
    await storage.start_run(run("r3", "s1", started_at=T0 + timedelta(seconds=2)))
    await storage.end_run("r3", "ok", {"input": 1})
    await storage.start_run(run("other", "s2"))
    ended = T0 + timedelta(hours=1)

    closed = await storage.interrupt_runs("s1", "interrupted: the server stopped", ended)

    assert [(r.id, r.status) for r in closed] == [("r1", "running"), ("r2", "running")]
    runs = {r.id: r for r in await storage.list_runs("s1")}
    assert (runs["r1"].status, runs["r1"].error, runs["r1"].ended_at) == (
        "interrupted",
        "interrupted: the server stopped",
        ended,
    )
    assert runs["r2"].status == "interrupted" and runs["r3"].status == "ok"
    assert (await storage.list_runs("s2"))[0].status == "running"
    assert await storage.interrupt_runs("s1", "again") == []
