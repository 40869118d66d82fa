"""Where a model call goes (SPEC 8): amodal.json's `models`, the environment, and tiers."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.exceptions import ModelConfigError
from runtime.models.endpoints import ModelEndpoint, display_url
from runtime.repo.formats import RepoConfig
from runtime.repo.model_bindings import resolve_chain, resolve_endpoint

SECRET = "sk-test-7f3a9c1e-never-print-me"


def config(models: dict[str, Any] | None = None) -> RepoConfig:
    body: dict[str, Any] = {"name": "r", "version": "1"}
    if models is not None:
        body["models"] = models
    return RepoConfig.model_validate(body)


def test_display_url_drops_scheme_credentials_and_query() -> None:
    assert display_url("https://user:pw@llm.example:8443/v1/?key=abc") == "llm.example:8443/v1"
    assert display_url("http://127.0.0.1:9/v1") == "127.0.0.1:9/v1"


# ---------------------------------------------------------------- endpoint resolution


def test_nothing_configured_resolves_to_none() -> None:
    assert resolve_endpoint(config(), "default", {}) is None
    assert resolve_endpoint(config({"main": "gpt-x"}), "default", {}) is None
    assert resolve_endpoint(config(), "simple", {"MODEL_SIMPLE": "small"}) is None


def test_main_binding_from_amodal_json() -> None:
    models = {"main": {"model": "gpt-x", "baseUrl": "http://llm.local/v1", "apiKey": SECRET}}
    endpoint = resolve_endpoint(config(models), "default", {})
    assert endpoint == ModelEndpoint("gpt-x", "http://llm.local/v1", SECRET)


def test_environment_overrides_each_field_of_the_main_binding() -> None:
    models = {"main": {"model": "gpt-x", "baseUrl": "http://llm.local/v1", "apiKey": "sk-file"}}
    env = {"OPENAI_BASE_URL": "http://env.local/v1", "OPENAI_API_KEY": SECRET, "MODEL_MAIN": "m2"}
    assert resolve_endpoint(config(models), "default", env) == ModelEndpoint(
        "m2", "http://env.local/v1", SECRET
    )
    only_url = resolve_endpoint(config(models), "default", {"OPENAI_BASE_URL": "http://e/v1"})
    assert only_url == ModelEndpoint("gpt-x", "http://e/v1", "sk-file")


def test_an_api_key_alone_means_openai_itself() -> None:
    endpoint = resolve_endpoint(config({"main": "gpt-x"}), "default", {"OPENAI_API_KEY": SECRET})
    assert endpoint == ModelEndpoint("gpt-x", "https://api.openai.com/v1", SECRET)


def test_a_base_url_alone_needs_no_key() -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1", "MODEL_MAIN": "local"}
    assert resolve_endpoint(config(), "default", env) == ModelEndpoint(
        "local", "http://127.0.0.1:8080/v1", None
    )


def test_empty_environment_values_count_as_unset() -> None:
    env = {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": "", "MODEL_MAIN": ""}
    assert resolve_endpoint(config({"main": "gpt-x"}), "default", env) is None


def test_an_endpoint_without_a_model_name_says_how_to_set_one() -> None:
    with pytest.raises(ModelConfigError, match=r"MODEL_MAIN.*amodal\.json") as caught:
        resolve_endpoint(config(), "default", {"OPENAI_API_KEY": SECRET})
    assert SECRET not in str(caught.value)


def test_unbound_tiers_use_the_session_model() -> None:
    env = {"OPENAI_BASE_URL": "http://e/v1", "MODEL_MAIN": "main-m"}
    session = resolve_endpoint(config(), "default", env)
    assert resolve_endpoint(config(), "simple", env) == session
    assert resolve_endpoint(config(), "advanced", env) == session


def test_a_name_only_tier_binding_uses_the_session_endpoint() -> None:
    models = {"main": {"model": "main-m", "baseUrl": "http://e/v1", "apiKey": SECRET}}
    models |= {"simple": "small-m", "advanced": {"model": "big-m"}}
    assert resolve_endpoint(config(models), "simple", {}) == ModelEndpoint(
        "small-m", "http://e/v1", SECRET
    )
    assert resolve_endpoint(config(models), "advanced", {}) == ModelEndpoint(
        "big-m", "http://e/v1", SECRET
    )


def test_tier_environment_overrides_the_tier_model_name() -> None:
    models = {"main": "main-m", "simple": "small-m"}
    env = {"OPENAI_BASE_URL": "http://e/v1", "MODEL_SIMPLE": "tiny", "MODEL_ADVANCED": "huge"}
    assert resolve_endpoint(config(models), "simple", env) == ModelEndpoint(
        "tiny", "http://e/v1", None
    )
    assert resolve_endpoint(config(models), "advanced", env) == ModelEndpoint(
        "huge", "http://e/v1", None
    )
    # A tier binding needs no session model name.
    assert resolve_endpoint(config(), "simple", env) == ModelEndpoint("tiny", "http://e/v1", None)


def test_a_tier_with_its_own_endpoint_never_gets_the_session_key() -> None:
    models = {
        "main": "main-m",
        "advanced": {"model": "big-m", "baseUrl": "http://other/v1"},
        "simple": {"model": "small-m", "baseUrl": "http://third/v1", "apiKey": "sk-third"},
    }
    env = {"OPENAI_BASE_URL": "http://e/v1", "OPENAI_API_KEY": SECRET}
    assert resolve_endpoint(config(models), "advanced", env) == ModelEndpoint(
        "big-m", "http://other/v1", None
    )
    assert resolve_endpoint(config(models), "simple", env) == ModelEndpoint(
        "small-m", "http://third/v1", "sk-third"
    )


def test_a_tier_key_without_its_own_url_goes_to_the_session_endpoint() -> None:
    models = {"main": "main-m", "simple": {"model": "small-m", "apiKey": "sk-simple"}}
    env = {"OPENAI_BASE_URL": "http://e/v1", "OPENAI_API_KEY": SECRET}
    assert resolve_endpoint(config(models), "simple", env) == ModelEndpoint(
        "small-m", "http://e/v1", "sk-simple"
    )


# ---------------------------------------------------------------- providers and fallbacks

ANTHROPIC_KEY = "sk-ant-test-0b9d-never-print-me"
OPENAI_ENV = {"OPENAI_BASE_URL": "http://openai.local/v1", "OPENAI_API_KEY": SECRET}


def chain(models: dict[str, Any], tier: Any = "default", env: Any = None) -> list[ModelEndpoint]:
    found = resolve_chain(config(models), tier, env or {})
    assert found is not None
    return list(found)


def test_an_anthropic_session_model_goes_to_anthropic_and_never_gets_the_openai_key() -> None:
    models = {"main": {"model": "claude-x", "provider": "anthropic"}}
    env = {**OPENAI_ENV, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    assert chain(models, env=env) == [
        ModelEndpoint("claude-x", "https://api.anthropic.com", ANTHROPIC_KEY, "anthropic")
    ]
    # Configured by naming the provider: no key anywhere still calls (and fails with a 401).
    assert chain(models) == [
        ModelEndpoint("claude-x", "https://api.anthropic.com", None, "anthropic")
    ]


def test_anthropics_variables_override_its_entry_as_openais_do() -> None:
    models = {
        "main": {
            "model": "claude-x",
            "provider": "anthropic",
            "baseUrl": "http://proxy/anthropic",
            "apiKey": "sk-file",
        }
    }
    assert chain(models) == [
        ModelEndpoint("claude-x", "http://proxy/anthropic", "sk-file", "anthropic")
    ]
    env = {"ANTHROPIC_BASE_URL": "http://env/anthropic", "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    assert chain(models, env={**env, "MODEL_MAIN": "claude-y"}) == [
        ModelEndpoint("claude-y", "http://env/anthropic", ANTHROPIC_KEY, "anthropic")
    ]


def test_a_tier_takes_the_session_provider_unless_it_names_another() -> None:
    models = {
        "main": {"model": "claude-x", "provider": "anthropic", "apiKey": ANTHROPIC_KEY},
        "simple": "claude-small",
        "advanced": {"model": "gpt-big", "provider": "openai"},
    }
    assert chain(models, "simple", OPENAI_ENV) == [
        ModelEndpoint("claude-small", "https://api.anthropic.com", ANTHROPIC_KEY, "anthropic")
    ]
    # Another provider: its own variables, never the session's Anthropic key.
    assert chain(models, "advanced", OPENAI_ENV) == [
        ModelEndpoint("gpt-big", "http://openai.local/v1", SECRET, "openai")
    ]


def test_a_fallback_name_is_another_model_at_the_same_endpoint() -> None:
    models = {
        "main": {
            "model": "claude-x",
            "provider": "anthropic",
            "apiKey": ANTHROPIC_KEY,
            "fallback": ["claude-y", {"model": "gpt-x", "provider": "openai"}],
        }
    }
    assert chain(models, env=OPENAI_ENV) == [
        ModelEndpoint("claude-x", "https://api.anthropic.com", ANTHROPIC_KEY, "anthropic"),
        ModelEndpoint("claude-y", "https://api.anthropic.com", ANTHROPIC_KEY, "anthropic"),
        ModelEndpoint("gpt-x", "http://openai.local/v1", SECRET, "openai"),
    ]


def test_a_fallback_tier_brings_its_own_fallbacks_and_nothing_twice() -> None:
    models = {
        "main": {"model": "m", "fallback": [{"tier": "simple"}, "last"]},
        "simple": {"model": "s", "baseUrl": "http://s/v1", "fallback": ["s2", "last"]},
        "advanced": {"model": "a", "fallback": [{"tier": "main"}]},
    }
    assert [(e.model, e.base_url) for e in chain(models, env=OPENAI_ENV)] == [
        ("m", "http://openai.local/v1"),
        ("s", "http://s/v1"),
        ("s2", "http://s/v1"),
        ("last", "http://s/v1"),  # simple's: placed at simple's endpoint
        ("last", "http://openai.local/v1"),  # main's own: at main's
    ]
    # A tier's chain, through a reference back to main (validation refuses a full cycle).
    assert [e.model for e in chain(models, "advanced", OPENAI_ENV)] == [
        "a", "m", "s", "s2", "last", "last"
    ]  # fmt: skip


def test_a_cycle_that_skipped_validation_still_ends() -> None:
    models = {
        "main": {"model": "m", "fallback": [{"tier": "simple"}]},
        "simple": {"model": "s", "fallback": [{"tier": "main"}]},
    }
    assert [e.model for e in chain(models, env=OPENAI_ENV)] == ["m", "s"]
