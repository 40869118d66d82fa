"""`MissingProviderModel`: the model of an endpoint whose provider's package is not installed.

A missing optional part degrades, never blocks (SPEC 9.1): a repo that names an
`anthropic` model where the `anthropic` extra is missing still starts (`amodal validate`
warns, naming the pip command). Each call to that model fails, as a transient
`ModelError` naming the pip command, so a fallback chain moves on to its next entry and a
model with no fallback ends the turn with that error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from runtime.exceptions import ModelError
from runtime.models import Message, ModelReply, ModelSettings, ToolSpec
from runtime.models.endpoints import ModelEndpoint, missing_provider


class MissingProviderModel:
    """Fails every call with the pip command that installs `endpoint`'s provider."""

    def __init__(self, endpoint: ModelEndpoint) -> None:
        self.endpoint = endpoint

    @property
    def name(self) -> str:
        return self.endpoint.model

    @property
    def provider(self) -> str:
        return self.endpoint.provider

    def __repr__(self) -> str:
        return f"MissingProviderModel({self.endpoint})"

    async def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        settings: ModelSettings,
        *,
        cache_key: str | None = None,
    ) -> AsyncIterator[str | ModelReply]:
        # Transient: another endpoint (a fallback of another provider) may well answer.
        raise ModelError(
            model=self.endpoint.model,
            endpoint=self.endpoint.display_url,
            reason=missing_provider(self.endpoint.provider),
            status=None,
            attempts=1,
            transient=True,
        )
        yield ""  # pragma: no cover - makes this an async generator, as `Model` asks
