"""An MCP server for tests, written with the SDK's MCPServer (FastMCP in 1.x).

Run as `python tests/_mcp_server.py` (stdio), `... streamable-http PORT` or `... sse PORT`.
`MCP_TEST_TOOLS=add,pid` limits the tools it offers (to test a declaration change).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

app = MCPServer("desk")


def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


def shout(text: str) -> str:
    """Say it louder (a plain text result)."""
    return text.upper()


def fail(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ToolError(f"refused: {reason}")


def picture() -> Image:
    """A tiny picture (binary content)."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + bytes(24), format="png")


async def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "awake"


def crash() -> str:
    """Exit the server process at once."""
    os._exit(3)


def pid() -> int:
    """The server's process id."""
    return os.getpid()


def token() -> str:
    """Echo the secret this server was given in its environment."""
    return "my token is " + os.environ.get("DESK_TOKEN", "(none)")


async def grow(ctx: Context) -> str:
    """Add the tool `extra` and tell the client the tool list changed."""

    def extra(text: str) -> str:
        """A tool that appeared later."""
        return "extra " + text

    app.add_tool(extra, name="extra")
    await ctx.session.send_tool_list_changed()
    return "grown"


ALL = [add, shout, fail, picture, sleep, crash, pid, token, grow]
wanted = os.environ.get("MCP_TEST_TOOLS")
for function in ALL:
    if wanted is None or function.__name__ in wanted.split(","):
        # `add` is pure: annotated idempotent, a call a crash cut short is run again.
        hints = ToolAnnotations(idempotentHint=True) if function is add else None
        app.add_tool(function, annotations=hints)

if __name__ == "__main__":
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if transport == "stdio":
        app.run("stdio")
    else:
        app.run(transport, host="127.0.0.1", port=int(sys.argv[2]))  # type: ignore[call-overload]
