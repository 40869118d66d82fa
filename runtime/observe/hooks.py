"""Hooks into what happens inside a turn (SPEC 16), for tracing, metrics and logs.

Register observers with `Runtime.open(..., observers=[...])`. Subclass
`RunObserver` and override the hooks you need (each is a no-op by default):

    class Timings(RunObserver):
        def model_call_ended(self, call, ended): print(call.model, ended.duration_s)

Observers never change behaviour: a hook that raises is logged
(`observer_failed`) and the turn goes on. Hooks are synchronous and run inline,
so keep them quick; `runtime.otel` and `runtime.observe.metrics` implement them.
Every record names its session and run, so an observer can rebuild the tree:
model and tool calls belong to a run; a specialist run names its parent run and
the `call_subagent` call that started it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.events import DoneReason, ToolStatus, Usage
from runtime.models.messages import Message

logger = logging.getLogger("amodal")


@dataclass(frozen=True, slots=True)
class TurnStarted:
    session_id: str
    run_id: str
    agent: str
    bundle_version: str
    face: str = "chat"
    """Which front end started it: `chat` (/chat, the CLI, the Python API) or a protocol
    face (`openai_chat`, `responses`, `mcp`, `a2a`, `ag_ui`)."""


@dataclass(frozen=True, slots=True)
class TurnEnded:
    reason: DoneReason
    usage: Usage
    duration_s: float
    error: str | None = None
    cost_usd: float | None = None
    """What the turn's model calls cost, its specialists' included (None: no price known)."""


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A specialist run (depth 1 and deeper; the root run is the turn)."""

    session_id: str
    run_id: str
    agent: str
    depth: int
    parent_run_id: str
    parent_call_id: str
    """The `call_subagent` tool call (or the custom tool's call) that started it."""
    label: str


@dataclass(frozen=True, slots=True)
class RunEnded:
    status: str
    usage: Usage
    duration_s: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ModelCallStarted:
    session_id: str
    run_id: str
    agent: str
    call_id: str
    model: str
    """The model asked for; the one that answered is in `ModelCallEnded`."""
    messages: Sequence[Message] = field(repr=False)
    """The model-neutral messages (`runtime.models.messages`), whichever provider answers."""
    tools: Sequence[str] = ()
    provider: str | None = None
    """The provider asked (`openai`, `anthropic`), when the model says."""


@dataclass(frozen=True, slots=True)
class ModelCallEnded:
    duration_s: float
    model: str | None = None
    """The model that answered."""
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    text: str = field(default="", repr=False)
    tool_calls: int = 0
    error: str | None = None
    fallback_from: str | None = None
    """The model asked for first, when a fallback answered (SPEC 25)."""
    provider: str | None = None
    """The provider that answered, when the model says."""
    cost_usd: float | None = None
    """What the call cost in USD (SPEC 22); None when the model's price is unknown."""


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    session_id: str
    run_id: str
    agent: str
    call_id: str
    tool: str
    arguments: Any = field(repr=False)


@dataclass(frozen=True, slots=True)
class ToolCallEnded:
    status: ToolStatus
    duration_s: float
    result: Any = field(default=None, repr=False)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Compacted:
    """A session's view was compacted (SPEC 20): `stage` `mask` or `summary`."""

    session_id: str
    stage: str
    before_tokens: int
    after_tokens: int


class RunObserver:
    """Override any of these hooks; each start is followed by exactly one end."""

    def turn_started(self, turn: TurnStarted) -> None:
        """A turn claimed its session and starts running."""

    def turn_ended(self, turn: TurnStarted, ended: TurnEnded) -> None:
        """The turn ended (its `done` event)."""

    def run_started(self, run: RunStarted) -> None:
        """A specialist run started."""

    def run_ended(self, run: RunStarted, ended: RunEnded) -> None:
        """A specialist run ended."""

    def model_call_started(self, call: ModelCallStarted) -> None:
        """A model call is about to be sent."""

    def model_call_ended(self, call: ModelCallStarted, ended: ModelCallEnded) -> None:
        """A model call answered (or failed for good)."""

    def tool_call_started(self, call: ToolCallStarted) -> None:
        """A tool starts running (calls refused before they run are not reported)."""

    def tool_call_ended(self, call: ToolCallStarted, ended: ToolCallEnded) -> None:
        """A tool call ended, whatever its status."""

    def compacted(self, compaction: Compacted) -> None:
        """A session's view was compacted."""

    def close(self) -> None:
        """The runtime is closing: flush whatever is buffered."""


class Observers:
    """Calls every observer's hook; one that raises is logged and skipped, never propagated.

    Falsy when empty, so the loop builds no records when nobody listens.
    """

    def __init__(self, observers: Iterable[RunObserver] = ()) -> None:
        self._observers = tuple(observers)

    def __bool__(self) -> bool:
        return bool(self._observers)

    def add(self, observer: RunObserver) -> None:
        """Observe from now on (turns already running may miss some hooks)."""
        self._observers = (*self._observers, observer)

    def notify(self, hook: str, *records: object) -> None:
        for observer in self._observers:
            try:
                getattr(observer, hook)(*records)
            except Exception:  # an observer must never change what the turn does
                logger.exception(
                    "observer_failed",
                    extra={"event": "observer_failed", "observer": type(observer).__name__},
                )

    def close(self) -> None:
        self.notify("close")


NO_OBSERVERS = Observers()
