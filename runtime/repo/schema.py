"""JSON Schemas of the repo's file formats, generated from the models that parse them.

The generated files ship in the package (`runtime/repo/schemas/`) so editors can
validate agent.json and amodal.json as a person types; a test keeps them equal
to what the models generate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from runtime.repo.eval_suites import SuiteFile
from runtime.repo.formats import (
    AccessFile,
    AgentConfig,
    ConnectionSpec,
    McpConnectionSpec,
    RepoConfig,
    StoreFile,
    ToolFile,
)

SCHEMAS_DIR = Path(__file__).parent / "schemas"

_FORMATS: dict[str, tuple[type[BaseModel] | TypeAdapter[Any], str]] = {
    "amodal": (RepoConfig, "amodal.json: the configuration of an agent repo"),
    "agent": (AgentConfig, "agents/<name>/agent.json: the configuration of one agent"),
    "store": (StoreFile, "stores/<name>.json: one store and its entity schema"),
    "tool": (ToolFile, "tools/<name>/tool.json: one custom tool"),
    "eval": (SuiteFile, "evals/<suite>.yaml or .json: one eval suite"),
    "connection": (
        TypeAdapter(ConnectionSpec | McpConnectionSpec),
        "connections/<name>/spec.json: a REST connection, or an MCP server",
    ),
    "access": (AccessFile, "connections/<name>/access.json: the endpoints agents may call"),
}

SCHEMA_NAMES = tuple(_FORMATS)


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one format (`amodal`, `agent`, `store`, `tool`, `connection`,
    `access` or `eval`)."""
    model, title = _FORMATS[name]
    if isinstance(model, TypeAdapter):
        schema = model.json_schema(by_alias=True, mode="validation")
    else:
        schema = model.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://amodal.dev/schemas/{name}.schema.json",
        **schema,
        "title": title,
    }


def schema_text(name: str) -> str:
    return json.dumps(json_schema(name), indent=2, sort_keys=True) + "\n"


def write_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in SCHEMA_NAMES:
        path = directory / f"{name}.schema.json"
        path.write_text(schema_text(name), encoding="utf-8")
        written.append(path)
    return written
