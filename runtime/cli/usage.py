"""`amodal usage`: what model calls spent, as a table or JSON (SPEC 22; docs/budgets.md)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import anyio
import click
from rich.console import Console
from rich.table import Table

from runtime.api import Runtime, UsageReport
from runtime.cli._shared import Context
from runtime.repo.bundle import Bundle
from runtime.storage import USAGE_GROUPS, UsageGroup, UsageRow

_AGO = re.compile(r"^(\d{1,5})([dhm])$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


@click.command()
@click.option("--since", help="From an ISO date or time (UTC unless it says), or an age: 7d, 24h.")
@click.option(
    "--by",
    type=click.Choice(list(USAGE_GROUPS)),
    help="One row per agent, model, owner, scope, UTC day, session or kind (run, compaction).",
)
@click.option("--json", "as_json", is_flag=True, help="Print GET /usage's JSON.")
@click.pass_obj
def usage(obj: Context, since: str | None, by: UsageGroup | None, as_json: bool) -> None:
    """What model calls spent (tokens, USD, calls, turns), from the repo's database."""
    run_usage(obj.bundle(), since=since_option(since), by=by, as_json=as_json)


def since_option(value: str | None, now: datetime | None = None) -> datetime | None:
    """`--since`: an ISO date or time (UTC when it names no zone), or `7d`, `24h`, `30m` ago."""
    if value is None:
        return None
    ago = _AGO.match(value.strip())
    if ago is not None:
        count, unit = int(ago.group(1)), _UNITS[ago.group(2)]
        return (now or datetime.now(UTC)) - timedelta(**{unit: count})
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: give an ISO date or time (2025-01-02, 2025-01-02T09:00Z) or an age "
            "(7d, 24h, 30m)",
            param_hint="--since",
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def run_usage(
    bundle: Bundle, *, since: datetime | None, by: UsageGroup | None, as_json: bool
) -> None:
    """Print the repo's database's usage (as the operator: every caller's)."""

    async def read() -> UsageReport:
        async with Runtime.open(bundle) as runtime:
            return await runtime.usage(since=since, group_by=by, operator=True)

    report = anyio.run(read)
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
        return
    Console(highlight=False).print(_table(report, by, since))


def _table(report: UsageReport, by: UsageGroup | None, since: datetime | None) -> Table:
    title = "Usage" + (f" since {since.isoformat(timespec='minutes')}" if since else "")
    table = Table(title=title, title_justify="left")
    if by is not None:
        table.add_column(by.upper())
    for name in ("INPUT", "OUTPUT", "CACHED", "COST (USD)", "CALLS", "TURNS"):
        table.add_column(name, justify="right")
    for row in report.rows:
        table.add_row(str(row.key.get(by or "") or "-"), *_cells(row))
    if by is not None:
        table.add_section()
        table.add_row("total", *_cells(report.total), style="bold")
    else:
        table.add_row(*_cells(report.total))
    return table


def _cells(row: UsageRow) -> list[str]:
    cost = "unknown" if row.cost_usd is None else f"{row.cost_usd:.4f}"
    return [
        f"{row.input_tokens:,}",
        f"{row.output_tokens:,}",
        f"{row.cached_tokens:,}",
        cost,
        f"{row.model_calls:,}",
        f"{row.turns:,}",
    ]
