"""The names and descriptions of every tool a bundle can offer (SPEC 2).

This is the one source of tool names: agent declarations are checked against
it, and the prompt names only tools found here, so a prompt can never mention a
tool that does not exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

ToolKind = Literal[
    "protocol",
    "delegation",
    "skill",
    "knowledge",
    "store",
    "file",
    "custom",
    "connection",
    "mcp",
    "memory",
]
StoreOp = Literal["get", "query", "put", "delete"]

STOP_EXECUTION = "stop_execution"
ASK_CHOICE = "ask_choice"
PROTOCOL_TOOLS = (STOP_EXECUTION, ASK_CHOICE)
CALL_SUBAGENT = "call_subagent"
LOAD_SKILL = "load_skill"
LOAD_KNOWLEDGE = "load_knowledge"
REQUEST = "request"
FILE_TOOLS = (
    "read_file",
    "write_file",
    "list_files",
    "glob_files",
    "grep_files",
    "propose_source_change",
)
MEMORY_ADD = "memory__add"
MEMORY_REMOVE = "memory__remove"
MEMORY_LIST = "memory__list"
MEMORY_SEARCH = "memory__search"
MEMORY_TOOLS = (MEMORY_ADD, MEMORY_REMOVE, MEMORY_LIST, MEMORY_SEARCH)
"""What an agent with `memory` gets (SPEC 21); never listed in `tools`."""
SESSION_SEARCH = "session_search"
READ_OPS: tuple[StoreOp, ...] = ("get", "query")
WRITE_OPS: tuple[StoreOp, ...] = ("put", "delete")

_BUILTIN_DESCRIPTIONS: dict[str, tuple[ToolKind, str]] = {
    "stop_execution": ("protocol", "End the run now, when the task is done or cannot continue."),
    "ask_choice": ("protocol", "Ask the person to choose one of a few options; ends the turn."),
    CALL_SUBAGENT: ("delegation", "Hand one or more tasks to specialist agents."),
    LOAD_SKILL: (
        "skill",
        "Load the full instructions of a skill by its name, or one of its supporting files.",
    ),
    LOAD_KNOWLEDGE: ("knowledge", "Load a knowledge document by its name."),
    REQUEST: (
        "connection",
        "Call an HTTP API through one of your connections: a method and a path on its "
        "base URL; authentication is added for you.",
    ),
    "read_file": ("file", "Read a text file of the workspace."),
    "write_file": ("file", "Write a text file of the workspace."),
    "list_files": ("file", "List the files of a workspace directory."),
    "glob_files": (
        "file",
        "Find workspace files whose path matches a glob pattern (`**/*.py`, `src/*.{ts,tsx}`).",
    ),
    "grep_files": (
        "file",
        "Search the text of workspace files for a regular expression (RE2 syntax); gives "
        "each matching line with its file and line number.",
    ),
    "propose_source_change": (
        "file",
        "Propose a change to the agent repo for a person to review; never applied directly.",
    ),
    MEMORY_ADD: (
        "memory",
        "Remember one short note about the person (or whoever this memory belongs to) for "
        "later sessions: a preference, a fact, a decision. One fact per note.",
    ),
    MEMORY_REMOVE: ("memory", "Forget one note by its id (from memory__list or memory__search)."),
    MEMORY_LIST: ("memory", "List every note you keep, oldest first, with its id."),
    MEMORY_SEARCH: (
        "memory",
        "Find your notes by words, best match first (every word must match; `or` between "
        "alternatives).",
    ),
    SESSION_SEARCH: (
        "memory",
        "Search this person's own earlier sessions with you by words; gives each match's "
        "session, agent, time and the words around it.",
    ),
}

_STORE_OP_DESCRIPTIONS: dict[StoreOp, str] = {
    "get": "Get one {entity} document of the {store} store by its key.",
    "query": "Query {entity} documents of the {store} store with filters, sort and paging.",
    "put": "Create or replace a {entity} document in the {store} store.",
    "delete": "Delete a {entity} document of the {store} store by its key.",
}


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool name the bundle can offer, where it comes from, and what it does."""

    name: str
    kind: ToolKind
    description: str
    store: str | None = None
    op: StoreOp | None = None


def store_tool_name(store: str, op: StoreOp) -> str:
    """`research-notes`, `query` -> `store__research_notes__query`."""
    return f"store__{store.replace('-', '_')}__{op}"


def store_ops(mode: Literal["read", "rw"]) -> tuple[StoreOp, ...]:
    return READ_OPS if mode == "read" else READ_OPS + WRITE_OPS


def builtin_tools() -> list[ToolInfo]:
    return [ToolInfo(name, kind, text) for name, (kind, text) in _BUILTIN_DESCRIPTIONS.items()]


def store_tools(store: str, entity: str) -> list[ToolInfo]:
    return [
        ToolInfo(
            store_tool_name(store, op),
            "store",
            _STORE_OP_DESCRIPTIONS[op].format(entity=entity, store=store),
            store=store,
            op=op,
        )
        for op in READ_OPS + WRITE_OPS
    ]


def custom_tools(descriptions: Mapping[str, str]) -> list[ToolInfo]:
    return [ToolInfo(name, "custom", text) for name, text in descriptions.items()]


def duplicates(tools: Iterable[ToolInfo]) -> dict[str, list[ToolInfo]]:
    """Names defined by more than one source."""
    seen: dict[str, list[ToolInfo]] = {}
    for tool in tools:
        seen.setdefault(tool.name, []).append(tool)
    return {name: found for name, found in seen.items() if len(found) > 1}
