"""A click group whose commands are imported only when one is run.

`amodal --help` and `amodal validate` run in pre-commit hooks and editors: they must
not pay for the model clients, the server or MCP that other commands use. Each
command lives in a module of its own room and is named in a table, `name ->
"module:attribute"` with its one-line summary, so listing them imports nothing.
"""

from __future__ import annotations

import functools
import gc
import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """Where a command is defined, and the summary `--help` lists without importing it."""

    target: str  # "runtime.cli.module:attribute", a click.Command
    summary: str  # the first paragraph of the command's help, as its docstring has it
    one_shot: bool = False
    """It reads or writes files and exits (validate, agents...): it runs with the cyclic
    garbage collector off (reference counting still frees everything else) and without
    pydantic plugins."""

    def short_help(self, limit: int) -> str:
        """The summary shortened as click shortens a command's help for `--help`."""
        return click.Command(None, help=self.summary).get_short_help_str(limit)

    def load(self) -> click.Command:
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


# Importing the loader and its formats allocates objects by the hundred thousand, nearly
# all of them kept (modules, classes, validators): the collector's young-generation passes
# over them cost `amodal validate` about 30 ms of its CPU (a tenth) and free nothing a
# process that exits in a second needs back. And pydantic, on building its first
# validator, looks for plugins in the entry points of every installed distribution:
# another tenth, for plugins that observe a service's validations, which a command that
# checks files and exits has no use for. So a one-shot command runs with the collector
# off and without pydantic plugins (unless PYDANTIC_DISABLE_PLUGINS says otherwise: the
# switch is pydantic's own, an environment variable, so an MCP server `inspect` starts
# inherits it); commands that keep running (chat, serve, mcp, eval) keep both.

_PLUGINS_SWITCH = "PYDANTIC_DISABLE_PLUGINS"


def _one_shot(invoke: Callable[[click.Context], Any]) -> Callable[[click.Context], Any]:
    @functools.wraps(invoke)
    def run(ctx: click.Context) -> Any:
        was_on = gc.isenabled()
        plugins_set = _PLUGINS_SWITCH in os.environ
        gc.disable()
        if not plugins_set:
            os.environ[_PLUGINS_SWITCH] = "__all__"  # read each time pydantic builds one
        try:
            return invoke(ctx)
        finally:
            # A caller running the CLI in process gets its collector and plugins back.
            if not plugins_set:
                os.environ.pop(_PLUGINS_SWITCH, None)
            if was_on:
                gc.enable()

    return run


class LazyGroup(click.Group):
    """A group over a table of `LazyCommand`s (and any command added the usual way)."""

    def __init__(self, *args: Any, lazy: Mapping[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            row = self.lazy[cmd_name]
            command = row.load()
            if row.one_shot:
                command.invoke = _one_shot(command.invoke)  # type: ignore[method-assign,assignment]
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
