"""The JSON Schemas shipped for editors: never stale, and they agree with the example repo."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from runtime.repo.schema import SCHEMA_NAMES, SCHEMAS_DIR, json_schema, schema_text

PROJECT_ROOT = Path(__file__).resolve().parents[1]
REGENERATE = "regenerate them with `amodal schema --out runtime/repo/schemas` and commit the result"


def shipped(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))


def validator(name: str) -> jsonschema.protocols.Validator:
    schema = shipped(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def errors(name: str, document: Any) -> list[str]:
    return [error.message for error in validator(name).iter_errors(document)]


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_shipped_schema_equals_what_the_models_generate(name: str) -> None:
    path = SCHEMAS_DIR / f"{name}.schema.json"
    assert path.is_file(), f"{path} is missing: {REGENERATE}"
    assert path.read_text(encoding="utf-8") == schema_text(name), (
        f"{path} is stale (the models in runtime/repo/formats.py changed): {REGENERATE}"
    )


def test_no_stale_schema_file_is_shipped() -> None:
    names = sorted(path.name for path in SCHEMAS_DIR.glob("*.schema.json"))
    assert names == sorted(f"{name}.schema.json" for name in SCHEMA_NAMES), (
        f"runtime/repo/schemas holds files no format generates: delete them, then {REGENERATE}"
    )


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_shipped_schema_is_a_valid_draft_2020_12_schema(name: str) -> None:
    schema = shipped(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def example_agent_files() -> list[Path]:
    return sorted((PROJECT_ROOT / "agents").glob("*/agent.json"))


def test_example_repo_has_agent_json_files_to_check() -> None:
    assert len(example_agent_files()) >= 3


@pytest.mark.parametrize("path", example_agent_files(), ids=lambda path: path.parent.name)
def test_agent_schema_accepts_every_agent_json_of_the_example_repo(path: Path) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    assert errors("agent", document) == []


def test_agent_schema_rejects_a_misspelt_key() -> None:
    document = json.loads((PROJECT_ROOT / "agents/researcher/agent.json").read_text("utf-8"))
    assert errors("agent", document) == []
    misspelt = copy.deepcopy(document)
    misspelt["maxToolCals"] = 12
    assert any("'maxToolCals' was unexpected" in message for message in errors("agent", misspelt))


@pytest.mark.parametrize(
    "document",
    [
        {"modelTier": "fast"},
        {"maxToolCalls": 0},
        {"maxToolCalls": 201},
        {"persona": {"tone": "grumpy"}},
        {"stores": {"notes": "write"}},
        {"tools": [{"name": "load_skill", "conditional": "x"}]},
        {"tools": [{"nme": "load_skill"}]},
        {"name": "x" * 41},
    ],
    ids=str,
)
def test_agent_schema_rejects_what_the_loader_rejects(document: dict[str, Any]) -> None:
    assert errors("agent", document) != []


def test_agent_schema_accepts_entries_as_names_or_objects_and_store_modes() -> None:
    document = {
        "tools": ["load_skill", {"name": "load_knowledge"}],
        "stores": {"notes": "read", "decisions": {"mode": "rw"}},
    }
    assert errors("agent", document) == []


def test_amodal_schema_accepts_the_example_config_and_rejects_a_misspelt_key() -> None:
    document = json.loads((PROJECT_ROOT / "amodal.json").read_text(encoding="utf-8"))
    assert errors("amodal", document) == []
    assert errors("amodal", {**document, "modles": {}}) != []
    assert errors("amodal", {"name": "x"}) != []  # `version` is required


@pytest.mark.parametrize(
    "path", sorted((PROJECT_ROOT / "stores").glob("*.json")), ids=lambda path: path.stem
)
def test_store_schema_accepts_the_example_stores(path: Path) -> None:
    assert errors("store", json.loads(path.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize(
    "path", sorted((PROJECT_ROOT / "tools").glob("*/tool.json")), ids=lambda path: path.parent.name
)
def test_tool_schema_accepts_the_example_tools(path: Path) -> None:
    assert errors("tool", json.loads(path.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize(
    "path", sorted((PROJECT_ROOT / "evals").glob("*.yaml")), ids=lambda path: path.stem
)
def test_eval_schema_accepts_the_example_suites(path: Path) -> None:
    assert errors("eval", yaml.safe_load(path.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize(
    "case",
    [
        {"name": "x", "message": "hi", "expect": {"reply_contain": "hi"}},
        {"name": "x", "message": "hi", "turns": ["hi"]},
        {"name": "x"},
        {"name": "x", "message": "hi", "expect": {"done_reason": "finished"}},
        {"name": "x", "message": "hi", "claims": {"level": 3}},
    ],
    ids=["misspelt", "both", "neither", "reason", "claim"],
)
def test_eval_schema_rejects_what_the_loader_rejects(case: dict[str, Any]) -> None:
    assert errors("eval", {"cases": [case]}) != []


def test_schema_out_writes_every_schema(amodal: Callable[..., Any], tmp_path: Path) -> None:
    out = tmp_path / "schemas"
    result = amodal("schema", "--out", str(out))
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"wrote {out / f'{name}.schema.json'}" for name in SCHEMA_NAMES
    ]
    for name in SCHEMA_NAMES:
        assert (out / f"{name}.schema.json").read_text(encoding="utf-8") == schema_text(name)


def test_schema_name_prints_that_schema(amodal: Callable[..., Any]) -> None:
    result = amodal("schema", "agent")
    assert result.code == 0, result.stderr
    assert result.stdout == schema_text("agent")
    assert json.loads(result.stdout) == json_schema("agent")


def test_schema_without_name_or_out_is_a_usage_error(amodal: Callable[..., Any]) -> None:
    result = amodal("schema")
    assert result.code == 2
    assert "pass --out DIR" in result.stderr
