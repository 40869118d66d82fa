"""Turns over HTTP (SPEC 14; docs/http-api.md): `POST /chat` and
`POST /sessions/{id}/confirmations/{call_id}`, streamed as SSE, or answered as one JSON
document with `"stream": false`; `"background": true` queues the turn (202).

Bodies are strict (`runtime.server.inputs`); the runtime refuses what it must (unknown
agent or session 404, busy 409) before anything streams.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from runtime.api import ChatResult, RunningTurn
from runtime.server.dependencies import CallerDep, RuntimeDep
from runtime.server.errors import runtime_call
from runtime.server.inputs import ChatBody, ConfirmationBody, SessionId, check_session_id
from runtime.server.openapi import QUEUED, TURN, answers
from runtime.server.sse import event_stream

router = APIRouter()


@router.post("/chat", response_model=None, responses=TURN | QUEUED | answers(403, 404, 409))
async def chat(body: ChatBody, who: CallerDep, runtime: RuntimeDep) -> Response:
    if body.session_id is not None:
        check_session_id(body.session_id)
    if body.background:
        queued = await runtime_call(
            runtime.enqueue(
                body.message,
                agent=body.agent,
                session_id=body.session_id,
                context=body.context,
                claims=who.claims,
                operator=who.operator,
                autonomous=body.autonomous,
            )
        )
        return JSONResponse(
            {"session_id": queued.session_id, "turn_id": queued.turn_id}, status_code=202
        )
    turn = await runtime_call(
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


@router.post(
    "/sessions/{session_id}/confirmations/{call_id}",
    response_model=None,
    responses=TURN | answers(404, 409),
)
async def confirm(
    session_id: SessionId,
    call_id: str,
    body: ConfirmationBody,
    who: CallerDep,
    runtime: RuntimeDep,
) -> Response:
    check_session_id(session_id)
    turn = await runtime_call(
        runtime.begin_confirmation(
            session_id, call_id, approve=body.approve, claims=who.claims, operator=who.operator
        )
    )
    return await _respond(turn, body.stream)


async def _respond(turn: RunningTurn, stream: bool) -> Response:
    """The turn's events as SSE, or one JSON document when it ends. Either way the turn runs
    to its end if the client goes away; the client can pick its events up again."""
    if stream:
        return event_stream(turn.events())
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


__all__ = ["router"]
