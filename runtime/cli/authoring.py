"""The commands that write files: init, schema, and the importers of other tools' agents."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from runtime.cli._shared import Context
from runtime.repo.schema import SCHEMA_NAMES  # the formats `schema NAME` knows


@click.command()
@click.argument("path", type=click.Path(file_okay=False, path_type=Path), default=".")
def init(path: Path) -> None:
    """Create a new agent repo at PATH (default: here) that validates."""
    from runtime.exceptions import AmodalError
    from runtime.repo.scaffold import init_repo

    try:
        written = init_repo(path)
    except AmodalError as error:
        raise click.ClickException(str(error)) from error
    for file in written:
        click.echo(f"created {file}")
    click.echo(f"next: cd {path} && amodal validate", err=True)


@click.command()
@click.argument("name", type=click.Choice(SCHEMA_NAMES), required=False)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write every schema as <name>.schema.json into this folder.",
)
def schema(name: str | None, out: Path | None) -> None:
    """Print the JSON Schema of a file format, or write them all with --out."""
    from runtime.repo.schema import schema_text, write_schemas

    if out is not None:
        for path in write_schemas(out):
            click.echo(f"wrote {path}")
        return
    if name is None:
        raise click.UsageError(f"name a schema ({', '.join(SCHEMA_NAMES)}) or pass --out DIR")
    click.echo(schema_text(name), nl=False)


@click.group(name="import")
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
        obj: Context, source: Path, into: Path | None, dry_run: bool, as_json: bool
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
