"""The storage contract suite's fixtures: one `backend` per database kind.

Every test that asks for `backend` (or `storage`) runs once per entry of
BACKENDS. A backend gives a fresh, empty database per test and the few raw
accesses the contract tests need (reading the migrations table, holding the
write lock from another connection). PostgreSQL gets a fresh schema per test
in the session's test database (tests/_postgres.py: AMODAL_TEST_DATABASE_URL, the
local server, or an embedded one); when it is unreachable its tests fail, they
never skip.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psycopg
import pytest

from runtime.storage import Storage, open_storage
from runtime.storage.migrations import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS
from tests._postgres import Schema

BACKENDS = ["sqlite", "postgres"]


class WriteBlock(Protocol):
    def release(self) -> None: ...


@dataclass
class Backend:
    name: str
    open: Callable[[], Awaitable[Storage]]
    """A new storage on this test's database: call again to restart, or to be another process."""
    migration_names: list[str]
    applied_migrations: Callable[[], list[tuple[str, str]]]
    """(name, applied_at) rows of the migrations table, read without the storage."""
    block_writes: Callable[[], WriteBlock]
    """Hold the database's write lock from another connection until `release()` (idempotent)."""


class _SqliteWriteBlock:
    def __init__(self, path: Path) -> None:
        self._connection: sqlite3.Connection | None = sqlite3.connect(path, isolation_level=None)
        self._connection.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self._connection is not None:
            self._connection.execute("ROLLBACK")
            self._connection.close()
            self._connection = None


def _sqlite_backend(tmp_path: Path) -> Backend:
    path = tmp_path / "data" / "amodal.db"

    def applied() -> list[tuple[str, str]]:
        with sqlite3.connect(path) as connection:
            rows = connection.execute("SELECT name, applied_at FROM migrations ORDER BY rowid")
            result = [(str(name), str(at)) for name, at in rows]
        connection.close()
        return result

    return Backend(
        name="sqlite",
        open=lambda: open_storage(path),
        migration_names=[migration.name for migration in SQLITE_MIGRATIONS],
        applied_migrations=applied,
        block_writes=lambda: _SqliteWriteBlock(path),
    )


class _PostgresWriteBlock:
    def __init__(self, url: str) -> None:
        self._connection: psycopg.Connection[tuple[object, ...]] | None = psycopg.connect(url)
        self._connection.execute("LOCK TABLE events IN EXCLUSIVE MODE")  # held to the rollback

    def release(self) -> None:
        if self._connection is not None:
            self._connection.rollback()
            self._connection.close()
            self._connection = None


def _postgres_backend(schema: Schema) -> Backend:
    def applied() -> list[tuple[str, str]]:
        with psycopg.connect(schema.url) as connection:
            rows = connection.execute(
                "SELECT name, applied_at FROM migrations ORDER BY applied_at, name"
            ).fetchall()
        order = [migration.name for migration in POSTGRES_MIGRATIONS]
        # One transaction applies them all at one instant: list them in migration order.
        rows.sort(key=lambda row: order.index(row[0]) if row[0] in order else len(order))
        return [(str(name), at.isoformat()) for name, at in rows]

    return Backend(
        name="postgres",
        open=lambda: open_storage(schema.url),
        migration_names=[migration.name for migration in POSTGRES_MIGRATIONS],
        applied_migrations=applied,
        block_writes=lambda: _PostgresWriteBlock(schema.url),
    )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield _sqlite_backend(tmp_path)
    elif request.param == "postgres":
        schema = Schema()
        try:
            yield _postgres_backend(schema)
        finally:
            schema.drop()
    else:
        raise AssertionError(f"no harness for backend {request.param!r}")


@pytest.fixture
async def storage(backend: Backend, anyio_backend: str) -> AsyncIterator[Storage]:
    opened = await backend.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def second_storage(backend: Backend, anyio_backend: str) -> AsyncIterator[Storage]:
    """Another storage on the same database, as a second process or server would have."""
    opened = await backend.open()
    try:
        yield opened
    finally:
        await opened.close()
