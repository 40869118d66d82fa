"""A click group whose commands are imported only when one is run.

`amodal --help` and `amodal validate` run in pre-commit hooks and editors: they must
not pay for the model clients, the server or MCP that other commands use. Each
command lives in a module of its own room and is named in a table, `name ->
"module:attribute"` with its one-line summary, so listing them imports nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """Where a command is defined, and the summary `--help` lists without importing it."""

    target: str  # "runtime.cli.module:attribute", a click.Command
    summary: str  # the first paragraph of the command's help, as its docstring has it

    def short_help(self, limit: int) -> str:
        """The summary shortened as click shortens a command's help for `--help`."""
        return click.Command(None, help=self.summary).get_short_help_str(limit)

    def load(self) -> click.Command:
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


class LazyGroup(click.Group):
    """A group over a table of `LazyCommand`s (and any command added the usual way)."""

    def __init__(self, *args: Any, lazy: Mapping[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            command = self.lazy[cmd_name].load()
            self.add_command(command, cmd_name)  # imported once per process
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own version imports every command for its short help; the table has it.
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)  # as click does
        rows = []
        for name in names:
            if name in self.lazy and name not in self.commands:
                rows.append((name, self.lazy[name].short_help(limit)))
            elif not self.commands[name].hidden:
                rows.append((name, self.commands[name].get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
