"""The model client: endpoint resolution, streaming, retries and errors, over real loopback HTTP."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anyio
import pytest

from runtime.formats import RepoConfig
from runtime.models import (
    ModelClient,
    ModelConfigError,
    ModelEndpoint,
    ModelError,
    ModelReply,
    ToolCall,
    Usage,
    accepts_prompt_cache_key,
    display_url,
    resolve_endpoint,
)
from runtime.testing import ScriptedModel, reply

pytestmark = pytest.mark.anyio

SECRET = "sk-test-7f3a9c1e-never-print-me"
USER = [{"role": "user", "content": "What is the weather in Paris today?"}]


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as server:
        yield server
        server.assert_done()


def client_for(server: ScriptedModel, **options: Any) -> ModelClient:
    endpoint = ModelEndpoint("test-model", server.base_url, SECRET)
    return ModelClient(endpoint, backoff=0.01, **options)


async def collect(
    client: ModelClient, messages: list[dict[str, Any]] = USER, **kwargs: Any
) -> tuple[list[str], ModelReply]:
    tools = kwargs.pop("tools", None)
    deltas: list[str] = []
    final: ModelReply | None = None
    async for item in client.stream(messages, tools, **kwargs):
        if isinstance(item, ModelReply):
            final = item
        else:
            assert final is None, "text arrived after the final reply"
            deltas.append(item)
    assert final is not None
    return deltas, final


def config(models: dict[str, Any] | None = None) -> RepoConfig:
    body: dict[str, Any] = {"name": "r", "version": "1"}
    if models is not None:
        body["models"] = models
    return RepoConfig.model_validate(body)


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


async def test_tool_call_is_assembled_from_split_deltas(model: ScriptedModel) -> None:
    arguments = {"city": "Paris", "days": 3, "units": "metric", "detail": "hourly forecast"}
    model.tool_call("get_weather", arguments, id="call_abc")
    async with client_for(model) as client:
        deltas, final = await collect(client)
    assert deltas == []
    assert final.tool_calls == (ToolCall("call_abc", "get_weather", json.dumps(arguments)),)
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
    messages = [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "u" * 60}]
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


async def test_tools_and_tool_choice_are_sent_as_given(model: ScriptedModel) -> None:
    tool = {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
    }
    model.reply("ok").reply("no tools")
    async with client_for(model) as client:
        await collect(client, tools=[tool], tool_choice="auto")
        await collect(client)
    first, second = model.requests
    assert first.tools == ["lookup"]
    assert first.body["tool_choice"] == "auto"
    assert "tools" not in second.body
    assert "tool_choice" not in second.body


async def test_null_content_of_assistant_tool_call_messages_is_sent_as_empty_string(
    model: ScriptedModel,
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
        {"role": "assistant", "content": None},
    ]
    model.reply("done")
    async with client_for(model) as client:
        await collect(client, messages)
    sent = model.requests[0].messages
    assert sent[1]["content"] == ""
    assert sent[1]["tool_calls"] == [call]
    assert sent[3]["content"] is None  # no tool calls: left as written
    assert messages[1]["content"] is None  # the caller's list is not changed


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
    async with ModelClient(endpoint, max_retries=1, backoff=0.01) as client:
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


def test_endpoint_and_client_repr_do_not_show_the_key() -> None:
    endpoint = ModelEndpoint("gpt-x", "https://api.openai.com/v1", SECRET)
    client = ModelClient(endpoint)
    for text in (repr(endpoint), str(endpoint), repr(client)):
        assert SECRET not in text
    assert str(endpoint) == "gpt-x at api.openai.com/v1"
    anyio.run(client.aclose)


def test_display_url_drops_scheme_credentials_and_query() -> None:
    assert display_url("https://user:pw@llm.example:8443/v1/?key=abc") == "llm.example:8443/v1"
    assert display_url("http://127.0.0.1:9/v1") == "127.0.0.1:9/v1"


# ---------------------------------------------------------------- endpoint resolution


def test_nothing_configured_resolves_to_none() -> None:
    assert resolve_endpoint(config(), "default", {}) is None
    assert resolve_endpoint(config({"main": "gpt-x"}), "default", {}) is None
    assert resolve_endpoint(config(), "simple", {"MODEL_SIMPLE": "small"}) is None


def test_main_binding_from_amodal_json() -> None:
    models = {"main": {"model": "gpt-x", "baseUrl": "http://llm.local/v1", "apiKey": SECRET}}
    endpoint = resolve_endpoint(config(models), "default", {})
    assert endpoint == ModelEndpoint("gpt-x", "http://llm.local/v1", SECRET)


def test_environment_overrides_each_field_of_the_main_binding() -> None:
    models = {"main": {"model": "gpt-x", "baseUrl": "http://llm.local/v1", "apiKey": "sk-file"}}
    env = {"OPENAI_BASE_URL": "http://env.local/v1", "OPENAI_API_KEY": SECRET, "MODEL_MAIN": "m2"}
    assert resolve_endpoint(config(models), "default", env) == ModelEndpoint(
        "m2", "http://env.local/v1", SECRET
    )
    only_url = resolve_endpoint(config(models), "default", {"OPENAI_BASE_URL": "http://e/v1"})
    assert only_url == ModelEndpoint("gpt-x", "http://e/v1", "sk-file")


def test_an_api_key_alone_means_openai_itself() -> None:
    endpoint = resolve_endpoint(config({"main": "gpt-x"}), "default", {"OPENAI_API_KEY": SECRET})
    assert endpoint == ModelEndpoint("gpt-x", "https://api.openai.com/v1", SECRET)


def test_a_base_url_alone_needs_no_key() -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1", "MODEL_MAIN": "local"}
    assert resolve_endpoint(config(), "default", env) == ModelEndpoint(
        "local", "http://127.0.0.1:8080/v1", None
    )


def test_empty_environment_values_count_as_unset() -> None:
    env = {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": "", "MODEL_MAIN": ""}
    assert resolve_endpoint(config({"main": "gpt-x"}), "default", env) is None


def test_an_endpoint_without_a_model_name_says_how_to_set_one() -> None:
    with pytest.raises(ModelConfigError, match=r"MODEL_MAIN.*amodal\.json") as caught:
        resolve_endpoint(config(), "default", {"OPENAI_API_KEY": SECRET})
    assert SECRET not in str(caught.value)


def test_unbound_tiers_use_the_session_model() -> None:
    env = {"OPENAI_BASE_URL": "http://e/v1", "MODEL_MAIN": "main-m"}
    session = resolve_endpoint(config(), "default", env)
    assert resolve_endpoint(config(), "simple", env) == session
    assert resolve_endpoint(config(), "advanced", env) == session


def test_a_name_only_tier_binding_uses_the_session_endpoint() -> None:
    models = {"main": {"model": "main-m", "baseUrl": "http://e/v1", "apiKey": SECRET}}
    models |= {"simple": "small-m", "advanced": {"model": "big-m"}}
    assert resolve_endpoint(config(models), "simple", {}) == ModelEndpoint(
        "small-m", "http://e/v1", SECRET
    )
    assert resolve_endpoint(config(models), "advanced", {}) == ModelEndpoint(
        "big-m", "http://e/v1", SECRET
    )


def test_tier_environment_overrides_the_tier_model_name() -> None:
    models = {"main": "main-m", "simple": "small-m"}
    env = {"OPENAI_BASE_URL": "http://e/v1", "MODEL_SIMPLE": "tiny", "MODEL_ADVANCED": "huge"}
    assert resolve_endpoint(config(models), "simple", env) == ModelEndpoint(
        "tiny", "http://e/v1", None
    )
    assert resolve_endpoint(config(models), "advanced", env) == ModelEndpoint(
        "huge", "http://e/v1", None
    )
    # A tier binding needs no session model name.
    assert resolve_endpoint(config(), "simple", env) == ModelEndpoint("tiny", "http://e/v1", None)


def test_a_tier_with_its_own_endpoint_never_gets_the_session_key() -> None:
    models = {
        "main": "main-m",
        "advanced": {"model": "big-m", "baseUrl": "http://other/v1"},
        "simple": {"model": "small-m", "baseUrl": "http://third/v1", "apiKey": "sk-third"},
    }
    env = {"OPENAI_BASE_URL": "http://e/v1", "OPENAI_API_KEY": SECRET}
    assert resolve_endpoint(config(models), "advanced", env) == ModelEndpoint(
        "big-m", "http://other/v1", None
    )
    assert resolve_endpoint(config(models), "simple", env) == ModelEndpoint(
        "small-m", "http://third/v1", "sk-third"
    )


def test_a_tier_key_without_its_own_url_goes_to_the_session_endpoint() -> None:
    models = {"main": "main-m", "simple": {"model": "small-m", "apiKey": "sk-simple"}}
    env = {"OPENAI_BASE_URL": "http://e/v1", "OPENAI_API_KEY": SECRET}
    assert resolve_endpoint(config(models), "simple", env) == ModelEndpoint(
        "small-m", "http://e/v1", "sk-simple"
    )


# ---------------------------------------------------------------- concurrency


async def test_concurrent_calls_are_in_flight_together() -> None:
    with ScriptedModel(latency=0.2) as slow:
        slow.respond(lambda request: f"answer to {request.last_user}")
        results: dict[int, str] = {}

        async def ask(client: ModelClient, n: int) -> None:
            _, final = await collect(client, [{"role": "user", "content": str(n)}])
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
    async with ModelClient(endpoint, backoff=0.01) as client:
        with pytest.raises(ModelError, match="without an answer"):
            async for _ in client.stream([{"role": "user", "content": "hi"}], None):
                pass
    thread.join(timeout=5)
    listener.close()
