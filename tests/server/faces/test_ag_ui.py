"""The AG-UI face (SPEC 24): a run's event stream, parsed with the `ag-ui-protocol`
package's own types."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from ag_ui.core import Event, EventType, RunAgentInput, UserMessage
from pydantic import TypeAdapter

from runtime.testing import ScriptedModel, tool_call
from tests.server.faces.conftest import ANN_KEY, BOB_KEY, Served

pytestmark = pytest.mark.anyio

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def run_input(thread: str, run: str, *said: str, **more: Any) -> dict[str, Any]:
    messages = [UserMessage(id=f"u{i}", content=text) for i, text in enumerate(said)]
    given = RunAgentInput(
        thread_id=thread, run_id=run, messages=messages, state=None, tools=[], context=[], **more
    )
    return given.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run(
    served: Served, token: str, agent: str, body: dict[str, Any]
) -> tuple[int, list[Any]]:
    """POST a run; its status and its events, each parsed as AG-UI's types."""
    async with httpx.AsyncClient(base_url=served.url, headers=served.headers(token)) as http:
        response = await http.post(f"/ag-ui/{agent}", json=body, timeout=30)
    assert response.headers["content-type"].startswith("text/event-stream"), response.text
    frames = [frame for frame in response.text.split("\n\n") if frame.strip()]
    parsed = [EVENTS.validate_json(frame.removeprefix("data: ")) for frame in frames]
    return response.status_code, parsed


def kinds(parsed: list[Any]) -> list[str]:
    return [event.type.value for event in parsed]


async def test_a_run_streams_the_event_sequence_of_spec_24(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("echo", {"word": "hi"}, text="Let me echo. ")
    scripted_model.reply("Echoed it.")

    status, parsed = await run(faces, ANN_KEY, "counter", run_input("t1", "r1", "echo hi"))

    assert status == 200
    sequence = [kind for i, kind in enumerate(kinds(parsed)) if kinds(parsed)[i - 1 : i] != [kind]]
    assert sequence == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    started, finished = parsed[0], parsed[-1]
    assert (started.thread_id, started.run_id) == ("t1", "r1")
    assert (finished.thread_id, finished.run_id) == ("t1", "r1")
    assert finished.outcome.type == "success"
    assert finished.result["done_reason"] == "max_tool_calls"
    call = next(e for e in parsed if e.type == EventType.TOOL_CALL_START)
    arguments = next(e for e in parsed if e.type == EventType.TOOL_CALL_ARGS)
    result = next(e for e in parsed if e.type == EventType.TOOL_CALL_RESULT)
    assert call.tool_call_name == "echo" and json.loads(arguments.delta) == {"word": "hi"}
    assert result.tool_call_id == call.tool_call_id
    assert json.loads(result.content) == {"echo": {"word": "hi"}}
    text = "".join(e.delta for e in parsed if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert text == "Let me echo. Echoed it."


async def test_specialist_runs_are_steps(faces: Served, scripted_model: ScriptedModel) -> None:
    calls = {"calls": [{"subagent": "helper", "task": "look it up"}]}
    scripted_model.tool_call("call_subagent", calls)
    scripted_model.reply("Found it.")  # the specialist
    scripted_model.reply("The helper found it.")

    _, parsed = await run(faces, ANN_KEY, "default", run_input("t2", "r1", "ask the helper"))

    steps = [e for e in parsed if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)]
    assert [e.type.value for e in steps] == ["STEP_STARTED", "STEP_FINISHED"]
    assert steps[0].step_name == steps[1].step_name and steps[0].step_name.startswith("helper")
    text = "".join(e.delta for e in parsed if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert text == "The helper found it."  # the specialist's words are its result


async def test_a_confirmation_is_an_interrupt_resumed_by_the_next_run(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("charge", {"amount": 4}, id="call_4").reply("Charged 4.")

    _, first = await run(faces, ANN_KEY, "writer", run_input("t3", "r1", "charge 4"))
    interrupt = first[-1].outcome.interrupts[0]
    # The resuming run repeats the earlier messages: they are not a new turn.
    resume = [{"interruptId": interrupt.id, "status": "resolved", "payload": {"approve": True}}]
    _, second = await run(
        faces, ANN_KEY, "writer", run_input("t3", "r2", "charge 4", resume=resume)
    )

    assert first[-1].type == EventType.RUN_FINISHED
    assert first[-1].outcome.type == "interrupt"
    assert interrupt.id == "call_4" and interrupt.tool_call_id == "call_4"
    assert interrupt.reason == "confirmation_required"
    assert interrupt.response_schema["required"] == ["approve"]
    assert second[-1].outcome.type == "success"
    result = next(e for e in second if e.type == EventType.TOOL_CALL_RESULT)
    assert json.loads(result.content) == {"charged": 4}
    assert len(scripted_model.requests) == 2
    users = [m for m in scripted_model.requests[1].messages if m["role"] == "user"]
    assert [m["content"] for m in users] == ["charge 4"]


async def test_a_resume_payload_is_strict_and_approves_nothing_by_coercion(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("charge", {"amount": 1}, id="call_1")
    await run(faces, ANN_KEY, "writer", run_input("t4", "r1", "charge 1"))
    resume = [{"interruptId": "call_1", "status": "resolved", "payload": {"approve": "yes"}}]

    status, parsed = await run(faces, ANN_KEY, "writer", run_input("t4", "r2", "x", resume=resume))

    assert status == 422 and kinds(parsed) == ["RUN_ERROR"]
    assert "approve" in parsed[0].message
    session = faces.runtime.thread_session("t4", claims={"sub": "ann", "scope": "acme"})
    turns = await faces.runtime.turns(session, operator=True)
    assert turns[-1].done is not None and turns[-1].done.reason == "awaiting_confirmation"


async def test_a_choice_is_an_interrupt_answered_by_a_resume_payload(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.enqueue(tool_call("ask_choice", {"question": "Which?", "options": ["a", "b"]}))
    scripted_model.reply("You chose b.")

    _, first = await run(faces, ANN_KEY, "default", run_input("t5", "r1", "pick one"))
    interrupt = first[-1].outcome.interrupts[0]
    resume = [{"interruptId": interrupt.id, "status": "resolved", "payload": {"choice": "b"}}]
    _, second = await run(faces, ANN_KEY, "default", run_input("t5", "r2", resume=resume))

    assert interrupt.reason == "choice"
    assert interrupt.response_schema["properties"]["choice"]["enum"] == ["a", "b"]
    assert scripted_model.requests[-1].last_user == "b"
    assert second[-1].outcome.type == "success"


async def test_two_owners_identical_thread_ids_never_meet(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Ann's thread.").reply("Bob's thread.")

    await run(faces, ANN_KEY, "default", run_input("shared", "r1", "ann's secret"))
    _, bob = await run(faces, BOB_KEY, "default", run_input("shared", "r1", "what was said?"))

    said = [m["content"] for m in scripted_model.requests[1].messages if m["role"] == "user"]
    assert said == ["what was said?"]
    assert bob[-1].result["session_id"] != faces.runtime.thread_session(
        "shared", claims={"sub": "ann", "scope": "acme"}
    )


async def test_a_thread_goes_on_and_repeated_messages_are_not_new_turns(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("First.").reply("Second.")

    await run(faces, ANN_KEY, "default", run_input("t6", "r1", "one"))
    await run(faces, ANN_KEY, "default", run_input("t6", "r2", "one", "two"))

    said = [m["content"] for m in scripted_model.requests[1].messages if m["role"] == "user"]
    assert said == ["one", "two"]


@pytest.mark.parametrize(
    ("agent", "body", "status", "fragment"),
    [
        ("default", {"threadId": "t"}, 422, "runId"),
        ("default", {"threadId": "t", "runId": "r", "messages": "x"}, 422, "messages"),
        ("default", {"threadId": "t", "runId": "r", "messages": []}, 400, "last message"),
        ("main", {"threadId": "t", "runId": "r", "messages": []}, 404, "no agent"),
        (
            "default",
            {
                "threadId": "t",
                "runId": "r",
                "messages": [{"id": "1", "role": "user", "content": "x"}],
                "tools": [{"name": "f", "description": "d", "parameters": {}}],
            },
            400,
            "come from its repo",
        ),
    ],
)
async def test_malformed_input_is_a_run_error_never_a_5xx(
    faces: Served, agent: str, body: dict[str, Any], status: int, fragment: str
) -> None:
    got, parsed = await run(faces, ANN_KEY, agent, body)

    assert got == status
    assert kinds(parsed) == ["RUN_ERROR"] and fragment in parsed[0].message


async def test_no_credential_is_a_run_error_401(faces: Served) -> None:
    got, parsed = await run(faces, "", "default", run_input("t", "r", "hi"))

    assert got == 401 and kinds(parsed) == ["RUN_ERROR"]
