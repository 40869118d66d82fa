"""What only the PostgreSQL backend promises: URLs, clear connection errors, its migrations."""

from __future__ import annotations

import sys

import anyio
import psycopg
import pytest

from runtime.storage import (
    StorageError,
    UnsupportedDatabaseError,
    open_storage,
    postgresql_url,
)
from runtime.storage.migrations import POSTGRES_MIGRATIONS, Migration
from runtime.storage.postgres import PostgresStorage, describe
from tests._postgres import Schema

from ._helpers import session_record

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def applied(url: str) -> list[str]:
    with psycopg.connect(url) as connection:
        return [
            str(row[0])
            for row in connection.execute("SELECT name FROM migrations ORDER BY applied_at, name")
        ]


@pytest.mark.parametrize(
    ("url", "plain"),
    [
        ("postgresql://u:pw@h:5433/db", "postgresql://u:pw@h:5433/db"),
        ("postgres://u@h/db", "postgresql://u@h/db"),
        ("postgresql+psycopg://h/db?sslmode=require", "postgresql://h/db?sslmode=require"),
        ("/srv/amodal.db", None),
        ("sqlite:///x.db", None),
    ],
)
def test_postgresql_urls_are_recognised_in_every_spelling(url, plain):
    assert postgresql_url(url) == plain


def test_a_database_is_described_without_its_password():
    assert describe("postgresql://amodal:s3cret@db.example:6543/prod") == (
        "amodal@db.example:6543/prod"
    )


async def test_an_unreachable_database_fails_at_once_naming_it_but_never_its_password():
    with pytest.raises(StorageError, match=r"127\.0\.0\.1:1/amodal") as raised:
        await open_storage("postgresql://amodal:s3cret@127.0.0.1:1/amodal")

    assert "s3cret" not in str(raised.value)
    assert "cannot connect" in str(raised.value)


async def test_without_the_postgres_extra_a_postgresql_url_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "runtime.storage.postgres", None)  # import fails

    with pytest.raises(UnsupportedDatabaseError, match="postgres` extra") as raised:
        await open_storage("postgresql://amodal:s3cret@db.example/amodal")

    assert "s3cret" not in str(raised.value)


async def test_the_sqlalchemy_spelling_opens_the_same_database(postgres_schema: Schema):
    url = postgres_schema.url.replace("postgresql://", "postgresql+psycopg://", 1)
    storage = await open_storage(url)
    try:
        assert isinstance(storage, PostgresStorage)
        await storage.create_session(session_record())
    finally:
        await storage.close()
    assert applied(postgres_schema.url) == [m.name for m in POSTGRES_MIGRATIONS]


async def test_servers_starting_together_apply_each_migration_once(postgres_schema: Schema):
    opened: list[PostgresStorage] = []

    async def start() -> None:
        opened.append(await PostgresStorage.open(postgres_schema.url))

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(start)
    for storage in opened:
        await storage.close()

    assert sorted(applied(postgres_schema.url)) == sorted(m.name for m in POSTGRES_MIGRATIONS)


async def test_a_migration_appended_later_is_applied_alone_and_recorded(postgres_schema: Schema):
    first = await PostgresStorage.open(postgres_schema.url)
    await first.close()
    extra = Migration("m999_notes", "CREATE TABLE notes (id TEXT PRIMARY KEY);")

    later = await PostgresStorage.open(
        postgres_schema.url, migrations=(*POSTGRES_MIGRATIONS, extra)
    )
    try:
        assert await later.migrate() == []
    finally:
        await later.close()

    assert applied(postgres_schema.url)[-1] == "m999_notes"


async def test_a_failing_migration_applies_nothing(postgres_schema: Schema):
    broken = Migration("m999_broken", "CREATE TABLE sessions (id TEXT);")

    with pytest.raises(StorageError, match="sessions"):
        await PostgresStorage.open(postgres_schema.url, migrations=(*POSTGRES_MIGRATIONS, broken))

    with psycopg.connect(postgres_schema.url) as connection:
        tables = connection.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
            (postgres_schema.name,),
        ).fetchone()
    assert tables is not None
    assert tables[0] == 0  # not even the migrations table: the one transaction rolled back
