"""amodal.json (SPEC 1.1): required keys, strict keys, reference-platform keys, env: references."""

from __future__ import annotations

import json

import pytest

from runtime import load_repo
from runtime.repo.formats import FOREIGN_REPO_KEYS

from ._helpers import errors_in, line_of, load, only_error, valid, warnings_in

CONFIG = "amodal.json"


def config(**fields: object) -> dict[str, object]:
    return {"name": "test-repo", "version": "1.0.0", **fields}


def test_name_and_version_are_enough_for_a_valid_config(make_repo):
    bundle = valid(load(make_repo())).bundle

    assert bundle.config.name == "test-repo"
    assert bundle.config.version == "1.0.0"


def test_every_optional_key_is_accepted(make_repo):
    root = make_repo(
        {
            CONFIG: config(
                description="A team.",
                basePrompt="Be brief.",
                models={"main": "gpt-4o", "simple": {"model": "small", "baseUrl": "http://x/v1"}},
                mcp={"servers": {"github": {"transport": "stdio", "command": "gh-mcp"}}},
                auth={"apiKeys": [{"key": "secret", "claims": {"role": "manager"}}]},
                delegation={"maxRunsPerTurn": 10, "maxConcurrent": 2},
                limits={"maxToolCalls": 40},
                fileTools={"root": "workspace"},
            )
        }
    )

    bundle = valid(load(root)).bundle

    assert bundle.config.base_prompt == "Be brief."
    assert bundle.config.models.main is not None
    assert bundle.config.models.main.model == "gpt-4o"
    assert bundle.config.limits.max_tool_calls == 40
    assert set(bundle.mcp_servers) == {"github"}


@pytest.mark.parametrize("missing", ["name", "version"])
def test_missing_required_key_is_an_error_naming_it(make_repo, missing):
    data = config()
    del data[missing]
    root = make_repo({CONFIG: data})

    error = only_error(load(root))

    assert error.file == CONFIG
    assert error.field == missing
    assert f"missing required key {missing!r}" in error.message


def test_name_of_the_wrong_type_is_an_error_at_its_line(make_repo):
    root = make_repo({CONFIG: config(name=3)})

    error = only_error(load(root))

    assert (error.file, error.field) == (CONFIG, "name")
    assert error.line == line_of(root / CONFIG, '"name"')
    assert "string" in error.message


def test_unknown_top_level_key_suggests_the_right_one_at_its_line(make_repo):
    root = make_repo({CONFIG: config(descripton="A team.")})

    error = only_error(load(root))

    assert error.field == "descripton"
    assert error.line == line_of(root / CONFIG, '"descripton"')
    assert "unknown key 'descripton'" in error.message
    assert "did you mean 'description'?" in error.message
    assert "basePrompt" in error.message  # the list of allowed keys


def test_unknown_nested_key_names_its_path_and_suggests_the_right_one(make_repo):
    root = make_repo({CONFIG: config(limits={"maxToolCals": 5})})

    error = only_error(load(root))

    assert error.field == "limits.maxToolCals"
    assert error.line == line_of(root / CONFIG, '"maxToolCals"')
    assert "did you mean 'maxToolCalls'?" in error.message


def test_unknown_key_with_no_close_match_lists_the_allowed_keys_without_a_guess(make_repo):
    root = make_repo({CONFIG: config(zzzzzz=1)})

    error = only_error(load(root))

    assert "did you mean" not in error.message
    assert "expected one of: auth, basePrompt, compaction, delegation" in error.message


def test_a_limit_out_of_range_is_an_error(make_repo):
    root = make_repo({CONFIG: config(limits={"maxToolCalls": 0})})

    error = only_error(load(root))

    assert error.field == "limits.maxToolCalls"
    assert "greater than or equal to 1" in error.message


@pytest.mark.parametrize(("value", "says"), [(1, "greater than or equal to 2"), ("8", "integer")])
def test_a_repeated_call_limit_below_two_or_not_a_number_is_an_error_at_its_line(
    make_repo, value, says
):
    root = make_repo({CONFIG: config(limits={"repeatedCallLimit": value})})

    error = only_error(load(root))

    assert error.field == "limits.repeatedCallLimit"
    assert says in error.message
    assert error.line == line_of(root / CONFIG, "repeatedCallLimit")


@pytest.mark.parametrize(
    ("compaction", "field", "says"),
    [
        ({"threshold": 1}, "compaction.threshold", "less than 1"),
        ({"threshold": 0}, "compaction.threshold", "greater than 0"),
        ({"threshold": "0.5"}, "compaction.threshold", "number"),
        ({"keepRecentTurns": 0}, "compaction.keepRecentTurns", "greater than or equal to 1"),
        ({"model": "cheap"}, "compaction.model", "simple"),
        ({"treshold": 0.5}, "compaction.treshold", "did you mean 'threshold'?"),
    ],
)
def test_a_bad_compaction_setting_is_an_error_at_its_line(make_repo, compaction, field, says):
    root = make_repo({CONFIG: config(compaction=compaction)})

    error = only_error(load(root))

    assert error.field.startswith(field) and says in error.message
    assert error.line == line_of(root / CONFIG, field.rpartition(".")[2])


def test_compaction_may_be_turned_off_or_left_at_its_defaults(make_repo):
    for value, expected in ((False, None), (True, 0.8)):
        bundle = valid(load(make_repo({CONFIG: config(compaction=value)}))).bundle
        settings = bundle.compaction(None)
        assert (settings.threshold if settings else None) == expected


@pytest.mark.parametrize("key", FOREIGN_REPO_KEYS)
def test_reference_platform_key_is_accepted_with_a_warning_naming_it(make_repo, key):
    root = make_repo({CONFIG: config(**{key: {"anything": True}})})

    result = valid(load(root))

    [warning] = warnings_in(result, CONFIG)
    assert warning.field == key
    assert warning.line == line_of(root / CONFIG, f'"{key}"')
    assert repr(key) in warning.message
    assert "not implemented" in warning.message


def test_reference_platform_keys_are_never_offered_as_did_you_mean(make_repo):
    root = make_repo({CONFIG: config(proactiv=True)})

    error = only_error(load(root))

    assert "proactive" not in error.message


def test_invalid_json_is_an_error_at_the_line_of_the_syntax_error(make_repo):
    root = make_repo({CONFIG: '{\n  "name": "x",\n  "version": "1",\n}\n'})

    error = only_error(load(root))

    assert error.file == CONFIG
    assert error.line == 4
    assert error.message.startswith("invalid JSON")


def test_a_config_that_is_not_an_object_is_an_error(make_repo):
    root = make_repo({CONFIG: "[1, 2]"})

    error = only_error(load(root))

    assert error.file == CONFIG
    assert "JSON object" in error.message


def test_a_config_of_json_null_is_an_error_not_a_silent_missing_bundle(make_repo):
    root = make_repo({CONFIG: "null\n"})

    error = only_error(load(root))

    assert error.file == CONFIG
    assert "null" in error.message


def test_a_missing_config_is_an_error(make_repo):
    root = make_repo({CONFIG: None})

    error = only_error(load(root))

    assert error.file == CONFIG
    assert "cannot read" in error.message


def test_env_reference_is_replaced_by_the_variable(make_repo):
    root = make_repo({CONFIG: config(models={"main": {"model": "m", "apiKey": "env:API_KEY"}})})

    bundle = valid(load(root, environ={"API_KEY": "s3cret"})).bundle

    assert bundle.config.models.main is not None
    assert bundle.config.models.main.api_key is not None
    assert bundle.config.models.main.api_key.get_secret_value() == "s3cret"


def test_env_reference_in_a_list_is_replaced_too(make_repo):
    server = {"transport": "stdio", "command": "env:MCP_BIN", "args": ["--token", "env:TOKEN"]}
    root = make_repo({CONFIG: config(mcp={"servers": {"github": server}})})

    bundle = valid(load(root, environ={"MCP_BIN": "/bin/gh", "TOKEN": "t"})).bundle

    loaded = bundle.config.mcp.servers["github"]
    assert (loaded.command, loaded.args) == ("/bin/gh", ("--token", "t"))


def test_env_reference_reads_the_process_environment_by_default(make_repo, monkeypatch):
    monkeypatch.setenv("AMODAL_TEST_MODEL", "from-the-environment")
    root = make_repo({CONFIG: config(models={"main": "env:AMODAL_TEST_MODEL"})})

    bundle = valid(load_repo(root)).bundle

    assert bundle.config.models.main is not None
    assert bundle.config.models.main.model == "from-the-environment"


def test_missing_env_variable_is_an_error_naming_the_key_and_the_variable(make_repo):
    root = make_repo({CONFIG: config(models={"main": {"model": "m", "apiKey": "env:API_KEY"}})})

    error = only_error(load(root, environ={}))

    assert error.file == CONFIG
    assert error.field == "models.main.apiKey"
    assert error.line == line_of(root / CONFIG, '"apiKey"')
    assert "'API_KEY'" in error.message
    assert "not set" in error.message


def test_offline_load_accepts_a_missing_env_variable(make_repo):
    root = make_repo({CONFIG: config(models={"main": {"model": "m", "apiKey": "env:API_KEY"}})})

    valid(load(root, environ={}, offline=True))


@pytest.mark.parametrize("offline", [False, True])
def test_malformed_env_reference_is_an_error_even_offline(make_repo, offline):
    root = make_repo({CONFIG: config(description="env:1-BAD")})

    error = only_error(load(root, environ={"1-BAD": "x"}, offline=offline))

    assert error.field == "description"
    assert "env:NAME" in error.message


def test_model_binding_may_be_a_name_or_an_object(make_repo):
    root = make_repo(
        {
            CONFIG: config(
                models={"main": "big", "advanced": {"model": "huge", "provider": "openai"}}
            )
        }
    )

    bundle = valid(load(root)).bundle

    assert bundle.config.models.main is not None
    assert bundle.config.models.advanced is not None
    assert (bundle.config.models.main.model, bundle.config.models.advanced.model) == (
        "big",
        "huge",
    )


def test_misspelt_key_of_a_model_binding_suggests_the_camel_case_name(make_repo):
    root = make_repo({CONFIG: config(models={"main": {"model": "m", "baseURL": "http://x"}})})

    error = only_error(load(root))

    assert error.field == "models.main.baseURL"
    assert "did you mean 'baseUrl'?" in error.message


def test_an_anthropic_model_entry_is_valid_without_a_base_url(make_repo):
    root = make_repo(
        {CONFIG: config(models={"main": {"model": "claude-sonnet-4-5", "provider": "anthropic"}})}
    )

    result = valid(load(root))

    assert warnings_in(result, CONFIG) == []
    assert result.bundle is not None and result.bundle.config.models.main is not None
    assert result.bundle.config.models.main.provider == "anthropic"


def test_an_unknown_provider_is_an_error_listing_the_known_ones(make_repo):
    root = make_repo(
        {CONFIG: config(models={"main": "gpt-4o", "simple": {"model": "g", "provider": "gemini"}})}
    )

    error = only_error(load(root))

    assert error.field == "models.simple.provider"
    assert error.line == line_of(root / CONFIG, '"provider": "gemini"')
    assert "unknown provider 'gemini'" in error.message
    assert "known providers: 'anthropic', 'openai'" in error.message


def test_a_fallback_list_of_names_entries_and_tiers_is_valid(make_repo):
    models = {
        "main": {
            "model": "claude-sonnet-4-5",
            "provider": "anthropic",
            "fallback": [
                "claude-haiku-4-5",
                {"model": "gpt-4.1", "provider": "openai", "apiKey": "sk-x"},
                {"tier": "simple"},
            ],
        },
        "simple": {"model": "gpt-4.1-mini", "provider": "openai"},
    }
    bundle = valid(load(make_repo({CONFIG: config(models=models)}))).bundle

    assert bundle.config.models.main is not None
    fallback = bundle.config.models.main.fallback
    assert [(entry.model, entry.tier) for entry in fallback] == [
        ("claude-haiku-4-5", None),
        ("gpt-4.1", None),
        (None, "simple"),
    ]


def test_a_fallback_naming_an_unknown_tier_is_an_error_with_its_line(make_repo):
    models = {"main": {"model": "m", "fallback": ["backup", {"tier": "simpel"}]}}
    root = make_repo({CONFIG: config(models=models)})

    error = only_error(load(root))

    assert error.field == "models.main.fallback[1].tier"
    assert error.line == line_of(root / CONFIG, '"tier": "simpel"')
    assert "unknown tier 'simpel'" in error.message and "'simple'" in error.message


def test_a_fallback_to_a_tier_models_does_not_define_is_an_error(make_repo):
    models = {"main": {"model": "m", "fallback": [{"tier": "advanced"}]}, "simple": "s"}
    root = make_repo({CONFIG: config(models=models)})

    error = only_error(load(root))

    assert error.field == "models.main.fallback[0]"
    assert error.line == line_of(root / CONFIG, '"tier": "advanced"')
    assert "tier 'advanced'" in error.message and "defined: 'main', 'simple'" in error.message


@pytest.mark.parametrize(
    "models",
    [
        {"main": {"model": "m", "fallback": [{"tier": "main"}]}},
        {
            "main": {"model": "m", "fallback": ["other", {"tier": "simple"}]},
            "simple": {"model": "s", "fallback": [{"tier": "advanced"}]},
            "advanced": {"model": "a", "fallback": [{"tier": "main"}]},
        },
    ],
    ids=["itself", "through two tiers"],
)
def test_a_fallback_cycle_is_one_error_at_its_first_entry(make_repo, models):
    root = make_repo({CONFIG: config(models=models)})

    error = only_error(load(root))

    assert error.field.startswith("models.main.fallback[")
    assert error.line == line_of(root / CONFIG, '"tier": ', 1)
    assert "comes back to where it started: main -> " in error.message
    assert error.message.endswith("-> main")


def test_a_fallback_entry_with_its_own_fallback_or_a_mixed_tier_is_an_error(make_repo):
    models = {
        "main": {
            "model": "m",
            "fallback": [{"model": "b", "fallback": ["c"]}, {"tier": "main", "model": "x"}],
        }
    }
    result = load(make_repo({CONFIG: config(models=models)}))

    problems = {error.field: error.message for error in errors_in(result, CONFIG)}
    assert "unknown key 'fallback'" in problems["models.main.fallback[0].fallback"]
    assert 'a tier reference is {"tier": NAME} alone' in problems["models.main.fallback[1]"]


def test_mcp_server_without_its_transport_fields_is_an_error(make_repo):
    root = make_repo({CONFIG: config(mcp={"servers": {"remote": {"transport": "http"}}})})

    error = only_error(load(root))

    assert error.field == "mcp.servers.remote"
    assert "needs `url`" in error.message


def test_secrets_in_the_config_are_not_shown_in_its_repr(make_repo):
    root = make_repo({CONFIG: config(models={"main": {"model": "m", "apiKey": "env:KEY"}})})

    bundle = valid(load(root, environ={"KEY": "very-secret-value"})).bundle

    assert "very-secret-value" not in repr(bundle.config)


def test_config_errors_carry_lines_for_every_problem_at_once(make_repo):
    text = json.dumps(config(limits={"maxToolCals": 1}, descripton="x", delegation=[]), indent=2)
    root = make_repo({CONFIG: text})

    result = load(root)

    assert {error.field for error in errors_in(result, CONFIG)} == {
        "limits.maxToolCals",
        "descripton",
        "delegation",
    }
    assert all(error.line is not None for error in result.errors)
