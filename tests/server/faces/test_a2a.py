"""The A2A 1.0 face (SPEC 24), driven with the `a2a-sdk` package's own client."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError
from google.protobuf import json_format, struct_pb2

from runtime.testing import ScriptedModel
from tests.server.faces.conftest import ANN_KEY, BOB_KEY, OPERATOR_TOKEN, Served

pytestmark = pytest.mark.anyio


async def connect(served: Served, token: str, agent: str, *, streaming: bool = False) -> Any:
    http = served.closed_after(httpx.AsyncClient(headers=served.headers(token), timeout=30))
    factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
    return served.closed_after(await factory.create_from_url(f"{served.url}/a2a/{agent}"))


def message(text: str | None = None, data: Any = None, **ids: str) -> SendMessageRequest:
    parts = [Part(text=text)] if text is not None else []
    if data is not None:
        parts.append(Part(data=json_format.ParseDict(data, struct_pb2.Value())))
    return SendMessageRequest(
        message=Message(message_id="m", role=Role.ROLE_USER, parts=parts, **ids)
    )


async def send(client: Any, request: SendMessageRequest) -> list[StreamResponse]:
    return [response async for response in client.send_message(request)]


def final_task(responses: list[StreamResponse]) -> Task:
    assert responses[-1].HasField("task"), responses
    return responses[-1].task


def reply(task: Task) -> str:
    return "".join(part.text for part in task.artifacts[0].parts)


async def test_the_agent_card_names_the_agent_its_skills_and_its_interface(
    faces: Served,
) -> None:
    async with httpx.AsyncClient(headers=faces.headers(ANN_KEY)) as http:
        card = await A2ACardResolver(http, f"{faces.url}/a2a/writer").get_agent_card()
        default = await A2ACardResolver(http, faces.url).get_agent_card()

    assert card.name == "writer"
    assert card.description == "Writes notes.\nAnd charges cards."
    assert card.version == "2.1.0"
    assert card.capabilities.streaming
    assert [skill.name for skill in card.skills] == ["style"]
    assert card.skills[0].description == "Write plainly."
    interface = card.supported_interfaces[0]
    assert interface.url == f"{faces.url}/a2a/writer"
    assert interface.protocol_binding == "JSONRPC" and interface.protocol_version == "1.0"
    assert "bearer" in card.security_schemes
    assert default.name == "default"


async def test_a_message_gets_a_completed_task_whose_artifact_is_the_reply(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("A note, written.").reply("And another.")
    client = await connect(faces, ANN_KEY, "writer")

    task = final_task(await send(client, message("write a note")))
    again = final_task(await send(client, message("one more", context_id=task.context_id)))
    fetched = await client.get_task(GetTaskRequest(id=task.id))

    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert reply(task) == "A note, written."
    assert [m.parts[0].text for m in task.history] == ["write a note", "A note, written."]
    assert again.context_id == task.context_id and again.id != task.id
    assert reply(again) == "And another."
    assert fetched.id == task.id and fetched.status.state == TaskState.TASK_STATE_COMPLETED
    users = [m["content"] for m in scripted_model.requests[1].messages if m["role"] == "user"]
    assert users == ["write a note", "one more"]


async def test_a_confirmation_is_input_required_and_the_next_message_on_the_task_answers_it(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("charge", {"amount": 5}, id="call_5").reply("Charged 5.")
    client = await connect(faces, ANN_KEY, "writer")

    waiting = final_task(await send(client, message("charge 5")))
    ids = {"task_id": waiting.id, "context_id": waiting.context_id}
    done = final_task(await send(client, message(data={"approve": True}, **ids)))

    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    status = waiting.status.message
    assert '{"approve": true}' in status.parts[0].text
    pending = json_format.MessageToDict(status.parts[1].data)
    assert pending == {
        "kind": "confirmation",
        "call_id": "call_5",
        "tool": "charge",
        "arguments": {"amount": 5},
    }
    assert done.id == waiting.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert reply(done) == "Charged 5."
    logged = await faces.runtime.session(waiting.context_id, operator=True)
    results = [e.data for e in logged.entries if e.type == "tool_result"]
    assert [(r["name"], r["status"], r["result"]) for r in results] == [
        ("charge", "ok", {"charged": 5})
    ]


async def test_text_on_a_task_awaiting_approval_is_refused_and_approves_nothing(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("charge", {"amount": 9}, id="call_9")
    client = await connect(faces, ANN_KEY, "writer")
    waiting = final_task(await send(client, message("charge 9")))
    ids = {"task_id": waiting.id, "context_id": waiting.context_id}

    with pytest.raises(A2AError, match="approve"):
        await send(client, message("yes, approved", **ids))
    with pytest.raises(A2AError, match="approve"):
        await send(client, message(data={"approve": "yes"}, **ids))

    still = await client.get_task(GetTaskRequest(id=waiting.id))
    assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED


async def test_a_choice_is_input_required_and_plain_text_answers_it(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("ask_choice", {"question": "Which tone?", "options": ["dry", "warm"]})
    scripted_model.reply("Warm it is.")
    client = await connect(faces, ANN_KEY, "default")

    waiting = final_task(await send(client, message("write something")))
    ids = {"task_id": waiting.id, "context_id": waiting.context_id}
    done = final_task(await send(client, message("warm", **ids)))

    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert json_format.MessageToDict(waiting.status.message.parts[1].data)["options"] == [
        "dry",
        "warm",
    ]
    assert done.id == waiting.id and done.status.state == TaskState.TASK_STATE_COMPLETED
    assert scripted_model.requests[-1].last_user == "warm"


async def test_cancelling_a_waiting_task_denies_its_pending_call(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.tool_call("charge", {"amount": 2}, id="call_2")
    client = await connect(faces, ANN_KEY, "writer")
    waiting = final_task(await send(client, message("charge 2")))

    cancelled = await client.cancel_task(CancelTaskRequest(id=waiting.id))
    with pytest.raises(A2AError, match="ended"):
        await client.cancel_task(CancelTaskRequest(id=waiting.id))

    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    logged = await faces.runtime.session(waiting.context_id, operator=True)
    results = [e.data for e in logged.entries if e.type == "tool_result"]
    assert [(r["name"], r["status"]) for r in results] == [("charge", "denied")]


async def test_streaming_sends_the_task_then_artifact_chunks_then_the_final_status(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Many words to stream out.")
    client = await connect(faces, ANN_KEY, "writer", streaming=True)

    responses = await send(client, message("stream please"))

    assert responses[0].HasField("task")
    task_id = responses[0].task.id
    chunks = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    assert "".join(part.text for c in chunks for part in c.artifact.parts) == (
        "Many words to stream out."
    )
    assert chunks[-1].last_chunk
    last = responses[-1]
    assert last.HasField("status_update") and last.status_update.task_id == task_id
    assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_list_tasks_shows_the_callers_tasks_of_this_agent_only(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("One.").reply("Two.").reply("Bob's.").reply("Other agent.")
    ann = await connect(faces, ANN_KEY, "writer")
    first = final_task(await send(ann, message("one")))
    second = final_task(await send(ann, message("two", context_id=first.context_id)))
    final_task(await send(await connect(faces, BOB_KEY, "writer"), message("bob")))
    final_task(await send(await connect(faces, ANN_KEY, "default"), message("elsewhere")))

    listed = await ann.list_tasks(ListTasksRequest())
    paged = await ann.list_tasks(ListTasksRequest(page_size=1))
    in_context = await ann.list_tasks(ListTasksRequest(context_id=first.context_id))

    assert [task.id for task in listed.tasks] == [second.id, first.id]
    assert listed.total_size == 2
    assert [task.id for task in paged.tasks] == [second.id] and paged.next_page_token
    assert {task.id for task in in_context.tasks} == {first.id, second.id}


async def test_another_owner_never_reaches_a_task_or_a_context_by_its_id(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Ann's secret.")
    ann = await connect(faces, ANN_KEY, "writer")
    task = final_task(await send(ann, message("secret")))
    bob = await connect(faces, BOB_KEY, "writer")

    for guess in (task.id, "x", task.context_id + ".run_000000000000"):
        with pytest.raises(A2AError, match="no task"):
            await bob.get_task(GetTaskRequest(id=guess))
        with pytest.raises(A2AError, match="no task"):
            await bob.cancel_task(CancelTaskRequest(id=guess))
    with pytest.raises(A2AError, match="unknown contextId"):
        await send(bob, message("hi", context_id=task.context_id))
    with pytest.raises(A2AError, match="no task"):
        await send(bob, message(data={"approve": True}, task_id=task.id))
    assert (await bob.list_tasks(ListTasksRequest())).tasks == []


async def test_an_end_user_gets_no_card_for_unscoped_chat_and_no_credential_no_card(
    faces: Served,
) -> None:
    async with httpx.AsyncClient() as http:
        anonymous = await http.get(f"{faces.url}/a2a/writer/.well-known/agent-card.json")
        main = await http.get(
            f"{faces.url}/a2a/main/.well-known/agent-card.json", headers=faces.headers(ANN_KEY)
        )
        operator = await http.get(
            f"{faces.url}/a2a/main/.well-known/agent-card.json",
            headers=faces.headers(OPERATOR_TOKEN),
        )

    assert anonymous.status_code == 401 and anonymous.json()["jsonrpc"] == "2.0"
    assert main.status_code == 404 and "error" in main.json()
    assert operator.status_code == 200 and operator.json()["name"] == "main"


async def test_malformed_json_rpc_gets_json_rpc_errors_never_a_5xx(faces: Served) -> None:
    headers = {**faces.headers(ANN_KEY), "A2A-Version": "1.0"}
    cases = [
        b"{not json",
        b'{"jsonrpc": "2.0", "id": 1, "method": "Frobnicate"}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": 3}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}',
        b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask"}',
        b"[]",
    ]
    async with httpx.AsyncClient(base_url=faces.url, headers=headers) as http:
        answers = [
            await http.post(
                "/a2a/writer", content=body, headers={"Content-Type": "application/json"}
            )
            for body in cases
        ]

    for answer in answers:
        assert answer.status_code < 500, answer.text
        body = answer.json()
        assert body["jsonrpc"] == "2.0" and {"code", "message"} <= set(body["error"])
