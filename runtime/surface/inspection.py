"""`amodal inspect`: an agent's surface for a caller, why anything is missing, and its prompt.

This is how a person debugs "why can't my agent see this store?": the same
resolution and prompt a chat would use, shown with the reason for each exclusion.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.exceptions import AmodalError, UnknownAgentError
from runtime.outside.mcp import NO_SERVERS, McpSnapshot
from runtime.repo.bundle import DEFAULT_AGENT, MAIN_AGENT, Bundle
from runtime.repo.templates import clean_context
from runtime.surface.prompt import context_prompt, system_prompt
from runtime.surface.resolution import SurfaceContext, resolve


def inspect_agent(
    bundle: Bundle,
    agent: str,
    claims: Mapping[str, str],
    context: Mapping[str, str],
    *,
    subagent: bool = False,
    servers: McpSnapshot = NO_SERVERS,
) -> dict[str, Any]:
    """The inspection of `agent` (`main`: unscoped chat) as SPEC 14's `inspect --json` shape.
    `servers`: the MCP servers' state (a failed server's tools are excluded with why)."""
    if agent != MAIN_AGENT and agent not in bundle.agents:
        raise UnknownAgentError(agent, [*bundle.agents, MAIN_AGENT])
    if subagent and agent in (MAIN_AGENT, DEFAULT_AGENT):
        raise AmodalError(f"{agent!r} is never callable as a specialist")
    scope = clean_context(context)
    caller = SurfaceContext.for_caller(agent, claims, scope, is_subagent=subagent)
    surface = resolve(bundle, agent, caller, root=None if subagent else agent, servers=servers)
    definition = bundle.agents.get(agent)
    return {
        "agent": agent,
        "tools": sorted(surface.tools),
        "skills": list(surface.skills),
        "stores": dict(surface.stores),
        "subagents": list(surface.subagents),
        "excluded": [exclusion.as_json() for exclusion in surface.excluded],
        "system_prompt": system_prompt(bundle, definition, surface, scope),
        "context_prompt": None if subagent else context_prompt(definition, scope),
    }


def format_inspection(view: Mapping[str, Any], servers: McpSnapshot = NO_SERVERS) -> str:
    """The inspection as text a person reads top to bottom (with the MCP servers' state)."""

    def listed(items: list[str]) -> str:
        return ", ".join(items) if items else "(none)"

    stores = [f"{name} ({mode})" for name, mode in view["stores"].items()]
    lines = [
        f"agent: {view['agent']}",
        f"tools: {listed(view['tools'])}",
        f"skills: {listed(view['skills'])}",
        f"stores: {listed(stores)}",
        f"subagents: {listed(view['subagents'])}",
    ]
    if servers.servers:
        states = [
            f"{name} ({state.status}, {len(state.tools)} tools)"
            if state.status == "ready"
            else f"{name} ({state.reason()})"
            for name, state in servers.servers.items()
        ]
        lines.append(f"mcp servers: {listed(states)}")
    if view["excluded"]:
        lines.append("excluded:")
        lines += [f"  {item['kind']} {item['name']}: {item['reason']}" for item in view["excluded"]]
    else:
        lines.append("excluded: (nothing)")
    lines += ["", "--- system prompt ---", view["system_prompt"].rstrip()]
    context = view["context_prompt"]
    lines += ["", "--- context prompt ---", context if context is not None else "(none)"]
    return "\n".join(lines)
