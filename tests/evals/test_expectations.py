"""Every expectation of SPEC 18, passing and failing, on real turns of the example repo's
lead: each failure says what was expected and what happened."""

from __future__ import annotations

import json
import shutil
from typing import Any

import anyio
import pytest

from runtime import load_repo
from runtime.evals.expectations import json_equal
from runtime.evals.record import CaseRecord, EvalRun
from runtime.evals.runner import run_evals, select
from runtime.testing import FunctionModel, Step, tool_call
from tests.conftest import copy_example_repo

NOTE = {
    "slug": "x",
    "topic": "solar",
    "summary": "Plant A made 4.2 MW.",
    "confidence": "high",
    "sources": ["a"],
    "updated": None,
}
REPLY = "A Decision is a reviewer's recorded verdict. Saved note:x."
TRAJECTORY = (
    "[load_knowledge, store__research_notes__put, call_subagent, load_knowledge (researcher)]"
)

NOTE_X = {"topic": "solar", "sources": ["a"], "updated": None}
CASES: list[dict[str, Any]] = [
    {"name": "rc-pass", "expect": {"reply_contains": ["VERDICT", "decision"]}},
    {"name": "rc-fail", "expect": {"reply_contains": ["verdict", "wind"]}},
    {"name": "rnc-pass", "expect": {"reply_not_contains": "wind"}},
    {"name": "rnc-fail", "expect": {"reply_not_contains": ["Verdict"]}},
    {"name": "rm-pass", "expect": {"reply_matches": "^A Decision is"}},
    {"name": "rm-fail", "expect": {"reply_matches": "^Wind"}},
    {
        "name": "tc-pass",
        "expect": {"tools_called": ["load_knowledge", "call_subagent", "load_knowledge"]},
    },
    {
        "name": "tc-fail",
        "expect": {"tools_called": ["call_subagent", "store__research_notes__put"]},
    },
    {"name": "tnc-pass", "expect": {"tools_not_called": ["word_count", "load_skill"]}},
    {
        "name": "tnc-fail",
        "expect": {"tools_not_called": ["word_count", "store__research_notes__put"]},
    },
    {"name": "sc-pass", "expect": {"subagents_called": ["researcher"]}},
    {"name": "sc-fail", "expect": {"subagents_called": ["researcher", "writer"]}},
    {"name": "dr-pass", "expect": {"done_reason": "model_stop"}},
    {"name": "dr-fail", "expect": {"done_reason": "stop_execution"}},
    {"name": "mtc-pass", "expect": {"max_tool_calls": 4}},
    {"name": "mtc-fail", "expect": {"max_tool_calls": 3}},
    {
        "name": "store-pass",
        "expect": {"store": {"research-notes": {"note:x": NOTE_X, "note:y": None}}},
    },
    {
        "name": "store-fail-field",
        "expect": {"store": {"research-notes": {"note:x": {"topic": "wind"}}}},
    },
    {
        "name": "store-fail-missing",
        "expect": {"store": {"research-notes": {"note:y": {"topic": "solar"}}}},
    },
    {"name": "store-fail-exists", "expect": {"store": {"research-notes": {"note:x": None}}}},
    {
        "name": "store-other-scope",
        "claims": {"scope": "acme"},
        "expect": {"store": {"research-notes": {"note:x": {"topic": "solar"}}}},
    },
    {"name": "lat-pass", "expect": {"max_latency_ms": 600_000}},
    {"name": "lat-fail", "message": "slow", "expect": {"max_latency_ms": 1}},
    {"name": "tok-pass", "expect": {"max_tokens": 1_000_000}},
    {"name": "tok-fail", "expect": {"max_tokens": 1}},
    {
        "name": "multi-turn",
        "turns": ["first", "second"],
        "expect": {
            "reply_contains": "verdict",
            "max_tool_calls": 8,
            "tools_called": ["call_subagent", "load_knowledge", "call_subagent"],
        },
    },
    {"name": "smoke"},
]
"""One case per expectation passing and failing (a JSON suite); the message is `Q` unless set."""


async def lead(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Step | str:
    """The lead looks the term up, keeps a note, asks the researcher, then answers; the
    researcher looks it up too. A message `slow` takes a little longer to answer."""
    task = [m for m in messages if m["role"] == "user"][-1]["content"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    rounds = sum(
        1 for m in messages[last_user:] if m["role"] == "assistant" and m.get("tool_calls")
    )
    if task == "Look it up":
        return tool_call("load_knowledge", {"name": "glossary"}) if rounds == 0 else "Found it."
    plan = [
        tool_call("load_knowledge", {"name": "glossary"}),
        tool_call("store__research_notes__put", NOTE),
        tool_call("call_subagent", {"calls": [{"subagent": "researcher", "task": "Look it up"}]}),
    ]
    if rounds < len(plan):
        return plan[rounds]
    if task == "slow":
        await anyio.sleep(0.05)
    return REPLY


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> EvalRun:
    root = copy_example_repo(tmp_path_factory.mktemp("expectations") / "repo")
    shutil.rmtree(root / "evals")
    (root / "evals").mkdir()
    cases = [case if "turns" in case else {"message": "Q", **case} for case in CASES]
    suite = {"agent": "default", "cases": cases}
    (root / "evals/expect.json").write_text(json.dumps(suite), encoding="utf-8")
    loaded = load_repo(root, environ={}, evals=True)
    assert loaded.bundle is not None, loaded.errors

    async def go() -> EvalRun:
        return await run_evals(loaded.bundle, select(loaded.suites), model=FunctionModel(lead))

    return anyio.run(go)


def case(run: EvalRun, name: str) -> CaseRecord:
    return next(case for case in run.cases if case.name == name)


@pytest.mark.parametrize(
    "name",
    [
        "rc-pass",
        "rnc-pass",
        "rm-pass",
        "tc-pass",
        "tnc-pass",
        "sc-pass",
        "dr-pass",
        "mtc-pass",
        "store-pass",
        "store-other-scope",
        "lat-pass",
        "tok-pass",
        "multi-turn",
        "smoke",
    ],
)
def test_an_expectation_that_holds_passes(run, name):
    found = case(run, name)

    assert found.status == "passed", found.attempts[0].failures
    assert found.attempts[0].failures == ()


@pytest.mark.parametrize(
    ("name", "expectation", "message"),
    [
        (
            "rc-fail",
            "reply_contains",
            f"expected the reply to contain 'wind' (ignoring case); the reply was {REPLY!r}",
        ),
        (
            "rnc-fail",
            "reply_not_contains",
            f"expected the reply not to contain 'Verdict' (ignoring case); the reply was {REPLY!r}",
        ),
        (
            "rm-fail",
            "reply_matches",
            f"expected the reply to match /^Wind/; the reply was {REPLY!r}",
        ),
        (
            "tc-fail",
            "tools_called",
            "expected the tools [call_subagent, store__research_notes__put] to be called in this "
            "order; store__research_notes__put was not called after call_subagent. "
            f"The trajectory was {TRAJECTORY}",
        ),
        (
            "tnc-fail",
            "tools_not_called",
            "expected 'store__research_notes__put' never to be called; "
            f"the trajectory was {TRAJECTORY}",
        ),
        (
            "sc-fail",
            "subagents_called",
            "expected the specialists 'writer' to run; the specialists that ran: [researcher]",
        ),
        (
            "dr-fail",
            "done_reason",
            "expected the last turn to end with 'stop_execution'; it ended with 'model_stop'",
        ),
        (
            "mtc-fail",
            "max_tool_calls",
            f"expected at most 3 tool call(s); the case made 4: {TRAJECTORY}",
        ),
        (
            "store-fail-field",
            "store",
            'research-notes \'note:x\': expected topic = "wind"; it is "solar"',
        ),
        (
            "store-fail-missing",
            "store",
            'research-notes \'note:y\' should exist with {"topic": "solar"}; it does not '
            "(the documents of research-notes: 'note:x')",
        ),
        ("store-fail-exists", "store", "research-notes 'note:x' should not exist; it is {"),
        ("lat-fail", "max_latency_ms", "expected every turn to answer within 1 ms; it took "),
        ("tok-fail", "max_tokens", "expected at most 1 tokens; the case used "),
    ],
)
def test_an_expectation_that_does_not_hold_fails_saying_what_happened(
    run, name, expectation, message
):
    found = case(run, name)

    assert found.status == "failed"
    (failure,) = found.attempts[0].failures
    assert failure.expectation == expectation
    assert failure.message.startswith(message), failure.message


def test_the_trajectory_keeps_every_call_with_its_agent_and_status(run):
    attempt = case(run, "smoke").attempts[0]

    assert [(use.name, use.agent, use.status) for use in attempt.trajectory] == [
        ("load_knowledge", "default", "ok"),
        ("store__research_notes__put", "default", "ok"),
        ("call_subagent", "default", "ok"),
        ("load_knowledge", "researcher", "ok"),
    ]
    assert (attempt.subagents, attempt.done_reason, attempt.replies) == (
        ("researcher",),
        "model_stop",
        (REPLY,),
    )
    assert attempt.usage.input > 0 and attempt.usage.output > 0
    assert attempt.models == ("function-model",)


def test_a_multi_turn_case_keeps_one_session_and_a_reply_and_latency_per_turn(run):
    attempt = case(run, "multi-turn").attempts[0]

    assert attempt.replies == (REPLY, REPLY)
    assert len(attempt.latency_ms) == 2
    assert [use.name for use in attempt.trajectory].count("call_subagent") == 2


def test_every_failed_expectation_of_a_case_is_listed(tmp_path):
    root = copy_example_repo(tmp_path / "repo")
    (root / "evals/two.yaml").write_text(
        "cases:\n  - name: two\n    message: Q\n    expect:\n"
        "      reply_contains: wind\n      max_tool_calls: 0\n      done_reason: error\n",
        encoding="utf-8",
    )
    loaded = load_repo(root, environ={}, evals=True)

    async def go() -> EvalRun:
        return await run_evals(
            loaded.bundle, select(loaded.suites, ["two"]), model=FunctionModel(lead)
        )

    (found,) = anyio.run(go).cases

    expectations = [failure.expectation for failure in found.attempts[0].failures]
    assert expectations == ["reply_contains", "done_reason", "max_tool_calls"]


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1.0, True),
        (True, 1, False),
        (False, 0, False),
        ("1", 1, False),
        ([1, {"a": True}], [1.0, {"a": True}], True),
        ({"a": 1}, {"a": 1, "b": None}, False),
        (None, None, True),
    ],
)
def test_store_values_compare_as_json(a, b, equal):
    assert json_equal(a, b) is equal
