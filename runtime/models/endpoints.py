"""Where a model call goes: a `ModelEndpoint` (model name, base URL, key).

`runtime.repo.model_bindings.resolve_endpoint` makes one per tier from amodal.json's
`models` and the environment. An endpoint's key never appears in its repr, its str,
or any message built from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Where a key without a base URL goes: OpenAI's own API."""


@dataclass(frozen=True, slots=True)
class ModelEndpoint:
    """Where one model call goes. The key is left out of repr and str."""

    model: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)

    @property
    def display_url(self) -> str:
        """The base URL as host and path: no scheme, credentials or query string."""
        return display_url(self.base_url)

    def __str__(self) -> str:
        return f"{self.model} at {self.display_url}"


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
