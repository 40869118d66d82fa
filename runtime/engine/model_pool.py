"""Which model answers a call (SPEC 8, 25): the repo's tiers and their fallbacks, the
environment, or the model the embedding application chose.

One client per endpoint (an `OpenAIModel` or an `AnthropicModel`, by its provider), made on
first use and kept (clients are costly to build); a tier with fallbacks is a
`FallbackModel` over them. With no endpoint configured, the offline model is started on
first use (and stopped by `aclose`), or `NoModelError` names both ways out.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Mapping

import anyio

from runtime.exceptions import ConfigurationError, NoModelError
from runtime.models import Model, ModelTier
from runtime.models.endpoints import ModelEndpoint, provider_installed
from runtime.models.fallback import FallbackModel
from runtime.models.missing import MissingProviderModel
from runtime.repo.bundle import Bundle
from runtime.repo.model_bindings import resolve_chain

_EndpointKey = tuple[str, str, str, str | None]


class ModelRouter:
    """The model of every call of a runtime.

    `model` replaces every tier's model (the embedding application chose one);
    `model_name` replaces the session model's name (as `MODEL_MAIN` does) at the
    configured endpoint. `offline` False refuses to start the offline model.
    """

    def __init__(
        self,
        environ: Mapping[str, str],
        *,
        model: Model | None = None,
        model_name: str | None = None,
        offline: bool = True,
    ) -> None:
        self._environ = {**environ, "MODEL_MAIN": model_name} if model_name else environ
        self._model = model
        self._offline = offline
        self._clients: dict[_EndpointKey, Model] = {}
        self._chains: dict[tuple[_EndpointKey, ...], Model] = {}
        self._local: ModelEndpoint | None = None
        self._local_lock = anyio.Lock()
        self._stack = contextlib.ExitStack()

    async def warm(self, bundle: Bundle) -> None:
        """Load what a first model call needs (an SDK: seconds on a busy machine) now, off
        the event loop, so a runtime's first turn starts as fast as the others: a server that
        takes over a dead server's session answers within the lease, not the lease plus an
        import. Nothing to do for a model the application gave, or when none is configured."""
        if self._model is not None:
            return
        try:
            chain = resolve_chain(bundle.config, "default", self._environ) or ()
        except ConfigurationError:
            return  # the first turn reports it, as an error event naming the fix
        for provider in sorted({endpoint.provider for endpoint in chain}):
            module = f"runtime.models.{provider}"
            try:
                await anyio.to_thread.run_sync(importlib.import_module, module)
            except ImportError:
                return  # its calls fail naming the pip command; validate warned

    async def model(self, bundle: Bundle, tier: ModelTier) -> Model:
        """The model for a call of `tier` under `bundle`'s configuration."""
        if self._model is not None:
            return self._model
        chain = resolve_chain(bundle.config, tier, self._environ) or (await self._offline_model(),)
        if len(chain) == 1:
            return self._client(chain[0])
        keys = tuple(_key(endpoint) for endpoint in chain)
        if keys not in self._chains:
            self._chains[keys] = FallbackModel([self._client(e) for e in chain])
        return self._chains[keys]

    def _client(self, endpoint: ModelEndpoint) -> Model:
        key = _key(endpoint)
        if key not in self._clients:
            # Imported here: an SDK loads only when a process first calls its provider.
            if not provider_installed(endpoint.provider):
                # Degrades, never blocks: each call fails naming the pip command (and a
                # fallback chain moves on); `amodal validate` warned about it.
                self._clients[key] = MissingProviderModel(endpoint)
            elif endpoint.provider == "anthropic":
                from runtime.models.anthropic import AnthropicModel

                self._clients[key] = AnthropicModel.for_endpoint(endpoint)
            else:
                from runtime.models.openai import OpenAIModel

                client: Model = OpenAIModel.for_endpoint(endpoint)
                if self._local is not None and endpoint == self._local:
                    from runtime.models.local import OfflineModel

                    client = OfflineModel(client)  # one call at a time, entities decoded
                self._clients[key] = client
        return self._clients[key]

    async def _offline_model(self) -> ModelEndpoint:
        from runtime.models import local

        async with self._local_lock:
            if self._local is None:
                if not self._offline or not local.local_model_installed():
                    raise NoModelError(local.NO_MODEL)
                self._local = await anyio.to_thread.run_sync(
                    self._stack.enter_context, local.start_local_model()
                )
                print(local.ANNOUNCEMENT, file=sys.stderr)
            return self._local

    async def aclose(self) -> None:
        """Close every client made here and stop the offline model if it was started."""
        for model in self._clients.values():
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()
        self._clients.clear()
        self._chains.clear()
        await anyio.to_thread.run_sync(self._stack.close)
        self._local = None


def _key(endpoint: ModelEndpoint) -> _EndpointKey:
    return (endpoint.provider, endpoint.model, endpoint.base_url, endpoint.api_key)
