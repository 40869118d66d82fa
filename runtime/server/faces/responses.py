"""Open Responses (SPEC 24): `POST /v1/responses` and `GET /v1/responses/{id}`.

A response is one turn: its id, `resp_<session>.<run>`, names the turn's session and
root run, so `previous_response_id` continues that session and `GET` finds the turn
in its log, and a caller who may not see the session finds nothing, whatever id it
guesses. `input` is text or message items; its last item is the user's message, the
earlier ones (and `instructions`, quoted as context) seed a new session. Streaming
sends the semantic events (`response.created`, `response.output_item.added`,
`response.output_text.delta`, `response.output_text.done`, `response.completed` or
`response.failed`, with the content-part and in-progress events between), all built
from the `openai` package's types.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path
from fastapi.responses import JSONResponse, Response, StreamingResponse
from openai.types.responses import (
    Response as OpenResponse,
)
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseError,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    ResponseUsage,
)
from openai.types.responses.response import IncompleteDetails
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime import events
from runtime.api import RunningTurn, Runtime
from runtime.events import DoneReason, Event, Usage
from runtime.server.auth import Authenticator
from runtime.server.errors import ApiError
from runtime.server.faces._common import (
    SSE_CONTENT,
    error_content,
    reply_with_note,
    root_text,
    shaped_route,
    split_turn_id,
    turn_id,
)
from runtime.server.faces.openai_chat import (
    ROLES,
    TOOLS_REFUSED,
    OpenAIErrorBody,
    agent_for,
    amodal_json,
    openai_error,
)
from runtime.surface.caller import EarlierMessage

FACE = "responses"
PREFIX = "resp_"
RESPONSE_ID = "^resp_[A-Za-z0-9_-]{1,64}\\.run_[0-9a-f]{12}$"
Status = Literal["completed", "failed", "in_progress", "cancelled", "incomplete"]
_KNOWN = {*ResponseCreateParamsBase.__annotations__, "stream"}
ENDS = (ResponseCompletedEvent, ResponseFailedEvent, ResponseIncompleteEvent)


class InputText(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["input_text", "output_text"]
    text: str


class InputMessage(BaseModel):
    """A message item: text only."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[InputText]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ResponsesBody(BaseModel):
    """The request. Parameters of OpenAI's API not listed here are accepted and not used: the
    agent's `modelSettings` in its repo decide them."""

    model_config = ConfigDict(extra="allow", strict=True)
    model: str = Field(min_length=1, description="the agent's name (GET /v1/models)")
    input: str | list[InputMessage] = Field(min_length=1)
    instructions: str | None = None
    previous_response_id: str | None = Field(None, pattern=RESPONSE_ID)
    stream: bool = False
    store: Literal[True] = Field(
        True, description="every turn is kept in its session's log: `false` is refused"
    )

    @model_validator(mode="after")
    def _only_openai_parameters(self) -> ResponsesBody:
        unknown = sorted(set(self.model_extra or {}) - _KNOWN)
        if unknown:
            raise ValueError(f"unrecognized request arguments: {', '.join(unknown)}")
        return self


def router(runtime: Runtime, auth: Authenticator) -> APIRouter:
    """The Responses routes over `runtime`."""
    routes = APIRouter(route_class=shaped_route(openai_error), tags=["openai"])
    shape = error_content("OpenAIErrorBody")
    errors: dict[int | str, dict[str, Any]] = {
        status: {"model": OpenAIErrorBody, "description": why}
        for status, why in {
            400: "Not a valid request, or client-supplied tools (`invalid_request`)",
            404: "No such agent, response or session for this caller",
            409: "The session has a turn running (`session_busy`)",
        }.items()
    }

    @routes.post(
        "/v1/responses", response_model=None, responses={200: ANSWER, **errors}, openapi_extra=shape
    )
    async def create_response(
        body: ResponsesBody, authorization: Annotated[str | None, Header()] = None
    ) -> Response:
        who = auth.caller(authorization)
        if (body.model_extra or {}).get("tools"):
            raise ApiError(400, "tools_not_supported", TOOLS_REFUSED)
        agent = agent_for(runtime, who, body.model)
        message, history = split_input(body.input, body.instructions)
        session_id = None
        if body.previous_response_id is not None:
            session_id = _session_of(body.previous_response_id)
            history = []
        turn = await runtime.begin(
            message,
            agent=agent,
            session_id=session_id,
            history=history,
            claims=who.claims,
            operator=who.operator,
            face=FACE,
        )
        if body.stream:
            return StreamingResponse(
                stream_events(turn, body.previous_response_id),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        streamed = [event async for event in turn.events()]
        started = datetime.now(UTC)
        response = build_response(turn.session_id, turn.run_id, turn.agent, streamed, started)
        response.previous_response_id = body.previous_response_id
        return JSONResponse(response_json(response, streamed))

    @routes.get(
        "/v1/responses/{response_id}",
        responses={200: {"description": "The response"}, 404: errors[404]},
        openapi_extra=shape,
    )
    async def get_response(
        response_id: Annotated[str, Path(json_schema_extra={"pattern": RESPONSE_ID})],
        authorization: Annotated[str | None, Header()] = None,
    ) -> dict[str, Any]:
        """A response by its id, finished or still running (`status: in_progress`)."""
        who = auth.caller(authorization)
        session_id, run_id = _turn_of(response_id)
        turns = await runtime.turns(session_id, claims=who.claims, operator=who.operator)
        found = next((t for t in turns if t.run_id == run_id), None)
        if found is None:
            raise _not_found(response_id)
        streamed = list(found.events)
        response = build_response(session_id, run_id, found.agent, streamed, found.started_at)
        return response_json(response, streamed)

    return routes


ANSWER: dict[str, Any] = {
    "description": "A `response`, or with `stream: true` its semantic events as SSE",
    "content": {
        "application/json": {"schema": {"type": "object", "required": ["id", "output"]}},
        "text/event-stream": SSE_CONTENT,
    },
}


def split_input(
    given: str | list[InputMessage], instructions: str | None
) -> tuple[str, list[EarlierMessage]]:
    """The turn's message (the last item, a user's) and what comes before it."""
    history = [EarlierMessage("system", instructions)] if instructions else []
    if isinstance(given, str):
        return given, history
    last = given[-1]
    if last.role != "user" or not last.text.strip():
        raise ApiError(
            400, "invalid_request", "the last input item must be the user's message: the turn's"
        )
    history += [EarlierMessage(ROLES[item.role], item.text) for item in given[:-1] if item.text]
    return last.text, history


def _turn_of(response_id: str) -> tuple[str, str]:
    found = split_turn_id(response_id.removeprefix(PREFIX))
    if not response_id.startswith(PREFIX) or found is None:
        raise _not_found(response_id)
    return found


def _session_of(response_id: str) -> str:
    return _turn_of(response_id)[0]


def _not_found(response_id: str) -> ApiError:
    return ApiError(404, "response_not_found", f"no response {response_id!r} for this caller")


STATUS: dict[DoneReason, Status] = {
    "error": "failed",
    "cancelled": "cancelled",
    "max_tool_calls": "incomplete",
    "budget_exhausted": "incomplete",
}
"""A response's status by its turn's done reason (any other: `completed`)."""


def _status(reason: DoneReason | None) -> Status:
    return "in_progress" if reason is None else STATUS.get(reason, "completed")


def _usage(usage: Usage) -> ResponseUsage:
    return ResponseUsage(
        input_tokens=usage.input_tokens,
        input_tokens_details=InputTokensDetails(
            cached_tokens=usage.cached_tokens, cache_write_tokens=0
        ),
        output_tokens=usage.output_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        total_tokens=usage.input_tokens + usage.output_tokens,
    )


def _message(run_id: str, text: str, status: Literal["in_progress", "completed"]) -> Any:
    return ResponseOutputMessage(
        id=_item_id(run_id),
        type="message",
        role="assistant",
        status=status,
        content=[_text(text)],
    )


def _item_id(run_id: str) -> str:
    return f"msg_{run_id.removeprefix('run_')}"


def _text(text: str) -> ResponseOutputText:
    return ResponseOutputText(type="output_text", text=text, annotations=[])


def build_response(
    session_id: str, run_id: str, agent: str, streamed: list[Event], created: datetime
) -> OpenResponse:
    """The `response` object of a turn from its events so far."""
    done = next((e for e in streamed if isinstance(e, events.Done)), None)
    status = _status(done.reason if done is not None else None)
    failure = next((e for e in streamed if isinstance(e, events.Error)), None)
    text = reply_with_note(root_text(streamed, run_id), streamed)
    return OpenResponse(
        id=PREFIX + turn_id(session_id, run_id),
        object="response",
        created_at=created.timestamp(),
        model=agent,
        status=status,
        output=[_message(run_id, text, "completed")] if done is not None else [],
        parallel_tool_calls=False,
        tool_choice="none",
        tools=[],
        usage=_usage(done.usage) if done is not None else None,
        error=ResponseError(code="server_error", message=failure.message) if failure else None,
        incomplete_details=(
            IncompleteDetails(reason="max_output_tokens") if status == "incomplete" else None
        ),
    )


def response_json(response: OpenResponse, streamed: list[Event]) -> dict[str, Any]:
    """A `response` as JSON, with the `amodal` extension once its turn has ended."""
    answer = response.model_dump(mode="json", exclude_unset=True)
    done = next((e for e in streamed if isinstance(e, events.Done)), None)
    if done is not None:
        answer["amodal"] = amodal_json(done.session_id, done.reason, streamed)
    return answer


async def stream_events(turn: RunningTurn, previous: str | None) -> AsyncIterator[bytes]:
    """The turn as Responses' semantic streaming events, numbered in order."""
    created = datetime.now(UTC)
    numbers = itertools.count()
    item_id = _item_id(turn.run_id)
    streamed: list[Event] = []

    def now() -> OpenResponse:
        response = build_response(turn.session_id, turn.run_id, turn.agent, streamed, created)
        response.previous_response_id = previous
        return response

    def sent(event: ResponseStreamEvent) -> bytes:
        body = event.model_dump(mode="json", exclude_unset=True)
        body["sequence_number"] = next(numbers)
        if isinstance(event, ENDS):
            body["response"] = response_json(event.response, streamed)
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        return f"event: {event.type}\ndata: {data}\n\n".encode(errors="backslashreplace")

    def delta(text: str) -> bytes:
        return sent(
            ResponseTextDeltaEvent(
                type="response.output_text.delta",
                item_id=item_id,
                output_index=0,
                content_index=0,
                delta=text,
                logprobs=[],
                sequence_number=0,
            )
        )

    yield sent(ResponseCreatedEvent(type="response.created", response=now(), sequence_number=0))
    yield sent(
        ResponseInProgressEvent(type="response.in_progress", response=now(), sequence_number=0)
    )
    yield sent(
        ResponseOutputItemAddedEvent(
            type="response.output_item.added",
            item=_message(turn.run_id, "", "in_progress"),
            output_index=0,
            sequence_number=0,
        )
    )
    yield sent(
        ResponseContentPartAddedEvent(
            type="response.content_part.added",
            item_id=item_id,
            output_index=0,
            content_index=0,
            part=_text(""),
            sequence_number=0,
        )
    )
    async for event in turn.events():
        streamed.append(event)
        if isinstance(event, events.TextDelta) and event.run_id == turn.run_id and event.text:
            yield delta(event.text)
    said = root_text(streamed, turn.run_id)
    text = reply_with_note(said, streamed)
    if text != said:  # what the turn waits for, said after the reply
        yield delta(text[len(said) :])
    for closing in _closing(now(), item_id, text):
        yield sent(closing)


def _closing(final: OpenResponse, item_id: str, text: str) -> list[ResponseStreamEvent]:
    """The events that end a streamed response (`sent` numbers them)."""
    closing: list[ResponseStreamEvent] = [
        ResponseTextDoneEvent(
            type="response.output_text.done",
            item_id=item_id,
            output_index=0,
            content_index=0,
            text=text,
            logprobs=[],
            sequence_number=0,
        ),
        ResponseContentPartDoneEvent(
            type="response.content_part.done",
            item_id=item_id,
            output_index=0,
            content_index=0,
            part=_text(text),
            sequence_number=0,
        ),
    ]
    if final.output:
        closing.append(
            ResponseOutputItemDoneEvent(
                type="response.output_item.done",
                item=final.output[0],
                output_index=0,
                sequence_number=0,
            )
        )
    if final.status == "failed":
        closing.append(
            ResponseFailedEvent(type="response.failed", response=final, sequence_number=0)
        )
    elif final.status == "incomplete":
        closing.append(
            ResponseIncompleteEvent(type="response.incomplete", response=final, sequence_number=0)
        )
    else:
        closing.append(
            ResponseCompletedEvent(type="response.completed", response=final, sequence_number=0)
        )
    return closing


__all__ = ["FACE", "router"]
