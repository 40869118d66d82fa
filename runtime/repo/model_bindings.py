"""Which endpoints each tier's calls go to (SPEC 8, 25): amodal.json's `models` plus the
environment, as `runtime.models.endpoints.ModelEndpoint`s: the tier's own, then its
fallbacks in order. None when nothing is configured (the caller may start the offline
model). And what is known of each model (`model_card`: its window and price, SPEC 20).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from runtime.exceptions import ModelConfigError
from runtime.models import ModelTier
from runtime.models.catalog import LOCAL_MODEL_NAME, ModelCard, Price, card_for
from runtime.models.endpoints import DEFAULTS, ModelEndpoint, Provider, display_url
from runtime.repo.formats import ModelBinding, ModelEntry, RepoConfig


def resolve_endpoint(
    config: RepoConfig, tier: ModelTier, environ: Mapping[str, str]
) -> ModelEndpoint | None:
    """The endpoint a call at `tier` goes to first, or None when no endpoint is configured.

    Precedence, field by field (an empty environment variable counts as unset):

    The session model (tier `default`, and `simple`/`advanced` when unbound), with
    `models.main.provider` (default `openai`) naming the variables:
      - base URL: `OPENAI_BASE_URL` (`ANTHROPIC_BASE_URL`), else `models.main.base_url`,
        else https://api.openai.com/v1 (https://api.anthropic.com);
      - API key: `OPENAI_API_KEY` (`ANTHROPIC_API_KEY`), else `models.main.api_key`,
        else none;
      - model: `MODEL_MAIN`, else `models.main.model`, else `ModelConfigError`;
      - an `openai` session model is configured only if its base URL or key is set
        somewhere. Otherwise the result is None (the caller may start the offline
        model), even when `models.main` names a model. An `anthropic` one always is.

    Tier `simple` / `advanced` is bound when `models.<tier>` or `MODEL_<TIER>`
    is set; an unbound tier resolves as the session model. A bound tier:
      - model: `MODEL_<TIER>`, else `models.<tier>.model`;
      - with its own `models.<tier>.base_url`: that URL and only
        `models.<tier>.api_key` (the session key is never sent to another
        endpoint; the environment does not move it), provider `openai` unless it says;
      - otherwise, when its provider is the session model's (or unset): the session
        endpoint's base URL, with `models.<tier>.api_key` or else the session key; None
        when the session endpoint is not configured. The session model name is not
        needed here;
      - with another provider: that provider's own variables and API.
    """
    chain = resolve_chain(config, tier, environ)
    return chain[0] if chain else None


def resolve_chain(
    config: RepoConfig, tier: ModelTier, environ: Mapping[str, str]
) -> tuple[ModelEndpoint, ...] | None:
    """The endpoints a call at `tier` goes to, in order: the tier's own, then its `fallback`
    entries (SPEC 25). A model entry in a fallback list is placed like a tier's entry, with
    the entry it falls back from as its base (a bare name: the same endpoint, another
    model); `{"tier": NAME}` is that tier's endpoints. An endpoint already in the chain is
    not repeated. None when no endpoint is configured."""
    resolver = _Resolver(config, {key: value for key, value in environ.items() if value})
    name = "main" if tier == "default" else tier
    found = resolver.chain(name, frozenset({name}))
    return tuple(found) if found else None


@dataclass(frozen=True, slots=True)
class _Location:
    provider: Provider
    base_url: str
    api_key: str | None


class _Resolver:
    def __init__(self, config: RepoConfig, env: Mapping[str, str]) -> None:
        self.config = config
        self.env = env

    def chain(self, name: str, visiting: frozenset[str]) -> list[ModelEndpoint]:
        """The endpoints of entry `name` of `models` and its fallbacks; empty when there is
        none (nothing configured)."""
        binding: ModelBinding | None = getattr(self.config.models, name)
        if name == "main":
            first = self.session()
        else:
            override = self.env.get(f"MODEL_{name.upper()}")
            if binding is None and override is None:
                return self.chain("main", visiting | {"main"})  # an unbound tier
            model = override or (binding.model if binding is not None else "")
            first = self.place(model, binding, self.main_location)
        if first is None:
            return []
        found = [first]
        base = _Location(first.provider, first.base_url, first.api_key)
        for entry in binding.fallback if binding is not None else ():
            if entry.tier is not None:
                if entry.tier in visiting:  # a cycle: `amodal validate` reports it
                    continue
                more = self.chain(entry.tier, visiting | {entry.tier})
            else:
                placed = self.place(cast(str, entry.model), entry.entry(), lambda: base)
                more = [placed] if placed is not None else []
            found += [endpoint for endpoint in more if endpoint not in found]
        return found

    def main_location(self) -> _Location | None:
        """The session endpoint's provider, base URL and key; None when nothing is
        configured."""
        main = self.config.models.main
        provider = _provider(main.provider if main is not None else None)
        defaults = DEFAULTS[provider]
        base_url = self.env.get(defaults.base_url_variable) or (
            main.base_url if main is not None else None
        )
        api_key = self.env.get(defaults.api_key_variable) or (
            _secret(main.api_key) if main is not None else None
        )
        if provider == "openai" and base_url is None and api_key is None:
            return None
        return _Location(provider, base_url or defaults.base_url, api_key)

    def session(self) -> ModelEndpoint | None:
        location = self.main_location()
        if location is None:
            return None
        main = self.config.models.main
        model = self.env.get("MODEL_MAIN") or (main.model if main is not None else None)
        if not model:
            raise ModelConfigError(
                f"a model endpoint is configured ({display_url(location.base_url)}) but no "
                'model name: set MODEL_MAIN, or "models": {"main": "<model name>"} in '
                "amodal.json"
            )
        return ModelEndpoint(model, location.base_url, location.api_key, location.provider)

    def place(
        self, model: str, entry: ModelEntry | None, base: Callable[[], _Location | None]
    ) -> ModelEndpoint | None:
        """Where `entry` (a tier's, or a fallback's) is called: its own base URL with only its
        own key; else its base's endpoint when the provider is the same; else its provider's
        own variables and API. None when it would go to a base that is not configured."""
        own_key = _secret(entry.api_key) if entry is not None else None
        said = entry.provider if entry is not None else None
        if entry is not None and entry.base_url:
            return ModelEndpoint(model, entry.base_url, own_key, _provider(said))
        location = base()
        provider = _provider(said) if said else (location.provider if location else "openai")
        if location is not None and provider == location.provider:
            return ModelEndpoint(model, location.base_url, own_key or location.api_key, provider)
        if location is None and provider == "openai":
            return None
        defaults = DEFAULTS[provider]
        return ModelEndpoint(
            model,
            self.env.get(defaults.base_url_variable) or defaults.base_url,
            own_key or self.env.get(defaults.api_key_variable),
            provider,
        )


def _provider(name: str | None) -> Provider:
    """A validated provider name (formats.py checks it), `openai` when unset."""
    return cast(Provider, name or "openai")


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
    for binding in _entries(config):
        if binding.model == name:
            price = binding.price
            return card_for(
                name,
                context_window=binding.context_window,
                max_output_tokens=binding.max_output_tokens,
                price=Price(price.input, price.output, price.cached_input) if price else None,
            )
    return card_for(name)


def configured_models(config: RepoConfig) -> list[str]:
    """The model names of `models` (tiers, then fallbacks), each once."""
    names = [entry.model for entry in _entries(config) if entry.model]
    return list(dict.fromkeys(names))


def _entries(config: RepoConfig) -> list[ModelEntry]:
    """Every model entry of `models`: the tiers', then their fallbacks'."""
    tiers = [b for b in (config.models.main, config.models.simple, config.models.advanced) if b]
    fallbacks = [entry.entry() for tier in tiers for entry in tier.fallback if entry.model]
    return [*tiers, *fallbacks]


def model_table(config: RepoConfig, environ: Mapping[str, str]) -> list[ModelRow]:
    """The model each tier's calls use, with its card: what `amodal models` prints."""
    rows = []
    for tier in TIERS:
        endpoint = resolve_endpoint(config, tier, environ)
        name = endpoint.model if endpoint is not None else LOCAL_MODEL_NAME
        where = endpoint.display_url if endpoint is not None else OFFLINE_ENDPOINT
        rows.append(ModelRow(tier, name, where, model_card(config, name)))
    return rows
