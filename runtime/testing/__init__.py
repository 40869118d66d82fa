"""Test doubles shipped with the runtime, for your own tests of your agents.

`FunctionModel(fn)` answers in process (no HTTP): `fn(messages, tools)` returns a
string or a step. `ScriptedModel` is the over-the-wire double, a scripted
OpenAI-compatible model server:

    with ScriptedModel() as model:
        model.tool_call("lookup", {"id": 7}).reply("Found it.")
        ...  # point OPENAI_BASE_URL at model.base_url and run a turn
        assert model.requests[0].tools == ["lookup"]
        model.assert_done()

It speaks real HTTP on loopback (streaming SSE and plain JSON), so everything
between the runtime and the wire, the `openai` SDK included, runs as in
production. Pytest fixtures live in `runtime.testing.pytest_plugin`.
"""

from runtime.testing._server import RecordedRequest, Responder, ScriptedModel
from runtime.testing._steps import (
    ScriptedToolCall,
    Step,
    cut_stream,
    error,
    hang,
    junk_chunk,
    raw_arguments,
    reply,
    stall,
    tool_call,
    tool_calls,
    unfinished,
)
from runtime.testing.function_model import FunctionCall, FunctionModel

__all__ = [
    "FunctionCall",
    "FunctionModel",
    "RecordedRequest",
    "Responder",
    "ScriptedModel",
    "ScriptedToolCall",
    "Step",
    "cut_stream",
    "error",
    "hang",
    "junk_chunk",
    "raw_arguments",
    "reply",
    "stall",
    "tool_call",
    "tool_calls",
    "unfinished",
]
