"""Background turns through the Python front door (SPEC 23): `Runtime.enqueue`, a runtime
that runs them (`background=N`), and refusals that queue nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from runtime import Runtime, events
from runtime.exceptions import SessionNotFoundError, UnknownAgentError
from runtime.testing import ScriptedModel
from tests.automations._repo import FILES

pytestmark = pytest.mark.anyio


async def test_an_enqueued_turn_runs_once_on_a_runtime_that_takes_background_work(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    scripted_model.reply("Done in the background.")
    database = str(tmp_path / "queue.db")
    async with Runtime.open(make_repo(), database=database) as front:
        queued = await front.enqueue("summarise", operator=True)
        assert (await front.queued_turn(queued.turn_id)).state == "queued"  # type: ignore[union-attr]
        assert scripted_model.requests == []  # this runtime takes no background work
        async with Runtime.open(make_repo(), database=database, background=2) as worker:
            with anyio.fail_after(20):
                streamed = [e async for e in await front.follow(queued.session_id, operator=True)]
            assert worker is not None

        done = streamed[-1]
        assert isinstance(done, events.Done) and done.reason == "model_stop"
        assert streamed[0].run_id == queued.turn_id
        finished = await front.queued_turn(queued.turn_id)
        assert finished is not None and finished.state == "done"
        assert finished.started_at is not None and finished.attempts == 1
        assert await front.queue_counts() == {"done": 1}
        assert len(scripted_model.requests) == 1


async def test_a_refused_background_request_queues_nothing(
    make_repo: Callable[..., Path], tmp_path: Path
) -> None:
    async with Runtime.open(make_repo(), database=str(tmp_path / "q.db")) as rt:
        with pytest.raises(UnknownAgentError):
            await rt.enqueue("x", agent="nobody", operator=True)
        with pytest.raises(SessionNotFoundError):
            await rt.enqueue("x", session_id="missing", operator=True)
        assert await rt.queue_counts() == {}
        assert await rt.queued_turn("run_unknown") is None


async def test_a_queued_turn_keeps_its_metadata_and_a_read_only_session_stays_read_only(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    scripted_model.reply("looked").reply("could write")
    database = str(tmp_path / "meta.db")
    async with Runtime.open(make_repo(FILES), database=database, background=1) as rt:
        kept = {"kind": "automation", "automation": "digest", "read_only": True}
        locked = await rt.enqueue("look", agent="reporter", operator=True, metadata=kept)
        free = await rt.enqueue("write", agent="reporter", operator=True)
        with anyio.fail_after(20):
            for queued in (locked, free):
                streamed = [e async for e in await rt.follow(queued.session_id, operator=True)]
                assert isinstance(streamed[-1], events.Done)
        session = await rt.storage.get_session(locked.session_id)
        assert session is not None and kept.items() <= session.metadata.items()
        plain = await rt.storage.get_session(free.session_id)
        assert plain is not None and "read_only" not in plain.metadata
    by_message = {request.last_user: request.tools for request in scripted_model.requests}
    assert "store__notes__query" in by_message["look"]
    assert "store__notes__put" not in by_message["look"]  # read-only: no write tool at all
    assert "store__notes__put" in by_message["write"]
