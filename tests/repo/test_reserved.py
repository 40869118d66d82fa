"""The reserved agent names (SPEC 1.2): `main` for unscoped chat and `default` for rooting."""

from __future__ import annotations

import pytest

from ._helpers import line_of, load, only_error, valid, warnings_in

MAIN_MD = "agents/main/AGENT.md"
MAIN_JSON = "agents/main/agent.json"


def test_main_is_the_prompt_of_unscoped_chat_not_an_agent(make_repo):
    root = make_repo({MAIN_MD: "You run the console."})

    bundle = valid(load(root)).bundle

    assert "main" not in bundle.agents
    assert bundle.main.prompt is not None
    assert bundle.main.prompt.source == "You run the console."
    assert bundle.main.tools == frozenset()


def test_main_agent_json_opts_into_file_tools(make_repo):
    root = make_repo(
        {MAIN_MD: "Console.", MAIN_JSON: {"tools": ["read_file", "propose_source_change"]}}
    )

    main = valid(load(root)).bundle.main

    assert main.tools == frozenset({"read_file", "propose_source_change"})


def test_main_agent_json_listing_another_tool_is_an_error_naming_the_file_tools(make_repo):
    root = make_repo({MAIN_MD: "Console.", MAIN_JSON: {"tools": ["read_file", "load_skill"]}})

    error = only_error(load(root))

    assert (error.file, error.field) == (MAIN_JSON, "tools[1]")
    assert error.line == line_of(root / MAIN_JSON, '"load_skill"')
    assert (
        "read_file, write_file, list_files, glob_files, grep_files, propose_source_change"
        in error.message
    )


def test_main_agent_json_other_fields_are_ignored_with_a_warning(make_repo):
    root = make_repo(
        {MAIN_MD: "Console.", MAIN_JSON: {"tools": ["list_files"], "description": "x"}}
    )

    result = valid(load(root))

    [warning] = warnings_in(result, MAIN_JSON)
    assert warning.field == "description"
    assert "ignored" in warning.message
    assert result.bundle.main.tools == frozenset({"list_files"})


def test_main_agent_json_is_not_read_when_main_agent_md_is_empty(make_repo):
    root = make_repo({MAIN_MD: "\n", MAIN_JSON: "{ this is not json"})

    result = valid(load(root))

    assert result.bundle.main.prompt is None
    [warning] = warnings_in(result, MAIN_JSON)
    assert "main/AGENT.md is empty" in warning.message


def test_main_agent_json_misspelt_key_is_still_an_error(make_repo):
    root = make_repo({MAIN_MD: "Console.", MAIN_JSON: {"tols": ["read_file"]}})

    error = only_error(load(root))

    assert "did you mean 'tools'?" in error.message


@pytest.mark.parametrize(
    ("file", "content"),
    [("agents/main/agent.py", "agent = {}\n"), ("agents/main/CONTEXT.md", "Context.")],
)
def test_main_takes_no_agent_py_or_context_md(make_repo, file, content):
    root = make_repo({MAIN_MD: "Console.", file: content})

    result = valid(load(root))

    [warning] = warnings_in(result, file)
    assert "main takes no" in warning.message


def test_main_frontmatter_is_ignored_with_a_warning(make_repo):
    root = make_repo({MAIN_MD: "---\ntools: [load_skill]\n---\nConsole.\n"})

    result = valid(load(root))

    [warning] = warnings_in(result, MAIN_MD)
    assert "frontmatter of main is ignored" in warning.message


def test_default_roots_the_chat_when_the_request_names_none(make_repo):
    bundle = valid(load(make_repo({"agents/other/AGENT.md": "Other."}))).bundle

    assert bundle.default_agent is bundle.agents["default"]
    assert bundle.agents["default"].is_default
    assert not bundle.agents["other"].is_default


@pytest.mark.parametrize("reserved", ["default", "main"])
def test_default_and_main_are_never_allowed_as_subagents(make_repo, reserved):
    root = make_repo(
        {
            MAIN_MD: "Console.",
            "agents/lead/AGENT.md": "Lead.",
            "agents/lead/agent.json": {"subagents": [reserved]},
        }
    )

    error = only_error(load(root))

    assert (error.file, error.field) == ("agents/lead/agent.json", "subagents[0]")
    assert f"{reserved!r} is never callable as a specialist" in error.message
