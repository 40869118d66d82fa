"""Models: the one interface the turn loop calls, and its implementations.

A `Model` answers one streaming chat call: model-neutral messages and tool specs in
(`runtime.models.messages`), text deltas out as they arrive, then one `ModelReply` (the
tool calls, usage, finish reason and the model that answered). The loop depends on this
protocol only; each implementation translates the neutral form at its own edge:

- `runtime.models.openai.OpenAIModel`: any OpenAI-compatible Chat Completions endpoint
  through the `openai` SDK's async client, with bounded retries;
- `runtime.models.anthropic.AnthropicModel`: Anthropic's Messages API through the
  `anthropic` SDK (extra `anthropic`), with prompt caching;
- `runtime.models.fallback.FallbackModel`: a chain of models, the next one asked when a
  call fails for a reason another endpoint may not have (SPEC 25);
- `runtime.testing.FunctionModel`: a Python function, in process, for unit tests;
- the offline model (`runtime.models.local`) is an OpenAIModel on a local server.

`runtime.engine.model_pool.ModelRouter` picks the model of each call from the repo's
tiers (SPEC 8; `runtime.repo.model_bindings` reads them). Importing this module loads
no SDK: the protocol is cheap.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from runtime.events import Usage
    from runtime.models.messages import (
        AssistantMessage,
        ImagePart,
        Message,
        Part,
        SystemMessage,
        TextPart,
        ToolCallRequest,
        ToolResultMessage,
        ToolSpec,
        UserMessage,
    )

_MESSAGES = frozenset(
    {
        "AssistantMessage",
        "ImagePart",
        "Message",
        "Part",
        "SystemMessage",
        "TextPart",
        "ToolCallRequest",
        "ToolResultMessage",
        "ToolSpec",
        "UserMessage",
    }
)
"""Names of runtime.models.messages offered here, imported on first use: loading a repo
needs ModelSettings and ModelTier, not the messages and the events they bring."""


def __getattr__(name: str) -> object:
    if name in _MESSAGES:
        from runtime.models import messages

        return getattr(messages, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_MESSAGES})


ModelTier = Literal["simple", "default", "advanced"]
"""Which of the repo's models a call uses (SPEC 8): `default` is the session model."""


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """Per-call settings from an agent's `modelSettings`; None leaves the endpoint's default."""

    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ModelReply:
    """The whole answer of one model call, yielded last by `Model.stream`."""

    text: str
    tool_calls: tuple[ToolCallRequest, ...]
    usage: Usage
    model: str
    """The model that answered, as the response names it (else the one requested)."""
    finish_reason: str | None
    """Chat Completions' words whatever the provider: `stop`, `tool_calls`, `length`, ..."""
    fallback_from: str | None = None
    """The model asked for first, when a fallback answered instead (SPEC 25)."""
    provider: str | None = None
    """Who answered: `openai`, `anthropic` (None: a model that does not say)."""


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
        tools: Sequence[ToolSpec] | None,
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


__all__ = [
    "AssistantMessage",
    "ImagePart",
    "Message",
    "Model",
    "ModelReply",
    "ModelSettings",
    "ModelTier",
    "Part",
    "SystemMessage",
    "TextPart",
    "ToolCallRequest",
    "ToolResultMessage",
    "ToolSpec",
    "UserMessage",
]
