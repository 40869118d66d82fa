"""`amodal validate --online`: what only the outside systems can confirm (SPEC 9).

Plain `amodal validate` checks server and connection names only. Online, every
declared MCP server is started and its tools listed: a server that does not
start, or a referenced `server__tool` it does not offer, is an error. Each REST
connection's `testPath` is called: a failure is a warning (a down API does not
make a repo invalid).
"""

from __future__ import annotations

from collections.abc import Iterator

from runtime.exceptions import DefinitionError, DefinitionWarning
from runtime.outside.mcp import McpServers, McpSnapshot
from runtime.outside.rest import Connections
from runtime.repo.bundle import Bundle, Declared, Origin, server_of


async def check_online(bundle: Bundle) -> tuple[list[DefinitionError], list[DefinitionWarning]]:
    """Errors (servers and their tools) and warnings (connections' testPath)."""
    async with McpServers.open(bundle.mcp_servers, retry=False) as servers:
        errors = list(_mcp_errors(bundle, servers.snapshot()))
    return errors, await _test_paths(bundle)


def _mcp_errors(bundle: Bundle, snapshot: McpSnapshot) -> Iterator[DefinitionError]:
    for name, state in snapshot.servers.items():
        definition = bundle.mcp_servers[name]
        if state.status != "ready":
            field = f"mcp.servers.{name}" if definition.file == "amodal.json" else ""
            yield DefinitionError(definition.file, state.reason(), None, field)
    for entry in _tool_references(bundle):
        server = server_of(entry.name, bundle.mcp_servers)
        known = snapshot.servers.get(server) if server else None
        if known is None or known.status != "ready" or snapshot.tool(known.name, entry.name):
            continue
        offered = ", ".join(tool.tool_name for tool in known.tools) or "no tools"
        yield DefinitionError(
            entry.origin.file,
            f"MCP server {server!r} has no tool {entry.name!r} (it offers: {offered})",
            entry.origin.line,
            entry.origin.field,
        )


def _tool_references(bundle: Bundle) -> Iterator[Declared]:
    for agent in bundle.agents.values():
        yield from agent.tools
    for skill in bundle.skills.values():
        for index, tool in enumerate(skill.allowed_tools):
            yield Declared(tool, Origin(skill.file, f"allowedTools[{index}]"))


async def _test_paths(bundle: Bundle) -> list[DefinitionWarning]:
    warnings = []
    connections = Connections()
    try:
        for _, connection in sorted(bundle.connections.items()):
            if connection.test_path is None:
                continue
            problem: str | None = None
            try:
                # No caller here: claim values a connection injects are left out.
                result = await connections.call(
                    connection, "GET", connection.test_path, claims=None
                )
                if not 200 <= result["status"] < 300:
                    problem = f"answered {result['status']}"
            except Exception as error:  # Refused, ToolError, TimeoutError: all one warning
                problem = str(error)
            if problem is not None:
                warnings.append(
                    DefinitionWarning(
                        connection.file,
                        f"testPath {connection.test_path} failed: {problem}",
                        None,
                        "testPath",
                    )
                )
    finally:
        await connections.aclose()
    return warnings
