"""Running cases: repeats and pass rates, concurrency, a database of its own for every
attempt (never the repo's), the judge (pass, fail, garbage), errors that are not failures."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import Runtime, load_repo
from runtime.evals.judge import JUDGE_PROMPT, RETRY_PROMPT, parse_verdict
from runtime.evals.record import EvalRun
from runtime.evals.runner import run_evals, select
from runtime.testing import FunctionModel, Step, error, tool_call

Answer = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Any]


def repo_with(make_repo: Callable[..., Path], suite: str, **files: Any) -> Path:
    return make_repo({"evals/suite.yaml": suite, **files})


def evaluate(root: Path, answer: Answer, **options: Any) -> tuple[EvalRun, FunctionModel]:
    loaded = load_repo(root, environ={}, evals=True)
    assert loaded.bundle is not None, loaded.errors
    model = FunctionModel(answer)
    names = options.pop("suites", ())
    cases = options.pop("cases", ())

    async def go() -> EvalRun:
        return await run_evals(
            loaded.bundle, select(loaded.suites, names, cases), model=model, **options
        )

    return anyio.run(go), model


def is_judge(messages: list[dict[str, Any]]) -> bool:
    return messages[0]["role"] == "system" and messages[0]["content"] == JUDGE_PROMPT


# ---------------------------------------------------------------- repeat and pass rates


def alternating() -> Answer:
    """Passes on every other model call: `yes`, `no`, `yes`, ..."""
    calls = 0

    def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        nonlocal calls
        calls += 1
        return "yes" if calls % 2 else "no"

    return answer


FLAKY = "cases:\n  - name: flaky\n    message: Q\n    expect: {reply_contains: 'yes'}\n"


def test_repeat_runs_every_case_n_times_and_reports_its_pass_rate(make_repo):
    run, model = evaluate(repo_with(make_repo, FLAKY), alternating(), repeat=4)

    (flaky,) = run.cases
    assert len(model.calls) == 4
    assert [attempt.number for attempt in flaky.attempts] == [1, 2, 3, 4]
    assert (flaky.passed, flaky.pass_rate, flaky.status) == (2, 0.5, "failed")
    assert sorted(attempt.status for attempt in flaky.attempts) == ["failed"] * 2 + ["passed"] * 2
    assert {attempt.session_id for attempt in flaky.attempts}.__len__() == 4
    assert not run.ok and run.repeat == 4


@pytest.mark.parametrize(
    ("minimum", "status"), [(0.5, "passed"), (0.75, "failed"), (0.0, "passed")]
)
def test_a_case_passes_when_its_pass_rate_reaches_the_minimum(make_repo, minimum, status):
    run, _ = evaluate(repo_with(make_repo, FLAKY), alternating(), repeat=4, min_pass_rate=minimum)

    assert run.cases[0].status == status
    assert run.ok is (status == "passed")
    assert run.min_pass_rate == minimum


def test_without_a_minimum_every_attempt_must_pass(make_repo):
    run, _ = evaluate(repo_with(make_repo, FLAKY), lambda m, t: "yes", repeat=3)

    assert (run.cases[0].passed, run.cases[0].status, run.ok) == (3, "passed", True)


# ---------------------------------------------------------------- concurrency


@pytest.mark.parametrize("limit", [1, 3])
def test_at_most_concurrency_cases_run_at_once(make_repo, limit):
    cases = "".join(f"  - {{name: c{n}, message: Q}}\n" for n in range(6))
    running, most, full = 0, 0, anyio.Event()

    async def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if running == limit:
            full.set()
        with anyio.move_on_after(10):  # wait until `limit` calls overlap (never forever)
            await full.wait()
        running -= 1
        return "ok"

    run, _ = evaluate(repo_with(make_repo, "cases:\n" + cases), answer, concurrency=limit)

    assert most == limit
    assert run.concurrency == limit
    assert [case.status for case in run.cases] == ["passed"] * 6


# ---------------------------------------------------------------- a database of its own


NOTES = {
    "entity": {
        "name": "Note",
        "key": "{id}",
        "schema": {"id": {"type": "string"}, "text": {"type": "string"}},
    }
}
ISOLATION = """\
agent: default
cases:
  - name: first
    message: Keep the note
    expect: {reply_contains: was new, store: {notes: {n1: {text: kept}}}}
  - name: second
    message: Keep the note
    expect: {reply_contains: was new, store: {notes: {n1: {text: kept}}}}
"""


def keep_the_note(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Step | str:
    """Reads note n1, writes it, and says whether it was there before."""
    results = [m for m in messages if m["role"] == "tool"]
    if not results:
        return tool_call("store__notes__get", {"id": "n1"})
    if len(results) == 1:
        return tool_call("store__notes__put", {"id": "n1", "text": "kept"})
    found = json.loads(results[0]["content"]).get("found", True)
    return "the note was there already" if found else "the note was new"


def test_every_attempt_gets_a_database_of_its_own(make_repo):
    root = repo_with(
        make_repo,
        ISOLATION,
        **{
            "stores/notes.json": NOTES,
            "agents/default/agent.json": {"stores": {"notes": "rw"}},
        },
    )

    run, _ = evaluate(root, keep_the_note, repeat=3, concurrency=1)

    assert [(case.name, case.passed) for case in run.cases] == [("first", 3), ("second", 3)]


def tree(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_the_repos_own_database_is_never_opened(make_repo, monkeypatch):
    monkeypatch.delenv("AMODAL_DATA_DIR", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    root = repo_with(
        make_repo,
        ISOLATION,
        **{
            "stores/notes.json": NOTES,
            "agents/default/agent.json": {"stores": {"notes": "rw"}},
        },
    )

    async def chat_once() -> None:  # the repo's own data: one session and note n1
        async with Runtime.open(root, model=FunctionModel(keep_the_note)) as runtime:
            await runtime.chat("Keep the note")

    anyio.run(chat_once)
    before = tree(root / ".amodal")
    assert "amodal.db" in before

    run, _ = evaluate(root, keep_the_note)

    assert tree(root / ".amodal") == before
    assert [case.status for case in run.cases] == ["passed", "passed"]  # n1 was new to each


# ---------------------------------------------------------------- errors are not failures


def test_a_model_that_fails_makes_the_attempt_an_error_not_a_failure(make_repo):
    run, _ = evaluate(
        repo_with(make_repo, FLAKY), lambda m, t: error(503, "upstream is down"), repeat=2
    )

    (flaky,) = run.cases
    assert flaky.status == "error"
    assert all(attempt.status == "error" for attempt in flaky.attempts)
    assert (
        "turn 1 failed" in flaky.attempts[0].error and "upstream is down" in flaky.attempts[0].error
    )


def test_a_case_may_expect_the_turn_to_fail(make_repo):
    suite = "cases:\n  - name: fails\n    message: Q\n    expect: {done_reason: error}\n"

    run, _ = evaluate(repo_with(make_repo, suite), lambda m, t: error(400, "bad request"))

    assert run.cases[0].status == "passed"


def test_a_case_with_failed_and_errored_attempts_failed(make_repo):
    calls = 0

    def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Step | str:
        nonlocal calls
        calls += 1
        return "no" if calls == 1 else error(400, "bad request")

    run, _ = evaluate(repo_with(make_repo, FLAKY), answer, repeat=2, concurrency=1)

    assert sorted(a.status for a in run.cases[0].attempts) == ["error", "failed"]
    assert run.cases[0].status == "failed"


# ---------------------------------------------------------------- the judge

JUDGED = """\
cases:
  - name: judged
    message: Define a Decision.
    expect:
      judge: The reply defines a Decision as a recorded verdict.
"""


def judged_by(*verdicts: str) -> tuple[Answer, list[list[dict[str, Any]]]]:
    """The agent replies `A verdict.`; the judge answers `verdicts` in turn."""
    asked: list[list[dict[str, Any]]] = []

    def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        if is_judge(messages):
            asked.append(messages)
            return verdicts[len(asked) - 1]
        return "A Decision is a recorded verdict."

    return answer, asked


def test_a_passing_verdict_passes_and_is_recorded(make_repo):
    answer, asked = judged_by('{"pass": true, "reason": "It defines it."}')

    run, model = evaluate(repo_with(make_repo, JUDGED), answer)

    (attempt,) = run.cases[0].attempts
    assert attempt.status == "passed"
    assert (attempt.judge.passed, attempt.judge.reason) == (True, "It defines it.")
    (messages,) = asked
    assert messages[0] == {"role": "system", "content": JUDGE_PROMPT}
    rubric, conversation = messages[1]["content"].split("\n\nConversation:\n")
    assert rubric == "Rubric:\nThe reply defines a Decision as a recorded verdict."
    assert json.loads(conversation) == {
        "turns": [{"person": "Define a Decision.", "agent": "A Decision is a recorded verdict."}],
        "tools_called": [],
    }
    assert model.calls[-1].tools == []  # the judge is offered no tool


def test_a_failing_verdict_fails_with_the_judges_reason(make_repo):
    answer, _ = judged_by('{"pass": false, "reason": "It never says recorded."}')

    run, _ = evaluate(repo_with(make_repo, JUDGED), answer)

    (attempt,) = run.cases[0].attempts
    assert attempt.status == "failed"
    (failure,) = attempt.failures
    assert (failure.expectation, failure.message) == (
        "judge",
        "the judge failed it: It never says recorded.",
    )


def test_a_malformed_verdict_is_asked_for_again_once(make_repo):
    answer, asked = judged_by("Looks good to me!", '```json\n{"pass": true, "reason": "ok"}\n```')

    run, _ = evaluate(repo_with(make_repo, JUDGED), answer)

    (attempt,) = run.cases[0].attempts
    assert attempt.status == "passed"
    assert len(asked) == 2
    assert asked[1][-2:] == [
        {"role": "assistant", "content": "Looks good to me!"},
        {"role": "user", "content": RETRY_PROMPT},
    ]


@pytest.mark.parametrize(
    "garbage",
    ["PASS", '{"pass": "yes", "reason": "ok"}', '{"pass": true}', '{"pass": true, "reason": ""}'],
)
def test_two_malformed_verdicts_make_the_case_an_error_not_a_failure(make_repo, garbage):
    answer, asked = judged_by(garbage, garbage)

    run, _ = evaluate(repo_with(make_repo, JUDGED), answer)

    (attempt,) = run.cases[0].attempts
    assert len(asked) == 2
    assert (attempt.status, run.cases[0].status) == ("error", "error")
    assert attempt.error.startswith("the judge answered twice without a verdict; last: ")
    assert attempt.judge.passed is None and attempt.failures == ()


def test_a_judge_error_does_not_hide_a_failed_expectation(make_repo):
    suite = JUDGED + "      reply_contains: wind\n"
    answer, _ = judged_by("?", "?")

    run, _ = evaluate(repo_with(make_repo, suite), answer)

    (attempt,) = run.cases[0].attempts
    assert attempt.status == "failed"
    assert [f.expectation for f in attempt.failures] == ["reply_contains"]
    assert attempt.error.startswith("the judge answered twice")


def test_a_judge_model_that_fails_makes_the_case_an_error(make_repo):
    def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Step | str:
        return error(503, "judge down") if is_judge(messages) else "A verdict."

    run, _ = evaluate(repo_with(make_repo, JUDGED), answer)

    (attempt,) = run.cases[0].attempts
    assert attempt.status == "error"
    assert attempt.error.startswith("the judge model failed: ") and "judge down" in attempt.error


def test_the_judges_tokens_are_counted_apart_from_the_agents(make_repo):
    answer, _ = judged_by("nope", '{"pass": true, "reason": "ok"}')

    run, model = evaluate(repo_with(make_repo, JUDGED), answer)

    (attempt,) = run.cases[0].attempts
    agent_calls = [call for call in model.calls if not is_judge(call.messages)]
    assert len(agent_calls) == 1 and len(model.calls) == 3
    assert attempt.usage.input == run.usage.input > 0
    assert attempt.judge.usage.input == run.judge_usage.input > 0
    assert attempt.judge.usage.output == run.judge_usage.output  # both judge answers counted
    assert run.judge_usage.input > attempt.usage.input  # the retry resent the conversation


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ('{"pass": true, "reason": "fine"}', (True, "fine")),
        (' Sure.\n{"pass": false, "reason": "no source"}\nHope that helps', (False, "no source")),
        ('```\n{"pass": false, "reason": "x"}\n```', (False, "x")),
        ('{"pass": 1, "reason": "x"}', None),
        ('{"pass": true, "reason": "x", "score": 5}', None),
        ("[]", None),
        ("", None),
    ],
)
def test_a_verdict_is_a_json_object_with_a_boolean_pass_and_a_reason(text, verdict):
    parsed = parse_verdict(text)

    assert (None if parsed is None else (parsed.passed, parsed.reason)) == verdict


def test_the_grading_prompts_are_documented_word_for_word():
    page = (Path(__file__).resolve().parents[2] / "docs/evals.md").read_text(encoding="utf-8")

    assert f"```text\n{JUDGE_PROMPT}\n```" in page
    assert f"```text\n{RETRY_PROMPT}\n```" in page


# ---------------------------------------------------------------- choosing cases


def test_select_names_unknown_suites_and_cases_with_a_suggestion(make_repo):
    loaded = load_repo(repo_with(make_repo, FLAKY), environ={}, evals=True)

    with pytest.raises(LookupError, match=r"unknown suite 'suit' \(did you mean 'suite'\?\)"):
        select(loaded.suites, ["suit"])
    with pytest.raises(LookupError, match=r"unknown case 'flakey' \(did you mean 'flaky'\?\)"):
        select(loaded.suites, (), ["flakey"])
    assert [case.id for case in select(loaded.suites, (), ["suite/flaky"])] == ["suite/flaky"]
