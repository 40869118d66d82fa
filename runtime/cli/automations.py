"""`amodal automations`: list the repo's automations, run one now, pause and resume them
(SPEC 23; docs/automations.md). They act on the repo's database (`DATABASE_URL`, else the
SQLite file under `.amodal/`), the same one `amodal serve` uses: a pause here stops every
server's scheduler."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from runtime.automations import AutomationInfo
    from runtime.repo.bundle import Bundle
    from runtime.storage import AutomationRunRecord, Storage


@click.group(name="automations", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_context
def automations_group(context: click.Context, as_json: bool) -> None:
    """List the automations: trigger, schedule, next run, paused, last run."""
    if context.invoked_subcommand is not None:
        return
    bundle = context.obj.bundle()

    async def listing(storage: Storage) -> list[AutomationInfo]:
        from runtime.automations.service import describe
        from runtime.storage import utc_now

        return await describe(bundle, storage, utc_now())

    infos = _with_storage(bundle, listing)
    if as_json:
        click.echo(json.dumps([_info_json(info) for info in infos], indent=2))
        return
    _print_table(infos)


@automations_group.command("run")
@click.argument("name")
@click.option("--wait", is_flag=True, help="Print the reply when it ends; exit 1 if it failed.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@click.pass_obj
def run_command(obj: Any, name: str, wait: bool, as_json: bool) -> None:
    """Run automation NAME now, in this process (as `POST /automations/NAME/run` does)."""
    import anyio

    from runtime.api import Runtime
    from runtime.automations import Automations
    from runtime.exceptions import AmodalError

    bundle = obj.bundle()

    async def run() -> AutomationRunRecord:
        async with Runtime.open(bundle, background=1) as rt, Automations.open(rt) as service:
            started = await service.run_now(name)
            if not wait and not as_json:
                click.echo(f"started {started.id} (session {started.session_id})", err=True)
            # A background turn that this process runs unless a server takes it first.
            return await service.wait(started.id)

    try:
        record = anyio.run(run)
    except AmodalError as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        from runtime.server.automation_routes import run_json

        click.echo(json.dumps(run_json(record), indent=2))
    elif wait:
        click.echo(record.reply or "")
        line = f"{record.automation} {record.id}: {record.status}"
        click.echo(line + (f" ({record.error})" if record.error else ""), err=True)
    sys.exit(1 if wait and record.status == "error" else 0)


@automations_group.command("pause")
@click.argument("name")
@click.pass_obj
def pause_command(obj: Any, name: str) -> None:
    """Pause NAME: its cron slots are skipped on every server until it is resumed."""
    _set_paused(obj.bundle(), name, True)
    click.echo(f"paused {name}", err=True)


@automations_group.command("resume")
@click.argument("name")
@click.pass_obj
def resume_command(obj: Any, name: str) -> None:
    """Resume NAME."""
    _set_paused(obj.bundle(), name, False)
    click.echo(f"resumed {name}", err=True)


def _set_paused(bundle: Bundle, name: str, paused: bool) -> None:
    if name not in bundle.automations:
        known = ", ".join(sorted(bundle.automations)) or "none"
        raise click.ClickException(f"no automation {name!r}; automations: {known}")

    async def store(storage: Storage) -> None:
        await storage.set_automation_paused(name, paused)

    _with_storage(bundle, store)


def _with_storage(bundle: Bundle, work: Any) -> Any:
    import anyio

    from runtime.storage import default_database_path, open_storage

    async def run() -> Any:
        database = os.environ.get("DATABASE_URL") or default_database_path(bundle.root)
        storage = await open_storage(database)
        try:
            return await work(storage)
        finally:
            await storage.close()

    return anyio.run(run)


def _info_json(info: AutomationInfo) -> dict[str, Any]:
    from runtime.server.automation_routes import info_json

    return info_json(info)


def _print_table(infos: list[AutomationInfo]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NAME", "TRIGGER", "NEXT RUN", "STATE", "LAST RUN"):
        table.add_column(column)
    for info in infos:
        if info.errors:
            table.add_row(info.name, "[red]broken[/red]", "", "", info.errors[0])
            continue
        trigger = f"cron {info.schedule} ({info.timezone})" if info.schedule else info.trigger
        last = info.last_run
        table.add_row(
            info.name,
            trigger,
            info.next_run.isoformat(timespec="minutes") if info.next_run else "",
            "[yellow]paused[/yellow]" if info.paused else "active",
            f"{last.status} {last.created_at.isoformat(timespec='seconds')}" if last else "",
        )
    if not infos:
        click.echo("no automations: add automations/<name>.json (docs/automations.md)", err=True)
        return
    Console(width=160).print(table)
