"""Test doubles shipped with the runtime, for your own tests of your agents.

`FunctionModel(fn)` answers in process (no HTTP): `fn(messages, tools)` returns a
string or a step. `ScriptedModel` is the over-the-wire double, a scripted
OpenAI-compatible model server, and `ScriptedAnthropic` its twin for Anthropic's
Messages API; both take the same script:

    with ScriptedModel() as model:
        model.tool_call("lookup", {"id": 7}).reply("Found it.")
        ...  # point OPENAI_BASE_URL at model.base_url and run a turn
        assert model.requests[0].tools == ["lookup"]
        model.assert_done()

They speak real HTTP on loopback (streaming SSE and plain JSON), so everything
between the runtime and the wire, the `openai` and `anthropic` SDKs included, runs as
in production. Pytest fixtures live in `runtime.testing.pytest_plugin`.
"""

from runtime.testing._requests import RecordedRequest
from runtime.testing._server import (
    Responder,
    ScriptedAnthropic,
    ScriptedModel,
    ScriptedServer,
)
from runtime.testing._steps import (
    ScriptedToolCall,
    Step,
    cut_in_tool_call,
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
    "ScriptedAnthropic",
    "ScriptedModel",
    "ScriptedServer",
    "ScriptedToolCall",
    "Step",
    "cut_in_tool_call",
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
