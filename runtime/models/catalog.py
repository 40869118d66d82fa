"""What the runtime knows of a model besides its name: how much it reads at once (its
context window), its longest answer, and its price (SPEC 20).

A shipped catalog covers well-known names of OpenAI, Anthropic, Google and the offline
model, at their providers' list prices in USD per million tokens when this catalog was
written (prices change: a model entry of amodal.json overrides any of them). A name
in neither the repo nor the catalog gets a 128,000-token window and no price.

Names are matched as providers and gateways spell them: a dated snapshot
(`gpt-4.1-mini-2025-04-14`, `claude-sonnet-4-20250514`) or a routed name
(`openai/gpt-4.1`, `anthropic/claude-sonnet-4`) finds its model's card.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_OUTPUT_TOKENS = 1_000
"""What a call is assumed to answer at most when its model states no `maxOutputTokens`."""

Source = Literal["repo", "catalog", "default"]

LOCAL_MODEL_NAME = "smollm2"
"""The offline model's name (`runtime.models.local` serves it under this alias)."""


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens; `cached_input` for input read from the provider's cache
    (None: cached input is priced as input)."""

    input: float
    output: float
    cached_input: float | None = None

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """The USD cost of one call; `cached_tokens` are part of `input_tokens`."""
        cached = min(cached_tokens, input_tokens)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        total = (
            (input_tokens - cached) * self.input
            + cached * cached_rate
            + output_tokens * self.output
        )
        return total / 1_000_000

    def as_json(self) -> dict[str, float]:
        body = {"input": self.input, "output": self.output}
        if self.cached_input is not None:
            body["cachedInput"] = self.cached_input
        return body


@dataclass(frozen=True, slots=True)
class ModelCard:
    """One model's window, longest answer and price, and where they came from."""

    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_output_tokens: int | None = None
    price: Price | None = None
    source: Source = "default"

    @property
    def input_budget(self) -> int:
        """The tokens a call may send: the window less the room its answer needs."""
        return self.context_window - (self.max_output_tokens or DEFAULT_OUTPUT_TOKENS)


def _card(window: int, output: int, price: tuple[float, float, float | None]) -> ModelCard:
    return ModelCard(window, output, Price(*price), "catalog")


CATALOG: dict[str, ModelCard] = {
    # OpenAI
    "gpt-5": _card(400_000, 128_000, (1.25, 10.0, 0.125)),
    "gpt-5-mini": _card(400_000, 128_000, (0.25, 2.0, 0.025)),
    "gpt-5-nano": _card(400_000, 128_000, (0.05, 0.40, 0.005)),
    "gpt-4.1": _card(1_047_576, 32_768, (2.0, 8.0, 0.50)),
    "gpt-4.1-mini": _card(1_047_576, 32_768, (0.40, 1.60, 0.10)),
    "gpt-4.1-nano": _card(1_047_576, 32_768, (0.10, 0.40, 0.025)),
    "gpt-4o": _card(128_000, 16_384, (2.50, 10.0, 1.25)),
    "gpt-4o-mini": _card(128_000, 16_384, (0.15, 0.60, 0.075)),
    "o3": _card(200_000, 100_000, (2.0, 8.0, 0.50)),
    "o3-mini": _card(200_000, 100_000, (1.10, 4.40, 0.55)),
    "o4-mini": _card(200_000, 100_000, (1.10, 4.40, 0.275)),
    # Anthropic (cached input: a cache read)
    "claude-opus-4-5": _card(200_000, 64_000, (5.0, 25.0, 0.50)),
    "claude-opus-4-1": _card(200_000, 32_000, (15.0, 75.0, 1.50)),
    "claude-opus-4": _card(200_000, 32_000, (15.0, 75.0, 1.50)),
    "claude-sonnet-4-5": _card(200_000, 64_000, (3.0, 15.0, 0.30)),
    "claude-sonnet-4": _card(200_000, 64_000, (3.0, 15.0, 0.30)),
    "claude-3-7-sonnet": _card(200_000, 64_000, (3.0, 15.0, 0.30)),
    "claude-haiku-4-5": _card(200_000, 64_000, (1.0, 5.0, 0.10)),
    "claude-3-5-haiku": _card(200_000, 8_192, (0.80, 4.0, 0.08)),
    # Google
    "gemini-2.5-pro": _card(1_048_576, 65_536, (1.25, 10.0, 0.31)),
    "gemini-2.5-flash": _card(1_048_576, 65_536, (0.30, 2.50, 0.075)),
    "gemini-2.5-flash-lite": _card(1_048_576, 65_536, (0.10, 0.40, 0.025)),
    "gemini-2.0-flash": _card(1_048_576, 8_192, (0.10, 0.40, 0.025)),
    # The offline model (runtime.models.local): free, and a small window
    LOCAL_MODEL_NAME: _card(4_096, 1_024, (0.0, 0.0, 0.0)),
}

_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


def catalog_card(name: str) -> ModelCard | None:
    """The shipped card of a model name, as providers and gateways spell it."""
    key = name.strip().lower().rpartition("/")[2]
    while key:
        card = CATALOG.get(key)
        if card is not None:
            return card
        shorter = _SNAPSHOT.sub("", key)
        if shorter == key:
            return None
        key = shorter
    return None


def card_for(
    name: str,
    *,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    price: Price | None = None,
) -> ModelCard:
    """A model's card: what the repo says of it (any field), else the catalog's, else the
    defaults."""
    known = catalog_card(name) or ModelCard()
    if context_window is None and max_output_tokens is None and price is None:
        return known
    return ModelCard(
        context_window or known.context_window,
        max_output_tokens or known.max_output_tokens,
        price or known.price,
        "repo",
    )
