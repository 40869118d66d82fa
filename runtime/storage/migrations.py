"""The schema, as an ordered list of named migrations.

Each migration runs once per database and is recorded by name, with the time it
was applied, in the `migrations` table (created by the runner, not by a
migration). A database is brought up to date by applying, in list order, the
migrations its table does not name.

APPEND ONLY. Never edit, rename, reorder or delete a migration once it has been
released: databases in the field have recorded it as applied and will never run
it again, so an edit would leave them with a schema the code does not expect.
To change the schema, append a new migration at the end.

Both backends keep their own list (`SQLITE_MIGRATIONS`, `POSTGRES_MIGRATIONS`)
with the same names for the same steps. Conventions:
- JSON payloads are TEXT holding compact JSON (exactly what was given, which
  PostgreSQL's jsonb would not keep: it refuses U+0000 and reorders keys), except
  store documents, which PostgreSQL keeps as jsonb so queries filter and sort in
  SQL (documents may not hold U+0000, see `Storage`).
- SQLite: datetimes are TEXT, ISO 8601 in UTC with microseconds, so text order
  is time order; lease expiry is REAL seconds since the epoch, compared in SQL.
  PostgreSQL: datetimes are timestamptz, and leases and document expiry use the
  database's clock, so several servers agree on when a lease lapses.
- `sessions.last_seq` is the per-session event counter; appending bumps it
  with one UPDATE, which is what makes seq assignment atomic.
- `events.run_id`, `runs.parent_run_id` and `turn_leases.session_id` have no
  foreign key on purpose: the root run need not be recorded, and a lease may be
  taken before its session is created.
- `store_documents` is keyed by (scope_id, store, key); `store_history` keeps
  previous versions and goes with its document (ON DELETE CASCADE).
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
    Migration(
        "m006_store_documents",
        """
        CREATE TABLE store_documents (
            scope_id TEXT NOT NULL,
            store TEXT NOT NULL,
            key TEXT NOT NULL,
            body TEXT NOT NULL,
            version INTEGER NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            expires_at TEXT,
            PRIMARY KEY (scope_id, store, key)
        );
        CREATE INDEX store_documents_by_expiry ON store_documents (expires_at)
            WHERE expires_at IS NOT NULL;
        CREATE TABLE store_history (
            scope_id TEXT NOT NULL,
            store TEXT NOT NULL,
            key TEXT NOT NULL,
            version INTEGER NOT NULL,
            body TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (scope_id, store, key, version),
            FOREIGN KEY (scope_id, store, key)
                REFERENCES store_documents (scope_id, store, key) ON DELETE CASCADE
        );
        """,
    ),
    Migration(
        "m007_interrupted_runs",
        # A run whose server died is closed as `interrupted` by the next holder of its
        # session. SQLite cannot change a CHECK in place: the table is rebuilt.
        """
        CREATE TABLE runs_next (
            id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            parent_run_id TEXT,
            depth INTEGER NOT NULL,
            agent TEXT NOT NULL,
            label TEXT NOT NULL,
            started_at TEXT NOT NULL,
            ended_at TEXT,
            status TEXT NOT NULL
                CHECK (status IN ('running', 'ok', 'error', 'partial', 'interrupted')),
            usage TEXT NOT NULL DEFAULT '{}',
            error TEXT
        );
        INSERT INTO runs_next
            SELECT id, session_id, parent_run_id, depth, agent, label, started_at, ended_at,
                   status, usage, error
            FROM runs ORDER BY rowid;
        DROP TABLE runs;
        ALTER TABLE runs_next RENAME TO runs;
        CREATE INDEX runs_by_session ON runs (session_id, started_at);
        """,
    ),
    Migration(
        "m008_operator_sessions_owner",
        # The operator's sessions were owned by '@operator', which a JWT `sub` can be.
        # '' is what no credential yields (an empty `sub` counts as none).
        """
        UPDATE sessions SET owner = '' WHERE owner = '@operator';
        """,
    ),
    Migration(
        "m011_turn_queue",
        # A lease keeps a note of its turn (who asked, its root run) so that whoever takes
        # it over after a crash can continue the turn; background turns wait in a queue.
        # Lease-like times (`turn_leases.expires_at`'s kind: REAL seconds) for the claim.
        """
        ALTER TABLE turn_leases ADD COLUMN turn TEXT;
        CREATE TABLE turn_queue (
            turn_id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            request TEXT NOT NULL,
            caller TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('queued', 'claimed', 'started', 'done')),
            created_at TEXT NOT NULL,
            started_at TEXT,
            ended_at TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            claimed_by TEXT,
            ready_at REAL NOT NULL,
            claimed_until REAL
        );
        CREATE INDEX turn_queue_waiting ON turn_queue (created_at)
            WHERE state IN ('queued', 'claimed');
        CREATE INDEX turn_queue_by_session ON turn_queue (session_id)
            WHERE state IN ('queued', 'claimed');
        """,
    ),
    Migration(
        "m009_usage",
        # One row per model call (SPEC 22). No foreign key to sessions: spend outlives a
        # deleted session. `day` is the call's UTC date, so a daily limit reads one index
        # range; `usage_by_time` serves GET /usage's time range. `*_first` mark a turn's
        # first call (of the turn, of its agent, of its model): a report counts turns by
        # summing them, never by COUNT(DISTINCT), which would sort every row.
        # `usage_owner_days` keeps each owner's day summed as calls are recorded (in the
        # same transaction): the daily limit's check before every call reads one row.
        # Its `owner_key` is "u:" + the owner, or "-" for calls with none. `usage_days` sums
        # the calls by UTC day, agent, model, owner and scope the same way: a report over
        # whole days reads those sums, not every call (the partial days at the ends of its
        # range read the calls). `usage_session_days` does the same by session and day.
        """
        CREATE TABLE usage_records (
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            model TEXT NOT NULL,
            owner TEXT,
            scope_id TEXT NOT NULL,
            at TEXT NOT NULL,
            day TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            cost_usd REAL,
            estimated INTEGER NOT NULL DEFAULT 0,
            turn_first INTEGER NOT NULL DEFAULT 0,
            agent_first INTEGER NOT NULL DEFAULT 0,
            model_first INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX usage_by_time ON usage_records (at);
        CREATE INDEX usage_by_owner_day ON usage_records (owner, day);
        CREATE INDEX usage_by_session ON usage_records (session_id);
        CREATE INDEX usage_by_scope_owner_time ON usage_records (scope_id, owner, at);
        CREATE TABLE usage_owner_days (
            owner_key TEXT NOT NULL,
            day TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            cost_usd REAL NOT NULL,
            PRIMARY KEY (owner_key, day)
        );
        CREATE TABLE usage_days (
            day TEXT NOT NULL,
            agent TEXT NOT NULL,
            model TEXT NOT NULL,
            owner_key TEXT NOT NULL,
            owner TEXT,
            scope_id TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            cost_usd REAL,
            calls INTEGER NOT NULL,
            turn_first INTEGER NOT NULL,
            agent_first INTEGER NOT NULL,
            model_first INTEGER NOT NULL,
            PRIMARY KEY (day, agent, model, owner_key, scope_id)
        );
        CREATE INDEX usage_days_by_scope_owner ON usage_days (scope_id, owner_key, day);
        CREATE TABLE usage_session_days (
            session_id TEXT NOT NULL,
            day TEXT NOT NULL,
            owner TEXT,
            scope_id TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            cost_usd REAL,
            calls INTEGER NOT NULL,
            turn_first INTEGER NOT NULL,
            PRIMARY KEY (session_id, day)
        );
        CREATE INDEX usage_session_days_by_day ON usage_session_days (day);
        """,
    ),
    Migration(
        "m010_memory",
        # An agent's notes about its owner (SPEC 21), and the words of the session logs that
        # `session_search` looks through. Each FTS5 index reads its text from a plain table
        # (external content, kept in step by triggers) keyed by an INTEGER PRIMARY KEY, a
        # rowid that VACUUM never renumbers. Its `who` column holds one token naming the
        # owner (`amodal_search_key`, a hash the storage registers on its connections), so
        # a search matches one owner's rows inside the index instead of ranking everyone's.
        # Logs written before this migration get their people's messages and their agents'
        # answers indexed here.
        """
        CREATE TABLE memory_entries (
            n INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            agent TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('user', 'scope', 'agent')),
            scope_id TEXT NOT NULL,
            owner TEXT NOT NULL,
            text TEXT NOT NULL,
            created_at TEXT NOT NULL,
            who TEXT NOT NULL DEFAULT ''
        );
        CREATE INDEX memory_by_owner ON memory_entries (agent, kind, scope_id, owner, n);
        CREATE VIRTUAL TABLE memory_search USING fts5 (
            text, who, content = 'memory_entries', content_rowid = 'n',
            tokenize = 'porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER memory_search_add AFTER INSERT ON memory_entries BEGIN
            UPDATE memory_entries
                SET who = amodal_search_key(new.agent, new.kind, new.scope_id, new.owner)
                WHERE n = new.n;
            INSERT INTO memory_search (rowid, text, who)
                SELECT n, text, who FROM memory_entries WHERE n = new.n;
        END;
        CREATE TRIGGER memory_search_remove AFTER DELETE ON memory_entries BEGIN
            INSERT INTO memory_search (memory_search, rowid, text, who)
                VALUES ('delete', old.n, old.text, old.who);
        END;
        CREATE TABLE event_texts (
            n INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            text TEXT NOT NULL,
            who TEXT NOT NULL DEFAULT ''
        );
        CREATE INDEX event_texts_by_session ON event_texts (session_id, seq);
        CREATE VIRTUAL TABLE event_search USING fts5 (
            text, who, content = 'event_texts', content_rowid = 'n',
            tokenize = 'porter unicode61 remove_diacritics 2'
        );
        CREATE TRIGGER event_search_add AFTER INSERT ON event_texts BEGIN
            UPDATE event_texts SET who = (
                SELECT amodal_search_key(scope_id, owner) FROM sessions WHERE id = new.session_id
            ) WHERE n = new.n;
            INSERT INTO event_search (rowid, text, who)
                SELECT n, text, who FROM event_texts WHERE n = new.n;
        END;
        CREATE TRIGGER event_search_remove AFTER DELETE ON event_texts BEGIN
            INSERT INTO event_search (event_search, rowid, text, who)
                VALUES ('delete', old.n, old.text, old.who);
        END;
        INSERT INTO event_texts (session_id, seq, text)
            SELECT session_id, seq, json_extract(data, '$.text') FROM events
            WHERE type IN ('user', 'assistant')
              AND json_type(data, '$.text') = 'text' AND json_extract(data, '$.text') <> ''
            ORDER BY session_id, seq;
        """,
    ),
    Migration(
        "m012_automations",
        # One row per run of an automation; a cron slot and a webhook delivery id are
        # unique per automation, which is what makes a slot fire once across processes.
        """
        CREATE TABLE automation_runs (
            id TEXT PRIMARY KEY,
            automation TEXT NOT NULL,
            trigger TEXT NOT NULL,
            slot TEXT,
            delivery_id TEXT,
            session_id TEXT,
            status TEXT NOT NULL,
            done_reason TEXT,
            error TEXT,
            reply TEXT,
            created_at TEXT NOT NULL,
            ended_at TEXT,
            deliveries TEXT NOT NULL DEFAULT '[]'
        );
        CREATE UNIQUE INDEX automation_runs_by_slot ON automation_runs (automation, slot);
        CREATE UNIQUE INDEX automation_runs_by_delivery
            ON automation_runs (automation, delivery_id);
        CREATE INDEX automation_runs_by_time ON automation_runs (automation, created_at);
        CREATE TABLE automation_state (
            automation TEXT PRIMARY KEY,
            paused INTEGER NOT NULL DEFAULT 0,
            failures INTEGER NOT NULL DEFAULT 0,
            alerted_at TEXT
        );
        """,
    ),
    Migration(
        "m013_automation_deliveries",
        # A run's deliveries are written `pending` with its end, then sent under a lease
        # (holder, expiry as for turn leases): a sweep takes over the ones whose holder died.
        """
        ALTER TABLE automation_runs ADD COLUMN delivery_holder TEXT;
        ALTER TABLE automation_runs ADD COLUMN delivery_expires_at REAL;
        CREATE INDEX automation_runs_delivering ON automation_runs (delivery_expires_at)
            WHERE delivery_expires_at IS NOT NULL;
        """,
    ),
    Migration(
        "m014_usage_kind",
        # What each call was for (`run`: a run's step; `compaction`: a summary, SPEC 20), so a
        # report can show what compaction spent. The daily sums are kept per kind too: their
        # key gains it, which in SQLite means building the table again.
        """
        ALTER TABLE usage_records ADD COLUMN kind TEXT NOT NULL DEFAULT 'run';
        CREATE TABLE usage_days_by_kind (
            day TEXT NOT NULL,
            agent TEXT NOT NULL,
            model TEXT NOT NULL,
            owner_key TEXT NOT NULL,
            owner TEXT,
            scope_id TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            cost_usd REAL,
            calls INTEGER NOT NULL,
            turn_first INTEGER NOT NULL,
            agent_first INTEGER NOT NULL,
            model_first INTEGER NOT NULL,
            kind TEXT NOT NULL DEFAULT 'run',
            PRIMARY KEY (day, agent, model, owner_key, scope_id, kind)
        );
        INSERT INTO usage_days_by_kind
            SELECT day, agent, model, owner_key, owner, scope_id, input_tokens, output_tokens,
                   cached_tokens, cost_usd, calls, turn_first, agent_first, model_first, 'run'
            FROM usage_days;
        DROP TABLE usage_days;
        ALTER TABLE usage_days_by_kind RENAME TO usage_days;
        CREATE INDEX usage_days_by_scope_owner ON usage_days (scope_id, owner_key, day);
        """,
    ),
    Migration(
        "m015_search_index_on_read",
        # A session's texts reach the full-text index when someone searches, not as each
        # is written: an FTS5 insert writes a new index segment in every transaction
        # (about 6% of a turn's CPU, two a turn), a search indexes all it has not yet in
        # one. `indexed` marks the texts already in the index (all of them, so far), and
        # only those are taken out of it when deleted. No PostgreSQL twin: its GIN index
        # is kept by the database as rows are written.
        """
        DROP TRIGGER event_search_add;
        DROP TRIGGER event_search_remove;
        ALTER TABLE event_texts ADD COLUMN indexed INTEGER NOT NULL DEFAULT 0;
        UPDATE event_texts SET indexed = 1;
        CREATE INDEX event_texts_unindexed ON event_texts (n) WHERE indexed = 0;
        CREATE TRIGGER event_search_remove AFTER DELETE ON event_texts
        WHEN old.indexed = 1 BEGIN
            INSERT INTO event_search (event_search, rowid, text, who)
                VALUES ('delete', old.n, old.text, old.who);
        END;
        """,
    ),
    Migration(
        "m016_usage_indexes_the_sums_replace",
        # A session's spend is read from its daily sums and an owner's day from theirs
        # (m009), so nothing reads the calls by owner and day or by session any more, and
        # each model call's commit wrote two index pages for them.
        """
        DROP INDEX usage_by_owner_day;
        DROP INDEX usage_by_session;
        """,
    ),
)
"""SQLite's schema history. Append only (see the module docstring)."""


POSTGRES_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "m001_sessions",
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            scope_id TEXT NOT NULL,
            owner TEXT,
            root_agent TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}',
            last_seq BIGINT NOT NULL DEFAULT 0
        );
        CREATE INDEX sessions_by_scope ON sessions (scope_id, owner, updated_at);
        """,
    ),
    Migration(
        "m002_events",
        """
        CREATE TABLE events (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            type TEXT NOT NULL,
            run_id TEXT,
            agent TEXT,
            bundle_version TEXT,
            created_at TIMESTAMPTZ NOT NULL,
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
            created_at TIMESTAMPTZ NOT NULL,
            ordinal BIGINT GENERATED ALWAYS AS IDENTITY,
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
            started_at TIMESTAMPTZ NOT NULL,
            ended_at TIMESTAMPTZ,
            status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'error', 'partial')),
            usage TEXT NOT NULL DEFAULT '{}',
            error TEXT,
            ordinal BIGINT GENERATED ALWAYS AS IDENTITY
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
            expires_at TIMESTAMPTZ NOT NULL
        );
        """,
    ),
    Migration(
        "m006_store_documents",
        """
        CREATE TABLE store_documents (
            scope_id TEXT NOT NULL,
            store TEXT NOT NULL,
            key TEXT NOT NULL,
            body JSONB NOT NULL,
            version BIGINT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL,
            expires_at TIMESTAMPTZ,
            PRIMARY KEY (scope_id, store, key)
        );
        CREATE INDEX store_documents_by_expiry ON store_documents (expires_at)
            WHERE expires_at IS NOT NULL;
        CREATE INDEX store_documents_by_body ON store_documents USING GIN (body jsonb_path_ops);
        CREATE TABLE store_history (
            scope_id TEXT NOT NULL,
            store TEXT NOT NULL,
            key TEXT NOT NULL,
            version BIGINT NOT NULL,
            body JSONB NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (scope_id, store, key, version),
            FOREIGN KEY (scope_id, store, key)
                REFERENCES store_documents (scope_id, store, key) ON DELETE CASCADE
        );
        """,
    ),
    Migration(
        "m007_interrupted_runs",
        """
        ALTER TABLE runs DROP CONSTRAINT runs_status_check;
        ALTER TABLE runs ADD CONSTRAINT runs_status_check
            CHECK (status IN ('running', 'ok', 'error', 'partial', 'interrupted'));
        """,
    ),
    Migration(
        "m008_operator_sessions_owner",
        """
        UPDATE sessions SET owner = '' WHERE owner = '@operator';
        """,
    ),
    Migration(
        "m011_turn_queue",
        """
        ALTER TABLE turn_leases ADD COLUMN turn TEXT;
        CREATE TABLE turn_queue (
            turn_id TEXT PRIMARY KEY,
            session_id TEXT NOT NULL,
            request TEXT NOT NULL,
            caller TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('queued', 'claimed', 'started', 'done')),
            created_at TIMESTAMPTZ NOT NULL,
            started_at TIMESTAMPTZ,
            ended_at TIMESTAMPTZ,
            attempts INTEGER NOT NULL DEFAULT 0,
            claimed_by TEXT,
            ready_at TIMESTAMPTZ NOT NULL,
            claimed_until TIMESTAMPTZ
        );
        CREATE INDEX turn_queue_waiting ON turn_queue (created_at)
            WHERE state IN ('queued', 'claimed');
        CREATE INDEX turn_queue_by_session ON turn_queue (session_id)
            WHERE state IN ('queued', 'claimed');
        """,
    ),
    Migration(
        "m009_usage",
        """
        CREATE TABLE usage_records (
            session_id TEXT NOT NULL,
            turn_id TEXT NOT NULL,
            run_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            model TEXT NOT NULL,
            owner TEXT,
            scope_id TEXT NOT NULL,
            at TIMESTAMPTZ NOT NULL,
            day TEXT NOT NULL,
            input_tokens BIGINT NOT NULL,
            output_tokens BIGINT NOT NULL,
            cached_tokens BIGINT NOT NULL,
            cost_usd DOUBLE PRECISION,
            estimated BOOLEAN NOT NULL DEFAULT FALSE,
            turn_first SMALLINT NOT NULL DEFAULT 0,
            agent_first SMALLINT NOT NULL DEFAULT 0,
            model_first SMALLINT NOT NULL DEFAULT 0
        );
        CREATE INDEX usage_by_time ON usage_records (at);
        CREATE INDEX usage_by_owner_day ON usage_records (owner, day);
        CREATE INDEX usage_by_session ON usage_records (session_id);
        CREATE INDEX usage_by_scope_owner_time ON usage_records (scope_id, owner, at);
        CREATE TABLE usage_owner_days (
            owner_key TEXT NOT NULL,
            day TEXT NOT NULL,
            tokens BIGINT NOT NULL,
            cost_usd DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (owner_key, day)
        );
        CREATE TABLE usage_days (
            day TEXT NOT NULL,
            agent TEXT NOT NULL,
            model TEXT NOT NULL,
            owner_key TEXT NOT NULL,
            owner TEXT,
            scope_id TEXT NOT NULL,
            input_tokens BIGINT NOT NULL,
            output_tokens BIGINT NOT NULL,
            cached_tokens BIGINT NOT NULL,
            cost_usd DOUBLE PRECISION,
            calls BIGINT NOT NULL,
            turn_first BIGINT NOT NULL,
            agent_first BIGINT NOT NULL,
            model_first BIGINT NOT NULL,
            PRIMARY KEY (day, agent, model, owner_key, scope_id)
        );
        CREATE INDEX usage_days_by_scope_owner ON usage_days (scope_id, owner_key, day);
        CREATE TABLE usage_session_days (
            session_id TEXT NOT NULL,
            day TEXT NOT NULL,
            owner TEXT,
            scope_id TEXT NOT NULL,
            input_tokens BIGINT NOT NULL,
            output_tokens BIGINT NOT NULL,
            cached_tokens BIGINT NOT NULL,
            cost_usd DOUBLE PRECISION,
            calls BIGINT NOT NULL,
            turn_first BIGINT NOT NULL,
            PRIMARY KEY (session_id, day)
        );
        CREATE INDEX usage_session_days_by_day ON usage_session_days (day);
        """,
    ),
    Migration(
        "m010_memory",
        # See SQLite's m010_memory. A generated tsvector column, GIN-indexed, carries each
        # text's words; 'english' stems them as SQLite's porter tokenizer does. The backfill
        # skips a log entry holding an escaped U+0000, which PostgreSQL text cannot hold.
        """
        CREATE TABLE memory_entries (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('user', 'scope', 'agent')),
            scope_id TEXT NOT NULL,
            owner TEXT NOT NULL,
            text TEXT NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            n BIGINT GENERATED ALWAYS AS IDENTITY,
            search TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
        );
        CREATE INDEX memory_by_owner ON memory_entries (agent, kind, scope_id, owner, n);
        CREATE INDEX memory_search ON memory_entries USING GIN (search);
        CREATE TABLE event_texts (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            text TEXT NOT NULL,
            search TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
            PRIMARY KEY (session_id, seq)
        );
        CREATE INDEX event_search ON event_texts USING GIN (search);
        INSERT INTO event_texts (session_id, seq, text)
            SELECT session_id, seq, data::json ->> 'text' FROM events
            WHERE type IN ('user', 'assistant') AND position('\\u0000' in data) = 0
              AND json_typeof(data::json -> 'text') = 'string' AND data::json ->> 'text' <> '';
        """,
    ),
    Migration(
        "m012_automations",
        # One row per run of an automation; a cron slot and a webhook delivery id are
        # unique per automation, which is what makes a slot fire once across processes.
        """
        CREATE TABLE automation_runs (
            id TEXT PRIMARY KEY,
            automation TEXT NOT NULL,
            trigger TEXT NOT NULL,
            slot TIMESTAMPTZ,
            delivery_id TEXT,
            session_id TEXT,
            status TEXT NOT NULL,
            done_reason TEXT,
            error TEXT,
            reply TEXT,
            created_at TIMESTAMPTZ NOT NULL,
            ended_at TIMESTAMPTZ,
            deliveries TEXT NOT NULL DEFAULT '[]'
        );
        CREATE UNIQUE INDEX automation_runs_by_slot ON automation_runs (automation, slot);
        CREATE UNIQUE INDEX automation_runs_by_delivery
            ON automation_runs (automation, delivery_id);
        CREATE INDEX automation_runs_by_time ON automation_runs (automation, created_at);
        CREATE TABLE automation_state (
            automation TEXT PRIMARY KEY,
            paused BOOLEAN NOT NULL DEFAULT FALSE,
            failures INTEGER NOT NULL DEFAULT 0,
            alerted_at TIMESTAMPTZ
        );
        """,
    ),
    Migration(
        "m013_automation_deliveries",
        # A run's deliveries are written `pending` with its end, then sent under a lease
        # (holder, expiry as for turn leases): a sweep takes over the ones whose holder died.
        """
        ALTER TABLE automation_runs ADD COLUMN delivery_holder TEXT;
        ALTER TABLE automation_runs ADD COLUMN delivery_expires_at TIMESTAMPTZ;
        CREATE INDEX automation_runs_delivering ON automation_runs (delivery_expires_at)
            WHERE delivery_expires_at IS NOT NULL;
        """,
    ),
    Migration(
        "m014_usage_kind",
        """
        ALTER TABLE usage_records ADD COLUMN kind TEXT NOT NULL DEFAULT 'run';
        ALTER TABLE usage_days ADD COLUMN kind TEXT NOT NULL DEFAULT 'run';
        ALTER TABLE usage_days DROP CONSTRAINT usage_days_pkey;
        ALTER TABLE usage_days ADD PRIMARY KEY (day, agent, model, owner_key, scope_id, kind);
        """,
    ),
    Migration(
        "m016_usage_indexes_the_sums_replace",
        # A session's spend is read from its daily sums and an owner's day from theirs
        # (m009), so nothing reads the calls by owner and day or by session any more, and
        # each model call's commit wrote two index pages for them.
        """
        DROP INDEX usage_by_owner_day;
        DROP INDEX usage_by_session;
        """,
    ),
)
"""PostgreSQL's schema history. Append only (see the module docstring)."""
