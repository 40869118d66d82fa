"""What every protocol face shares: a route that answers in its protocol's error shape, the
ids that name a turn, and what a turn's events say once it has ended.

A face never grants more than `/chat`: it takes the caller from verified credentials
(`Authenticator.caller`) and calls `Runtime` with them, so the surface, the tenancy,
the bounds and the confirmations are the ones `/chat` would apply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel

from runtime import events
from runtime.events import Event
from runtime.exceptions import AmodalError, RequestError
from runtime.server.errors import ApiError

Refusal = Callable[[int, str, str], Response]
"""A protocol's error answer: (HTTP status, code, message) -> response."""

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
RUN_ID = re.compile(r"^run_[0-9a-f]{12}$")


def shaped_route(refuse: Refusal, invalid_status: int = 400) -> type[APIRoute]:
    """A route class whose refusals are answered in a protocol's own error shape: a body
    that does not validate (`invalid_status`), a refusal of the runtime (its status), a
    route's `ApiError`. A runtime error that is no refusal is a 500 in that shape too."""

    class ShapedRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def answer(request: Request) -> Response:
                try:
                    return await handler(request)
                except RequestValidationError as invalid:
                    return refuse(invalid_status, "invalid_request", problems(invalid.errors()))
                except ApiError as error:
                    return refuse(error.status, error.code, error.message)
                except RequestError as error:
                    return refuse(error.status, error.code, str(error))
                except AmodalError as error:
                    return refuse(500, "runtime_error", str(error))

            return answer

    return ShapedRoute


class JSONRPCError(BaseModel):
    code: int
    message: str
    data: Any = None


class JSONRPCErrorBody(BaseModel):
    """A JSON-RPC 2.0 error answer (A2A, MCP), as the OpenAPI document declares it."""

    jsonrpc: Literal["2.0"]
    id: str | int | None
    error: JSONRPCError


SSE_CONTENT: dict[str, Any] = {
    "itemSchema": {
        "type": "object",
        "required": ["data"],
        "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
    }
}
"""An event stream in the OpenAPI document: one item per event, its `data` a string."""


def error_content(schema: str) -> dict[str, Any]:
    """The `openapi_extra` of a face's route: its errors' JSON body is `schema`."""
    ref = {"$ref": f"#/components/schemas/{schema}"}
    return {"x-error-content": {"application/json": {"schema": ref}}}


def problems(errors: Iterable[Any]) -> str:
    """A validation error's problems in one sentence, each naming where (never the value)."""
    found = []
    for error in errors:
        if error["type"] == "json_invalid":
            found.append("body: not valid JSON")
            continue
        where = ".".join(str(part) for part in error["loc"] if part != "body") or "body"
        found.append(f"{where}: {error['msg']}")
    return "; ".join(found) or "the request is not valid"


def turn_id(session_id: str, run_id: str) -> str:
    """The id of one turn across faces (a response id, a task id): its session and its root
    run, so looking it up checks the caller may see that session, and no table maps it."""
    return f"{session_id}.{run_id}"


def split_turn_id(text: str) -> tuple[str, str] | None:
    """(session id, run id) of a turn id, or None when it is not one."""
    session_id, dot, run_id = text.rpartition(".")
    if not dot or not SESSION_ID.fullmatch(session_id) or not RUN_ID.fullmatch(run_id):
        return None
    return session_id, run_id


def root_text(streamed: Iterable[Event], root_run_id: str) -> str:
    """The root agent's reply in a turn's events (specialists' text is theirs)."""
    return "".join(
        e.text for e in streamed if isinstance(e, events.TextDelta) and e.run_id == root_run_id
    )


@dataclass(frozen=True, slots=True)
class Waiting:
    """What a turn that ended awaiting a person waits for: a confirmation or a choice."""

    session_id: str
    confirmation: events.ConfirmationRequired | None = None
    choice: events.Choice | None = None

    @classmethod
    def of(cls, streamed: Iterable[Event]) -> Waiting | None:
        session_id, confirmation, choice = "", None, None
        for event in streamed:
            session_id = event.session_id
            if isinstance(event, events.ConfirmationRequired):
                confirmation = event
            elif isinstance(event, events.Choice):
                choice = event
        if confirmation is None and choice is None:
            return None
        return cls(session_id, confirmation, choice)

    def as_json(self) -> dict[str, Any]:
        """The `pending` object of a face's `amodal` extension."""
        if self.confirmation is not None:
            return {
                "kind": "confirmation",
                "call_id": self.confirmation.call_id,
                "tool": self.confirmation.name,
                "arguments": self.confirmation.arguments,
            }
        assert self.choice is not None
        return {
            "kind": "choice",
            "question": self.choice.question,
            "options": list(self.choice.options),
        }

    def note(self) -> str:
        """What the turn waits for and how a person answers it, as words for a reply."""
        if self.confirmation is not None:
            call = self.confirmation
            arguments = json.dumps(call.arguments, ensure_ascii=False)
            path = f"/sessions/{self.session_id}/confirmations/{call.call_id}"
            return (
                f"[Waiting for a person to approve `{call.name}` {arguments} (call "
                f"`{call.call_id}`). Approve or deny it in the console or with POST {path} "
                '{"approve": true} (or false); a new message declines it.]'
            )
        assert self.choice is not None
        options = ", ".join(self.choice.options)
        return f"[{self.choice.question} Options: {options}. Your next message is the answer.]"


def reply_with_note(text: str, streamed: Iterable[Event]) -> str:
    """The reply, and what the turn waits for when it ended awaiting a person."""
    waiting = Waiting.of(streamed)
    if waiting is None:
        return text
    return f"{text}\n\n{waiting.note()}" if text else waiting.note()


def check_session_id(session_id: str) -> None:
    if not SESSION_ID.fullmatch(session_id):
        raise ApiError(
            422, "invalid_session_id", "a session id is 1-64 letters, digits, '-' or '_'"
        )
