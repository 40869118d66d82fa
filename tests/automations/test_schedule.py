"""The cron scheduler (SPEC 23) on an injected clock: each slot once across services on one
database, missed slots after downtime, overlap skip and queue, pause, and a clock that
jumps back never firing a slot twice. (`test_two_servers.py` runs real processes.)"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import Runtime
from runtime.automations import Automations
from runtime.storage import AutomationRunRecord
from runtime.testing import ScriptedModel, hang
from tests.automations._repo import FILES

pytestmark = pytest.mark.anyio

T10 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
HOURLY = {"message": "Hourly at {{ slot }}.", "trigger": {"cron": "0 * * * *"}}


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def services(
    make_repo: Callable[..., Path], tmp_path: Path
) -> Callable[..., contextlib.AbstractAsyncContextManager[Automations]]:
    database = tmp_path / "shared.db"

    @contextlib.asynccontextmanager
    async def open_one(clock: Clock, **spec: Any) -> AsyncIterator[Automations]:
        repo = make_repo({**FILES, "automations/hourly.json": {**HOURLY, **spec}})
        async with (
            Runtime.open(repo, database=database, background=1) as rt,
            Automations.open(rt, clock=clock) as service,
        ):
            yield service

    return open_one


async def ended(service: Automations, records: list[AutomationRunRecord]) -> list[Any]:
    with anyio.fail_after(20):
        return [await service.wait(r.id) for r in records]


async def test_two_services_on_one_database_run_a_slot_once(
    services, scripted_model: ScriptedModel
):
    scripted_model.reply("done at ten")
    clock = Clock(T10 - timedelta(minutes=5))
    async with services(clock) as one, services(clock) as two:
        assert await one.tick() == [] and await two.tick() == []  # nothing due yet
        clock.now = T10 + timedelta(seconds=1)
        claimed: list[AutomationRunRecord] = []

        async def tick(service: Automations) -> None:
            claimed.extend(await service.tick())

        async with anyio.create_task_group() as group:
            for service in (one, two, one, two):
                group.start_soon(tick, service)
        assert [r.slot for r in claimed] == [T10]
        (run,) = await ended(one, claimed)
        assert run.status == "ok" and run.reply == "done at ten"
    assert len(scripted_model.requests) == 1
    assert scripted_model.requests[0].last_user == f"Hourly at {T10.isoformat()}."


async def test_after_downtime_the_last_slot_fires_once_and_older_ones_are_missed(
    services, scripted_model: ScriptedModel
):
    scripted_model.reply("ten").reply("one")
    clock = Clock(T10 - timedelta(minutes=1))
    async with services(clock) as service:
        clock.now = T10 + timedelta(seconds=5)
        await ended(service, await service.tick())
    clock.now = T10 + timedelta(hours=3, minutes=20)  # down from 10:01 to 13:20
    async with services(clock) as service:
        claimed = await service.tick()
        assert [(r.slot, r.status) for r in claimed] == [
            (T10 + timedelta(hours=1), "missed"),
            (T10 + timedelta(hours=2), "missed"),
            (T10 + timedelta(hours=3), "running"),
        ]
        await ended(service, claimed[-1:])
        assert await service.tick() == []  # and never again
        runs = {r.slot: r.status for r in await service.runs("hourly")}
        assert runs == {
            T10: "ok",
            T10 + timedelta(hours=1): "missed",
            T10 + timedelta(hours=2): "missed",
            T10 + timedelta(hours=3): "ok",
        }


async def test_a_new_automation_does_not_fire_slots_from_before_it_was_loaded(services):
    clock = Clock(T10 + timedelta(minutes=30))
    async with services(clock) as service:
        assert await service.tick() == []
        assert await service.runs("hourly") == []


async def test_a_clock_that_jumps_back_never_fires_a_slot_twice(
    services, scripted_model: ScriptedModel
):
    scripted_model.reply("once")
    clock = Clock(T10 - timedelta(seconds=30))
    async with services(clock) as service:
        clock.now = T10 + timedelta(seconds=2)
        await ended(service, await service.tick())
        clock.now = T10 - timedelta(seconds=20)  # NTP steps the clock back
        assert await service.tick() == []
        clock.now = T10 + timedelta(seconds=3)
        assert await service.tick() == []
    async with services(clock) as fresh:  # a process that never saw the slot itself
        assert await fresh.tick() == []
        assert [r.slot for r in await fresh.runs("hourly")] == [T10]


async def test_overlap_skip_records_a_slot_while_the_last_run_still_goes(
    services, scripted_model: ScriptedModel
):
    scripted_model.enqueue(hang(30))
    clock = Clock(T10 - timedelta(seconds=30))
    async with services(clock, timeoutSeconds=7200) as service:
        clock.now = T10 + timedelta(seconds=1)
        (first,) = await service.tick()
        clock.now = T10 + timedelta(hours=1, seconds=1)
        (second,) = await service.tick()
        assert (second.status, second.error) == ("skipped", "the previous run was still going")
        assert (await service.get_run(first.id)).status == "running"
        with anyio.fail_after(10):  # the hanging model call has begun: its step is used
            while not scripted_model.requests:  # noqa: ASYNC110 (a server thread counts)
                await anyio.sleep(0.02)


async def test_overlap_queue_runs_the_slot_after_the_last_run_ends(
    services, scripted_model: ScriptedModel
):
    scripted_model.enqueue(hang(1.5, then=None)).reply("second")
    clock = Clock(T10 - timedelta(seconds=30))
    async with services(clock, overlap="queue", timeoutSeconds=7200) as service:
        clock.now = T10 + timedelta(seconds=1)
        (first,) = await service.tick()
        clock.now = T10 + timedelta(hours=1, seconds=1)
        (second,) = await service.tick()
        assert second.status == "queued"
        done = await ended(service, [first, second])
        assert [r.status for r in done] == ["ok", "ok"]
        assert done[1].reply == "second"


async def test_a_paused_automation_skips_its_slots_until_resumed(
    services, scripted_model: ScriptedModel
):
    scripted_model.reply("back")
    clock = Clock(T10 - timedelta(seconds=30))
    async with services(clock) as service:
        await service.pause("hourly")
        clock.now = T10 + timedelta(seconds=1)
        (skipped,) = await service.tick()
        assert (skipped.status, skipped.error) == ("skipped", "paused")
        await service.resume("hourly")
        clock.now = T10 + timedelta(hours=1, seconds=1)
        (run,) = await service.tick()
        assert (await ended(service, [run]))[0].status == "ok"


async def test_an_automation_a_reload_adds_fires_no_slot_from_before_it_existed(
    services, scripted_model: ScriptedModel
):
    scripted_model.reply("first real slot")
    clock = Clock(T10 - timedelta(minutes=30))
    async with services(clock) as service:
        assert await service.tick() == []  # hourly: nothing due before 10:00
        late = {"message": "Late.", "trigger": {"cron": "0 * * * *"}}
        root = service.runtime.bundle.root
        (root / "automations" / "late.json").write_text(json.dumps(late))
        assert await service.runtime.reload()
        clock.now = T10 + timedelta(minutes=30)  # hourly existed at 10:00, late did not
        claimed = {r.automation: r for r in await service.tick()}
        assert sorted(claimed) == ["hourly"] and claimed["hourly"].status == "running"
        await ended(service, [claimed["hourly"]])
        assert await service.runs("late") == []


async def test_a_six_field_schedule_fires_each_second_slot_once(
    services, scripted_model: ScriptedModel
):
    scripted_model.reply("one").reply("two")
    start = T10 + timedelta(seconds=1)
    clock = Clock(start)
    every = {"cron": "*/10 * * * * *"}
    async with services(clock, trigger=every) as one, services(clock, trigger=every) as two:
        assert await one.tick() == []  # the service started after the 10:00:00 slot
        clock.now = start + timedelta(seconds=9.5)  # 10:00:10.5
        first = await one.tick() + await two.tick()  # each slot once across both
        assert [r.slot for r in first] == [T10 + timedelta(seconds=10)]
        await ended(one, first)
        clock.now = start + timedelta(seconds=19.2)  # 10:00:20.2
        second = await two.tick() + await one.tick()
        assert [r.slot for r in second] == [T10 + timedelta(seconds=20)]
        runs = await ended(one, second)
    assert [r.status for r in runs] == ["ok"]
    assert [r.last_user for r in scripted_model.requests] == [
        f"Hourly at {(T10 + timedelta(seconds=s)).isoformat()}." for s in (10, 20)
    ]
