"""Loading connections/ and `mcp.servers` (SPEC 9): every rule, every problem with its place."""

from __future__ import annotations

import sys

import pytest

from runtime.repo import load_repo

from ._helpers import load, only_error, valid, warnings_in

CONFIG = {"name": "t", "version": "1"}
SERVER = {"transport": "stdio", "command": "desk-mcp"}


def test_a_rest_connection_loads_with_its_access_rules_texts_and_secrets(make_repo):
    root = make_repo(
        {
            "connections/crm/spec.json": {
                "baseUrl": "https://crm.example/v1/",
                "auth": {"type": "bearer", "token": "env:CRM_TOKEN"},
                "headers": {"X-Client": "amodal"},
                "contextInjection": [{"from": "claim:org", "in": "header", "name": "X-Org"}],
                "testPath": "/ping",
            },
            "connections/crm/access.json": {
                "default": "deny",
                "endpoints": [{"method": "POST", "path": "/deals/{id}", "confirm": True}],
            },
            "connections/crm/surface.md": "The CRM.\n",
            "connections/crm/rules.md": "Be careful.\n",
        }
    )
    crm = valid(load(root, environ={"CRM_TOKEN": "crm-secret-123"})).bundle.connections["crm"]
    assert (crm.base_url, crm.default_access, crm.test_path) == (
        "https://crm.example/v1", "deny", "/ping",
    )  # fmt: skip
    assert [(e.method, e.path, e.confirm) for e in crm.endpoints] == [("POST", "/deals/{id}", True)]
    assert (crm.surface, crm.rules) == ("The CRM.", "Be careful.")
    assert crm.auth_headers["Authorization"] == "Bearer crm-secret-123"
    assert "crm-secret-123" in crm.secrets
    assert "crm-secret-123" not in repr(crm)
    assert crm.injections[0].claim == "org"


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({}, "baseUrl", "missing required key 'baseUrl'"),
        ({"baseUrl": "ftp://x"}, "baseUrl", "should match pattern"),
        ({"baseUrl": "https://a@b.example"}, "baseUrl", "should match pattern"),
        ({"baseUrl": "https://x", "auth": {"type": "bearer"}}, "auth", "needs token"),
        ({"baseUrl": "https://x", "auth": {"type": "basic", "username": "u"}}, "auth",
         "needs password"),
        ({"baseUrl": "https://x", "timeout": 301}, "timeout", "less than or equal to 300"),
        ({"baseUrl": "https://x", "contextInjection": [{"from": "context:role", "in": "header",
          "name": "X"}]}, "contextInjection[0].from", "should match pattern"),
        ({"baseUrl": "https://x", "baseurl": "y"}, "baseurl", "did you mean 'baseUrl'"),
    ],
)  # fmt: skip
def test_a_broken_spec_is_an_error_naming_its_field(make_repo, spec, field, message):
    error = only_error(load(make_repo({"connections/crm/spec.json": spec})))
    assert error.file == "connections/crm/spec.json"
    assert error.field == field and message in error.message


def test_a_missing_env_variable_is_an_error_with_its_line(make_repo):
    spec = {"baseUrl": "https://x", "auth": {"type": "bearer", "token": "env:NOPE_TOKEN"}}
    error = only_error(load(make_repo({"connections/crm/spec.json": spec})))
    assert (error.field, error.line) == ("auth.token", 5)
    assert "environment variable 'NOPE_TOKEN' is not set" in error.message


def test_reference_platform_keys_and_stray_files_are_warnings(make_repo):
    root = make_repo(
        {
            "connections/crm/spec.json": {"baseUrl": "https://x", "specUrl": "https://x/o.json"},
            "connections/crm/notes.txt": "mine",
        }
    )
    result = valid(load(root))
    assert "not implemented" in warnings_in(result, "connections/crm/spec.json")[0].message
    assert "holds only spec.json" in warnings_in(result, "connections/crm/notes.txt")[0].message


def test_an_mcp_server_may_be_declared_as_a_connection_folder_but_not_twice(make_repo):
    root = make_repo({"connections/desk/spec.json": {"protocol": "mcp", **SERVER, "timeout": 5}})
    desk = valid(load(root)).bundle.mcp_servers["desk"]
    assert (desk.transport, desk.command, desk.timeout, desk.file) == (
        "stdio", "desk-mcp", 5, "connections/desk/spec.json",
    )  # fmt: skip
    twice = make_repo({"amodal.json": {**CONFIG, "mcp": {"servers": {"desk": SERVER}}}})
    assert "declare it in one place" in only_error(load(twice)).message


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"Desk": SERVER}, "must be 1-32 lowercase letters"),
        ({"store": SERVER}, "collide with store tools"),
        ({"my-db": SERVER, "my_db": SERVER}, "could give two tools one name"),
        ({"desk": {"transport": "sse"}}, "an sse server needs `url`"),
        ({"desk": {"transport": "http", "url": "https://x", "command": "y"}}, "for stdio servers"),
        ({"desk": {**SERVER, "cwd": "no-such-folder"}}, "is not a folder"),
        ({"desk": {**SERVER, "timeout": 601}}, "less than or equal to 600"),
    ],
)
def test_broken_mcp_declarations_are_errors(make_repo, servers, message):
    root = make_repo({"amodal.json": {**CONFIG, "mcp": {"servers": servers}}})
    assert message in only_error(load(root)).message


def test_agents_list_mcp_servers_under_mcp_and_connections_under_connections(make_repo):
    root = make_repo(
        {
            "amodal.json": {**CONFIG, "mcp": {"servers": {"desk": SERVER}}},
            "connections/crm/spec.json": {"baseUrl": "https://x"},
            "agents/default/agent.json": {"connections": ["desk"], "mcp": ["crm"]},
        }
    )
    messages = sorted(error.message for error in load(root).errors)
    assert messages == [
        "'crm' is a REST connection: list it under `connections`",
        "'desk' is an MCP server: list it under `mcp`",
    ]


def test_request_is_not_declared_and_a_custom_tool_cannot_take_a_server_prefix(make_repo):
    root = make_repo(
        {
            "amodal.json": {**CONFIG, "mcp": {"servers": {"desk": SERVER}}},
            "agents/default/agent.json": {"tools": ["request"]},
            "tools/desk__add/tool.json": {"description": "Mine."},
            "tools/desk__add/handler.py": "async def handler(args, ctx):\n    return 1\n",
        }
    )
    messages = sorted(error.message for error in load(root).errors)
    assert "`request` comes with connections" in messages[0]
    assert "would collide with the tools of MCP server 'desk'" in messages[1]


def test_a_repo_with_mcp_servers_without_the_extra_loads_with_a_warning(make_repo, monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if the extra were not installed
    root = make_repo({"amodal.json": {**CONFIG, "mcp": {"servers": {"desk": SERVER}}}})
    result = load_repo(root)
    assert result.bundle is not None and not result.errors
    assert "desk" in result.bundle.mcp_servers  # it runs as `failed` (tests/test_missing_extra.py)
    [warning] = [w for w in result.warnings if "extra" in w.message]
    assert warning.file == "amodal.json"
    assert "pip install 'amodal-runtime[mcp]'" in warning.message
