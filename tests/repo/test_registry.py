"""The tool registry (SPEC 2): every name the bundle can offer, unique across sources."""

from __future__ import annotations

import pytest

from runtime.repo.registry import (
    FILE_TOOLS,
    MEMORY_TOOLS,
    PROTOCOL_TOOLS,
    SESSION_SEARCH,
    store_tool_name,
)

from ._helpers import line_of, load, only_error, valid

AGENT_JSON = "agents/default/agent.json"
HANDLER = "async def handler(args, ctx):\n    return None\n"


def custom_tool(name: str) -> dict[str, object]:
    return {
        f"tools/{name}/tool.json": {"description": "A tool."},
        f"tools/{name}/handler.py": HANDLER,
    }


def test_builtin_tools_are_always_in_the_registry(make_repo):
    registry = valid(load(make_repo())).bundle.registry

    expected = {
        *PROTOCOL_TOOLS, "call_subagent", "load_skill", "load_knowledge", "request", *FILE_TOOLS,
        *MEMORY_TOOLS, SESSION_SEARCH,
    }  # fmt: skip
    assert set(registry) == expected
    assert registry["stop_execution"].kind == "protocol"
    assert registry["call_subagent"].kind == "delegation"
    assert registry["memory__add"].kind == "memory"
    assert all(registry[name].description for name in expected)


def test_store_tools_turn_hyphens_into_underscores(make_repo, store_file):
    root = make_repo({"stores/research-notes.json": store_file})

    registry = valid(load(root)).bundle.registry

    names = {name for name, info in registry.items() if info.kind == "store"}
    assert names == {
        "store__research_notes__get",
        "store__research_notes__query",
        "store__research_notes__put",
        "store__research_notes__delete",
    }
    query = registry["store__research_notes__query"]
    assert (query.store, query.op) == ("research-notes", "query")
    assert "research-notes" in query.description
    assert store_tool_name("research-notes", "query") == "store__research_notes__query"


def test_read_store_tools_need_the_store_declared(make_repo, store_file):
    root = make_repo(
        {
            "stores/research-notes.json": store_file,
            AGENT_JSON: {
                "tools": ["store__research_notes__get", "store__research_notes__query"],
                "stores": {"research-notes": "read"},
            },
        }
    )

    agent = valid(load(root)).bundle.agents["default"]

    assert [entry.name for entry in agent.tools] == [
        "store__research_notes__get",
        "store__research_notes__query",
    ]


def test_store_tool_without_its_store_declared_is_an_error(make_repo, store_file):
    root = make_repo(
        {"stores/notes.json": store_file, AGENT_JSON: {"tools": ["store__notes__query"]}}
    )

    error = only_error(load(root))

    assert error.field == "tools[0]"
    assert "needs its store declared under `stores`" in error.message


def test_write_store_tool_with_a_read_grant_is_an_error_naming_the_mode(make_repo, store_file):
    root = make_repo(
        {
            "stores/notes.json": store_file,
            AGENT_JSON: {"tools": ["store__notes__put"], "stores": {"notes": "read"}},
        }
    )

    error = only_error(load(root))

    assert "mode 'rw'" in error.message
    assert "'read'" in error.message


def test_write_store_tool_with_an_rw_grant_is_accepted(make_repo, store_file):
    root = make_repo(
        {
            "stores/notes.json": store_file,
            AGENT_JSON: {
                "tools": ["store__notes__put", "store__notes__delete"],
                "stores": {"notes": "rw"},
            },
        }
    )

    valid(load(root))


@pytest.mark.parametrize("name", ["load_skill", "read_file", "stop_execution", "call_subagent"])
def test_custom_tool_named_like_a_builtin_tool_is_a_duplicate_error(make_repo, name):
    error = only_error(load(make_repo(custom_tool(name))))

    assert error.file == f"tools/{name}"
    assert "defined more than once" in error.message
    assert "custom tool" in error.message


def test_custom_tool_named_like_a_store_tool_is_a_duplicate_error(make_repo, store_file):
    root = make_repo({"stores/notes.json": store_file, **custom_tool("store__notes__get")})

    error = only_error(load(root))

    assert "store tool, custom tool" in error.message


def test_custom_tool_named_with_the_store_prefix_is_an_ordinary_tool(make_repo):
    root = make_repo({**custom_tool("store__legacy"), AGENT_JSON: {"tools": ["store__legacy"]}})

    bundle = valid(load(root)).bundle

    assert bundle.registry["store__legacy"].kind == "custom"


def test_unknown_tool_is_an_error_listing_the_registry_with_a_suggestion(make_repo, store_file):
    root = make_repo({"stores/notes.json": store_file, AGENT_JSON: {"tools": ["load_skils"]}})

    error = only_error(load(root))

    assert (error.file, error.field) == (AGENT_JSON, "tools[0]")
    assert error.line == line_of(root / AGENT_JSON, '"load_skils"')
    assert "did you mean 'load_skill'?" in error.message
    assert "'store__notes__query'" in error.message
    assert "'ask_choice'" in error.message


def test_mcp_tools_of_a_configured_server_are_accepted(make_repo):
    server = {"transport": "stdio", "command": "gh-mcp"}
    root = make_repo(
        {
            "amodal.json": {"name": "r", "version": "1", "mcp": {"servers": {"github": server}}},
            AGENT_JSON: {"tools": ["github__create_issue"], "mcp": ["github"]},
        }
    )

    valid(load(root))


def test_mcp_style_tool_of_an_unknown_server_is_an_unknown_tool(make_repo):
    root = make_repo({AGENT_JSON: {"tools": ["gitlab__create_issue"]}})

    assert "unknown tool 'gitlab__create_issue'" in only_error(load(root)).message


def test_registry_is_read_only(make_repo):
    registry = valid(load(make_repo())).bundle.registry

    with pytest.raises(TypeError):
        registry["new_tool"] = registry["load_skill"]  # type: ignore[index]
