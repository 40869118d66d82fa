"""What every `amodal` command shares: finding the repo, loading it, printing findings.

It imports nothing beyond click at module level: `amodal --help` imports this module,
and a command pays for the loader only when it loads (SPEC 13, docs/performance.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from runtime.repo import LoadResult
    from runtime.repo.bundle import Bundle

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


class Context:
    """The group's options, handed to every command as `click.pass_obj`."""

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
        from runtime.repo import load_repo

        return load_repo(self.repo, offline=offline, evals=evals)

    def bundle(self) -> Bundle:
        """The bundle, or exit 1 after printing every error (commands that need a valid repo)."""
        result = self.load()
        # Errors go to stderr here: stdout belongs to the command's own output (--json).
        print_findings(result, as_json=False, errors_to_stderr=True)
        if result.bundle is None:
            sys.exit(1)
        return result.bundle


def print_findings(result: LoadResult, *, as_json: bool, errors_to_stderr: bool = False) -> None:
    for warning in result.warnings:
        click.echo(
            f"{location(warning.file, warning.line)}: warning: "
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


def location(file: str, line: int | None) -> str:
    return file if line is None else f"{file}:{line}"


def table(header: list[str], rows: list[list[Any]]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)]
        click.echo("  ".join(cells).rstrip())


def pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    found = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r}: write KEY=VALUE", param_hint=option)
        found[key] = text
    return found
