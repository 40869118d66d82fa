"""`/memory`: what agents remember about a person, for that person to review and delete
(SPEC 21; docs/memory.md).

- `GET /memory?agent=NAME&limit=&offset=`: the caller's own entries for that agent (the
  notes its memory tools reach for these credentials), oldest first; the operator may add
  `owner=OWNER` to list another owner's;
- `DELETE /memory/{id}`: 204; the entry's owner (or, for a scope's shared notes, anyone of
  that scope) or the operator.

Another owner's entry is a 404, the same as none (the runtime decides who may see it).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response

from runtime.server.dependencies import CallerDep, RuntimeDep
from runtime.server.errors import ApiError, runtime_call
from runtime.server.openapi import answers
from runtime.storage import MAX_QUERY_LIMIT, MemoryEntry

MAX_OFFSET = 1_000_000
MEMORY_ID = r"^[A-Za-z0-9_-]{1,64}$"

router = APIRouter(tags=["memory"])


@router.get("/memory", responses=answers(403, 404))
async def list_memory(
    who: CallerDep,
    runtime: RuntimeDep,
    agent: Annotated[str, Query(min_length=1, max_length=64)],
    owner: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_QUERY_LIMIT)] = 20,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> dict[str, Any]:
    """The caller's own memory entries for `agent` (the operator: `owner`'s)."""
    if owner is not None and not who.operator:
        raise ApiError(403, "forbidden", "only an operator may list another owner's memory")
    entries = await runtime_call(
        runtime.memory(
            agent,
            claims=who.claims,
            operator=who.operator,
            owner=owner,
            limit=limit,
            offset=offset,
        )
    )
    return {
        "agent": agent,
        "entries": [entry_json(entry) for entry in entries],
        "limit": limit,
        "offset": offset,
    }


@router.delete("/memory/{entry_id}", status_code=204, responses=answers(404))
async def delete_memory(
    entry_id: Annotated[str, Path(pattern=MEMORY_ID)], who: CallerDep, runtime: RuntimeDep
) -> Response:
    await runtime_call(runtime.delete_memory(entry_id, claims=who.claims, operator=who.operator))
    return Response(status_code=204)


def entry_json(entry: MemoryEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "agent": entry.agent,
        "kind": entry.owner.kind,
        "scope": entry.owner.scope_id,
        "owner": entry.owner.owner,
        "text": entry.text,
        "created_at": entry.created_at.isoformat(),
    }


__all__ = ["entry_json", "router"]
