"""`FallbackModel`: a model entry and its `fallback` list, asked in order (SPEC 25).

Each model makes its own retries first. When a call still fails for a reason another
endpoint may not have (`ModelError.transient`: a rate limit, a 5xx, a timeout, a
connection error, a stream cut off) and nothing of its answer has reached the caller,
the next model is asked the same call. A 400-class error is the request's own fault
and is raised at once. The reply of a fallback names the model that answered and
`fallback_from`, the model asked for first.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence

from runtime.exceptions import ModelError
from runtime.models import Message, Model, ModelReply, ModelSettings, ToolSpec

logger = logging.getLogger("amodal")


class FallbackModel:
    """`models[0]`, then each next one when the one before failed transiently."""

    def __init__(self, models: Sequence[Model]) -> None:
        if not models:
            raise ValueError("a fallback chain needs at least one model")
        self.models = tuple(models)

    @property
    def name(self) -> str:
        return self.models[0].name

    @property
    def provider(self) -> str | None:
        return getattr(self.models[0], "provider", None)

    def __repr__(self) -> str:
        return "FallbackModel(" + ", ".join(map(repr, self.models)) + ")"

    async def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        settings: ModelSettings,
        *,
        cache_key: str | None = None,
    ) -> AsyncIterator[str | ModelReply]:
        failed: list[ModelError] = []
        for index, model in enumerate(self.models):
            yielded = False
            stream = model.stream(messages, tools, settings, cache_key=cache_key)
            try:
                async for item in stream:
                    if isinstance(item, ModelReply):
                        if index:
                            item = dataclasses.replace(item, fallback_from=self.name)
                    else:
                        yielded = True
                    yield item
                return
            except ModelError as error:
                last = index == len(self.models) - 1
                if yielded or not error.transient or last:
                    raise _tried(error, failed) from error
                failed.append(error)
                logger.warning(
                    "model_fallback",
                    extra={
                        "event": "model_fallback",
                        "model": error.model,
                        "endpoint": error.endpoint,
                        "reason": error.reason,
                        "next": self.models[index + 1].name,
                    },
                )
            finally:
                close = getattr(stream, "aclose", None)
                if close is not None:  # at once when the caller stops early
                    await close()


def _tried(error: ModelError, failed: list[ModelError]) -> ModelError:
    """The last failure, saying which models failed before it."""
    if not failed:
        return error
    before = "; ".join(f"{e.model!r} at {e.endpoint}: {e.reason}" for e in failed)
    return ModelError(
        model=error.model,
        endpoint=error.endpoint,
        reason=f"{error.reason} (after the fallback from {before})",
        status=error.status,
        attempts=error.attempts,
        transient=error.transient,
    )


__all__ = ["FallbackModel"]
