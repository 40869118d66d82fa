"""The server backend: PostgreSQL through psycopg 3 (async) and a connection pool.

Chosen by `DATABASE_URL=postgresql://...`; needs the `postgres` extra. Several
servers may share one database: every promise of `Storage` holds across them.
- Writes run in transactions on autocommit connections from one pool per storage
  (`pool_size`, default 10); a write is shielded from cancellation, so it commits
  or rolls back whole.
- Event seqs come from one `UPDATE sessions ... RETURNING last_seq`: the row lock
  serializes appenders of one session, in any process.
- Turn leases live in a table and expire on the database's clock
  (`clock_timestamp()`), so servers with skewed clocks still agree; taking one is
  a single `INSERT ... ON CONFLICT DO UPDATE ... WHERE` that only one contender wins.
- Store documents are jsonb, filtered and sorted in SQL (strings compare with
  the "C" collation: code point order, like SQLite); their times and expiry also
  come from the database's clock.
- Migrations run under a transaction-scoped advisory lock, so servers starting
  together apply each migration once.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import anyio
import anyio.lowlevel
import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolClosed

from runtime._logs import logger
from runtime.storage import (
    RUN_STATUSES,
    DocumentPage,
    DocumentQuery,
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
    aware,
    check_document,
    check_page,
    check_query,
    check_status,
    check_ttl,
    dump,
    load,
)
from runtime.storage.migrations import POSTGRES_MIGRATIONS, Migration

T = TypeVar("T")
Connection = psycopg.AsyncConnection[TupleRow]

CONNECT_TIMEOUT_SECONDS = 10
DEFAULT_POOL_SIZE = 10
MIGRATION_LOCK = 0x616D6F64616C
"""The advisory lock key ("amodal") held while migrating."""

_DOCUMENT_KEY = "scope_id = %s AND store = %s AND key = %s"
_LIVE = "(expires_at IS NULL OR expires_at > clock_timestamp())"
_LEASE_EXPIRY = "clock_timestamp() + make_interval(secs => %s::float8)"


class PostgresStorage:
    """`Storage` on a PostgreSQL database. Open it with `await PostgresStorage.open(url)`.

    A storage belongs to the event loop that opened it (asyncio); other
    processes and other storages on the same database are fine.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        name: str,
        migrations: Sequence[Migration],
    ) -> None:
        self.name = name
        self._pool: AsyncConnectionPool[Connection] | None = pool
        self._migrations = tuple(migrations)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrations: Sequence[Migration] = POSTGRES_MIGRATIONS,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> PostgresStorage:
        """Connect (failing at once with a clear `StorageError`), open the pool and migrate."""
        name = describe(url)
        try:
            # One plain connection first: a pool would retry in the background and
            # fail later with a timeout instead of the reason.
            probe = await psycopg.AsyncConnection.connect(
                url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
            )
        except psycopg.Error as e:
            raise StorageError(
                f"cannot connect to the PostgreSQL database {name}: {_redact(str(e), url)}"
            ) from e
        await probe.close()
        pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            open=False,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_SECONDS},
            name="amodal",
        )
        await pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
        storage = cls(pool, name, migrations)
        try:
            await storage.migrate()
        except BaseException:
            await storage.close()
            raise
        return storage

    def __repr__(self) -> str:
        return f"PostgresStorage({self.name!r})"

    # --- plumbing ---------------------------------------------------------

    async def _run(self, operation: Callable[[Connection], Awaitable[T]], write: bool) -> T:
        pool = self._pool
        if pool is None:
            raise StorageClosedError(f"the storage on {self.name} is closed")
        try:
            async with pool.connection() as connection:
                if not write:
                    return await operation(connection)
                async with connection.transaction():
                    return await operation(connection)
        except PoolClosed as e:
            raise StorageClosedError(f"the storage on {self.name} is closed") from e
        except psycopg.Error as e:
            raise StorageError(f"database {self.name}: {e}") from e

    async def _read(self, operation: Callable[[Connection], Awaitable[T]]) -> T:
        return await self._run(operation, write=False)

    async def _write(self, operation: Callable[[Connection], Awaitable[T]]) -> T:
        # Shielded, so a write that was asked for commits or rolls back on its own
        # terms: a cancelled turn never leaves half an append or a lost approval.
        with anyio.CancelScope(shield=True):
            result = await self._run(operation, write=True)
        # The caller was perhaps cancelled meanwhile: it gets that, not the result.
        await anyio.lowlevel.checkpoint_if_cancelled()
        return result

    # --- lifecycle --------------------------------------------------------

    async def migrate(self) -> list[str]:
        migrations = self._migrations
        names = [migration.name for migration in migrations]
        if len(set(names)) != len(names):
            raise ValueError(f"migration names must be unique, got {names}")

        async def migrate(connection: Connection) -> tuple[list[Migration], set[str]]:
            # All pending migrations in one transaction, under a lock that keeps two
            # servers starting at once from applying one migration twice.
            await connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            await connection.execute(
                "CREATE TABLE IF NOT EXISTS migrations "
                "(name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
            )
            cursor = await connection.execute("SELECT name FROM migrations")
            applied = {str(row[0]) for row in await cursor.fetchall()}
            pending = [migration for migration in migrations if migration.name not in applied]
            for migration in pending:
                await connection.execute(migration.sql.encode())
                await connection.execute(
                    "INSERT INTO migrations (name, applied_at) VALUES (%s, clock_timestamp())",
                    (migration.name,),
                )
            return pending, applied

        pending, applied = await self._write(migrate)
        for migration in pending:
            logger.info(
                "storage_migrated",
                extra={
                    "event": "storage_migrated",
                    "database": self.name,
                    "migration": migration.name,
                },
            )
        unknown = sorted(applied - set(names))
        if unknown:
            logger.warning(
                "storage_schema_newer",
                extra={
                    "event": "storage_schema_newer",
                    "database": self.name,
                    "migrations": unknown,
                },
            )
        return [migration.name for migration in pending]

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            with anyio.CancelScope(shield=True):
                await pool.close()

    # --- sessions ---------------------------------------------------------

    async def create_session(self, record: SessionRecord) -> None:
        row = (
            record.id,
            record.scope_id,
            record.owner,
            record.root_agent,
            aware(record.created_at, "created_at"),
            aware(record.updated_at, "updated_at"),
            dump(record.metadata, "metadata"),
        )

        async def create(connection: Connection) -> None:
            try:
                await connection.execute(
                    f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    row,
                )
            except pg_errors.UniqueViolation as e:
                raise RecordExistsError("session", record.id) from e

        await self._write(create)

    async def get_session(self, session_id: str) -> SessionRecord | None:
        async def get(connection: Connection) -> SessionRecord | None:
            cursor = await connection.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = %s", (session_id,)
            )
            row = await cursor.fetchone()
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
            where, values = (
                "WHERE scope_id = %s AND owner IS NOT DISTINCT FROM %s",
                (scope_id, owner),
            )

        async def list_(connection: Connection) -> list[SessionRecord]:
            cursor = await connection.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions {where} "
                "ORDER BY updated_at DESC, id DESC LIMIT %s OFFSET %s",
                (*values, limit, offset),
            )
            return [ROWS.session(row) for row in await cursor.fetchall()]

        return await self._read(list_)

    async def set_root(self, session_id: str, agent: str) -> None:
        await self._update_session(
            session_id, "root_agent = %s, updated_at = %s", (agent, utc_now())
        )

    async def touch_session(self, session_id: str) -> None:
        await self._update_session(session_id, "updated_at = %s", (utc_now(),))

    async def _update_session(
        self, session_id: str, assignments: str, values: tuple[object, ...]
    ) -> None:
        async def update(connection: Connection) -> None:
            cursor = await connection.execute(
                f"UPDATE sessions SET {assignments} WHERE id = %s", (*values, session_id)
            )
            if cursor.rowcount == 0:
                raise RecordNotFoundError("session", session_id)

        await self._write(update)

    async def delete_session(self, session_id: str) -> bool:
        async def delete(connection: Connection) -> bool:
            # Events, runs and pending confirmations go by ON DELETE CASCADE.
            deleted = await connection.execute("DELETE FROM sessions WHERE id = %s", (session_id,))
            await connection.execute("DELETE FROM turn_leases WHERE session_id = %s", (session_id,))
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
        count = len(events)

        async def append(connection: Connection) -> int:
            # The UPDATE both checks the session and reserves `count` seqs; its row
            # lock, held to the commit, orders concurrent appenders.
            cursor = await connection.execute(
                "UPDATE sessions SET last_seq = last_seq + %s, updated_at = %s WHERE id = %s "
                "RETURNING last_seq",
                (count, created_at, session_id),
            )
            row = await cursor.fetchone()
            if row is None:
                raise RecordNotFoundError("session", session_id)
            first = int(row[0]) - count + 1
            async with connection.cursor() as insert:
                await insert.executemany(
                    f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (
                            session_id,
                            first + index,
                            event.type,
                            event.run_id,
                            event.agent,
                            event.bundle_version,
                            created_at,
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
        async def list_(connection: Connection) -> list[StoredEvent]:
            cursor = await connection.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = %s AND seq > %s "
                "ORDER BY seq",
                (session_id, after_seq),
            )
            return [ROWS.event(row) for row in await cursor.fetchall()]

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
            aware(c.created_at, "created_at"),
        )

        key = f"{c.session_id}/{c.call_id}"

        async def save(connection: Connection) -> None:
            try:
                await connection.execute(
                    f"INSERT INTO pending_confirmations ({PENDING_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    row,
                )
            except pg_errors.UniqueViolation as e:
                raise RecordExistsError("pending confirmation", key) from e
            except pg_errors.ForeignKeyViolation as e:
                raise RecordNotFoundError("session", c.session_id) from e

        await self._write(save)

    async def get_pending(self, session_id: str, call_id: str) -> PendingConfirmation | None:
        async def get(connection: Connection) -> PendingConfirmation | None:
            cursor = await connection.execute(
                f"SELECT {PENDING_COLUMNS} FROM pending_confirmations "
                "WHERE session_id = %s AND call_id = %s",
                (session_id, call_id),
            )
            row = await cursor.fetchone()
            return None if row is None else ROWS.pending(row)

        return await self._read(get)

    async def list_pending(self, session_id: str) -> list[PendingConfirmation]:
        async def list_(connection: Connection) -> list[PendingConfirmation]:
            cursor = await connection.execute(
                f"SELECT {PENDING_COLUMNS} FROM pending_confirmations WHERE session_id = %s "
                "ORDER BY created_at, ordinal",
                (session_id,),
            )
            return [ROWS.pending(row) for row in await cursor.fetchall()]

        return await self._read(list_)

    async def delete_pending(self, session_id: str, call_id: str) -> bool:
        async def delete(connection: Connection) -> bool:
            # Only the DELETE that found the row counts it; every other caller, in
            # any process, waits on its row lock and then finds it gone.
            cursor = await connection.execute(
                "DELETE FROM pending_confirmations WHERE session_id = %s AND call_id = %s",
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
            aware(r.started_at, "started_at"),
            None if r.ended_at is None else aware(r.ended_at, "ended_at"),
            r.status,
            dump(r.usage, "usage"),
            r.error,
        )

        async def start(connection: Connection) -> None:
            try:
                await connection.execute(
                    f"INSERT INTO runs ({RUN_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    row,
                )
            except pg_errors.UniqueViolation as e:
                raise RecordExistsError("run", r.id) from e
            except pg_errors.ForeignKeyViolation as e:
                raise RecordNotFoundError("session", r.session_id) from e

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
            aware(ended_at or utc_now(), "ended_at"),
            run_id,
        )

        async def end(connection: Connection) -> None:
            cursor = await connection.execute(
                "UPDATE runs SET status = %s, usage = %s, error = %s, ended_at = %s WHERE id = %s",
                values,
            )
            if cursor.rowcount == 0:
                raise RecordNotFoundError("run", run_id)

        await self._write(end)

    async def list_runs(self, session_id: str) -> list[RunRecord]:
        async def list_(connection: Connection) -> list[RunRecord]:
            cursor = await connection.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE session_id = %s "
                "ORDER BY started_at, ordinal",
                (session_id,),
            )
            return [ROWS.run(row) for row in await cursor.fetchall()]

        return await self._read(list_)

    async def interrupt_runs(
        self, session_id: str, error: str, ended_at: datetime | None = None
    ) -> list[RunRecord]:
        ended = aware(ended_at or utc_now(), "ended_at")

        async def close(connection: Connection) -> list[RunRecord]:
            # The old rows are returned: UPDATE ... RETURNING gives the new ones.
            cursor = await connection.execute(
                f"WITH closed AS (SELECT {RUN_COLUMNS}, ordinal FROM runs "
                "WHERE session_id = %s AND status = 'running' FOR UPDATE), "
                "updated AS (UPDATE runs SET status = 'interrupted', error = %s, ended_at = %s "
                "WHERE id IN (SELECT id FROM closed)) "
                f"SELECT {RUN_COLUMNS} FROM closed ORDER BY started_at, ordinal",
                (session_id, error, ended),
            )
            return [ROWS.run(row) for row in await cursor.fetchall()]

        return await self._write(close)

    # --- turn leases ------------------------------------------------------

    async def try_acquire_turn(self, session_id: str, holder: str, ttl_seconds: float) -> bool:
        check_ttl(ttl_seconds)

        async def acquire(connection: Connection) -> bool:
            # One statement: insert a free lease, or take over one that has expired
            # (or that this holder already has). Concurrent contenders wait on the
            # row and re-check the WHERE against the winner's lease, which is live.
            cursor = await connection.execute(
                "INSERT INTO turn_leases (session_id, holder, expires_at) "
                f"VALUES (%s, %s, {_LEASE_EXPIRY}) "
                "ON CONFLICT (session_id) DO UPDATE "
                "SET holder = excluded.holder, expires_at = excluded.expires_at "
                "WHERE turn_leases.expires_at <= clock_timestamp() "
                "OR turn_leases.holder = excluded.holder "
                "RETURNING holder",
                (session_id, holder, float(ttl_seconds)),
            )
            return bool(await cursor.fetchall())

        return await self._write(acquire)

    async def renew_turn(self, session_id: str, holder: str, ttl_seconds: float) -> bool:
        check_ttl(ttl_seconds)

        async def renew(connection: Connection) -> bool:
            cursor = await connection.execute(
                f"UPDATE turn_leases SET expires_at = {_LEASE_EXPIRY} "
                "WHERE session_id = %s AND holder = %s",
                (float(ttl_seconds), session_id, holder),
            )
            return cursor.rowcount == 1

        return await self._write(renew)

    async def release_turn(self, session_id: str, holder: str) -> bool:
        async def release(connection: Connection) -> bool:
            cursor = await connection.execute(
                "DELETE FROM turn_leases WHERE session_id = %s AND holder = %s",
                (session_id, holder),
            )
            return cursor.rowcount == 1

        return await self._write(release)

    # --- store documents ---------------------------------------------------

    async def get_document(self, scope_id: str, store: str, key: str) -> StoreDocument | None:
        async def get(connection: Connection) -> StoreDocument | None:
            cursor = await connection.execute(
                f"SELECT {DOCUMENT_COLUMNS} FROM store_documents WHERE {_DOCUMENT_KEY} AND {_LIVE}",
                (scope_id, store, key),
            )
            row = await cursor.fetchone()
            return None if row is None else ROWS.document(row)

        return await self._read(get)

    async def query_documents(
        self, scope_id: str, store: str, query: DocumentQuery
    ) -> DocumentPage:
        filters, sort, descending = check_query(query)
        clauses = ["scope_id = %s", "store = %s", _LIVE]
        values: list[Any] = [scope_id, store]
        contained = {name: value for name, value in filters if value is not None}
        if contained:
            # Containment finds candidates through the GIN index; the equalities
            # below keep the exact meaning (a scalar never matches inside an array).
            clauses.append("body @> %s::jsonb")
            values.append(json.dumps(contained))
        for name, value in filters:
            if value is None:
                clauses.append("(body -> %s IS NULL OR body -> %s = 'null'::jsonb)")
                values.extend((name, name))
            else:
                clauses.append("body -> %s = %s::jsonb")
                values.extend((name, json.dumps(value)))
        condition = " AND ".join(clauses)
        order, order_values = 'key COLLATE "C"', []
        if sort is not None:
            direction = "DESC" if descending else "ASC"
            order = (
                "(body -> %s IS NULL OR jsonb_typeof(body -> %s) = 'null'), "
                "CASE WHEN jsonb_typeof(body -> %s) = 'number' THEN (body ->> %s)::numeric END "
                f"{direction} NULLS LAST, "
                "(CASE WHEN jsonb_typeof(body -> %s) = 'string' THEN body ->> %s END) "
                f'COLLATE "C" {direction} NULLS LAST, '
                "CASE WHEN jsonb_typeof(body -> %s) = 'boolean' THEN (body ->> %s)::boolean END "
                f"{direction} NULLS LAST, "
                'key COLLATE "C"'
            )
            order_values = [sort] * 8

        async def run(connection: Connection) -> DocumentPage:
            cursor = await connection.execute(
                f"SELECT COUNT(*) FROM store_documents WHERE {condition}", values
            )
            counted = await cursor.fetchone()
            cursor = await connection.execute(
                f"SELECT {DOCUMENT_COLUMNS} FROM store_documents WHERE {condition} "
                f"ORDER BY {order} LIMIT %s OFFSET %s",
                [*values, *order_values, query.limit, query.offset],
            )
            rows = await cursor.fetchall()
            total = int(counted[0]) if counted is not None else 0
            return DocumentPage([ROWS.document(row) for row in rows], total)

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

        async def put(connection: Connection) -> StoreDocument:
            while True:
                cursor = await connection.execute("SELECT clock_timestamp()")
                clock = await cursor.fetchone()
                now = _utc(cast(datetime, clock[0] if clock else utc_now()))
                expires = None if ttl_seconds is None else now + timedelta(seconds=ttl_seconds)
                cursor = await connection.execute(
                    "SELECT version, created_at, expires_at FROM store_documents "
                    f"WHERE {_DOCUMENT_KEY} FOR UPDATE",
                    ids,
                )
                row = await cursor.fetchone()
                if row is not None and row[2] is not None and row[2] <= now:
                    # An expired document is gone, its history with it (ON DELETE CASCADE).
                    await connection.execute(
                        f"DELETE FROM store_documents WHERE {_DOCUMENT_KEY}", ids
                    )
                    row = None
                if row is None:
                    cursor = await connection.execute(
                        f"INSERT INTO store_documents ({DOCUMENT_COLUMNS}) "
                        "VALUES (%s, %s, %s, %s::jsonb, 1, %s, %s, %s) "
                        "ON CONFLICT DO NOTHING RETURNING version",
                        (*ids, text, now, now, expires),
                    )
                    if await cursor.fetchone() is None:
                        continue  # a concurrent put created it first: lock it and replace it
                    return StoreDocument(scope_id, store, key, load(text), 1, now, now, expires)
                version = int(row[0]) + 1
                if keep_versions > 0:
                    await connection.execute(
                        "INSERT INTO store_history "
                        "(scope_id, store, key, version, body, created_at, updated_at) "
                        "SELECT scope_id, store, key, version, body, created_at, updated_at "
                        f"FROM store_documents WHERE {_DOCUMENT_KEY}",
                        ids,
                    )
                await connection.execute(
                    f"DELETE FROM store_history WHERE {_DOCUMENT_KEY} AND version < %s",
                    (*ids, version - keep_versions),
                )
                await connection.execute(
                    "UPDATE store_documents SET body = %s::jsonb, version = %s, updated_at = %s, "
                    f"expires_at = %s WHERE {_DOCUMENT_KEY}",
                    (text, version, now, expires, *ids),
                )
                created = _utc(row[1])
                return StoreDocument(*ids, load(text), version, created, now, expires)

        return await self._write(put)

    async def delete_document(self, scope_id: str, store: str, key: str) -> bool:
        async def delete(connection: Connection) -> bool:
            cursor = await connection.execute(
                f"DELETE FROM store_documents WHERE {_DOCUMENT_KEY} AND {_LIVE}",
                (scope_id, store, key),
            )
            return cursor.rowcount == 1

        return await self._write(delete)

    async def document_history(self, scope_id: str, store: str, key: str) -> list[StoreDocument]:
        async def history(connection: Connection) -> list[StoreDocument]:
            cursor = await connection.execute(
                "SELECT h.scope_id, h.store, h.key, h.body, h.version, h.created_at, "
                "h.updated_at, NULL FROM store_history h JOIN store_documents d "
                "USING (scope_id, store, key) "
                "WHERE d.scope_id = %s AND d.store = %s AND d.key = %s "
                "AND (d.expires_at IS NULL OR d.expires_at > clock_timestamp()) "
                "ORDER BY h.version DESC",
                (scope_id, store, key),
            )
            return [ROWS.document(row) for row in await cursor.fetchall()]

        return await self._read(history)

    async def purge_expired(self) -> int:
        async def purge(connection: Connection) -> int:
            cursor = await connection.execute(
                "DELETE FROM store_documents WHERE expires_at <= clock_timestamp()"
            )
            return max(cursor.rowcount, 0)

        return await self._write(purge)


# --- naming the database -----------------------------------------------------


def describe(url: str) -> str:
    """`user@host:port/dbname` of a URL: enough to recognise it, never its password."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "(an unparsable PostgreSQL URL)"
    user = str(params.get("user") or "")
    host = str(params.get("host") or "localhost")
    port = str(params.get("port") or "5432")
    database = str(params.get("dbname") or user)
    return f"{user + '@' if user else ''}{host}:{port}/{database}"


def _redact(message: str, url: str) -> str:
    try:
        password = conninfo_to_dict(url).get("password")
    except psycopg.Error:
        password = None
    message = " ".join(message.split())
    return message.replace(str(password), "***") if password else message


# --- values out ---------------------------------------------------------------


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


ROWS = Decoders(time=_utc, json=load, body=lambda value: cast(JSONObject, value))

__all__ = ["DEFAULT_POOL_SIZE", "PostgresStorage", "describe"]
