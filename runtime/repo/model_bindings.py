"""Which endpoint each tier's calls go to (SPEC 8): amodal.json's `models` plus the
environment, as a `runtime.models.endpoints.ModelEndpoint`, or None when nothing is
configured (the caller may start the offline model); and what is known of each model
(`model_card`: its window and price, SPEC 20)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.exceptions import ModelConfigError
from runtime.models import ModelTier
from runtime.models.catalog import LOCAL_MODEL_NAME, ModelCard, Price, card_for
from runtime.models.endpoints import OPENAI_BASE_URL, ModelEndpoint, display_url
from runtime.repo.formats import ModelBinding, RepoConfig


def resolve_endpoint(
    config: RepoConfig, tier: ModelTier, environ: Mapping[str, str]
) -> ModelEndpoint | None:
    """The endpoint a call at `tier` goes to, or None when no endpoint is configured.

    Precedence, field by field (an empty environment variable counts as unset):

    The session model (tier `default`, and `simple`/`advanced` when unbound):
      - base URL: `OPENAI_BASE_URL`, else `models.main.base_url`, else
        https://api.openai.com/v1;
      - API key: `OPENAI_API_KEY`, else `models.main.api_key`, else none;
      - model: `MODEL_MAIN`, else `models.main.model`, else `ModelConfigError`;
      - configured only if at least one of `OPENAI_BASE_URL`, `OPENAI_API_KEY`,
        `models.main.base_url`, `models.main.api_key` is set. Otherwise the
        result is None (the caller may start the offline model), even when
        `models.main` names a model.

    Tier `simple` / `advanced` is bound when `models.<tier>` or `MODEL_<TIER>`
    is set; an unbound tier resolves as the session model. A bound tier:
      - model: `MODEL_<TIER>`, else `models.<tier>.model`;
      - with its own `models.<tier>.base_url`: that URL and only
        `models.<tier>.api_key` (the session key is never sent to another
        endpoint; `OPENAI_BASE_URL` does not move it);
      - otherwise the session endpoint's base URL, with `models.<tier>.api_key`
        or else the session key; None when the session endpoint is not
        configured. The session model name is not needed here.
    """
    env = {key: value for key, value in environ.items() if value}
    if tier != "default":
        binding: ModelBinding | None = getattr(config.models, tier)
        override = env.get(f"MODEL_{tier.upper()}")
        if binding is not None or override is not None:
            return _resolve_tier(config, tier, binding, override, env)
    return _resolve_main(config, env)


def _resolve_main(config: RepoConfig, env: Mapping[str, str]) -> ModelEndpoint | None:
    main = config.models.main
    base_url, api_key = _main_location(main, env)
    if base_url is None:
        return None
    model = env.get("MODEL_MAIN") or (main.model if main is not None else None)
    if not model:
        raise ModelConfigError(
            f"a model endpoint is configured ({display_url(base_url)}) but no model name: "
            'set MODEL_MAIN, or "models": {"main": "<model name>"} in amodal.json'
        )
    return ModelEndpoint(model, base_url, api_key)


def _main_location(
    main: ModelBinding | None, env: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """The session endpoint's (base URL, key); base URL None when nothing is configured."""
    config_url = main.base_url if main is not None else None
    config_key = _secret(main.api_key) if main is not None else None
    base_url = env.get("OPENAI_BASE_URL") or config_url
    api_key = env.get("OPENAI_API_KEY") or config_key
    if base_url is None and api_key is None:
        return None, None
    return base_url or OPENAI_BASE_URL, api_key


def _resolve_tier(
    config: RepoConfig,
    tier: ModelTier,
    binding: ModelBinding | None,
    override: str | None,
    env: Mapping[str, str],
) -> ModelEndpoint | None:
    model = override or (binding.model if binding is not None else "")
    own_key = _secret(binding.api_key) if binding is not None else None
    if binding is not None and binding.base_url:
        return ModelEndpoint(model, binding.base_url, own_key)
    base_url, main_key = _main_location(config.models.main, env)
    if base_url is None:
        return None
    return ModelEndpoint(model, base_url, own_key or main_key)


def _secret(value: Any) -> str | None:
    secret = value.get_secret_value() if value is not None else None
    return secret if isinstance(secret, str) and secret else None


TIERS: tuple[ModelTier, ...] = ("default", "simple", "advanced")
OFFLINE_ENDPOINT = "offline (llama.cpp on loopback)"


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One line of `amodal models`: a tier, the model its calls use, where, and its card."""

    tier: ModelTier
    name: str
    endpoint: str
    card: ModelCard

    def as_json(self) -> dict[str, Any]:
        price = self.card.price
        return {
            "name": self.name,
            "tier": self.tier,
            "endpoint": self.endpoint,
            "context_window": self.card.context_window,
            "max_output_tokens": self.card.max_output_tokens,
            "price": price.as_json() if price is not None else None,
            "source": self.card.source,
        }


def model_card(config: RepoConfig, name: str) -> ModelCard:
    """What is known of the model `name`: a `models` entry of amodal.json naming it (its
    `contextWindow`, `maxOutputTokens`, `price`), else the catalog, else the defaults."""
    for binding in (config.models.main, config.models.simple, config.models.advanced):
        if binding is not None and binding.model == name:
            price = binding.price
            return card_for(
                name,
                context_window=binding.context_window,
                max_output_tokens=binding.max_output_tokens,
                price=Price(price.input, price.output, price.cached_input) if price else None,
            )
    return card_for(name)


def model_table(config: RepoConfig, environ: Mapping[str, str]) -> list[ModelRow]:
    """The model each tier's calls use, with its card: what `amodal models` prints."""
    rows = []
    for tier in TIERS:
        endpoint = resolve_endpoint(config, tier, environ)
        name = endpoint.model if endpoint is not None else LOCAL_MODEL_NAME
        where = endpoint.display_url if endpoint is not None else OFFLINE_ENDPOINT
        rows.append(ModelRow(tier, name, where, model_card(config, name)))
    return rows
