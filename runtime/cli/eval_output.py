"""`amodal eval` as a person (or CI) runs it: a progress bar on stderr, then a summary
table and every failure explained on stdout; `--json` and `--junit` for machines."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from runtime.evals.record import (
    AttemptRecord,
    CaseRecord,
    EvalRun,
    load_run,
    runs_directory,
    save_run,
)
from runtime.evals.results import compare, explain, junit_xml, rate
from runtime.evals.runner import run_evals, select
from runtime.exceptions import AmodalError
from runtime.repo.bundle import Bundle
from runtime.repo.eval_suites import Case, Suite
from runtime.repo.model_bindings import resolve_chain

DEFAULT_CONCURRENCY = 4
_RESULT_STYLE = {"passed": "green", "failed": "red", "error": "yellow"}
_RESULT_WORD = {"passed": "pass", "failed": "FAIL", "error": "ERROR"}


def run_command(
    root: Path,
    bundle: Bundle,
    suites: Sequence[Suite],
    *,
    names: Sequence[str],
    cases: Sequence[str],
    repeat: int,
    concurrency: int | None,
    min_pass_rate: float | None,
    as_json: bool,
    junit: Path | None,
) -> int:
    """Run the chosen cases; the exit status (0: every case passed). `concurrency` None:
    4 cases at once, or 1 on the offline model (it answers one call at a time, so cases
    side by side would only wait for each other and time out)."""
    if concurrency is None:
        concurrency = 1 if uses_offline_model(bundle) else DEFAULT_CONCURRENCY
    if not suites:
        raise click.ClickException(
            "no eval suites: write evals/<name>.yaml with a few cases (see docs/evals.md)"
        )
    try:
        chosen = select(suites, names, cases)
    except LookupError as error:
        raise click.UsageError(str(error.args[0])) from error
    attempts = len(chosen) * repeat
    show_progress = not as_json and sys.stderr.isatty()
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[red]{task.fields[failed]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not show_progress,
    )
    task = progress.add_task(f"{len(chosen)} cases", total=attempts, failed="")
    failed = 0

    def advance(case: Case, attempt: AttemptRecord) -> None:
        nonlocal failed
        failed += attempt.status != "passed"
        progress.update(task, advance=1, failed=f"{failed} not passed" if failed else "")

    async def run() -> EvalRun:
        return await run_evals(
            bundle,
            chosen,
            repeat=repeat,
            concurrency=concurrency,
            min_pass_rate=1.0 if min_pass_rate is None else min_pass_rate,
            on_attempt=advance,
        )

    try:
        with progress:
            record = anyio.run(run)
    except AmodalError as error:  # the set-up, not a case: no model configured, ...
        raise click.ClickException(str(error)) from error
    path = save_run(record, runs_directory(root))
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(junit_xml(record), encoding="utf-8")
    if as_json:
        click.echo(record.model_dump_json(indent=2))
        click.echo(f"run {record.id} saved to {_shown(path)}", err=True)
    else:
        _print_run(record, path)
    return 0 if record.ok else 1


def uses_offline_model(bundle: Bundle) -> bool:
    """True when no endpoint is configured for the session model: the offline one answers."""
    try:
        return resolve_chain(bundle.config, "default", os.environ) is None
    except AmodalError:
        return False  # misconfigured: the run reports it


def compare_command(root: Path, a: str, b: str, *, as_json: bool) -> int:
    """Compare two kept runs; the exit status is 1 when a case regressed."""
    directory = runs_directory(root)
    try:
        first, second = load_run(a, directory), load_run(b, directory)
    except (LookupError, ValueError) as error:
        raise click.ClickException(str(error)) from error
    comparison = compare(first, second)
    if as_json:
        click.echo(json.dumps(comparison.as_json(), indent=2))
    else:
        for label, run in (("a", first), ("b", second)):
            passed = run.count("passed")
            click.echo(
                f"{label}: {run.id} ({run.started_at:%Y-%m-%d %H:%M} UTC, "
                f"{passed}/{len(run.cases)} cases passed, repo version {run.bundle_version})"
            )
        for title, changes in (
            ("regressed", comparison.regressed),
            ("improved", comparison.improved),
        ):
            click.echo(f"{title} ({len(changes)}):" if changes else f"{title}: none")
            for change in changes:
                click.echo(f"  {change}")
                if title == "regressed":
                    for line in explain(change.after):
                        click.echo(f"      {line}")
        extra = [f"unchanged: {len(comparison.unchanged)}"]
        if comparison.only_in_a:
            extra.append("only in a: " + ", ".join(comparison.only_in_a))
        if comparison.only_in_b:
            extra.append("only in b: " + ", ".join(comparison.only_in_b))
        click.echo("; ".join(extra))
    return 1 if comparison.regressed else 0


def _print_run(run: EvalRun, path: Path) -> None:
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    table = Table(title=f"eval run {run.id}", title_justify="left")
    for column, justify in (
        ("CASE", "left"),
        ("RESULT", "left"),
        ("PASSED", "right"),
        ("LATENCY", "right"),
        ("TOKENS", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for case in run.cases:
        table.add_row(
            Text(case.id),
            Text(_RESULT_WORD[case.status], style=_RESULT_STYLE[case.status]),
            rate(case),
            f"{_mean(case, 'latency'):,} ms",
            f"{_mean(case, 'tokens'):,}",
        )
    console.print(table)
    for case in run.cases:
        if case.status == "passed":
            continue
        where = case.file if case.line is None else f"{case.file}:{case.line}"
        click.echo(f"\n{_RESULT_WORD[case.status]} {case.id} ({rate(case)} passed, {where})")
        for line in explain(case):
            click.echo(f"  {line}")
    counts = (
        f"{run.count('passed')} passed, {run.count('failed')} failed, {run.count('error')} errors"
    )
    attempts = sum(len(case.attempts) for case in run.cases)
    rate_note = f" at a minimum pass rate of {run.min_pass_rate:.0%}" if run.repeat > 1 else ""
    click.echo(
        f"\n{len(run.cases)} cases: {counts}{rate_note}; {attempts} attempts in "
        f"{run.duration_ms / 1000:.1f} s; tokens: agents {run.usage.total:,}, "
        f"judge {run.judge_usage.total:,}; models: {', '.join(run.models) or 'none called'}"
    )
    click.echo(f"run {run.id} saved to {_shown(path)}")


def _mean(case: CaseRecord, what: str) -> int:
    if not case.attempts:
        return 0
    values = [
        sum(attempt.latency_ms) if what == "latency" else attempt.usage.total
        for attempt in case.attempts
    ]
    return round(sum(values) / len(values))


def _shown(path: Path) -> str:
    """The path relative to here when it is below here, else absolute."""
    here = Path.cwd()
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)
