"""Delivery and failure alerts (SPEC 23): a webhook target is retried with backoff under one
delivery id, a target that is down is recorded failed and blocks no other run, and the alert
goes once per streak of failures (kept in the database) and cooldown."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import Runtime
from runtime.automations import Automations
from runtime.testing import ScriptedModel
from tests.automations._repo import FILES, Receiver

pytestmark = pytest.mark.anyio


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/down"  # nothing listens after


def repo(make_repo: Callable[..., Path], **automations: dict[str, Any]) -> Path:
    files = {f"automations/{name}.json": spec for name, spec in automations.items()}
    return make_repo({**FILES, **files})


async def run(service: Automations, name: str) -> Any:
    with anyio.fail_after(30):
        return await service.wait((await service.run_now(name)).id)


async def test_a_webhook_is_retried_under_one_delivery_id_until_taken(
    make_repo, scripted_model: ScriptedModel, receiver: Receiver, tmp_path: Path
):
    receiver.statuses = [503, 502]
    scripted_model.reply("report")
    spec = {"message": "go", "trigger": {"manual": True}, "deliver": [{"webhook": receiver.url}]}
    async with (
        Runtime.open(repo(make_repo, hook=spec), database=tmp_path / "d", background=1) as rt,
        Automations.open(rt, backoff=(0.01, 0.01, 0.01)) as service,
    ):
        ended = await run(service, "hook")
    assert ended.deliveries[0]["status"] == "delivered" and ended.deliveries[0]["attempts"] == 3
    ids = {post.headers["X-Amodal-Delivery"] for post in receiver.received}
    assert len(receiver.received) == 3 and ids == {f"{ended.id}-0"}


async def test_a_down_target_is_recorded_failed_and_blocks_no_other_run(
    make_repo, scripted_model: ScriptedModel, receiver: Receiver, tmp_path: Path
):
    scripted_model.reply("to nowhere").reply("to the receiver")
    down = {"message": "a", "trigger": {"manual": True}, "deliver": [{"webhook": closed_port()}]}
    up = {"message": "b", "trigger": {"manual": True}, "deliver": [{"webhook": receiver.url}]}
    async with (
        Runtime.open(
            repo(make_repo, down=down, up=up), database=tmp_path / "d", background=1
        ) as rt,
        Automations.open(rt, backoff=(0.5, 0.5, 0.5)) as service,
    ):
        stuck = await service.run_now("down")
        with anyio.fail_after(1.2):  # well before the down target's retries are over
            other = await run(service, "up")
        assert other.deliveries[0]["status"] == "delivered"
        with anyio.fail_after(30):
            failed = await service.wait(stuck.id)
    (delivery,) = failed.deliveries
    assert (delivery["status"], delivery["attempts"]) == ("failed", 4)
    assert "ConnectError" in delivery["error"]
    assert failed.status == "ok"  # the run itself succeeded; only its delivery failed


async def test_the_failure_alert_fires_at_the_count_then_waits_for_cooldown_or_success(
    make_repo, scripted_model: ScriptedModel, receiver: Receiver, tmp_path: Path
):
    spec = {
        "agent": "reporter",
        "message": "go",
        "trigger": {"manual": True},
        "failureAlert": {"after": 2, "webhook": receiver.url + "/alert", "cooldownMinutes": 60},
    }
    root = repo(make_repo, flaky=spec)
    database = tmp_path / "d"
    for step in ("error", "error", "error"):
        scripted_model.error(400, f"scripted {step}")
    async with (
        Runtime.open(root, database=database, background=1) as rt,
        Automations.open(rt) as service,
    ):
        first = await run(service, "flaky")
        assert first.status == "error"
        assert receiver.received == []  # one failure: under `after`
        await run(service, "flaky")
        assert [p.path for p in receiver.received] == ["/alert"]
        alert = receiver.received[0].json()
        assert alert["consecutive_failures"] == 2 and alert["automation"] == "flaky"
    # The count is in the database: a restarted server goes on from it, inside the cooldown.
    async with (
        Runtime.open(root, database=database, background=1) as rt,
        Automations.open(rt) as service,
    ):
        await run(service, "flaky")
        assert len(receiver.received) == 1
        assert (await rt.storage.automation_states())["flaky"].failures == 3
        scripted_model.reply("fine again")
        assert (await run(service, "flaky")).status == "ok"
        assert (await rt.storage.automation_states())["flaky"].failures == 0
