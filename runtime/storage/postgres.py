"""The server backend: PostgreSQL through psycopg 3 (async) and a connection pool.

Chosen by `DATABASE_URL=postgresql://...`; needs the `postgres` extra. The SQL is
`_sql.py`'s; this module is PostgreSQL's dialect of it and the driver. Several
servers may share one database: every promise of `Storage` holds across them.
- Operations run on autocommit connections from one pool per storage
  (`pool_size`, default 10), a write in one transaction; a write is shielded
  from cancellation, so it commits or rolls back whole.
- Event seqs come from one `UPDATE sessions ... RETURNING last_seq`: the row lock
  serializes appenders of one session, in any process. A read-then-write locks
  the rows it read (`FOR UPDATE`).
- Turn leases expire on the database's clock (`clock_timestamp()`), so servers
  with skewed clocks still agree; taking one is a single
  `INSERT ... ON CONFLICT DO UPDATE ... WHERE` that only one contender wins.
- Store documents are jsonb, filtered and sorted in SQL (strings compare with
  the "C" collation: code point order, like SQLite); their times and expiry also
  come from the database's clock.
- Migrations run under a transaction-scoped advisory lock, so servers starting
  together apply each migration once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import anyio
import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolClosed

from runtime.exceptions import StorageClosedError, StorageError
from runtime.storage._rows import Decoders
from runtime.storage._sql import Dialect, Filters, Operation, Plan, Result, SqlStorage, Statement
from runtime.storage._values import aware, load
from runtime.storage.migrations import POSTGRES_MIGRATIONS, Migration
from runtime.storage.records import JSONObject, MemoryOwner

T = TypeVar("T")
Connection = psycopg.AsyncConnection[TupleRow]
Cursor = psycopg.AsyncCursor[TupleRow]

CONNECT_TIMEOUT_SECONDS = 10
DEFAULT_POOL_SIZE = 10
MIGRATION_LOCK = 0x616D6F64616C
"""The advisory lock key ("amodal") held while migrating."""


class PostgresStorage(SqlStorage):
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
        super().__init__(name, migrations)
        self.name = name
        self._pool: AsyncConnectionPool[Connection] | None = pool

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
        await storage._migrated()
        return storage

    def __repr__(self) -> str:
        return f"PostgresStorage({self.name!r})"

    async def _execute(self, plan: Plan[T], *, write: bool) -> T:
        pool = self._pool
        if pool is None:
            raise StorageClosedError(f"the storage on {self.name} is closed")
        try:
            async with pool.connection() as connection:
                if not write:
                    return await _drive(connection, plan())
                async with connection.transaction():
                    return await _drive(connection, plan())
        except PoolClosed as e:
            raise StorageClosedError(f"the storage on {self.name} is closed") from e
        except psycopg.Error as e:
            raise StorageError(f"database {self.name}: {e}") from e

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            with anyio.CancelScope(shield=True):
                await pool.close()


# --- the driver ----------------------------------------------------------------


async def _drive(connection: Connection, operation: Operation[T]) -> T:
    """Run every statement the operation yields, sending each one's result back."""
    try:
        statement = next(operation)
        while True:
            async with connection.cursor() as cursor:
                await _execute(cursor, statement)
                rows = await cursor.fetchall() if cursor.description is not None else []
                result = Result(rows, cursor.rowcount)
            statement = operation.send(result)
    except StopIteration as stop:
        return cast(T, stop.value)


async def _execute(cursor: Cursor, statement: Statement) -> None:
    try:
        if statement.many:
            await cursor.executemany(_placeholders(statement.sql), statement.params)
        elif statement.params:
            await cursor.execute(_placeholders(statement.sql), statement.params)
        else:  # sent as written: a migration may hold several statements, `?` and `%`
            await cursor.execute(statement.sql)
    except pg_errors.UniqueViolation as e:
        if statement.exists is None:
            raise
        raise statement.exists from e
    except pg_errors.ForeignKeyViolation as e:
        if statement.missing is None:
            raise
        raise statement.missing from e


@functools.lru_cache(maxsize=512)
def _placeholders(sql: str) -> str:
    """The shared SQL's `?` parameters as psycopg's `%s` (a literal `%` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


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


# --- documents: jsonb operators ----------------------------------------------


def _filters(filters: Filters) -> tuple[list[str], list[Any]]:
    conditions: list[str] = []
    values: list[Any] = []
    contained = {name: value for name, value in filters if value is not None}
    if contained:
        # Containment finds candidates through the GIN index; the equalities
        # below keep the exact meaning (a scalar never matches inside an array).
        conditions.append("body @> ?::jsonb")
        values.append(json.dumps(contained))
    for name, value in filters:
        if value is None:
            conditions.append("(body -> ? IS NULL OR body -> ? = 'null'::jsonb)")
            values.extend((name, name))
        else:
            conditions.append("body -> ? = ?::jsonb")
            values.extend((name, json.dumps(value)))
    return conditions, values


def _order(field: str | None, descending: bool) -> tuple[str, list[Any]]:
    if field is None:
        return 'key COLLATE "C"', []
    direction = "DESC" if descending else "ASC"
    order = (
        "(body -> ? IS NULL OR jsonb_typeof(body -> ?) = 'null'), "
        "CASE WHEN jsonb_typeof(body -> ?) = 'number' THEN (body ->> ?)::numeric END "
        f"{direction} NULLS LAST, "
        "(CASE WHEN jsonb_typeof(body -> ?) = 'string' THEN body ->> ? END) "
        f'COLLATE "C" {direction} NULLS LAST, '
        "CASE WHEN jsonb_typeof(body -> ?) = 'boolean' THEN (body ->> ?)::boolean END "
        f"{direction} NULLS LAST, "
        'key COLLATE "C"'
    )
    return order, [field] * 8


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


def _decoded(value: Any) -> JSONObject:
    return cast(JSONObject, value)  # jsonb comes back decoded


# --- full-text search: tsvector and websearch_to_tsquery ----------------------

_HEADLINE = "'StartSel=[, StopSel=], MaxWords=24, MinWords=8, ShortWord=2'"
_MEMORY_MATCHES = f"""
    SELECT id, agent, kind, scope_id, owner, text, created_at,
           ts_headline('english', text, query, {_HEADLINE})
    FROM (
        SELECT m.*, query, ts_rank_cd(m.search, query) AS score
        FROM memory_entries m, websearch_to_tsquery('english', ?) AS query
        WHERE m.search @@ query AND m.agent = ? AND m.kind = ? AND m.scope_id = ?
          AND m.owner = ?
        ORDER BY score DESC, m.n LIMIT ?
    ) AS best
    ORDER BY score DESC, n
"""
_SESSION_MATCHES = f"""
    SELECT session_id, agent, created_at, ts_headline('english', text, query, {_HEADLINE})
    FROM (
        SELECT t.session_id, COALESCE(e.agent, s.root_agent) AS agent, e.created_at, t.text,
               query, ts_rank_cd(t.search, query) AS score
        FROM event_texts t
        CROSS JOIN websearch_to_tsquery('english', ?) AS query
        JOIN sessions s ON s.id = t.session_id
        JOIN events e ON e.session_id = t.session_id AND e.seq = t.seq
        WHERE t.search @@ query AND s.scope_id = ? AND s.owner IS NOT DISTINCT FROM ?
          AND s.id <> ?
        ORDER BY score DESC LIMIT ?
    ) AS best
    ORDER BY score DESC
"""


def _memory_matches(
    words: str, agent: str, owner: MemoryOwner, limit: int
) -> tuple[str, list[Any]]:
    return _MEMORY_MATCHES, [words, agent, owner.kind, owner.scope_id, owner.owner, limit]


def _session_matches(
    words: str, scope_id: str, owner: str | None, exclude: str, limit: int
) -> tuple[str, list[Any]]:
    return _SESSION_MATCHES, [words, scope_id, owner, exclude, limit]


def _search_words(query: str) -> str | None:
    # websearch_to_tsquery reads the query itself and never fails on its syntax; text
    # PostgreSQL cannot hold finds nothing.
    return query if query.strip() and "\x00" not in query else None


POSTGRES = Dialect(
    rows=Decoders(time=_utc, json=load, body=_decoded),
    time=aware,
    time_type="TIMESTAMPTZ",
    now="clock_timestamp()",
    lease_now="clock_timestamp()",
    lease_expiry="clock_timestamp() + make_interval(secs => ?::float8)",
    same="IS NOT DISTINCT FROM",
    insertion_order="ordinal",
    lock_rows=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    document_body="?::jsonb",
    migration_lock=f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})",
    statements=lambda script: [script],
    document_filters=_filters,
    document_order=_order,
    search_words=_search_words,
    memory_matches=_memory_matches,
    session_matches=_session_matches,
    session_window=None,
    search_window=0,
    index_pending=(),  # the GIN index is kept as rows are written
    owner_lock="SELECT pg_advisory_xact_lock(hashtext(?))",
)
PostgresStorage.dialect = POSTGRES

__all__ = ["DEFAULT_POOL_SIZE", "POSTGRES", "PostgresStorage", "describe"]
