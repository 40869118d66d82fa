"""A session's log: one typed entry per kind, and the wire events each one stands for.

The log is append-only. Storage keeps an entry as its `kind` and its `data()` (a
JSON object); this module is the only place that knows the kinds. A turn writes
typed entries (`SessionLog.append`) and streams the events `wire_events` derives
from them, with the same ids a client replaying the log later gets (`decode`
reads a stored entry back, `after` replays from an id), so a client that lost its
stream sees the same events, once each, as one that never did.

An entry stands for zero or more events: an `AnswerEntry` (a model's answer) for
the `usage` event and one `tool_call` per call it asked for, ids `SEQ`, `SEQ:1`,
`SEQ:2`...; `UserEntry`, `SeedEntry`, `HandoffEntry`, `PromptEntry` and `ProposalEntry`
for none.
The field names of `data()` are the stored shape (and what `GET /sessions/{id}`
shows): they never change, so logs written by earlier versions decode too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol, Self

import anyio

from runtime import events
from runtime.events import EVENT_ID, CompactionStage, Done, DoneReason, Event, ToolStatus, Usage
from runtime.exceptions import InvalidEventIdError
from runtime.models import ToolCallRequest
from runtime.storage import (
    AgentRunRecord,
    JSONObject,
    NewEvent,
    RunEnd,
    Storage,
    StoredEvent,
    UsageRecord,
)
from runtime.surface.caller import EarlierRole

Position = tuple[int, int]
"""Where an event sits in a log: (entry seq, index of the event within the entry)."""

INTERRUPTED_CALL = "interrupted"
INTERRUPTED_CONTENT = json.dumps({"error": "interrupted: the turn ended before this call finished"})
UNFINISHED_CALL = "the call did not complete and may or may not have taken effect"
UNFINISHED_CONTENT = json.dumps({"status": "interrupted", "error": UNFINISHED_CALL})
"""What the model reads of a call a crash interrupted that is not run again (SPEC 23)."""


@dataclass(frozen=True, slots=True)
class Logged:
    """One entry as it sits in a session's log."""

    session_id: str
    seq: int
    run_id: str
    agent: str
    bundle_version: str
    created_at: datetime
    entry: LogEntry

    def event_fields(self, index: int = 0) -> dict[str, str]:
        """What every event of this entry has: its session, its run, and its own id."""
        return {
            "session_id": self.session_id,
            "run_id": self.run_id,
            "id": str(self.seq) if index == 0 else f"{self.seq}:{index}",
        }


class LogEntry(Protocol):
    kind: ClassVar[str]

    def data(self) -> JSONObject:
        """The stored shape."""
        ...

    def events(self, at: Logged) -> list[Event]:
        """The streamed events this entry stands for, in order, with their ids."""
        ...


class _Silent:
    """An entry that stands for no event."""

    def events(self, at: Logged) -> list[Event]:
        return []


@dataclass(frozen=True, slots=True)
class TurnEntry:
    """First of every turn: the root agent, its surface's fingerprint, the request context."""

    kind: ClassVar[str] = "turn"
    agent: str
    surface: str
    context: Mapping[str, str]
    created: bool

    def data(self) -> JSONObject:
        return {
            "agent": self.agent,
            "surface": self.surface,
            "context": dict(self.context),
            "created": self.created,
        }

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(
            data["agent"],
            data.get("surface", ""),
            data.get("context", {}),
            bool(data.get("created", False)),
        )

    def events(self, at: Logged) -> list[Event]:
        return [
            events.Session(
                **at.event_fields(),
                agent=self.agent,
                bundle_version=at.bundle_version,
                created=self.created,
            )
        ]


@dataclass(frozen=True, slots=True)
class UserEntry(_Silent):
    """The person's message, committed before the model is called."""

    kind: ClassVar[str] = "user"
    text: str

    def data(self) -> JSONObject:
        return {"text": self.text}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["text"])


@dataclass(frozen=True, slots=True)
class SeedEntry(_Silent):
    """A message of the conversation a client had before this session began (an OpenAI
    client sends the whole history), written before the session's first message. The
    model reads `user` and `assistant` ones as they were; a `system` one is quoted as
    context, never followed as instructions."""

    kind: ClassVar[str] = "seed"
    role: EarlierRole
    text: str

    def data(self) -> JSONObject:
        return {"role": self.role, "text": self.text}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["role"], data["text"])


@dataclass(frozen=True, slots=True)
class HandoffEntry(_Silent):
    """The note a re-rooted session's new agent reads as a user message (SPEC 3)."""

    kind: ClassVar[str] = "handoff"
    text: str

    def data(self) -> JSONObject:
        return {"text": self.text}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["text"])


@dataclass(frozen=True, slots=True)
class PromptEntry(_Silent):
    """The session's system prompt and what it was built from: byte-stable across restarts."""

    kind: ClassVar[str] = "prompt"
    text: str
    key: tuple[str, ...]

    def data(self) -> JSONObject:
        return {"text": self.text, "key": list(self.key)}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["text"], tuple(data["key"]))


@dataclass(frozen=True, slots=True)
class ProposalEntry(_Silent):
    """A source change `propose_source_change` kept for a person to review."""

    kind: ClassVar[str] = "proposal"
    proposal: Mapping[str, Any]

    def data(self) -> JSONObject:
        return dict(self.proposal)

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data)


@dataclass(frozen=True, slots=True)
class TextEntry:
    """A piece of a model's answer as it streamed."""

    kind: ClassVar[str] = "text"
    text: str

    def data(self) -> JSONObject:
        return {"text": self.text}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["text"])

    def events(self, at: Logged) -> list[Event]:
        return [events.TextDelta(**at.event_fields(), text=self.text)]


@dataclass(frozen=True, slots=True)
class AnswerEntry:
    """A model's whole answer: its text, the tool calls it asked for, who answered, usage."""

    kind: ClassVar[str] = "assistant"
    text: str
    calls: tuple[ToolCallRequest, ...]
    model: str
    usage: Usage
    fallback_from: str | None = None
    """The model asked for first, when a fallback answered (SPEC 25); stored only then."""
    cost_usd: float | None = None
    """What the call cost (SPEC 22); None when the price is unknown."""
    estimated: bool = False
    """The provider reported no usage; `usage` is the runtime's count (stored only then)."""

    def calls_data(self) -> list[JSONObject]:
        """The tool calls in their stored shape (Chat Completions' `tool_calls`, with the
        `extra_content` a provider attached when there is some)."""
        stored: list[JSONObject] = []
        for call in self.calls:
            data: JSONObject = {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            if call.provider_data:
                data["extra_content"] = dict(call.provider_data)
            stored.append(data)
        return stored

    def data(self) -> JSONObject:
        body: JSONObject = {
            "text": self.text,
            "tool_calls": self.calls_data(),
            "model": self.model,
            "usage": self.usage.as_json(),
        }
        if self.fallback_from is not None:
            body["fallback_from"] = self.fallback_from
        if self.cost_usd is not None:
            body["cost_usd"] = self.cost_usd
        if self.estimated:
            body["estimated"] = True
        return body

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        calls = tuple(
            ToolCallRequest(
                call["id"],
                call.get("function", {}).get("name", ""),
                call.get("function", {}).get("arguments", ""),
                call.get("extra_content"),
            )
            for call in data.get("tool_calls") or ()
        )
        return cls(
            data.get("text") or "",
            calls,
            data.get("model", ""),
            Usage.from_json(data.get("usage")),
            data.get("fallback_from"),
            data.get("cost_usd"),
            bool(data.get("estimated")),
        )

    def events(self, at: Logged) -> list[Event]:
        found: list[Event] = [
            events.ModelUsage(
                **at.event_fields(),
                model=self.model,
                usage=self.usage,
                fallback_from=self.fallback_from,
                cost_usd=self.cost_usd,
                estimated=self.estimated,
            )
        ]
        found += [
            events.ToolCall(
                **at.event_fields(index),
                call_id=call.id,
                name=call.name,
                arguments=shown_arguments(call.arguments),
            )
            for index, call in enumerate(self.calls, 1)
        ]
        return found


@dataclass(frozen=True, slots=True)
class ToolResultEntry:
    """How a tool call ended: `result` when `ok`, else `error`; `content` is what the model
    reads (the encoded result, with `_budget` when due)."""

    kind: ClassVar[str] = "tool_result"
    call_id: str
    name: str
    status: ToolStatus
    content: str
    duration_ms: int = 0
    result: Any = None
    error: str | None = None

    @classmethod
    def interrupted(cls, call_id: str, name: str) -> Self:
        """The result of a call its turn never finished (a crash, a cancelled turn)."""
        return cls(call_id, name, "error", INTERRUPTED_CONTENT, error=INTERRUPTED_CALL)

    @classmethod
    def unfinished(cls, call_id: str, name: str) -> Self:
        """The result of a call whose turn continued after a crash, not run again: it may
        or may not have taken effect, and the model decides what to do (SPEC 23)."""
        return cls(
            call_id, name, "error", UNFINISHED_CONTENT, error=f"interrupted: {UNFINISHED_CALL}"
        )

    @classmethod
    def denied(cls, call_id: str, name: str, reason: str) -> Self:
        return cls(call_id, name, "denied", json.dumps({"error": reason}), error=reason)

    def data(self) -> JSONObject:
        body: JSONObject = {
            "call_id": self.call_id,
            "name": self.name,
            "status": self.status,
            "duration_ms": self.duration_ms,
        }
        if self.status == "ok":
            body["result"] = self.result
        else:
            body["error"] = self.error
        body["content"] = self.content
        return body

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(
            data["call_id"],
            data.get("name", ""),
            data["status"],
            data.get("content", ""),
            int(data.get("duration_ms", 0)),
            data.get("result"),
            data.get("error"),
        )

    def events(self, at: Logged) -> list[Event]:
        return [
            events.ToolResult(
                **at.event_fields(),
                call_id=self.call_id,
                name=self.name,
                status=self.status,
                duration_ms=self.duration_ms,
                result=self.result,
                error=self.error,
            )
        ]


@dataclass(frozen=True, slots=True)
class RootChangeEntry:
    """The session was re-rooted (SPEC 3)."""

    kind: ClassVar[str] = "agent"
    from_agent: str
    to_agent: str

    def data(self) -> JSONObject:
        return {"from": self.from_agent, "to": self.to_agent}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["from"], data["to"])

    def events(self, at: Logged) -> list[Event]:
        return [
            events.AgentChange(
                **at.event_fields(), from_agent=self.from_agent, to_agent=self.to_agent
            )
        ]


@dataclass(frozen=True, slots=True)
class SurfaceChangeEntry:
    """What the root agent may use changed since its last turn (SPEC 4.3)."""

    kind: ClassVar[str] = "surface_changed"
    agent: str
    fingerprint: str

    def data(self) -> JSONObject:
        return {"agent": self.agent, "fingerprint": self.fingerprint}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["agent"], data["fingerprint"])

    def events(self, at: Logged) -> list[Event]:
        return [
            events.SurfaceChanged(
                **at.event_fields(), agent=self.agent, fingerprint=self.fingerprint
            )
        ]


@dataclass(frozen=True, slots=True)
class SpecialistStartEntry:
    """A specialist run started; the entry's run is the specialist's own."""

    kind: ClassVar[str] = "subagent_start"
    parent_run_id: str
    depth: int
    subagent: str
    label: str

    def data(self) -> JSONObject:
        return {
            "parent_run_id": self.parent_run_id,
            "depth": self.depth,
            "subagent": self.subagent,
            "label": self.label,
        }

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["parent_run_id"], data["depth"], data["subagent"], data["label"])

    def events(self, at: Logged) -> list[Event]:
        return [
            events.SubagentStart(
                **at.event_fields(),
                parent_run_id=self.parent_run_id,
                depth=self.depth,
                subagent=self.subagent,
                label=self.label,
            )
        ]


@dataclass(frozen=True, slots=True)
class SpecialistEndEntry:
    kind: ClassVar[str] = "subagent_end"
    status: events.SpecialistStatus
    duration_ms: int
    usage: Usage = field(default_factory=Usage)

    def data(self) -> JSONObject:
        return {
            "status": self.status,
            "duration_ms": self.duration_ms,
            "usage": self.usage.as_json(),
        }

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["status"], data["duration_ms"], Usage.from_json(data.get("usage")))

    def events(self, at: Logged) -> list[Event]:
        return [
            events.SubagentEnd(
                **at.event_fields(),
                status=self.status,
                duration_ms=self.duration_ms,
                usage=self.usage,
            )
        ]


@dataclass(frozen=True, slots=True)
class ChoiceEntry:
    """`ask_choice`: the turn ends; the person's next message is the answer."""

    kind: ClassVar[str] = "choice"
    question: str
    options: tuple[str, ...]

    def data(self) -> JSONObject:
        return {"question": self.question, "options": list(self.options)}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["question"], tuple(data.get("options") or ()))

    def events(self, at: Logged) -> list[Event]:
        return [events.Choice(**at.event_fields(), question=self.question, options=self.options)]


@dataclass(frozen=True, slots=True)
class ConfirmationEntry:
    """A call waiting for a person's approval."""

    kind: ClassVar[str] = "confirmation_required"
    call_id: str
    name: str
    arguments: Any

    def data(self) -> JSONObject:
        return {"call_id": self.call_id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["call_id"], data["name"], data.get("arguments"))

    def events(self, at: Logged) -> list[Event]:
        return [
            events.ConfirmationRequired(
                **at.event_fields(), call_id=self.call_id, name=self.name, arguments=self.arguments
            )
        ]


@dataclass(frozen=True, slots=True)
class CompactionEntry:
    """The model's view of the session was compacted (SPEC 20); the log before it stays whole.

    `through` is the last entry the compaction reaches: with stage `mask`, the tool results
    up to it longer than `MASK_OVER` characters are shown elided; with `summary`, the
    conversation up to it is shown as `summary`. `covered` counts the entries it shortened.
    """

    kind: ClassVar[str] = "compaction"
    stage: CompactionStage
    through: int
    before_tokens: int
    after_tokens: int
    covered: int
    summary: str = ""
    focus: str | None = None
    usage: Usage = field(default_factory=Usage)
    """What the summariser's calls took (SPEC 22): the session's spend counts it."""
    cost_usd: float | None = None

    def data(self) -> JSONObject:
        body: JSONObject = {
            "stage": self.stage,
            "through": self.through,
            "before_tokens": self.before_tokens,
            "after_tokens": self.after_tokens,
            "covered": self.covered,
        }
        if self.stage == "summary":
            body["summary"] = self.summary
        if self.focus is not None:
            body["focus"] = self.focus
        if self.usage != Usage():
            body["usage"] = self.usage.as_json()
        if self.cost_usd is not None:
            body["cost_usd"] = self.cost_usd
        return body

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(
            data["stage"],
            data["through"],
            data["before_tokens"],
            data["after_tokens"],
            data["covered"],
            data.get("summary", ""),
            data.get("focus"),
            Usage.from_json(data.get("usage")),
            data.get("cost_usd"),
        )

    def events(self, at: Logged) -> list[Event]:
        return [
            events.Compaction(
                **at.event_fields(),
                stage=self.stage,
                before_tokens=self.before_tokens,
                after_tokens=self.after_tokens,
                covered=self.covered,
            )
        ]


@dataclass(frozen=True, slots=True)
class ResumedEntry(_Silent):
    """The turn's holder died and another process continues the turn from here (SPEC 23);
    `count` is how many times the turn has been continued."""

    kind: ClassVar[str] = "resumed"
    count: int
    holder: str

    def data(self) -> JSONObject:
        return {"count": self.count, "holder": self.holder}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(int(data["count"]), str(data.get("holder", "")))


@dataclass(frozen=True, slots=True)
class ErrorEntry:
    """What ended a turn that failed."""

    kind: ClassVar[str] = "error"
    code: str
    message: str

    def data(self) -> JSONObject:
        return {"code": self.code, "message": self.message}

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(data["code"], data["message"])

    def events(self, at: Logged) -> list[Event]:
        fields = at.event_fields()
        return [
            events.Error(
                session_id=fields["session_id"],
                run_id=fields["run_id"],
                id=fields["id"],
                code=self.code,
                message=self.message,
            )
        ]


@dataclass(frozen=True, slots=True)
class DoneEntry:
    """Last of every turn."""

    kind: ClassVar[str] = "done"
    reason: DoneReason
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    budget: JSONObject | None = None
    """The limit a `budget_exhausted` turn reached (SPEC 22)."""

    def data(self) -> JSONObject:
        body: JSONObject = {"reason": self.reason, "usage": self.usage.as_json()}
        if self.cost_usd is not None:
            body["cost_usd"] = self.cost_usd
        if self.budget is not None:
            body["budget"] = self.budget
        return body

    @classmethod
    def decode(cls, data: JSONObject) -> Self:
        return cls(
            data["reason"],
            Usage.from_json(data.get("usage")),
            data.get("cost_usd"),
            data.get("budget"),
        )

    def events(self, at: Logged) -> list[Event]:
        return [
            events.Done(
                **at.event_fields(),
                reason=self.reason,
                usage=self.usage,
                cost_usd=self.cost_usd,
                budget=self.budget,
            )
        ]


_KINDS: dict[str, Any] = {
    kind.kind: kind
    for kind in (
        TurnEntry,
        UserEntry,
        SeedEntry,
        HandoffEntry,
        PromptEntry,
        ProposalEntry,
        TextEntry,
        AnswerEntry,
        ToolResultEntry,
        RootChangeEntry,
        SurfaceChangeEntry,
        SpecialistStartEntry,
        SpecialistEndEntry,
        ChoiceEntry,
        ConfirmationEntry,
        CompactionEntry,
        ResumedEntry,
        ErrorEntry,
        DoneEntry,
    )
}


@dataclass(frozen=True, slots=True)
class UnknownEntry(_Silent):
    """An entry of a kind this version does not know (written by a newer one): kept, shown
    by `GET /sessions/{id}`, streamed as nothing."""

    kind: ClassVar[str] = ""
    stored_kind: str
    stored: Mapping[str, Any]

    def data(self) -> JSONObject:
        return dict(self.stored)


def decode(stored: StoredEvent) -> Logged:
    """The typed entry of a stored one."""
    kind = _KINDS.get(stored.type)
    entry: LogEntry = (
        UnknownEntry(stored.type, stored.data) if kind is None else kind.decode(stored.data)
    )
    return Logged(
        stored.session_id,
        stored.seq,
        stored.run_id or "",
        stored.agent or "",
        stored.bundle_version or "",
        stored.created_at,
        entry,
    )


def kind_of(logged: Logged) -> str:
    """The stored kind of an entry (an unknown entry keeps its own)."""
    entry = logged.entry
    return entry.stored_kind if isinstance(entry, UnknownEntry) else entry.kind


def wire_events(logged: Logged) -> list[Event]:
    """The streamed events a logged entry stands for, in order, with their ids."""
    return logged.entry.events(logged)


def position(event_id: str) -> Position:
    """The position an event id names; `InvalidEventIdError` for anything else."""
    if not EVENT_ID.fullmatch(event_id):
        raise InvalidEventIdError(event_id)
    seq, _, index = event_id.partition(":")
    return int(seq), int(index) if index else 0


def after(entries: Iterable[Logged], seen: Position) -> list[Event]:
    """The events of `entries` that come after position `seen`."""
    found: list[Event] = []
    for logged in entries:
        if logged.seq < seen[0]:
            continue
        for event in wire_events(logged):
            if position(event.id) > seen:
                found.append(event)
    return found


def open_turn(entries: Iterable[Logged]) -> Logged | None:
    """The last `TurnEntry` of a log when its turn has no `DoneEntry` yet."""
    running = None
    for logged in entries:
        if isinstance(logged.entry, TurnEntry):
            running = logged
        elif (
            isinstance(logged.entry, DoneEntry)
            and running is not None
            and logged.run_id == running.run_id
        ):
            running = None
    return running


@dataclass(frozen=True, slots=True)
class PastTurn:
    """One turn of a session as its log tells it."""

    run_id: str
    """The turn's root run (`RunningTurn.run_id` while it ran)."""
    agent: str
    started_at: datetime
    ended_at: datetime | None
    """When its `done` was written (None while it runs)."""
    message: str | None
    """The person's message; None for a turn that answered or withdrew what the one before it
    waited for (a confirmation, a choice)."""
    events: tuple[Event, ...]
    """What it streamed, specialists' events too, from `session` to `done` (no `done` yet
    while it runs)."""

    @property
    def done(self) -> Done | None:
        return next((e for e in reversed(self.events) if isinstance(e, Done)), None)


def past_turns(entries: Iterable[Logged]) -> list[PastTurn]:
    """Every turn of a log, oldest first. A turn is its `TurnEntry` and every entry up to the
    next one (one turn runs at a time per session, so they are all its own)."""
    spans: list[list[Logged]] = []
    for logged in entries:
        if isinstance(logged.entry, TurnEntry):
            spans.append([])
        if spans:
            spans[-1].append(logged)
    return [_past_turn(span) for span in spans]


def _past_turn(span: list[Logged]) -> PastTurn:
    first = span[0]
    message = next(
        (
            logged.entry.text
            for logged in span
            if isinstance(logged.entry, UserEntry) and logged.run_id == first.run_id
        ),
        None,
    )
    found = [event for logged in span for event in wire_events(logged)]
    ended = next(
        (
            logged.created_at
            for logged in span
            if isinstance(logged.entry, DoneEntry) and logged.run_id == first.run_id
        ),
        None,
    )
    assert isinstance(first.entry, TurnEntry)
    return PastTurn(first.run_id, first.entry.agent, first.created_at, ended, message, tuple(found))


def shown_arguments(arguments: str) -> Any:
    """Tool-call arguments as events show them: parsed, or the raw text when not JSON."""
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments


async def read(storage: Storage, session_id: str, after_seq: int = 0) -> list[Logged]:
    """A session's log (the entries after `after_seq`), typed."""
    return [decode(stored) for stored in await storage.list_events(session_id, after_seq)]


async def append(
    storage: Storage,
    session_id: str,
    entry: LogEntry,
    *,
    run_id: str,
    agent: str,
    bundle_version: str | None,
) -> Logged:
    """Append one entry, shielded from cancellation (a cancelled turn still writes it)."""
    with anyio.CancelScope(shield=True):
        (logged,) = await _append_all(storage, session_id, (entry,), run_id, agent, bundle_version)
    return logged


@dataclass(frozen=True, slots=True)
class Bookkeeping:
    """What a turn's step writes besides its entries, in the same transaction: the root
    run's record as the turn opens, its end and the session's lease as the turn ends."""

    starts_run: AgentRunRecord | None = None
    ends_run: RunEnd | None = None
    releases_turn: str | None = None
    """The lease's holder."""


NO_BOOKKEEPING = Bookkeeping()


async def _append_all(
    storage: Storage,
    session_id: str,
    entries: tuple[LogEntry, ...],
    run_id: str,
    agent: str,
    bundle_version: str | None,
    usage: UsageRecord | None = None,
    kept: Bookkeeping = NO_BOOKKEEPING,
) -> list[Logged]:
    """Several entries of one run in one transaction, for callers inside a shield already;
    `usage`: the model call the last one (an answer) ends, and `kept`, in the same
    transaction."""
    last = len(entries) - 1
    extra = (usage, kept.starts_run, kept.ends_run, kept.releases_turn)  # the last entry's
    stored = await storage.append_events(
        session_id,
        [
            NewEvent(
                entry.kind,
                entry.data(),
                run_id,
                agent,
                bundle_version,
                _search_text(entry),
                *(extra if index == last else ()),
            )
            for index, entry in enumerate(entries)
        ],
    )
    return [
        Logged(
            session_id,
            event.seq,
            run_id,
            agent,
            bundle_version or "",
            event.created_at,
            entry,
        )
        for event, entry in zip(stored, entries, strict=True)
    ]


def _search_text(entry: LogEntry) -> str | None:
    """What `session_search` finds an entry by: the person's messages and the agents'
    answers (never tool results, prompts or notes of the runtime's own)."""
    if isinstance(entry, UserEntry | AnswerEntry):
        return entry.text or None
    return None


class Publisher(Protocol):
    def publish(self, event: Event) -> None:
        """Hand an event on without waiting."""
        ...


class Recorder(Protocol):
    async def record(
        self, *entries: LogEntry, run_id: str, agent: str, usage: UsageRecord | None = None
    ) -> list[Event]:
        """Append durable entries in one transaction (completing even if the caller is
        cancelled), the last an answer with its call's `usage`; the wire events they stand
        for, with their ids."""
        ...


class SessionLog:
    """A turn's recorder: appends to the session's log, and tells `follow` (the session's
    view) of each entry, so the turn never reads its own entries back.

    Specialists' entries (`stream_run`) are also published to `sink`, the channel their
    events reach the client through, in the same step as their append: concurrent
    specialists then stream in the order of their entries, so what a client saw is
    always a prefix of the log it can replay from.
    """

    def __init__(
        self,
        storage: Storage,
        session_id: str,
        bundle_version: str,
        sink: Publisher,
        follow: Callable[[Logged], None] | None = None,
    ) -> None:
        self._storage = storage
        self._session_id = session_id
        self._version = bundle_version
        self._sink = sink
        self._follow = follow
        """Told of every entry as it is appended (the session's view)."""
        self._streamed: set[str] = set()
        self._lock = anyio.Lock(fast_acquire=True)  # no checkpoint when nobody waits
        self._staged: tuple[str, LogEntry] | None = None

    def stage(self, entry: LogEntry, run_id: str) -> None:
        """Write `entry` with the next entries of run `run_id`, in their step: an entry
        nothing needs in the log before that step (a turn's new prompt) costs no
        transaction of its own."""
        self._staged = (run_id, entry)

    def stream_run(self, run_id: str) -> None:
        """Publish the entries of this (specialist) run to the sink from now on."""
        self._streamed.add(run_id)

    async def record(
        self,
        *entries: LogEntry,
        run_id: str,
        agent: str,
        usage: UsageRecord | None = None,
        kept: Bookkeeping = NO_BOOKKEEPING,
    ) -> list[Event]:
        """`Recorder.record`, and what the step `kept` (the turn's own steps)."""
        with anyio.CancelScope(shield=True):  # the append, and telling the view of it
            async with self._lock:
                if self._staged is not None and self._staged[0] == run_id:
                    entries, self._staged = (self._staged[1], *entries), None
                logged = await _append_all(
                    self._storage,
                    self._session_id,
                    entries,
                    run_id,
                    agent,
                    self._version,
                    usage,
                    kept,
                )
                found = [event for one in logged for event in wire_events(one)]
                if run_id in self._streamed:
                    for event in found:
                        self._sink.publish(event)
                if self._follow is not None:
                    for one in logged:
                        self._follow(one)
        return found


__all__ = [
    "AnswerEntry",
    "ChoiceEntry",
    "CompactionEntry",
    "ConfirmationEntry",
    "DoneEntry",
    "ErrorEntry",
    "HandoffEntry",
    "LogEntry",
    "Logged",
    "PastTurn",
    "Position",
    "PromptEntry",
    "ProposalEntry",
    "Recorder",
    "ResumedEntry",
    "RootChangeEntry",
    "SeedEntry",
    "SessionLog",
    "SpecialistEndEntry",
    "SpecialistStartEntry",
    "SurfaceChangeEntry",
    "TextEntry",
    "ToolResultEntry",
    "TurnEntry",
    "UnknownEntry",
    "UserEntry",
    "after",
    "append",
    "decode",
    "kind_of",
    "open_turn",
    "past_turns",
    "position",
    "read",
    "shown_arguments",
    "wire_events",
]
