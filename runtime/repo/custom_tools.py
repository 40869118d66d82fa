"""tools/<name>/: custom tools, a `tool.json` description plus an async Python handler."""

from __future__ import annotations

import json
import re
from functools import partial
from types import MappingProxyType
from typing import Any

from runtime.repo._checks import MEMO
from runtime.repo._python import callable_line, handler_problem, run_module
from runtime.repo._reader import Reader
from runtime.repo._report import Source, format_field
from runtime.repo.bundle import CustomTool
from runtime.repo.formats import ToolFile

TOOLS_DIR = "tools"
TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def load_custom_tools(reader: Reader) -> list[CustomTool]:
    if not reader.is_dir(TOOLS_DIR):
        return []
    tools = []
    for name, kind in reader.listing(TOOLS_DIR).items():
        relative = f"{TOOLS_DIR}/{name}"
        if kind != "dir":
            reader.report.warn(relative, "ignored: a custom tool is a folder `tools/<name>/`")
            continue
        tool = reader.unit(relative, partial(_load_tool, reader, relative, name))
        if tool is not None:
            tools.append(tool)
    return tools


def _load_tool(reader: Reader, relative: str, name: str) -> CustomTool | None:
    report = reader.report
    folder = reader.root / relative
    if not TOOL_NAME.match(name):
        report.error(
            relative,
            f"tool name {name!r} must be lowercase letters, digits and "
            "underscores, starting with a letter (rename the folder)",
        )
        return None
    if not reader.is_file(f"{relative}/tool.json"):
        report.error(relative, "a custom tool needs tool.json (description, parameters)")
        return None
    if not reader.is_file(f"{relative}/handler.py"):
        if reader.is_file(f"{relative}/handler.ts"):
            report.error(
                f"{relative}/handler.ts",
                "TypeScript handlers are not supported by "
                "this runtime: write handler.py with `async def handler(args, ctx)`",
            )
        else:
            report.error(
                relative, "a custom tool needs handler.py with `async def handler(args, ctx)`"
            )
        return None
    spec = _load_spec(reader, f"{relative}/tool.json")
    handler_file = f"{relative}/handler.py"
    text = reader.read(handler_file)
    namespace = (
        run_module(folder / "handler.py", text, handler_file, report) if text is not None else None
    )
    if spec is None or namespace is None:
        return None
    handler = namespace.get("handler")
    problem = handler_problem(handler)
    if problem is not None or handler is None:
        line = callable_line(handler) if handler is not None else None
        report.error(handler_file, problem or "missing handler", line=line)
        return None
    return CustomTool(
        name=name,
        description=spec.description,
        _parameters=MappingProxyType(spec.parameters),
        confirm=spec.confirm,
        timeout=spec.timeout,
        handler=handler,
        file=f"{relative}/tool.json",
        idempotent=spec.idempotent,
    )


def _load_spec(reader: Reader, relative: str) -> ToolFile | None:
    report = reader.report
    text = reader.read(relative)
    if text is None:
        return None
    source = Source(relative, text)
    data = report.parse_json(source)
    spec = report.validate(ToolFile, data, source) if data is not None else None
    if spec is None:
        return None
    parameters = spec.parameters
    problems = MEMO.check(
        "tool parameters",
        json.dumps(parameters, sort_keys=True, ensure_ascii=False),
        lambda: _schema_problems(parameters),
    )
    if problems:
        path, message = problems[0]
        report.error(relative, message, line=source.line(path), field=format_field(path))
        return None
    if parameters.get("type") != "object":
        report.error(
            relative,
            '`parameters` must be a JSON Schema with "type": "object" '
            "(models call tools with an object of named arguments)",
            line=source.line(("parameters",)),
            field="parameters",
        )
        return None
    return spec


def _schema_problems(parameters: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """What is wrong with a tool's `parameters` as a schema (at most one problem)."""
    # jsonschema costs ~45 ms to import: only repos with custom tools whose schemas did
    # not pass before (runtime/repo/_checks.py) pay for it.
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    from runtime._jsonschema import schema_problem

    try:
        validator_for(parameters).check_schema(parameters)
    except SchemaError as error:
        path = ("parameters", *error.absolute_path)
        return [(path, f"`parameters` is not a valid JSON Schema: {error.message}")]
    problem = schema_problem(parameters, metaschema=False)
    if problem is not None:
        return [(("parameters",), f"`parameters` cannot check arguments: {problem}")]
    return []
