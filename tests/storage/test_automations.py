"""The automations' records on every backend: one run per cron slot or delivery id across
storages on one database, runs newest first, state (paused, failures, alert) kept."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import anyio
import pytest

from runtime.storage import AutomationRunRecord, Storage

from ._helpers import T0, session_record

pytestmark = pytest.mark.anyio


def run(run_id: str, **changes: object) -> AutomationRunRecord:
    record = AutomationRunRecord(run_id, "digest", "cron", T0)
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


async def test_a_slot_is_claimed_once_across_storages_racing(storage, second_storage):
    slot = T0.replace(second=0, microsecond=0)
    won: list[bool] = []

    async def claim(which: Storage, index: int) -> None:
        won.append(await which.claim_automation_run(run(f"r{index}", slot=slot)))

    async with anyio.create_task_group() as group:
        for index in range(10):
            group.start_soon(claim, storage if index % 2 else second_storage, index)
    assert won.count(True) == 1
    runs = await storage.list_automation_runs("digest")
    assert [r.slot for r in runs] == [slot]


async def test_another_automation_may_claim_the_same_slot(storage):
    slot = T0.replace(second=0, microsecond=0)
    assert await storage.claim_automation_run(run("a", slot=slot))
    assert await storage.claim_automation_run(run("b", slot=slot, automation="other"))
    # Runs without a slot (manual, webhook) never conflict with each other.
    assert await storage.claim_automation_run(run("c", trigger="manual"))
    assert await storage.claim_automation_run(run("d", trigger="manual"))


async def test_a_delivery_id_starts_one_run_and_is_found_again(storage):
    assert await storage.claim_automation_run(run("w1", trigger="webhook", delivery_id="del-1"))
    assert not await storage.claim_automation_run(run("w2", trigger="webhook", delivery_id="del-1"))
    found = await storage.find_automation_delivery("digest", "del-1")
    assert found is not None and found.id == "w1"
    assert await storage.find_automation_delivery("digest", "del-2") is None


async def test_an_updated_run_reads_back_whole(storage):
    await storage.create_session(session_record("s1"))
    await storage.claim_automation_run(run("r1", slot=T0))
    ended = dataclasses.replace(
        run("r1", slot=T0),
        status="ok",
        session_id="s1",
        done_reason="model_stop",
        reply="the digest — é",
        ended_at=T0 + timedelta(seconds=3),
        deliveries=[{"target": "webhook http://x", "status": "delivered", "attempts": 2}],
    )
    await storage.update_automation_run(ended)
    assert await storage.get_automation_run("r1") == ended


async def test_runs_list_newest_first_filtered_by_status(storage):
    for index in range(3):
        status = "missed" if index == 1 else "ok"
        record = run(f"r{index}", created_at=T0 + timedelta(minutes=index), status=status)
        await storage.claim_automation_run(record)
    assert [r.id for r in await storage.list_automation_runs("digest")] == ["r2", "r1", "r0"]
    missed = await storage.list_automation_runs("digest", statuses=["missed"])
    assert [r.id for r in missed] == ["r1"]
    assert [r.id for r in await storage.list_automation_runs(limit=1)] == ["r2"]


async def test_the_latest_slot_is_the_newest_recorded_one(storage):
    assert await storage.latest_automation_slot("digest") is None
    await storage.claim_automation_run(run("a", slot=T0))
    await storage.claim_automation_run(run("b", slot=T0 + timedelta(hours=1), status="missed"))
    assert await storage.latest_automation_slot("digest") == T0 + timedelta(hours=1)


async def test_pause_and_failures_are_kept_across_storages(storage, second_storage):
    await storage.set_automation_paused("digest", True)
    assert await storage.count_automation_outcome("digest", failed=True) == 1
    assert await second_storage.count_automation_outcome("digest", failed=True) == 2
    state = (await second_storage.automation_states())["digest"]
    assert state.paused and state.failures == 2
    await second_storage.set_automation_paused("digest", False)
    assert not (await storage.automation_states())["digest"].paused
    assert await storage.count_automation_outcome("digest", failed=False) == 0


async def test_a_failure_alert_goes_once_per_cooldown_and_again_after_a_success(storage):
    await storage.count_automation_outcome("digest", failed=True)
    assert await storage.claim_automation_alert("digest", 3600, T0)
    assert not await storage.claim_automation_alert("digest", 3600, T0 + timedelta(minutes=5))
    assert await storage.claim_automation_alert("digest", 3600, T0 + timedelta(hours=1))
    await storage.count_automation_outcome("digest", failed=False)  # resets the cooldown
    assert await storage.claim_automation_alert("digest", 3600, T0 + timedelta(hours=1, minutes=1))


async def test_every_pending_confirmation_is_listed_oldest_first(storage):
    from runtime.storage import PendingConfirmation

    for name in ("s1", "s2"):
        await storage.create_session(session_record(name))
    for index, name in enumerate(("s2", "s1")):
        await storage.save_pending(
            PendingConfirmation(name, f"c{index}", "run", "a", "t", {}, {}, T0 + timedelta(index))
        )
    listed = await storage.list_all_pending()
    assert [(p.session_id, p.call_id) for p in listed] == [("s2", "c0"), ("s1", "c1")]


async def test_a_bad_status_is_refused_before_anything_is_written(storage):
    with pytest.raises(ValueError, match="status"):
        await storage.claim_automation_run(run("bad", status="finished"))
    assert await storage.get_automation_run("bad") is None


async def test_a_queued_run_is_started_by_one_storage_only(storage, second_storage):
    await storage.claim_automation_run(run("q1", status="queued"))
    taken = [
        await storage.start_queued_automation_run("q1"),
        await second_storage.start_queued_automation_run("q1"),
    ]
    assert taken == [True, False]
    found = await storage.get_automation_run("q1")
    assert found is not None and found.status == "running"


PENDING = [{"target": "webhook http://x", "delivery_id": "f1-0", "status": "pending"}]


async def test_ending_a_running_run_is_done_by_one_storage_only(storage, second_storage):
    await storage.claim_automation_run(run("f1", status="running"))
    ended = run("f1", status="ok", reply="done", ended_at=T0 + timedelta(seconds=5))
    ended = dataclasses.replace(ended, deliveries=PENDING)
    won: list[AutomationRunRecord | None] = []

    async def finish(which: Storage, index: int) -> None:
        end = which.end_automation_run(ended, was="running", holder=f"h{index}", ttl_seconds=30)
        won.append(await end)

    async with anyio.create_task_group() as group:
        for index in range(6):
            group.start_soon(finish, storage if index % 2 else second_storage, index)
    assert [w for w in won if w is not None] == [ended]
    # The outcome and its pending delivery are written in the step that ends the run.
    assert await second_storage.get_automation_run("f1") == ended
    assert (await storage.automation_states())["digest"].failures == 0
    assert await storage.end_automation_run(ended, was="running", holder="h", ttl_seconds=1) is None
    await storage.claim_automation_run(run("f2", status="running"))
    with pytest.raises(ValueError, match="ended_at"):
        await storage.end_automation_run(
            run("f2", status="ok"), was="running", holder="h", ttl_seconds=1
        )
    unended = await storage.get_automation_run("f2")
    assert unended is not None and unended.status == "running" and unended.ended_at is None


async def test_the_end_of_a_failed_run_counts_it_and_takes_the_alert_once(storage):
    from runtime.storage import AlertClaim

    alert = AlertClaim(1, 3600, T0, {"target": "failureAlert", "status": "pending"})
    for index in range(2):
        await storage.claim_automation_run(run(f"e{index}"))
        failed = run(f"e{index}", status="error", ended_at=T0)
        written = await storage.end_automation_run(
            failed, was="running", holder="h", ttl_seconds=30, alert=alert
        )
        assert written is not None
        # The alert went with the first failure; the second is inside the cooldown.
        expected = [{**alert.delivery, "consecutive_failures": 1}] if index == 0 else []
        assert written.deliveries == expected
        assert (await storage.get_automation_run(f"e{index}")) == written
    assert (await storage.automation_states())["digest"].failures == 2
    # A run that waits for a confirmation neither fails nor succeeds; its later end counts.
    await storage.claim_automation_run(run("w"))
    waiting = run("w", status="awaiting_confirmation", ended_at=T0)
    assert await storage.end_automation_run(waiting, was="running", holder="h", ttl_seconds=1)
    assert (await storage.automation_states())["digest"].failures == 2
    final = run("w", status="ok", ended_at=T0 + timedelta(hours=1))
    again = storage.end_automation_run(final, was="running", holder="h", ttl_seconds=1)
    assert await again is None  # it is not running
    ended = storage.end_automation_run(
        final, was="awaiting_confirmation", holder="h", ttl_seconds=1
    )
    assert await ended == final
    assert (await storage.automation_states())["digest"].failures == 0


async def test_a_lapsed_delivery_lease_is_taken_over_by_one_storage(storage, second_storage):
    await storage.claim_automation_run(run("d1"))
    ended = dataclasses.replace(run("d1", status="ok", ended_at=T0), deliveries=PENDING)
    assert await storage.end_automation_run(ended, was="running", holder="dead", ttl_seconds=0.5)
    assert await storage.due_automation_deliveries() == []  # its holder still holds it
    assert await second_storage.claim_automation_deliveries("d1", "other", 30) is None
    with anyio.fail_after(10):
        while not await second_storage.due_automation_deliveries():  # noqa: ASYNC110 (its clock)
            await anyio.sleep(0.1)
    taken: list[tuple[str, AutomationRunRecord | None]] = []

    async def claim(which: Storage, index: int) -> None:
        holder = f"new{index}"
        taken.append((holder, await which.claim_automation_deliveries("d1", holder, 30)))

    async with anyio.create_task_group() as group:
        for index in range(6):
            group.start_soon(claim, storage if index % 2 else second_storage, index)
    ((winner, record),) = [(holder, t) for holder, t in taken if t is not None]
    assert record == ended
    done = [{**PENDING[0], "status": "delivered"}]
    assert not await storage.save_automation_deliveries("d1", "dead", done, None)  # lost it
    assert await storage.save_automation_deliveries("d1", winner, PENDING, 30)  # renewed
    assert await second_storage.save_automation_deliveries("d1", winner, done, None)
    found = await storage.get_automation_run("d1")
    assert found is not None and found.deliveries == done
    assert await storage.claim_automation_deliveries("d1", winner, 30) is None  # nothing left
    assert await storage.due_automation_deliveries() == []
