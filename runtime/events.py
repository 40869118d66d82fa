"""The events a turn streams (SPEC 6.2): one frozen dataclass per event type.

Every event names its session and the run it belongs to (the root run or a
specialist's), so a client can draw the delegation tree live. `to_json()` is
the wire shape shared by SSE, `amodal chat --json` and `stream: false`; the
`parse` function reads it back. `Event` is the union of all of them:

    async for event in runtime.stream("Hello"):
        match event:
            case TextDelta(text=text): print(text, end="")
            case Done(reason=reason): ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

from runtime._outcomes import DoneReason as DoneReason
from runtime._outcomes import SpecialistStatus as SpecialistStatus
from runtime._outcomes import ToolStatus as ToolStatus

EVENT_ID = re.compile(r"^[0-9]{1,18}(:[0-9]{1,9})?$")
"""An event's id: `SEQ` (its log entry) or `SEQ:K` (the K-th event of one entry), bounded
so it fits the database's integers."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts; added up across the model calls of a turn and its specialists.

    `input_tokens` is every input token of the call, whatever a prompt cache did with it;
    of those, `cached_tokens` were read from the provider's prompt cache and
    `cache_write_tokens` were written to it (Anthropic reports writes; OpenAI caches
    without saying). A price per token applies to `input_tokens - cached_tokens -
    cache_write_tokens` at the input price, to `cached_tokens` at the cached price and to
    `cache_write_tokens` at the provider's cache-write price.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def as_json(self) -> dict[str, int]:
        """`{"input", "output", "cached"}`, and `cache_write` when a cache was written."""
        body = {
            "input": self.input_tokens,
            "output": self.output_tokens,
            "cached": self.cached_tokens,
        }
        if self.cache_write_tokens:
            body["cache_write"] = self.cache_write_tokens
        return body

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Usage:
        data = data or {}
        return cls(
            data.get("input", 0),
            data.get("output", 0),
            data.get("cached", 0),
            data.get("cache_write", 0),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Event:
    """What every event carries: its session and its run, and where it sits in the session's
    log (`id`: the SSE event id, `SEQ` or `SEQ:K` for the K-th event of one log entry; a
    client that reconnects asks for the events after it)."""

    type: ClassVar[str]
    session_id: str
    run_id: str
    id: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        """The wire shape: `type`, `session_id`, `run_id`, then the event's own fields."""
        body: dict[str, Any] = {
            "type": self.type,
            "session_id": self.session_id,
            "run_id": self.run_id,
        }
        body.update(self._fields())
        return body

    def _fields(self) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("session_id", "run_id", "id")
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Session(_Event):
    """First of every turn: the agent it runs as and the bundle version serving it."""

    type: ClassVar[str] = "session"
    agent: str
    bundle_version: str
    created: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentChange(_Event):
    """The session was re-rooted from one agent to another (SPEC 3)."""

    type: ClassVar[str] = "agent"
    from_agent: str
    to_agent: str

    def _fields(self) -> dict[str, Any]:
        return {"from": self.from_agent, "to": self.to_agent}


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(_Event):
    type: ClassVar[str] = "text_delta"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall(_Event):
    """A tool call the model asked for; `arguments` parsed, or the raw text when not JSON."""

    type: ClassVar[str] = "tool_call"
    call_id: str
    name: str
    arguments: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult(_Event):
    """How a tool call ended: `result` when `ok`, else `error`."""

    type: ClassVar[str] = "tool_result"
    call_id: str
    name: str
    status: ToolStatus
    duration_ms: int
    result: Any = None
    error: str | None = None

    def _fields(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "call_id": self.call_id,
            "name": self.name,
            "status": self.status,
            "duration_ms": self.duration_ms,
        }
        if self.status == "ok":
            body["result"] = self.result
        else:
            body["error"] = self.error
        return body


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentStart(_Event):
    """A specialist run started; `run_id` is the specialist's own."""

    type: ClassVar[str] = "subagent_start"
    parent_run_id: str
    depth: int
    subagent: str
    label: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentEnd(_Event):
    type: ClassVar[str] = "subagent_end"
    status: SpecialistStatus
    duration_ms: int
    usage: Usage = field(default_factory=Usage)

    def _fields(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "duration_ms": self.duration_ms,
            "usage": self.usage.as_json(),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice(_Event):
    """`ask_choice`: the turn ends; the person's next message is the answer."""

    type: ClassVar[str] = "choice"
    question: str
    options: tuple[str, ...]

    def _fields(self) -> dict[str, Any]:
        return {"question": self.question, "options": list(self.options)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfirmationRequired(_Event):
    """A call that needs a person's approval; answer it with `confirm(session_id, call_id)`."""

    type: ClassVar[str] = "confirmation_required"
    call_id: str
    name: str
    arguments: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class SurfaceChanged(_Event):
    """What the agent may use changed since the session's last turn (SPEC 4.3)."""

    type: ClassVar[str] = "surface_changed"
    agent: str
    fingerprint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelUsage(_Event):
    """One model call's tokens, and the model that actually answered; `fallback_from` is the
    model asked for first when a fallback answered (on the wire only then)."""

    type: ClassVar[str] = "usage"
    model: str
    usage: Usage
    fallback_from: str | None = None
    cost_usd: float | None = None
    """What the call cost (SPEC 22); None when the model's price is unknown."""
    estimated: bool = False
    """The provider reported no usage: the runtime counted it (on the wire only then)."""

    def _fields(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "usage": self.usage.as_json(),
            "cost_usd": self.cost_usd,
        }
        if self.fallback_from is not None:
            body["fallback_from"] = self.fallback_from
        if self.estimated:
            body["estimated"] = True
        return body


CompactionStage = Literal["mask", "summary"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Compaction(_Event):
    """The session's view was compacted to stay inside the model's window (SPEC 20): old tool
    results elided (`mask`), or the older turns replaced by a summary (`summary`). The log
    keeps everything; `covered` counts the log entries the model now sees in short."""

    type: ClassVar[str] = "compaction"
    stage: CompactionStage
    before_tokens: int
    after_tokens: int
    covered: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Error(_Event):
    """The turn failed: `code` is `model_error`, `runtime_error` or `internal_error`.

    `cause` is the exception itself when the turn ran in this process (never on the
    wire): `ChatResult.raise_for_error()` raises it."""

    type: ClassVar[str] = "error"
    code: str
    message: str
    cause: BaseException | None = field(default=None, compare=False, repr=False)

    def _fields(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True, kw_only=True)
class Done(_Event):
    """Last of every turn, always: why it ended, the tokens and the cost of the whole turn
    (`cost_usd`: None when no call had a known price), and for `budget_exhausted` the
    limit it reached (`budget`: `{"limit", "value", "used"}`)."""

    type: ClassVar[str] = "done"
    reason: DoneReason
    usage: Usage
    cost_usd: float | None = None
    budget: dict[str, Any] | None = None

    def _fields(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "reason": self.reason,
            "usage": self.usage.as_json(),
            "cost_usd": self.cost_usd,
        }
        if self.budget is not None:
            body["budget"] = self.budget
        return body


Event = (
    Session
    | AgentChange
    | TextDelta
    | ToolCall
    | ToolResult
    | SubagentStart
    | SubagentEnd
    | Choice
    | ConfirmationRequired
    | SurfaceChanged
    | ModelUsage
    | Compaction
    | Error
    | Done
)
"""Any event a turn streams."""

EVENT_TYPES: dict[str, type[_Event]] = {
    cls.type: cls
    for cls in (
        Session,
        AgentChange,
        TextDelta,
        ToolCall,
        ToolResult,
        SubagentStart,
        SubagentEnd,
        Choice,
        ConfirmationRequired,
        SurfaceChanged,
        ModelUsage,
        Compaction,
        Error,
        Done,
    )
}


def parse(body: dict[str, Any]) -> Event:
    """The typed event of a wire object (as `to_json` wrote it); `ValueError` for anything else."""
    kind = EVENT_TYPES.get(str(body.get("type")))
    if kind is None:
        raise ValueError(f"unknown event type {body.get('type')!r}")
    values = {k: v for k, v in body.items() if k != "type"}
    if kind is AgentChange:
        values["from_agent"] = values.pop("from", None)
        values["to_agent"] = values.pop("to", None)
    if "usage" in values and kind in (SubagentEnd, ModelUsage, Done):
        values["usage"] = Usage.from_json(values["usage"])
    if kind is Choice:
        values["options"] = tuple(values.get("options") or ())
    try:
        return kind(**values)  # type: ignore[return-value]
    except TypeError as error:
        raise ValueError(f"not a {kind.type!r} event: {error}") from error
