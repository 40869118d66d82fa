"""The model client: endpoint resolution, streaming, retries and errors, over real loopback HTTP."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import anyio
import openai
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
from runtime.models.endpoints import (
    ModelEndpoint,
    accepts_prompt_cache_key,
)
from runtime.models.openai import OpenAIModel
from runtime.testing import ScriptedModel, junk_chunk, reply, stall, tool_call, unfinished

pytestmark = pytest.mark.anyio

SECRET = "sk-test-7f3a9c1e-never-print-me"
USER: list[Message] = [UserMessage.of("What is the weather in Paris today?")]


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as server:
        yield server
        server.assert_done()


def client_for(server: ScriptedModel, **options: Any) -> OpenAIModel:
    endpoint = ModelEndpoint("test-model", server.base_url, SECRET)
    return OpenAIModel.for_endpoint(endpoint, backoff=0.01, **options)


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


async def test_stream_yields_text_deltas_then_one_reply(model: ScriptedModel) -> None:
    text = "It is sunny in Paris, twenty-two degrees, with a light breeze from the west."
    model.reply(text)
    async with client_for(model) as client:
        deltas, final = await collect(client)
    assert len(deltas) > 1
    assert "".join(deltas) == text
    assert final.text == text
    assert final.tool_calls == ()
    assert final.finish_reason == "stop"


async def test_model_calls_reuse_one_connection(model: ScriptedModel) -> None:
    # The stream is read to its end after [DONE], so its connection goes back to the pool:
    # closed early, every call would pay a new TCP (and, to a provider, TLS) handshake.
    for _ in range(3):
        model.reply("Sunny.")
    async with client_for(model) as client:
        for _ in range(3):
            await collect(client)
    assert len({request.connection for request in model.requests}) == 1


async def test_a_stream_held_open_after_done_still_ends_the_call_at_once() -> None:
    events = [
        {"choices": [{"index": 0, "delta": {"content": "Fine."}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    body = b"".join(b"data: %s\n\n" % json.dumps(event).encode() for event in events)
    body += b"data: [DONE]\n\n"
    released = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:  # chunked, and never the last chunk: the stream stays open
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            head += b"transfer-encoding: chunked\r\n\r\n"
            connection.sendall(head + b"%x\r\n%s\r\n" % (len(body), body))
            released.wait(timeout=30)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    try:
        async with OpenAIModel.for_endpoint(ModelEndpoint("m", url, "k")) as client:
            with anyio.fail_after(5):  # bounds a hang; the wait after [DONE] is 0.1 s
                _, final = await collect(client)
    finally:
        released.set()
        thread.join(timeout=5)
        listener.close()
    assert final.text == "Fine." and final.finish_reason == "stop"


async def test_tool_call_is_assembled_from_split_deltas(model: ScriptedModel) -> None:
    arguments = {"city": "Paris", "days": 3, "units": "metric", "detail": "hourly forecast"}
    model.tool_call("get_weather", arguments, id="call_abc")
    async with client_for(model) as client:
        deltas, final = await collect(client)
    assert deltas == []
    assert final.tool_calls == (ToolCallRequest("call_abc", "get_weather", json.dumps(arguments)),)
    assert json.loads(final.tool_calls[0].arguments) == arguments
    assert final.finish_reason == "tool_calls"


async def test_several_tool_calls_in_one_response_keep_their_order(model: ScriptedModel) -> None:
    model.tool_calls([("lookup", {"id": 1}), ("lookup", {"id": 2}), ("notify", {"to": "ops"})])
    async with client_for(model) as client:
        _, final = await collect(client)
    assert [(call.name, json.loads(call.arguments)) for call in final.tool_calls] == [
        ("lookup", {"id": 1}),
        ("lookup", {"id": 2}),
        ("notify", {"to": "ops"}),
    ]
    assert len({call.id for call in final.tool_calls}) == 3


async def test_text_before_tool_calls_is_streamed_and_kept(model: ScriptedModel) -> None:
    model.tool_call("search", {"q": "x"}, text="Let me look that up.")
    async with client_for(model) as client:
        deltas, final = await collect(client)
    assert "".join(deltas) == "Let me look that up."
    assert final.text == "Let me look that up."
    assert [call.name for call in final.tool_calls] == ["search"]


async def test_malformed_tool_arguments_are_passed_through_raw(model: ScriptedModel) -> None:
    model.raw_arguments("search", '{"q": "unterminated')
    async with client_for(model) as client:
        _, final = await collect(client)
    assert final.tool_calls[0].arguments == '{"q": "unterminated'


async def test_usage_is_parsed_from_the_final_chunk(model: ScriptedModel) -> None:
    model.enqueue(reply("twelve chars", cached_tokens=5))
    messages: list[Message] = [SystemMessage("s" * 40), UserMessage.of("u" * 60)]
    async with client_for(model) as client:
        _, final = await collect(client, messages)
    # The scripted server counts characters // 4.
    assert final.usage == Usage(input_tokens=25, output_tokens=3, cached_tokens=5)
    assert model.requests[0].body["stream_options"] == {"include_usage": True}


async def test_reply_records_the_model_the_response_names(model: ScriptedModel) -> None:
    model.enqueue(replace(reply("hi"), model="test-model-2025-01-01"))
    model.reply("again")
    async with client_for(model) as client:
        _, pinned = await collect(client)
        _, echoed = await collect(client)
    assert model.requests[0].model == "test-model"
    assert pinned.model == "test-model-2025-01-01"
    assert echoed.model == "test-model"


async def test_tools_and_model_settings_are_sent_as_given(model: ScriptedModel) -> None:
    tool = ToolSpec("lookup", "Look it up.", {"type": "object", "properties": {}})
    model.reply("ok").reply("no tools")
    async with client_for(model) as client:
        await collect(client, tools=[tool], settings=ModelSettings(temperature=0.2, max_tokens=64))
        await collect(client)
    first, second = model.requests
    assert first.tools == ["lookup"]
    assert first.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look it up.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    assert (first.body["temperature"], first.body["max_tokens"]) == (0.2, 64)
    assert "tools" not in second.body
    # Unset settings are left to the endpoint's defaults, never sent as null.
    assert "temperature" not in second.body and "max_tokens" not in second.body


async def test_a_client_of_your_own_is_used_and_left_open(model: ScriptedModel) -> None:
    model.reply("from your client").reply("still open")
    client = openai.AsyncOpenAI(base_url=model.base_url, api_key=SECRET)
    own = OpenAIModel(client, "my-model")
    assert isinstance(own, Model) and own.name == "my-model"
    _, final = await collect(own)
    await own.aclose()
    _, again = await collect(OpenAIModel(client, "my-model"))  # the client is still usable
    await client.close()
    assert (final.text, again.text) == ("from your client", "still open")
    assert model.requests[0].model == "my-model"


async def test_the_neutral_messages_are_sent_in_chat_completions_shape(
    model: ScriptedModel,
) -> None:
    messages: list[Message] = [
        SystemMessage("You help."),
        *USER,
        AssistantMessage("", (ToolCallRequest("c1", "f", '{"x": 1}'),)),
        ToolResultMessage("c1", "f", '{"ok": true}'),
        SystemMessage("Today is Monday."),
        UserMessage((TextPart("And this?"), ImagePart("image/png", "aGk="))),
    ]
    model.reply("done")
    async with client_for(model) as client:
        await collect(client, messages)
    assert model.requests[0].messages == [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "What is the weather in Paris today?"},
        {  # "" rather than null: some servers reject a null content
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
        {"role": "system", "content": "Today is Monday."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
            ],
        },
    ]


async def test_a_tool_results_images_follow_the_results_in_a_user_message(
    model: ScriptedModel,
) -> None:
    calls = (ToolCallRequest("c1", "chart", "{}"), ToolCallRequest("c2", "note", "{}"))
    messages: list[Message] = [
        *USER,
        AssistantMessage("", calls),
        ToolResultMessage(
            "c1", "chart", '{"drawn": true}', images=(ImagePart("image/png", "aGk="),)
        ),
        ToolResultMessage("c2", "note", '"noted"'),
    ]
    model.reply("A chart.")
    async with client_for(model) as client:
        await collect(client, messages)
    sent = model.requests[0].messages
    # A tool message takes text only: both results first, then the image, said whose it is.
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[4]["content"] == [
        {"type": "text", "text": "Images of the result of chart (c1):"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
    ]


async def test_a_dict_instead_of_a_message_is_a_clear_type_error(model: ScriptedModel) -> None:
    async with client_for(model) as client:
        with pytest.raises(TypeError, match=r"runtime.models messages .* not dict"):
            client.stream([{"role": "user", "content": "hi"}], None)  # type: ignore[list-item]


async def test_prompt_cache_key_is_not_sent_to_other_endpoints(model: ScriptedModel) -> None:
    model.reply("ok")
    async with client_for(model) as client:
        await collect(client, cache_key="agent:default")
    assert "prompt_cache_key" not in model.requests[0].body


def test_prompt_cache_key_is_accepted_only_by_openai_itself() -> None:
    assert accepts_prompt_cache_key(None)
    assert accepts_prompt_cache_key("https://api.openai.com/v1")
    assert accepts_prompt_cache_key("https://api.openai.com/v1/")
    assert not accepts_prompt_cache_key("http://127.0.0.1:8080/v1")
    assert not accepts_prompt_cache_key("https://api.openai.com.evil.example/v1")
    assert not accepts_prompt_cache_key("https://openrouter.ai/api/v1")


async def test_breaking_off_the_stream_early_releases_the_connection(model: ScriptedModel) -> None:
    model.reply("one two three four five six seven eight nine ten").reply("next")
    async with client_for(model) as client:
        stream = client.stream(USER, None)
        first = await stream.__anext__()
        await stream.aclose()
        assert isinstance(first, str)
        _, final = await collect(client)
    assert final.text == "next"


# ---------------------------------------------------------------- retries and errors


async def test_two_503s_then_success_makes_three_requests(model: ScriptedModel) -> None:
    model.error(503, "overloaded").error(503, "overloaded").reply("finally")
    async with client_for(model) as client:
        _, final = await collect(client)
    assert final.text == "finally"
    assert len(model.requests) == 3


async def test_429_is_retried(model: ScriptedModel) -> None:
    model.error(429, "slow down").reply("ok")
    async with client_for(model) as client:
        _, final = await collect(client)
    assert final.text == "ok"
    assert len(model.requests) == 2


async def test_400_is_not_retried(model: ScriptedModel) -> None:
    model.error(400, "messages: invalid role 'robot'")
    async with client_for(model) as client:
        with pytest.raises(ModelError) as caught:
            await collect(client)
    assert len(model.requests) == 1
    assert caught.value.status == 400
    assert "invalid role 'robot'" in str(caught.value)


async def test_exhausted_retries_name_model_and_endpoint_and_hide_the_key(
    model: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    model.respond(lambda request: replace(reply(""), status=503, message=f"bad key {SECRET}"))
    caplog.set_level(logging.WARNING, logger="amodal")
    async with client_for(model, max_retries=2) as client:
        with pytest.raises(ModelError) as caught:
            await collect(client)
    error = caught.value
    assert len(model.requests) == 3
    assert error.attempts == 3
    assert error.status == 503
    assert "'test-model'" in str(error)
    assert f"127.0.0.1:{model.port}/v1" in str(error)
    assert "HTTP 503" in str(error)
    for text in (str(error), repr(error), caplog.text, *(str(r.__dict__) for r in caplog.records)):
        assert SECRET not in text
    assert [record.msg for record in caplog.records] == ["model_retry", "model_retry"]


async def test_connection_refused_raises_model_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = ModelEndpoint("test-model", f"http://127.0.0.1:{port}/v1", SECRET)
    async with OpenAIModel.for_endpoint(endpoint, max_retries=1, backoff=0.01) as client:
        with pytest.raises(ModelError) as caught:
            await collect(client)
    assert f"127.0.0.1:{port}/v1" in str(caught.value)
    assert "connection failed" in str(caught.value)
    assert caught.value.status is None
    assert SECRET not in str(caught.value)


async def test_a_slow_endpoint_times_out_and_is_retried() -> None:
    with ScriptedModel(latency=0.5) as slow:
        slow.respond(lambda request: "too late")
        async with client_for(slow, timeout=0.1, max_retries=1) as client:
            with pytest.raises(ModelError) as caught:
                await collect(client)
        assert len(slow.requests) == 2
    assert "timed out" in str(caught.value)


async def test_a_stream_cut_after_text_is_not_retried(model: ScriptedModel) -> None:
    model.cut_stream("It is sunny and").reply("never requested")
    deltas: list[str] = []
    async with client_for(model) as client:
        with pytest.raises(ModelError):
            async for item in client.stream(USER, None):
                assert isinstance(item, str)
                deltas.append(item)
        assert "".join(deltas) == "It is sunny and"
        assert len(model.requests) == 1
        await collect(client)  # consume the second step


async def test_a_stream_dropped_before_any_text_is_retried(model: ScriptedModel) -> None:
    model.cut_stream("").reply("Recovered.")
    async with client_for(model) as client:
        deltas, final = await collect(client)
    assert "".join(deltas) == final.text == "Recovered."
    assert len(model.requests) == 2


async def test_a_stream_that_ends_cleanly_after_text_without_finishing_is_an_error(
    model: ScriptedModel,
) -> None:
    model.enqueue(unfinished(reply("It is sunny and"))).reply("never requested")
    deltas: list[str] = []
    async with client_for(model) as client:
        with pytest.raises(ModelError, match="before the answer was complete") as caught:
            async for item in client.stream(USER, None):
                assert isinstance(item, str), "a cut stream must never give a reply"
                deltas.append(item)
        assert "".join(deltas) == "It is sunny and"
        assert len(model.requests) == 1 and caught.value.attempts == 1
        await collect(client)  # consume the second step


async def test_a_complete_tool_call_in_an_unfinished_stream_is_never_used(
    model: ScriptedModel,
) -> None:
    model.enqueue(unfinished(replace(tool_call("charge", {"amount": 5}), text="")))
    model.reply("I did not charge anything.")
    async with client_for(model) as client:
        deltas, final = await collect(client)
    assert final.tool_calls == () and final.text == "I did not charge anything."
    assert "".join(deltas) == final.text
    assert len(model.requests) == 2


async def test_unfinished_streams_fail_after_the_retries(model: ScriptedModel) -> None:
    for _ in range(2):
        model.enqueue(unfinished(tool_call("charge", {"amount": 5})))
    async with client_for(model, max_retries=1) as client:
        with pytest.raises(ModelError) as caught:
            await collect(client)
    assert caught.value.attempts == 2
    assert "no finish reason and no [DONE]" in str(caught.value)


async def test_done_without_a_finish_reason_completes_the_answer() -> None:
    # Some servers end with [DONE] only, others with a finish reason only: either says "over".
    chunk = {"model": "m", "choices": [{"index": 0, "delta": {"content": "Fine."}}]}
    body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    with _one_answer(body) as url:
        async with OpenAIModel.for_endpoint(ModelEndpoint("m", url, "k")) as client:
            _, final = await collect(client)
    assert final.text == "Fine." and final.finish_reason is None


async def test_a_stream_cut_mid_line_and_mid_character_with_crlf_reads_whole() -> None:
    # Lines are split on the bytes: a read may end inside a line or inside a character.
    text = "Grüße aus 世界 🦜, the whole way."
    events = [
        {"model": "m", "choices": [{"index": 0, "delta": {"content": text[:9]}}]},
        {"model": "m", "choices": [{"index": 0, "delta": {"content": text[9:]}}]},
        {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    body = b": a comment\r\n\r\n" + b"".join(
        b"event: chunk\r\ndata: %s\r\n\r\n" % json.dumps(e, ensure_ascii=False).encode()
        for e in events
    )
    body += b"data: [DONE]"  # the last line without its end
    with _one_answer(body, pieces=3) as url:
        async with OpenAIModel.for_endpoint(ModelEndpoint("m", url, "k")) as client:
            deltas, final = await collect(client)
    assert "".join(deltas) == text
    assert (final.text, final.finish_reason) == (text, "stop")


@contextmanager
def _one_answer(body: bytes, pieces: int | None = None) -> Iterator[str]:
    """A server that answers one request with `body` as a 200 event stream (sent `pieces`
    bytes at a time when given); its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            head = (
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            )
            if pieces is None:
                connection.sendall(head.encode() + body)
                return
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection.sendall(head.encode())
            for start in range(0, len(body), pieces):  # `pieces` bytes a read
                connection.sendall(body[start : start + pieces])
                time.sleep(0.001)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        thread.join(timeout=5)
        listener.close()


async def test_a_stream_that_stalls_after_text_times_out_and_is_not_retried(
    model: ScriptedModel,
) -> None:
    model.enqueue(stall("It is", 30))
    async with client_for(model, timeout=0.2) as client:
        with pytest.raises(ModelError, match="stalled") as caught:
            await collect(client)
    assert caught.value.attempts == 1


async def test_a_chunk_that_is_not_json_is_an_error_not_retried(model: ScriptedModel) -> None:
    model.enqueue(junk_chunk())
    async with client_for(model) as client:
        with pytest.raises(ModelError, match="not JSON") as caught:
            await collect(client)
    assert caught.value.attempts == 1


def test_endpoint_and_client_repr_do_not_show_the_key() -> None:
    endpoint = ModelEndpoint("gpt-x", "https://api.openai.com/v1", SECRET)
    client = OpenAIModel.for_endpoint(endpoint)
    for text in (repr(endpoint), str(endpoint), repr(client)):
        assert SECRET not in text
    assert str(endpoint) == "gpt-x at api.openai.com/v1"
    anyio.run(client.aclose)


# ---------------------------------------------------------------- concurrency


async def test_concurrent_calls_are_in_flight_together() -> None:
    with ScriptedModel(latency=0.2) as slow:
        slow.respond(lambda request: f"answer to {request.last_user}")
        results: dict[int, str] = {}

        async def ask(client: OpenAIModel, n: int) -> None:
            _, final = await collect(client, [UserMessage.of(str(n))])
            results[n] = final.text

        async with client_for(slow) as client, anyio.create_task_group() as group:
            for n in range(5):
                group.start_soon(ask, client, n)
        assert slow.max_in_flight == 5
        assert slow.in_flight == 0
    assert results == {n: f"answer to {n}" for n in range(5)}


async def test_an_empty_stream_is_a_model_error_not_a_silent_empty_reply() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def serve_empty() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: 0\r\nconnection: close\r\n\r\n"
            )

    thread = threading.Thread(target=serve_empty, daemon=True)
    thread.start()
    endpoint = ModelEndpoint("m", f"http://127.0.0.1:{port}/v1", "k")
    async with OpenAIModel.for_endpoint(endpoint, backoff=0.01) as client:
        with pytest.raises(ModelError, match="without an answer"):
            async for _ in client.stream([UserMessage.of("hi")], None):
                pass
    thread.join(timeout=5)
    listener.close()


async def test_a_key_ending_in_a_line_break_is_hidden_in_the_error_that_quotes_it(
    model: ScriptedModel,
) -> None:
    # The HTTP client refuses the header and quotes it as a repr: `...key\\n'`.
    broken = SECRET + "\n"
    endpoint = ModelEndpoint("test-model", model.base_url, broken)
    async with OpenAIModel.for_endpoint(endpoint, max_retries=1, backoff=0.01) as client:
        with pytest.raises(ModelError) as caught:
            await collect(client)
    assert "connection failed" in str(caught.value)
    assert SECRET[:8] not in str(caught.value) and SECRET[:8] not in repr(caught.value)
    assert model.requests == []
