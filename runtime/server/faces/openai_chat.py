"""OpenAI Chat Completions (SPEC 24): `GET /v1/models` and `POST /v1/chat/completions`, so any
OpenAI client (the `openai` SDKs, Open WebUI, LibreChat, LiteLLM) chats with an agent.

The `model` is the agent. The last message is the user's and is the turn's message;
with `X-Amodal-Session: ID` (or `metadata.session_id`) the turn continues that session
and the earlier messages are not read again; without, a new session is seeded with
them (a client's system messages quoted as context, never as the agent's
instructions) and the answer names it in `X-Amodal-Session`. Answers are the `openai`
package's own types, plus an `amodal` object: the session, the done reason, and what
a turn that ended awaiting a person waits for. Errors are OpenAI's error object.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response, StreamingResponse
from openai.types import Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat import chat_completion as completion
from openai.types.chat import chat_completion_chunk as chunks
from openai.types.chat.completion_create_params import CompletionCreateParamsBase
from openai.types.completion_usage import CompletionUsage, PromptTokensDetails
from openai.types.shared import ErrorObject
from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime import events
from runtime.api import ChatResult, RunningTurn, Runtime
from runtime.events import DoneReason, Event, Usage
from runtime.server.auth import Authenticator
from runtime.server.errors import ApiError, TextJSONResponse
from runtime.server.faces._common import (
    SSE_CONTENT,
    Waiting,
    check_session_id,
    error_content,
    reply_with_note,
    root_text,
    shaped_route,
    turn_id,
)
from runtime.surface.caller import Caller, EarlierMessage, EarlierRole

FACE = "openai_chat"
SESSION_HEADER = "X-Amodal-Session"
TOOLS_REFUSED = (
    "client-supplied tools are not supported: an agent's tools come from its repo "
    "(agents/<name>/agent.json); send messages only"
)
FINISH: dict[DoneReason, Literal["stop", "length"]] = {
    "max_tool_calls": "length",
    "budget_exhausted": "length",
}
"""OpenAI's `finish_reason` of a done reason other than `stop`."""
_KNOWN = {*CompletionCreateParamsBase.__annotations__, "stream"}
ROLES: dict[str, EarlierRole] = {
    "system": "system",
    "developer": "system",  # a client's instructions: quoted as context, like `system`
    "user": "user",
    "assistant": "assistant",
}


def openai_error(status: int, code: str, message: str) -> Response:
    """OpenAI's error object, `{"error": {"message", "type", "param", "code"}}`."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    error = ErrorObject(message=message, type=kind, param=None, code=code)
    return TextJSONResponse({"error": error.model_dump(mode="json")}, status_code=status)


class OpenAIErrorBody(BaseModel):
    """Every error of the OpenAI faces."""

    error: ErrorObject


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """A message of the conversation: text only (a string or text parts)."""

    model_config = ConfigDict(extra="allow", strict=True)  # `name` and the like are ignored
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    include_usage: bool = False


class ChatCompletionBody(BaseModel):
    """The request. Parameters of OpenAI's API not listed (temperature, max_tokens, ...) are
    accepted and not used: the agent's `modelSettings` in its repo decide them."""

    model_config = ConfigDict(extra="allow", strict=True)
    model: str = Field(min_length=1, description="the agent's name (GET /v1/models)")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    metadata: dict[str, str] | None = Field(
        None, description="`session_id` continues that session, as X-Amodal-Session does"
    )

    @model_validator(mode="after")
    def _only_openai_parameters(self) -> ChatCompletionBody:
        unknown = sorted(set(self.model_extra or {}) - _KNOWN)
        if unknown:
            raise ValueError(f"unrecognized request arguments: {', '.join(unknown)}")
        return self


def router(runtime: Runtime, auth: Authenticator) -> APIRouter:
    """The Chat Completions routes over `runtime`."""
    routes = APIRouter(route_class=shaped_route(openai_error), tags=["openai"])
    errors: dict[int | str, dict[str, Any]] = {
        status: {"model": OpenAIErrorBody, "description": why}
        for status, why in {
            400: "Not a valid request, or client-supplied tools (`invalid_request`)",
            404: "No such agent (`model_not_found`) or session for this caller",
            409: "The session has a turn running (`session_busy`)",
            502: "The agent's model failed (`model_error`)",
        }.items()
    }
    shape = error_content("OpenAIErrorBody")
    started = int(time.time())  # a model's `created`: when this server began serving it

    @routes.get("/v1/models", openapi_extra=shape)
    async def models(authorization: Annotated[str | None, Header()] = None) -> dict[str, Any]:
        """The agents the caller may root, as models (`id` = the agent's name)."""
        who = auth.caller(authorization)
        listed = [
            Model(id=name, object="model", created=started, owned_by=runtime.bundle.config.name)
            for name in runtime.roots(claims=who.claims, operator=who.operator)
        ]
        return {"object": "list", "data": [model.model_dump(mode="json") for model in listed]}

    @routes.post(
        "/v1/chat/completions",
        response_model=None,
        responses={200: COMPLETION_ANSWER, **errors},
        openapi_extra=shape,
    )
    async def chat_completions(
        body: ChatCompletionBody,
        authorization: Annotated[str | None, Header()] = None,
        x_amodal_session: Annotated[
            str | None, Header(json_schema_extra={"pattern": "^[A-Za-z0-9_-]{1,64}$"})
        ] = None,
    ) -> Response:
        who = auth.caller(authorization)
        extra = body.model_extra or {}
        if extra.get("tools") or extra.get("functions"):
            raise ApiError(400, "tools_not_supported", TOOLS_REFUSED)
        agent = agent_for(runtime, who, body.model)
        session_id = x_amodal_session or (body.metadata or {}).get("session_id")
        message, history = split_messages(body.messages)
        if session_id is not None:
            check_session_id(session_id)
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
        headers = {SESSION_HEADER: turn.session_id}
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        if body.stream:
            return StreamingResponse(
                stream_chunks(turn, include_usage),
                media_type="text/event-stream",
                headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        result = ChatResult.of([event async for event in turn.events()])
        if result.reason == "error":
            return openai_error(502, "model_error", result.error or "the turn failed")
        return JSONResponse(completion_json(result, turn.run_id), headers=headers)

    return routes


COMPLETION_ANSWER: dict[str, Any] = {
    "description": "A `chat.completion`, or with `stream: true` `chat.completion.chunk` events "
    "ending with `data: [DONE]`; `X-Amodal-Session` names the session",
    "content": {
        "application/json": {"schema": {"type": "object", "required": ["id", "choices"]}},
        "text/event-stream": SSE_CONTENT,
    },
    "headers": {"X-Amodal-Session": {"schema": {"type": "string"}}},
}


def agent_for(runtime: Runtime, who: Caller, name: str) -> str:
    """The agent a request names, if this caller may root it (else 404, listing those)."""
    roots = runtime.roots(claims=who.claims, operator=who.operator)
    if name not in roots:
        listed = ", ".join(roots) or "none"
        message = f"the model {name!r} does not exist; the models are this repo's agents: {listed}"
        raise ApiError(404, "model_not_found", message)
    return name


def split_messages(messages: list[ChatMessage]) -> tuple[str, list[EarlierMessage]]:
    """The turn's message (the last, a user's) and the earlier ones."""
    last = messages[-1]
    if last.role != "user" or not last.text.strip():
        raise ApiError(
            400, "invalid_request", "the last message must be the user's: it is the turn's message"
        )
    history = [EarlierMessage(ROLES[m.role], m.text) for m in messages[:-1] if m.text]
    return last.text, history


def finish_reason(reason: DoneReason) -> Literal["stop", "length"]:
    return FINISH.get(reason, "stop")


def usage_json(usage: Usage) -> CompletionUsage:
    return CompletionUsage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.input_tokens + usage.output_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.cached_tokens),
    )


def amodal_json(session_id: str, reason: DoneReason, streamed: list[Event]) -> dict[str, Any]:
    """The `amodal` object every answer carries."""
    waiting = Waiting.of(streamed)
    return {
        "session_id": session_id,
        "done_reason": reason,
        "pending": waiting.as_json() if waiting is not None else None,
    }


def completion_json(result: ChatResult, run_id: str) -> dict[str, Any]:
    streamed = list(result.events)
    answer = ChatCompletion(
        id=f"chatcmpl-{turn_id(result.session_id, run_id)}",
        object="chat.completion",
        created=int(time.time()),
        model=result.agent,
        choices=[
            completion.Choice(
                index=0,
                finish_reason=finish_reason(result.reason),
                message=ChatCompletionMessage(
                    role="assistant", content=reply_with_note(result.text, streamed)
                ),
            )
        ],
        usage=usage_json(result.usage),
    )
    body = answer.model_dump(mode="json", exclude_unset=True)
    body["amodal"] = amodal_json(result.session_id, result.reason, streamed)
    return body


async def stream_chunks(turn: RunningTurn, include_usage: bool) -> AsyncIterator[bytes]:
    """The turn as `chat.completion.chunk` events, then `data: [DONE]`."""
    ident = f"chatcmpl-{turn_id(turn.session_id, turn.run_id)}"
    created = int(time.time())

    def chunk(delta: chunks.ChoiceDelta, finish: Any = None, **extra: Any) -> bytes:
        body = ChatCompletionChunk(
            id=ident,
            object="chat.completion.chunk",
            created=created,
            model=turn.agent,
            choices=[chunks.Choice(index=0, delta=delta, finish_reason=finish)],
        ).model_dump(mode="json", exclude_unset=True)
        return _data({**body, **extra})

    yield chunk(chunks.ChoiceDelta(role="assistant", content=""))
    streamed: list[Event] = []
    async for event in turn.events():
        streamed.append(event)
        if isinstance(event, events.TextDelta) and event.run_id == turn.run_id and event.text:
            yield chunk(chunks.ChoiceDelta(content=event.text))
        elif isinstance(event, events.Error):
            failed = ErrorObject(message=event.message, type="server_error", code=event.code)
            yield _data({"error": failed.model_dump(mode="json")})
        elif isinstance(event, events.Done):
            waiting = Waiting.of(streamed)
            if waiting is not None:
                note = waiting.note()
                text = root_text(streamed, turn.run_id)
                yield chunk(chunks.ChoiceDelta(content=f"\n\n{note}" if text else note))
            amodal = amodal_json(turn.session_id, event.reason, streamed)
            yield chunk(chunks.ChoiceDelta(), finish_reason(event.reason), amodal=amodal)
            if include_usage:
                usage = usage_json(event.usage).model_dump(mode="json", exclude_unset=True)
                yield _data(
                    {
                        "id": ident,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": turn.agent,
                        "choices": [],
                        "usage": usage,
                    }
                )
    yield b"data: [DONE]\n\n"


def _data(body: dict[str, Any]) -> bytes:
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return f"data: {text}\n\n".encode()
    except UnicodeEncodeError:  # an unpaired surrogate (a tool's broken output): escaped
        return f"data: {json.dumps(body, separators=(',', ':'))}\n\n".encode()


__all__ = ["FACE", "SESSION_HEADER", "openai_error", "router"]
