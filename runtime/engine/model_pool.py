"""Which model answers a call (SPEC 8): the repo's tiers, the environment, or the model the
embedding application chose.

One `OpenAIModel` per endpoint, made on first use and kept (clients are costly
to build). With no endpoint configured, the offline model is started on first
use (and stopped by `aclose`), or `NoModelError` names both ways out.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

import anyio

from runtime.exceptions import ConfigurationError, NoModelError
from runtime.models import Model, ModelTier
from runtime.models.endpoints import ModelEndpoint
from runtime.repo.bundle import Bundle
from runtime.repo.model_bindings import resolve_endpoint

if TYPE_CHECKING:
    from runtime.models.openai import OpenAIModel


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
        self._models: dict[tuple[str, str, str | None], OpenAIModel] = {}
        self._local: ModelEndpoint | None = None
        self._local_lock = anyio.Lock()
        self._stack = contextlib.ExitStack()

    async def warm(self, bundle: Bundle) -> None:
        """Load what a first model call needs (the SDK: seconds on a busy machine) now, off
        the event loop, so a runtime's first turn starts as fast as the others: a server that
        takes over a dead server's session answers within the lease, not the lease plus an
        import. Nothing to do for a model the application gave, or when none is configured."""
        if self._model is not None:
            return
        try:
            endpoint = resolve_endpoint(bundle.config, "default", self._environ)
        except ConfigurationError:
            return  # the first turn reports it, as an error event naming the fix
        if endpoint is not None:
            await anyio.to_thread.run_sync(importlib.import_module, "runtime.models.openai")

    async def model(self, bundle: Bundle, tier: ModelTier) -> Model:
        """The model for a call of `tier` under `bundle`'s configuration."""
        if self._model is not None:
            return self._model
        endpoint = (
            resolve_endpoint(bundle.config, tier, self._environ) or await self._offline_model()
        )
        key = (endpoint.model, endpoint.base_url, endpoint.api_key)
        if key not in self._models:
            # Imported here: the SDK loads only when a process first calls a model.
            from runtime.models.openai import OpenAIModel

            self._models[key] = OpenAIModel.for_endpoint(endpoint)
        return self._models[key]

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
        for model in self._models.values():
            await model.aclose()
        self._models.clear()
        await anyio.to_thread.run_sync(self._stack.close)
        self._local = None
