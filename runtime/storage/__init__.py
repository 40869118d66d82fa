"""Durable state: sessions and their event logs, pending confirmations, runs, turn leases,
and the documents of stores.

`Storage` is the one interface the rest of the runtime talks to; a backend is a
family member that implements it (`runtime.storage.sqlite`, the embedded
default, and `runtime.storage.postgres` with the `postgres` extra). Both must
pass `tests/storage/`, so every promise a caller may rely on is written on the
Protocol's methods below.

Storage knows nothing about prompts, agents, entity schemas or the turn loop: it
keeps records and JSON payloads (`data`, `state`, `usage`, `metadata`, documents)
exactly as given. Proposals (`propose_source_change`) are session events.

Errors are the `StorageError` family of `runtime.exceptions` (re-exported here).

Invalid arguments (a naive datetime, an unknown run status, data that is not
JSON) raise `ValueError`/`TypeError` before anything is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from runtime.exceptions import (
    RecordExistsError,
    RecordNotFoundError,
    StorageClosedError,
    StorageError,
    UnsupportedDatabaseError,
)

JSONObject = dict[str, Any]
"""A JSON object as Python values: str keys; str, int, float, bool, None, list, dict values."""

RunStatus = Literal["running", "ok", "error", "partial", "interrupted"]
RUN_STATUSES: tuple[RunStatus, ...] = ("running", "ok", "error", "partial", "interrupted")

DATA_DIR_ENV = "AMODAL_DATA_DIR"
DATABASE_FILE = "amodal.db"

MAX_QUERY_LIMIT = 100
"""The most documents one `query_documents` call returns."""

FilterValue = str | int | float | bool | None
"""What a query filter compares a top-level field with (null: the field is null or absent)."""


# --- records ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One conversation. `root_agent` is "main" for an unscoped chat.

    `owner` is the user id from the caller's claims (None for an operator or an
    anonymous caller); the storage does not check scope or owner, callers do.
    """

    id: str
    scope_id: str
    owner: str | None
    root_agent: str
    created_at: datetime
    updated_at: datetime
    metadata: JSONObject = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append; the storage gives it its `seq` and `created_at`."""

    type: str
    data: JSONObject
    run_id: str | None
    agent: str | None
    bundle_version: str | None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One entry of a session's append-only log; `seq` is 1, 2, 3, ... per session."""

    session_id: str
    seq: int
    type: str
    run_id: str | None
    agent: str | None
    bundle_version: str | None
    created_at: datetime
    data: JSONObject


@dataclass(frozen=True, slots=True)
class PendingConfirmation:
    """A tool call waiting for a person's approval; `state` is what the loop needs to resume."""

    session_id: str
    call_id: str
    run_id: str
    agent: str
    tool: str
    arguments: JSONObject
    state: JSONObject
    created_at: datetime


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One run of an agent (the root run or a specialist): the delegation tree's node."""

    id: str
    session_id: str
    parent_run_id: str | None
    depth: int
    agent: str
    label: str
    started_at: datetime
    ended_at: datetime | None = None
    status: RunStatus = "running"
    usage: JSONObject = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StoreDocument:
    """One version of a store document in one scope.

    `version` counts the puts of the document (1 for the first); `created_at` is
    its first put, `updated_at` the put of this version; `expires_at` is None for
    a store without ttl.
    """

    scope_id: str
    store: str
    key: str
    data: JSONObject
    version: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DocumentQuery:
    """Which documents of a store `query_documents` returns, in what order.

    `filters`: top-level field -> value, all equal (JSON equality: 1 equals 1.0,
    a string never equals a number; None matches a null or absent field).
    `sort`: "field" ascending or "-field" descending (strings by code point,
    numbers by value, false before true; documents without a value last either
    way), ties and the default order by key.
    """

    filters: Mapping[str, FilterValue] = field(default_factory=dict)
    sort: str | None = None
    limit: int = 20
    offset: int = 0


@dataclass(frozen=True, slots=True)
class DocumentPage:
    """A page of a query: the documents, and how many match in all (ignoring limit/offset)."""

    documents: list[StoreDocument]
    total: int


def utc_now() -> datetime:
    """The current time as an aware UTC datetime, the only kind the storage accepts."""
    return datetime.now(UTC)


# --- the interface ----------------------------------------------------------


class Storage(Protocol):
    """What the runtime needs from a database. Every method is safe to call concurrently.

    Promises every backend keeps:
    - Writes are shielded from cancellation: a write that was asked for commits
      (or fails) as a whole even if the awaiting task is cancelled meanwhile; the
      cancelled caller then gets its cancellation instead of the result.
    - Several storages may be open on one database (several processes or
      servers); every promise below holds across them, not just inside one.
    - Datetimes must be timezone-aware (naive ones raise `ValueError`); they
      come back in UTC with microsecond precision.
    - JSON payloads round-trip exactly (unicode included); NaN and infinities
      are refused with `ValueError` because not every database accepts them.
    """

    async def migrate(self) -> list[str]:
        """Apply the migrations this database lacks, in order, in one transaction.

        Returns the names applied now: empty when the schema is current. Opening a
        storage migrates already, so callers rarely need this.
        """
        ...

    async def close(self) -> None:
        """Release the database; later operations raise `StorageClosedError`. Idempotent."""
        ...

    # sessions

    async def create_session(self, record: SessionRecord) -> None:
        """Store a new session (its event log is empty); `RecordExistsError` if the id is taken."""
        ...

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None when there is none with this id."""
        ...

    async def list_sessions(
        self,
        scope_id: str | None = None,
        owner: str | None = None,
        *,
        limit: int = 20,
        offset: int = 0,
    ) -> list[SessionRecord]:
        """Sessions, most recently updated first (ties by id), paged like `query_documents`.

        `scope_id` None lists every session (an operator's view; `owner` is then
        ignored); otherwise only the sessions of that scope whose owner is `owner`,
        None matching the sessions without one. `ValueError` for a limit outside
        1..100 or a negative offset.
        """
        ...

    async def set_root(self, session_id: str, agent: str) -> None:
        """Change the session's root agent and bump `updated_at`; `RecordNotFoundError`
        for an unknown session. (The re-root event is the caller's to append.)"""
        ...

    async def touch_session(self, session_id: str) -> None:
        """Set `updated_at` to now; `RecordNotFoundError` for an unknown session."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session with its events, runs, pending confirmations and turn lease.

        Returns False when there was no such session.
        """
        ...

    # the event log

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
        """Append one event and return it with its `seq`: the session's next number,
        without gaps or duplicates however many writers append at once. Bumps the
        session's `updated_at`. `RecordNotFoundError` for an unknown session."""
        ...

    async def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[StoredEvent]:
        """Append several events in one transaction: all of them with consecutive seqs,
        in the given order, or none. An empty sequence writes nothing."""
        ...

    async def list_events(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """The session's events with `seq > after_seq`, in seq order; [] for an unknown session."""
        ...

    # pending confirmations

    async def save_pending(self, confirmation: PendingConfirmation) -> None:
        """Store a call awaiting approval. `RecordExistsError` if (session_id, call_id) is
        already pending, `RecordNotFoundError` for an unknown session."""
        ...

    async def get_pending(self, session_id: str, call_id: str) -> PendingConfirmation | None:
        """The pending call, or None when it is not (or no longer) pending."""
        ...

    async def list_pending(self, session_id: str) -> list[PendingConfirmation]:
        """The session's pending calls, oldest first."""
        ...

    async def delete_pending(self, session_id: str, call_id: str) -> bool:
        """Remove a pending call. Exactly once: of any number of concurrent callers,
        across processes, only the one that removed it gets True; that caller, and
        only it, may run (or deny) the call."""
        ...

    # runs

    async def start_run(self, record: RunRecord) -> None:
        """Record a run as it starts. `RecordExistsError` for a taken run id,
        `RecordNotFoundError` for an unknown session. `parent_run_id` is not
        checked: the root run need not be recorded."""
        ...

    async def end_run(
        self,
        run_id: str,
        status: RunStatus,
        usage: JSONObject,
        error: str | None = None,
        ended_at: datetime | None = None,
    ) -> None:
        """Record how a run ended (`ended_at` defaults to now). `status` is "ok",
        "error" or "partial"; `RecordNotFoundError` for an unknown run."""
        ...

    async def list_runs(self, session_id: str) -> list[RunRecord]:
        """The session's runs in the order they started."""
        ...

    async def interrupt_runs(
        self, session_id: str, error: str, ended_at: datetime | None = None
    ) -> list[RunRecord]:
        """Close every run of the session still `running` as `interrupted` with `error`
        (`ended_at` defaults to now), and return them as they were, in start order.

        Called by the holder of the session's turn lease: a run still running then
        belongs to a holder that died. Nothing is written when none is running."""
        ...

    # one turn at a time per session

    async def try_acquire_turn(self, session_id: str, holder: str, ttl_seconds: float) -> bool:
        """Take the session's turn lease for `ttl_seconds`, atomically, across processes.

        True when the lease was free, expired, or already held by `holder` (then
        it is extended); False while another holder's lease is live. A holder
        that crashes stops renewing, so its lease lapses after the ttl. The
        session need not exist.
        """
        ...

    async def renew_turn(self, session_id: str, holder: str, ttl_seconds: float) -> bool:
        """Extend `holder`'s lease to now + `ttl_seconds`; False when `holder` no longer
        holds it (another holder took it after it expired, or it was released)."""
        ...

    async def release_turn(self, session_id: str, holder: str) -> bool:
        """Give the lease up; False (and no effect) when `holder` does not hold it."""
        ...

    # store documents, keyed by (scope_id, store, key)
    #
    # An expired document (`expires_at` passed) is absent for every method below:
    # never read, and a put replaces it as if it were not there. Documents may not
    # hold the character U+0000 or unpaired surrogates (`ValueError`), so that both
    # backends store them exactly.

    async def get_document(self, scope_id: str, store: str, key: str) -> StoreDocument | None:
        """The live document, or None when there is none (or it expired)."""
        ...

    async def query_documents(
        self, scope_id: str, store: str, query: DocumentQuery
    ) -> DocumentPage:
        """Live documents of one store in one scope, filtered, sorted and paged (see
        `DocumentQuery`). `ValueError` for a limit outside 1..100 or a negative offset,
        `TypeError` for a filter value that is not a string, number, boolean or None."""
        ...

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
        """Create or replace a document and return it as stored.

        A replaced document's version is kept in its history, of which the newest
        `keep_versions` stay. The expiry is now + `ttl_seconds` (None: never),
        counted from every put. Concurrent puts of one key serialize: versions
        have no gaps or duplicates.
        """
        ...

    async def delete_document(self, scope_id: str, store: str, key: str) -> bool:
        """Delete a document and its history; False when there was no live document."""
        ...

    async def document_history(self, scope_id: str, store: str, key: str) -> list[StoreDocument]:
        """The kept previous versions of a live document, newest first ([] when none)."""
        ...

    async def purge_expired(self) -> int:
        """Delete every expired document (of all scopes and stores) with its history;
        returns how many documents went."""
        ...


# --- opening ----------------------------------------------------------------

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SQLITE_PREFIX = "sqlite:///"
_POSTGRES_SCHEMES = frozenset({"postgresql", "postgres"})


async def open_storage(url_or_path: str | os.PathLike[str]) -> Storage:
    """Open (creating if needed) and migrate the database named by a path or URL.

    Accepts a SQLite file path or a `sqlite:///path` URL (`sqlite:///data/x.db` is
    relative, `sqlite:////srv/x.db` absolute; the file's directory is created),
    or a PostgreSQL URL (`postgresql://user:password@host:5432/db`, also
    `postgres://` and `postgresql+psycopg://`), which needs the `postgres` extra.
    """
    postgres_url = postgresql_url(url_or_path)
    if postgres_url is not None:
        try:
            from runtime.storage.postgres import PostgresStorage
        except ImportError as e:
            raise UnsupportedDatabaseError(
                "PostgreSQL storage needs the `postgres` extra: "
                "pip install 'amodal-runtime[postgres]' (psycopg 3 and psycopg-pool)"
            ) from e
        return await PostgresStorage.open(postgres_url)
    from runtime.storage.sqlite import SqliteStorage

    return await SqliteStorage.open(sqlite_path(url_or_path))


def postgresql_url(url_or_path: str | os.PathLike[str]) -> str | None:
    """The libpq URL of a PostgreSQL URL (`postgresql+psycopg://` made plain); None otherwise."""
    text = os.fspath(url_or_path)
    match = _SCHEME.match(text)
    if match is None or match.group(1).lower().split("+")[0] not in _POSTGRES_SCHEMES:
        return None
    return "postgresql://" + text[match.end() :]


def sqlite_path(url_or_path: str | os.PathLike[str]) -> Path:
    """The SQLite file a path or URL names; `UnsupportedDatabaseError` for any other URL."""
    text = os.fspath(url_or_path)
    match = _SCHEME.match(text)
    if match is None:
        return Path(text).expanduser()
    scheme = match.group(1).lower()
    if scheme == "sqlite" and text.startswith(_SQLITE_PREFIX) and len(text) > len(_SQLITE_PREFIX):
        return Path(text[len(_SQLITE_PREFIX) :])
    # The URL itself is never echoed: a database URL may carry a password.
    raise UnsupportedDatabaseError(
        f"unsupported database URL scheme {scheme!r}: expected a SQLite file path, "
        "sqlite:///relative/path, sqlite:////absolute/path or postgresql://..."
    )


def default_database_path(
    repo_root: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> Path:
    """Where the embedded database lives, with its directory created.

    `$AMODAL_DATA_DIR/amodal.db` when that variable is set and not empty (so
    tests and deployments keep state outside the repo), else
    `<repo_root>/.amodal/amodal.db`.
    """
    env = os.environ if environ is None else environ
    data_dir = env.get(DATA_DIR_ENV, "")
    directory = Path(data_dir).expanduser() if data_dir else Path(repo_root) / ".amodal"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / DATABASE_FILE


__all__ = [
    "DATABASE_FILE",
    "DATA_DIR_ENV",
    "MAX_QUERY_LIMIT",
    "RUN_STATUSES",
    "DocumentPage",
    "DocumentQuery",
    "FilterValue",
    "JSONObject",
    "NewEvent",
    "PendingConfirmation",
    "RecordExistsError",
    "RecordNotFoundError",
    "RunRecord",
    "RunStatus",
    "SessionRecord",
    "Storage",
    "StorageClosedError",
    "StorageError",
    "StoreDocument",
    "StoredEvent",
    "UnsupportedDatabaseError",
    "default_database_path",
    "open_storage",
    "postgresql_url",
    "sqlite_path",
    "utc_now",
]
