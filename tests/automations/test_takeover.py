"""A run whose follower is gone (SPEC 23): its turn is a background turn in the database, so
another runtime on the same database runs it, and the scheduler's sweep of whichever
process looks first records, delivers and counts it, exactly once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from runtime import Runtime
from runtime.automations import Automations
from runtime.testing import ScriptedModel, hang
from tests.automations._repo import FILES, Receiver

pytestmark = pytest.mark.anyio


async def test_a_run_whose_follower_died_is_finished_once_by_another_runtime(
    make_repo: Callable[..., Path],
    scripted_model: ScriptedModel,
    receiver: Receiver,
    database_url: str | None,
    tmp_path: Path,
) -> None:
    spec = {
        "message": "Report.",
        "trigger": {"manual": True},
        "deliver": [{"webhook": receiver.url}],
    }
    root = make_repo({**FILES, "automations/digest.json": spec})
    database = database_url or str(tmp_path / "shared.db")
    scripted_model.reply("The report.")
    # The first runtime takes no background work: its follower goes away (as when its
    # process dies) before the turn has even run.
    async with Runtime.open(root, database=database) as first:
        async with Automations.open(first) as gone:
            started = await gone.run_now("digest")
        assert started.session_id is not None
        left = await first.storage.get_automation_run(started.id)
        assert left is not None and left.status == "running"
    async with Runtime.open(root, database=database, background=1) as second:
        # Two services of the second runtime sweep at once, as two processes would.
        async with Automations.open(second) as one, Automations.open(second) as other:
            finished: list[str] = []

            async def sweep(service: Automations) -> None:
                finished.extend(await service.sweep())

            with anyio.fail_after(20):
                while not finished:
                    async with anyio.create_task_group() as group:
                        group.start_soon(sweep, one)
                        group.start_soon(sweep, other)
                    await anyio.sleep(0.1)
                ended = await one.wait(started.id)
            assert finished == [started.id]
            assert await one.sweep() == [] and await other.sweep() == []
        session = await second.session(started.session_id, operator=True)
        assert session.session.metadata["automation_run"] == started.id
        assert session.session.metadata["read_only"] is True
        states = await second.storage.automation_states()
    assert (ended.status, ended.reply, ended.done_reason) == ("ok", "The report.", "model_stop")
    assert ended.ended_at is not None and ended.deliveries[0]["status"] == "delivered"
    assert len(receiver.received) == 1
    assert receiver.received[0].json()["run_id"] == started.id
    assert states["digest"].failures == 0
    assert len(scripted_model.requests) == 1


async def test_a_run_confirmed_on_another_process_is_ended_by_the_sweep(
    make_repo: Callable[..., Path],
    scripted_model: ScriptedModel,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    spec = {
        "message": "Charge.",
        "trigger": {"manual": True},
        "as": {"claims": {"sub": "bot"}},
        "deliver": [{"webhook": receiver.url}],
    }
    root = make_repo({**FILES, "automations/digest.json": spec})
    database = tmp_path / "shared.db"
    scripted_model.tool_call("charge", {}, id="call_charge")
    async with (
        Runtime.open(root, database=database, background=1) as here,
        Automations.open(here) as service,
    ):
        with anyio.fail_after(20):
            waiting = await service.wait((await service.run_now("digest")).id)
        assert waiting.status == "awaiting_confirmation" and waiting.session_id is not None
        # The operator answers on another process: nothing here hears the turn end.
        scripted_model.reply("Charged.")
        async with Runtime.open(root, database=database) as there:
            answered = await there.confirm(
                waiting.session_id, "call_charge", approve=True, operator=True
            )
        assert answered.text == "Charged."
        assert await service.sweep() == [waiting.id]
        with anyio.fail_after(20):
            ended = await service.wait(waiting.id)
        assert await service.sweep() == []
        states = await here.storage.automation_states()
    assert (ended.status, ended.reply, ended.done_reason) == ("ok", "Charged.", "model_stop")
    assert [p.json()["status"] for p in receiver.received] == ["awaiting_confirmation", "ok"]
    assert [p.headers["X-Amodal-Delivery"] for p in receiver.received] == [
        f"{waiting.id}-0",
        f"{waiting.id}-0-2",
    ]
    assert states["digest"].failures == 0


async def test_a_run_whose_follower_died_still_times_out_where_its_turn_runs(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    spec = {"message": "Slow.", "trigger": {"manual": True}, "timeoutSeconds": 1}
    root = make_repo({**FILES, "automations/digest.json": spec})
    scripted_model.respond(lambda request: hang(30))  # the turn outlives its timeout
    async with Runtime.open(root, database=tmp_path / "d.db", background=1) as rt:
        async with Automations.open(rt) as gone:  # its follower goes away at once
            started = await gone.run_now("digest")
        async with Automations.open(rt) as service:
            with anyio.fail_after(20):
                while not scripted_model.requests:  # noqa: ASYNC110 (a server thread counts)
                    await anyio.sleep(0.05)
                assert await service.sweep() == []  # inside its timeout: it goes on
                await anyio.sleep(1.1)
                assert await service.sweep() == [started.id]
                ended = await service.wait(started.id)
        assert (ended.status, ended.done_reason) == ("error", "timeout")
        assert ended.error == "timed out after 1 s"
        turns = await rt.turns(started.session_id or "", operator=True)
        assert turns[0].done is not None and turns[0].done.reason == "cancelled"
