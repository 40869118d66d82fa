"""Durable state: sessions and their event logs, runs, pending confirmations, turn
leases, the documents of stores, and agents' memory (with full-text search).

The rest of the runtime talks to the protocols of `runtime.storage.protocols`, one
per concern (`SessionStorage`, `RunStorage`, `ConfirmationStorage`,
`TurnLeaseStorage`, `DocumentStorage`, `MemoryStorage`) and their union `Storage`; the records they
keep are the frozen dataclasses of `runtime.storage.records`. Both are re-exported
here. The backends are one SQL implementation (`_sql.py`) with a dialect each:
`runtime.storage.sqlite`, the embedded default, and `runtime.storage.postgres`
with the `postgres` extra; `open_storage` picks one from a path or URL.

Storage knows nothing about prompts, agents, entity schemas or the turn loop: it
keeps records and JSON payloads exactly as given. Proposals
(`propose_source_change`) are session events.

Errors are the `StorageError` family of `runtime.exceptions` (re-exported here).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from runtime.exceptions import (
    RecordExistsError,
    RecordNotFoundError,
    StorageClosedError,
    StorageError,
    UnsupportedDatabaseError,
)
from runtime.storage._values import INT64_MAX, INT64_MIN, number_problem, text_problem
from runtime.storage.protocols import (
    AutomationStorage,
    ConfirmationStorage,
    DocumentStorage,
    MemoryStorage,
    RunStorage,
    SessionStorage,
    Storage,
    TurnLeaseStorage,
    TurnQueueStorage,
    UsageStorage,
)
from runtime.storage.records import (
    MAX_QUERY_LIMIT,
    MAX_SEARCH_LIMIT,
    MEMORY_KINDS,
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
    UsageGroup,
    UsageKind,
    UsageQuery,
    UsageRecord,
    UsageRow,
    utc_now,
)

DATA_DIR_ENV = "AMODAL_DATA_DIR"
DATABASE_FILE = "amodal.db"

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
    "INT64_MAX",
    "INT64_MIN",
    "MAX_QUERY_LIMIT",
    "MAX_SEARCH_LIMIT",
    "MEMORY_KINDS",
    "RUN_STATUSES",
    "USAGE_GROUPS",
    "USAGE_KINDS",
    "AgentRunRecord",
    "AlertClaim",
    "AutomationRunRecord",
    "AutomationRunStatus",
    "AutomationState",
    "AutomationStorage",
    "ConfirmationStorage",
    "DocumentPage",
    "DocumentQuery",
    "DocumentStorage",
    "ExpiredTurn",
    "FilterValue",
    "JSONObject",
    "MemoryEntry",
    "MemoryKind",
    "MemoryMatch",
    "MemoryOwner",
    "MemoryStorage",
    "MemoryUsage",
    "NewEvent",
    "PendingConfirmation",
    "QueueState",
    "QueuedTurn",
    "RecordExistsError",
    "RecordNotFoundError",
    "RunEnd",
    "RunStatus",
    "RunStorage",
    "SessionMatch",
    "SessionRecord",
    "SessionStorage",
    "Spend",
    "Storage",
    "StorageClosedError",
    "StorageError",
    "StoreDocument",
    "StoredEvent",
    "TurnLeaseStorage",
    "TurnQueueStorage",
    "UnsupportedDatabaseError",
    "UsageGroup",
    "UsageKind",
    "UsageQuery",
    "UsageRecord",
    "UsageRow",
    "UsageStorage",
    "default_database_path",
    "number_problem",
    "open_storage",
    "postgresql_url",
    "sqlite_path",
    "text_problem",
    "utc_now",
]
