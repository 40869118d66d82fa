"""The `amodal` command line: validate, agents, init, schema (and more as the runtime grows)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from runtime import _logs as logs
from runtime.exceptions import AmodalError, ModelConfigError
from runtime.models.catalog import Price
from runtime.repo import LoadResult, load_repo
from runtime.repo.bundle import Bundle, server_of
from runtime.repo.scaffold import init_repo
from runtime.surface.inspection import format_inspection, inspect_agent

if TYPE_CHECKING:
    from runtime.outside.mcp import McpSnapshot
from runtime.repo.schema import SCHEMA_NAMES, schema_text, write_schemas

REPO_FILE = "amodal.json"


def find_repo(start: Path) -> Path:
    """The nearest folder holding amodal.json, from `start` upwards."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / REPO_FILE).is_file():
            return folder
    raise click.ClickException(
        f"no agent repo here: no {REPO_FILE} in {start} or any folder above it. "
        "Run `amodal init` to make one, or pass --repo PATH."
    )


class _Context:
    def __init__(self, repo: Path | None) -> None:
        self._repo = repo

    @property
    def repo(self) -> Path:
        if self._repo is None:
            return find_repo(Path.cwd())
        if not (self._repo / REPO_FILE).is_file():
            raise click.ClickException(f"--repo {self._repo}: there is no {REPO_FILE} there")
        return self._repo

    def load(self, *, offline: bool = False, evals: bool = False) -> LoadResult:
        return load_repo(self.repo, offline=offline, evals=evals)

    def bundle(self) -> Bundle:
        """The bundle, or exit 1 after printing every error (commands that need a valid repo)."""
        result = self.load()
        # Errors go to stderr here: stdout belongs to the command's own output (--json).
        _print_findings(result, as_json=False, errors_to_stderr=True)
        if result.bundle is None:
            sys.exit(1)
        return result.bundle


@click.group()
@click.option(
    "--repo",
    type=click.Path(file_okay=False, path_type=Path),
    help="The agent repo (default: the nearest folder with amodal.json, from here upwards).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log informational events too.")
@click.version_option(package_name="amodal-runtime", prog_name="amodal")
@click.pass_context
def main(context: click.Context, repo: Path | None, verbose: bool) -> None:
    """A filesystem-defined agent runtime: this repo's agents, validated and run."""
    logs.configure(10 if verbose else 30)
    context.obj = _Context(repo)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the errors as a JSON list.")
@click.option("--offline", is_flag=True, help="Check env: references by form only.")
@click.option(
    "--online",
    is_flag=True,
    help="Also start every MCP server (check the tools agents name) and call each "
    "connection's testPath.",
)
@click.pass_obj
def validate(obj: _Context, as_json: bool, offline: bool, online: bool) -> None:
    """Check every file of the repo, eval suites included; exit 1 listing every error."""
    if online and offline:
        raise click.UsageError("--online and --offline exclude each other")
    result = obj.load(offline=offline, evals=True)
    if online and result.bundle is not None:
        import anyio

        from runtime.outside.online import check_online

        errors, warnings = anyio.run(check_online, result.bundle)
        bundle = result.bundle if not errors else None
        result = LoadResult(
            bundle, (*result.errors, *errors), (*result.warnings, *warnings), result.suites
        )
    if result.bundle is not None and result.bundle.automation_errors:
        # A served repo runs without its broken automations; validating it still fails.
        broken = result.bundle.automation_errors
        result = LoadResult(None, (*result.errors, *broken), result.warnings, result.suites)
    _print_findings(result, as_json=as_json)
    if result.bundle is None:
        sys.exit(1)
    if not as_json:
        bundle = result.bundle
        automations = f"{len(bundle.automations)} automations, " if bundle.automations else ""
        click.echo(
            f"valid: {len(bundle.agents)} agents, {len(bundle.skills)} skills, "
            f"{len(bundle.stores)} stores, {len(bundle.knowledge)} knowledge documents, "
            f"{len(bundle.tools)} custom tools, {automations}"
            f"{len(result.suites)} eval suites "
            f"(version {bundle.version})",
            err=True,
        )


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def agents(obj: _Context, as_json: bool) -> None:
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
    _table(
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


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def models(obj: _Context, as_json: bool) -> None:
    """The model each tier's calls use: where, its context window and price, and whether
    they come from the repo, the shipped catalog or the defaults."""
    from runtime.repo.model_bindings import model_table

    try:
        rows = model_table(obj.bundle().config, os.environ)
    except ModelConfigError as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(json.dumps([row.as_json() for row in rows], indent=2))
        return
    _table(
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


@main.command()
@click.argument("path", type=click.Path(file_okay=False, path_type=Path), default=".")
def init(path: Path) -> None:
    """Create a new agent repo at PATH (default: here) that validates."""
    try:
        written = init_repo(path)
    except AmodalError as error:
        raise click.ClickException(str(error)) from error
    for file in written:
        click.echo(f"created {file}")
    click.echo(f"next: cd {path} && amodal validate", err=True)


@main.command()
@click.argument("name", type=click.Choice(SCHEMA_NAMES), required=False)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write every schema as <name>.schema.json into this folder.",
)
def schema(name: str | None, out: Path | None) -> None:
    """Print the JSON Schema of a file format, or write them all with --out."""
    if out is not None:
        for path in write_schemas(out):
            click.echo(f"wrote {path}")
        return
    if name is None:
        raise click.UsageError(f"name a schema ({', '.join(SCHEMA_NAMES)}) or pass --out DIR")
    click.echo(schema_text(name), nl=False)


def _print_findings(result: LoadResult, *, as_json: bool, errors_to_stderr: bool = False) -> None:
    for warning in result.warnings:
        click.echo(
            f"{_location(warning.file, warning.line)}: warning: "
            + (f"{warning.field}: " if warning.field else "")
            + warning.message,
            err=True,
        )
    if as_json:
        click.echo(json.dumps([error.as_json() for error in result.errors], indent=2))
        return
    for error in result.errors:
        click.echo(str(error), err=errors_to_stderr)
    if result.errors:
        click.echo(f"{len(result.errors)} error(s): the repo is not valid", err=True)


def _location(file: str, line: int | None) -> str:
    return file if line is None else f"{file}:{line}"


def _table(header: list[str], rows: list[list[Any]]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)]
        click.echo("  ".join(cells).rstrip())


def _pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r}: write KEY=VALUE", param_hint=option)
        pairs[key] = text
    return pairs


@main.command()
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
    obj: _Context,
    agent: str,
    claims: tuple[str, ...],
    contexts: tuple[str, ...],
    subagent: bool,
    as_json: bool,
) -> None:
    """Show AGENT's surface for a caller (and why anything is missing) and its prompt.

    AGENT is an agent folder name, or `main` for unscoped chat.
    """
    bundle = obj.bundle()
    try:
        servers = _probe_servers(bundle, agent)
        view = inspect_agent(
            bundle,
            agent,
            _pairs(claims, "--claim"),
            _pairs(contexts, "--context"),
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


@main.command()
@click.argument("message", required=False)
@click.option("--agent", help="The agent that roots the conversation (default: `default`).")
@click.option(
    "--context",
    "contexts",
    multiple=True,
    metavar="K=V",
    help="A request context value (repeatable).",
)
@click.option("--session", "session_id", help="Continue this session.")
@click.option("--json", "as_json", is_flag=True, help="Print one event per line as JSON.")
@click.pass_obj
def chat(
    obj: _Context,
    message: str | None,
    agent: str | None,
    contexts: tuple[str, ...],
    session_id: str | None,
    as_json: bool,
) -> None:
    """Chat with the repo's agents: one turn with MESSAGE, else an interactive loop."""
    from runtime.cli.chat import run_chat

    code = run_chat(
        obj.bundle(),  # errors printed, exit 1, before anything starts
        message,
        agent=agent,
        context=_pairs(contexts, "--context"),
        session_id=session_id,
        as_json=as_json,
    )
    sys.exit(code)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to listen on.")
@click.option("--no-reload", is_flag=True, help="Do not watch the repo for changes.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Server processes on one port, sharing the database.",
)
@click.pass_obj
def serve(obj: _Context, host: str, port: int, no_reload: bool, workers: int) -> None:
    """Serve the HTTP API (chat with SSE streaming, sessions, agents, health)."""
    from runtime.server.serve import run_server

    obj.bundle()  # every error printed, exit 1, before anything starts
    sys.exit(run_server(obj.repo, host, port, reload=not no_reload, workers=workers))


@main.command("mcp")
@click.option(
    "--agent",
    "agents",
    multiple=True,
    metavar="NAME",
    help="Offer only this agent as a tool (repeatable; default: every agent you may root).",
)
@click.option(
    "--token",
    envvar="AMODAL_MCP_TOKEN",
    help="Act as the caller this credential names (an API key or a JWT; env AMODAL_MCP_TOKEN) "
    "instead of the operator.",
)
@click.pass_obj
def mcp(obj: _Context, agents: tuple[str, ...], token: str | None) -> None:
    """Serve the repo's agents as MCP tools over stdio (for Claude Desktop, Cursor, IDEs)."""
    from runtime.server.faces import mcp_available

    bundle = obj.bundle()  # every error printed, exit 1, before anything starts
    if not mcp_available():
        raise click.ClickException(
            "`amodal mcp` needs the `mcp` extra: pip install 'amodal-runtime[mcp]'"
        )
    from runtime.server.faces.mcp_server import run_stdio

    try:
        run_stdio(bundle, agents=agents, token=token)
    except AmodalError as error:
        raise click.ClickException(str(error)) from None


@main.group(name="import")
def import_group() -> None:
    """Bring agents from another tool: Claude Code or OpenCode (see docs/import.md)."""


def _import_command(format_name: str, summary: str) -> None:
    @import_group.command(name=format_name, help=summary)
    @click.argument("source", type=click.Path(exists=True, path_type=Path))
    @click.option(
        "--into",
        type=click.Path(file_okay=False, path_type=Path),
        help="The agent repo to import into; made with `amodal init` when it has no "
        "amodal.json (default: the current agent repo).",
    )
    @click.option("--dry-run", is_flag=True, help="Report what would be imported; write nothing.")
    @click.option("--json", "as_json", is_flag=True, help="Print the report as a JSON list.")
    @click.pass_obj
    def command(
        obj: _Context, source: Path, into: Path | None, dry_run: bool, as_json: bool
    ) -> None:
        from runtime.importers import import_claude_code, import_opencode

        target = into if into is not None else obj.repo
        run = import_claude_code if format_name == "claude-code" else import_opencode
        report = run(source, target, dry_run=dry_run)
        click.echo(json.dumps(report.as_json(), indent=2) if as_json else report.text())
        if as_json:
            click.echo(report.summary(), err=True)
        for error in report.validation_errors:
            click.echo(f"error: {error}", err=True)
        if report.validation_errors:
            sys.exit(1)
        if not dry_run:
            click.echo(f"next: cd {target} && amodal validate && amodal agents", err=True)


_import_command(
    "claude-code",
    "Import Claude Code subagents and skills from SOURCE: a .claude/agents folder, a project "
    "or user folder, or a plugin tree or marketplace.",
)
_import_command(
    "opencode",
    "Import OpenCode agents and skills from SOURCE: a project (.opencode/agent/, "
    "opencode.json), a config folder, or an agent folder.",
)


@main.command("eval")
@click.argument("suites", nargs=-1)
@click.option(
    "--case", "cases", multiple=True, metavar="NAME", help="Run only this case (repeatable)."
)
@click.option(
    "--repeat",
    default=1,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Run each case N times.",
)
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Cases running at once.",
)
@click.option(
    "--min-pass-rate",
    type=click.FloatRange(0, 1),
    help="A case passes when this share of its attempts passes (default: all of them).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run record as JSON.")
@click.option(
    "--junit", type=click.Path(dir_okay=False, path_type=Path), help="Write JUnit XML here."
)
@click.option("--compare", nargs=2, metavar="RUN_A RUN_B", help="Compare two kept runs instead.")
@click.pass_obj
def eval_(
    obj: _Context,
    suites: tuple[str, ...],
    cases: tuple[str, ...],
    repeat: int,
    concurrency: int,
    min_pass_rate: float | None,
    as_json: bool,
    junit: Path | None,
    compare: tuple[str, str] | None,
) -> None:
    """Run the eval suites of evals/ (all, or the SUITES named); exit 1 when a case fails.

    Each case runs in a fresh session on a throwaway database. Runs are kept under
    .amodal/evals/; `--compare RUN_A RUN_B` (run ids, `latest`, `previous` or files)
    lists the cases that regressed and improved.
    """
    from runtime.cli.eval_output import compare_command, run_command  # loads rich

    if compare:
        if suites or cases or junit:
            raise click.UsageError(
                "--compare reads two kept runs: it takes no SUITE, --case or --junit"
            )
        sys.exit(compare_command(obj.repo, *compare, as_json=as_json))
    result = obj.load(evals=True)
    _print_findings(result, as_json=False, errors_to_stderr=True)
    if result.bundle is None:
        sys.exit(1)
    sys.exit(
        run_command(
            obj.repo,
            result.bundle,
            result.suites,
            names=suites,
            cases=cases,
            repeat=repeat,
            concurrency=concurrency,
            min_pass_rate=min_pass_rate,
            as_json=as_json,
            junit=junit,
        )
    )


def _add_automations() -> None:
    from runtime.cli.automations import automations_group  # click only; the rest is lazy

    main.add_command(automations_group)


_add_automations()
