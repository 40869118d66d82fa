"""Databases made by an earlier release keep their data through the later migrations."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.storage import AgentRunRecord, DocumentQuery, PendingConfirmation, Storage
from runtime.storage._sql import Operation, Result, SqlStorage, Statement
from runtime.storage.migrations import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS
from runtime.storage.postgres import PostgresStorage
from runtime.storage.sqlite import SqliteStorage
from tests._postgres import Schema

from ._helpers import T0, session_record

pytestmark = pytest.mark.anyio
BEFORE_WAVE_2 = 6  # m001..m006


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """`opener(count)`: a storage on one database with its first `count` migrations (None:
    all of them)."""
    if request.param == "sqlite":
        path = tmp_path / "old.db"

        def sqlite(count: int | None) -> Awaitable[Storage]:
            return SqliteStorage.open(path, migrations=SQLITE_MIGRATIONS[:count])

        yield sqlite
        return
    schema = Schema()

    def postgres(count: int | None) -> Awaitable[Storage]:
        return PostgresStorage.open(schema.url, migrations=POSTGRES_MIGRATIONS[:count])

    try:
        yield postgres
    finally:
        schema.drop()


async def test_runs_and_operator_sessions_survive_the_upgrade(
    opener: Callable[[int | None], Awaitable[Storage]],
) -> None:
    old = await opener(BEFORE_WAVE_2)
    await old.create_session(session_record("op", owner="@operator"))
    await old.create_session(session_record("user", owner="alice"))
    await old.start_run(AgentRunRecord("r1", "op", None, 0, "default", "hello", T0))
    await old.close()

    new = await opener(None)
    try:
        assert (await new.get_session("op")).owner == ""  # type: ignore[union-attr]
        assert (await new.get_session("user")).owner == "alice"  # type: ignore[union-attr]
        (kept,) = await new.list_runs("op")
        assert (kept.id, kept.status, kept.label) == ("r1", "running", "hello")
        await new.interrupt_runs("op", "interrupted")
        assert (await new.list_runs("op"))[0].status == "interrupted"
    finally:
        await new.close()


async def _old_lease(old: Storage, session_id: str, holder: str, seconds: float) -> None:
    """A lease as a release before m011 wrote it (today's `try_acquire_turn` writes the
    turn note, a column the old schema lacks)."""
    assert isinstance(old, SqlStorage)
    statement = Statement(
        "INSERT INTO turn_leases (session_id, holder, expires_at) "
        f"VALUES (?, ?, {old.dialect.lease_expiry})",
        (session_id, holder, seconds),
    )

    def insert() -> Operation[Result]:
        return (yield statement)

    await old._execute(insert, write=True)


async def test_every_concern_keeps_working_on_a_database_made_before_the_later_migrations(
    opener: Callable[[int | None], Awaitable[Storage]],
) -> None:
    old = await opener(BEFORE_WAVE_2)
    await old.create_session(session_record("s1"))
    await old.append_event(
        "s1", "user", {"text": "hi"}, run_id=None, agent=None, bundle_version=None
    )
    await old.save_pending(PendingConfirmation("s1", "c1", "r1", "default", "request", {}, {}, T0))
    await _old_lease(old, "s1", "server-a", 60)
    for version in (1, 2):
        await old.put_document("scope-a", "notes", "n1", {"v": version}, keep_versions=2)
    await old.close()

    new = await opener(None)
    try:
        assert [event.data for event in await new.list_events("s1")] == [{"text": "hi"}]
        assert [p.call_id for p in await new.list_pending("s1")] == ["c1"]
        assert await new.delete_pending("s1", "c1")
        assert not await new.try_acquire_turn("s1", "server-b", 60)  # the old lease holds
        assert await new.release_turn("s1", "server-a")
        assert await new.try_acquire_turn("s1", "server-b", 60)
        await new.put_document("scope-a", "notes", "n1", {"v": 3}, keep_versions=2)
        history = await new.document_history("scope-a", "notes", "n1")
        assert [(h.version, h.data) for h in history] == [(2, {"v": 2}), (1, {"v": 1})]
        page = await new.query_documents("scope-a", "notes", DocumentQuery({"v": 3}))
        assert [(d.key, d.version) for d in page.documents] == [("n1", 3)]
    finally:
        await new.close()
