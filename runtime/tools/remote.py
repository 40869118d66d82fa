"""Tools that act outside the repo: `request` over REST connections, and MCP tools.

Both are built from the resolved surface only: `request` knows exactly the
connections the surface grants, and an MCP tool exists only when its server is
ready and the surface grants it (`runtime.surface.resolution`).
"""

from __future__ import annotations

from typing import Any

from runtime.outside.mcp import McpServers, McpSnapshot, McpTool
from runtime.outside.rest import (
    HTTP_METHODS,
    READ_METHODS,
    Connections,
    Refused,
    needs_confirmation,
)
from runtime.repo.bundle import Bundle
from runtime.repo.registry import REQUEST
from runtime.surface.resolution import Surface
from runtime.tools import Tool, ToolContext, ToolError


def request_tool(bundle: Bundle, surface: Surface, connections: Connections) -> Tool:
    """`request`: one HTTP call through a connection of the surface (SPEC 9.2)."""
    granted = {name: bundle.connections[name] for name in surface.connections}

    async def request(arguments: dict[str, Any], context: ToolContext) -> Any:
        connection = granted[arguments["connection"]]
        method = arguments["method"]
        if arguments["intent"] == "read" and method not in READ_METHODS:
            raise ToolError(
                f"intent 'read' is for GET and HEAD; a {method} changes something: "
                "say intent 'write' if that is what you mean"
            )
        if surface.read_only and method not in READ_METHODS:
            raise ToolError(
                f"refused, nothing was sent: this run is read-only, a {method} changes "
                "something (an automation writes only with writeEnabled: true)"
            )
        try:
            return await connections.call(
                connection,
                method,
                arguments["path"],
                claims=context.caller.claims,
                query=arguments.get("query"),
                body=arguments.get("body"),
            )
        except Refused as refusal:
            raise ToolError(f"refused, nothing was sent: {refusal}") from None

    def confirm(arguments: dict[str, Any]) -> bool:
        # Only a call that would run waits for a person: a refused one fails at once.
        method, path = arguments["method"], arguments["path"]
        if arguments["intent"] == "read" and method not in READ_METHODS:
            return False
        if surface.read_only and method not in READ_METHODS:
            return False
        return needs_confirmation(granted[arguments["connection"]], method, path)

    scalar = {"type": ["string", "number", "boolean"]}
    return Tool(
        REQUEST,
        bundle.registry[REQUEST].description
        + " Connections: "
        + ", ".join(sorted(granted))
        + ". A non-2xx status is a normal result; read it.",
        {
            "type": "object",
            "properties": {
                "connection": {"type": "string", "enum": sorted(granted)},
                "method": {"type": "string", "enum": list(HTTP_METHODS)},
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "A path on the connection's base URL, like /items/7.",
                },
                "query": {
                    "type": "object",
                    "additionalProperties": {"anyOf": [scalar, {"type": "array", "items": scalar}]},
                },
                "body": {"description": "A JSON body (not for GET or HEAD)."},
                "intent": {
                    "type": "string",
                    "enum": ["read", "write"],
                    "description": "read: only looks (GET, HEAD); write: changes something.",
                },
            },
            "required": ["connection", "method", "path", "intent"],
            "additionalProperties": False,
        },
        request,
        confirm=confirm,
        # Each call is bounded by its connection's own timeout; this is the outer net.
        timeout=max(connection.timeout for connection in granted.values()) + 5,
    )


def mcp_tools(
    bundle: Bundle, surface: Surface, snapshot: McpSnapshot, servers: McpServers | None
) -> dict[str, Tool]:
    """The MCP tools of `surface`: `server__tool` for each one its servers offer now, each
    found on the server the surface granted it from, and called there."""
    tools = {}
    for name, server in surface.mcp_tools.items():
        tool = snapshot.tool(server, name)
        definition = bundle.mcp_servers.get(server)
        if tool is None or definition is None or servers is None:
            continue
        tools[name] = Tool(
            name,
            tool.description,
            dict(tool.parameters),
            _caller(servers, tool),
            confirm=definition.needs_confirmation(tool.name),
            timeout=definition.timeout,
        )
    return tools


def _caller(servers: McpServers, tool: McpTool) -> Any:
    async def call(arguments: dict[str, Any], context: ToolContext) -> Any:
        return await servers.call(tool.server, tool.name, arguments)

    return call


__all__ = ["mcp_tools", "request_tool"]
