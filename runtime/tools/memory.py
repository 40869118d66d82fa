"""Memory (SPEC 21): the notes an agent keeps about whoever it works for, and a search over
that person's earlier sessions.

`memory__add`, `memory__remove`, `memory__list` and `memory__search` come with an agent's
`memory`; `session_search` with listing it in `tools`. Every call acts on the caller of
the turn (a specialist's too), never on anyone else: the owner comes from the verified
credentials, never from the model's arguments, so no argument reaches another owner's
notes or sessions. A note is words the model reads as data: it grants nothing.

Results:
- add: `{"id", "entries", "chars"}` (how full the memory is now); a note that cannot be
  kept (empty, U+0000, an unpaired surrogate, longer than `maxChars`, or no room left) is
  an error result saying why and how to make room, and nothing is stored
- remove: `{"removed": bool, "id"}`
- list: `{"entries": [{"id", "text", "created_at"}], "count", "chars", "max_entries", "max_chars"}`
- search: `{"matches": [{"id", "text", "snippet"}]}`, best first
- session_search: `{"matches": [{"session_id", "agent", "at", "snippet"}]}`, best first
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from runtime.outside.secrets import scrub_text, scrubbed
from runtime.repo.bundle import Bundle
from runtime.repo.formats import MemoryConfig
from runtime.repo.registry import (
    MEMORY_ADD,
    MEMORY_LIST,
    MEMORY_REMOVE,
    MEMORY_SEARCH,
    SESSION_SEARCH,
)
from runtime.storage import MemoryEntry, MemoryOwner, MemoryStorage, text_problem, utc_now
from runtime.surface.resolution import SurfaceContext
from runtime.tools import Tool, ToolContext, ToolError

MEMORY_PAGE = 100
"""The most entries one owner may have (`maxEntries` is at most this): one page holds all."""
DEFAULT_MATCHES, MOST_MATCHES = 5, 20


def memory_owner(config: MemoryConfig, caller: SurfaceContext, owner: str | None) -> MemoryOwner:
    """Whose notes a call of this caller reaches. `owner` is the caller's own (its `sub`,
    "" for the operator); a `user` memory without one is a `ToolError`, not a shared one."""
    if config.scope == "agent":
        return MemoryOwner("agent", "", "")
    if config.scope == "scope":
        return MemoryOwner("scope", caller.scope_id, "")
    if owner is None:
        raise ToolError(
            "this memory belongs to each person, and the caller's credentials name no "
            "person (no `sub` claim): nothing can be remembered for them"
        )
    return MemoryOwner("user", caller.scope_id, owner)


async def owned_entries(
    storage: MemoryStorage, agent: str, owner: MemoryOwner
) -> list[MemoryEntry]:
    """Every entry of one owner for one agent, oldest first."""
    return await storage.list_memory(
        agent,
        kind=owner.kind,
        scope_id=owner.scope_id,
        owner=owner.owner,
        limit=MEMORY_PAGE,
    )


def memory_tools(bundle: Bundle, storage: MemoryStorage, config: MemoryConfig) -> dict[str, Tool]:
    """The four memory tools of an agent whose memory is `config`."""
    registry = bundle.registry

    async def add(arguments: dict[str, Any], context: ToolContext) -> Any:
        owner = memory_owner(config, context.caller, context.owner)
        text = _note(arguments["text"], config, _secrets(bundle, context.caller))
        entry = MemoryEntry(f"mem_{uuid.uuid4().hex[:16]}", context.agent, owner, text, utc_now())
        usage = await storage.add_memory(
            entry, max_entries=config.max_entries, max_chars=config.max_chars
        )
        if not usage.added:
            raise ToolError(_no_room(usage.entries, usage.chars, len(text), config))
        return {"id": entry.id, "entries": usage.entries, "chars": usage.chars}

    async def remove(arguments: dict[str, Any], context: ToolContext) -> Any:
        owner = memory_owner(config, context.caller, context.owner)
        entry_id = arguments["id"]
        removed = await storage.delete_memory(entry_id, agent=context.agent, owner=owner)
        return {"removed": removed, "id": entry_id}

    async def listing(arguments: dict[str, Any], context: ToolContext) -> Any:
        owner = memory_owner(config, context.caller, context.owner)
        entries = await owned_entries(storage, context.agent, owner)
        return {
            "entries": [
                {"id": e.id, "text": e.text, "created_at": e.created_at.isoformat()}
                for e in entries
            ],
            "count": len(entries),
            "chars": sum(len(entry.text) for entry in entries),
            "max_entries": config.max_entries,
            "max_chars": config.max_chars,
        }

    async def search(arguments: dict[str, Any], context: ToolContext) -> Any:
        owner = memory_owner(config, context.caller, context.owner)
        query = _query(arguments["query"])
        limit = arguments.get("limit", DEFAULT_MATCHES)
        found = await storage.search_memory(context.agent, owner, query, limit=limit)
        return {
            "matches": [
                {"id": match.entry.id, "text": match.entry.text, "snippet": match.snippet}
                for match in found
            ]
        }

    text = {"type": "string", "minLength": 1}
    return {
        MEMORY_ADD: Tool(
            MEMORY_ADD,
            registry[MEMORY_ADD].description
            + f" At most {config.max_entries} notes of {config.max_chars} characters in all.",
            _object({"text": text | {"description": "The note, in a sentence or two."}}),
            add,
        ),
        MEMORY_REMOVE: Tool(
            MEMORY_REMOVE,
            registry[MEMORY_REMOVE].description,
            _object({"id": {"type": "string", "minLength": 1}}),
            remove,
        ),
        MEMORY_LIST: Tool(MEMORY_LIST, registry[MEMORY_LIST].description, _object({}), listing),
        MEMORY_SEARCH: Tool(
            MEMORY_SEARCH, registry[MEMORY_SEARCH].description, _search_parameters(), search
        ),
    }


def session_search_tool(bundle: Bundle, storage: MemoryStorage) -> Tool:
    """`session_search`: the caller's own earlier sessions (same scope and owner), never the
    one it runs in and never anyone else's."""

    async def search(arguments: dict[str, Any], context: ToolContext) -> Any:
        query = _query(arguments["query"])
        found = await storage.search_sessions(
            context.caller.scope_id,
            context.owner,
            query,
            limit=arguments.get("limit", DEFAULT_MATCHES),
            exclude_session=context.session_id,
        )
        return {
            "matches": [
                {
                    "session_id": match.session_id,
                    "agent": match.agent,
                    "at": match.at.isoformat(),
                    "snippet": match.snippet,
                }
                for match in found
            ]
        }

    return Tool(
        SESSION_SEARCH, bundle.registry[SESSION_SEARCH].description, _search_parameters(), search
    )


def _note(raw: str, config: MemoryConfig, secrets: tuple[str, ...]) -> str:
    """The note as it is kept (trimmed, secrets scrubbed); a `ToolError` when it cannot be."""
    problem = text_problem(raw)
    if problem is not None:
        raise ToolError(f"the note cannot be kept: {problem}. Nothing was stored.")
    text = scrub_text(raw.strip(), secrets)
    if not text:
        raise ToolError("the note is empty. Nothing was stored.")
    if len(text) > config.max_chars:
        raise ToolError(
            f"the note has {len(text)} characters, more than the memory's whole room of "
            f"{config.max_chars}. Nothing was stored: write it shorter."
        )
    return text


def _no_room(entries: int, chars: int, wanted: int, config: MemoryConfig) -> str:
    return (
        f"memory is full: {entries} of {config.max_entries} notes, {chars} of "
        f"{config.max_chars} characters, and this note needs {wanted}. Nothing was stored. "
        "To make room, call memory__list, then memory__remove notes that are outdated or "
        "least useful (or merge several into one shorter note), and add it again."
    )


def _query(raw: str) -> str:
    problem = text_problem(raw)
    if problem is not None:
        raise ToolError(f"the query cannot be searched: {problem}")
    return raw


def _secrets(bundle: Bundle, caller: SurfaceContext) -> tuple[str, ...]:
    """What no note may keep: every connection's and MCP server's secret, and the caller's
    claim values a connection injects into its calls."""
    values: list[str] = []
    for connection in bundle.connections.values():
        values += connection.secrets
        values += _claims(caller, (i.claim for i in connection.injections))
    for server in bundle.mcp_servers.values():
        values += server.secrets
    return scrubbed(values)


def _claims(caller: SurfaceContext, names: Iterable[str]) -> list[str]:
    return [caller.claims[name] for name in names if name in caller.claims]


def _search_parameters() -> dict[str, Any]:
    return _object(
        {
            "query": {
                "type": "string",
                "minLength": 1,
                "description": 'Words to find; "quoted phrase" for exact words, `or` '
                "between alternatives, -word to leave out.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MOST_MATCHES,
                "default": DEFAULT_MATCHES,
            },
        },
        required=("query",),
    )


def _object(properties: dict[str, Any], required: Iterable[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties if required is None else required),
        "additionalProperties": False,
    }


__all__ = ["memory_owner", "memory_tools", "owned_entries", "session_search_tool"]
