"""`Runtime`: the runtime as a library (SPEC 15), against the scripted model over loopback and
the in-process FunctionModel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest

from runtime import (
    ChatResult,
    InvalidRepoError,
    InvalidRequestError,
    Runtime,
    SessionBusyError,
    SessionNotFoundError,
    StorageClosedError,
    UnknownAgentError,
    events,
)
from runtime.models.openai import OpenAIModel
from runtime.storage import open_storage
from runtime.testing import FunctionModel, ScriptedModel, tool_call

pytestmark = pytest.mark.anyio

TEAM: dict[str, Any] = {
    "agents/default/AGENT.md": "You lead.\n",
    "agents/default/agent.json": {
        "subagents": ["helper"],
        "tools": ["charge"],
        "stores": {"notes": "read"},
    },
    "agents/helper/AGENT.md": "You help.\n",
    "agents/gated/AGENT.md": "You are gated.\n",
    "agents/gated/agent.py": (
        "def managers(ctx):\n    return ctx.claims['role'] == 'manager'\n\n"
        "agent = {'tools': [{'name': 'load_knowledge', 'conditional': managers}]}\n"
    ),
    "knowledge/faq.md": "# FAQ\n\nAsk away.\n",
    "stores/notes.json": {
        "entity": {"name": "Note", "key": "{id}", "schema": {"id": {"type": "string"}}}
    },
    "tools/charge/tool.json": {"description": "Charge a card.", "confirm": True},
    "tools/charge/handler.py": (
        "CALLS = []\n\nasync def handler(args, ctx):\n"
        "    CALLS.append(1)\n    return {'charged': len(CALLS)}\n"
    ),
}


@pytest.fixture
def team(make_repo: Callable[..., Path]) -> Path:
    return make_repo(TEAM)


async def test_a_chat_returns_the_root_reply_and_what_the_turn_came_to(
    team: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call(
        "call_subagent", {"calls": [{"subagent": "helper", "task": "draft it"}]}
    )
    scripted_model.reply("specialist words")
    scripted_model.reply("Here is the answer.")
    async with Runtime.open(team) as rt:
        result = await rt.chat("Please help")
    assert isinstance(result, ChatResult)
    # The specialist's text is in its own events, never in the root's reply.
    assert result.text == "Here is the answer."
    helper_text = [
        e.text
        for e in result.events
        if isinstance(e, events.TextDelta) and e.run_id != result.events[0].run_id
    ]
    assert "".join(helper_text) == "specialist words"
    assert (result.agent, result.reason, result.error) == ("default", "model_stop", None)
    assert result.usage.input_tokens > 0 and result.usage == result.events[-1].usage
    assert len(result.session_id) == 32


async def test_a_session_continues_and_streams_typed_events(
    team: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("first").reply("second")
    async with Runtime.open(team) as rt:
        first = await rt.chat("one")
        streamed = [event async for event in rt.stream("two", session_id=first.session_id)]
    assert isinstance(streamed[0], events.Session) and streamed[0].created is False
    assert isinstance(streamed[-1], events.Done)
    assert [m["content"] for m in scripted_model.requests[1].messages if m["role"] == "user"] == [
        "one",
        "two",
    ]


async def test_stopping_a_stream_early_cancels_the_turn_and_frees_the_session(
    team: Path,
) -> None:
    slow = ScriptedModel(stream_delay=0.05).start()
    try:
        slow.reply("one two three four five six seven eight")
        slow.reply("again")
        client = openai.AsyncOpenAI(base_url=slow.base_url, api_key="k", max_retries=0)
        async with Runtime.open(team, model=OpenAIModel(client, "scripted")) as rt:
            stream = rt.stream("talk")
            async for event in stream:
                if isinstance(event, events.TextDelta):
                    break
            await stream.aclose()  # type: ignore[attr-defined]
            session = event.session_id
            # The turn is over: the session takes a new one at once.
            again = await rt.chat("and now?", session_id=session)
            assert again.text == "again"
            logged = (await rt.session(session, operator=True)).entries
            assert "cancelled" in [e.data.get("reason") for e in logged if e.type == "done"]
        await client.close()
    finally:
        slow.close()


async def test_a_busy_session_is_refused_while_a_turn_runs(team: Path) -> None:
    release = anyio.Event()

    async def wait_then_answer(messages: list[Any], tools: list[Any]) -> str:
        await release.wait()
        return "done"

    async with Runtime.open(team, model=FunctionModel(wait_then_answer)) as rt:
        first = rt.stream("wait")
        opened = await first.__anext__()  # type: ignore[attr-defined]
        with pytest.raises(SessionBusyError):
            await rt.chat("me too", session_id=opened.session_id)
        release.set()
        rest = [event async for event in first]
        assert isinstance(rest[-1], events.Done)


async def test_a_confirmation_is_answered_through_the_api(team: Path) -> None:
    def answer(messages: list[Any], tools: list[Any]) -> Any:
        if messages[-1]["role"] == "tool":
            return "charged it"
        return tool_call("charge", {}, id="c1")

    async with Runtime.open(team, model=FunctionModel(answer)) as rt:
        waiting = await rt.chat("charge the card")
        assert waiting.reason == "awaiting_confirmation"
        asked = [e for e in waiting.events if isinstance(e, events.ConfirmationRequired)]
        assert asked[0].call_id == "c1"
        result = await rt.confirm(waiting.session_id, "c1", approve=True)
    ran = [e for e in result.events if isinstance(e, events.ToolResult)]
    assert ran[0].status == "ok" and ran[0].result == {"charged": 1}
    assert result.text == "charged it"


async def test_confirming_without_the_claims_the_session_was_started_with_says_to_pass_them(
    team: Path,
) -> None:
    def answer(messages: list[Any], tools: list[Any]) -> Any:
        if messages[-1]["role"] == "tool":
            return "charged it"
        return tool_call("charge", {}, id="c1")

    async with Runtime.open(team, model=FunctionModel(answer)) as rt:
        waiting = await rt.chat("charge the card", claims={"sub": "ada"})
        assert waiting.reason == "awaiting_confirmation"
        with pytest.raises(SessionNotFoundError) as lost:
            await rt.confirm(waiting.session_id, "c1", approve=True)
        assert "the claims it was started with (pass the same ones)" in str(lost.value)
        result = await rt.confirm(waiting.session_id, "c1", approve=True, claims={"sub": "ada"})
    assert result.text == "charged it"  # nothing was lost by the refused answer


async def test_claims_given_to_the_api_are_trusted_and_operator_means_unscoped(
    team: Path,
) -> None:
    model = FunctionModel(lambda messages, tools: "ok")
    async with Runtime.open(team, model=model) as rt:
        await rt.chat("hi", agent="gated", claims={"role": "manager"})
        await rt.chat("hi", agent="gated", claims={"role": "guest"})
        unscoped = await rt.chat("hi", operator=True, agent="main")
    assert "load_knowledge" in model.calls[0].tool_names
    assert "load_knowledge" not in model.calls[1].tool_names
    assert unscoped.agent == "main"


async def test_refusals_raise_before_anything_runs(team: Path) -> None:
    model = FunctionModel(lambda messages, tools: "never")
    async with Runtime.open(team, model=model) as rt:
        with pytest.raises(UnknownAgentError, match="known agents"):
            await rt.chat("hi", agent="nobody")
    assert model.calls == []


@pytest.mark.parametrize(
    ("message", "context", "where"),
    [
        ("\ud800", {}, "message"),
        ("hi", {"page": "a\x00b"}, "context.page"),
        ("hi", {"page\udc00": "x"}, "context: a key"),
    ],
)
async def test_a_string_that_is_no_text_is_refused_before_anything_runs(
    team: Path, message: str, context: dict[str, str], where: str
) -> None:
    # Such strings once reached the model's client and failed there, as internal_error.
    model = FunctionModel(lambda messages, tools: "never")
    async with Runtime.open(team, model=model) as rt:
        with pytest.raises(InvalidRequestError, match=where) as refused:
            await rt.chat(message, context=context)
    assert refused.value.status == 422
    assert model.calls == []


async def test_what_the_block_raises_reaches_the_caller_as_itself(team: Path) -> None:
    model = FunctionModel(lambda messages, tools: "never")
    with pytest.raises(UnknownAgentError, match="known agents"):
        async with Runtime.open(team, model=model) as rt:
            await rt.chat("hi", agent="nobody")
    with pytest.raises(KeyError, match="mine"):
        async with Runtime.open(team, model=model, watch_repo=True):
            raise KeyError("mine")


async def test_with_database_shares_the_repo_and_models_over_another_database(
    team: Path, tmp_path: Path
) -> None:
    model = FunctionModel(lambda messages, tools: "hello")
    async with Runtime.open(team, database=tmp_path / "main.db", model=model) as rt:
        async with rt.with_database(tmp_path / "other.db") as other:
            result = await other.chat("hi")
            opened = other.storage
            assert other.bundle is rt.bundle
            assert await other.storage.get_session(result.session_id) is not None
        assert await rt.storage.get_session(result.session_id) is None
        with pytest.raises(StorageClosedError):  # it opened that database: it closed it
            await opened.get_session("s")
        mine = await open_storage(tmp_path / "mine.db")
        async with rt.with_database(mine) as other:
            await other.chat("again")
        assert await mine.get_session("nope") is None  # still open: it is the caller's
        await mine.close()
        assert (await rt.chat("still open")).text == "hello"
    assert len(model.calls) == 3  # one model for all of them


async def test_agents_inspect_and_bundle_show_the_repo(team: Path) -> None:
    async with Runtime.open(team) as rt:
        assert [agent.name for agent in rt.agents()] == ["default", "gated", "helper"]
        view = rt.inspect("gated", claims={"role": "guest"})
        assert "load_knowledge" not in view["tools"]
        assert view["excluded"][0]["name"] == "load_knowledge"
        assert rt.bundle.root == team


async def test_model_takes_a_name_a_client_and_name_or_any_model(
    team: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("by name").reply("by client")
    async with Runtime.open(team, model="chosen-model") as rt:
        assert (await rt.chat("a")).text == "by name"
    client = openai.AsyncOpenAI(base_url=scripted_model.base_url, api_key="k")
    async with Runtime.open(team, model=OpenAIModel(client, "client-model")) as rt:
        assert (await rt.chat("b")).text == "by client"
    assert [r.model for r in scripted_model.requests] == ["chosen-model", "client-model"]
    await client.close()  # the runtime left the client it was given open
    with pytest.raises(TypeError, match="model= takes"):
        async with Runtime.open(team, model=42):  # type: ignore[arg-type]
            pass


async def test_leaving_the_block_closes_what_it_opened_and_nothing_else(
    team: Path, tmp_path: Path
) -> None:
    async with Runtime.open(team, model=FunctionModel(lambda m, t: "x")) as rt:
        opened = rt.storage
    with pytest.raises(StorageClosedError):
        await opened.get_session("s")
    mine = await open_storage(tmp_path / "mine.db")
    async with Runtime.open(team, database=mine, model=FunctionModel(lambda m, t: "x")) as rt:
        await rt.chat("hi")
    assert await mine.get_session("nope") is None  # still open: it is the caller's
    await mine.close()


async def test_a_repo_with_errors_does_not_open(make_repo: Callable[..., Path]) -> None:
    broken = make_repo({"agents/default/agent.json": {"maxToolCals": 3}})
    with pytest.raises(InvalidRepoError, match="maxToolCals"):
        async with Runtime.open(broken):
            pass


async def test_watching_the_repo_reloads_it(team: Path) -> None:
    async with Runtime.open(team, watch_repo=True, model=FunctionModel(lambda m, t: "x")) as rt:
        before = rt.bundle.version
        await anyio.sleep(0.2)  # the watcher is up
        reloaded = anyio.Event()
        rt.live.on_reload = lambda ok: reloaded.set()
        (team / "agents/helper/AGENT.md").write_text("You help, briefly.\n")
        with anyio.fail_after(10):
            await reloaded.wait()
        assert rt.bundle.version != before


def test_run_sync_runs_one_turn_for_a_script(team: Path, scripted_model: ScriptedModel) -> None:
    scripted_model.reply("Hello from a script.")
    result = Runtime.run_sync(team, "Hello", agent="helper")
    assert (result.text, result.agent) == ("Hello from a script.", "helper")


def _operator() -> Any:
    from runtime.surface.caller import Caller

    return Caller(operator=True)


async def test_an_in_memory_database_as_the_docs_recommend_for_tests_logs_no_warning(
    team: Path, events: Callable[[str], list[Any]]
) -> None:
    async with Runtime.open(
        team, model=FunctionModel(lambda messages, tools: "ok"), database=":memory:"
    ) as rt:
        result = await rt.chat("hi")
    assert result.text == "ok"
    assert events("storage_not_wal") == []
