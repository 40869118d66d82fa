"""The scripted Anthropic server: the Messages API's wire format (read back by the official
`anthropic` SDK's own parsers), the rules it holds requests to, its prompt cache, and the
script language it shares with `ScriptedModel`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from runtime.models import AssistantMessage, SystemMessage, ToolResultMessage, UserMessage
from runtime.testing import ScriptedAnthropic, error, tool_call, tool_calls

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def server() -> Iterator[ScriptedAnthropic]:
    with ScriptedAnthropic() as scripted:
        yield scripted
        scripted.assert_done()


@pytest.fixture
def sdk(server: ScriptedAnthropic) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0) as client:
        yield client


def test_a_streamed_answer_is_read_by_the_sdks_own_stream_parser(
    server: ScriptedAnthropic, sdk: anthropic.Anthropic
) -> None:
    server.enqueue(tool_calls([("lookup", {"id": 7}), ("notify", {"to": "ops"})], text="On it."))
    tools: Any = [{"name": n, "input_schema": {"type": "object"}} for n in ("lookup", "notify")]
    with sdk.messages.stream(
        model="claude-x", max_tokens=100, messages=USER, tools=tools
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop"} <= set(kinds)
    assert final.model == "claude-x" and final.stop_reason == "tool_use"
    text, *uses = final.content
    assert text.type == "text" and text.text == "On it."
    assert [(u.type, u.name, u.input) for u in uses] == [  # type: ignore[union-attr]
        ("tool_use", "lookup", {"id": 7}),
        ("tool_use", "notify", {"to": "ops"}),
    ]
    assert final.usage.output_tokens > 1 and final.usage.input_tokens >= 1


def test_the_raw_event_sequence_is_the_apis(server: ScriptedAnthropic) -> None:
    server.reply("Hi there.")
    body = {"model": "m", "max_tokens": 10, "messages": USER, "stream": True}
    response = httpx.post(f"{server.base_url}/v1/messages", json=body)
    assert response.headers["content-type"] == "text/event-stream"
    events = [block.split("\n")[0] for block in response.text.split("\n\n") if block]
    events = [e for i, e in enumerate(events) if i == 0 or events[i - 1] != e]  # one a kind
    assert events == [
        "event: message_start",
        "event: content_block_start",
        "event: ping",
        "event: content_block_delta",
        "event: content_block_stop",
        "event: message_delta",
        "event: message_stop",
    ]
    delta = next(b for b in response.text.split("\n\n") if b.startswith("event: message_delta"))
    assert '"cache_creation_input_tokens"' in delta and '"cache_read_input_tokens"' in delta


def test_a_non_streamed_answer_through_the_sdk(
    server: ScriptedAnthropic, sdk: anthropic.Anthropic
) -> None:
    server.enqueue(tool_call("lookup", {"id": 1}, id="toolu_1"))
    message = sdk.messages.create(model="claude-x", max_tokens=10, messages=USER)  # type: ignore[arg-type]
    (use,) = message.content
    assert (use.type, use.id, use.input) == ("tool_use", "toolu_1", {"id": 1})  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, anthropic.RateLimitError),
        (529, anthropic.InternalServerError),
        (400, anthropic.BadRequestError),
    ],
)
def test_errors_have_the_apis_body(
    server: ScriptedAnthropic, sdk: anthropic.Anthropic, status: int, kind: type[Exception]
) -> None:
    server.enqueue(error(status, "scripted trouble"))
    with pytest.raises(kind) as caught:
        sdk.messages.create(model="m", max_tokens=10, messages=USER)  # type: ignore[arg-type]
    body = caught.value.body  # type: ignore[attr-defined]
    assert body["type"] == "error" and body["error"]["message"] == "scripted trouble"


TOOL = {"name": "f", "input_schema": {"type": "object"}}
USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]}
RESULT = {"type": "tool_result", "tool_use_id": "c1", "content": "ok"}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"model": "m", "messages": USER}, "max_tokens"),
        ({"model": "m", "max_tokens": 5, "messages": []}, "at least one message"),
        ({"model": "m", "max_tokens": 5, "messages": [USE]}, 'first message must use the "user"'),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
            },
            "non-empty",
        ),
        (
            {"model": "m", "max_tokens": 5, "messages": [*USER, USE], "tools": [TOOL]},
            "without `tool_result`",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    *USER,
                    USE,
                    {"role": "user", "content": [{"type": "text", "text": "x"}, RESULT]},
                ],
                "tools": [TOOL],
            },
            "must come first",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [*USER, USE, {"role": "user", "content": [RESULT]}],
            },
            "must define tools",
        ),
        ({"model": "m", "max_tokens": 5, "messages": USER, "temperature": 1.5}, "temperature"),
    ],
    ids=[
        "no max_tokens",
        "no messages",
        "assistant first",
        "empty text",
        "unanswered call",
        "result after text",
        "no tools",
        "temperature",
    ],
)
def test_what_the_real_api_refuses_is_a_400_and_an_unexpected_request(
    body: dict[str, Any], says: str
) -> None:
    with ScriptedAnthropic() as server:
        server.respond(lambda request: "never answered")
        response = httpx.post(f"{server.base_url}/v1/messages", json=body)
        assert response.status_code == 400
        assert says in response.json()["error"]["message"]
        with pytest.raises(AssertionError, match="the real API would refuse it"):
            server.assert_done()


def test_the_prompt_cache_writes_a_prefix_then_reads_it(server: ScriptedAnthropic) -> None:
    system = [{"type": "text", "text": "s" * 400, "cache_control": {"type": "ephemeral"}}]
    server.respond(lambda request: "ok")
    usage = []
    for question in ("one?", "two?"):
        body = {
            "model": "m",
            "max_tokens": 5,
            "system": system,
            "messages": [{"role": "user", "content": question}],
        }
        usage.append(httpx.post(f"{server.base_url}/v1/messages", json=body).json()["usage"])
    assert (usage[0]["cache_creation_input_tokens"], usage[0]["cache_read_input_tokens"]) == (
        100,
        0,
    )
    assert (usage[1]["cache_creation_input_tokens"], usage[1]["cache_read_input_tokens"]) == (
        0,
        100,
    )
    assert usage[1]["input_tokens"] == 1  # "two?": the part after the cached prefix


def test_a_prefix_under_the_minimum_is_not_cached() -> None:
    with ScriptedAnthropic(cache_min_tokens=1024) as server:
        server.respond(lambda request: "ok")
        system = [{"type": "text", "text": "s" * 400, "cache_control": {"type": "ephemeral"}}]
        body = {"model": "m", "max_tokens": 5, "system": system, "messages": USER}
        usage = httpx.post(f"{server.base_url}/v1/messages", json=body).json()["usage"]
    assert usage["cache_creation_input_tokens"] == usage["cache_read_input_tokens"] == 0


def test_a_recorded_request_reads_the_same_on_both_wires(server: ScriptedAnthropic) -> None:
    server.reply("fine")
    body = {
        "model": "m",
        "max_tokens": 5,
        "system": [{"type": "text", "text": "You help."}],
        "tools": [TOOL],
        "messages": [
            {"role": "user", "content": "Look it up."},
            USE,
            {"role": "user", "content": [RESULT, {"type": "text", "text": "Answer now."}]},
        ],
    }
    httpx.post(f"{server.base_url}/v1/messages", json=body)
    (request,) = server.requests
    assert (request.system, request.tools, request.last_user) == ("You help.", ["f"], "Answer now.")
    assert request.conversation == [
        SystemMessage("You help."),
        UserMessage.of("Look it up."),
        AssistantMessage("", (request.conversation[2].tool_calls[0],)),  # type: ignore[union-attr]
        ToolResultMessage("c1", "f", "ok"),
        UserMessage.of("Answer now."),
    ]
    call = request.conversation[2].tool_calls[0]  # type: ignore[union-attr]
    assert (call.id, call.name, call.arguments) == ("c1", "f", "{}")


def test_the_plugin_guards_anthropic_and_scripts_it(tmp_path: Path) -> None:
    test_file = tmp_path / "test_guarded.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import os

            import httpx

            LEAK = [{"role": "user", "content": "leak"}]
            BODY = {"model": "m", "max_tokens": 5, "messages": LEAK}

            def test_reaches_anthropic_by_accident():
                assert os.environ["ANTHROPIC_API_KEY"] == "sk-ant-amodal-test-dummy-key"
                httpx.post(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", json=BODY)

            def test_uses_the_scripted_anthropic(scripted_anthropic):
                assert os.environ["ANTHROPIC_BASE_URL"] == scripted_anthropic.base_url
                scripted_anthropic.reply("hi")
                url = os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages"
                assert httpx.post(url, json=BODY).status_code == 200
            """
        )
    )
    env = {**os.environ}
    env.pop("PYTEST_ADDOPTS", None)
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"),
            *("-p", "runtime.testing.pytest_plugin", str(test_file)),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 1, output
    assert "PASSED test_guarded.py::test_uses_the_scripted_anthropic" in output
    assert "ERROR test_guarded.py::test_reaches_anthropic_by_accident" in output
    assert "'leak'" in output
