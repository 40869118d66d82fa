"""Models: the one interface the turn loop calls, and its implementations.

A `Model` answers one streaming Chat Completions-shaped call: messages, tools and
settings in; text deltas as they arrive, then one `ModelReply` (the tool calls,
usage, finish reason and the model that answered). The loop depends on this
protocol only. Implementations:

- `runtime.models.openai.OpenAIModel`: any OpenAI-compatible endpoint through the
  `openai` SDK's async client, with bounded retries (the production path);
- `runtime.testing.FunctionModel`: a Python function, in process, for unit tests;
- the offline model (`runtime.models.local`) is an OpenAIModel on a local server.

`runtime.engine.model_pool.ModelRouter` picks the model of each call from the repo's
tiers (SPEC 8; `runtime.repo.model_bindings` reads them). Importing this module loads
no SDK: the protocol is cheap.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from runtime.events import Usage

ModelTier = Literal["simple", "default", "advanced"]
"""Which of the repo's models a call uses (SPEC 8): `default` is the session model."""

Message = dict[str, Any]
"""A Chat Completions message (`role`, `content`, `tool_calls`, `tool_call_id`)."""

ToolSchema = dict[str, Any]
"""A Chat Completions `tools` entry: `{"type": "function", "function": {name, description,
parameters}}`."""


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """Per-call settings from an agent's `modelSettings`; None leaves the endpoint's default."""

    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A tool call the model asked for. `arguments` is the raw JSON text, unparsed."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ModelReply:
    """The whole answer of one model call, yielded last by `Model.stream`."""

    text: str
    tool_calls: tuple[ToolCallRequest, ...]
    usage: Usage
    model: str
    """The model that answered, as the response names it (else the one requested)."""
    finish_reason: str | None


@runtime_checkable
class Model(Protocol):
    """One streaming chat call. Implement it to run the runtime on any model."""

    @property
    def name(self) -> str:
        """The model asked for (recorded when a reply does not name one)."""
        ...

    def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] | None,
        settings: ModelSettings,
        *,
        cache_key: str | None = None,
    ) -> AsyncIterator[str | ModelReply]:
        """Yield the reply's text as it arrives, then exactly one `ModelReply`.

        `tools` is None when the call offers none. `cache_key` names the stable
        prompt prefix (an agent) for endpoints with prompt caching. A failure is a
        `runtime.exceptions.ModelError`, raised after any retries.
        """
        ...


__all__ = ["Message", "Model", "ModelReply", "ModelSettings", "ToolCallRequest", "ToolSchema"]
