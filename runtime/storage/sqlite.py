"""The embedded backend: one SQLite file, through the stdlib `sqlite3` module.

The SQL is `_sql.py`'s; this module is SQLite's dialect of it and the driver.

One connection per storage, used on the event loop's thread one operation at a
time: a statement takes tens of microseconds, a hop to a worker thread about as
long again, and a turn makes twenty of them. The database runs in WAL mode with
synchronous=NORMAL: a commit is a write to the WAL without an fsync (an append
transaction takes ~60 µs), and a crash of the process loses nothing committed (a
power cut may lose the last commits, never corrupt the file).

Several storages, in one process or several, may share a file: every write is
a `BEGIN IMMEDIATE` transaction, which takes SQLite's write lock up front, so
read-then-write sequences are atomic across processes (and need no row locks).
An operation that finds the lock taken is tried again a moment later (up to the
busy timeout) without blocking the loop: the holder keeps it for one short
transaction. SQLite's own busy handler would sleep on the loop's thread, and a
worker thread to sleep in costs more than the wait.

The clock is two functions registered on the connection, so that shared SQL can
read it as PostgreSQL reads `clock_timestamp()`: `amodal_now()` (ISO 8601 text in
UTC, as the time columns hold it) and `amodal_clock()` (seconds since the epoch,
as lease expiries are held).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread

from runtime._logs import logger
from runtime.exceptions import StorageClosedError, StorageError
from runtime.storage._rows import Decoders
from runtime.storage._sql import Dialect, Filters, Operation, Plan, Result, SqlStorage, Statement
from runtime.storage._values import iso, load
from runtime.storage.migrations import SQLITE_MIGRATIONS, Migration
from runtime.storage.records import FilterValue, utc_now

T = TypeVar("T")

BUSY_TIMEOUT_SECONDS = 10.0
"""How long an operation waits for another process's write lock before failing."""
_FIRST_PAUSE, _LONGEST_PAUSE = 0.0005, 0.01  # between tries on a locked database, seconds

Connection = sqlite3.Connection


class SqliteStorage(SqlStorage):
    """`Storage` on a SQLite file. Open it with `await SqliteStorage.open(path)`.

    A storage belongs to the event loop that opened it (like any async database
    pool); other processes and other storages on the same file are fine.
    """

    def __init__(self, path: Path, connection: Connection, migrations: Sequence[Migration]) -> None:
        super().__init__(str(path), migrations)
        self.path = path
        self._connection: Connection | None = connection
        self._lock = threading.Lock()  # held by an operation, or by close on its thread

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        migrations: Sequence[Migration] = SQLITE_MIGRATIONS,
    ) -> SqliteStorage:
        """Open the file (creating it and its directory), set it up and migrate it."""
        target = Path(path)
        connection = await anyio.to_thread.run_sync(_connect, target)
        storage = cls(target, connection, migrations)
        await storage._migrated()
        return storage

    def __repr__(self) -> str:
        return f"SqliteStorage({str(self.path)!r})"

    async def _execute(self, plan: Plan[T], *, write: bool) -> T:
        """Run the operation on the loop's thread; when another process holds the
        database lock, try it afresh after a pause (doubling, up to the busy timeout)."""
        pause, deadline = _FIRST_PAUSE, time.monotonic() + BUSY_TIMEOUT_SECONDS
        while True:
            done, result = self._try(plan, write)
            if done:
                return result
            if time.monotonic() > deadline:
                raise StorageError(
                    f"database {self.path}: still locked by another process after "
                    f"{BUSY_TIMEOUT_SECONDS:g} s"
                )
            await anyio.sleep(pause)
            pause = min(pause * 2, _LONGEST_PAUSE)

    def _try(self, plan: Plan[T], write: bool) -> tuple[bool, T]:
        """(True, result), or (False, _) when the database or this connection is busy.
        Synchronous, so it cannot be cancelled half-way; a busy database rolled the
        operation's transaction back (writes take the lock first, with BEGIN IMMEDIATE)."""
        if not self._lock.acquire(blocking=False):  # closing, on a worker thread
            return False, cast(T, None)
        try:
            connection = self._connection
            if connection is None:
                raise StorageClosedError(f"the storage on {self.path} is closed")
            try:
                return True, _transact(connection, plan) if write else _drive(connection, plan())
            except sqlite3.OperationalError as e:
                if "locked" in str(e) or "busy" in str(e):
                    return False, cast(T, None)
                raise StorageError(f"database {self.path}: {e}") from e
            except sqlite3.Error as e:
                raise StorageError(f"database {self.path}: {e}") from e
        finally:
            self._lock.release()

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            # On a worker thread: the last connection to close checkpoints the WAL.
            await anyio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


# --- the driver ----------------------------------------------------------------


def _transact(connection: Connection, plan: Plan[T]) -> T:
    connection.execute("BEGIN IMMEDIATE")
    try:
        result = _drive(connection, plan())
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    return result


def _drive(connection: Connection, operation: Operation[T]) -> T:
    """Run every statement the operation yields, sending each one's result back."""
    try:
        statement = next(operation)
        while True:
            try:
                if statement.many:
                    cursor = connection.executemany(statement.sql, statement.params)
                else:
                    cursor = connection.execute(statement.sql, statement.params)
            except sqlite3.IntegrityError as e:
                meant = _constraint(statement, e)
                if meant is None:
                    raise
                raise meant from e
            statement = operation.send(Result(cursor.fetchall(), cursor.rowcount))
    except StopIteration as stop:
        return cast(T, stop.value)


def _constraint(statement: Statement, error: sqlite3.IntegrityError) -> StorageError | None:
    """What a constraint failure means to the caller (`Statement.exists`/`missing`), if said."""
    name = getattr(error, "sqlite_errorname", "")
    if name in {"SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE"}:
        return statement.exists
    if name == "SQLITE_CONSTRAINT_FOREIGNKEY":
        return statement.missing
    return None


# --- connection and migrations ---------------------------------------------


def _connect(path: Path) -> Connection:
    if str(path) != ":memory:":
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # isolation_level=None: no implicit transactions; every write says BEGIN IMMEDIATE.
        connection = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as e:
        raise StorageError(f"cannot open the database {path}: {e}") from e
    try:
        mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.execute("PRAGMA foreign_keys = ON")
        # Set up on a worker thread, where SQLite's busy handler may sleep (the connect
        # timeout); from now on a locked database is reported at once and `_execute` waits.
        connection.execute("PRAGMA busy_timeout = 0")
        connection.create_function("amodal_now", 0, _now_text)
        connection.create_function("amodal_clock", 0, time.time)
    except sqlite3.Error as e:
        connection.close()
        raise StorageError(f"cannot set up the database {path}: {e}") from e
    # An in-memory database has no journal file to share ("memory" is its mode, and only
    # this connection sees it): WAL would not apply, so it is nothing to warn about.
    if mode != "wal" and str(path) != ":memory:":
        logger.warning(
            "storage_not_wal",
            extra={"event": "storage_not_wal", "database": str(path), "journal_mode": mode},
        )
    return connection


def _now_text() -> str:
    return iso(utc_now(), "now")


def _statements(script: str) -> list[str]:
    """Split a migration into statements (`executescript` would commit our transaction)."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        raise ValueError(f"migration has an unterminated statement: {buffer.strip()[:80]!r}")
    return statements


# --- documents: JSON text read through json_each ------------------------------

_FIELD = "SELECT j.value FROM json_each(store_documents.body) AS j WHERE j.key = ?"
_ELEMENT = "SELECT 1 FROM json_each(store_documents.body) AS j WHERE j.key = ?"


def _filters(filters: Filters) -> tuple[list[str], list[Any]]:
    conditions: list[str] = []
    values: list[Any] = []
    for name, value in filters:
        condition, more = _filter(name, value)
        conditions.append(condition)
        values.extend(more)
    return conditions, values


def _filter(name: str, value: FilterValue) -> tuple[str, list[Any]]:
    """One equality filter on a top-level field, with JSON types kept apart (1 is not true)."""
    if value is None:
        return f"NOT EXISTS ({_ELEMENT} AND j.type <> 'null')", [name]
    if isinstance(value, bool):
        return f"EXISTS ({_ELEMENT} AND j.type = ?)", [name, "true" if value else "false"]
    if isinstance(value, int | float):
        return f"EXISTS ({_ELEMENT} AND j.type IN ('integer', 'real') AND j.value = ?)", [
            name,
            value,
        ]
    return f"EXISTS ({_ELEMENT} AND j.type = 'text' AND j.value = ?)", [name, value]


def _order(field: str | None, descending: bool) -> tuple[str, list[Any]]:
    if field is None:
        return "key", []
    # A field's value as SQL: NULL when absent or null, 0/1 for booleans, numbers
    # as numbers, text compared bytewise (code point order).
    direction = "DESC" if descending else "ASC"
    return f"({_FIELD}) IS NULL, ({_FIELD}) {direction}, key", [field, field]


SQLITE = Dialect(
    rows=Decoders(time=datetime.fromisoformat, json=load, body=load),
    time=iso,
    time_type="TEXT",
    now="amodal_now()",
    lease_now="amodal_clock()",
    lease_expiry="amodal_clock() + ?",
    same="IS",  # IS NOT DISTINCT FROM needs SQLite 3.39
    insertion_order="rowid",
    lock_rows="",  # BEGIN IMMEDIATE holds the whole database
    document_body="?",
    migration_lock=None,  # BEGIN IMMEDIATE keeps two processes from migrating at once
    statements=_statements,
    document_filters=_filters,
    document_order=_order,
)
SqliteStorage.dialect = SQLITE

__all__ = ["BUSY_TIMEOUT_SECONDS", "SQLITE", "SqliteStorage"]
