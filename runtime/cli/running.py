"""The commands that run agents: chat, serve, mcp, eval."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from runtime.cli._shared import Context, pairs, print_findings


@click.command()
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
    obj: Context,
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
        context=pairs(contexts, "--context"),
        session_id=session_id,
        as_json=as_json,
    )
    sys.exit(code)


@click.command()
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
def serve(obj: Context, host: str, port: int, no_reload: bool, workers: int) -> None:
    """Serve the HTTP API (chat with SSE streaming, sessions, agents, health)."""
    from runtime.server.serve import run_server

    obj.bundle()  # every error printed, exit 1, before anything starts
    sys.exit(run_server(obj.repo, host, port, reload=not no_reload, workers=workers))


@click.command("mcp")
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
def mcp(obj: Context, agents: tuple[str, ...], token: str | None) -> None:
    """Serve the repo's agents as MCP tools over stdio (for Claude Desktop, Cursor, IDEs)."""
    from runtime.server.faces import mcp_available

    bundle = obj.bundle()  # every error printed, exit 1, before anything starts
    if not mcp_available():
        raise click.ClickException(
            "`amodal mcp` needs the `mcp` extra: pip install 'amodal-runtime[mcp]'"
        )
    from runtime.exceptions import AmodalError
    from runtime.server.faces.mcp_server import run_stdio

    try:
        run_stdio(bundle, agents=agents, token=token)
    except AmodalError as error:
        raise click.ClickException(str(error)) from None


@click.command("eval")
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
    type=click.IntRange(1, 256),
    help="Cases running at once (default: 4, or 1 on the offline model, which answers one "
    "call at a time).",
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
    obj: Context,
    suites: tuple[str, ...],
    cases: tuple[str, ...],
    repeat: int,
    concurrency: int | None,
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
    print_findings(result, as_json=False, errors_to_stderr=True)
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
