"""Long sessions (SPEC 20): compaction keeps every call inside the model's window, the log
stays whole, and the view is the same after a restart; through the runtime and the
scripted model, whose reported input is the characters it received, divided by four."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import events
from runtime.api import Runtime
from runtime.engine.compaction import LONGEST_MASKED_VIEW, SUMMARY_PROMPT
from runtime.engine.transcript import SUMMARY_HEADING
from runtime.observe import Compacted, ModelCallStarted, RunObserver
from runtime.testing import RecordedRequest, ScriptedModel, Step, reply, tool_call
from runtime.testing import _steps as steps
from tests._harness import Harness, done, of_type

pytestmark = pytest.mark.anyio

WINDOW = 6_000
ANSWER = 1_000
ROOM = WINDOW - ANSWER  # what a call may send


def repo(result_chars: int, **compaction: Any) -> dict[str, Any]:
    """A repo whose `fetch` returns `result_chars` characters, on a model with a small window."""
    config: dict[str, Any] = {
        "name": "long",
        "version": "1",
        "models": {
            "main": {"model": "scripted", "contextWindow": WINDOW, "maxOutputTokens": ANSWER}
        },
    }
    if compaction:
        config["compaction"] = compaction.get("value", compaction)
    return {
        "amodal.json": config,
        "tools/fetch/tool.json": {
            "description": "Fetch a page.",
            "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}},
        },
        "tools/fetch/handler.py": (
            "async def handler(args, ctx):\n"
            f"    return 'page %d: ' % args['page'] + 'w' * {result_chars}\n"
        ),
        "agents/default/agent.json": {"tools": ["fetch"], "maxToolCalls": 10},
    }


def is_summariser(request: RecordedRequest) -> bool:
    return (request.system or "").startswith(SUMMARY_PROMPT[:40])


def desk(summary: Callable[[RecordedRequest], Step] | None = None) -> Callable[..., Step]:
    """Each user message fetches its page, then the agent answers; the summariser (the simple
    tier, here the same endpoint) answers with `summary`."""

    def answer(request: RecordedRequest) -> Step:
        if is_summariser(request):
            return (
                summary(request) if summary else reply("The person read pages; page 3 said 4217.")
            )
        last = request.messages[-1]
        if last["role"] == "user":
            return tool_call("fetch", {"page": int(last["content"].split()[-1])})
        return reply("Read it.")

    return answer


def sent_tokens(request: RecordedRequest) -> int:
    return steps.token_counts(request.messages, reply("")).input_tokens


def conversation(request: RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request.messages if m["role"] != "system"]


async def talk(harness: Harness, turns: range, session_id: str | None = None) -> list[Any]:
    streamed: list[Any] = []
    for number in turns:
        got = await harness.chat(f"read page {number}", session_id=session_id)
        assert done(got).reason == "model_stop", got
        session_id = got[0].session_id
        streamed += got
    return streamed


@pytest.fixture
def long_session(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any]
) -> Callable[..., Any]:
    async def make(result_chars: int, **compaction: Any) -> Harness:
        return await harness_for(make_repo(repo(result_chars, **compaction)))  # type: ignore[no-any-return]

    return make


async def test_old_tool_results_are_masked_first_and_the_log_keeps_them_whole(
    long_session: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    harness = await long_session(4_000)
    scripted_model.respond(desk())
    streamed = await talk(harness, range(1, 8))
    compactions = of_type(streamed, events.Compaction)
    assert compactions and {c.stage for c in compactions} == {"mask"}
    assert not any(is_summariser(r) for r in scripted_model.requests)
    calls = [r for r in scripted_model.requests if not is_summariser(r)]
    assert all(sent_tokens(r) <= ROOM for r in calls)
    last = conversation(calls[-1])
    tools = [m["content"] for m in last if m["role"] == "tool"]
    assert tools[0].startswith("[result of fetch elided: ") and tools[-1].startswith("page 7")
    first = compactions[0]
    assert first.before_tokens > first.after_tokens and first.covered >= 1
    # The log still has every result, whole.
    logged = (await harness.session(streamed[0].session_id)).entries
    results = [e for e in logged if e.type == "tool_result"]
    assert len(results) == 7 and all(len(e.data["content"]) > 4_000 for e in results)


async def test_a_summary_replaces_the_older_turns_when_masking_is_not_enough(
    long_session: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    harness = await long_session(1_900)  # under the mask's 2,000 characters: only a summary helps
    scripted_model.respond(desk())
    streamed = await talk(harness, range(1, 12))
    stages = [c.stage for c in of_type(streamed, events.Compaction)]
    assert "summary" in stages
    summariser = next(r for r in scripted_model.requests if is_summariser(r))
    assert "Person: read page 1" in conversation(summariser)[0]["content"]
    calls = [r for r in scripted_model.requests if not is_summariser(r)]
    assert all(sent_tokens(r) <= ROOM for r in calls)
    after = conversation(calls[-1])
    assert after[0]["role"] == "user" and after[0]["content"].startswith(SUMMARY_HEADING)
    assert "page 3 said 4217" in after[0]["content"]  # what turn 3 found, from the summary
    assert after[1]["role"] == "user"  # the cut is at a user message: no call without its result
    answered = {m["tool_call_id"] for m in after if m["role"] == "tool"}
    asked = {c["id"] for m in after if m["role"] == "assistant" for c in m.get("tool_calls", ())}
    assert asked == answered


async def test_the_view_is_the_same_on_a_new_runtime_over_the_same_database(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    root = make_repo(repo(1_900))
    database = str(tmp_path / "kept.db")
    scripted_model.respond(desk())
    async with Runtime.open(root, database=database) as first:
        harness = Harness(first)
        streamed = await talk(harness, range(1, 12))
    session_id = streamed[0].session_id
    before = conversation([r for r in scripted_model.requests if not is_summariser(r)][-1])
    async with Runtime.open(root, database=database) as restarted:
        again = await restarted.chat("read page 12", session_id=session_id, operator=True)
    calls = [r for r in scripted_model.requests if not is_summariser(r)]
    resumed = conversation(calls[-2])  # the new turn's first call
    assert resumed[0] == before[0]  # the same summary
    assert again.reason == "model_stop"


async def test_a_failing_summariser_leaves_the_masked_view_and_the_turn_goes_on(
    long_session: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    harness = await long_session(2_500, threshold=0.25)
    scripted_model.respond(desk(lambda request: steps.error(500, "summariser down")))
    streamed = await talk(harness, range(1, 8))
    stages = {c.stage for c in of_type(streamed, events.Compaction)}
    assert stages == {"mask"}
    assert any(is_summariser(r) for r in scripted_model.requests)  # it was asked, and failed
    assert not of_type(streamed, events.Error)


async def test_an_empty_summary_counts_as_a_failed_summariser(
    long_session: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    harness = await long_session(2_500, threshold=0.25)
    scripted_model.respond(desk(lambda request: reply("   ")))
    streamed = await talk(harness, range(1, 8))
    assert {c.stage for c in of_type(streamed, events.Compaction)} == {"mask"}


async def test_a_call_that_cannot_fit_ends_the_run_with_context_overflow_naming_model_and_window(
    long_session: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    harness = await long_session(30_000)  # one result larger than the whole window
    scripted_model.respond(desk())
    streamed = await harness.chat("read page 1")
    (error,) = of_type(streamed, events.Error)
    assert error.code == "context_overflow"
    assert "'scripted'" in error.message and f"{WINDOW:,}-token window" in error.message
    assert done(streamed).reason == "error"
    assert len(scripted_model.requests) == 1  # the overflowing call was never sent


async def test_compaction_false_never_compacts_and_overflows_with_a_clear_error(
    long_session: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    harness = await long_session(4_000, value=False)
    scripted_model.respond(desk())
    session_id = None
    for number in range(1, 10):
        streamed = await harness.chat(f"read page {number}", session_id=session_id)
        session_id = streamed[0].session_id
        assert not of_type(streamed, events.Compaction)
        if done(streamed).reason == "error":
            assert of_type(streamed, events.Error)[0].code == "context_overflow"
            break
    else:
        raise AssertionError("the window never filled")
    assert all(sent_tokens(r) <= ROOM for r in scripted_model.requests)


async def test_manual_compaction_summarises_now_with_the_focus_it_was_given(
    long_session: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    harness = await long_session(100)
    scripted_model.respond(desk())
    streamed = await talk(harness, range(1, 5))
    session_id = streamed[0].session_id
    compaction = await harness.runtime.compact(session_id, focus="the page numbers", operator=True)
    assert compaction is not None and compaction.stage == "summary"
    summariser = [r for r in scripted_model.requests if is_summariser(r)][-1]
    assert "keep in particular: the page numbers" in (summariser.system or "")
    await harness.chat("read page 9", session_id=session_id)
    view = conversation(scripted_model.requests[-2])
    assert view[0]["content"].startswith(SUMMARY_HEADING)
    logged = (await harness.session(session_id)).entries
    assert next(e for e in logged if e.type == "compaction").data["focus"] == "the page numbers"


async def test_nothing_to_compact_is_no_compaction(
    long_session: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    harness = await long_session(100)
    scripted_model.respond(desk())
    streamed = await talk(harness, range(1, 3))  # two turns: both kept whole
    assert await harness.runtime.compact(streamed[0].session_id, operator=True) is None
    assert not any(is_summariser(r) for r in scripted_model.requests)


async def test_a_specialist_is_never_compacted_and_fails_alone_when_it_overflows(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    files = repo(30_000)
    files["agents/default/agent.json"] = {"subagents": ["reader"]}
    files["agents/reader/AGENT.md"] = "You read pages.\n"
    files["agents/reader/agent.json"] = {"tools": ["fetch"]}
    harness = await harness_for(make_repo(files))

    def answer(request: RecordedRequest) -> Step:
        if "You read pages." in (request.system or ""):
            return tool_call("fetch", {"page": 1})
        if request.messages[-1]["role"] == "user":
            return tool_call("call_subagent", {"calls": [{"subagent": "reader", "task": "read"}]})
        return reply("The reader could not.")

    scripted_model.respond(answer)
    streamed = await harness.chat("delegate")
    (result,) = [r for r in of_type(streamed, events.ToolResult) if r.name == "call_subagent"]
    assert result.result["error"].startswith("context_overflow:")
    assert done(streamed).reason == "model_stop"
    assert not of_type(streamed, events.Compaction)


class Watching(RunObserver):
    def __init__(self) -> None:
        self.compactions: list[Compacted] = []
        self.calls: list[ModelCallStarted] = []

    def compacted(self, compaction: Compacted) -> None:
        self.compactions.append(compaction)

    def model_call_started(self, call: ModelCallStarted) -> None:
        self.calls.append(call)


async def test_observers_see_each_compaction_and_the_summarisers_call(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    watching = Watching()
    scripted_model.respond(desk())
    async with Runtime.open(
        make_repo(repo(1_900)), database=str(tmp_path / "o.db"), observers=[watching]
    ) as rt:
        await talk(Harness(rt), range(1, 12))
    assert "summary" in {c.stage for c in watching.compactions}
    assert any(c.messages[0].text.startswith(SUMMARY_PROMPT[:40]) for c in watching.calls)


async def test_a_prefix_larger_than_the_summarisers_window_is_summarised_in_chunks(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    files = repo(1_900, threshold=0.9)
    files["amodal.json"]["models"]["simple"] = {"model": "small", "contextWindow": 4_096}
    harness = await harness_for(make_repo(files))
    scripted_model.respond(desk())
    streamed = await talk(harness, range(1, 10))
    (compaction,) = of_type(streamed, events.Compaction)
    assert compaction.stage == "summary"
    summarised = [r for r in scripted_model.requests if is_summariser(r)]
    assert len(summarised) >= 2 and {r.model for r in summarised} == {"small"}
    assert all(sent_tokens(r) <= 4_096 - 1_000 for r in summarised)  # each fits its window
    later = conversation(summarised[-1])[0]["content"]
    assert later.startswith("The record so far:")  # each chunk carries the record forward


WIDE_RESULT = 2_100  # over the mask's 2,000 characters: masking alone always gets under
WIDE_CALLS = 8


def wide_repo() -> dict[str, Any]:
    """Each turn fetches `WIDE_CALLS` pages at once: a view that grows by many messages a
    turn, each result masked cheaply, on a window a little larger than three turns."""
    files = repo(WIDE_RESULT, keepRecentTurns=1)
    files["amodal.json"]["models"]["main"]["contextWindow"] = 16_000
    return files


def wide_desk(request: RecordedRequest) -> Step:
    if is_summariser(request):
        return reply("The person read pages; page 3 said 4217.")
    if request.messages[-1]["role"] == "user":
        return steps.tool_calls([("fetch", {"page": n}) for n in range(WIDE_CALLS)])
    return reply("Read it.")


async def test_a_view_that_masking_keeps_growing_is_folded_into_a_summary(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    harness = await harness_for(make_repo(wide_repo()))
    scripted_model.respond(wide_desk)
    streamed = await talk(harness, range(1, 15))
    stages = [c.stage for c in of_type(streamed, events.Compaction)]
    # Every compaction's mask would have got the call under the threshold; the summary
    # comes once the masked view passes its longest, and only then.
    assert stages[:5] == ["mask"] * 5 and stages[5] == "summary", stages
    calls = [r for r in scripted_model.requests if not is_summariser(r)]
    assert all(sent_tokens(r) <= 16_000 - ANSWER for r in calls)
    per_turn = 3 + WIDE_CALLS  # the person, the calls, their results, the answer
    longest = LONGEST_MASKED_VIEW + 2 * per_turn + 1  # what grows between two compactions
    assert max(len(conversation(r)) for r in calls) <= longest
    after = conversation(calls[-1])
    assert after[0]["content"].startswith(SUMMARY_HEADING) and len(after) < 3 * per_turn
    logged = (await harness.session(streamed[0].session_id)).entries
    assert sum(1 for e in logged if e.type == "tool_result") == 14 * WIDE_CALLS  # all kept


async def test_a_restarted_server_sends_the_same_view_masks_and_summary_alike(
    make_repo: Callable[..., Path], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    root = make_repo(wide_repo())
    database = str(tmp_path / "kept.db")
    scripted_model.respond(wide_desk)
    async with Runtime.open(root, database=database) as first:
        streamed = await talk(Harness(first), range(1, 16))  # a summary, then a mask after it
    assert [c.stage for c in of_type(streamed, events.Compaction)][-2:] == ["summary", "mask"]
    session_id = streamed[0].session_id
    before = conversation([r for r in scripted_model.requests if not is_summariser(r)][-1])
    async with Runtime.open(root, database=database) as restarted:
        again = await restarted.chat("read page 16", session_id=session_id, operator=True)
    assert again.reason == "model_stop"
    resumed = conversation([r for r in scripted_model.requests if not is_summariser(r)][-2])
    assert resumed[:-2] == before  # the whole view, message by message, elisions included
    assert resumed[-2] == {"role": "assistant", "content": "Read it."}
    assert resumed[-1] == {"role": "user", "content": "read page 16"}
