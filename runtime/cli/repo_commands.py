"""The commands that read a repo: validate, agents, models, inspect.

Each imports what it needs inside its body: `amodal validate` loads the loader and
nothing of the model clients, the server, MCP or OpenTelemetry (tests/test_cli_startup.py).
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import click

from runtime.cli._shared import Context, pairs, print_findings, table

if TYPE_CHECKING:
    from runtime.models.catalog import Price
    from runtime.outside.mcp import McpSnapshot
    from runtime.repo.bundle import Bundle


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the errors as a JSON list.")
@click.option("--offline", is_flag=True, help="Check env: references by form only.")
@click.option(
    "--online",
    is_flag=True,
    help="Also start every MCP server (check the tools agents name) and call each "
    "connection's testPath.",
)
@click.pass_obj
def validate(obj: Context, as_json: bool, offline: bool, online: bool) -> None:
    """Check every file of the repo, eval suites included; exit 1 listing every error."""
    if online and offline:
        raise click.UsageError("--online and --offline exclude each other")
    result = obj.load(offline=offline, evals=True)
    if online and result.bundle is not None:
        import anyio

        from runtime.outside.online import check_online
        from runtime.repo import LoadResult

        errors, warnings = anyio.run(check_online, result.bundle)
        bundle = result.bundle if not errors else None
        result = LoadResult(
            bundle, (*result.errors, *errors), (*result.warnings, *warnings), result.suites
        )
    if result.bundle is not None and result.bundle.automation_errors:
        from runtime.repo import LoadResult

        # A served repo runs without its broken automations; validating it still fails.
        broken = result.bundle.automation_errors
        result = LoadResult(None, (*result.errors, *broken), result.warnings, result.suites)
    print_findings(result, as_json=as_json)
    if result.bundle is None:
        sys.exit(1)
    if not as_json:
        bundle = result.bundle
        click.echo(
            f"valid: {len(bundle.agents)} agents, {len(bundle.skills)} skills, "
            f"{len(bundle.stores)} stores, {len(bundle.knowledge)} knowledge documents, "
            f"{len(bundle.tools)} custom tools, {len(result.suites)} eval suites"
            # Named only where there are some: the line most repos print stays as it was.
            + (f", {len(bundle.automations)} automations" if bundle.automations else "")
            + f" (version {bundle.version})",
            err=True,
        )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def agents(obj: Context, as_json: bool) -> None:
    """List the agents: name, display name, role, description, and which is the default.

    The table shows each description's first line; --json gives the whole text."""
    bundle = obj.bundle()
    rows = [
        {
            "name": agent.name,
            "display_name": agent.display_name,
            "description": agent.description,
            "role": agent.role,
            "default": agent.is_default,
        }
        for agent in sorted(bundle.agents.values(), key=lambda agent: agent.name)
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table(
        ["NAME", "DISPLAY NAME", "ROLE", "DESCRIPTION"],
        [
            [
                agent.name + (" (default)" if agent.is_default else ""),
                agent.display_name,
                agent.role or "",
                agent.summary,
            ]
            for agent in sorted(bundle.agents.values(), key=lambda agent: agent.name)
        ],
    )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def models(obj: Context, as_json: bool) -> None:
    """The model each tier's calls use: where, its context window and price, and whether
    they come from the repo, the shipped catalog or the defaults."""
    from runtime.exceptions import ModelConfigError
    from runtime.repo.model_bindings import model_table

    try:
        rows = model_table(obj.bundle().config, os.environ)
    except ModelConfigError as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(json.dumps([row.as_json() for row in rows], indent=2))
        return
    table(
        ["TIER", "MODEL", "ENDPOINT", "CONTEXT", "PRICE (USD / 1M in, out, cached)", "SOURCE"],
        [
            [
                row.tier,
                row.name,
                row.endpoint,
                f"{row.card.context_window:,}",
                _price(row.card.price),
                row.card.source,
            ]
            for row in rows
        ],
    )


def _price(price: Price | None) -> str:
    if price is None:
        return "unknown"
    cached = "" if price.cached_input is None else f", {price.cached_input:g}"
    return f"{price.input:g}, {price.output:g}{cached}"


@click.command()
@click.argument("agent")
@click.option(
    "--claim",
    "claims",
    multiple=True,
    metavar="K=V",
    help="A verified claim of the caller (repeatable), e.g. --claim role=manager.",
)
@click.option(
    "--context",
    "contexts",
    multiple=True,
    metavar="K=V",
    help="A request context value (repeatable), e.g. --context page=review.",
)
@click.option("--subagent", is_flag=True, help="Resolve as a delegated specialist.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_obj
def inspect(
    obj: Context,
    agent: str,
    claims: tuple[str, ...],
    contexts: tuple[str, ...],
    subagent: bool,
    as_json: bool,
) -> None:
    """Show AGENT's surface for a caller (and why anything is missing) and its prompt.

    AGENT is an agent folder name, or `main` for unscoped chat.
    """
    from runtime.exceptions import AmodalError
    from runtime.surface.inspection import format_inspection, inspect_agent

    bundle = obj.bundle()
    try:
        servers = _probe_servers(bundle, agent)
        view = inspect_agent(
            bundle,
            agent,
            pairs(claims, "--claim"),
            pairs(contexts, "--context"),
            subagent=subagent,
            servers=servers,
        )
    except AmodalError as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        click.echo(json.dumps(view, indent=2))
    else:
        click.echo(format_inspection(view, servers))


def _probe_servers(bundle: Bundle, agent: str) -> McpSnapshot:
    """Start the MCP servers `agent` may use, once, to show what they offer now."""
    from runtime.outside.mcp import NO_SERVERS
    from runtime.repo.bundle import server_of

    definition = bundle.agents.get(agent)
    if definition is None:
        wanted = set(bundle.mcp_servers)  # `main` (or unknown: inspect_agent says so)
    else:
        named = [entry.name for entry in definition.tools]
        named += [t for s in definition.skills if s.name in bundle.skills
                  for t in bundle.skills[s.name].allowed_tools]  # fmt: skip
        wanted = {entry.name for entry in definition.mcp}
        wanted |= {s for s in (server_of(n, bundle.mcp_servers) for n in named) if s}
    if not wanted:
        return NO_SERVERS

    async def probe() -> McpSnapshot:
        from runtime.outside.mcp import McpServers

        chosen = {name: bundle.mcp_servers[name] for name in sorted(wanted)}
        async with McpServers.open(chosen, retry=False) as servers:
            return servers.snapshot()

    import anyio

    return anyio.run(probe)
