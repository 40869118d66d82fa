"""The SQL both backends run, written once: every `Storage` method as a plan of statements.

An operation is a generator that never touches a connection (sans-I/O): it
yields each `Statement` it needs, is sent back that statement's `Result`, and
returns the operation's value. A backend is what drives it:
- `runtime.storage.sqlite` runs it synchronously on the event loop's thread, a
  write inside one `BEGIN IMMEDIATE` transaction; when another process holds the
  lock the transaction rolls back and a fresh generator is tried after a pause;
- `runtime.storage.postgres` runs it with awaits on a pooled connection, a write
  inside one transaction.

What the two databases spell differently is a `Dialect`: the clock, null-safe
equality, row locks, how a document is filtered and sorted, how a migration is
split and guarded, how times and JSON come back. The SQL here writes its
parameters as `?`; a driver that wants another placeholder (psycopg's `%s`)
translates. A new backend is a `Dialect` and a subclass of `SqlStorage` that
opens the database and implements `_execute` (docs/architecture.md, "Adding a
storage backend").
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import json
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeAlias, TypeVar

import anyio
import anyio.lowlevel

from runtime._logs import logger
from runtime.exceptions import RecordExistsError, RecordNotFoundError, StorageError
from runtime.storage._rows import (
    AUTOMATION_RUN_COLUMNS,
    DOCUMENT_COLUMNS,
    EVENT_COLUMNS,
    MEMORY_COLUMNS,
    PENDING_COLUMNS,
    RUN_COLUMNS,
    SESSION_COLUMNS,
    Decoders,
    Row,
)
from runtime.storage._values import (
    check_document,
    check_memory,
    check_page,
    check_query,
    check_search,
    check_status,
    check_ttl,
    dump,
    index_text,
    load,
)
from runtime.storage.migrations import Migration
from runtime.storage.records import (
    AUTOMATION_RUN_STATUSES,
    RUN_STATUSES,
    USAGE_GROUPS,
    USAGE_KINDS,
    AgentRunRecord,
    AlertClaim,
    AutomationRunRecord,
    AutomationRunStatus,
    AutomationState,
    DocumentPage,
    DocumentQuery,
    ExpiredTurn,
    FilterValue,
    JSONObject,
    MemoryEntry,
    MemoryKind,
    MemoryMatch,
    MemoryOwner,
    MemoryUsage,
    NewEvent,
    PendingConfirmation,
    QueuedTurn,
    QueueState,
    RunEnd,
    RunStatus,
    SessionMatch,
    SessionRecord,
    Spend,
    StoredEvent,
    StoreDocument,
    UsageQuery,
    UsageRecord,
    UsageRow,
    utc_now,
)

T = TypeVar("T")


class Statement(NamedTuple):
    """One SQL statement of an operation (a tuple: one is made per statement run).

    `many`: `params` is a sequence of parameter rows, one execution each.
    `exists` / `missing`: what a unique or a foreign-key violation of this
    statement means to the caller; any other constraint failure is a `StorageError`.
    """

    sql: str
    params: Sequence[Any] = ()
    many: bool = False
    exists: StorageError | None = None
    missing: StorageError | None = None


class Result(NamedTuple):
    """What a statement gave back: its rows (none for most writes) and the rows it changed."""

    rows: Sequence[Row]
    changed: int

    def one(self) -> Row | None:
        return self.rows[0] if self.rows else None


Operation: TypeAlias = Generator[Statement, Result, T]
"""A storage operation: yields statements, is sent their results, returns its value."""

Plan: TypeAlias = Callable[[], Operation[T]]
"""Makes an operation afresh: a backend may start one over (SQLite, on a locked database)."""

Filters: TypeAlias = Sequence[tuple[str, FilterValue]]


@dataclass(frozen=True, slots=True)
class Dialect:
    """The SQL one database spells its own way; every other statement is shared.

    Fragments are SQL text with `?` parameters; the callables build SQL for
    what takes more than a fragment.
    """

    rows: Decoders
    """How the database hands back times and JSON."""
    time: Callable[[datetime, str], object]
    """A datetime as a parameter (`ValueError` naming the field for a naive one)."""
    time_type: str
    """The column type of a time (of the migrations table; the rest are migrations')."""
    now: str
    """The current time, as the time columns hold it, read when the statement runs."""
    lease_now: str
    """The current time, as `turn_leases.expires_at` holds it."""
    lease_expiry: str
    """The current time plus one `?` of seconds, as `turn_leases.expires_at` holds it."""
    same: str
    """The equality operator for which NULL equals NULL."""
    insertion_order: str
    """A column of `runs` and `pending_confirmations` that orders rows as inserted."""
    lock_rows: str
    """What a SELECT ends with to lock the rows it reads until the commit ("" when a
    write transaction holds the whole database)."""
    skip_locked: str
    """What a SELECT ends with to lock the rows it reads, passing over rows another
    transaction has locked (`FOR UPDATE SKIP LOCKED`; "" where one writer holds all)."""
    document_body: str
    """The placeholder of a document's JSON text in an INSERT or UPDATE."""
    migration_lock: str | None
    """Run first when migrating, so that servers starting at once migrate one by one."""
    statements: Callable[[str], list[str]]
    """A migration's script as the statements to run one after another."""
    document_filters: Callable[[Filters], tuple[list[str], list[Any]]]
    """The conditions (AND) and their parameters of a query's equality filters."""
    document_order: Callable[[str | None, bool], tuple[str, list[Any]]]
    """The ORDER BY of a query (by field, descending?) and its parameters; by key for None."""
    search_words: Callable[[str], str | None]
    """A person's search (words, "quoted phrases", `or`, `-word`) as the parameter the
    search statements take; None when it has no word to look for."""
    memory_matches: Callable[[str, str, MemoryOwner, int], tuple[str, list[Any]]]
    """The statement and parameters giving the best matches of `search_words`' search among
    one owner's entries (agent, owner, limit): rows of MEMORY_COLUMNS and a snippet."""
    session_matches: Callable[[str, str, str | None, str, int], tuple[str, list[Any]]]
    """The statement and parameters giving the best matching texts of one owner's sessions
    (search, scope_id, owner, excluded session id, limit): rows (session_id, agent,
    created_at, snippet)."""
    session_window: Callable[[str, str, str | None, str, int], tuple[str, list[Any]]] | None
    """A cheaper first try of `session_matches` (same parameters): the owner's best among
    the newest `search_window` matches of every owner, its rows with a fifth column, how
    many matches that window held. Its answer stands when it has the limit's rows, or when
    the window held every match; else `session_matches` runs. None: no first try."""
    search_window: int
    """How many matches `session_window` (and SQLite's `session_matches`) rank at most."""
    index_pending: tuple[str, ...]
    """Run in one write transaction before a session search, to put the texts written since
    the last one into the full-text index (SQLite indexes on read, PostgreSQL as rows are
    written: none)."""
    owner_lock: str | None
    """Run first in a memory add, with one `?` naming the owner, so that concurrent adds of
    one owner count the entries one after another (None: the write lock does already)."""


# Fixed fragments, the same in both dialects.
_DOCUMENT_KEY = "scope_id = ? AND store = ? AND key = ?"
_QUEUE_COLUMNS = (
    "turn_id, session_id, request, caller, state, created_at, started_at, ended_at, attempts"
)
_RUNNING = f"SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ? AND status = 'running'"


@functools.cache
def _marks(count: int) -> str:
    # Cached: every append and every usage record asks for the same few counts.
    return ", ".join("?" * count)


def _only(statement: Statement) -> Operation[Result]:
    return (yield statement)


def _changing(statement: Statement) -> Operation[None]:
    """A write meant to change a row: its `missing` error (if it says one) when none was."""
    if (yield statement).changed == 0 and statement.missing is not None:
        raise statement.missing


def _turn_release(session_id: str, holder: str) -> Statement:
    return Statement(
        "DELETE FROM turn_leases WHERE session_id = ? AND holder = ?", (session_id, holder)
    )


def _each(statements: Sequence[Statement]) -> Operation[None]:
    for statement in statements:
        _ = yield statement  # each statement's result is sent back: no `yield from`


def _dump_deliveries(deliveries: Sequence[JSONObject]) -> str:
    return json.dumps(list(deliveries), ensure_ascii=False, allow_nan=False)


_USAGE_COLUMNS = (
    "session_id, turn_id, run_id, agent, model, owner, scope_id, at, day, "
    "input_tokens, output_tokens, cached_tokens, cost_usd, estimated, "
    "turn_first, agent_first, model_first, kind"
)
_GROUP_COLUMNS = {
    "agent": "agent",
    "model": "model",
    "owner": "owner",
    "scope": "scope_id",
    "day": "day",
    "session": "session_id",
    "kind": "kind",
}
_TURNS = {"agent": "agent_first", "model": "model_first"}
"""What counts a group's turns: the first call of its agent (model) in each turn; for the
other groups, and the total, each turn's first call."""


def _sums(turns: str) -> str:
    return (
        "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
        "COALESCE(SUM(cached_tokens), 0), SUM(cost_usd), COUNT(*), "
        f"COALESCE(SUM({turns}), 0), COALESCE(SUM(turn_first), 0)"
    )


_GROUP_TOTALS = (
    ", ".join(
        f"SUM(SUM({name})) OVER ()"
        for name in ("input_tokens", "output_tokens", "cached_tokens", "cost_usd", "calls")
    )
    + ", SUM(SUM(turn_first)) OVER ()"
)
"""A grouped report's total, on every row: its sums over every group (`turns` is each
turn's first call, as in the total)."""

MAX_USAGE_ROWS = 10_000
_DAY_COLUMNS = (
    "day, agent, model, owner_key, owner, scope_id, input_tokens, output_tokens, "
    "cached_tokens, cost_usd, calls, turn_first, agent_first, model_first, kind"
)
_SESSION_DAY_COLUMNS = (
    "session_id, day, owner, scope_id, input_tokens, output_tokens, cached_tokens, cost_usd, "
    "calls, turn_first"
)
_DAY_SUMS = (
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "calls",
    "turn_first",
    "agent_first",
    "model_first",
)

# The statements `record_usage` runs for every model call, built once.
_INSERT_USAGE = f"INSERT INTO usage_records ({_USAGE_COLUMNS}) VALUES ({_marks(18)})"
_ADD_OWNER_DAY = (
    "INSERT INTO usage_owner_days (owner_key, day, tokens, cost_usd) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (owner_key, day) DO UPDATE SET "
    "tokens = usage_owner_days.tokens + excluded.tokens, "
    "cost_usd = usage_owner_days.cost_usd + excluded.cost_usd"
)
_ADD_USAGE_DAY = (
    f"INSERT INTO usage_days ({_DAY_COLUMNS}) VALUES ({_marks(15)}) "
    "ON CONFLICT (day, agent, model, owner_key, scope_id, kind) DO UPDATE SET "
    + ", ".join(f"{name} = usage_days.{name} + excluded.{name}" for name in _DAY_SUMS)
    + ", cost_usd = CASE WHEN usage_days.cost_usd IS NULL AND excluded.cost_usd IS NULL "
    "THEN NULL ELSE COALESCE(usage_days.cost_usd, 0) + COALESCE(excluded.cost_usd, 0) END"
)
_ADD_SESSION_DAY = (
    f"INSERT INTO usage_session_days ({_SESSION_DAY_COLUMNS}) VALUES ({_marks(10)}) "
    "ON CONFLICT (session_id, day) DO UPDATE SET "
    + ", ".join(f"{name} = usage_session_days.{name} + excluded.{name}" for name in _DAY_SUMS[:5])
    + ", cost_usd = CASE WHEN usage_session_days.cost_usd IS NULL AND "
    "excluded.cost_usd IS NULL THEN NULL ELSE COALESCE(usage_session_days.cost_usd, 0) "
    "+ COALESCE(excluded.cost_usd, 0) END"
)


class UsageSql:
    """The usage records' SQL (SPEC 22), mixed into `SqlStorage`."""

    dialect: ClassVar[Dialect]

    if TYPE_CHECKING:

        async def _read(self, plan: Plan[T]) -> T: ...

        async def _write(self, plan: Plan[T]) -> T: ...

    async def record_usage(self, record: UsageRecord) -> None:
        statements = self._usage_statements(record)
        await self._write(lambda: _each(statements))

    def _usage_statements(self, record: UsageRecord) -> tuple[Statement, ...]:
        """The record and its daily sums, checked first (bad numbers fail the caller,
        never a transaction)."""
        r = record
        for name in ("input_tokens", "output_tokens", "cached_tokens"):
            value = getattr(r, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"usage {name} must be an int of 0 or more, got {value!r}")
        if r.cost_usd is not None and not (math.isfinite(r.cost_usd) and r.cost_usd >= 0):
            raise ValueError(
                f"usage cost_usd must be a finite number of 0 or more, got {r.cost_usd}"
            )
        if r.kind not in USAGE_KINDS:
            raise ValueError(f"usage kind must be one of {', '.join(USAGE_KINDS)}, got {r.kind!r}")
        at = r.at.astimezone(UTC) if r.at.tzinfo is not None else r.at
        row = (
            r.session_id,
            r.turn_id,
            r.run_id,
            r.agent,
            r.model,
            r.owner,
            r.scope_id,
            self.dialect.time(r.at, "at"),
            at.date().isoformat(),
            r.input_tokens,
            r.output_tokens,
            r.cached_tokens,
            r.cost_usd,
            bool(r.estimated),
            int(r.turn_first),
            int(r.agent_first),
            int(r.model_first),
            r.kind,
        )
        insert = Statement(_INSERT_USAGE, row)
        owner_key = _owner_key(r.owner)
        day = (owner_key, row[8], r.input_tokens + r.output_tokens, r.cost_usd or 0.0)
        add = Statement(_ADD_OWNER_DAY, day)
        summed = Statement(
            _ADD_USAGE_DAY,
            (
                row[8],
                r.agent,
                r.model,
                owner_key,
                r.owner,
                r.scope_id,
                r.input_tokens,
                r.output_tokens,
                r.cached_tokens,
                r.cost_usd,
                1,
                int(r.turn_first),
                int(r.agent_first),
                int(r.model_first),
                r.kind,
            ),
        )

        by_session = Statement(
            _ADD_SESSION_DAY,
            (
                r.session_id,
                row[8],
                r.owner,
                r.scope_id,
                r.input_tokens,
                r.output_tokens,
                r.cached_tokens,
                r.cost_usd,
                1,
                int(r.turn_first),
            ),
        )
        return insert, add, summed, by_session

    async def session_spent(self, session_id: str) -> Spend:
        statement = Statement(
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), COALESCE(SUM(cost_usd), 0) "
            "FROM usage_session_days WHERE session_id = ?",
            (session_id,),
        )
        row = (await self._read(lambda: _only(statement))).one()
        return Spend(int(row[0]), float(row[1])) if row is not None else Spend()

    async def owner_spent(self, owner: str | None, day: str) -> Spend:
        statement = Statement(
            "SELECT tokens, cost_usd FROM usage_owner_days WHERE owner_key = ? AND day = ?",
            (_owner_key(owner), day),
        )
        row = (await self._read(lambda: _only(statement))).one()
        return Spend(int(row[0]), float(row[1])) if row is not None else Spend()

    async def usage_report(self, query: UsageQuery) -> tuple[list[UsageRow], UsageRow]:
        q = query
        if q.group_by is not None and q.group_by not in USAGE_GROUPS:
            raise ValueError(
                f"unknown usage group {q.group_by!r}; groups: {', '.join(USAGE_GROUPS)}"
            )
        if isinstance(q.limit, bool) or not 1 <= q.limit <= MAX_USAGE_ROWS:
            raise ValueError(f"limit must be 1 to {MAX_USAGE_ROWS}, got {q.limit!r}")
        d = self.dialect
        since = None if q.since is None else d.time(q.since, "since")  # checks the zone
        until = None if q.until is None else d.time(q.until, "until")
        column = _GROUP_COLUMNS[q.group_by] if q.group_by is not None else None
        flag = _TURNS.get(q.group_by or "", "turn_first")
        parts, values = self._usage_parts(q, since, until, column, flag)
        sums = (
            "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), "
            "COALESCE(SUM(cached_tokens), 0), SUM(cost_usd), COALESCE(SUM(calls), 0), "
            "COALESCE(SUM(turns), 0), COALESCE(SUM(turn_first), 0)"
        )
        if column is None:
            total = Statement(f"SELECT {sums} FROM ({parts}) AS parts", tuple(values))
            summed = (await self._read(lambda: _only(total))).one()
            return [], _usage_row({}, summed or (0, 0, 0, None, 0, 0, 0), turns=6)
        order = (
            "k"
            if q.group_by == "day"
            else "SUM(cost_usd) IS NULL, SUM(cost_usd) DESC, "
            "SUM(input_tokens) + SUM(output_tokens) DESC, k"
        )
        key = q.group_by or ""
        # A session's sums are one row per session and day, so its groups are about as many
        # as the rows: too many to buffer for a window; the range's total is then a plain
        # second pass over the same rows, when the page is full. Every other group's rows
        # are finer than the group: a window over the groups totals them in the same pass.
        window = q.group_by != "session"
        totals = f", {_GROUP_TOTALS}" if window else ""
        grouped = Statement(
            f"SELECT k, {sums}{totals} FROM ({parts}) AS parts GROUP BY k ORDER BY {order} LIMIT ?",
            (*values, q.limit),
        )
        whole = Statement(f"SELECT {sums} FROM ({parts}) AS parts", tuple(values))

        def report() -> Operation[tuple[Result, Row | None]]:
            groups = yield grouped
            if window or len(groups.rows) < q.limit:
                return groups, None
            return groups, (yield whole).one()

        groups, summed = await self._read(report)
        rows = groups.rows
        found = [
            _usage_row({key: None if row[0] is None else str(row[0])}, row[1:8]) for row in rows
        ]
        if summed is not None:
            return found, _usage_row({}, summed, turns=6)
        if window and rows:
            return found, _usage_row({}, rows[0][8:], turns=5)
        return found, _summed(rows)  # every group is on the page: the total is their sum

    def _usage_parts(
        self,
        q: UsageQuery,
        since: object,
        until: object,
        column: str | None,
        flag: str,
    ) -> tuple[str, list[object]]:
        """The calls a report counts, as one relation (`k`, the sums' columns): whole UTC
        days from the daily sums, the partial days at either end from the calls
        themselves (a session is only in the calls)."""
        d = self.dialect
        key = f"{column} AS k, " if column is not None else ""
        who, whose = "", []
        if q.scope_id is not None:
            who, whose = f" AND scope_id = ? AND owner {d.same} ?", [q.scope_id, q.owner]
        columns = "input_tokens, output_tokens, cached_tokens, cost_usd"
        raw = f"SELECT {key}{columns}, 1 AS calls, {flag} AS turns, turn_first FROM usage_records"
        daily = "usage_session_days" if column == "session_id" else "usage_days"
        first, end = _whole_days(q.since, q.until)
        if first is not None and end is not None and first >= end:  # within one day
            ranges, values = _ranges([(since, until)])
            return f"{raw} WHERE {ranges}{who}", [*values, *whose]
        days, day_values = ["1 = 1"], []
        edges: list[tuple[object, object]] = []
        if first is not None:
            days.append("day >= ?")
            day_values.append(first.isoformat())
            start = d.time(datetime.combine(first, datetime.min.time(), UTC), "since")
            if q.since is not None and q.since < datetime.combine(first, datetime.min.time(), UTC):
                edges.append((since, start))
        if end is not None:
            days.append("day < ?")
            day_values.append(end.isoformat())
            stop = datetime.combine(end, datetime.min.time(), UTC)
            if q.until is not None and q.until > stop:
                edges.append((d.time(stop, "until"), until))
        summed = (
            f"SELECT {key}{columns}, calls, {flag} AS turns, turn_first FROM {daily} "
            f"WHERE {' AND '.join(days)}{who}"
        )
        if not edges:
            return summed, [*day_values, *whose]
        ranges, values = _ranges(edges)
        return (
            f"{summed} UNION ALL {raw} WHERE ({ranges}){who}",
            [*day_values, *whose, *values, *whose],
        )


def _ranges(spans: list[tuple[object, object]]) -> tuple[str, list[object]]:
    """`(at >= ? AND at < ?) OR ...` for the spans (None: unbounded at that end)."""
    found, values = [], []
    for low, high in spans:
        parts = ["1 = 1"]
        if low is not None:
            parts.append("at >= ?")
            values.append(low)
        if high is not None:
            parts.append("at < ?")
            values.append(high)
        found.append("(" + " AND ".join(parts) + ")")
    return " OR ".join(found), values


def _whole_days(since: datetime | None, until: datetime | None) -> tuple[date | None, date | None]:
    """The first UTC day wholly at or after `since`, and the day `until` falls in (days
    before it end by `until`); None: unbounded."""
    first = None
    if since is not None:
        moment = since.astimezone(UTC)
        first = moment.date()
        if moment != datetime.combine(first, datetime.min.time(), UTC):
            first += timedelta(days=1)
    end = until.astimezone(UTC).date() if until is not None else None
    return first, end


def _owner_key(owner: str | None) -> str:
    return "-" if owner is None else f"u:{owner}"


def _usage_row(key: dict[str, str | None], sums: Row, turns: int = 5) -> UsageRow:
    cost = sums[3]
    return UsageRow(
        key,
        int(sums[0]),
        int(sums[1]),
        int(sums[2]),
        None if cost is None else float(cost),
        int(sums[4]),
        int(sums[turns]),
    )


def _summed(rows: Sequence[Row]) -> UsageRow:
    """The total of every group's row (`SELECT key, sums...`)."""
    costs = [row[4] for row in rows if row[4] is not None]
    return UsageRow(
        {},
        sum(int(row[1]) for row in rows),
        sum(int(row[2]) for row in rows),
        sum(int(row[3]) for row in rows),
        float(sum(costs)) if costs else None,
        sum(int(row[5]) for row in rows),
        sum(int(row[7]) for row in rows),
    )


class SqlStorage(UsageSql, abc.ABC):
    """`Storage` in SQL. A backend subclass gives `dialect`, opens the database and
    implements `_execute`; everything else is here, once."""

    dialect: ClassVar[Dialect]

    def __init__(self, database: str, migrations: Sequence[Migration]) -> None:
        self._database = database  # for messages and logs: never a password
        self._migrations = tuple(migrations)

    # --- what a backend implements ------------------------------------------

    @abc.abstractmethod
    async def _execute(self, plan: Plan[T], *, write: bool) -> T:
        """Run `plan()`'s statements on one connection and return its value; a write
        in one transaction that commits whole or not at all. Database errors become
        `StorageError`s naming the database; a statement's `exists`/`missing` replace
        the constraint failures they name."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the database; later operations raise `StorageClosedError`. Idempotent."""

    # --- running operations ----------------------------------------------------

    async def _read(self, plan: Plan[T]) -> T:
        return await self._execute(plan, write=False)

    async def _write(self, plan: Plan[T]) -> T:
        # Shielded, so a write that was asked for commits or rolls back on its own terms
        # (even while it waits for a lock): a cancelled turn never loses an approval.
        with anyio.CancelScope(shield=True):
            result = await self._execute(plan, write=True)
        # The caller was perhaps cancelled meanwhile: it gets that, not the result.
        await anyio.lowlevel.checkpoint_if_cancelled()
        return result

    async def _migrated(self) -> None:
        """Migrate a storage just opened; on failure close it and raise."""
        try:
            await self.migrate()
        except BaseException:
            await self.close()
            raise

    # --- migrations ------------------------------------------------------------

    async def migrate(self) -> list[str]:
        migrations = self._migrations
        names = [migration.name for migration in migrations]
        if len(set(names)) != len(names):
            raise ValueError(f"migration names must be unique, got {names}")
        d = self.dialect

        def migrate() -> Operation[tuple[list[Migration], set[str]]]:
            # All pending migrations in one transaction: a database is at one version
            # or the next, never between.
            if d.migration_lock is not None:
                yield Statement(d.migration_lock)
            yield Statement(
                "CREATE TABLE IF NOT EXISTS migrations "
                f"(name TEXT PRIMARY KEY, applied_at {d.time_type} NOT NULL)"
            )
            applied = {str(row[0]) for row in (yield Statement("SELECT name FROM migrations")).rows}
            pending = [migration for migration in migrations if migration.name not in applied]
            for migration in pending:
                for statement in d.statements(migration.sql):
                    yield Statement(statement)
                yield Statement(
                    f"INSERT INTO migrations (name, applied_at) VALUES (?, {d.now})",
                    (migration.name,),
                )
            return pending, applied

        pending, applied = await self._write(migrate)
        for migration in pending:
            logger.info(
                "storage_migrated",
                extra={
                    "event": "storage_migrated",
                    "database": self._database,
                    "migration": migration.name,
                },
            )
        unknown = sorted(applied - set(names))
        if unknown:
            logger.warning(
                "storage_schema_newer",
                extra={
                    "event": "storage_schema_newer",
                    "database": self._database,
                    "migrations": unknown,
                },
            )
        return [migration.name for migration in pending]

    # --- sessions ----------------------------------------------------------------

    async def create_session(self, record: SessionRecord) -> None:
        t = self.dialect.time
        row = (
            record.id,
            record.scope_id,
            record.owner,
            record.root_agent,
            t(record.created_at, "created_at"),
            t(record.updated_at, "updated_at"),
            dump(record.metadata, "metadata"),
        )
        statement = Statement(
            f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({_marks(7)})",
            row,
            exists=RecordExistsError("session", record.id),
        )
        await self._write(lambda: _only(statement))

    async def get_session(self, session_id: str) -> SessionRecord | None:
        statement = Statement(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        row = (await self._read(lambda: _only(statement))).one()
        return None if row is None else self.dialect.rows.session(row)

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
            where, values = f"WHERE scope_id = ? AND owner {self.dialect.same} ?", (scope_id, owner)
        statement = Statement(
            f"SELECT {SESSION_COLUMNS} FROM sessions {where} "
            "ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?",
            (*values, limit, offset),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [self.dialect.rows.session(row) for row in rows]

    async def set_root(self, session_id: str, agent: str) -> None:
        now = self.dialect.time(utc_now(), "now")
        await self._update_session(session_id, "root_agent = ?, updated_at = ?", (agent, now))

    async def touch_session(self, session_id: str) -> None:
        now = self.dialect.time(utc_now(), "now")
        await self._update_session(session_id, "updated_at = ?", (now,))

    async def _update_session(
        self, session_id: str, assignments: str, values: tuple[object, ...]
    ) -> None:
        def update() -> Operation[None]:
            result = yield Statement(
                f"UPDATE sessions SET {assignments} WHERE id = ?", (*values, session_id)
            )
            if result.changed == 0:
                raise RecordNotFoundError("session", session_id)

        await self._write(update)

    async def delete_session(self, session_id: str) -> bool:
        def delete() -> Operation[bool]:
            # Events, runs and pending confirmations go by ON DELETE CASCADE.
            deleted = yield Statement("DELETE FROM sessions WHERE id = ?", (session_id,))
            yield Statement("DELETE FROM turn_leases WHERE session_id = ?", (session_id,))
            return deleted.changed > 0

        return await self._write(delete)

    # --- the event log -------------------------------------------------------------

    async def append_event(
        self,
        session_id: str,
        type: str,
        data: JSONObject,
        *,
        run_id: str | None,
        agent: str | None,
        bundle_version: str | None,
        search_text: str | None = None,
        usage: UsageRecord | None = None,
    ) -> StoredEvent:
        event = NewEvent(type, data, run_id, agent, bundle_version, search_text, usage)
        (stored,) = await self.append_events(session_id, (event,))
        return stored

    async def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[StoredEvent]:
        if not events:
            return []
        # Encoded before the write, so bad data fails the caller and never the transaction.
        encoded = [dump(event.data, f"event {event.type!r} data") for event in events]
        created_at = utc_now()
        created = self.dialect.time(created_at, "now")
        count = len(events)
        texts = [
            (index, index_text(event.search_text))
            for index, event in enumerate(events)
            if event.search_text is not None and event.search_text.strip()
        ]
        spent = [
            statement
            for event in events
            if event.usage is not None
            for statement in self._usage_statements(event.usage)
        ]
        kept = [statement for event in events for statement in self._bookkeeping(session_id, event)]

        def append() -> Operation[int]:
            # One UPDATE both checks the session and reserves `count` seqs; the lock it
            # takes (SQLite's write lock, PostgreSQL's row lock) orders appenders.
            reserved = yield Statement(
                "UPDATE sessions SET last_seq = last_seq + ?, updated_at = ? WHERE id = ? "
                "RETURNING last_seq",
                (count, created, session_id),
            )
            row = reserved.one()
            if row is None:
                raise RecordNotFoundError("session", session_id)
            first = int(row[0]) - count + 1
            yield Statement(
                f"INSERT INTO events ({EVENT_COLUMNS}) VALUES ({_marks(8)})",
                [
                    (
                        session_id,
                        first + index,
                        event.type,
                        event.run_id,
                        event.agent,
                        event.bundle_version,
                        created,
                        text,
                    )
                    for index, (event, text) in enumerate(zip(events, encoded, strict=True))
                ],
                many=True,
            )
            if texts:
                yield Statement(
                    "INSERT INTO event_texts (session_id, seq, text) VALUES (?, ?, ?)",
                    [(session_id, first + index, text) for index, text in texts],
                    many=True,
                )
            for statement in spent:
                _ = yield statement
            for statement in kept:
                yield from _changing(statement)
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

    def _bookkeeping(self, session_id: str, event: NewEvent) -> list[Statement]:
        """The run and lease writes an event carries (`NewEvent.starts_run` and so on)."""
        kept = []
        if event.starts_run is not None:
            kept.append(self._run_start(event.starts_run))
        if event.ends_run is not None:
            kept.append(self._run_end(event.ends_run))
        if event.releases_turn is not None:
            # A lease lost to another holder meanwhile is not this event's: it stays.
            kept.append(_turn_release(session_id, event.releases_turn))
        return kept

    async def list_events(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        statement = Statement(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ? AND seq > ? ORDER BY seq",
            (session_id, after_seq),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [self.dialect.rows.event(row) for row in rows]

    # --- pending confirmations ---------------------------------------------------------

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
            self.dialect.time(c.created_at, "created_at"),
        )
        statement = Statement(
            f"INSERT INTO pending_confirmations ({PENDING_COLUMNS}) VALUES ({_marks(8)})",
            row,
            exists=RecordExistsError("pending confirmation", f"{c.session_id}/{c.call_id}"),
            missing=RecordNotFoundError("session", c.session_id),
        )
        await self._write(lambda: _only(statement))

    async def get_pending(self, session_id: str, call_id: str) -> PendingConfirmation | None:
        statement = Statement(
            f"SELECT {PENDING_COLUMNS} FROM pending_confirmations "
            "WHERE session_id = ? AND call_id = ?",
            (session_id, call_id),
        )
        row = (await self._read(lambda: _only(statement))).one()
        return None if row is None else self.dialect.rows.pending(row)

    async def list_pending(self, session_id: str) -> list[PendingConfirmation]:
        statement = Statement(
            f"SELECT {PENDING_COLUMNS} FROM pending_confirmations WHERE session_id = ? "
            f"ORDER BY created_at, {self.dialect.insertion_order}",
            (session_id,),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [self.dialect.rows.pending(row) for row in rows]

    async def delete_pending(self, session_id: str, call_id: str) -> bool:
        # Only the DELETE that found the row counts it; every other caller, in any
        # process, waits for its lock and then finds the row gone.
        statement = Statement(
            "DELETE FROM pending_confirmations WHERE session_id = ? AND call_id = ?",
            (session_id, call_id),
        )
        return (await self._write(lambda: _only(statement))).changed == 1

    async def list_all_pending(self, limit: int = 100) -> list[PendingConfirmation]:
        check_page(limit, 0)
        statement = Statement(
            f"SELECT {PENDING_COLUMNS} FROM pending_confirmations "
            f"ORDER BY created_at, {self.dialect.insertion_order} LIMIT ?",
            (limit,),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [self.dialect.rows.pending(row) for row in rows]

    # --- automations -------------------------------------------------------------------

    def _automation_row(self, r: AutomationRunRecord) -> tuple[Any, ...]:
        check_status(r.status, AUTOMATION_RUN_STATUSES)
        t = self.dialect.time
        return (
            r.id,
            r.automation,
            r.trigger,
            None if r.slot is None else t(r.slot, "slot"),
            r.delivery_id,
            r.session_id,
            r.status,
            r.done_reason,
            r.error,
            r.reply,
            t(r.created_at, "created_at"),
            None if r.ended_at is None else t(r.ended_at, "ended_at"),
            _dump_deliveries(r.deliveries),
        )

    async def claim_automation_run(self, record: AutomationRunRecord) -> bool:
        # The unique (automation, slot) and (automation, delivery_id) indexes decide: the
        # first INSERT wins in every process; the others find the row there and do nothing.
        statement = Statement(
            f"INSERT INTO automation_runs ({AUTOMATION_RUN_COLUMNS}) VALUES ({_marks(13)}) "
            "ON CONFLICT DO NOTHING",
            self._automation_row(record),
        )
        return (await self._write(lambda: _only(statement))).changed == 1

    async def get_automation_run(self, run_id: str) -> AutomationRunRecord | None:
        statement = Statement(
            f"SELECT {AUTOMATION_RUN_COLUMNS} FROM automation_runs WHERE id = ?", (run_id,)
        )
        row = (await self._read(lambda: _only(statement))).one()
        return None if row is None else self.dialect.rows.automation_run(row)

    async def find_automation_delivery(
        self, automation: str, delivery_id: str
    ) -> AutomationRunRecord | None:
        statement = Statement(
            f"SELECT {AUTOMATION_RUN_COLUMNS} FROM automation_runs "
            "WHERE automation = ? AND delivery_id = ?",
            (automation, delivery_id),
        )
        row = (await self._read(lambda: _only(statement))).one()
        return None if row is None else self.dialect.rows.automation_run(row)

    async def update_automation_run(self, record: AutomationRunRecord) -> None:
        row = self._automation_row(record)
        values = (*row[5:10], *row[11:13], record.id)

        def update() -> Operation[None]:
            result = yield Statement(
                "UPDATE automation_runs SET session_id = ?, status = ?, done_reason = ?, "
                "error = ?, reply = ?, ended_at = ?, deliveries = ? WHERE id = ?",
                values,
            )
            if result.changed == 0:
                raise RecordNotFoundError("automation run", record.id)

        await self._write(update)

    async def list_automation_runs(
        self, automation: str | None = None, *, limit: int = 20, statuses: Sequence[str] = ()
    ) -> list[AutomationRunRecord]:
        check_page(limit, 0)
        where, params = [], []
        if automation is not None:
            where.append("automation = ?")
            params.append(automation)
        if statuses:
            where.append(f"status IN ({_marks(len(statuses))})")
            params.extend(statuses)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        statement = Statement(
            f"SELECT {AUTOMATION_RUN_COLUMNS} FROM automation_runs{clause} "
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, limit),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [self.dialect.rows.automation_run(row) for row in rows]

    async def start_queued_automation_run(self, run_id: str) -> bool:
        statement = Statement(
            "UPDATE automation_runs SET status = 'running' WHERE id = ? AND status = 'queued'",
            (run_id,),
        )
        return (await self._write(lambda: _only(statement))).changed == 1

    async def end_automation_run(
        self,
        ended: AutomationRunRecord,
        *,
        was: AutomationRunStatus,
        holder: str,
        ttl_seconds: float,
        alert: AlertClaim | None = None,
    ) -> AutomationRunRecord | None:
        if ended.ended_at is None:  # the end is what the sweep and the waiters look for
            raise ValueError("an ended automation run has its ended_at")
        check_ttl(ttl_seconds)
        row = self._automation_row(ended)
        counted = ended.status in ("ok", "error")

        def end() -> Operation[AutomationRunRecord | None]:
            deliveries = list(ended.deliveries)
            result = yield Statement(
                "UPDATE automation_runs SET status = ?, done_reason = ?, error = ?, reply = ?, "
                "ended_at = ?, deliveries = ? WHERE id = ? AND status = ?",
                (*row[6:10], *row[11:13], ended.id, was),
            )
            if result.changed == 0:
                return None  # another process ended it first
            failed = ended.status == "error"
            if counted:
                found = (yield self._count_statement(ended.automation, failed)).one()
                failures = int(found[0]) if found is not None else 0
                if failed and alert is not None and failures >= alert.after:
                    claim = self._alert_statement(
                        ended.automation, alert.cooldown_seconds, alert.now
                    )
                    if (yield claim).changed == 1:
                        deliveries.append({**alert.delivery, "consecutive_failures": failures})
            if any(entry.get("status") == "pending" for entry in deliveries):
                yield Statement(
                    "UPDATE automation_runs SET deliveries = ?, delivery_holder = ?, "
                    f"delivery_expires_at = {self.dialect.lease_expiry} WHERE id = ?",
                    (_dump_deliveries(deliveries), holder, float(ttl_seconds), ended.id),
                )
            return dataclasses.replace(ended, deliveries=deliveries)

        return await self._write(end)

    async def due_automation_deliveries(self, limit: int = 20) -> list[AutomationRunRecord]:
        check_page(limit, 0)
        statement = Statement(
            f"SELECT {AUTOMATION_RUN_COLUMNS} FROM automation_runs "
            "WHERE delivery_expires_at IS NOT NULL "
            f"AND delivery_expires_at <= {self.dialect.lease_now} "
            "ORDER BY delivery_expires_at LIMIT ?",
            (limit,),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [self.dialect.rows.automation_run(row) for row in rows]

    async def claim_automation_deliveries(
        self, run_id: str, holder: str, ttl_seconds: float
    ) -> AutomationRunRecord | None:
        check_ttl(ttl_seconds)
        d = self.dialect
        # One statement, as a turn lease: of processes racing for an expired lease the
        # first UPDATE wins; the others re-check the WHERE against its live lease.
        statement = Statement(
            f"UPDATE automation_runs SET delivery_holder = ?, delivery_expires_at = "
            f"{d.lease_expiry} WHERE id = ? AND delivery_expires_at IS NOT NULL "
            f"AND (delivery_expires_at <= {d.lease_now} OR delivery_holder = ?) "
            f"RETURNING {AUTOMATION_RUN_COLUMNS}",
            (holder, float(ttl_seconds), run_id, holder),
        )
        row = (await self._write(lambda: _only(statement))).one()
        return None if row is None else d.rows.automation_run(row)

    async def save_automation_deliveries(
        self,
        run_id: str,
        holder: str,
        deliveries: Sequence[JSONObject],
        ttl_seconds: float | None,
    ) -> bool:
        body = _dump_deliveries(deliveries)
        if ttl_seconds is None:  # done: nothing left to send, nobody holds it
            statement = Statement(
                "UPDATE automation_runs SET deliveries = ?, delivery_holder = NULL, "
                "delivery_expires_at = NULL WHERE id = ? AND delivery_holder = ?",
                (body, run_id, holder),
            )
        else:
            check_ttl(ttl_seconds)
            statement = Statement(
                "UPDATE automation_runs SET deliveries = ?, "
                f"delivery_expires_at = {self.dialect.lease_expiry} "
                "WHERE id = ? AND delivery_holder = ?",
                (body, float(ttl_seconds), run_id, holder),
            )
        return (await self._write(lambda: _only(statement))).changed == 1

    async def latest_automation_slot(self, automation: str) -> datetime | None:
        statement = Statement(
            "SELECT MAX(slot) FROM automation_runs WHERE automation = ?", (automation,)
        )
        row = (await self._read(lambda: _only(statement))).one()
        return None if row is None or row[0] is None else self.dialect.rows.time(row[0])

    async def automation_states(self) -> dict[str, AutomationState]:
        statement = Statement(
            "SELECT automation, paused, failures, alerted_at FROM automation_state"
        )
        rows = (await self._read(lambda: _only(statement))).rows
        time = self.dialect.rows.time
        return {
            row[0]: AutomationState(
                row[0], bool(row[1]), int(row[2]), None if row[3] is None else time(row[3])
            )
            for row in rows
        }

    async def set_automation_paused(self, automation: str, paused: bool) -> None:
        statement = Statement(
            "INSERT INTO automation_state (automation, paused) VALUES (?, ?) "
            "ON CONFLICT (automation) DO UPDATE SET paused = excluded.paused",
            (automation, paused),
        )
        await self._write(lambda: _only(statement))

    def _count_statement(self, automation: str, failed: bool) -> Statement:
        if failed:
            return Statement(
                "INSERT INTO automation_state (automation, failures) VALUES (?, 1) "
                "ON CONFLICT (automation) DO UPDATE "
                "SET failures = automation_state.failures + 1 RETURNING failures",
                (automation,),
            )
        # A success ends the streak, and with it the alert's cooldown.
        return Statement(
            "INSERT INTO automation_state (automation, failures) VALUES (?, 0) "
            "ON CONFLICT (automation) DO UPDATE SET failures = 0, alerted_at = NULL "
            "RETURNING failures",
            (automation,),
        )

    def _alert_statement(
        self, automation: str, cooldown_seconds: float, now: datetime
    ) -> Statement:
        t = self.dialect.time
        since = t(now - timedelta(seconds=cooldown_seconds), "now")
        return Statement(
            "UPDATE automation_state SET alerted_at = ? "
            "WHERE automation = ? AND (alerted_at IS NULL OR alerted_at <= ?)",
            (t(now, "now"), automation, since),
        )

    async def count_automation_outcome(self, automation: str, failed: bool) -> int:
        statement = self._count_statement(automation, failed)
        row = (await self._write(lambda: _only(statement))).one()
        return int(row[0]) if row is not None else 0

    async def claim_automation_alert(
        self, automation: str, cooldown_seconds: float, now: datetime
    ) -> bool:
        statement = self._alert_statement(automation, cooldown_seconds, now)
        return (await self._write(lambda: _only(statement))).changed == 1

    # --- runs ------------------------------------------------------------------------

    async def start_run(self, record: AgentRunRecord) -> None:
        statement = self._run_start(record)
        await self._write(lambda: _only(statement))

    def _run_start(self, record: AgentRunRecord) -> Statement:
        r = record
        check_status(r.status, RUN_STATUSES)
        if r.depth < 0:
            raise ValueError(f"run {r.id!r}: depth must be 0 or more, got {r.depth}")
        t = self.dialect.time
        row = (
            r.id,
            r.session_id,
            r.parent_run_id,
            r.depth,
            r.agent,
            r.label,
            t(r.started_at, "started_at"),
            None if r.ended_at is None else t(r.ended_at, "ended_at"),
            r.status,
            dump(r.usage, "usage"),
            r.error,
        )
        return Statement(
            f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ({_marks(11)})",
            row,
            exists=RecordExistsError("run", r.id),
            missing=RecordNotFoundError("session", r.session_id),
        )

    async def end_run(
        self,
        run_id: str,
        status: RunStatus,
        usage: JSONObject,
        error: str | None = None,
        ended_at: datetime | None = None,
    ) -> None:
        statement = self._run_end(RunEnd(run_id, status, usage, error, ended_at))
        await self._write(lambda: _changing(statement))

    def _run_end(self, end: RunEnd) -> Statement:
        check_status(end.status, ("ok", "error", "partial"))
        ended = self.dialect.time(end.ended_at or utc_now(), "ended_at")
        return Statement(
            "UPDATE runs SET status = ?, usage = ?, error = ?, ended_at = ? WHERE id = ?",
            (end.status, dump(end.usage, "usage"), end.error, ended, end.run_id),
            missing=RecordNotFoundError("run", end.run_id),
        )

    async def list_runs(self, session_id: str) -> list[AgentRunRecord]:
        statement = Statement(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ? "
            f"ORDER BY started_at, {self.dialect.insertion_order}",
            (session_id,),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [self.dialect.rows.run(row) for row in rows]

    async def interrupt_runs(
        self, session_id: str, error: str, ended_at: datetime | None = None
    ) -> list[AgentRunRecord]:
        d = self.dialect
        ended = d.time(ended_at or utc_now(), "ended_at")
        # Read first: a turn start asks every time, and nearly always finds nothing to write.
        found = Statement(_RUNNING + " LIMIT 1", (session_id,))
        if (await self._read(lambda: _only(found))).one() is None:
            return []

        def close() -> Operation[list[Row]]:
            running = yield Statement(
                f"{_RUNNING} ORDER BY started_at, {d.insertion_order}{d.lock_rows}", (session_id,)
            )
            if running.rows:
                yield Statement(
                    "UPDATE runs SET status = 'interrupted', error = ?, ended_at = ? WHERE id = ?",
                    [(error, ended, row[0]) for row in running.rows],
                    many=True,
                )
            return list(running.rows)  # as they were, before the update

        return [d.rows.run(row) for row in await self._write(close)]

    # --- turn leases -------------------------------------------------------------------

    async def try_acquire_turn(
        self,
        session_id: str,
        holder: str,
        ttl_seconds: float,
        turn: JSONObject | None = None,
        *,
        take_over: bool = False,
    ) -> bool:
        check_ttl(ttl_seconds)
        d = self.dialect
        note = None if turn is None else dump(turn, "turn")
        # One statement: insert a free lease, or take over one that has expired (or
        # that this holder already has); a live lease of another holder makes the
        # update's WHERE false and nothing returns. Concurrent contenders wait for
        # the winner's lock and re-check the WHERE against its lease, which is live.
        # The clock is read as the statement runs: time spent queued does not count.
        # An expired lease with a turn's note is a turn to continue: only `take_over`.
        expired = f"turn_leases.expires_at <= {d.lease_now}"
        if not take_over:
            expired += " AND turn_leases.turn IS NULL"
        statement = Statement(
            "INSERT INTO turn_leases (session_id, holder, expires_at, turn) "
            f"VALUES (?, ?, {d.lease_expiry}, ?) "
            "ON CONFLICT (session_id) DO UPDATE "
            "SET holder = excluded.holder, expires_at = excluded.expires_at, "
            "turn = COALESCE(excluded.turn, turn_leases.turn) "
            f"WHERE ({expired}) "
            "OR turn_leases.holder = excluded.holder "
            "RETURNING holder",
            (session_id, holder, float(ttl_seconds), note),
        )
        return (await self._write(lambda: _only(statement))).one() is not None

    async def expired_turns(self, limit: int = 20) -> list[ExpiredTurn]:
        statement = Statement(
            "SELECT session_id, holder, turn FROM turn_leases "
            f"WHERE turn IS NOT NULL AND expires_at <= {self.dialect.lease_now} "
            "ORDER BY expires_at LIMIT ?",
            (limit,),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [ExpiredTurn(str(row[0]), str(row[1]), load(str(row[2]))) for row in rows]

    async def renew_turn(self, session_id: str, holder: str, ttl_seconds: float) -> bool:
        check_ttl(ttl_seconds)
        statement = Statement(
            f"UPDATE turn_leases SET expires_at = {self.dialect.lease_expiry} "
            "WHERE session_id = ? AND holder = ?",
            (float(ttl_seconds), session_id, holder),
        )
        return (await self._write(lambda: _only(statement))).changed == 1

    async def release_turn(self, session_id: str, holder: str) -> bool:
        statement = _turn_release(session_id, holder)
        return (await self._write(lambda: _only(statement))).changed == 1

    # --- the turn queue ------------------------------------------------------------------

    async def enqueue_turn(self, turn: QueuedTurn) -> None:
        d = self.dialect
        row = (
            turn.turn_id,
            turn.session_id,
            dump(turn.request, "request"),
            dump(turn.caller, "caller"),
            d.time(turn.created_at, "created_at"),
        )
        statement = Statement(
            "INSERT INTO turn_queue (turn_id, session_id, request, caller, state, created_at, "
            f"ready_at) VALUES (?, ?, ?, ?, 'queued', ?, {d.lease_now})",
            row,
            exists=RecordExistsError("queued turn", turn.turn_id),
        )
        await self._write(lambda: _only(statement))

    async def claim_turn(self, worker: str, ttl_seconds: float) -> QueuedTurn | None:
        check_ttl(ttl_seconds)
        d = self.dialect
        ready = (
            f"((state = 'queued' AND ready_at <= {d.lease_now}) "
            f"OR (state = 'claimed' AND claimed_until <= {d.lease_now}))"
        )
        # Read first: an idle worker asks often and nearly always finds nothing, and a
        # SQLite write transaction would hold the database each time.
        probe = Statement(f"SELECT turn_id FROM turn_queue WHERE {ready} LIMIT 1")
        if (await self._read(lambda: _only(probe))).one() is None:
            return None
        statement = Statement(
            "UPDATE turn_queue SET state = 'claimed', claimed_by = ?, "
            f"claimed_until = {d.lease_expiry}, attempts = attempts + 1 "
            f"WHERE turn_id = (SELECT turn_id FROM turn_queue WHERE {ready} "
            f"ORDER BY created_at LIMIT 1{d.skip_locked}) "
            f"RETURNING {_QUEUE_COLUMNS}",
            (worker, float(ttl_seconds)),
        )
        row = (await self._write(lambda: _only(statement))).one()
        return None if row is None else self._queued(row)

    async def defer_turn(self, turn_id: str, worker: str, seconds: float) -> bool:
        check_ttl(seconds)
        statement = Statement(
            f"UPDATE turn_queue SET state = 'queued', ready_at = {self.dialect.lease_expiry}, "
            "claimed_by = NULL, claimed_until = NULL "
            "WHERE turn_id = ? AND state = 'claimed' AND claimed_by = ?",
            (float(seconds), turn_id, worker),
        )
        return (await self._write(lambda: _only(statement))).changed == 1

    async def mark_turn(self, turn_id: str, state: QueueState) -> None:
        if state not in ("started", "done"):
            raise ValueError(f"a turn is marked started or done, not {state!r}")
        column = "started_at" if state == "started" else "ended_at"
        statement = Statement(
            f"UPDATE turn_queue SET state = ?, {column} = COALESCE({column}, "
            f"{self.dialect.now}) WHERE turn_id = ?",
            (state, turn_id),
        )
        await self._write(lambda: _only(statement))

    async def get_queued_turn(self, turn_id: str) -> QueuedTurn | None:
        statement = Statement(
            f"SELECT {_QUEUE_COLUMNS} FROM turn_queue WHERE turn_id = ?", (turn_id,)
        )
        row = (await self._read(lambda: _only(statement))).one()
        return None if row is None else self._queued(row)

    async def waiting_turns(self, session_id: str) -> list[QueuedTurn]:
        statement = Statement(
            f"SELECT {_QUEUE_COLUMNS} FROM turn_queue WHERE session_id = ? "
            "AND state IN ('queued', 'claimed') ORDER BY created_at",
            (session_id,),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [self._queued(row) for row in rows]

    async def queue_counts(self) -> dict[str, int]:
        statement = Statement("SELECT state, COUNT(*) FROM turn_queue GROUP BY state")
        rows = (await self._read(lambda: _only(statement))).rows
        return {str(row[0]): int(row[1]) for row in rows}

    def _queued(self, row: Row) -> QueuedTurn:
        rows = self.dialect.rows
        return QueuedTurn(
            str(row[0]),
            str(row[1]),
            load(str(row[2])),
            load(str(row[3])),
            row[4],
            rows.time(row[5]),
            None if row[6] is None else rows.time(row[6]),
            None if row[7] is None else rows.time(row[7]),
            int(row[8]),
        )

    # --- store documents -----------------------------------------------------------------

    def _live(self, prefix: str = "") -> str:
        """The condition of a document that has not expired, read on the database's clock."""
        return f"({prefix}expires_at IS NULL OR {prefix}expires_at > {self.dialect.now})"

    async def get_document(self, scope_id: str, store: str, key: str) -> StoreDocument | None:
        statement = Statement(
            f"SELECT {DOCUMENT_COLUMNS} FROM store_documents "
            f"WHERE {_DOCUMENT_KEY} AND {self._live()}",
            (scope_id, store, key),
        )
        row = (await self._read(lambda: _only(statement))).one()
        return None if row is None else self.dialect.rows.document(row)

    async def query_documents(
        self, scope_id: str, store: str, query: DocumentQuery
    ) -> DocumentPage:
        d = self.dialect
        filters, sort, descending = check_query(query)
        conditions, values = d.document_filters(filters)
        where = " AND ".join(["scope_id = ?", "store = ?", self._live(), *conditions])
        order, order_values = d.document_order(sort, descending)
        counting = Statement(
            f"SELECT COUNT(*) FROM store_documents WHERE {where}", [scope_id, store, *values]
        )
        page = Statement(
            f"SELECT {DOCUMENT_COLUMNS} FROM store_documents WHERE {where} "
            f"ORDER BY {order} LIMIT ? OFFSET ?",
            [scope_id, store, *values, *order_values, query.limit, query.offset],
        )

        def run() -> Operation[DocumentPage]:
            counted = (yield counting).one()
            rows = (yield page).rows
            total = int(counted[0]) if counted is not None else 0
            return DocumentPage([d.rows.document(row) for row in rows], total)

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
        d = self.dialect
        ids = (scope_id, store, key)
        lifetime = None if ttl_seconds is None else timedelta(seconds=ttl_seconds)

        def put() -> Operation[StoreDocument]:
            while True:
                now = d.rows.time((yield Statement(f"SELECT {d.now}")).rows[0][0])
                expires = None if lifetime is None else now + lifetime
                times = (
                    d.time(now, "now"),
                    None if expires is None else d.time(expires, "expires"),
                )
                found = yield Statement(
                    "SELECT version, created_at, expires_at FROM store_documents "
                    f"WHERE {_DOCUMENT_KEY}{d.lock_rows}",
                    ids,
                )
                row = found.one()
                if row is not None and row[2] is not None and d.rows.time(row[2]) <= now:
                    # An expired document is gone, its history with it (ON DELETE CASCADE).
                    yield Statement(f"DELETE FROM store_documents WHERE {_DOCUMENT_KEY}", ids)
                    row = None
                if row is None:
                    inserted = yield Statement(
                        f"INSERT INTO store_documents ({DOCUMENT_COLUMNS}) "
                        f"VALUES (?, ?, ?, {d.document_body}, 1, ?, ?, ?) "
                        "ON CONFLICT DO NOTHING RETURNING version",
                        (*ids, text, times[0], times[0], times[1]),
                    )
                    if inserted.one() is None:
                        continue  # a concurrent put created it first: lock it and replace it
                    return StoreDocument(*ids, load(text), 1, now, now, expires)
                version = int(row[0]) + 1
                yield from _keep_history(ids, version, keep_versions)
                yield Statement(
                    f"UPDATE store_documents SET body = {d.document_body}, version = ?, "
                    f"updated_at = ?, expires_at = ? WHERE {_DOCUMENT_KEY}",
                    (text, version, *times, *ids),
                )
                created = d.rows.time(row[1])
                return StoreDocument(*ids, load(text), version, created, now, expires)

        return await self._write(put)

    async def delete_document(self, scope_id: str, store: str, key: str) -> bool:
        statement = Statement(
            f"DELETE FROM store_documents WHERE {_DOCUMENT_KEY} AND {self._live()}",
            (scope_id, store, key),
        )
        return (await self._write(lambda: _only(statement))).changed == 1

    async def document_history(self, scope_id: str, store: str, key: str) -> list[StoreDocument]:
        statement = Statement(
            "SELECT h.scope_id, h.store, h.key, h.body, h.version, h.created_at, "
            "h.updated_at, NULL FROM store_history h JOIN store_documents d "
            "USING (scope_id, store, key) "
            f"WHERE d.scope_id = ? AND d.store = ? AND d.key = ? AND {self._live('d.')} "
            "ORDER BY h.version DESC",
            (scope_id, store, key),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [self.dialect.rows.document(row) for row in rows]

    async def purge_expired(self) -> int:
        statement = Statement(
            "DELETE FROM store_documents "
            f"WHERE expires_at IS NOT NULL AND expires_at <= {self.dialect.now}"
        )
        return max((await self._write(lambda: _only(statement))).changed, 0)

    # --- memory and search -----------------------------------------------------------

    async def add_memory(
        self, entry: MemoryEntry, *, max_entries: int, max_chars: int
    ) -> MemoryUsage:
        check_memory(entry, max_entries, max_chars)
        d = self.dialect
        who = _owner_values(entry.agent, entry.owner)
        row = (entry.id, *who, entry.text, d.time(entry.created_at, "created_at"))

        def add() -> Operation[MemoryUsage]:
            if d.owner_lock is not None:
                yield Statement(d.owner_lock, (json.dumps(who),))
            found = (
                yield Statement(
                    "SELECT COUNT(*), COALESCE(SUM(LENGTH(text)), 0) FROM memory_entries "
                    f"WHERE {_MEMORY_OWNER}",
                    who,
                )
            ).one()
            entries, chars = (int(found[0]), int(found[1])) if found is not None else (0, 0)
            if entries + 1 > max_entries or chars + len(entry.text) > max_chars:
                return MemoryUsage(entries, chars, added=False)
            yield Statement(
                f"INSERT INTO memory_entries ({MEMORY_COLUMNS}) VALUES ({_marks(7)})",
                row,
                exists=RecordExistsError("memory entry", entry.id),
            )
            return MemoryUsage(entries + 1, chars + len(entry.text))

        return await self._write(add)

    async def list_memory(
        self,
        agent: str,
        *,
        kind: MemoryKind | None = None,
        scope_id: str | None = None,
        owner: str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[MemoryEntry]:
        check_page(limit, offset)
        conditions, values = ["agent = ?"], [agent]
        for column, value in (("kind", kind), ("scope_id", scope_id), ("owner", owner)):
            if value is not None:
                conditions.append(f"{column} = ?")
                values.append(value)
        statement = Statement(
            f"SELECT {MEMORY_COLUMNS} FROM memory_entries WHERE {' AND '.join(conditions)} "
            "ORDER BY n LIMIT ? OFFSET ?",
            (*values, limit, offset),
        )
        rows = (await self._read(lambda: _only(statement))).rows
        return [self.dialect.rows.memory(row) for row in rows]

    async def get_memory(self, entry_id: str) -> MemoryEntry | None:
        statement = Statement(
            f"SELECT {MEMORY_COLUMNS} FROM memory_entries WHERE id = ?", (entry_id,)
        )
        row = (await self._read(lambda: _only(statement))).one()
        return None if row is None else self.dialect.rows.memory(row)

    async def delete_memory(
        self, entry_id: str, *, agent: str | None = None, owner: MemoryOwner | None = None
    ) -> bool:
        conditions, values = ["id = ?"], [entry_id]
        if agent is not None:
            conditions.append("agent = ?")
            values.append(agent)
        if owner is not None:
            conditions.append("kind = ? AND scope_id = ? AND owner = ?")
            values.extend((owner.kind, owner.scope_id, owner.owner))
        statement = Statement(
            f"DELETE FROM memory_entries WHERE {' AND '.join(conditions)}", values
        )
        return (await self._write(lambda: _only(statement))).changed == 1

    async def search_memory(
        self, agent: str, owner: MemoryOwner, query: str, *, limit: int = 10
    ) -> list[MemoryMatch]:
        check_search(query, limit)
        d = self.dialect
        words = d.search_words(index_text(query))
        if words is None:
            return []
        statement = Statement(*d.memory_matches(words, agent, owner, limit))
        rows = (await self._read(lambda: _only(statement))).rows
        return [MemoryMatch(d.rows.memory(row), str(row[7])) for row in rows]

    async def search_sessions(
        self,
        scope_id: str,
        owner: str | None,
        query: str,
        *,
        limit: int = 10,
        exclude_session: str | None = None,
    ) -> list[SessionMatch]:
        check_search(query, limit)
        d = self.dialect
        words = d.search_words(index_text(query))
        if words is None:
            return []
        if d.index_pending:
            pending = [Statement(sql, ()) for sql in d.index_pending]
            await self._write(lambda: _each(pending))
        asked = (words, scope_id, owner, exclude_session or "", limit)
        window = None if d.session_window is None else Statement(*d.session_window(*asked))
        matches = Statement(*d.session_matches(*asked))

        def search() -> Operation[Sequence[Row]]:
            if window is not None:
                rows = (yield window).rows
                # Enough matches, or the window held every match of everyone: it stands.
                if len(rows) == limit or (rows and int(rows[0][4]) < d.search_window):
                    return rows
            return (yield matches).rows

        rows = await self._read(search)
        return [
            SessionMatch(str(row[0]), str(row[1]), d.rows.time(row[2]), str(row[3])) for row in rows
        ]


_MEMORY_OWNER = "agent = ? AND kind = ? AND scope_id = ? AND owner = ?"


def _owner_values(agent: str, owner: MemoryOwner) -> tuple[str, str, str, str]:
    return (agent, owner.kind, owner.scope_id, owner.owner)


def _keep_history(ids: tuple[str, str, str], version: int, keep: int) -> Operation[None]:
    """Before a document's version `version` replaces the current one: keep the current
    one in its history when the store keeps any, and trim the history to `keep`."""
    if keep > 0:
        yield Statement(
            "INSERT INTO store_history "
            "(scope_id, store, key, version, body, created_at, updated_at) "
            "SELECT scope_id, store, key, version, body, created_at, updated_at "
            f"FROM store_documents WHERE {_DOCUMENT_KEY}",
            ids,
        )
    yield Statement(
        f"DELETE FROM store_history WHERE {_DOCUMENT_KEY} AND version < ?",
        (*ids, version - keep),
    )


__all__ = ["Dialect", "Operation", "Plan", "Result", "SqlStorage", "Statement"]
