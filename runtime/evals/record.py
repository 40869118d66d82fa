"""A run's record: what `amodal eval --json` prints, `.amodal/evals/<run id>.json` keeps and
`amodal eval --compare` reads back.

Runs are kept in `$AMODAL_DATA_DIR/evals/` when that variable is set (as the database
is), else in `<repo>/.amodal/evals/`. A run id is `YYYYMMDD-HHMMSS-xxxx` (UTC, then
four random hex digits), so ids sort by time.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from runtime.events import Usage
from runtime.storage import DATA_DIR_ENV

Status = Literal["passed", "failed", "error"]
RUNS_FOLDER = "evals"
LATEST = "latest"
PREVIOUS = "previous"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tokens(_Record):
    input: int = 0
    output: int = 0
    cached: int = 0

    @classmethod
    def of(cls, usage: Usage) -> Tokens:
        return cls(input=usage.input_tokens, output=usage.output_tokens, cached=usage.cached_tokens)

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            input=self.input + other.input,
            output=self.output + other.output,
            cached=self.cached + other.cached,
        )

    @property
    def total(self) -> int:
        return self.input + self.output


class FailureRecord(_Record):
    expectation: str
    message: str


class ToolUseRecord(_Record):
    name: str
    agent: str
    status: str | None


class JudgeRecord(_Record):
    passed: bool | None
    """None: the judge gave no verdict (`error` says why)."""
    reason: str
    error: str | None = None
    model: str | None = None
    usage: Tokens = Tokens()


class AttemptRecord(_Record):
    """One run of one case."""

    number: int
    status: Status
    failures: tuple[FailureRecord, ...] = ()
    error: str | None = None
    """Why the case could not be run or graded (an error; or a failure when an expectation
    failed as well)."""
    session_id: str | None = None
    replies: tuple[str, ...] = ()
    trajectory: tuple[ToolUseRecord, ...] = ()
    subagents: tuple[str, ...] = ()
    done_reason: str | None = None
    latency_ms: tuple[int, ...] = ()
    """Per turn."""
    usage: Tokens = Tokens()
    """The agent's tokens (specialists included, the judge's apart)."""
    models: tuple[str, ...] = ()
    judge: JudgeRecord | None = None


class CaseRecord(_Record):
    """One case over all its attempts."""

    id: str
    suite: str
    name: str
    file: str
    line: int | None
    agent: str
    status: Status
    passed: int
    pass_rate: float
    attempts: tuple[AttemptRecord, ...]

    @classmethod
    def of(
        cls,
        *,
        suite: str,
        name: str,
        file: str,
        line: int | None,
        agent: str,
        attempts: Sequence[AttemptRecord],
        min_pass_rate: float,
    ) -> CaseRecord:
        """A case passes when its pass rate reaches `min_pass_rate`; otherwise it errors when
        every attempt that did not pass errored, and fails when one failed."""
        ordered = tuple(sorted(attempts, key=lambda attempt: attempt.number))
        passed = sum(attempt.status == "passed" for attempt in ordered)
        rate = passed / len(ordered) if ordered else 0.0
        status: Status
        if ordered and rate >= min_pass_rate:
            status = "passed"
        elif any(attempt.status == "failed" for attempt in ordered):
            status = "failed"
        else:
            status = "error"
        return cls(
            id=f"{suite}/{name}",
            suite=suite,
            name=name,
            file=file,
            line=line,
            agent=agent,
            status=status,
            passed=passed,
            pass_rate=round(rate, 4),
            attempts=ordered,
        )


class EvalRun(_Record):
    """One `amodal eval` run."""

    format: Literal[1] = 1
    id: str
    repo: str
    bundle_version: str
    started_at: datetime
    duration_ms: int
    repeat: int
    concurrency: int
    min_pass_rate: float
    models: tuple[str, ...]
    """Every model that answered the agents (the judge's is in each attempt's `judge`)."""
    usage: Tokens
    judge_usage: Tokens
    cases: tuple[CaseRecord, ...]

    def count(self, status: Status) -> int:
        return sum(case.status == status for case in self.cases)

    @property
    def ok(self) -> bool:
        """Every case passed (at the run's minimum pass rate)."""
        return all(case.status == "passed" for case in self.cases)


def new_run_id(now: datetime | None = None) -> str:
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{moment:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def runs_directory(repo_root: Path, environ: Mapping[str, str] | None = None) -> Path:
    """`$AMODAL_DATA_DIR/evals` when that variable is set and not empty, else
    `<repo>/.amodal/evals` (not created here)."""
    env = os.environ if environ is None else environ
    data_dir = env.get(DATA_DIR_ENV, "")
    base = Path(data_dir).expanduser() if data_dir else repo_root / ".amodal"
    return base / RUNS_FOLDER


def save_run(run: EvalRun, directory: Path) -> Path:
    """Write the run as `<directory>/<id>.json`, whole or not at all."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{run.id}.json"
    partial = path.with_suffix(".json.partial")
    partial.write_text(run.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path


def run_ids(directory: Path) -> list[str]:
    """The ids of the kept runs, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(path.stem for path in directory.glob("*.json"))


def load_run(reference: str, directory: Path) -> EvalRun:
    """The run a reference names: a run id, `latest`, `previous` (the one before the latest)
    or the path of a run file. `LookupError` when there is no such run, `ValueError` when
    the file is not a run record."""
    path = _run_path(reference, directory)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise LookupError(f"cannot read run {reference!r} ({path}): {error.strerror}") from error
    try:
        return EvalRun.model_validate_json(text)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise ValueError(f"{path} is not an eval run record: {where}: {first['msg']}") from error


def _run_path(reference: str, directory: Path) -> Path:
    ids = run_ids(directory)
    if reference in (LATEST, PREVIOUS):
        wanted = 1 if reference == LATEST else 2
        if len(ids) < wanted:
            raise LookupError(f"there is no {reference} run: {len(ids)} run(s) kept in {directory}")
        return directory / f"{ids[-wanted]}.json"
    if reference in ids:
        return directory / f"{reference}.json"
    path = Path(reference)
    if path.suffix == ".json" and path.is_file():
        return path
    starting = [run_id for run_id in ids if run_id.startswith(reference)]
    if len(starting) == 1:
        return directory / f"{starting[0]}.json"
    recent = ", ".join(ids[-5:]) or "none"
    raise LookupError(
        f"no run {reference!r} in {directory} (the most recent: {recent}); name a run id, "
        f"`{LATEST}`, `{PREVIOUS}` or a run's .json file"
    )
