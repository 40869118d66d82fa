"""The model catalog (SPEC 20): windows and prices of well-known models, the repo's
overrides, and `amodal models` as a user runs it."""

from __future__ import annotations

import json

import pytest

from runtime.models.catalog import DEFAULT_CONTEXT_WINDOW, Price, card_for, catalog_card
from runtime.repo.model_bindings import model_card
from tests.repo._helpers import line_of, load, only_error, valid


@pytest.mark.parametrize(
    ("name", "window"),
    [
        ("gpt-4.1-mini", 1_047_576),
        ("gpt-4.1-mini-2025-04-14", 1_047_576),  # a dated snapshot
        ("openai/gpt-4o", 128_000),  # a gateway's routed name
        ("claude-sonnet-4-20250514", 200_000),
        ("anthropic/claude-3-5-haiku-latest", 200_000),
        ("gemini-2.5-flash", 1_048_576),
        ("smollm2", 4_096),
    ],
)
def test_well_known_names_find_their_card_however_they_are_spelled(name, window):
    card = catalog_card(name)
    assert card is not None and card.context_window == window and card.price is not None


def test_a_model_in_no_catalog_gets_the_default_window_and_no_price():
    card = card_for("my-finetune-7b")
    assert (card.context_window, card.price, card.source) == (
        DEFAULT_CONTEXT_WINDOW,
        None,
        "default",
    )
    assert catalog_card("gpt-4.1-minis") is None  # a near miss is no match


def test_cached_input_is_priced_at_its_own_rate_and_output_at_its_own():
    price = Price(input=2.0, output=8.0, cached_input=0.5)
    # 1M input of which 400k cached, 100k output: 0.6*2 + 0.4*0.5 + 0.1*8
    assert price.cost(1_000_000, 100_000, cached_tokens=400_000) == pytest.approx(2.2)
    assert Price(1.0, 1.0).cost(1_000_000, 0, cached_tokens=1_000_000) == pytest.approx(1.0)


def test_a_models_entry_overrides_the_catalog_field_by_field(make_repo):
    root = make_repo(
        {
            "amodal.json": {
                "name": "r",
                "version": "1",
                "models": {
                    "main": {"model": "gpt-4.1", "price": {"input": 1, "output": 4}},
                    "simple": {"model": "house-model", "contextWindow": 32_000},
                },
            }
        }
    )
    config = valid(load(root)).bundle.config
    main = model_card(config, "gpt-4.1")
    assert (main.context_window, main.price, main.source) == (1_047_576, Price(1, 4), "repo")
    own = model_card(config, "house-model")
    assert (own.context_window, own.price, own.source) == (32_000, None, "repo")
    assert model_card(config, "gpt-4o").source == "catalog"


@pytest.mark.parametrize(
    ("entry", "field", "says"),
    [
        ({"price": {"input": -1, "output": 1}}, "models.main.price.input", "greater than or equal"),
        ({"price": {"input": "1", "output": 1}}, "models.main.price.input", "number"),
        ({"contextWindow": "128000"}, "models.main.contextWindow", "integer"),
        (
            {"contextWindow": 8_192, "maxOutputTokens": 8_192},
            "models.main",
            "less than contextWindow",
        ),
        ({"price": {"input": 1, "output": 1, "cached": 1}}, "models.main.price.cached", "unknown"),
    ],
)
def test_a_bad_window_or_price_is_an_error_at_its_line(make_repo, entry, field, says):
    root = make_repo(
        {
            "amodal.json": {
                "name": "r",
                "version": "1",
                "models": {"main": {"model": "gpt-4.1", **entry}},
            }
        }
    )
    error = only_error(load(root), "amodal.json")
    assert error.field == field and says in error.message
    assert error.line == line_of(root / "amodal.json", f'"{field.rpartition(".")[2]}"')


def test_amodal_models_prints_each_tiers_model_its_window_price_and_source(amodal, make_repo):
    root = make_repo(
        {
            "amodal.json": {
                "name": "r",
                "version": "1",
                "models": {
                    "main": "gpt-4.1-mini",
                    "advanced": {"model": "mine", "contextWindow": 9000},
                },
            }
        }
    )
    env = {"OPENAI_BASE_URL": "http://user:pw@models.example:8443/v1", "OPENAI_API_KEY": "sk-x"}
    result = amodal("models", "--json", cwd=root, env=env)
    assert result.code == 0, result.stderr
    rows = {row["tier"]: row for row in result.json()}
    assert rows["default"] == {
        "name": "gpt-4.1-mini",
        "tier": "default",
        "endpoint": "models.example:8443/v1",  # no scheme, no credentials
        "context_window": 1_047_576,
        "max_output_tokens": 32_768,
        "price": {"input": 0.4, "output": 1.6, "cachedInput": 0.1},
        "source": "catalog",
    }
    assert rows["simple"]["name"] == "gpt-4.1-mini"  # an unbound tier is the session model
    assert (rows["advanced"]["context_window"], rows["advanced"]["source"]) == (9000, "repo")
    assert rows["advanced"]["price"] is None
    assert "sk-x" not in result.stdout and "pw" not in result.stdout
    table = amodal("models", cwd=root, env=env)
    assert table.code == 0 and "1,047,576" in table.stdout and "unknown" in table.stdout
    assert json.dumps(rows)  # the JSON is plain data
