"""tools/ (SPEC 1.5): tool.json plus an async Python handler; TypeScript is a clear error."""

from __future__ import annotations

import asyncio

import pytest

from ._helpers import line_of, load, only_error, valid, warnings_in

HANDLER = "async def handler(args: dict, ctx) -> dict:\n    return {'echo': args}\n"
SPEC = {
    "description": "Echo the arguments.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
}


def tool(name: str = "echo", spec: object = SPEC, handler: str | None = HANDLER) -> dict:
    files: dict[str, object] = {f"tools/{name}/tool.json": spec}
    if handler is not None:
        files[f"tools/{name}/handler.py"] = handler
    return files


def test_tool_json_and_handler_py_define_a_custom_tool(make_repo):
    root = make_repo(tool(spec={**SPEC, "confirm": True, "timeout": 600}))

    bundle = valid(load(root)).bundle

    echo = bundle.tools["echo"]
    assert (echo.description, echo.confirm, echo.timeout) == ("Echo the arguments.", True, 600)
    assert echo.parameters() == SPEC["parameters"]
    assert echo.file == "tools/echo/tool.json"
    assert bundle.registry["echo"].kind == "custom"


def test_tool_defaults_are_no_confirmation_and_a_30_second_timeout(make_repo):
    echo = valid(load(make_repo(tool(spec={"description": "Echo."})))).bundle.tools["echo"]

    assert (echo.confirm, echo.timeout) == (False, 30)
    assert echo.parameters() == {"type": "object", "properties": {}}


def test_a_tool_is_idempotent_only_when_its_tool_json_says_so(make_repo):
    plain = valid(load(make_repo(tool(spec={"description": "Echo."})))).bundle.tools["echo"]
    spec = {"description": "Echo.", "idempotent": True}
    marked = valid(load(make_repo(tool(spec=spec)))).bundle.tools["echo"]

    assert (plain.idempotent, marked.idempotent) == (False, True)


def test_an_idempotent_flag_that_is_not_a_boolean_is_an_error_at_its_field(make_repo):
    error = only_error(
        load(make_repo(tool(spec={"description": "Echo.", "idempotent": "sometimes"})))
    )

    assert (error.file, error.field) == ("tools/echo/tool.json", "idempotent")


def test_handler_is_the_async_function_from_handler_py(make_repo):
    handler = valid(load(make_repo(tool()))).bundle.tools["echo"].handler

    assert asyncio.run(handler({"text": "hi"}, None)) == {"echo": {"text": "hi"}}


def test_handler_ts_without_handler_py_is_an_error_saying_typescript_is_not_supported(make_repo):
    root = make_repo({**tool(handler=None), "tools/echo/handler.ts": "export default () => 1"})

    error = only_error(load(root))

    assert error.file == "tools/echo/handler.ts"
    assert "TypeScript handlers are not supported" in error.message
    assert "handler.py" in error.message


def test_tool_without_handler_is_an_error(make_repo):
    error = only_error(load(make_repo(tool(handler=None))))

    assert error.file == "tools/echo"
    assert "handler.py" in error.message


def test_tool_without_tool_json_is_an_error(make_repo):
    root = make_repo({"tools/echo/handler.py": HANDLER})

    error = only_error(load(root))

    assert error.file == "tools/echo"
    assert "tool.json" in error.message


@pytest.mark.parametrize("name", ["Echo", "echo-tool", "1echo", "_echo"])
def test_tool_name_outside_the_pattern_is_an_error(make_repo, name):
    error = only_error(load(make_repo(tool(name=name))))

    assert error.file == f"tools/{name}"
    assert "rename the folder" in error.message


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        ("def handler(args, ctx):\n    return 1\n", "must be an async function"),
        ("async def handler(args):\n    return 1\n", "must take two arguments"),
    ],
)
def test_handler_of_the_wrong_shape_is_an_error_at_its_def_line(make_repo, handler, expected):
    root = make_repo(tool(handler="import json\n\n\n" + handler))

    error = only_error(load(root))

    assert (error.file, error.line) == ("tools/echo/handler.py", 4)
    assert expected in error.message


@pytest.mark.parametrize("handler", ["", "helper = 1\n"])
def test_handler_py_without_handler_is_an_error(make_repo, handler):
    error = only_error(load(make_repo(tool(handler=handler))))

    assert error.file == "tools/echo/handler.py"
    assert "must define `async def handler" in error.message


def test_handler_py_syntax_error_is_at_its_line(make_repo):
    error = only_error(
        load(make_repo(tool(handler="async def handler(args, ctx):\n    return (\n")))
    )

    assert error.file == "tools/echo/handler.py"
    assert error.line in (2, 3)


def test_tool_json_misspelt_key_suggests_the_right_one(make_repo):
    root = make_repo(tool(spec={"description": "Echo.", "timout": 5}))

    error = only_error(load(root))

    assert error.file == "tools/echo/tool.json"
    assert error.line == line_of(root / "tools/echo/tool.json", '"timout"')
    assert "did you mean 'timeout'?" in error.message


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"parameters": {}}, "description"),
        ({"description": ""}, "description"),
        ({"description": "Echo.", "timeout": 601}, "timeout"),
        ({"description": "Echo.", "timeout": 0}, "timeout"),
        ({"description": "Echo.", "confirm": "yes please"}, "confirm"),
        ({"description": "Echo.", "parameters": {"type": "array"}}, "parameters"),
    ],
)
def test_tool_json_field_out_of_its_rules_is_an_error(make_repo, spec, field):
    error = only_error(load(make_repo(tool(spec=spec))))

    assert (error.file, error.field) == ("tools/echo/tool.json", field)


def test_parameters_that_are_not_a_json_schema_are_an_error_at_the_bad_part(make_repo):
    spec = {"description": "Echo.", "parameters": {"type": "object", "properties": {"x": 5}}}
    root = make_repo(tool(spec=spec))

    error = only_error(load(root))

    assert error.field == "parameters.properties.x"
    assert "not a valid JSON Schema" in error.message


def test_a_file_directly_under_tools_is_ignored_with_a_warning(make_repo):
    root = make_repo({"tools/helper.py": "x = 1\n"})

    result = valid(load(root))

    assert warnings_in(result, "tools/helper.py")


def test_the_bundle_gives_a_copy_of_the_parameters(make_repo):
    echo = valid(load(make_repo(tool()))).bundle.tools["echo"]

    echo.parameters()["properties"]["text"]["type"] = "number"

    assert echo.parameters() == SPEC["parameters"]


def test_tool_json_of_null_is_an_error_not_a_silently_missing_tool(make_repo):
    error = only_error(load(make_repo(tool(spec="null"))))

    assert (error.file, error.line) == ("tools/echo/tool.json", 1)
    assert "JSON object" in error.message


@pytest.mark.parametrize(
    ("property_schema", "problem"),
    [
        ({"$ref": "http://127.0.0.1:1/word.json"}, "only local references"),
        ({"type": "string", "pattern": "^(?=a)"}, "cannot run on RE2"),
    ],
)
def test_parameters_that_would_fetch_or_backtrack_are_an_error(make_repo, property_schema, problem):
    parameters = {"type": "object", "properties": {"word": property_schema}}
    root = make_repo(tool(spec={**SPEC, "parameters": parameters}))

    error = only_error(load(root))

    assert error.file == "tools/echo/tool.json" and problem in error.message
