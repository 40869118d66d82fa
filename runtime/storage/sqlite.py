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

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import anyio.lowlevel
import anyio.to_thread

from runtime._logs import logger
from runtime.exceptions import StorageClosedError, StorageError
from runtime.storage._rows import Decoders
from runtime.storage._sql import Dialect, Filters, Operation, Plan, Result, SqlStorage, Statement
from runtime.storage._values import iso, load
from runtime.storage.migrations import SQLITE_MIGRATIONS, Migration
from runtime.storage.records import FilterValue, MemoryOwner, utc_now

T = TypeVar("T")

BUSY_TIMEOUT_SECONDS = 10.0
"""How long an operation waits for another process's write lock before failing."""
WAL_CHECKPOINT_PAGES = 4000
"""The WAL's length, in pages, at which a commit checkpoints it into the database file."""
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

    async def _write(self, plan: Plan[T]) -> T:
        # The first try is synchronous (nothing can cancel it half-way), so it needs no
        # shield; only a write that must wait for another process's lock is shielded
        # while it waits, as `SqlStorage._write` does. A turn makes ~20 writes, nearly
        # all taking the first try: this skips a cancel scope (~4 µs) for each.
        done, result = self._try(plan, True)
        if not done:
            with anyio.CancelScope(shield=True):
                result = await self._execute(plan, write=True)
        # The caller was perhaps cancelled meanwhile: it gets that, not the result.
        await anyio.lowlevel.checkpoint_if_cancelled()
        return result

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
        # A checkpoint copies each page the WAL holds once, however often it was written:
        # a turn rewrites the same few (its session's row, the day's sums), so checkpoints
        # four times rarer than SQLite's default copy them a quarter as often (~2% of a
        # turn's CPU), for a WAL of up to 16 MB.
        connection.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
        connection.execute("PRAGMA foreign_keys = ON")
        # Set up on a worker thread, where SQLite's busy handler may sleep (the connect
        # timeout); from now on a locked database is reported at once and `_execute` waits.
        connection.execute("PRAGMA busy_timeout = 0")
        connection.create_function("amodal_now", 0, _now_text)
        connection.create_function("amodal_clock", 0, time.time)
        connection.create_function("amodal_search_key", -1, search_key, deterministic=True)
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


# --- full-text search: FTS5 ----------------------------------------------------

STOP_WORDS = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what which
    who whom this that these those am is are was were be been being have has had having do
    does did doing a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on
    off over under again further then once here there when where why how all any both each
    few more most other some such no nor not only own same so than too very s t can will
    just don should now""".split()
)
"""English words a search leaves out, as PostgreSQL's `english` configuration does (its
Snowball list): they are in nearly every message, so they find everything and rank
nothing, and scoring them reads the whole index."""

_SEARCH_TERM = re.compile(r'(-?)"([^"]*)"?|(\S+)')
_WORD = re.compile(r"\w")


def _search_words(query: str) -> str | None:
    """A websearch-style query (as PostgreSQL's `websearch_to_tsquery` reads one) in FTS5's
    syntax: words and "phrases" all required, `or` between two alternatives, `-word` left
    out, stop words dropped. Every term is quoted, so nothing a person types is FTS5
    syntax."""
    parts: list[str] = []
    for negated, phrase, word in _SEARCH_TERM.findall(query):
        term = phrase if phrase or not word else word
        if word and word.startswith("-"):
            negated, term = "-", word.lstrip("-")
        if word.lower() == "or" and not negated:
            if parts and parts[-1] not in ("AND", "OR", "NOT"):
                parts.append("OR")
            continue
        term = " ".join(word for word in term.split() if word.lower() not in STOP_WORDS)
        if not _WORD.search(term):
            continue
        if negated and not parts:
            continue  # FTS5's NOT needs something before it
        if parts and parts[-1] not in ("OR",):
            parts.append("NOT" if negated else "AND")
        parts.append('"' + term.replace('"', '""') + '"')
    while parts and parts[-1] in ("AND", "OR", "NOT"):
        parts.pop()
    return " ".join(parts) or None


SEARCH_WINDOW = 200
"""How many of the newest matches a search ranks: FTS5 finds them in rowid order without
scoring the rest, so a word that is in every message costs about what a rare one does (a
person with more matching history than this finds the best of their newest)."""


def search_key(*parts: object) -> str:
    """The one token that names an owner in an index's `who` column (registered on every
    connection as `amodal_search_key`): a hash, so no two owners share one and no owner's
    name or case folding can make them."""
    digest = hashlib.blake2b(json.dumps(parts).encode(), digest_size=12).hexdigest()
    return f"k{digest}"


def _owned(key: str, words: str) -> str:
    # Column filters: the owner's token in `who`, the person's words in `text` only.
    return f'who : "{key}" AND text : ({words})'


# bm25 with the `who` column weighted 0: every candidate has the same owner token.
_BEST = """
    best AS (
        SELECT w.n, w.score FROM (
            SELECT rowid AS n, bm25({table}, 1.0, 0.0) AS score FROM {table}
            WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT {window}
        ) AS w {keep} ORDER BY w.score, w.n DESC LIMIT ?
    )
"""
_SNIPPET = "'[', ']', '…', 16"
_MEMORY_MATCHES = f"""
    WITH {_BEST.format(table="memory_search", window=SEARCH_WINDOW, keep="")}
    SELECT m.id, m.agent, m.kind, m.scope_id, m.owner, m.text, m.created_at,
           snippet(memory_search, 0, {_SNIPPET})
    FROM memory_search
    JOIN best ON best.n = memory_search.rowid
    JOIN memory_entries m ON m.n = memory_search.rowid
    WHERE memory_search MATCH ? AND m.agent = ? AND m.kind = ? AND m.scope_id = ?
      AND m.owner = ?
    ORDER BY best.score, m.n
"""
_SESSION_BEST = _BEST.format(
    table="event_search",
    window=SEARCH_WINDOW,
    keep="JOIN event_texts kept ON kept.n = w.n WHERE kept.session_id <> ?",
)
_SESSION_MATCHES = f"""
    WITH {_SESSION_BEST}
    SELECT t.session_id, COALESCE(e.agent, s.root_agent), e.created_at,
           snippet(event_search, 0, {_SNIPPET})
    FROM event_search
    JOIN best ON best.n = event_search.rowid
    JOIN event_texts t ON t.n = event_search.rowid
    JOIN sessions s ON s.id = t.session_id
    JOIN events e ON e.session_id = t.session_id AND e.seq = t.seq
    WHERE event_search MATCH ? AND s.scope_id = ? AND s.owner IS ? AND s.id <> ?
    ORDER BY best.score, t.n DESC
"""


# First try: the newest matches of everyone, the owner's kept (no owner token: reading a
# large owner's token list costs more than the whole window).
_SESSION_WINDOW = f"""
    WITH newest AS (
        SELECT rowid AS n, bm25(event_search, 1.0, 0.0) AS score FROM event_search
        WHERE event_search MATCH ? ORDER BY rowid DESC LIMIT {SEARCH_WINDOW}
    ),
    best AS (
        SELECT w.n, w.score FROM newest AS w
        JOIN event_texts kept ON kept.n = w.n
        JOIN sessions ks ON ks.id = kept.session_id
        WHERE ks.scope_id = ? AND ks.owner IS ? AND ks.id <> ?
        ORDER BY w.score, w.n DESC LIMIT ?
    )
    SELECT t.session_id, COALESCE(e.agent, s.root_agent), e.created_at,
           snippet(event_search, 0, {_SNIPPET}), (SELECT COUNT(*) FROM newest)
    FROM event_search
    JOIN best ON best.n = event_search.rowid
    JOIN event_texts t ON t.n = event_search.rowid
    JOIN sessions s ON s.id = t.session_id
    JOIN events e ON e.session_id = t.session_id AND e.seq = t.seq
    WHERE event_search MATCH ?
    ORDER BY best.score, t.n DESC
"""


_INDEX_PENDING = (
    # Who may find each text (its session's scope and owner) is kept with it: the index's
    # `delete` must be given the values it indexed.
    """
    UPDATE event_texts SET who = (
        SELECT amodal_search_key(scope_id, owner) FROM sessions WHERE id = event_texts.session_id
    ) WHERE indexed = 0
    """,
    "INSERT INTO event_search (rowid, text, who) SELECT n, text, who FROM event_texts "
    "WHERE indexed = 0",
    "UPDATE event_texts SET indexed = 1 WHERE indexed = 0",
)
"""Puts the texts written since the last search into the index, in one segment (m015)."""


def _session_window(
    words: str, scope_id: str, owner: str | None, exclude: str, limit: int
) -> tuple[str, list[Any]]:
    match = f"text : ({words})"
    return _SESSION_WINDOW, [match, scope_id, owner, exclude, limit, match]


def _memory_matches(
    words: str, agent: str, owner: MemoryOwner, limit: int
) -> tuple[str, list[Any]]:
    match = _owned(search_key(agent, owner.kind, owner.scope_id, owner.owner), words)
    return _MEMORY_MATCHES, [match, limit, match, agent, owner.kind, owner.scope_id, owner.owner]


def _session_matches(
    words: str, scope_id: str, owner: str | None, exclude: str, limit: int
) -> tuple[str, list[Any]]:
    match = _owned(search_key(scope_id, owner), words)
    return _SESSION_MATCHES, [match, exclude, limit, match, scope_id, owner, exclude]


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
    skip_locked="",
    document_body="?",
    migration_lock=None,  # BEGIN IMMEDIATE keeps two processes from migrating at once
    statements=_statements,
    document_filters=_filters,
    document_order=_order,
    search_words=_search_words,
    memory_matches=_memory_matches,
    session_matches=_session_matches,
    session_window=_session_window,
    search_window=SEARCH_WINDOW,
    index_pending=_INDEX_PENDING,
    owner_lock=None,  # BEGIN IMMEDIATE holds the whole database
)
SqliteStorage.dialect = SQLITE

__all__ = [
    "BUSY_TIMEOUT_SECONDS",
    "SEARCH_WINDOW",
    "SQLITE",
    "STOP_WORDS",
    "SqliteStorage",
    "search_key",
]
