"""The storage contract suite's fixtures: one `backend` per database kind.

Every test of `test_storage.py` runs once per entry of BACKENDS. A backend
gives a fresh, empty database per test and the few raw accesses the contract
tests need (reading the migrations table, holding the write lock from another
connection). To run the suite on PostgreSQL, add "postgres" to BACKENDS and a
`_postgres_backend` beside `_sqlite_backend`: a fresh database or schema per
test, `open` through `open_storage(url)`, the migrations table read with a plain
connection, and writes blocked with `LOCK TABLE events IN EXCLUSIVE MODE` held
in an open transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from runtime.storage import Storage, open_storage
from runtime.storage.migrations import SQLITE_MIGRATIONS

BACKENDS = ["sqlite"]


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


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return _sqlite_backend(tmp_path)
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
