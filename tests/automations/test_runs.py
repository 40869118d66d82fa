"""An automation's run (SPEC 23): a turn in a session of its own, as the operator or as an
end user, read-only unless `writeEnabled`, never running a `confirm` tool unattended."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import Runtime
from runtime.automations import Automations
from runtime.testing import ScriptedModel
from tests.automations._repo import FILES

pytestmark = pytest.mark.anyio


def automation(**fields: Any) -> dict[str, Any]:
    return {"message": "Do the job.", "trigger": {"manual": True}, **fields}


@pytest.fixture
def repo(make_repo: Callable[..., Path]) -> Callable[..., Path]:
    def make(**automations: dict[str, Any]) -> Path:
        files = {f"automations/{name}.json": spec for name, spec in automations.items()}
        return make_repo({**FILES, **files})

    return make


async def finished(service: Automations, run_id: str) -> Any:
    with anyio.fail_after(20):
        return await service.wait(run_id)


async def test_an_operator_run_is_unscoped_chat_in_a_new_automation_session(
    repo, scripted_model: ScriptedModel, tmp_path: Path
):
    scripted_model.reply("All quiet today.")
    async with (
        Runtime.open(repo(), database=tmp_path / "db.sqlite", background=1) as rt,
        Automations.open(rt) as service,
    ):
        started = await service.run_now("digest")
        ended = await finished(service, started.id)
        assert (ended.status, ended.reply, ended.done_reason) == (
            "ok",
            "All quiet today.",
            "model_stop",
        )
        session = await rt.session(ended.session_id, operator=True)
        assert session.session.root_agent == "main"  # the operator's autonomous run
        assert session.session.metadata["kind"] == "automation"
        assert scripted_model.requests[0].last_user == "Write the digest."
        runs = await service.runs("digest")
        assert [r.id for r in runs] == [started.id]


async def test_an_operator_run_roots_at_the_named_agent(
    repo, scripted_model: ScriptedModel, tmp_path: Path
):
    scripted_model.reply("report")
    async with (
        Runtime.open(
            repo(digest=automation(agent="reporter")), database=tmp_path / "d", background=1
        ) as rt,
        Automations.open(rt) as service,
    ):
        ended = await finished(service, (await service.run_now("digest")).id)
        session = await rt.session(ended.session_id, operator=True)
        assert session.session.root_agent == "reporter"


async def test_an_end_user_run_without_agent_uses_default_and_belongs_to_that_user(
    repo, scripted_model: ScriptedModel, tmp_path: Path
):
    scripted_model.reply("hello bot")
    spec = automation(**{"as": {"claims": {"sub": "bot-1", "scope": "team-a"}}})
    async with (
        Runtime.open(repo(digest=spec), database=tmp_path / "d", background=1) as rt,
        Automations.open(rt) as service,
    ):
        ended = await finished(service, (await service.run_now("digest")).id)
        record = (await rt.session(ended.session_id, operator=True)).session
        assert (record.root_agent, record.owner, record.scope_id) == ("default", "bot-1", "team-a")
        mine = await rt.sessions(claims={"sub": "bot-1", "scope": "team-a"})
        assert [s.id for s in mine] == [ended.session_id]


async def test_a_run_is_read_only_unless_write_enabled(
    repo, scripted_model: ScriptedModel, tmp_path: Path
):
    note = {"id": "n1", "text": "from the run"}
    scripted_model.tool_call("store__notes__put", note).reply("tried")
    scripted_model.tool_call("store__notes__put", note).reply("wrote")
    files = repo(
        digest=automation(agent="reporter"),
        writer=automation(agent="reporter", writeEnabled=True),
    )
    async with (
        Runtime.open(files, database=tmp_path / "d", background=1) as rt,
        Automations.open(rt) as service,
    ):
        await finished(service, (await service.run_now("digest")).id)
        first = scripted_model.requests[0]
        assert "store__notes__query" in first.tools and "store__notes__put" not in first.tools
        assert await rt.storage.get_document("default", "notes", "n1") is None
        await finished(service, (await service.run_now("writer")).id)
        assert "store__notes__put" in scripted_model.requests[2].tools
        written = await rt.storage.get_document("default", "notes", "n1")
        assert written is not None and written.data["text"] == "from the run"


async def test_a_confirm_tool_becomes_a_pending_confirmation_for_the_operator(
    repo, scripted_model: ScriptedModel, tmp_path: Path
):
    scripted_model.tool_call("charge", {}, id="call_charge")
    spec = automation(**{"as": {"claims": {"sub": "bot"}}})
    async with (
        Runtime.open(repo(digest=spec), database=tmp_path / "d", background=1) as rt,
        Automations.open(rt) as service,
    ):
        ended = await finished(service, (await service.run_now("digest")).id)
        assert (ended.status, ended.done_reason) == (
            "awaiting_confirmation",
            "awaiting_confirmation",
        )
        pending = await rt.storage.list_all_pending()
        assert [(p.session_id, p.tool) for p in pending] == [(ended.session_id, "charge")]
        scripted_model.reply("charged")
        result = await rt.confirm(ended.session_id, "call_charge", approve=True, operator=True)
        assert result.text == "charged"
        assert not await rt.storage.list_all_pending()


async def test_pause_and_resume_are_kept_in_the_database(
    repo, scripted_model: ScriptedModel, tmp_path: Path
):
    database = tmp_path / "d"
    async with (
        Runtime.open(repo(), database=database, background=1) as rt,
        Automations.open(rt) as service,
    ):
        await service.pause("digest")
        assert (await service.listing())[0].paused
    async with (
        Runtime.open(repo(), database=database, background=1) as rt,
        Automations.open(rt) as service,
    ):
        assert (await service.listing())[0].paused
        await service.resume("digest")
        assert not (await service.listing())[0].paused


async def test_the_outcome_is_delivered_to_a_store_and_a_signed_webhook(
    repo, scripted_model: ScriptedModel, tmp_path: Path, receiver, monkeypatch
):
    monkeypatch.setenv("OUT_SECRET", "out-secret")
    scripted_model.reply("the digest")
    spec = automation(
        deliver=[
            {"store": "digests"},
            {"webhook": receiver.url + "/in", "secret": "env:OUT_SECRET"},
        ]
    )
    async with (
        Runtime.open(repo(digest=spec), database=tmp_path / "d", background=1) as rt,
        Automations.open(rt, backoff=(0.01,)) as service,
    ):
        run = (await service.run_now("digest")).id
        ended = await finished(service, run)
        assert [d["status"] for d in ended.deliveries] == ["delivered", "delivered"]
        stored = await rt.storage.get_document("default", "digests", run)
        assert stored is not None and stored.data["reply"] == "the digest"
    (post,) = receiver.received
    body = post.json()
    assert (body["automation"], body["run_id"], body["reply"]) == ("digest", run, "the digest")
    assert body["session_id"] == ended.session_id and body["status"] == "ok"
    from runtime.automations import signature

    expected = signature("out-secret", post.headers["X-Amodal-Timestamp"], post.body)
    assert post.headers["X-Amodal-Signature"] == expected
    assert post.headers["X-Amodal-Delivery"] == f"{run}-1"
    assert json.loads(post.body)["done_reason"] == "model_stop"


async def test_a_specialist_of_a_read_only_run_is_read_only_too(
    repo, make_repo, scripted_model: ScriptedModel, tmp_path: Path
):
    calls = {"calls": [{"subagent": "reporter", "task": "note it"}]}
    scripted_model.tool_call("call_subagent", calls).reply("noted").reply("done")
    files = repo(digest=automation(agent="default"))
    make_repo({"agents/default/agent.json": {"stores": {"notes": "rw"}, "subagents": ["reporter"]}})
    async with (
        Runtime.open(files, database=tmp_path / "d", background=1) as rt,
        Automations.open(rt) as service,
    ):
        ended = await finished(service, (await service.run_now("digest")).id)
    assert ended.status == "ok"
    root = scripted_model.requests[0]
    (specialist,) = [r for r in scripted_model.requests if "You write reports." in (r.system or "")]
    assert "store__notes__put" not in root.tools and "store__notes__put" not in specialist.tools
    assert "store__notes__get" in specialist.tools
