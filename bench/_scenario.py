"""What every contender of `bench.peers` does: the prompt, the tool, the team and the script.

One place for the words and the shapes, so the runtime and the peers get the same
prompt, the same trivial tool and the same scripted answers. The scripted model
answers from the request alone (no state), so any number of clients may share it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the answers run in the model server's process only: a peer's process
    # must not import the runtime (its peak memory would include ours)
    from runtime.testing import RecordedRequest, Step

MODEL = "scripted"
API_KEY = "sk-bench-not-a-key"

INSTRUCTIONS = "You are a helpful assistant. Use the lookup tool when asked to look things up."
PROMPT = "Look up item 1, then item 2, then item 3, one at a time, and summarise."
TOOL_NAME = "lookup"
TOOL_DESCRIPTION = "Look an item up by its query."
TOOL_CALLS_PER_TURN = 3
FINAL_TEXT = "Looked up all three items: each one was found and is in stock."

LEAD = "lead"
LEAD_INSTRUCTIONS = "You are the lead. Delegate each task to its specialist, then combine."
DELEGATION_PROMPT = "Ask every specialist for its part and combine the answers."
SPECIALISTS = tuple(f"s{index:02d}" for index in range(1, 13))
COMBINED_TEXT = "Combined the twelve answers."

CHAT_PROMPT = "Hello, who are you?"
CHAT_TEXT = "Hello! I am the benchmark assistant, streaming a short answer of a few words."


def specialist_instructions(name: str) -> str:
    return f"You are specialist {name}. Answer the task in one sentence."


def lookup_result(query: str) -> dict[str, Any]:
    """What the trivial tool returns, in every framework."""
    return {"query": query, "found": True, "stock": 7}


# ---------------------------------------------------------------- the agent repo (ours)

_HANDLER = """\
async def handler(args: dict, ctx) -> dict:
    return {"query": args["query"], "found": True, "stock": 7}
"""


def write_repo(root: Path) -> Path:
    """The runtime's repo for every workload: `default` with the tool, `lead` and 12 specialists."""
    files: dict[str, Any] = {
        "amodal.json": {"name": "bench-peers", "version": "1.0.0"},
        "agents/default/AGENT.md": INSTRUCTIONS + "\n",
        "agents/default/agent.json": {"tools": [TOOL_NAME]},
        f"agents/{LEAD}/AGENT.md": LEAD_INSTRUCTIONS + "\n",
        f"agents/{LEAD}/agent.json": {"subagents": list(SPECIALISTS)},
        f"tools/{TOOL_NAME}/tool.json": {
            "description": TOOL_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "What to look up."}},
                "required": ["query"],
                "additionalProperties": False,
            },
        },
        f"tools/{TOOL_NAME}/handler.py": _HANDLER,
    }
    for name in SPECIALISTS:
        files[f"agents/{name}/AGENT.md"] = specialist_instructions(name) + "\n"
        files[f"agents/{name}/agent.json"] = {"description": f"Specialist {name}."}
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(content, indent=2) + "\n"
        path.write_text(text, encoding="utf-8")
    return root


# ---------------------------------------------------------------- the scripted answers


def _results_since_last_user(request: RecordedRequest) -> int:
    """How many tool results follow the last user message, on either wire (OpenAI's or
    Anthropic's: the same responder answers both servers)."""
    from runtime.models import ToolResultMessage, UserMessage

    messages = request.conversation
    last = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=-1)
    return sum(1 for m in messages[last + 1 :] if isinstance(m, ToolResultMessage))


def answer_tools(request: RecordedRequest) -> Step:
    """Workload (a): three lookups, one per model call, then the answer."""
    from runtime.testing import reply, tool_call

    done = _results_since_last_user(request)
    if done < TOOL_CALLS_PER_TURN:
        return tool_call(TOOL_NAME, {"query": f"item {done + 1}"})
    return reply(FINAL_TEXT)


def answer_delegation(request: RecordedRequest) -> Step:
    """Workload (b): the lead fans out twelve tasks at once, each specialist answers once."""
    from runtime.testing import reply, tool_call, tool_calls

    system = request.system or ""
    for name in SPECIALISTS:
        if f"You are specialist {name}." in system:
            return reply(f"The answer of {name}.")
    if any(m.get("role") == "tool" for m in request.messages):
        return reply(COMBINED_TEXT)
    offered = {tool["function"]["name"]: tool["function"] for tool in request.body["tools"]}
    if "call_subagent" in offered:  # ours: one call with twelve tasks
        tasks = [{"subagent": name, "task": f"Your part, {name}."} for name in SPECIALISTS]
        return tool_call("call_subagent", {"calls": tasks})
    # The peers: one agent-as-tool per specialist, all twelve called in one response.
    calls = []
    for name in SPECIALISTS:
        parameters = offered[name]["parameters"]
        argument = (parameters.get("required") or list(parameters["properties"]))[0]
        calls.append((name, {argument: f"Your part, {name}."}))
    return tool_calls(calls)


def answer_chat(request: RecordedRequest) -> Step:
    """Workload (c): one streamed text answer."""
    from runtime.testing import reply

    return reply(CHAT_TEXT)


LONG_RESULT_CHARS = 5_000
"""What each tool call of the long session returns (bench.long_session)."""
SUMMARY = "A record: the person read pages one after another; each page was fetched and read."


def answer_long(request: RecordedRequest) -> Step:
    """A long session: each user message fetches a page, then the agent answers; the
    summariser (compaction) gets a short record."""
    from runtime.testing import reply, tool_call

    if (request.system or "").startswith("You write the record"):
        return reply(SUMMARY)
    last = request.messages[-1]
    if last["role"] == "user":
        return tool_call("fetch", {"page": len(request.messages)})
    return reply("Read it.")


RESPONDERS = {
    "tools": answer_tools,
    "delegation": answer_delegation,
    "chat": answer_chat,
    "long": answer_long,
}
