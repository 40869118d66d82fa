"""Running eval cases: each in a fresh session on a throwaway database, concurrently,
repeated, graded (SPEC 18).

    result = load_repo(".", evals=True)
    run = await run_evals(result.bundle, select(result.suites), repeat=3)
    print(run.count("passed"), run.ok)

One `Runtime` serves the run (its models, the offline model started at most once,
and the judge); every attempt of every case gets a database of its own through
`Runtime.with_database`: a SQLite file in a temporary folder, deleted when the attempt
ends. No case sees another's sessions or store documents, and the repo's own database
is never opened.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from runtime import events
from runtime.api import ModelChoice, Runtime
from runtime.evals.expectations import Failure, Observation, ToolUse, check
from runtime.evals.judge import Grade, grade
from runtime.evals.record import (
    AttemptRecord,
    CaseRecord,
    EvalRun,
    FailureRecord,
    JudgeRecord,
    Tokens,
    ToolUseRecord,
    new_run_id,
)
from runtime.events import Usage
from runtime.exceptions import AmodalError, RequestError
from runtime.repo._report import did_you_mean, known
from runtime.repo.bundle import MAIN_AGENT, Bundle
from runtime.repo.eval_suites import Case, Suite
from runtime.storage import MAX_QUERY_LIMIT, DocumentQuery, JSONObject
from runtime.stores import partition
from runtime.surface.caller import Caller

DEFAULT_CONCURRENCY = 4

OnAttempt = Callable[[Case, AttemptRecord], None]
"""Hears every attempt as it ends (the progress bar)."""


def select(
    suites: Iterable[Suite], names: Collection[str] = (), cases: Collection[str] = ()
) -> list[Case]:
    """The cases of the suites named (all without names), only those named `cases` when
    given (a case name, or `suite/case`). `LookupError` names what does not exist."""
    suites = list(suites)
    by_name = {suite.name: suite for suite in suites}
    for name in names:
        if name not in by_name:
            raise LookupError(
                f"unknown suite {name!r}{did_you_mean(name, by_name)}; {known('suites', by_name)}"
            )
    chosen = [suite for suite in suites if not names or suite.name in names]
    picked = [case for suite in chosen for case in suite.cases]
    if not cases:
        return picked
    every = {case.name for case in picked} | {case.id for case in picked}
    for wanted in cases:
        if wanted not in every:
            raise LookupError(
                f"unknown case {wanted!r}{did_you_mean(wanted, every)}; "
                f"{known('cases', sorted({case.name for case in picked}))}"
            )
    return [case for case in picked if case.name in cases or case.id in cases]


async def run_evals(
    bundle: Bundle,
    cases: Sequence[Case],
    *,
    repeat: int = 1,
    concurrency: int = DEFAULT_CONCURRENCY,
    min_pass_rate: float = 1.0,
    model: ModelChoice = None,
    on_attempt: OnAttempt | None = None,
) -> EvalRun:
    """Run every case `repeat` times, at most `concurrency` attempts at once, against the
    models the repo configures (or `model`, as `Runtime.open` takes it). A case passes
    when its pass rate reaches `min_pass_rate` (default: every attempt must pass)."""
    if repeat < 1 or concurrency < 1:
        raise ValueError("repeat and concurrency are at least 1")
    if not 0 <= min_pass_rate <= 1:
        raise ValueError("min_pass_rate is between 0 and 1")
    started, clock = datetime.now(UTC), time.perf_counter()
    attempts: dict[int, list[AttemptRecord]] = {index: [] for index in range(len(cases))}
    limiter = anyio.CapacityLimiter(concurrency)
    with tempfile.TemporaryDirectory(prefix="amodal-eval-") as scratch:
        folder = Path(scratch)
        async with Runtime.open(bundle, database=folder / "run.db", model=model) as runtime:
            # Resolve the session model before the clock of any case starts: the first
            # resolution loads the SDK (or starts the offline model, or says none is set).
            await runtime.model("default")

            async def attempt(index: int, number: int) -> None:
                async with limiter:
                    database = folder / f"case-{index}-{number}.db"
                    record = await _attempt(runtime, cases[index], number, database)
                    await anyio.to_thread.run_sync(_remove, database)
                attempts[index].append(record)
                if on_attempt is not None:
                    on_attempt(cases[index], record)

            try:
                async with anyio.create_task_group() as group:
                    for number in range(1, repeat + 1):
                        for index in range(len(cases)):
                            group.start_soon(attempt, index, number)
            except ExceptionGroup as failed:
                # Not a case's failure (those are recorded) but the set-up's: a model that
                # cannot be reached as configured, a database that cannot be made. The
                # run stops with the first such error, as itself.
                raise _first(failed) from None
    records = tuple(
        CaseRecord.of(
            suite=case.suite,
            name=case.name,
            file=case.file,
            line=case.line,
            agent=case.agent,
            attempts=attempts[index],
            min_pass_rate=min_pass_rate,
        )
        for index, case in enumerate(cases)
    )
    every = [attempt for case in records for attempt in case.attempts]
    return EvalRun(
        id=new_run_id(started),
        repo=bundle.config.name,
        bundle_version=bundle.version,
        started_at=started,
        duration_ms=round((time.perf_counter() - clock) * 1000),
        repeat=repeat,
        concurrency=concurrency,
        min_pass_rate=min_pass_rate,
        models=tuple(sorted({name for attempt in every for name in attempt.models})),
        usage=sum((attempt.usage for attempt in every), Tokens()),
        judge_usage=sum((attempt.judge.usage for attempt in every if attempt.judge), Tokens()),
        cases=records,
    )


async def _attempt(runtime: Runtime, case: Case, number: int, database: Path) -> AttemptRecord:
    """One attempt of one case on a database of its own, graded."""
    async with runtime.with_database(database) as fresh:
        try:
            seen, session_id, error = await _observe(fresh, case)
        except RequestError as refused:  # the runtime refused the case's request
            return AttemptRecord(number=number, status="error", error=str(refused))
    base: dict[str, Any] = {
        "number": number,
        "session_id": session_id,
        "replies": seen.replies,
        "trajectory": tuple(
            ToolUseRecord(name=use.name, agent=use.agent, status=use.status)
            for use in seen.trajectory
        ),
        "subagents": seen.subagents,
        "done_reason": seen.done_reason,
        "latency_ms": seen.latencies_ms,
        "usage": Tokens.of(seen.usage),
        "models": seen.models,
    }
    if error is not None and case.expect.done_reason != "error":
        return AttemptRecord(status="error", error=error, **base)
    failures = check(case.expect, seen)
    judged = None
    if case.expect.judge is not None:
        verdict = await _judge(runtime, case, seen)
        judged = JudgeRecord(
            passed=verdict.passed,
            reason=verdict.reason,
            error=verdict.error,
            model=verdict.model,
            usage=Tokens.of(verdict.usage),
        )
        if verdict.error is not None:
            # No verdict: the attempt is ungraded (error), unless another expectation
            # already failed it.
            return AttemptRecord(
                status="failed" if failures else "error",
                error=verdict.error,
                failures=_failures(failures),
                judge=judged,
                **base,
            )
        if not verdict.passed:
            failures.append(Failure("judge", f"the judge failed it: {verdict.reason}"))
    return AttemptRecord(
        status="failed" if failures else "passed",
        failures=_failures(failures),
        judge=judged,
        **base,
    )


async def _observe(runtime: Runtime, case: Case) -> tuple[Observation, str | None, str | None]:
    """Run the case's turns in one session: what it showed, its session, and the error that
    stopped it (a turn that ended with reason `error`), if any."""
    replies: list[str] = []
    trajectory: list[ToolUse] = []
    subagents: list[str] = []
    latencies: list[int] = []
    models: set[str] = set()
    usage = Usage()
    session_id: str | None = None
    reason, error = "model_stop", None
    operator = case.agent == MAIN_AGENT
    for message in case.turns:
        clock = time.perf_counter()
        result = await runtime.chat(
            message,
            agent=case.agent,
            session_id=session_id,
            claims=case.claims,
            context=case.context,
            operator=operator,
        )
        latencies.append(round((time.perf_counter() - clock) * 1000))
        session_id, reason, usage = result.session_id, result.reason, usage + result.usage
        replies.append(result.text)
        agents = {result.events[0].run_id: result.agent}
        results: dict[str, str] = {}
        for event in result.events:
            if isinstance(event, events.SubagentStart):
                agents[event.run_id] = event.subagent
                subagents.append(event.subagent)
            elif isinstance(event, events.ToolResult):
                results[event.call_id] = event.status
            elif isinstance(event, events.ModelUsage):
                models.add(event.model)
        trajectory += [
            ToolUse(event.name, agents.get(event.run_id, "?"), results.get(event.call_id))
            for event in result.events
            if isinstance(event, events.ToolCall)
        ]
        if result.reason == "error":
            error = f"turn {len(replies)} failed: {result.error or 'the turn ended in error'}"
            break
    documents = await _documents(runtime, case)
    seen = Observation(
        agent=case.agent,
        replies=tuple(replies),
        trajectory=tuple(trajectory),
        subagents=tuple(subagents),
        done_reason=reason,
        latencies_ms=tuple(latencies),
        usage=usage,
        models=tuple(sorted(models)),
        documents=documents,
    )
    return seen, session_id, error


async def _documents(runtime: Runtime, case: Case) -> dict[str, dict[str, JSONObject]]:
    """The documents of each store `expect.store` names, in the case's caller's scope."""
    scope = Caller(claims=dict(case.claims), operator=case.agent == MAIN_AGENT).scope_id
    found: dict[str, dict[str, JSONObject]] = {}
    for name in case.expect.store or {}:
        store = runtime.bundle.stores[name]
        where, documents, offset = partition(store, scope), {}, 0
        while True:
            page = await runtime.storage.query_documents(
                where, name, DocumentQuery(limit=MAX_QUERY_LIMIT, offset=offset)
            )
            documents.update({document.key: document.data for document in page.documents})
            offset += len(page.documents)
            if not page.documents or offset >= page.total:
                break
        found[name] = documents
    return found


async def _judge(runtime: Runtime, case: Case, seen: Observation) -> Grade:
    model = await runtime.model("advanced")
    assert case.expect.judge is not None
    return await grade(
        model,
        case.expect.judge,
        list(zip(case.turns, seen.replies, strict=False)),
        [use.name for use in seen.trajectory],
    )


def _first(failed: ExceptionGroup) -> Exception:
    """The first error of a group, an `AmodalError` when there is one."""
    leaves = list(_leaves(failed))
    return next((leaf for leaf in leaves if isinstance(leaf, AmodalError)), leaves[0])


def _leaves(failed: BaseException) -> Iterable[Exception]:
    if isinstance(failed, ExceptionGroup):
        for inner in failed.exceptions:
            yield from _leaves(inner)
    elif isinstance(failed, Exception):
        yield failed


def _remove(database: Path) -> None:
    """Delete a closed SQLite database and the files it kept beside it."""
    for path in (database, *database.parent.glob(database.name + "-*")):
        path.unlink(missing_ok=True)


def _failures(failures: Sequence[Failure]) -> tuple[FailureRecord, ...]:
    return tuple(
        FailureRecord(expectation=failure.expectation, message=failure.message)
        for failure in failures
    )
