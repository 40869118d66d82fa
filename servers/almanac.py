"""The example repo's MCP server: date and unit arithmetic, offline and deterministic.

Written with the `mcp` SDK's MCPServer (FastMCP in 1.x). The runtime starts it itself
(amodal.json, `mcp.servers.almanac`); to try it alone: `python servers/almanac.py`
speaks MCP on stdin and stdout.
"""

from __future__ import annotations

import datetime

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

almanac = MCPServer("almanac", instructions="Date and unit arithmetic for the research desk.")

FACTORS = {
    ("km", "mi"): 0.621371,
    ("mi", "km"): 1.609344,
    ("kg", "lb"): 2.204623,
    ("lb", "kg"): 0.453592,
}


@almanac.tool()
def days_between(start: str, end: str) -> int:
    """Whole days from `start` to `end` (ISO dates, e.g. 2024-03-01); negative if end is first."""
    try:
        first, last = datetime.date.fromisoformat(start), datetime.date.fromisoformat(end)
    except ValueError as error:
        raise ToolError(f"dates are ISO dates like 2024-03-01: {error}") from None
    return (last - first).days


@almanac.tool()
def convert(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a value between km and mi, kg and lb, or c and f (Celsius and Fahrenheit)."""
    pair = (from_unit.lower(), to_unit.lower())
    if pair == ("c", "f"):
        return round(value * 9 / 5 + 32, 4)
    if pair == ("f", "c"):
        return round((value - 32) * 5 / 9, 4)
    if pair not in FACTORS:
        known = ", ".join(f"{a}->{b}" for a, b in [*FACTORS, ("c", "f"), ("f", "c")])
        raise ToolError(f"cannot convert {from_unit} to {to_unit}; known: {known}")
    return round(value * FACTORS[pair], 4)


if __name__ == "__main__":
    almanac.run("stdio")
