"""One agent, two providers: the same scripted conversations through real turns against the
scripted OpenAI server and the scripted Anthropic server give the same events (SPEC 25:
the same tools, events, budgets and confirmations whichever provider answers).

Each conversation runs once per provider, the repo differing only in `models.main`'s
`provider`; the events are compared with what is the provider's own left out (ids of the
session and runs, timings, the bundle version, prompt-cache counts, which only Anthropic
reports), and each provider's server checks its requests as its real API would.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import Runtime
from runtime.events import Event
from runtime.models import ToolResultMessage, UserMessage
from runtime.testing import (
    RecordedRequest,
    ScriptedAnthropic,
    ScriptedModel,
    ScriptedServer,
    Step,
    cut_in_tool_call,
    tool_call,
    tool_calls,
)
from tests.conftest import write_repo

pytestmark = pytest.mark.anyio

PROVIDERS = ("openai", "anthropic")
LOOKUP = {
    "tools/lookup/tool.json": {
        "description": "Look an order up.",
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
        },
    },
    "tools/lookup/handler.py": (
        "async def handler(args, ctx):\n    return {'id': args['id'], 'status': 'shipped'}\n"
    ),
}
CHARGE = {
    "tools/charge/tool.json": {
        "description": "Charge a card.",
        "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
        "confirm": True,
    },
    "tools/charge/handler.py": (
        "async def handler(args, ctx):\n    return {'charged': args['amount']}\n"
    ),
}

Turns = Callable[[Runtime], Awaitable[list[list[Event]]]]


@contextlib.contextmanager
def scripted(provider: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedServer]:
    """The provider's scripted server, the session model's endpoint pointed at it."""
    server: ScriptedServer = ScriptedModel() if provider == "openai" else ScriptedAnthropic()
    with server:
        variable = "OPENAI_BASE_URL" if provider == "openai" else "ANTHROPIC_BASE_URL"
        monkeypatch.setenv(variable, server.base_url)
        monkeypatch.setenv("MODEL_MAIN", "scripted")
        yield server
        server.assert_done()


async def converse(
    root: Path,
    files: dict[str, Any],
    script: Callable[[ScriptedServer], None],
    turns: Turns,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, tuple[list[list[Event]], list[RecordedRequest]]]:
    """Run `turns` over the repo once per provider, each server scripted by `script`."""
    ran = {}
    for provider in PROVIDERS:
        repo = write_repo(
            root / provider,
            {
                "amodal.json": {
                    "name": "conformance",
                    "version": "1",
                    "models": {"main": {"model": "scripted", "provider": provider}},
                },
                "agents/default/AGENT.md": "You look orders up.\n",
                **files,
            },
        )
        with scripted(provider, monkeypatch) as server:
            script(server)
            async with Runtime.open(repo, database=str(root / f"{provider}.db")) as rt:
                ran[provider] = (await turns(rt), server.requests)
    return ran


def shape(events: list[Event]) -> list[dict[str, Any]]:
    """Events without what differs between two runs of one conversation: session and run
    ids (a run is named by its agent and label), timings, the bundle version, and the
    prompt-cache counts, how text is cut into deltas. Specialists' events are grouped by run,
    each in its own order."""
    names: dict[str, str] = {}
    shaped: list[tuple[str, dict[str, Any]]] = []
    for event in events:
        body = event.to_json()
        if body["type"] == "session":
            names[body["run_id"]] = "root"
        if body["type"] == "subagent_start":
            names[body["run_id"]] = f"{body['subagent']}: {body['label']}"
        run = names.get(body.pop("run_id"), "?")
        for key in ("session_id", "bundle_version", "duration_ms", "parent_run_id"):
            body.pop(key, None)
        if "usage" in body:
            body["usage"] = {k: body["usage"][k] for k in ("input", "output")}
        shaped.append((run, body))
    shaped.sort(key=lambda item: item[0] != "root")  # stable: each run keeps its order
    merged: list[dict[str, Any]] = []
    for run, body in shaped:  # how text is cut into deltas depends on timing
        last = merged[-1] if merged else {}
        if body["type"] == last.get("type") == "text_delta" and last["run"] == run:
            last["text"] += body["text"]
        else:
            merged.append({"run": run, **body})
    return merged


def same_events(ran: dict[str, tuple[list[list[Event]], list[RecordedRequest]]]) -> list[Any]:
    """The turns' shaped events, asserted equal on both providers."""
    openai, anthropic = ([shape(turn) for turn in ran[p][0]] for p in PROVIDERS)
    assert anthropic == openai
    return openai


def one_turn(message: str, **request: Any) -> Turns:
    async def turns(rt: Runtime) -> list[list[Event]]:
        return [[event async for event in rt.stream(message, operator=True, **request)]]

    return turns


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


async def test_a_text_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = await converse(
        tmp_path, {}, lambda s: s.reply("Hello! How can I help?"), one_turn("hi"), monkeypatch
    )
    (turn,) = same_events(ran)
    assert types(turn) == ["session", "text_delta", "usage", "done"]
    assert turn[-1]["reason"] == "model_stop"


async def test_a_tool_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {**LOOKUP, "agents/default/agent.json": {"tools": ["lookup"]}}

    def script(server: ScriptedServer) -> None:
        server.tool_call("lookup", {"id": 7}).reply("Order 7 has shipped.")

    ran = await converse(tmp_path, files, script, one_turn("Where is order 7?"), monkeypatch)
    (turn,) = same_events(ran)
    assert types(turn) == [
        "session", "usage", "tool_call", "tool_result", "text_delta", "usage", "done"
    ]  # fmt: skip
    assert turn[3]["result"] == {"id": 7, "status": "shipped"}
    for provider in PROVIDERS:  # the model read the result, on either wire
        result = ran[provider][1][1].conversation[-1]
        assert isinstance(result, ToolResultMessage) and "shipped" in result.content


async def test_parallel_calls_of_one_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {**LOOKUP, "agents/default/agent.json": {"tools": ["lookup"]}}

    def script(server: ScriptedServer) -> None:
        calls = [("lookup", {"id": 1}), ("lookup", {"id": 2}), ("lookup", {"id": 3})]
        server.enqueue(tool_calls(calls, text="Checking all three."))
        server.reply("All three have shipped.")

    ran = await converse(tmp_path, files, script, one_turn("Orders 1, 2, 3?"), monkeypatch)
    (turn,) = same_events(ran)
    results = [event for event in turn if event["type"] == "tool_result"]
    assert [event["result"]["id"] for event in results] == [1, 2, 3]
    for provider in PROVIDERS:
        answered = ran[provider][1][1].conversation
        assert sum(isinstance(m, ToolResultMessage) for m in answered) == 3


def delegating(request: RecordedRequest) -> Step | str:
    """The lead asks both specialists at once, then combines; each specialist answers."""
    system = request.system or ""
    if "You check stock." in system:
        return "Stock: 7 left."
    if "You check prices." in system:
        return "Price: 12 EUR."
    if not any(isinstance(m, ToolResultMessage) for m in request.conversation):
        tasks = [
            {"subagent": "stock", "task": "How many are left?"},
            {"subagent": "prices", "task": "What does it cost?"},
        ]
        return tool_call("call_subagent", {"calls": tasks})
    return "7 left at 12 EUR."


async def test_delegation_to_two_specialists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {
        "agents/default/agent.json": {"subagents": ["stock", "prices"]},
        "agents/stock/AGENT.md": "You check stock.\n",
        "agents/prices/AGENT.md": "You check prices.\n",
    }
    ran = await converse(
        tmp_path, files, lambda s: s.respond(delegating), one_turn("Stock and price?"), monkeypatch
    )
    (turn,) = same_events(ran)
    started = sorted(e["run"] for e in turn if e["type"] == "subagent_start")
    assert started == ["prices: What does it cost?", "stock: How many are left?"]
    (result,) = [e for e in turn if e["type"] == "tool_result"]
    assert sorted(r["result"] for r in result["result"]["results"]) == [
        "Price: 12 EUR.",
        "Stock: 7 left.",
    ]
    assert [e for e in turn if e["run"] == "root"][-1]["reason"] == "model_stop"


@pytest.mark.parametrize("approve", [True, False])
async def test_a_confirmation_and_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, approve: bool
) -> None:
    files = {**CHARGE, "agents/default/agent.json": {"tools": ["charge"]}}

    def script(server: ScriptedServer) -> None:
        server.tool_call("charge", {"amount": 5}, id="charge_1")
        server.reply("Charged 5." if approve else "I did not charge anything.")

    async def turns(rt: Runtime) -> list[list[Event]]:
        first = [event async for event in rt.stream("Charge 5", operator=True)]
        session = first[0].session_id
        result = await rt.confirm(session, "charge_1", approve=approve, operator=True)
        return [first, list(result.events)]

    ran = await converse(tmp_path, files, script, turns, monkeypatch)
    asked, answered = same_events(ran)
    assert asked[-1]["reason"] == "awaiting_confirmation"
    assert [e["call_id"] for e in asked if e["type"] == "confirmation_required"] == ["charge_1"]
    (result,) = [e for e in answered if e["type"] == "tool_result"]
    assert result["status"] == ("ok" if approve else "denied")
    for provider in PROVIDERS:
        last = ran[provider][1][-1].conversation[-1]
        assert isinstance(last, ToolResultMessage)
        assert ("denied" in last.content) is not approve
    last = ran["anthropic"][1][-1].body["messages"][-1]["content"][0]  # Anthropic's flag
    assert last["type"] == "tool_result" and last.get("is_error", False) is not approve


async def test_a_spent_tool_budget_ends_with_an_answer_without_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {**LOOKUP, "agents/default/agent.json": {"tools": ["lookup"], "maxToolCalls": 1}}

    def script(server: ScriptedServer) -> None:
        server.tool_call("lookup", {"id": 1}).reply("Order 1 has shipped; 2 is left unchecked.")

    ran = await converse(tmp_path, files, script, one_turn("Orders 1 and 2?"), monkeypatch)
    (turn,) = same_events(ran)
    assert turn[-1]["reason"] == "max_tool_calls"
    openai_last, anthropic_last = (ran[p][1][-1] for p in PROVIDERS)
    assert openai_last.tools == []  # no tools offered on the last call...
    # ...and on Anthropic's wire the tools used are named, with none allowed: the API
    # refuses tool blocks in a request that defines no tools.
    assert anthropic_last.body["tool_choice"] == {"type": "none"}
    assert anthropic_last.tools == ["lookup"]
    note = anthropic_last.conversation[-1]
    assert isinstance(note, UserMessage) and "Do not call tools" in note.text


async def test_the_research_desk_behaves_the_same_on_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import PROJECT_ROOT, copy_example_repo
    from tests.evals._desk_model import desk_responder

    config = json.loads((PROJECT_ROOT / "amodal.json").read_text(encoding="utf-8"))
    messages = ("Hello!", "Research what we know about solar output at plant A.")
    ran = {}
    for provider in PROVIDERS:
        repo = copy_example_repo(tmp_path / provider)
        main = {"model": "scripted", "provider": provider}
        (repo / "amodal.json").write_text(json.dumps({**config, "models": {"main": main}}))
        with scripted(provider, monkeypatch) as server:
            server.respond(desk_responder)
            async with Runtime.open(repo, database=str(tmp_path / f"{provider}.db")) as rt:
                turns = []
                for message in messages:
                    turns.append([e async for e in rt.stream(message, agent="default")])
                ran[provider] = (turns, server.requests)
    greeting, research = same_events(ran)
    assert [e["name"] for e in greeting if e["type"] == "tool_call"] == [
        "load_skill",
        "word_count",
    ]
    assert any(e["type"] == "subagent_start" and e["subagent"] == "researcher" for e in research)
    assert [e for e in research if e["run"] == "root"][-1]["reason"] == "model_stop"
    assert greeting[-1]["reason"] == "model_stop"


async def test_anthropic_reads_the_stable_prefix_from_its_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {**LOOKUP, "agents/default/agent.json": {"tools": ["lookup"]}}

    def script(server: ScriptedServer) -> None:
        server.tool_call("lookup", {"id": 7}).reply("Shipped.").reply("Still shipped.")

    async def turns(rt: Runtime) -> list[list[Event]]:
        first = [event async for event in rt.stream("Order 7?", operator=True)]
        session = first[0].session_id
        again = [e async for e in rt.stream("And now?", session_id=session, operator=True)]
        return [first, again]

    ran = await converse(tmp_path, files, script, turns, monkeypatch)
    same_events(ran)
    usage = [e.usage for turn in ran["anthropic"][0] for e in turn if e.type == "usage"]
    # The first call writes the prefix; every later one reads at least the system prompt
    # and the tools (the same bytes on every call of the session).
    assert usage[0].cached_tokens == 0 and usage[0].cache_write_tokens > 0
    assert all(u.cached_tokens >= usage[0].cache_write_tokens // 2 for u in usage[1:])
    openai_usage = [e.usage for turn in ran["openai"][0] for e in turn if e.type == "usage"]
    assert [u.input_tokens for u in usage] == [u.input_tokens for u in openai_usage]


async def test_a_tool_call_cut_off_mid_stream_is_asked_again_and_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marking = (
        "from pathlib import Path\n\n"
        "async def handler(args, ctx):\n"
        "    Path(__file__).with_name('ran.log').open('a').write('ran\\n')\n"
        "    return {'charged': args['amount']}\n"
    )
    files = {
        "tools/charge/tool.json": CHARGE["tools/charge/tool.json"] | {"confirm": False},
        "tools/charge/handler.py": marking,
        "agents/default/agent.json": {"tools": ["charge"]},
    }

    def script(server: ScriptedServer) -> None:
        server.enqueue(cut_in_tool_call(tool_call("charge", {"amount": 5})))
        server.reply("I have not charged anything.")

    ran = await converse(tmp_path, files, script, one_turn("Charge 5"), monkeypatch)
    (turn,) = same_events(ran)
    assert types(turn) == ["session", "text_delta", "usage", "done"]
    for provider in PROVIDERS:
        assert len(ran[provider][1]) == 2  # the cut call was asked again
        assert not (tmp_path / provider / "tools" / "charge" / "ran.log").exists()
