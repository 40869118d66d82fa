"""What a person (or the operator) may see and delete of what agents remember (SPEC 21).

The tools of `runtime.tools.memory` are the model's way in; this is a person's, behind
`Runtime.memory` and `Runtime.delete_memory` (and `GET`/`DELETE /memory`). Whose entries a
caller reaches follows from its verified credentials the same way the tools decide it:
a person reads and deletes their own notes and their scope's; the operator reads any
owner's and deletes any entry. Another owner's entry is "not found", never "forbidden":
its id says nothing to someone who may not see it.
"""

from __future__ import annotations

from runtime.exceptions import (
    InvalidRequestError,
    MemoryNotFoundError,
    ToolError,
    UnknownAgentError,
)
from runtime.repo.bundle import Bundle
from runtime.repo.formats import MemoryConfig
from runtime.storage import MemoryEntry, MemoryStorage
from runtime.surface.caller import Caller
from runtime.tools.memory import memory_owner


async def list_entries(
    storage: MemoryStorage,
    bundle: Bundle,
    agent: str,
    caller: Caller,
    *,
    owner: str | None = None,
    limit: int = 20,
    offset: int = 0,
) -> list[MemoryEntry]:
    """`agent`'s entries for this caller, oldest first; with `owner` (the operator's alone),
    that owner's entries of every kind and scope (`""`: the operator's own and the shared
    ones)."""
    definition = bundle.agents.get(agent)
    if definition is None:
        raise UnknownAgentError(agent, list(bundle.agents))
    if owner is not None:
        if not caller.operator:
            raise InvalidRequestError("`owner` is the operator's filter: leave it out")
        return await storage.list_memory(agent, owner=owner, limit=limit, offset=offset)
    # An agent whose memory was turned off keeps what it had: its owners may still see it.
    config = bundle.memory(definition) or MemoryConfig()
    try:
        whose = memory_owner(config, caller.surface_context(agent, {}), caller.owner)
    except ToolError:
        return []  # credentials that name no person: nobody's notes
    return await storage.list_memory(
        agent,
        kind=whose.kind,
        scope_id=whose.scope_id,
        owner=whose.owner,
        limit=limit,
        offset=offset,
    )


async def delete_entry(storage: MemoryStorage, entry_id: str, caller: Caller) -> None:
    """Delete an entry the caller may delete (`MemoryNotFoundError` otherwise): the operator
    any entry; a person their own, and their scope's shared ones; an agent-wide entry
    belongs to no one person, so only the operator deletes it."""
    entry = await storage.get_memory(entry_id)
    if entry is None or not _may_delete(entry, caller):
        raise MemoryNotFoundError(entry_id)
    if not await storage.delete_memory(entry_id, agent=entry.agent, owner=entry.owner):
        raise MemoryNotFoundError(entry_id)  # deleted meanwhile


def _may_delete(entry: MemoryEntry, caller: Caller) -> bool:
    if caller.operator:
        return True
    whose = entry.owner
    if whose.kind == "user":
        return whose.scope_id == caller.scope_id and whose.owner == caller.owner
    return whose.kind == "scope" and whose.scope_id == caller.scope_id


__all__ = ["delete_entry", "list_entries"]
