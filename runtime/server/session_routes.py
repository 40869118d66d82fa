"""`/sessions`: a caller's sessions, each one's log, its delegation tree and its events
streamed again (SPEC 12, 14; docs/http-api.md).

- `GET /sessions?limit=&offset=`: the caller's own sessions (every one for an operator);
- `GET /sessions/{id}`: the session with its logged events;
- `GET /sessions/{id}/runs`: its runs as a delegation tree;
- `GET /sessions/{id}/events?after=SEQ` (or `Last-Event-ID`): the log from SEQ, then the
  running turn live until its `done`;
- `POST /sessions/{id}/compact` `{"focus"?}`: summarise its older turns now (SPEC 20);
- `DELETE /sessions/{id}`: 204.

Another caller's session is a 404, the same as none (the runtime decides who may see it).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import Response

from runtime.api import FIRST_MESSAGE, SessionHistory
from runtime.events import EVENT_ID
from runtime.server.dependencies import CallerDep, RuntimeDep
from runtime.server.errors import runtime_call
from runtime.server.inputs import CompactBody, SessionId, check_session_id
from runtime.server.openapi import EVENTS, answers
from runtime.server.sse import EventStreamResponse, event_stream
from runtime.storage import MAX_QUERY_LIMIT, AgentRunRecord, SessionRecord

EVENT_ID_SCHEMA = {"pattern": EVENT_ID.pattern}
MAX_OFFSET = 1_000_000

router = APIRouter()


@router.get("/sessions")
async def list_sessions(
    who: CallerDep,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=MAX_QUERY_LIMIT)] = 20,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> dict[str, Any]:
    """The caller's own sessions (every session for an operator), newest activity first."""
    sessions = await runtime_call(
        runtime.sessions(claims=who.claims, operator=who.operator, limit=limit, offset=offset)
    )
    return {
        "sessions": [_session_json(session) for session in sessions],
        "limit": limit,
        "offset": offset,
    }


@router.get("/sessions/{session_id}", responses=answers(404))
async def get_session(session_id: SessionId, who: CallerDep, runtime: RuntimeDep) -> dict[str, Any]:
    check_session_id(session_id)
    history = await runtime_call(
        runtime.session(session_id, claims=who.claims, operator=who.operator)
    )
    return {**_session_json(history.session), "events": _events_json(history, who.operator)}


@router.get("/sessions/{session_id}/runs", responses=answers(404))
async def get_runs(session_id: SessionId, who: CallerDep, runtime: RuntimeDep) -> dict[str, Any]:
    check_session_id(session_id)
    runs = runtime.runs(session_id, claims=who.claims, operator=who.operator)
    return run_tree(await runtime_call(runs))


@router.get(
    "/sessions/{session_id}/events",
    response_class=EventStreamResponse,
    responses=EVENTS | answers(404),
)
async def session_events(
    session_id: SessionId,
    who: CallerDep,
    runtime: RuntimeDep,
    after: Annotated[str | None, Query(json_schema_extra=EVENT_ID_SCHEMA)] = None,
    last_event_id: Annotated[str | None, Header(json_schema_extra=EVENT_ID_SCHEMA)] = None,
) -> Response:
    """The session's events after an id (`?after=` or `Last-Event-ID`), then its running
    turn live until `done`, as SSE: how a client that lost its stream picks it up."""
    check_session_id(session_id)
    given = after if after is not None else last_event_id
    followed = runtime.follow(
        session_id, after=given or None, claims=who.claims, operator=who.operator
    )
    return event_stream(await runtime_call(followed))


@router.delete("/sessions/{session_id}", status_code=204, responses=answers(404))
async def delete_session(session_id: SessionId, who: CallerDep, runtime: RuntimeDep) -> Response:
    check_session_id(session_id)
    await runtime_call(runtime.delete_session(session_id, claims=who.claims, operator=who.operator))
    return Response(status_code=204)


@router.post("/sessions/{session_id}/compact", responses=answers(404, 409))
async def compact(
    session_id: SessionId,
    who: CallerDep,
    runtime: RuntimeDep,
    body: CompactBody | None = None,
) -> dict[str, Any]:
    """Summarise the session's older turns now (SPEC 20); 409 while a turn runs."""
    check_session_id(session_id)
    focus = body.focus if body is not None else None
    done = await runtime_call(
        runtime.compact(session_id, focus=focus, claims=who.claims, operator=who.operator)
    )
    return {"compaction": done.to_json() if done is not None else None}


def run_tree(runs: list[AgentRunRecord]) -> dict[str, Any]:
    """The delegation tree of a session (roots are the turns) and a roster summary."""
    nodes: dict[str, dict[str, Any]] = {}
    roots: list[dict[str, Any]] = []
    for record in sorted(runs, key=lambda r: r.started_at):
        node: dict[str, Any] = {
            "run_id": record.id,
            "parent_run_id": record.parent_run_id,
            "agent": record.agent,
            "depth": record.depth,
            "label": record.label,
            "status": record.status,
            "started_at": record.started_at.isoformat(),
            "ended_at": record.ended_at.isoformat() if record.ended_at else None,
            "usage": record.usage,
            "error": record.error,
            "children": [],
        }
        nodes[record.id] = node
        parent = nodes.get(record.parent_run_id or "")
        (parent["children"] if parent is not None else roots).append(node)
    specialists = [r for r in runs if r.depth > 0]
    recent = sorted(specialists, key=lambda r: r.started_at, reverse=True)[:8]
    return {
        "runs": roots,
        "summary": {
            "running": sum(1 for r in specialists if r.status == "running"),
            "recent_labels": [r.label for r in recent],
        },
    }


def _session_json(session: SessionRecord) -> dict[str, Any]:
    return {
        "id": session.id,
        "agent": session.root_agent,
        # "chat" for a person's conversation, "automation" for an automation's run (SPEC 23).
        "kind": session.metadata.get("kind", "chat"),
        # The first message, on one line and cut to ~80 characters; null for a session
        # stored before the runtime kept it.
        "first_message": session.metadata.get(FIRST_MESSAGE),
        "created_at": session.created_at.isoformat(),
        "updated_at": session.updated_at.isoformat(),
    }


def _events_json(history: SessionHistory, operator: bool) -> list[dict[str, Any]]:
    return [
        {
            "seq": e.seq,
            "type": e.type,
            "run_id": e.run_id,
            "agent": e.agent,
            "bundle_version": e.bundle_version,
            "created_at": e.created_at.isoformat(),
            **{k: v for k, v in e.data.items() if k != "key"},
        }
        for e in history.entries
        # The system prompt is the operator's business, not every caller's; the pieces
        # a reply streamed in are on /events (the `assistant` entry has it whole).
        if (operator or e.type != "prompt") and e.type != "text"
    ]


__all__ = ["router", "run_tree"]
