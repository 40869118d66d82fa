"""The schema, as an ordered list of named migrations.

Each migration runs once per database and is recorded by name, with the time it
was applied, in the `migrations` table (created by the runner, not by a
migration). A database is brought up to date by applying, in list order, the
migrations its table does not name.

APPEND ONLY. Never edit, rename, reorder or delete a migration once it has been
released: databases in the field have recorded it as applied and will never run
it again, so an edit would leave them with a schema the code does not expect.
To change the schema, append a new migration at the end.

Conventions the backends share (the PostgreSQL list will use the same names):
- JSON payloads are TEXT holding compact JSON.
- Datetimes are TEXT, ISO 8601 in UTC with microseconds, so text order is time
  order. Lease expiry is REAL seconds since the epoch, compared in SQL.
- `sessions.last_seq` is the per-session event counter; appending bumps it
  with one UPDATE, which is what makes seq assignment atomic.
- `events.run_id`, `runs.parent_run_id` and `turn_leases.session_id` have no
  foreign key on purpose: the root run need not be recorded, and a lease may be
  taken before its session is created.
"""

from __future__ import annotations

from typing import NamedTuple


class Migration(NamedTuple):
    name: str
    sql: str


SQLITE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "m001_sessions",
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            scope_id TEXT NOT NULL,
            owner TEXT,
            root_agent TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}',
            last_seq INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX sessions_by_scope ON sessions (scope_id, owner, updated_at);
        """,
    ),
    Migration(
        "m002_events",
        """
        CREATE TABLE events (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            type TEXT NOT NULL,
            run_id TEXT,
            agent TEXT,
            bundle_version TEXT,
            created_at TEXT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        );
        """,
    ),
    Migration(
        "m003_pending_confirmations",
        """
        CREATE TABLE pending_confirmations (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            call_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            tool TEXT NOT NULL,
            arguments TEXT NOT NULL,
            state TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (session_id, call_id)
        );
        """,
    ),
    Migration(
        "m004_runs",
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            parent_run_id TEXT,
            depth INTEGER NOT NULL,
            agent TEXT NOT NULL,
            label TEXT NOT NULL,
            started_at TEXT NOT NULL,
            ended_at TEXT,
            status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'error', 'partial')),
            usage TEXT NOT NULL DEFAULT '{}',
            error TEXT
        );
        CREATE INDEX runs_by_session ON runs (session_id, started_at);
        """,
    ),
    Migration(
        "m005_turn_leases",
        """
        CREATE TABLE turn_leases (
            session_id TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            expires_at REAL NOT NULL
        );
        """,
    ),
)
"""SQLite's schema history. Append only (see the module docstring)."""
