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


async def test_finishing_a_running_run_is_claimed_by_one_storage_only(storage, second_storage):
    await storage.claim_automation_run(run("f1", status="running"))
    ended = run("f1", status="ok", reply="done", ended_at=T0 + timedelta(seconds=5))
    won: list[bool] = []

    async def finish(which: Storage) -> None:
        won.append(await which.claim_automation_finish(ended))

    async with anyio.create_task_group() as group:
        for index in range(6):
            group.start_soon(finish, storage if index % 2 else second_storage)
    assert won.count(True) == 1
    claimed = await storage.get_automation_run("f1")
    # Claimed, not ended yet: a waiter sees the outcome and its deliveries at once, later.
    assert claimed is not None and claimed.status == "running" and claimed.ended_at is not None
    await storage.update_automation_run(ended)
    assert not await second_storage.claim_automation_finish(ended)  # an ended run: never again
    await storage.claim_automation_run(run("f2", status="running"))
    with pytest.raises(ValueError, match="ended_at"):
        await storage.claim_automation_finish(run("f2", status="ok"))
    unclaimed = await storage.get_automation_run("f2")
    assert unclaimed is not None and unclaimed.ended_at is None
