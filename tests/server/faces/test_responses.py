"""Open Responses (SPEC 24), driven with the stock `openai` client's Responses API."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from runtime.testing import ScriptedModel
from tests.server.faces.conftest import ANN_KEY, BOB_KEY, Served

pytestmark = pytest.mark.anyio


def client(served: Served, token: str) -> openai.AsyncOpenAI:
    return served.closed_after(
        openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key=token, max_retries=0)
    )


def extension(response: Any) -> dict[str, Any]:
    found: dict[str, Any] = response.model_extra["amodal"]
    return found


async def test_a_response_continues_with_previous_response_id_and_is_found_by_id(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("First answer.").reply("Second answer.")
    ann = client(faces, ANN_KEY)

    first = await ann.responses.create(model="default", input="hello")
    second = await ann.responses.create(
        model="default", input="and again", previous_response_id=first.id
    )
    fetched = await ann.responses.retrieve(second.id)

    assert first.status == "completed" and first.output_text == "First answer."
    assert first.usage is not None and first.usage.total_tokens > 0
    assert second.previous_response_id == first.id
    assert extension(second)["session_id"] == extension(first)["session_id"]
    users = [m["content"] for m in scripted_model.requests[1].messages if m["role"] == "user"]
    assert users == ["hello", "and again"]
    assert fetched.id == second.id and fetched.output_text == "Second answer."
    assert fetched.status == "completed"


async def test_streaming_sends_the_semantic_events_in_order(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Several words streamed here.")
    stream = await client(faces, ANN_KEY).responses.create(model="default", input="hi", stream=True)

    received = [event async for event in stream]

    kinds = [event.type for event in received]
    assert kinds[0] == "response.created"
    assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")
    assert kinds[-1] == "response.completed"
    assert "response.output_text.done" in kinds
    text = "".join(e.delta for e in received if e.type == "response.output_text.delta")
    assert text == "Several words streamed here."
    numbers = [event.sequence_number for event in received]
    assert numbers == list(range(len(received)))
    done = received[-1]
    assert done.type == "response.completed" and done.response.output_text == text


async def test_the_stream_helper_of_the_sdk_accumulates_the_response(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Accumulated.")
    async with client(faces, ANN_KEY).responses.stream(model="default", input="hi") as stream:
        final = await stream.get_final_response()

    assert final.output_text == "Accumulated."


async def test_earlier_input_items_seed_a_new_session(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Ann.")
    await client(faces, ANN_KEY).responses.create(
        model="default",
        instructions="Be terse.",
        input=[
            {"role": "user", "content": "I am Ann."},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": [{"type": "input_text", "text": "Who am I?"}]},
        ],
    )

    sent = [(m["role"], m["content"]) for m in scripted_model.requests[0].messages]
    conversation = [pair for pair in sent if pair[0] != "system"]
    assert "> Be terse." in conversation[0][1]
    assert conversation[1:] == [
        ("user", "I am Ann."),
        ("assistant", "Hello."),
        ("user", "Who am I?"),
    ]


async def test_a_failed_turn_is_a_failed_response(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.error(400, "the provider said no")

    failed = await client(faces, ANN_KEY).responses.create(model="default", input="hi")

    assert failed.status == "failed"
    assert failed.error is not None and "the provider said no" in failed.error.message


async def test_a_failed_stream_ends_with_response_failed(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.error(400, "the provider said no")
    stream = await client(faces, ANN_KEY).responses.create(model="default", input="hi", stream=True)

    kinds = [event.type async for event in stream]

    assert kinds[-1] == "response.failed"


async def test_another_owners_response_is_not_found_whatever_id_is_guessed(
    faces: Served, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Ann's secret.")
    mine = await client(faces, ANN_KEY).responses.create(model="default", input="hi")
    bob = client(faces, BOB_KEY)

    for guess in (mine.id, "resp_nothing.run_000000000000", "not-an-id"):
        with pytest.raises(openai.NotFoundError):
            await bob.responses.retrieve(guess)
    with pytest.raises(openai.NotFoundError):
        await bob.responses.create(model="default", input="x", previous_response_id=mine.id)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"model": "default"}, "input"),
        ({"model": "default", "input": "hi", "store": False}, "store"),
        ({"model": "default", "input": "hi", "tools": [{"type": "function"}]}, "repo"),
        ({"model": "default", "input": [{"role": "assistant", "content": "x"}]}, "last"),
        ({"model": "nobody", "input": "hi"}, "does not exist"),
        ({"model": "default", "input": "hi", "previous_response_id": "x"}, "previous_response"),
    ],
)
async def test_malformed_requests_get_openai_error_objects(
    faces: Served, body: dict[str, Any], fragment: str
) -> None:
    async with httpx.AsyncClient(base_url=faces.url, headers=faces.headers(ANN_KEY)) as http:
        response = await http.post("/v1/responses", json=body)

    assert 400 <= response.status_code < 500, response.text
    assert fragment in response.json()["error"]["message"]
