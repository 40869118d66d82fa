"""The embedded backend: one SQLite file, through the stdlib `sqlite3` module.

One connection per storage, used on the event loop's thread one operation at a
time: a statement takes tens of microseconds, a hop to a worker thread about as
long again, and a turn makes twenty of them. The database runs in WAL mode with
synchronous=NORMAL: a commit is a write to the WAL without an fsync (an append
transaction takes ~60 µs), and a crash of the process loses nothing committed (a
power cut may lose the last commits, never corrupt the file).

Several storages, in one process or several, may share a file: every write is
a `BEGIN IMMEDIATE` transaction, which takes SQLite's write lock up front, so
read-then-write sequences are atomic across processes. An operation that finds
the lock taken is tried again a moment later (up to the busy timeout) without
blocking the loop: the holder keeps it for one short transaction. SQLite's own
busy handler would sleep on the loop's thread, and a worker thread to sleep in
costs more than the wait.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import anyio.lowlevel
import anyio.to_thread

from runtime._logs import logger
from runtime.storage import (
    RUN_STATUSES,
    DocumentPage,
    DocumentQuery,
    FilterValue,
    JSONObject,
    NewEvent,
    PendingConfirmation,
    RecordExistsError,
    RecordNotFoundError,
    RunRecord,
    RunStatus,
    SessionRecord,
    StorageClosedError,
    StorageError,
    StoredEvent,
    StoreDocument,
    utc_now,
)
from runtime.storage._rows import (
    DOCUMENT_COLUMNS,
    EVENT_COLUMNS,
    PENDING_COLUMNS,
    RUN_COLUMNS,
    SESSION_COLUMNS,
    Decoders,
)
from runtime.storage._values import (
    check_document,
    check_page,
    check_query,
    check_status,
    check_ttl,
    dump,
    iso,
    load,
)
from runtime.storage.migrations import SQLITE_MIGRATIONS, Migration

T = TypeVar("T")

BUSY_TIMEOUT_SECONDS = 10.0
"""How long an operation waits for another process's write lock before failing."""
_FIRST_PAUSE, _LONGEST_PAUSE = 0.0005, 0.01  # between tries on a locked database, seconds

_DOCUMENT_KEY = "scope_id = ? AND store = ? AND key = ?"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"
_JSON_NUMBER = "('integer', 'real')"

Connection = sqlite3.Connection


class SqliteStorage:
    """`Storage` on a SQLite file. Open it with `await SqliteStorage.open(path)`.

    A storage belongs to the event loop that opened it (like any async database
    pool); other processes and other storages on the same file are fine.
    """

    def __init__(self, path: Path, connection: Connection, migrations: Sequence[Migration]) -> None:
        self.path = path
        self._connection: Connection | None = connection
        self._migrations = tuple(migrations)
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
        try:
            await storage.migrate()
        except BaseException:
            await storage.close()
            raise
        return storage

    def __repr__(self) -> str:
        return f"SqliteStorage({str(self.path)!r})"

    # --- plumbing ---------------------------------------------------------

    async def _read(self, operation: Callable[[Connection], T]) -> T:
        return await self._run(operation)

    async def _write(self, operation: Callable[[Connection], T]) -> T:
        # Shielded, so a write that was asked for commits or rolls back on its own terms
        # even while it waits for the lock: a cancelled turn never loses an approval.
        with anyio.CancelScope(shield=True):
            result = await self._run(operation)
        # The caller was perhaps cancelled meanwhile: it gets that, not the result.
        await anyio.lowlevel.checkpoint_if_cancelled()
        return result

    async def _run(self, operation: Callable[[Connection], T]) -> T:
        """Run `operation` on the loop's thread; when another process holds the database
        lock, try again after a pause (doubling, up to the busy timeout)."""
        pause, deadline = _FIRST_PAUSE, time.monotonic() + BUSY_TIMEOUT_SECONDS
        while True:
            done, result = self._try(operation)
            if done:
                return result
            if time.monotonic() > deadline:
                raise StorageError(
                    f"database {self.path}: still locked by another process after "
                    f"{BUSY_TIMEOUT_SECONDS:g} s"
                )
            await anyio.sleep(pause)
            pause = min(pause * 2, _LONGEST_PAUSE)

    def _try(self, operation: Callable[[Connection], T]) -> tuple[bool, T]:
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
                return True, operation(connection)
            except sqlite3.OperationalError as e:
                if "locked" in str(e) or "busy" in str(e):
                    return False, cast(T, None)
                raise StorageError(f"database {self.path}: {e}") from e
            except sqlite3.Error as e:
                raise StorageError(f"database {self.path}: {e}") from e
        finally:
            self._lock.release()

    # --- lifecycle --------------------------------------------------------

    async def migrate(self) -> list[str]:
        migrations = self._migrations
        return await self._write(lambda connection: _migrate(connection, migrations, self.path))

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            # On a worker thread: the last connection to close checkpoints the WAL.
            await anyio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    # --- sessions ---------------------------------------------------------

    async def create_session(self, record: SessionRecord) -> None:
        row = (
            record.id,
            record.scope_id,
            record.owner,
            record.root_agent,
            iso(record.created_at, "created_at"),
            iso(record.updated_at, "updated_at"),
            dump(record.metadata, "metadata"),
        )

        def create(connection: Connection) -> None:
            with _transaction(connection), _mapping_conflicts("session", record.id):
                connection.execute(
                    f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", row
                )

        await self._write(create)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        def get(connection: Connection) -> SessionRecord | None:
            row = connection.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            return None if row is None else ROWS.session(row)

        return await self._read(get)

    async def list_sessions(
        self,
        scope_id: str | None = None,
        owner: str | None = None,
        *,
        limit: int = 20,
        offset: int = 0,
    ) -> list[SessionRecord]:
        check_page(limit, offset)
        where = ""  # every session
        values: tuple[str | None, ...] = ()
        if scope_id is not None:
            where, values = "WHERE scope_id = ? AND owner IS ?", (scope_id, owner)

        def list_(connection: Connection) -> list[SessionRecord]:
            rows = connection.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions {where} "
                "ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?",
                (*values, limit, offset),
            ).fetchall()
            return [ROWS.session(row) for row in rows]

        return await self._read(list_)

    async def set_root(self, session_id: str, agent: str) -> None:
        await self._update_session(
            session_id, "root_agent = ?, updated_at = ?", (agent, iso(utc_now(), "now"))
        )

    async def touch_session(self, session_id: str) -> None:
        await self._update_session(session_id, "updated_at = ?", (iso(utc_now(), "now"),))

    async def _update_session(
        self, session_id: str, assignments: str, values: tuple[str, ...]
    ) -> None:
        def update(connection: Connection) -> None:
            with _transaction(connection):
                cursor = connection.execute(
                    f"UPDATE sessions SET {assignments} WHERE id = ?", (*values, session_id)
                )
            if cursor.rowcount == 0:
                raise RecordNotFoundError("session", session_id)

        await self._write(update)

    async def delete_session(self, session_id: str) -> bool:
        def delete(connection: Connection) -> bool:
            with _transaction(connection):
                # Events, runs and pending confirmations go by ON DELETE CASCADE.
                deleted = connection.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
                connection.execute("DELETE FROM turn_leases WHERE session_id = ?", (session_id,))
            return deleted.rowcount > 0

        return await self._write(delete)

    # --- events -----------------------------------------------------------

    async def append_event(
        self,
        session_id: str,
        type: str,
        data: JSONObject,
        *,
        run_id: str | None,
        agent: str | None,
        bundle_version: str | None,
    ) -> StoredEvent:
        event = NewEvent(type, data, run_id, agent, bundle_version)
        (stored,) = await self.append_events(session_id, (event,))
        return stored

    async def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[StoredEvent]:
        if not events:
            return []
        # Encoded before the write, so bad data fails the caller and never the transaction.
        encoded = [dump(event.data, f"event {event.type!r} data") for event in events]
        created_at = utc_now()
        created_text = iso(created_at, "now")
        count = len(events)

        def append(connection: Connection) -> int:
            with _transaction(connection):
                # One UPDATE both checks the session and reserves `count` seqs; the
                # write lock held since BEGIN IMMEDIATE makes the pair atomic.
                row = connection.execute(
                    "UPDATE sessions SET last_seq = last_seq + ?, updated_at = ? WHERE id = ? "
                    "RETURNING last_seq",
                    (count, created_text, session_id),
                ).fetchone()
                if row is None:
                    raise RecordNotFoundError("session", session_id)
                first = int(row[0]) - count + 1
                connection.executemany(
                    f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            session_id,
                            first + index,
                            event.type,
                            event.run_id,
                            event.agent,
                            event.bundle_version,
                            created_text,
                            text,
                        )
                        for index, (event, text) in enumerate(zip(events, encoded, strict=True))
                    ],
                )
            return first

        first = await self._write(append)
        return [
            StoredEvent(
                session_id=session_id,
                seq=first + index,
                type=event.type,
                run_id=event.run_id,
                agent=event.agent,
                bundle_version=event.bundle_version,
                created_at=created_at,
                data=json.loads(text),
            )
            for index, (event, text) in enumerate(zip(events, encoded, strict=True))
        ]

    async def list_events(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        def list_(connection: Connection) -> list[StoredEvent]:
            rows = connection.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ? AND seq > ? ORDER BY seq",
                (session_id, after_seq),
            ).fetchall()
            return [ROWS.event(row) for row in rows]

        return await self._read(list_)

    # --- pending confirmations ---------------------------------------------

    async def save_pending(self, confirmation: PendingConfirmation) -> None:
        c = confirmation
        row = (
            c.session_id,
            c.call_id,
            c.run_id,
            c.agent,
            c.tool,
            dump(c.arguments, "arguments"),
            dump(c.state, "state"),
            iso(c.created_at, "created_at"),
        )
        key = f"{c.session_id}/{c.call_id}"

        def save(connection: Connection) -> None:
            with (
                _transaction(connection),
                _mapping_conflicts("pending confirmation", key, session_id=c.session_id),
            ):
                connection.execute(
                    f"INSERT INTO pending_confirmations ({PENDING_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )

        await self._write(save)

    async def get_pending(self, session_id: str, call_id: str) -> PendingConfirmation | None:
        def get(connection: Connection) -> PendingConfirmation | None:
            row = connection.execute(
                f"SELECT {PENDING_COLUMNS} FROM pending_confirmations "
                "WHERE session_id = ? AND call_id = ?",
                (session_id, call_id),
            ).fetchone()
            return None if row is None else ROWS.pending(row)

        return await self._read(get)

    async def list_pending(self, session_id: str) -> list[PendingConfirmation]:
        def list_(connection: Connection) -> list[PendingConfirmation]:
            rows = connection.execute(
                f"SELECT {PENDING_COLUMNS} FROM pending_confirmations WHERE session_id = ? "
                "ORDER BY created_at, rowid",
                (session_id,),
            ).fetchall()
            return [ROWS.pending(row) for row in rows]

        return await self._read(list_)

    async def delete_pending(self, session_id: str, call_id: str) -> bool:
        def delete(connection: Connection) -> bool:
            # rowcount is 1 only for the one DELETE that found the row; every
            # other caller, in any process, finds it gone.
            with _transaction(connection):
                cursor = connection.execute(
                    "DELETE FROM pending_confirmations WHERE session_id = ? AND call_id = ?",
                    (session_id, call_id),
                )
            return cursor.rowcount == 1

        return await self._write(delete)

    # --- runs -------------------------------------------------------------

    async def start_run(self, record: RunRecord) -> None:
        r = record
        check_status(r.status, RUN_STATUSES)
        if r.depth < 0:
            raise ValueError(f"run {r.id!r}: depth must be 0 or more, got {r.depth}")
        row = (
            r.id,
            r.session_id,
            r.parent_run_id,
            r.depth,
            r.agent,
            r.label,
            iso(r.started_at, "started_at"),
            None if r.ended_at is None else iso(r.ended_at, "ended_at"),
            r.status,
            dump(r.usage, "usage"),
            r.error,
        )

        def start(connection: Connection) -> None:
            with _transaction(connection), _mapping_conflicts("run", r.id, session_id=r.session_id):
                connection.execute(
                    f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )

        await self._write(start)

    async def end_run(
        self,
        run_id: str,
        status: RunStatus,
        usage: JSONObject,
        error: str | None = None,
        ended_at: datetime | None = None,
    ) -> None:
        check_status(status, ("ok", "error", "partial"))
        values = (
            status,
            dump(usage, "usage"),
            error,
            iso(ended_at or utc_now(), "ended_at"),
            run_id,
        )

        def end(connection: Connection) -> None:
            with _transaction(connection):
                cursor = connection.execute(
                    "UPDATE runs SET status = ?, usage = ?, error = ?, ended_at = ? WHERE id = ?",
                    values,
                )
            if cursor.rowcount == 0:
                raise RecordNotFoundError("run", run_id)

        await self._write(end)

    async def list_runs(self, session_id: str) -> list[RunRecord]:
        def list_(connection: Connection) -> list[RunRecord]:
            rows = connection.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ? ORDER BY started_at, rowid",
                (session_id,),
            ).fetchall()
            return [ROWS.run(row) for row in rows]

        return await self._read(list_)

    async def interrupt_runs(
        self, session_id: str, error: str, ended_at: datetime | None = None
    ) -> list[RunRecord]:
        ended = iso(ended_at or utc_now(), "ended_at")
        running = f"SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ? AND status = 'running'"

        def find(connection: Connection) -> bool:
            return connection.execute(running + " LIMIT 1", (session_id,)).fetchone() is not None

        # Read first: a turn start asks every time, and nearly always finds nothing to write.
        if not await self._read(find):
            return []

        def close(connection: Connection) -> list[RunRecord]:
            with _transaction(connection):
                rows = connection.execute(
                    running + " ORDER BY started_at, rowid", (session_id,)
                ).fetchall()
                connection.execute(
                    "UPDATE runs SET status = 'interrupted', error = ?, ended_at = ? "
                    "WHERE session_id = ? AND status = 'running'",
                    (error, ended, session_id),
                )
            return [ROWS.run(row) for row in rows]

        return await self._write(close)

    # --- turn leases ------------------------------------------------------

    async def try_acquire_turn(self, session_id: str, holder: str, ttl_seconds: float) -> bool:
        check_ttl(ttl_seconds)

        def acquire(connection: Connection) -> bool:
            now = time.time()  # read in the worker, so time spent queued does not shorten the ttl
            with _transaction(connection):
                # One statement: insert a free lease, or take over one that has
                # expired (or that this holder already has); a live lease of
                # another holder makes the update's WHERE false and nothing returns.
                taken = connection.execute(
                    "INSERT INTO turn_leases (session_id, holder, expires_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (session_id) DO UPDATE "
                    "SET holder = excluded.holder, expires_at = excluded.expires_at "
                    "WHERE turn_leases.expires_at <= ? OR turn_leases.holder = excluded.holder "
                    "RETURNING holder",
                    (session_id, holder, now + ttl_seconds, now),
                ).fetchall()
            return bool(taken)

        return await self._write(acquire)

    async def renew_turn(self, session_id: str, holder: str, ttl_seconds: float) -> bool:
        check_ttl(ttl_seconds)

        def renew(connection: Connection) -> bool:
            now = time.time()
            with _transaction(connection):
                cursor = connection.execute(
                    "UPDATE turn_leases SET expires_at = ? WHERE session_id = ? AND holder = ?",
                    (now + ttl_seconds, session_id, holder),
                )
            return cursor.rowcount == 1

        return await self._write(renew)

    async def release_turn(self, session_id: str, holder: str) -> bool:
        def release(connection: Connection) -> bool:
            with _transaction(connection):
                cursor = connection.execute(
                    "DELETE FROM turn_leases WHERE session_id = ? AND holder = ?",
                    (session_id, holder),
                )
            return cursor.rowcount == 1

        return await self._write(release)

    # --- store documents ---------------------------------------------------

    async def get_document(self, scope_id: str, store: str, key: str) -> StoreDocument | None:
        def get(connection: Connection) -> StoreDocument | None:
            row = connection.execute(
                f"SELECT {DOCUMENT_COLUMNS} FROM store_documents WHERE {_DOCUMENT_KEY} AND {_LIVE}",
                (scope_id, store, key, _now_text()),
            ).fetchone()
            return None if row is None else ROWS.document(row)

        return await self._read(get)

    async def query_documents(
        self, scope_id: str, store: str, query: DocumentQuery
    ) -> DocumentPage:
        filters, sort, descending = check_query(query)
        clauses = ["scope_id = ?", "store = ?", _LIVE]
        values: list[Any] = [scope_id, store]
        for name, value in filters:
            clause, more = _filter(name, value)
            clauses.append(clause)
            values.extend(more)
        condition = " AND ".join(clauses)
        order, order_values = "key", []
        if sort is not None:
            # A field's value as SQL: NULL when absent or null, 0/1 for booleans,
            # numbers as numbers, text compared bytewise (code point order).
            value = "(SELECT j.value FROM json_each(store_documents.body) AS j WHERE j.key = ?)"
            direction = "DESC" if descending else "ASC"
            order = f"{value} IS NULL, {value} {direction}, key"
            order_values = [sort, sort]

        def run(connection: Connection) -> DocumentPage:
            where = [*values[:2], _now_text(), *values[2:]]
            total = connection.execute(
                f"SELECT COUNT(*) FROM store_documents WHERE {condition}", where
            ).fetchone()[0]
            rows = connection.execute(
                f"SELECT {DOCUMENT_COLUMNS} FROM store_documents WHERE {condition} "
                f"ORDER BY {order} LIMIT ? OFFSET ?",
                [*where, *order_values, query.limit, query.offset],
            ).fetchall()
            return DocumentPage([ROWS.document(row) for row in rows], int(total))

        return await self._read(run)

    async def put_document(
        self,
        scope_id: str,
        store: str,
        key: str,
        data: JSONObject,
        *,
        ttl_seconds: float | None = None,
        keep_versions: int = 0,
    ) -> StoreDocument:
        text = check_document(scope_id, store, key, data, ttl_seconds, keep_versions)
        ids = (scope_id, store, key)

        def put(connection: Connection) -> StoreDocument:
            now = utc_now()
            now_text = iso(now, "now")
            expires = None if ttl_seconds is None else now + timedelta(seconds=ttl_seconds)
            expires_text = None if expires is None else iso(expires, "expires_at")
            with _transaction(connection):
                row = connection.execute(
                    "SELECT version, body, created_at, updated_at, expires_at "
                    f"FROM store_documents WHERE {_DOCUMENT_KEY}",
                    ids,
                ).fetchone()
                if row is not None and row[4] is not None and row[4] <= now_text:
                    # An expired document is gone, its history with it (ON DELETE CASCADE).
                    connection.execute(f"DELETE FROM store_documents WHERE {_DOCUMENT_KEY}", ids)
                    row = None
                if row is None:
                    version, created_text = 1, now_text
                    connection.execute(
                        f"INSERT INTO store_documents ({DOCUMENT_COLUMNS}) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (*ids, text, version, created_text, now_text, expires_text),
                    )
                else:
                    previous, body, created_text, updated_text = row[0], row[1], row[2], row[3]
                    version = previous + 1
                    if keep_versions > 0:
                        connection.execute(
                            "INSERT INTO store_history (scope_id, store, key, version, body, "
                            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (*ids, previous, body, created_text, updated_text),
                        )
                    connection.execute(
                        f"DELETE FROM store_history WHERE {_DOCUMENT_KEY} AND version < ?",
                        (*ids, version - keep_versions),
                    )
                    connection.execute(
                        "UPDATE store_documents SET body = ?, version = ?, updated_at = ?, "
                        f"expires_at = ? WHERE {_DOCUMENT_KEY}",
                        (text, version, now_text, expires_text, *ids),
                    )
            return StoreDocument(
                scope_id, store, key, load(text), version, _time(created_text), now, expires
            )

        return await self._write(put)

    async def delete_document(self, scope_id: str, store: str, key: str) -> bool:
        def delete(connection: Connection) -> bool:
            with _transaction(connection):
                cursor = connection.execute(
                    f"DELETE FROM store_documents WHERE {_DOCUMENT_KEY} AND {_LIVE}",
                    (scope_id, store, key, _now_text()),
                )
            return cursor.rowcount == 1

        return await self._write(delete)

    async def document_history(self, scope_id: str, store: str, key: str) -> list[StoreDocument]:
        def history(connection: Connection) -> list[StoreDocument]:
            live = connection.execute(
                f"SELECT 1 FROM store_documents WHERE {_DOCUMENT_KEY} AND {_LIVE}",
                (scope_id, store, key, _now_text()),
            ).fetchone()
            if live is None:
                return []
            rows = connection.execute(
                "SELECT scope_id, store, key, body, version, created_at, updated_at, NULL "
                f"FROM store_history WHERE {_DOCUMENT_KEY} ORDER BY version DESC",
                (scope_id, store, key),
            ).fetchall()
            return [ROWS.document(row) for row in rows]

        return await self._read(history)

    async def purge_expired(self) -> int:
        def purge(connection: Connection) -> int:
            with _transaction(connection):
                cursor = connection.execute(
                    "DELETE FROM store_documents WHERE expires_at IS NOT NULL AND expires_at <= ?",
                    (_now_text(),),
                )
            return cursor.rowcount

        return await self._write(purge)


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
        # timeout); from now on a locked database is reported at once and `_run` waits.
        connection.execute("PRAGMA busy_timeout = 0")
    except sqlite3.Error as e:
        connection.close()
        raise StorageError(f"cannot set up the database {path}: {e}") from e
    if mode != "wal":
        logger.warning(
            "storage_not_wal",
            extra={"event": "storage_not_wal", "database": str(path), "journal_mode": mode},
        )
    return connection


def _migrate(connection: Connection, migrations: Sequence[Migration], path: Path) -> list[str]:
    names = [migration.name for migration in migrations]
    if len(set(names)) != len(names):
        raise ValueError(f"migration names must be unique, got {names}")
    # All pending migrations in one transaction: a database is at one version or the
    # next, never between; the write lock also keeps two processes from racing.
    with _transaction(connection):
        connection.execute(
            "CREATE TABLE IF NOT EXISTS migrations "
            "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        applied = {row[0] for row in connection.execute("SELECT name FROM migrations")}
        pending = [migration for migration in migrations if migration.name not in applied]
        applied_at = iso(utc_now(), "now")
        for migration in pending:
            for statement in _statements(migration.sql):
                connection.execute(statement)
            connection.execute(
                "INSERT INTO migrations (name, applied_at) VALUES (?, ?)",
                (migration.name, applied_at),
            )
    for migration in pending:
        logger.info(
            "storage_migrated",
            extra={"event": "storage_migrated", "database": str(path), "migration": migration.name},
        )
    unknown = sorted(applied - set(names))
    if unknown:
        logger.warning(
            "storage_schema_newer",
            extra={"event": "storage_schema_newer", "database": str(path), "migrations": unknown},
        )
    return [migration.name for migration in pending]


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


@contextmanager
def _transaction(connection: Connection) -> Iterator[None]:
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


@contextmanager
def _mapping_conflicts(kind: str, key: str, *, session_id: str | None = None) -> Iterator[None]:
    """Turn constraint failures of an INSERT into the errors the Protocol promises."""
    try:
        yield
    except sqlite3.IntegrityError as e:
        name = getattr(e, "sqlite_errorname", "")
        if name in {"SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE"}:
            raise RecordExistsError(kind, key) from e
        if name == "SQLITE_CONSTRAINT_FOREIGNKEY" and session_id is not None:
            raise RecordNotFoundError("session", session_id) from e
        raise


# --- values in and out ------------------------------------------------------


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _now_text() -> str:
    # Read in the worker, so time spent queued does not count against an expiry.
    return iso(utc_now(), "now")


def _filter(name: str, value: FilterValue) -> tuple[str, list[Any]]:
    """One equality filter on a top-level field, with JSON types kept apart (1 is not true)."""
    element = "SELECT 1 FROM json_each(store_documents.body) AS j WHERE j.key = ?"
    if value is None:
        return f"NOT EXISTS ({element} AND j.type <> 'null')", [name]
    if isinstance(value, bool):
        return f"EXISTS ({element} AND j.type = ?)", [name, "true" if value else "false"]
    if isinstance(value, int | float):
        return f"EXISTS ({element} AND j.type IN {_JSON_NUMBER} AND j.value = ?)", [name, value]
    return f"EXISTS ({element} AND j.type = 'text' AND j.value = ?)", [name, value]


ROWS = Decoders(time=datetime.fromisoformat, json=load, body=load)

__all__ = ["BUSY_TIMEOUT_SECONDS", "SqliteStorage"]
