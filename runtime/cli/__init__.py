"""The `amodal` command line: validate, agents, init, schema (and more as the runtime grows).

Commands are imported when they run, not when the CLI starts: `COMMANDS` names the
module and attribute of each, with the summary `amodal --help` shows. To add a
command, write it as a `click.Command` in a module of this package (importing what it
needs inside its body, or at the top of a module only it uses) and add one row here,
with `one_shot=True` only if it reads or writes files and exits (a command that keeps
running, like `serve`, must not set it); tests/test_cli_startup.py checks every row's
summary against the command's own help.
"""

from __future__ import annotations

from pathlib import Path

import click

from runtime import _logs as logs
from runtime.cli._lazy import LazyCommand, LazyGroup
from runtime.cli._shared import REPO_FILE, Context, find_repo

COMMANDS = {
    "agents": LazyCommand(
        "runtime.cli.repo_commands:agents",
        "List the agents: name, display name, role, description, and which is the default.",
        one_shot=True,
    ),
    "automations": LazyCommand(
        "runtime.cli.automations:automations_group",
        "List the automations: trigger, schedule, next run, paused, last run.",
    ),
    "chat": LazyCommand(
        "runtime.cli.running:chat",
        "Chat with the repo's agents: one turn with MESSAGE, else an interactive loop.",
    ),
    "eval": LazyCommand(
        "runtime.cli.running:eval_",
        "Run the eval suites of evals/ (all, or the SUITES named); exit 1 when a case fails.",
    ),
    "import": LazyCommand(
        "runtime.cli.authoring:import_group",
        "Bring agents from another tool: Claude Code or OpenCode (see docs/import.md).",
        one_shot=True,
    ),
    "init": LazyCommand(
        "runtime.cli.authoring:init",
        "Create a new agent repo at PATH (default: here) that validates.",
        one_shot=True,
    ),
    "inspect": LazyCommand(
        "runtime.cli.repo_commands:inspect",
        "Show AGENT's surface for a caller (and why anything is missing) and its prompt.",
        one_shot=True,
    ),
    "mcp": LazyCommand(
        "runtime.cli.running:mcp",
        "Serve the repo's agents as MCP tools over stdio (for Claude Desktop, Cursor, IDEs).",
    ),
    "models": LazyCommand(
        "runtime.cli.repo_commands:models",
        "The model each tier's calls use: where, its context window and price, and "
        "whether they come from the repo, the shipped catalog or the defaults.",
        one_shot=True,
    ),
    "schema": LazyCommand(
        "runtime.cli.authoring:schema",
        "Print the JSON Schema of a file format, or write them all with --out.",
        one_shot=True,
    ),
    "serve": LazyCommand(
        "runtime.cli.running:serve",
        "Serve the HTTP API (chat with SSE streaming, sessions, agents, health).",
    ),
    "usage": LazyCommand(
        "runtime.cli.usage:usage",
        "What model calls spent (tokens, USD, calls, turns), from the repo's database.",
    ),
    "validate": LazyCommand(
        "runtime.cli.repo_commands:validate",
        "Check every file of the repo, eval suites included; exit 1 listing every error.",
        one_shot=True,
    ),
}
"""Every command: name -> where it is defined, and its `--help` summary."""


@click.group(cls=LazyGroup, lazy=COMMANDS)
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
    context.obj = Context(repo)


__all__ = ["COMMANDS", "REPO_FILE", "find_repo", "main"]
