"""The HTTP API (SPEC 14): chats streamed as SSE, sessions, agents, surfaces, health.

A thin layer over `Runtime`: it authenticates, validates bodies strictly, maps
the runtime's refusals to status codes, and streams the turn's events. Errors
are always `{"error": {"code", "message"}}`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator, Awaitable
from typing import Annotated, Any, TypeVar

from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from runtime._version import __version__
from runtime.api import ChatResult, RunningTurn, Runtime
from runtime.events import EVENT_ID, Event
from runtime.exceptions import AmodalError, RequestError, UnknownAgentError
from runtime.observe.metrics import Metrics
from runtime.repo.bundle import Bundle
from runtime.server import faces
from runtime.server.auth import Authenticator
from runtime.server.console import add_console
from runtime.server.errors import (
    ApiError,
    TextJSONResponse,
    error_response,
    install_error_handlers,
)
from runtime.server.guard import RequestGuard
from runtime.server.openapi import EVENTS, TURN, answers, install_openapi
from runtime.server.store_routes import add_store_routes
from runtime.storage import MAX_QUERY_LIMIT, AgentRunRecord, SessionRecord
from runtime.surface.inspection import inspect_agent

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# An event id (`SEQ` or `SEQ:K`), bounded so it fits the database's integers.
EVENT_ID_SCHEMA = {"pattern": EVENT_ID.pattern}
MAX_OFFSET = 1_000_000
T = TypeVar("T")

# Declared in the OpenAPI document; checked by `_check_session_id` (its own error code).
SessionId = Annotated[str, Path(json_schema_extra={"pattern": SESSION_ID.pattern})]


class EventStreamResponse(StreamingResponse):
    """Server-Sent Events (the media type the OpenAPI document gives such a route)."""

    media_type = "text/event-stream"


class _Body(BaseModel):
    # Strict: `"approve": "yes"` or `"stream": 0` is a 422, never coerced to a bool.
    model_config = ConfigDict(extra="forbid", strict=True)


class ChatBody(_Body):
    message: str = Field(min_length=1)
    agent: str | None = None
    context: dict[str, str] = Field(default_factory=dict)
    session_id: str | None = Field(None, json_schema_extra={"pattern": SESSION_ID.pattern})
    stream: bool = True
    autonomous: bool = False


class CompactBody(_Body):
    focus: str | None = Field(None, min_length=1, max_length=2_000)
    """What the summary should keep in particular."""


class ConfirmationBody(_Body):
    approve: bool
    stream: bool = True


def create_app(runtime: Runtime, auth: Authenticator) -> FastAPI:
    """The ASGI app serving `runtime`."""
    live = runtime.live
    app = FastAPI(title="amodal", version=__version__, default_response_class=TextJSONResponse)
    app.add_middleware(RequestGuard, limit=lambda: live().config.limits.max_request_bytes)
    install_error_handlers(app)
    install_openapi(app, live, auth.configured)

    @app.post("/chat", response_model=None, responses=TURN | answers(403, 404, 409))
    async def chat(
        body: ChatBody, authorization: Annotated[str | None, Header()] = None
    ) -> Response:
        who = auth.caller(authorization)
        if body.session_id is not None:
            _check_session_id(body.session_id)
        turn = await _start(
            runtime.begin(
                body.message,
                agent=body.agent,
                session_id=body.session_id,
                context=body.context,
                claims=who.claims,
                operator=who.operator,
                autonomous=body.autonomous,
            )
        )
        return await _respond(turn, body.stream)

    @app.post(
        "/sessions/{session_id}/confirmations/{call_id}",
        response_model=None,
        responses=TURN | answers(404, 409),
    )
    async def confirm(
        session_id: SessionId,
        call_id: str,
        body: ConfirmationBody,
        authorization: Annotated[str | None, Header()] = None,
    ) -> Response:
        who = auth.caller(authorization)
        _check_session_id(session_id)
        turn = await _start(
            runtime.begin_confirmation(
                session_id, call_id, approve=body.approve, claims=who.claims, operator=who.operator
            )
        )
        return await _respond(turn, body.stream)

    @app.get("/sessions")
    async def list_sessions(
        limit: Annotated[int, Query(ge=1, le=MAX_QUERY_LIMIT)] = 20,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
        authorization: Annotated[str | None, Header()] = None,
    ) -> dict[str, Any]:
        """The caller's own sessions (every session for an operator), newest activity first."""
        who = auth.caller(authorization)
        sessions = await _start(
            runtime.sessions(claims=who.claims, operator=who.operator, limit=limit, offset=offset)
        )
        return {
            "sessions": [_session_json(session) for session in sessions],
            "limit": limit,
            "offset": offset,
        }

    @app.get("/sessions/{session_id}", responses=answers(404))
    async def get_session(
        session_id: SessionId, authorization: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        who = auth.caller(authorization)
        _check_session_id(session_id)
        history = await _start(
            runtime.session(session_id, claims=who.claims, operator=who.operator)
        )
        session, events = history.session, history.entries
        return {
            "id": session.id,
            "agent": session.root_agent,
            "created_at": session.created_at.isoformat(),
            "updated_at": session.updated_at.isoformat(),
            "events": [
                {
                    "seq": e.seq,
                    "type": e.type,
                    "run_id": e.run_id,
                    "agent": e.agent,
                    "bundle_version": e.bundle_version,
                    "created_at": e.created_at.isoformat(),
                    **{k: v for k, v in e.data.items() if k != "key"},
                }
                for e in events
                # The system prompt is the operator's business, not every caller's; the pieces
                # a reply streamed in are on /events (the `assistant` entry has it whole).
                if (who.operator or e.type != "prompt") and e.type != "text"
            ],
        }

    @app.get("/sessions/{session_id}/runs", responses=answers(404))
    async def get_runs(
        session_id: SessionId, authorization: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        who = auth.caller(authorization)
        _check_session_id(session_id)
        runs = runtime.runs(session_id, claims=who.claims, operator=who.operator)
        return run_tree(await _start(runs))

    @app.get(
        "/sessions/{session_id}/events",
        response_class=EventStreamResponse,
        responses=EVENTS | answers(404),
    )
    async def session_events(
        session_id: SessionId,
        after: Annotated[str | None, Query(json_schema_extra=EVENT_ID_SCHEMA)] = None,
        authorization: Annotated[str | None, Header()] = None,
        last_event_id: Annotated[str | None, Header(json_schema_extra=EVENT_ID_SCHEMA)] = None,
    ) -> Response:
        """The session's events after an id (`?after=` or `Last-Event-ID`), then its running
        turn live until `done`, as SSE: how a client that lost its stream picks it up."""
        who = auth.caller(authorization)
        _check_session_id(session_id)
        given = after if after is not None else last_event_id
        followed = runtime.follow(
            session_id, after=given or None, claims=who.claims, operator=who.operator
        )
        return _event_stream(await _start(followed))

    @app.delete("/sessions/{session_id}", status_code=204, responses=answers(404))
    async def delete_session(
        session_id: SessionId, authorization: Annotated[str | None, Header()] = None
    ) -> Response:
        who = auth.caller(authorization)
        _check_session_id(session_id)
        await _start(runtime.delete_session(session_id, claims=who.claims, operator=who.operator))
        return Response(status_code=204)

    @app.post("/sessions/{session_id}/compact", responses=answers(404, 409))
    async def compact(
        session_id: SessionId,
        body: CompactBody | None = None,
        authorization: Annotated[str | None, Header()] = None,
    ) -> dict[str, Any]:
        """Summarise the session's older turns now (SPEC 20); 409 while a turn runs."""
        who = auth.caller(authorization)
        _check_session_id(session_id)
        focus = body.focus if body is not None else None
        done = await _start(
            runtime.compact(session_id, focus=focus, claims=who.claims, operator=who.operator)
        )
        return {"compaction": done.to_json() if done is not None else None}

    @app.get("/agents")
    async def agents(
        role: str | None = None, authorization: Annotated[str | None, Header()] = None
    ) -> list[dict[str, Any]]:
        auth.caller(authorization)
        bundle = live()
        wanted = role.lower() if role else None
        return [
            _agent_json(bundle, name)
            for name in sorted(bundle.agents)
            if wanted is None or (bundle.agents[name].role or "").lower() == wanted
        ]

    @app.get("/agents/{name}", responses=answers(404))
    async def agent(name: str, authorization: Annotated[str | None, Header()] = None) -> Any:
        auth.caller(authorization)
        bundle = live()
        if name not in bundle.agents:
            raise UnknownAgentError(name, list(bundle.agents))
        return _agent_json(bundle, name)

    @app.get("/agents/{name}/surface", responses=answers(403, 404))
    async def surface(
        name: str, request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> Any:
        who = auth.caller(authorization)
        params = request.query_params
        context = {
            k.removeprefix("context."): v for k, v in params.items() if k.startswith("context.")
        }
        claims = dict(who.claims)
        asked = {k.removeprefix("claim."): v for k, v in params.items() if k.startswith("claim.")}
        if asked and not who.operator:
            raise ApiError(403, "forbidden", "only an operator may pass claim.K=V")
        claims.update(asked)
        return inspect_agent(live(), name, claims, context, servers=runtime.mcp.snapshot())

    @app.post("/admin/reload", responses=answers(403))
    async def reload(authorization: Annotated[str | None, Header()] = None) -> dict[str, Any]:
        """Reload the repo now (e.g. after `git pull` without a file watcher); operators only."""
        if not auth.caller(authorization).operator:
            raise ApiError(403, "forbidden", "only an operator may reload the repo")
        ok = await runtime.reload()
        return {"reloaded": ok, "bundle_version": live().version, "reload_error": live.reload_error}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        servers = runtime.mcp.snapshot().servers
        return {
            "status": "ok",
            "bundle_version": live().version,
            "reload_error": live.reload_error,
            "mcp": {name: state.as_json() for name, state in servers.items()},
            "process": os.getpid(),  # which server process answered (`--workers N`)
        }

    metrics = Metrics()
    metrics.count_reload_failures(lambda: live.failed_reloads)
    metrics.count_mcp_servers(lambda: runtime.mcp.snapshot())
    runtime.add_observer(metrics)

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
            **answers(403),
        },
    )
    async def prometheus(authorization: Annotated[str | None, Header()] = None) -> Response:
        """What this server has done, in Prometheus' text format; operators only."""
        if not auth.caller(authorization).operator:
            raise ApiError(403, "forbidden", "only an operator may read /metrics")
        return Response(metrics.render(), media_type=metrics.content_type)

    add_store_routes(app, live, runtime.storage, auth)
    app.include_router(faces.openai_chat_routes(runtime, auth))
    app.include_router(faces.responses_routes(runtime, auth))
    app.include_router(faces.mcp_routes(runtime, auth))
    app.include_router(faces.a2a_routes(runtime, auth))
    app.include_router(faces.ag_ui_routes(runtime, auth))
    add_console(app, auth)
    return app


async def _start(starting: Awaitable[T]) -> T:
    """Await a runtime call; a refusal becomes its HTTP answer, any other error a 500."""
    try:
        return await starting
    except RequestError:
        raise
    except AmodalError as error:
        raise ApiError(500, "runtime_error", str(error)) from error


def _check_session_id(session_id: str) -> None:
    if not SESSION_ID.fullmatch(session_id):
        raise ApiError(
            422, "invalid_session_id", "a session id is 1-64 letters, digits, '-' or '_'"
        )


async def _respond(turn: RunningTurn, stream: bool) -> Response:
    """The turn's events as SSE, or one JSON document when it ends. Either way the turn runs
    to its end if the client goes away; the client can pick its events up again."""
    if stream:
        return _event_stream(turn.events())
    result = ChatResult.of([event async for event in turn.events()])
    return JSONResponse(
        {
            "session_id": result.session_id,
            "agent": result.agent,
            "reply": result.text,
            "events": [e.to_json() for e in result.events],
            "usage": result.usage.as_json(),
            "done_reason": result.reason,
        }
    )


def _event_stream(streamed: AsyncIterator[Event]) -> StreamingResponse:
    async def frames() -> AsyncIterator[bytes]:
        async for event in streamed:
            yield _frame(event)

    return StreamingResponse(
        frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _frame(event: Event) -> bytes:
    data = json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":"))
    if not data.isascii():
        try:
            data.encode()
        except UnicodeEncodeError:  # an unpaired surrogate (a tool's broken output): escaped
            data = json.dumps(event.to_json(), separators=(",", ":"))
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n".encode()


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
        "created_at": session.created_at.isoformat(),
        "updated_at": session.updated_at.isoformat(),
    }


def _agent_json(bundle: Bundle, name: str) -> dict[str, Any]:
    agent = bundle.agents[name]
    return {
        "name": agent.name,
        "display_name": agent.display_name,
        "description": agent.description,
        "summary": agent.summary,
        "role": agent.role,
        "default": agent.is_default,
    }


__all__ = ["create_app", "error_response", "run_tree"]
