"""`AnthropicModel`: Anthropic's Messages API through the `anthropic` SDK, over real loopback
HTTP against the scripted Anthropic server (which refuses what the real API refuses)."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anthropic
import pytest

from runtime.events import Usage
from runtime.exceptions import ModelError
from runtime.models import (
    AssistantMessage,
    ImagePart,
    Message,
    Model,
    ModelReply,
    ModelSettings,
    SystemMessage,
    TextPart,
    ToolCallRequest,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from runtime.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel, messages_request
from runtime.models.endpoints import ModelEndpoint
from runtime.testing import (
    ScriptedAnthropic,
    cut_in_tool_call,
    junk_chunk,
    reply,
    stall,
    tool_call,
    tool_calls,
    unfinished,
)

pytestmark = pytest.mark.anyio

SECRET = "sk-ant-test-5c2e-never-print-me"
SYSTEM = SystemMessage("You are the weather desk.")
USER: list[Message] = [SYSTEM, UserMessage.of("What is the weather in Paris today?")]
LOOKUP = ToolSpec("lookup", "Look a city up.", {"type": "object", "properties": {}})
CACHED = {"type": "ephemeral"}


@pytest.fixture
def server() -> Iterator[ScriptedAnthropic]:
    with ScriptedAnthropic() as scripted:
        yield scripted
        scripted.assert_done()


def client_for(server: ScriptedAnthropic, **options: Any) -> AnthropicModel:
    endpoint = ModelEndpoint("claude-test", server.base_url, SECRET, "anthropic")
    return AnthropicModel.for_endpoint(endpoint, backoff=0.01, **options)


async def collect(
    client: Model, messages: list[Message] = USER, **kwargs: Any
) -> tuple[list[str], ModelReply]:
    tools = kwargs.pop("tools", None)
    settings = kwargs.pop("settings", ModelSettings())
    deltas: list[str] = []
    final: ModelReply | None = None
    async for item in client.stream(messages, tools, settings, **kwargs):
        if isinstance(item, ModelReply):
            final = item
        else:
            assert final is None, "text arrived after the final reply"
            deltas.append(item)
    assert final is not None
    return deltas, final


# ---------------------------------------------------------------- streaming


async def test_text_streams_in_deltas_then_one_reply(server: ScriptedAnthropic) -> None:
    text = "It is sunny in Paris, twenty-two degrees, with a light breeze from the west."
    server.reply(text)
    async with client_for(server) as client:
        deltas, final = await collect(client)
    assert len(deltas) > 1 and "".join(deltas) == text
    assert (final.text, final.tool_calls, final.finish_reason) == (text, (), "stop")
    assert (final.model, final.provider) == ("claude-test", "anthropic")
    request = server.requests[0]
    assert request.path == "/v1/messages" and request.stream
    assert request.body["max_tokens"] == DEFAULT_MAX_TOKENS  # the API requires one
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    assert request.headers["anthropic-version"]


async def test_parallel_tool_calls_are_assembled_from_json_deltas(
    server: ScriptedAnthropic,
) -> None:
    weather = {"city": "Paris", "days": 3, "units": "metric", "detail": "hourly forecast"}
    server.enqueue(tool_calls([("lookup", weather), ("lookup", {"city": "Lyon"})], text="Both."))
    async with client_for(server) as client:
        deltas, final = await collect(client, tools=[LOOKUP])
    assert "".join(deltas) == final.text == "Both."
    assert [(c.name, json.loads(c.arguments)) for c in final.tool_calls] == [
        ("lookup", weather),
        ("lookup", {"city": "Lyon"}),
    ]
    assert final.tool_calls[0].arguments == json.dumps(weather)  # the raw text, as streamed
    assert len({call.id for call in final.tool_calls}) == 2
    assert final.finish_reason == "tool_calls"


async def test_usage_counts_every_input_token_and_says_what_the_cache_did(
    server: ScriptedAnthropic,
) -> None:
    server.reply("First.").reply("Second.")
    async with client_for(server) as client:
        _, first = await collect(client, tools=[LOOKUP])
        _, second = await collect(
            client, [*USER, AssistantMessage("First."), UserMessage.of("And?")], tools=[LOOKUP]
        )
    # Scripted counts are characters // 4: the system prompt is 25 characters, the question
    # 35, "First." 6 and "And?" 4. The first call writes its whole prefix (60 characters);
    # the second reads the system prompt's (the breakpoint both share) and writes the rest.
    assert first.usage == Usage(15, 1, cached_tokens=0, cache_write_tokens=15)
    assert second.usage == Usage(17, 1, cached_tokens=6, cache_write_tokens=11)
    streamed = server.requests[1]
    assert streamed.body["messages"][-1]["content"][-1]["cache_control"] == CACHED


async def test_a_steps_cached_tokens_are_reported_as_cache_reads(
    server: ScriptedAnthropic,
) -> None:
    server.enqueue(reply("twelve chars", cached_tokens=5))
    messages: list[Message] = [SystemMessage("s" * 40), UserMessage.of("u" * 60)]
    async with client_for(server) as client:
        _, final = await collect(client, messages)
    # The same counts as the scripted OpenAI server's: characters // 4.
    assert final.usage == Usage(input_tokens=25, output_tokens=3, cached_tokens=5)


async def test_settings_are_sent_and_a_temperature_above_one_is_capped(
    server: ScriptedAnthropic,
) -> None:
    server.reply("ok").reply("ok")
    async with client_for(server) as client:
        await collect(client, settings=ModelSettings(temperature=0.3, max_tokens=64))
        await collect(client, settings=ModelSettings(temperature=1.7))
    first, second = server.requests
    assert (first.body["temperature"], first.body["max_tokens"]) == (0.3, 64)
    assert second.body["temperature"] == 1.0  # Anthropic's range is 0..1


async def test_a_client_of_your_own_is_used_and_left_open(server: ScriptedAnthropic) -> None:
    server.reply("from your client").reply("still open")
    client = anthropic.AsyncAnthropic(base_url=server.base_url, api_key=SECRET, max_retries=2)
    own = AnthropicModel(client, "my-claude")
    assert isinstance(own, Model) and own.name == "my-claude"
    _, final = await collect(own)
    await own.aclose()
    _, again = await collect(AnthropicModel(client, "my-claude"))
    await client.close()
    assert (final.text, again.text) == ("from your client", "still open")
    assert server.requests[0].model == "my-claude"


async def test_calls_reuse_one_connection(server: ScriptedAnthropic) -> None:
    for _ in range(3):
        server.reply("Sunny.")
    async with client_for(server) as client:
        for _ in range(3):
            await collect(client)
    assert len({request.connection for request in server.requests}) == 1


# ---------------------------------------------------------------- the request


def test_the_system_prompt_and_tools_are_marked_cacheable() -> None:
    body = messages_request(USER, [LOOKUP, replace(LOOKUP, name="notify")])
    assert body["system"] == [
        {"type": "text", "text": "You are the weather desk.", "cache_control": CACHED}
    ]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1] == {
        "name": "notify",
        "description": "Look a city up.",
        "input_schema": {"type": "object", "properties": {}},
        "cache_control": CACHED,
    }
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "What is the weather in Paris today?",
                    "cache_control": CACHED,
                }
            ],
        }
    ]


def test_notes_results_and_images_become_one_user_turn_with_results_first() -> None:
    calls = (ToolCallRequest("call.1", "chart", '{"x": 1}'), ToolCallRequest("c2", "f", "{oops"))
    body = messages_request(
        [
            SYSTEM,
            UserMessage.of("Draw it."),
            AssistantMessage("", calls),
            ToolResultMessage("call.1", "chart", "drawn", images=(ImagePart("image/png", "aGk="),)),
            SystemMessage("Answer now."),
            ToolResultMessage("c2", "f", '{"error": "bad"}', is_error=True),
            SystemMessage("Today is Monday."),
            UserMessage((TextPart("And this?"), TextPart(""), ImagePart("image/jpeg", "aGk="))),
        ],
        None,
    )
    assistant, user = body["messages"][1:]
    assert assistant["content"] == [  # no empty text block; ids the API accepts
        {"type": "tool_use", "id": "call_1", "name": "chart", "input": {"x": 1}},
        {"type": "tool_use", "id": "c2", "name": "f", "input": {"_unparsed": "{oops"}},
    ]
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "aGk="},
    }
    assert user["content"][:2] == [
        {
            "type": "tool_result",
            "tool_use_id": "call_1",
            "content": [{"type": "text", "text": "drawn"}, image],
        },
        {
            "type": "tool_result",
            "tool_use_id": "c2",
            "content": [{"type": "text", "text": '{"error": "bad"}'}],
            "is_error": True,
        },
    ]
    assert [block.get("text") for block in user["content"][2:5]] == [
        "Answer now.",
        "Today is Monday.",
        "And this?",
    ]
    assert user["content"][5]["source"]["media_type"] == "image/jpeg"
    # Offered no tools over a conversation with calls: the tools used, none allowed.
    assert body["tool_choice"] == {"type": "none"}
    assert [tool["name"] for tool in body["tools"]] == ["chart", "f"]


async def test_a_request_the_api_would_refuse_is_a_400_not_retried(
    server: ScriptedAnthropic,
) -> None:
    # A conversation whose call has no result: the real API refuses it, and so does the
    # scripted one (and records it as unexpected, which this test then clears).
    broken: list[Message] = [*USER, AssistantMessage("", (ToolCallRequest("c1", "f", "{}"),))]
    async with client_for(server) as client:
        with pytest.raises(ModelError) as caught:
            await collect(client, broken, tools=[LOOKUP])
    assert caught.value.status == 400 and not caught.value.transient
    assert "without `tool_result` blocks" in str(caught.value)
    assert len(server.requests) == 1
    with pytest.raises(AssertionError, match="the real API would refuse it"):
        server.assert_done()
    server._unexpected.clear()


# ---------------------------------------------------------------- retries and errors


@pytest.mark.parametrize("status", [429, 500, 503, 529])
async def test_rate_limits_and_server_errors_are_retried(
    server: ScriptedAnthropic, status: int
) -> None:
    server.error(status, "overloaded").reply("finally")
    async with client_for(server) as client:
        _, final = await collect(client)
    assert final.text == "finally" and len(server.requests) == 2


async def test_a_400_is_not_retried_and_names_the_reason(server: ScriptedAnthropic) -> None:
    server.error(400, "messages: roles must alternate")
    async with client_for(server) as client:
        with pytest.raises(ModelError, match="roles must alternate") as caught:
            await collect(client)
    assert (caught.value.status, caught.value.transient, len(server.requests)) == (400, False, 1)


async def test_exhausted_retries_name_model_and_endpoint_and_hide_the_key(
    server: ScriptedAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    server.respond(lambda request: replace(reply(""), status=529, message=f"no {SECRET}"))
    caplog.set_level(logging.WARNING, logger="amodal")
    async with client_for(server, max_retries=2) as client:
        with pytest.raises(ModelError) as caught:
            await collect(client)
    error = caught.value
    assert (error.attempts, error.status, error.transient) == (3, 529, True)
    assert "'claude-test'" in str(error) and f"127.0.0.1:{server.port}" in str(error)
    for text in (str(error), repr(error), caplog.text, *(str(r.__dict__) for r in caplog.records)):
        assert SECRET not in text
    assert [record.msg for record in caplog.records] == ["model_retry", "model_retry"]


async def test_connection_refused_is_a_transient_model_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = ModelEndpoint("claude-test", f"http://127.0.0.1:{port}", SECRET, "anthropic")
    async with AnthropicModel.for_endpoint(endpoint, max_retries=1, backoff=0.01) as client:
        with pytest.raises(ModelError, match="connection failed") as caught:
            await collect(client)
    assert caught.value.transient and caught.value.attempts == 2


async def test_a_slow_endpoint_times_out_and_is_retried() -> None:
    with ScriptedAnthropic(latency=0.5) as slow:
        slow.respond(lambda request: "too late")
        async with client_for(slow, timeout=0.1, max_retries=1) as client:
            with pytest.raises(ModelError, match="timed out"):
                await collect(client)
        assert len(slow.requests) == 2


async def test_a_stream_cut_after_text_is_not_retried(server: ScriptedAnthropic) -> None:
    server.cut_stream("It is sunny and").reply("never requested")
    deltas: list[str] = []
    async with client_for(server) as client:
        with pytest.raises(ModelError):
            async for item in client.stream(USER, None):
                assert isinstance(item, str)
                deltas.append(item)
        assert "".join(deltas) == "It is sunny and" and len(server.requests) == 1
        await collect(client)  # the second step


async def test_a_stream_cut_inside_a_tool_use_block_is_retried_never_half_used(
    server: ScriptedAnthropic,
) -> None:
    server.enqueue(cut_in_tool_call(tool_call("charge", {"amount": 5, "card": "visa-4242"})))
    server.reply("I did not charge anything yet.")
    async with client_for(server) as client:
        _, final = await collect(client)
    assert final.tool_calls == () and final.text == "I did not charge anything yet."
    assert len(server.requests) == 2


async def test_streams_cut_inside_a_tool_use_block_fail_after_the_retries(
    server: ScriptedAnthropic,
) -> None:
    for _ in range(2):
        server.enqueue(cut_in_tool_call(tool_call("charge", {"amount": 5})))
    async with client_for(server, max_retries=1) as client:
        with pytest.raises(ModelError, match="the stream broke") as caught:
            await collect(client)
    assert caught.value.attempts == 2 and caught.value.transient


async def test_an_unfinished_stream_is_never_an_answer(server: ScriptedAnthropic) -> None:
    server.enqueue(unfinished(tool_call("charge", {"amount": 5}))).reply("Nothing charged.")
    async with client_for(server) as client:
        _, final = await collect(client)
    assert final.tool_calls == () and len(server.requests) == 2


async def test_an_overloaded_error_event_in_the_stream_is_retried(
    server: ScriptedAnthropic,
) -> None:
    overloaded = '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    server.enqueue(junk_chunk("", overloaded)).reply("Back.")
    async with client_for(server) as client:
        _, final = await collect(client)
    assert final.text == "Back." and len(server.requests) == 2


async def test_another_error_event_or_junk_is_an_error_not_retried(
    server: ScriptedAnthropic,
) -> None:
    invalid = '{"type": "error", "error": {"type": "invalid_request_error", "message": "nope"}}'
    server.enqueue(junk_chunk("", invalid), junk_chunk())
    async with client_for(server) as client:
        with pytest.raises(ModelError, match="error in the stream: nope") as first:
            await collect(client)
        with pytest.raises(ModelError, match="not JSON") as second:
            await collect(client)
    assert first.value.attempts == second.value.attempts == 1


async def test_a_stream_that_stalls_after_text_times_out_and_is_not_retried(
    server: ScriptedAnthropic,
) -> None:
    server.enqueue(stall("It is", 30))
    async with client_for(server, timeout=0.2) as client:
        with pytest.raises(ModelError, match="stalled") as caught:
            await collect(client)
    assert caught.value.attempts == 1


def test_endpoint_and_client_repr_do_not_show_the_key() -> None:
    import anyio

    endpoint = ModelEndpoint("claude-x", "https://api.anthropic.com", SECRET, "anthropic")
    client = AnthropicModel.for_endpoint(endpoint)
    for text in (repr(endpoint), str(endpoint), repr(client)):
        assert SECRET not in text
    assert str(endpoint) == "claude-x at api.anthropic.com"
    anyio.run(client.aclose)


def test_a_dict_instead_of_a_message_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match=r"runtime.models messages .* not dict"):
        messages_request([{"role": "user", "content": "hi"}], None)  # type: ignore[list-item]


async def test_breaking_off_the_stream_early_releases_the_connection(
    server: ScriptedAnthropic,
) -> None:
    server.reply("one two three four five six seven eight nine ten").reply("next")
    async with client_for(server) as client:
        stream = client.stream(USER, None)
        first = await stream.__anext__()
        await stream.aclose()  # type: ignore[attr-defined]
        assert isinstance(first, str)
        _, final = await collect(client)
    assert final.text == "next"
