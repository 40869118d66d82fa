"""Every reference an agent makes resolves, or is an error listing the known names (SPEC 1.2)."""

from __future__ import annotations

import pytest

from ._helpers import line_of, load, only_error, valid, warnings_in

AGENT_JSON = "agents/default/agent.json"
CONFIG = {
    "name": "test-repo",
    "version": "1.0.0",
    "mcp": {"servers": {"github": {"transport": "stdio", "command": "gh-mcp"}}},
}


@pytest.fixture
def world(make_repo, store_file):
    """A repo with one of everything an agent can refer to, and an agent.json to write."""

    def make(declaration: dict[str, object]):
        return make_repo(
            {
                "amodal.json": CONFIG,
                "agents/helper/AGENT.md": "Helps.",
                "skills/notes/SKILL.md": "# Skill: Take Notes\nBody.\n",
                "stores/notes.json": store_file,
                "connections/crm/spec.json": {"baseUrl": "https://crm.example"},
                AGENT_JSON: {"tools": ["load_skill"], **declaration},
            }
        )

    return make


def test_references_of_every_kind_resolve(world):
    root = world(
        {
            "skills": ["Take Notes"],
            "subagents": ["helper"],
            "stores": {"notes": "read"},
            "connections": ["crm"],
            "mcp": ["github"],
        }
    )

    agent = valid(load(root)).bundle.agents["default"]

    assert [entry.name for entry in agent.subagents] == ["helper"]
    assert [entry.name for entry in agent.connections] == ["crm"]
    assert [entry.name for entry in agent.mcp] == ["github"]
    assert [grant.store for grant in agent.stores] == ["notes"]


@pytest.mark.parametrize(
    ("declaration", "field", "kind", "known"),
    [
        ({"tools": ["load_skill", "lookup"]}, "tools[1]", "tool", "known tools: 'ask_choice'"),
        ({"skills": ["Take Note"]}, "skills[0]", "skill", "known skills: 'Take Notes'"),
        ({"subagents": ["helpr"]}, "subagents[0]", "agent", "known agents: 'default', 'helper'"),
        ({"stores": {"note": "read"}}, "stores.note", "store", "known stores: 'notes'"),
        ({"connections": ["cmr"]}, "connections[0]", "connection", "known connections: 'crm'"),
        ({"mcp": ["githb"]}, "mcp[0]", "MCP server", "known MCP servers: 'github'"),
    ],
)
def test_unknown_reference_is_an_error_listing_known_names(world, declaration, field, kind, known):
    root = world(declaration)

    error = only_error(load(root))

    assert (error.file, error.field) == (AGENT_JSON, field)
    assert error.line is not None
    assert f"unknown {kind} " in error.message
    assert known in error.message


def test_unknown_reference_suggests_the_closest_name(world):
    root = world({"subagents": ["helpr"]})

    assert "did you mean 'helper'?" in only_error(load(root)).message


def test_reference_when_nothing_of_that_kind_exists_says_so(make_repo):
    root = make_repo({AGENT_JSON: {"connections": ["crm"]}})

    error = only_error(load(root))

    assert "there are no connections" in error.message


def test_reference_line_is_the_entry_line(world):
    root = world({"mcp": ["githb"]})

    error = only_error(load(root))

    assert error.line == line_of(root / AGENT_JSON, '"githb"')


def test_a_broken_subagent_is_reported_once_not_again_as_unknown(make_repo):
    root = make_repo(
        {
            "agents/helper/AGENT.md": "Helps.",
            "agents/helper/agent.json": {"rol": "tester"},
            AGENT_JSON: {"subagents": ["helper"]},
        }
    )

    error = only_error(load(root))

    assert error.file == "agents/helper/agent.json"


def test_a_connection_without_spec_json_is_ignored_with_a_warning(make_repo):
    root = make_repo({"connections/crm/README.md": "todo"})

    result = valid(load(root))

    assert dict(result.bundle.connections) == {}
    assert "spec.json" in warnings_in(result, "connections/crm")[0].message


def test_references_from_agent_py_and_frontmatter_name_their_own_file(make_repo):
    root = make_repo(
        {
            "agents/default/agent.py": "agent = {\n    'subagents': ['nobody'],\n}\n",
            "agents/writer/AGENT.md": "---\ntools: [wrte_file]\n---\nWrite.\n",
        }
    )

    result = load(root)

    located = sorted((error.file, error.line) for error in result.errors)
    assert located == [("agents/default/agent.py", 2), ("agents/writer/AGENT.md", 2)]


def test_a_broken_store_is_reported_once_not_again_where_referenced(make_repo, store_file):
    broken = {**store_file, "entity": {**store_file["entity"], "key": "{missing}"}}
    root = make_repo(
        {
            "stores/research-notes.json": broken,
            AGENT_JSON: {
                "tools": ["store__research_notes__put"],
                "stores": {"research-notes": "rw"},
            },
        }
    )

    error = only_error(load(root))

    assert error.file == "stores/research-notes.json"


def test_a_broken_custom_tool_is_reported_once_not_again_where_referenced(make_repo):
    root = make_repo(
        {
            "tools/echo/tool.json": {"description": "Echo."},
            "tools/echo/handler.py": "def handler(args, ctx):\n    return args\n",
            AGENT_JSON: {"tools": ["echo"]},
        }
    )

    error = only_error(load(root))

    assert error.file == "tools/echo/handler.py"


def test_a_file_ignored_under_tools_does_not_excuse_a_reference_to_it(make_repo):
    root = make_repo({"tools/echo.py": "x = 1\n", AGENT_JSON: {"tools": ["echo"]}})

    error = only_error(load(root))

    assert error.file == AGENT_JSON
    assert "unknown tool 'echo'" in error.message


def test_a_broken_config_does_not_make_every_mcp_reference_unknown(make_repo):
    root = make_repo(
        {
            "amodal.json": {**CONFIG, "versoin": "1"},
            AGENT_JSON: {"tools": ["github__create_issue"], "mcp": ["github"]},
        }
    )

    result = load(root)

    assert {error.file for error in result.errors} == {"amodal.json"}
