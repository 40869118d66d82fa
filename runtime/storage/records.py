"""The records storage keeps, as frozen dataclasses: what every backend reads and writes.

Storage knows nothing about prompts, agents, entity schemas or the turn loop: a
record's JSON payloads (`data`, `state`, `usage`, `metadata`, documents) are kept
exactly as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

JSONObject = dict[str, Any]
"""A JSON object as Python values: str keys; str, int, float, bool, None, list, dict values."""

RunStatus = Literal["running", "ok", "error", "partial", "interrupted"]
RUN_STATUSES: tuple[RunStatus, ...] = ("running", "ok", "error", "partial", "interrupted")

MAX_QUERY_LIMIT = 100
"""The most documents one `query_documents` call returns."""

FilterValue = str | int | float | bool | None
"""What a query filter compares a top-level field with (null: the field is null or absent)."""


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
    search_text: str | None = None
    """Words `search_sessions` finds this event by (None: it is not searchable); kept in
    a full-text index beside the log, never returned with the event."""
    usage: UsageRecord | None = None
    """The model call this event answers: its usage is kept in the same transaction as
    the event (as `record_usage` keeps it), so the log and the usage never disagree."""
    starts_run: AgentRunRecord | None = None
    """The run this event opens (a turn's first entries): recorded in the same
    transaction, as `start_run` records it."""
    ends_run: RunEnd | None = None
    """How a run ended, recorded with the event that ends it (a turn's `done`), as
    `end_run` records it."""
    releases_turn: str | None = None
    """The holder of the session's turn lease that this event gives up (a turn's `done`):
    released in the same transaction (as `release_turn` releases it), so the session is
    never free while its turn's end is unwritten."""


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
class AgentRunRecord:
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
class RunEnd:
    """How a run ended, for `NewEvent.ends_run` (`RunStorage.end_run`'s arguments)."""

    run_id: str
    status: RunStatus
    usage: JSONObject
    error: str | None = None
    ended_at: datetime | None = None


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


AutomationRunStatus = Literal[
    "running", "ok", "error", "awaiting_confirmation", "missed", "skipped", "queued"
]
AUTOMATION_RUN_STATUSES: tuple[AutomationRunStatus, ...] = (
    "running",
    "ok",
    "error",
    "awaiting_confirmation",
    "missed",
    "skipped",
    "queued",
)


@dataclass(frozen=True, slots=True)
class AutomationRunRecord:
    """One run of an automation (SPEC 23), or a cron slot that did not run (`missed`,
    `skipped`). `slot` is the cron slot it is for: at most one record per (automation,
    slot) across every process of the database; `delivery_id` the same for a webhook's."""

    id: str
    automation: str
    trigger: str
    """`cron`, `webhook` or `manual`."""
    created_at: datetime
    status: AutomationRunStatus = "running"
    slot: datetime | None = None
    delivery_id: str | None = None
    session_id: str | None = None
    done_reason: str | None = None
    error: str | None = None
    reply: str | None = None
    ended_at: datetime | None = None
    deliveries: list[JSONObject] = field(default_factory=list)
    """Each delivery target's outcome: `{target, status, attempts, error?, delivery_id}`."""


@dataclass(frozen=True, slots=True)
class AlertClaim:
    """The failure alert, taken in the step that ends a failed run (`end_automation_run`):
    at `after` consecutive failures, unless one went out within `cooldown_seconds` before
    `now`; taking it adds `delivery` (with `consecutive_failures`) to the run's deliveries."""

    after: int
    cooldown_seconds: float
    now: datetime
    delivery: JSONObject


@dataclass(frozen=True, slots=True)
class AutomationState:
    """What an automation keeps across restarts: paused or not, its consecutive failures,
    when its failure alert last went out."""

    automation: str
    paused: bool = False
    failures: int = 0
    alerted_at: datetime | None = None


MemoryKind = Literal["user", "scope", "agent"]
MEMORY_KINDS: tuple[MemoryKind, ...] = ("user", "scope", "agent")
MAX_SEARCH_LIMIT = 50
"""The most matches one `search_memory` or `search_sessions` call returns."""


@dataclass(frozen=True, slots=True)
class MemoryOwner:
    """Whose notes an agent keeps (SPEC 21): one person (`user`: their scope and `sub`,
    `owner` "" for the operator), everyone of one scope (`scope`: `owner` ""), or
    everyone (`agent`: `scope_id` and `owner` "")."""

    kind: MemoryKind
    scope_id: str
    owner: str


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """One note an agent keeps about its owner."""

    id: str
    agent: str
    owner: MemoryOwner
    text: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """How full an owner's memory of one agent is, and whether an add went in."""

    entries: int
    chars: int
    added: bool = True


@dataclass(frozen=True, slots=True)
class MemoryMatch:
    """An entry found by `search_memory`, best first."""

    entry: MemoryEntry
    snippet: str


@dataclass(frozen=True, slots=True)
class SessionMatch:
    """An event of an earlier session found by `search_sessions`, best first: which
    session, the agent that wrote it (or the session's root), when, and the words around
    the match (matched words in [brackets])."""

    session_id: str
    agent: str
    at: datetime
    snippet: str


UsageGroup = Literal["agent", "model", "owner", "scope", "day", "session", "kind"]
USAGE_GROUPS: tuple[UsageGroup, ...] = (
    "agent",
    "model",
    "owner",
    "scope",
    "day",
    "session",
    "kind",
)
UsageKind = Literal["run", "compaction"]
"""What a model call was for: a run's own step (`run`), or a summary compaction asked for
(`compaction`, SPEC 20), which is spent on the turn's budget like any other call."""
USAGE_KINDS: tuple[UsageKind, ...] = ("run", "compaction")


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One model call's spend (SPEC 22): who called which model, for whom, what it cost.

    `turn_id` is the root run of the turn the call belongs to; `owner` and `scope_id`
    are the session's; `cost_usd` is None when the model's price is unknown;
    `estimated` when the provider reported no usage and the runtime counted it.
    `turn_first`, `agent_first`, `model_first`: the first call of its turn, of its agent in
    the turn, of its model in the turn (what a report counts turns by). `kind`: what the
    call was for (`UsageKind`).
    """

    session_id: str
    turn_id: str
    run_id: str
    agent: str
    model: str
    owner: str | None
    scope_id: str
    at: datetime
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    cost_usd: float | None = None
    estimated: bool = False
    turn_first: bool = False
    agent_first: bool = False
    model_first: bool = False
    kind: UsageKind = "run"


@dataclass(frozen=True, slots=True)
class Spend:
    """Tokens (input plus output) and USD (of the calls with a known price) spent."""

    tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One line of a usage report: its key (`{"agent": "writer"}`; empty for the total) and
    what the calls it groups spent."""

    key: dict[str, str | None]
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float | None
    model_calls: int
    turns: int

    def as_json(self) -> dict[str, Any]:
        return {
            **self.key,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "cost_usd": self.cost_usd,
            "model_calls": self.model_calls,
            "turns": self.turns,
        }


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """Which calls a usage report counts: `since` <= at < `until` (None: unbounded), of one
    caller (`scope_id` and `owner`; `scope_id` None: everyone's), grouped by `group_by`
    (None: the total only). Rows come by day in time order, else most expensive first
    (then by tokens: the order of calls without a price);
    at most `limit` of them (the total counts every call)."""

    since: datetime | None = None
    until: datetime | None = None
    group_by: UsageGroup | None = None
    scope_id: str | None = None
    owner: str | None = None
    limit: int = 1000


QueueState = Literal["queued", "claimed", "started", "done"]


@dataclass(frozen=True, slots=True)
class QueuedTurn:
    """A background turn in the durable queue (SPEC 23).

    `turn_id` is the id the turn's root run gets; `request` and `caller` are what starting
    the turn takes, as JSON. `queued` rows wait; a `claimed` one is being started by
    `claimed_by` (the claim lapses like a lease); a `started` one has its `turn` entry in
    the session's log, which from then on is the turn's only record (the lease sweep
    continues it after a crash); `done` once it ended.
    """

    turn_id: str
    session_id: str
    request: JSONObject
    caller: JSONObject
    state: QueueState
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class ExpiredTurn:
    """The lease of a turn whose holder stopped renewing it: the turn is to be continued.
    `turn` is the note its holder took the lease with (its caller, its root run)."""

    session_id: str
    holder: str
    turn: JSONObject


def utc_now() -> datetime:
    """The current time as an aware UTC datetime, the only kind the storage accepts."""
    return datetime.now(UTC)
