"""Where a model call goes: a `ModelEndpoint` (provider, model name, base URL, key).

`runtime.repo.model_bindings` makes one per tier (and per fallback) from amodal.json's
`models` and the environment. An endpoint's key never appears in its repr, its str,
or any message built from it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from runtime.exceptions import ModelConfigError

Provider = Literal["openai", "anthropic"]
"""How a model is called: `openai`, any OpenAI-compatible Chat Completions endpoint (the
default); `anthropic`, Anthropic's Messages API."""

PROVIDERS: tuple[Provider, ...] = ("anthropic", "openai")

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Where an OpenAI key without a base URL goes: OpenAI's own API."""
ANTHROPIC_BASE_URL = "https://api.anthropic.com"


@dataclass(frozen=True, slots=True)
class ProviderDefaults:
    """Where a provider's calls go when the repo does not say: its environment variables
    and its own API."""

    base_url: str
    base_url_variable: str
    api_key_variable: str
    package: str
    """The Python package its client needs (the extra of the same name installs it)."""


DEFAULTS: dict[Provider, ProviderDefaults] = {
    "openai": ProviderDefaults(OPENAI_BASE_URL, "OPENAI_BASE_URL", "OPENAI_API_KEY", "openai"),
    "anthropic": ProviderDefaults(
        ANTHROPIC_BASE_URL, "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "anthropic"
    ),
}


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """Where one model call goes. The key is left out of repr and str."""

    model: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    provider: Provider = "openai"

    @property
    def display_url(self) -> str:
        """The base URL as host and path: no scheme, credentials or query string."""
        return display_url(self.base_url)

    def __str__(self) -> str:
        return f"{self.model} at {self.display_url}"


def provider_installed(provider: Provider) -> bool:
    """Whether the provider's client package can be imported (it is not imported here)."""
    try:
        return importlib.util.find_spec(DEFAULTS[provider].package) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[package] is None
        return False


def missing_provider(provider: Provider) -> str:
    """What to say of a provider whose package is missing: the pip command that installs it."""
    package = DEFAULTS[provider].package
    return (
        f"provider {provider!r} needs the {package!r} package, which is not installed: "
        f"pip install 'amodal-runtime[{package}]'"
    )


def require_provider(provider: Provider) -> None:
    """`ModelConfigError` with the pip command when the provider's package is missing."""
    if not provider_installed(provider):
        raise ModelConfigError(missing_provider(provider))


def display_url(url: str) -> str:
    """`https://user:pw@host:8443/v1?key=x` -> `host:8443/v1`: safe for messages and logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    where = f"{host}:{port}" if port is not None else host
    return f"{where}{parts.path.rstrip('/')}" or "(no URL)"


def accepts_prompt_cache_key(base_url: str | None) -> bool:
    """Whether the endpoint takes `prompt_cache_key`: only OpenAI's own API does.

    Other OpenAI-compatible servers may reject an unknown field, so it is sent
    only when the base URL is unset (the SDK's default) or its host is
    `api.openai.com`.
    """
    if not base_url:
        return True
    return urlsplit(base_url).hostname == "api.openai.com"
