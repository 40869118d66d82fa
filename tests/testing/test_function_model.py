"""`runtime.testing.FunctionModel`: a user's unit test drives an agent in process, no network.

The autouse guard of `runtime.testing.pytest_plugin` fails any test whose model call
reaches an endpoint, so every test here also proves nothing went over HTTP.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import Runtime, events
from runtime.testing import FunctionModel, error, tool_call, tool_calls

pytestmark = pytest.mark.anyio

REPO: dict[str, Any] = {
    "agents/default/AGENT.md": "You look things up.\n",
    "agents/default/agent.json": {
        "tools": ["lookup"],
        "modelSettings": {"temperature": 0.3, "maxTokens": 200},
    },
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


async def test_a_unit_test_drives_an_agent_through_a_tool_with_no_network(
    make_repo: Callable[..., Path],
) -> None:
    def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        results = [m for m in messages if m["role"] == "tool"]
        if not results:
            return tool_call("lookup", {"id": 7})
        return f"Order 7 is {'shipped' if 'shipped' in results[-1]['content'] else 'unknown'}."

    model = FunctionModel(answer)
    async with Runtime.open(make_repo(REPO), model=model) as rt:
        result = await rt.chat("Where is order 7?")
    assert result.text == "Order 7 is shipped."
    assert model.calls[0].tool_names == ["ask_choice", "lookup", "stop_execution"]
    assert model.calls[0].messages[-1] == {"role": "user", "content": "Where is order 7?"}
    ran = [e for e in result.events if isinstance(e, events.ToolResult)]
    assert ran[0].result == {"id": 7, "status": "shipped"}


async def test_the_agents_model_settings_reach_the_model(make_repo: Callable[..., Path]) -> None:
    model = FunctionModel(lambda messages, tools: "ok")
    async with Runtime.open(make_repo(REPO), model=model) as rt:
        await rt.chat("hi")
    assert (model.calls[0].settings.temperature, model.calls[0].settings.max_tokens) == (0.3, 200)


async def test_an_async_function_and_several_calls_in_one_answer(
    make_repo: Callable[..., Path],
) -> None:
    async def answer(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        if messages[-1]["role"] == "user":
            return tool_calls([("lookup", {"id": 1}), ("lookup", {"id": 2})], text="Checking.")
        return "Both shipped."

    async with Runtime.open(make_repo(REPO), model=FunctionModel(answer)) as rt:
        result = await rt.chat("Orders 1 and 2?")
    assert result.text == "Checking.Both shipped."
    ids = [e.result["id"] for e in result.events if isinstance(e, events.ToolResult)]
    assert ids == [1, 2]


async def test_an_error_step_is_a_model_error_that_ends_the_turn(
    make_repo: Callable[..., Path],
) -> None:
    model = FunctionModel(lambda messages, tools: error(503, "overloaded"), name="my-double")
    async with Runtime.open(make_repo(REPO), model=model) as rt:
        result = await rt.chat("hi")
    assert result.reason == "error"
    assert result.error is not None and "my-double" in result.error and "overloaded" in result.error


async def test_a_function_returning_something_else_says_what_to_return(
    make_repo: Callable[..., Path],
) -> None:
    async with Runtime.open(make_repo(REPO), model=FunctionModel(lambda m, t: 42)) as rt:
        result = await rt.chat("hi")
    assert result.reason == "error"
    assert result.error is not None and "return a string or a step" in result.error


async def test_what_the_function_gets_is_a_copy(make_repo: Callable[..., Path]) -> None:
    def meddle(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        messages.clear()
        tools.clear()
        return "fine"

    model = FunctionModel(meddle)
    async with Runtime.open(make_repo(REPO), model=model) as rt:
        await rt.chat("hi")
    assert model.calls[0].messages and model.calls[0].tools
