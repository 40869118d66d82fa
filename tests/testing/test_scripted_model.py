"""The scripted model server: the wire format it speaks, scripting, recording and its checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

import runtime.testing
from runtime.testing import RecordedRequest, ScriptedModel, Step, reply, tool_call

USER = [{"role": "user", "content": "hello"}]


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as server:
        yield server
        server.assert_done()


@pytest.fixture
def sdk(model: ScriptedModel) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=model.base_url, api_key="sk-dummy", max_retries=0) as client:
        yield client


def sse_chunks(model: ScriptedModel, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming request by hand and return the decoded `data:` chunks."""
    response = httpx.post(f"{model.base_url}/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    events = [line for line in response.text.split("\n\n") if line]
    assert all(event.startswith("data: ") for event in events)
    assert events[-1] == "data: [DONE]"
    return [json.loads(event.removeprefix("data: ")) for event in events[:-1]]


def test_public_names_are_exported() -> None:
    for name in runtime.testing.__all__:
        assert getattr(runtime.testing, name) is not None


# ---------------------------------------------------------------- wire format


def test_streamed_text_arrives_in_several_deltas_then_finish_and_usage(
    model: ScriptedModel,
) -> None:
    model.reply("one two three four five six seven eight nine ten eleven twelve")
    chunks = sse_chunks(
        model,
        {"model": "m", "messages": USER, "stream": True, "stream_options": {"include_usage": True}},
    )
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    texts = [d for d in deltas if d]
    assert len(texts) > 2
    assert "".join(texts) == "one two three four five six seven eight nine ten eleven twelve"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] > 0


def test_usage_chunk_only_when_asked_for(model: ScriptedModel) -> None:
    model.reply("hi")
    chunks = sse_chunks(model, {"model": "m", "messages": USER, "stream": True})
    assert all("usage" not in chunk for chunk in chunks)


def test_streamed_tool_call_sends_id_and_name_first_then_argument_fragments(
    model: ScriptedModel,
) -> None:
    model.tool_call("search", {"query": "weather in Paris", "limit": 5}, id="call_x")
    chunks = sse_chunks(model, {"model": "m", "messages": USER, "stream": True})
    fragments = [
        call for chunk in chunks for call in chunk["choices"][0]["delta"].get("tool_calls") or []
    ]
    first, *rest = fragments
    assert first["id"] == "call_x"
    assert first["function"]["name"] == "search"
    assert len(rest) > 1
    assert all("id" not in part and "name" not in part["function"] for part in rest)
    arguments = "".join(part["function"]["arguments"] for part in fragments)
    assert json.loads(arguments) == {"query": "weather in Paris", "limit": 5}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_non_streaming_answer_through_the_sdk(model: ScriptedModel, sdk: openai.OpenAI) -> None:
    model.tool_call("lookup", {"id": 7}, text="Looking.").reply("plain")
    first = sdk.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    second = sdk.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    message = first.choices[0].message
    assert message.content == "Looking."
    assert message.tool_calls is not None
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == [  # type: ignore[union-attr]
        ("lookup", '{"id": 7}')
    ]
    assert first.choices[0].finish_reason == "tool_calls"
    assert second.choices[0].message.content == "plain"
    assert second.usage is not None and second.usage.prompt_tokens >= 1


# ---------------------------------------------------------------- faults


STREAM = {"model": "m", "messages": USER, "stream": True}


def raw_events(model: ScriptedModel, timeout: float = 10) -> list[str]:
    """The `data:` payloads of a streamed answer that ended properly (chunked encoding)."""
    response = httpx.post(f"{model.base_url}/chat/completions", json=STREAM, timeout=timeout)
    assert response.status_code == 200
    return [event.removeprefix("data: ") for event in response.text.split("\n\n") if event]


def test_an_unfinished_text_answer_ends_cleanly_without_finish_or_done(
    model: ScriptedModel,
) -> None:
    model.enqueue(runtime.testing.unfinished(reply("It is sunny and")))
    events = raw_events(model)  # no transport error: the response ended properly
    assert "[DONE]" not in events
    chunks = [json.loads(event) for event in events]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == (
        "It is sunny and"
    )


def test_an_unfinished_tool_call_sends_the_whole_call_and_nothing_after(
    model: ScriptedModel,
) -> None:
    model.enqueue(runtime.testing.unfinished(tool_call("charge", {"amount": 5})))
    chunks = [json.loads(event) for event in raw_events(model)]
    fragments = [
        call["function"].get("arguments", "")
        for c in chunks
        for call in c["choices"][0]["delta"].get("tool_calls") or ()
    ]
    assert json.loads("".join(fragments)) == {"amount": 5}
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)


def test_a_junk_chunk_follows_the_text(model: ScriptedModel) -> None:
    model.enqueue(runtime.testing.junk_chunk("Hi", junk="{oops"))
    events = raw_events(model)
    assert "{oops" in events and events[-1] == "[DONE]"
    assert events.index("{oops") == 2  # after the role chunk and the text


def test_a_hang_waits_before_the_status_line_then_answers() -> None:
    with ScriptedModel() as model:
        model.enqueue(runtime.testing.hang(30, reply("late")))
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{model.base_url}/chat/completions", json=STREAM, timeout=0.2)
        model.enqueue(runtime.testing.hang(0.01, reply("soon")))
        events = raw_events(model)
        assert "soon" in "".join(events)


def test_a_stall_sends_the_text_then_waits_and_closing_ends_it() -> None:
    with ScriptedModel() as model:
        model.enqueue(runtime.testing.stall("It is", 30))
        received: list[bytes] = []
        with (
            pytest.raises(httpx.ReadTimeout),
            httpx.stream(
                "POST", f"{model.base_url}/chat/completions", json=STREAM, timeout=0.3
            ) as response,
        ):
            for part in response.iter_raw():
                received.append(part)
        sent = b"".join(received)
        assert b'"content": "is"' in sent and b'finish_reason": "stop' not in sent
    # Leaving the block closed the server, which ended the 30 s stall at once.


def test_models_route_lists_a_model(model: ScriptedModel, sdk: openai.OpenAI) -> None:
    assert [entry.id for entry in sdk.models.list()] == ["scripted"]
    assert model.requests == []  # only chat requests are recorded


def test_error_step_answers_with_status_and_openai_error_body(
    model: ScriptedModel, sdk: openai.OpenAI
) -> None:
    model.error(429, "rate limited, try later")
    with pytest.raises(openai.RateLimitError) as caught:
        sdk.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert caught.value.status_code == 429
    assert "rate limited, try later" in str(caught.value)


def test_tool_call_ids_are_numbered_when_not_given(
    model: ScriptedModel, sdk: openai.OpenAI
) -> None:
    model.tool_calls([("a", {}), ("b", {})]).tool_call("c")
    ids = []
    for _ in range(2):
        answer = sdk.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
        ids += [call.id for call in answer.choices[0].message.tool_calls or []]
    assert ids == ["call_1", "call_2", "call_3"]


# ---------------------------------------------------------------- scripting and recording


def test_requests_are_recorded_with_their_prompt_tools_and_headers(
    model: ScriptedModel, sdk: openai.OpenAI
) -> None:
    model.reply("ok")
    tools = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("a", "b")]
    sdk.chat.completions.create(
        model="gpt-test",
        messages=[
            {"role": "system", "content": "You are the billing agent."},
            {"role": "user", "content": "refund order 7"},
        ],
        tools=tools,  # type: ignore[arg-type]
    )
    (request,) = model.requests
    assert request.path == "/v1/chat/completions"
    assert request.model == "gpt-test"
    assert request.system == "You are the billing agent."
    assert request.last_user == "refund order 7"
    assert request.tools == ["a", "b"]
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert request.headers["authorization"] == "Bearer sk-dummy"
    assert request.stream is False


def test_steps_are_consumed_in_order_then_the_responder_answers(
    model: ScriptedModel, sdk: openai.OpenAI
) -> None:
    model.reply("first").reply("second")
    model.respond(lambda request: f"echo {request.last_user}")
    answers = [
        sdk.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": str(n)}],
        )
        .choices[0]
        .message.content
        for n in range(4)
    ]
    assert answers == ["first", "second", "echo 2", "echo 3"]


def test_responder_routes_concurrent_requests_by_system_prompt(model: ScriptedModel) -> None:
    def route(request: RecordedRequest) -> Step:
        if request.system == "researcher":
            return tool_call("search", {"q": request.last_user})
        return reply(f"{request.system} done")

    model.respond(route)

    def ask(system: str) -> Any:
        with openai.OpenAI(base_url=model.base_url, api_key="k", max_retries=0) as client:
            messages: Any = [
                {"role": "system", "content": system},
                {"role": "user", "content": "go"},
            ]
            return client.chat.completions.create(model="m", messages=messages).choices[0]

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        researcher, writer = pool.map(ask, ["researcher", "writer"])
    assert researcher.message.tool_calls[0].function.name == "search"
    assert writer.message.content == "writer done"
    assert sorted(r.system or "" for r in model.requests) == ["researcher", "writer"]


def test_assert_done_reports_unconsumed_steps() -> None:
    with ScriptedModel() as model:
        model.reply("used").tool_call("never_called")
        httpx.post(f"{model.base_url}/chat/completions", json={"model": "m", "messages": USER})
        assert model.pending == 1
        with pytest.raises(
            AssertionError, match=r"(?s)1 scripted step\(s\) never consumed.*never_called"
        ):
            model.assert_done()


def test_assert_done_reports_unexpected_requests_answered_with_500() -> None:
    with ScriptedModel() as model:
        response = httpx.post(
            f"{model.base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "anyone there?"}]},
        )
        assert response.status_code == 500
        assert "no step queued" in response.json()["error"]["message"]
        assert len(model.requests) == 1
        with pytest.raises(AssertionError, match=r"(?s)unexpected request.*anyone there\?"):
            model.assert_done()


def test_a_responder_that_raises_is_an_unexpected_request() -> None:
    def broken(request: RecordedRequest) -> str:
        raise KeyError("no route for this prompt")

    with ScriptedModel() as model:
        model.respond(broken)
        response = httpx.post(
            f"{model.base_url}/chat/completions", json={"model": "m", "messages": USER}
        )
        assert response.status_code == 500
        with pytest.raises(AssertionError, match="responder raised KeyError"):
            model.assert_done()


def test_invalid_json_body_is_rejected_and_recorded_as_unexpected() -> None:
    with ScriptedModel() as model:
        response = httpx.post(f"{model.base_url}/chat/completions", content=b"{not json")
        assert response.status_code == 400
        with pytest.raises(AssertionError, match="bad body"):
            model.assert_done()


def test_close_is_idempotent_and_frees_the_port() -> None:
    model = ScriptedModel().start()
    url = model.base_url
    model.reply("hi")
    with httpx.Client() as client:  # holds a keep-alive connection open across close()
        client.post(f"{url}/chat/completions", json={"model": "m", "messages": USER})
        model.close()
        model.close()
        with pytest.raises(httpx.TransportError):
            client.post(f"{url}/chat/completions", json={"model": "m", "messages": USER})
    with pytest.raises(RuntimeError, match="not started"):
        _ = model.base_url


# ---------------------------------------------------------------- the pytest plugin


def test_plugin_guard_fails_a_test_reaching_a_model_and_scripted_model_passes(
    tmp_path: Path,
) -> None:
    test_file = tmp_path / "test_guarded.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import os

            import httpx

            def test_reaches_a_model_by_accident():
                assert os.environ["OPENAI_API_KEY"] == "sk-amodal-test-dummy-key"
                assert "MODEL_SIMPLE" not in os.environ
                httpx.post(
                    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "leak"}]},
                )

            def test_uses_the_scripted_model(scripted_model):
                assert os.environ["OPENAI_BASE_URL"] == scripted_model.base_url
                assert os.environ["MODEL_MAIN"] == "scripted"
                scripted_model.reply("hi")
                response = httpx.post(
                    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                    json={"model": "m", "messages": []},
                )
                assert response.status_code == 200

            def test_leaves_a_step_unconsumed(scripted_model):
                scripted_model.reply("never asked for")
            """
        )
    )
    env = {**os.environ, "MODEL_SIMPLE": "from-the-developer-shell"}
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
    assert "PASSED test_guarded.py::test_uses_the_scripted_model" in output
    assert "reached the guard endpoint" in output
    assert "'leak'" in output
    assert "never consumed" in output
    # The guard and assert_done fail at teardown: pytest reports those as errors.
    assert "ERROR test_guarded.py::test_reaches_a_model_by_accident" in output
    assert "ERROR test_guarded.py::test_leaves_a_step_unconsumed" in output
