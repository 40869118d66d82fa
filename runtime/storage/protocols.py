"""What the runtime needs from a database, one small protocol per concern.

A caller asks for the narrowest protocol it uses (the lease keeper a
`TurnLeaseStorage`, the store tools a `DocumentStorage`); `Storage` is their union
plus opening and closing, and is what a backend implements. Every promise a
caller may rely on is written on the methods below, and `tests/storage/` checks
each one on every backend.

Promises every backend keeps, for every method of every protocol:
- Every method is safe to call concurrently.
- Writes are shielded from cancellation: a write that was asked for commits (or
  fails) as a whole even if the awaiting task is cancelled meanwhile; the
  cancelled caller then gets its cancellation instead of the result.
- Several storages may be open on one database (several processes or servers);
  every promise holds across them, not just inside one.
- Datetimes must be timezone-aware (naive ones raise `ValueError`); they come back
  in UTC with microsecond precision.
- JSON payloads round-trip exactly (unicode included); NaN and infinities are
  refused with `ValueError` because not every database accepts them.
- Invalid arguments (a naive datetime, an unknown run status, data that is not
  JSON) raise `ValueError`/`TypeError` before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from runtime.storage.records import (
    AgentRunRecord,
    AlertClaim,
    AutomationRunRecord,
    AutomationRunStatus,
    AutomationState,
    DocumentPage,
    DocumentQuery,
    ExpiredTurn,
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
    RunStatus,
    SessionMatch,
    SessionRecord,
    Spend,
    StoredEvent,
    StoreDocument,
    UsageQuery,
    UsageRecord,
    UsageRow,
)


class SessionStorage(Protocol):
    """Sessions and their append-only event logs."""

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
        """Append one event and return it with its `seq`: the session's next number,
        without gaps or duplicates however many writers append at once. Bumps the
        session's `updated_at`. `RecordNotFoundError` for an unknown session.
        `search_text`, `usage`: see `NewEvent`."""
        ...

    async def append_events(self, session_id: str, events: Sequence[NewEvent]) -> list[StoredEvent]:
        """Append several events in one transaction: all of them with consecutive seqs,
        in the given order, and their `usage` records, or none. An empty sequence writes
        nothing."""
        ...

    async def list_events(self, session_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """The session's events with `seq > after_seq`, in seq order; [] for an unknown session."""
        ...


class RunStorage(Protocol):
    """The runs of agents in a session: the nodes of its delegation tree."""

    async def start_run(self, record: AgentRunRecord) -> None:
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

    async def list_runs(self, session_id: str) -> list[AgentRunRecord]:
        """The session's runs in the order they started."""
        ...

    async def interrupt_runs(
        self, session_id: str, error: str, ended_at: datetime | None = None
    ) -> list[AgentRunRecord]:
        """Close every run of the session still `running` as `interrupted` with `error`
        (`ended_at` defaults to now), and return them as they were, in start order.

        Called by the holder of the session's turn lease: a run still running then
        belongs to a holder that died. Nothing is written when none is running."""
        ...


class ConfirmationStorage(Protocol):
    """Tool calls waiting for a person's approval."""

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

    async def list_all_pending(self, limit: int = 100) -> list[PendingConfirmation]:
        """Pending calls of every session, oldest first (what an operator answers)."""
        ...

    async def delete_pending(self, session_id: str, call_id: str) -> bool:
        """Remove a pending call. Exactly once: of any number of concurrent callers,
        across processes, only the one that removed it gets True; that caller, and
        only it, may run (or deny) the call."""
        ...


class AutomationStorage(Protocol):
    """Automations' runs and their state (SPEC 23), shared by every process of a database."""

    async def claim_automation_run(self, record: AutomationRunRecord) -> bool:
        """Record a run (or a missed or skipped slot). False, and nothing written, when the
        automation already has a record for `record.slot` or `record.delivery_id`: of any
        number of processes claiming one slot at once, exactly one gets True."""
        ...

    async def get_automation_run(self, run_id: str) -> AutomationRunRecord | None: ...

    async def find_automation_delivery(
        self, automation: str, delivery_id: str
    ) -> AutomationRunRecord | None:
        """The run a webhook delivery id started, if any."""
        ...

    async def update_automation_run(self, record: AutomationRunRecord) -> None:
        """Store the run's new status, session, reply, error, end and deliveries (its
        automation, trigger, slot and delivery id never change). `RecordNotFoundError`
        for an unknown run."""
        ...

    async def list_automation_runs(
        self, automation: str | None = None, *, limit: int = 20, statuses: Sequence[str] = ()
    ) -> list[AutomationRunRecord]:
        """Runs newest first (of one automation, or of all), only of `statuses` when given."""
        ...

    async def start_queued_automation_run(self, run_id: str) -> bool:
        """Move a `queued` run to `running`: True for exactly one caller across processes."""
        ...

    async def end_automation_run(
        self,
        ended: AutomationRunRecord,
        *,
        was: AutomationRunStatus,
        holder: str,
        ttl_seconds: float,
        alert: AlertClaim | None = None,
    ) -> AutomationRunRecord | None:
        """End a run that is still `was` (`running`, or `awaiting_confirmation` when its
        confirmed turn ends), in one step: its outcome (`ended`'s status, reply, error,
        end), its deliveries as given (each `{"status": "pending", "delivery_id": ...}`
        yet to send), the failure count of an `ok` or `error` run, and the failure
        alert when `alert` is due (one more pending delivery). With anything pending,
        `holder` takes the delivery lease for `ttl_seconds`. The run as written, or None
        (nothing written) when it is no longer `was`: of any number of callers across
        processes one ends it."""
        ...

    async def due_automation_deliveries(self, limit: int = 20) -> list[AutomationRunRecord]:
        """Runs with deliveries pending whose delivery lease expired (its holder died)."""
        ...

    async def claim_automation_deliveries(
        self, run_id: str, holder: str, ttl_seconds: float
    ) -> AutomationRunRecord | None:
        """Take the delivery lease of a run whose lease expired (or that `holder` has):
        the run, for exactly one of any number of callers; None for the others and for a
        run with nothing pending."""
        ...

    async def save_automation_deliveries(
        self,
        run_id: str,
        holder: str,
        deliveries: Sequence[JSONObject],
        ttl_seconds: float | None,
    ) -> bool:
        """Record how the deliveries went so far and renew the lease for `ttl_seconds`, or
        (None) record them done and give the lease up. False, nothing written, when
        `holder` no longer holds the lease."""
        ...

    async def latest_automation_slot(self, automation: str) -> datetime | None:
        """The newest cron slot the automation has a record for (run, missed or skipped)."""
        ...

    async def automation_states(self) -> dict[str, AutomationState]:
        """Every automation's kept state by name (one never paused nor failed may be absent)."""
        ...

    async def set_automation_paused(self, automation: str, paused: bool) -> None: ...

    async def count_automation_outcome(self, automation: str, failed: bool) -> int:
        """Count one more failed run, or reset the count (and the alert's cooldown) after a
        success; the consecutive failures now."""
        ...

    async def claim_automation_alert(
        self, automation: str, cooldown_seconds: float, now: datetime
    ) -> bool:
        """Take the right to send the failure alert now: True for exactly one caller, and
        only when no alert went out within the cooldown since the last success."""
        ...


class TurnLeaseStorage(Protocol):
    """One turn at a time per session: a lease with an expiry, across processes."""

    async def try_acquire_turn(
        self,
        session_id: str,
        holder: str,
        ttl_seconds: float,
        turn: JSONObject | None = None,
        *,
        take_over: bool = False,
    ) -> bool:
        """Take the session's turn lease for `ttl_seconds`, atomically, across processes.

        True when the lease was free, expired, or already held by `holder` (then
        it is extended); False while another holder's lease is live. A holder
        that crashes stops renewing, so its lease lapses after the ttl. The
        session need not exist.

        `turn` is a note of the turn taking the lease (kept with it, see
        `expired_turns`). An expired lease that carries a note is a turn to be
        continued: only `take_over=True` (the one continuing it) takes it, which
        keeps its note unless given a new one.
        """
        ...

    async def expired_turns(self, limit: int = 20) -> list[ExpiredTurn]:
        """Expired leases that carry a turn's note: turns whose holder died, oldest expiry
        first, at most `limit`."""
        ...

    async def renew_turn(self, session_id: str, holder: str, ttl_seconds: float) -> bool:
        """Extend `holder`'s lease to now + `ttl_seconds`; False when `holder` no longer
        holds it (another holder took it after it expired, or it was released)."""
        ...

    async def release_turn(self, session_id: str, holder: str) -> bool:
        """Give the lease up; False (and no effect) when `holder` does not hold it."""
        ...


class TurnQueueStorage(Protocol):
    """Background turns waiting for a process to run them, each taken by one (SPEC 23)."""

    async def enqueue_turn(self, turn: QueuedTurn) -> None:
        """Add a `queued` turn; `RecordExistsError` when its `turn_id` is taken."""
        ...

    async def claim_turn(self, worker: str, ttl_seconds: float) -> QueuedTurn | None:
        """Claim the oldest turn that is ready (queued, or claimed by a worker whose claim
        lapsed): it becomes `claimed` by `worker` for `ttl_seconds`; None when none waits.
        Concurrent claimers never get the same turn while its claim is live."""
        ...

    async def defer_turn(self, turn_id: str, worker: str, seconds: float) -> bool:
        """Give a claimed turn back to the queue, ready again in `seconds`; False when
        `worker` does not hold its claim."""
        ...

    async def mark_turn(self, turn_id: str, state: QueueState) -> None:
        """Mark a turn `started` (its `turn` entry is in the log) or `done`."""
        ...

    async def get_queued_turn(self, turn_id: str) -> QueuedTurn | None:
        """The turn, whatever its state; None when no turn has this id."""
        ...

    async def waiting_turns(self, session_id: str) -> list[QueuedTurn]:
        """The session's turns not started yet (`queued` or `claimed`), oldest first."""
        ...

    async def queue_counts(self) -> dict[str, int]:
        """How many turns are in each state."""
        ...


class DocumentStorage(Protocol):
    """The documents of stores, keyed by (scope_id, store, key).

    An expired document (`expires_at` passed) is absent for every method below:
    never read, and a put replaces it as if it were not there. So that both
    backends store and compare documents exactly, they may not hold the character
    U+0000 or unpaired surrogates, and their numbers are integers of 64 bits
    (-2**63 to 2**63 - 1) or finite floats (`ValueError` naming the field); query
    filters keep the same rule.
    """

    async def get_document(self, scope_id: str, store: str, key: str) -> StoreDocument | None:
        """The live document, or None when there is none (or it expired)."""
        ...

    async def query_documents(
        self, scope_id: str, store: str, query: DocumentQuery
    ) -> DocumentPage:
        """Live documents of one store in one scope, filtered, sorted and paged (see
        `DocumentQuery`). `ValueError` for a limit outside 1..100, a negative offset or
        a number outside the rule above, `TypeError` for a filter value that is not a
        string, number, boolean or None."""
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


class MemoryStorage(Protocol):
    """The notes agents keep about their owners (SPEC 21), and full-text search over them
    and over the session logs.

    A search takes what a person types into a search box, as PostgreSQL's
    `websearch_to_tsquery` reads it: every word and "quoted phrase" must be there, `or`
    between two terms takes either, `-word` leaves out what has it; words match their
    English stems ("units" finds "unit"). Matches come best first, as the database's own
    full-text ranking orders them, with a snippet whose matched words are in [brackets].
    A query with no word finds nothing; `ValueError` for a limit outside 1..50.
    """

    async def add_memory(
        self, entry: MemoryEntry, *, max_entries: int, max_chars: int
    ) -> MemoryUsage:
        """Keep `entry` unless its owner's entries for its agent would then be more than
        `max_entries` or hold more than `max_chars` characters in all; the usage after the
        add, or (`added` False, nothing written) as it stands. Concurrent adds of one owner
        count one after another, across processes. `ValueError` for an empty text, a text
        or name holding U+0000 or an unpaired surrogate, or a limit under 1;
        `RecordExistsError` for a taken id."""
        ...

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
        """`agent`'s entries, oldest first, of the owners matching every filter given (None:
        any), paged like `list_sessions`."""
        ...

    async def get_memory(self, entry_id: str) -> MemoryEntry | None:
        """The entry, or None."""
        ...

    async def delete_memory(
        self, entry_id: str, *, agent: str | None = None, owner: MemoryOwner | None = None
    ) -> bool:
        """Delete the entry when it is `agent`'s and `owner`'s (each when given); False
        when there is no such entry."""
        ...

    async def search_memory(
        self, agent: str, owner: MemoryOwner, query: str, *, limit: int = 10
    ) -> list[MemoryMatch]:
        """`owner`'s entries for `agent` that match `query`, best first."""
        ...

    async def search_sessions(
        self,
        scope_id: str,
        owner: str | None,
        query: str,
        *,
        limit: int = 10,
        exclude_session: str | None = None,
    ) -> list[SessionMatch]:
        """The events (those appended with a `search_text`) of the sessions of `scope_id`
        owned by `owner` (None: the sessions without one) that match `query`, best first,
        leaving out `exclude_session`. No other session's text is ever read."""


class UsageStorage(Protocol):
    """What model calls spent (SPEC 22). Records outlive their session: deleting a session
    never gives its money back to a daily limit."""

    async def record_usage(self, record: UsageRecord) -> None:
        """Keep one model call's usage (committed when this returns: a crash after it never
        loses it). `ValueError` for negative tokens or a cost that is negative or not finite."""
        ...

    async def session_spent(self, session_id: str) -> Spend:
        """What the calls of one session spent (nothing for an unknown session)."""
        ...

    async def owner_spent(self, owner: str | None, day: str) -> Spend:
        """What one owner's calls (None: the calls with no owner) spent on one UTC `day`
        (`YYYY-MM-DD`), across every session, process and replica of the database."""
        ...

    async def usage_report(self, query: UsageQuery) -> tuple[list[UsageRow], UsageRow]:
        """The rows of `query` and their total; `ValueError` for an unknown group, a naive
        datetime or a limit outside 1..10,000."""
        ...


class Storage(
    SessionStorage,
    RunStorage,
    ConfirmationStorage,
    TurnLeaseStorage,
    TurnQueueStorage,
    DocumentStorage,
    AutomationStorage,
    MemoryStorage,
    UsageStorage,
    Protocol,
):
    """A whole database: every concern above, plus its schema and its lifetime.

    Open one with `runtime.storage.open_storage`; a new backend implements this
    (see `runtime.storage._sql` for the shared SQL and its dialect hooks).
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
