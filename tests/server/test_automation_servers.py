"""A cron automation with two real `amodal serve` processes on one database, SQLite and
PostgreSQL (SPEC 23; docs/automations.md): both run the scheduler, the slot runs once, and
its digest lands in the store once."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from runtime.testing import ScriptedModel, reply
from tests.server.conftest import ServeProcess

DIGESTS = {
    "entity": {
        "name": "Digest",
        "key": "{run_id}",
        "schema": {"run_id": {"type": "string"}, "reply": {"type": "string", "nullable": True}},
    }
}
REPO = {
    "stores/digests.json": DIGESTS,
    "automations/daily.json": {
        "message": "Write the digest for {{ slot }}.",
        "trigger": {"cron": "*/5 * * * * *"},  # seconds first: a slot every five seconds
        "deliver": [{"store": "digests"}],
    },
}


def done(run: dict[str, Any]) -> bool:
    delivered = [d["status"] for d in run["deliveries"]] == ["delivered"]
    return run["status"] == "ok" and delivered


def test_two_servers_run_each_cron_slot_once_and_deliver_it_once(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    database_url: str | None,
    scripted_model: ScriptedModel,
) -> None:
    repo = make_repo(REPO)
    env = {"MODEL_MAIN": "scripted", **({"DATABASE_URL": database_url} if database_url else {})}
    # Set before either server starts: a slot may come while the second one still starts.
    scripted_model.respond(lambda request: reply("Today: all quiet."))  # any slot's run
    before = datetime.now(UTC)
    first, second = serve(repo, env, "--no-reload"), serve(repo, env, "--no-reload")
    first.wait_ready()
    second.wait_ready()
    # A slot that ran, and delivered.
    deadline = time.monotonic() + 30
    runs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        runs = httpx.get(f"{second.url}/automations/daily/runs", timeout=10).json()["runs"]
        if any(done(r) for r in runs):
            break
        time.sleep(0.5)
    ok = [r for r in runs if done(r)]
    assert ok, (runs, first.output, second.output)
    # A slot from before the servers loaded the automation never runs.
    assert datetime.fromisoformat(str(ok[-1]["slot"])) > before
    time.sleep(3)  # both schedulers have ticked several times since
    runs = httpx.get(f"{first.url}/automations/daily/runs?limit=100", timeout=10).json()["runs"]
    for_slot = [r for r in runs if r["slot"] == ok[-1]["slot"]]
    assert len(for_slot) == 1, runs
    # Every slot that ran, ran once: one model call each, whichever server claimed it (a
    # slot that came during the look may have asked the model before its record says ok).
    assert len({r["slot"] for r in runs}) == len(runs)
    asked = Counter(request.last_user for request in scripted_model.requests)
    assert set(asked.values()) == {1}, asked
    assert {f"Write the digest for {r['slot']}." for r in runs if r["status"] == "ok"} <= set(asked)
    (run,) = for_slot
    assert run["deliveries"][0]["status"] == "delivered"
    document = httpx.get(f"{first.url}/stores/digests/{run['run_id']}", timeout=10)
    assert document.status_code == 200, document.text
    assert document.json()["document"]["reply"] == "Today: all quiet."
