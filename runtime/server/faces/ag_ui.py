"""AG-UI (SPEC 24): `POST /ag-ui/{agent}` runs a turn for a frontend (CopilotKit and the like)
and answers an event stream built from the `ag-ui-protocol` package's types.

The `threadId` names the caller's conversation: its session id is derived from the
caller and the thread (`Runtime.thread_session`), so two owners' identical thread ids
never meet. The last user message is the turn; on a new thread the earlier messages
seed it, and on a thread that goes on they are the frontend's copy of what was said
and are not read again. Events: `RUN_STARTED`; the root agent's text as
`TEXT_MESSAGE_START`/`CONTENT`/`END`; each tool call as `TOOL_CALL_START`/`ARGS`/`END`
and `TOOL_CALL_RESULT`; each specialist run between `STEP_STARTED` and `STEP_FINISHED`;
then `RUN_FINISHED` (an interrupt outcome when the turn waits for an approval or a
choice, answered by the next run's `resume`) or `RUN_ERROR`. A refused request is one
`RUN_ERROR` event, with the HTTP status that says why.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypeVar

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter, Header, Path
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from runtime import events
from runtime.api import RunningTurn, Runtime
from runtime.events import Event
from runtime.server.auth import Authenticator
from runtime.server.errors import ApiError
from runtime.server.faces._common import SSE_CONTENT, Waiting, problems, shaped_route
from runtime.surface.caller import Caller, EarlierMessage

FACE = "ag_ui"
CHOICE = "choice-"
"""The prefix of a choice's interrupt id (a confirmation's is its call id)."""
TOOLS_REFUSED = (
    "frontend tools are not supported: an agent's tools come from its repo "
    "(agents/<name>/agent.json); send `tools: []`"
)
_ENCODER = EventEncoder()
P = TypeVar("P", bound=BaseModel)


def run_error(status: int, code: str, message: str) -> Response:
    """A refusal: one `RUN_ERROR` event, with the HTTP status that says why."""
    event = RunErrorEvent(message=message, code=code)
    return Response(_ENCODER.encode(event), status_code=status, media_type="text/event-stream")


class Approval(BaseModel):
    """A resumed confirmation's payload: `{"approve": true|false}`, no coercion."""

    model_config = ConfigDict(extra="forbid", strict=True)
    approve: bool


class Chosen(BaseModel):
    """A resumed choice's payload: `{"choice": "..."}`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    choice: str


def router(runtime: Runtime, auth: Authenticator) -> APIRouter:
    """`POST /ag-ui/{agent}`."""
    routes = APIRouter(route_class=shaped_route(run_error, 422), tags=["ag-ui"])

    @routes.post(
        "/ag-ui/{agent}",
        response_model=None,
        responses=ANSWERS,
        openapi_extra={"x-error-content": RUN_ERROR_CONTENT},
    )
    async def run(
        body: RunAgentInput,
        agent: Annotated[str, Path(description="an agent the caller may root")],
        authorization: Annotated[str | None, Header()] = None,
    ) -> Response:
        """Run the agent on a thread; AG-UI events as SSE."""
        who = auth.caller(authorization)
        if agent not in runtime.roots(claims=who.claims, operator=who.operator):
            raise ApiError(404, "unknown_agent", f"no agent {agent!r} for this caller")
        if body.tools:
            raise ApiError(400, "tools_not_supported", TOOLS_REFUSED)
        if body.resume:
            turn = await _resume(runtime, who, body)
        else:
            message, history = split_messages(body)
            turn = await runtime.begin(
                message,
                agent=agent,
                thread=body.thread_id,
                history=history,
                claims=who.claims,
                operator=who.operator,
                face=FACE,
            )
        return StreamingResponse(
            stream(turn, body),
            media_type=_ENCODER.get_content_type(),
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return routes


RUN_ERROR_CONTENT = {"text/event-stream": SSE_CONTENT}
"""A refusal: an event stream of one `RUN_ERROR` event."""
ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The run's AG-UI events as Server-Sent Events",
        "content": {"text/event-stream": SSE_CONTENT},
    },
    400: {"description": "Frontend tools, or a run that names no user message"},
    404: {"description": "No such agent for this caller, or no such interrupt"},
    409: {"description": "The thread has a run going (`session_busy`)"},
}


def split_messages(body: RunAgentInput) -> tuple[str, list[EarlierMessage]]:
    """The run's user message (the last message) and the earlier ones, as text."""
    said = [(message.role, _text(message)) for message in body.messages]
    kept = [(role, text) for role, text in said if role in ROLES and text]
    if not said or said[-1][0] != "user" or not said[-1][1].strip():
        raise ApiError(400, "invalid_request", "the last message must be the user's: the turn's")
    return said[-1][1], [EarlierMessage(ROLES[role], text) for role, text in kept[:-1]]


ROLES: dict[str, Any] = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}
"""The messages a new thread is seeded with (tool, activity, reasoning ones are not)."""


def _text(message: Any) -> str:
    content = getattr(message, "content", None)
    if content is None or isinstance(content, str):
        return content or ""
    texts = [getattr(part, "text", None) for part in content]
    if any(text is None for text in texts):
        raise ApiError(400, "invalid_request", "messages: only text content is understood")
    return "".join(str(text) for text in texts)


async def _resume(runtime: Runtime, who: Caller, body: RunAgentInput) -> RunningTurn:
    """Answer what the thread's last run waited for, with the run's one resume entry."""
    assert body.resume is not None
    if len(body.resume) != 1:
        raise ApiError(400, "invalid_request", "resume: one entry, for the one open interrupt")
    entry: ResumeEntry = body.resume[0]
    if entry.interrupt_id.startswith(CHOICE):
        chosen = _payload(Chosen, entry.payload) if entry.status == "resolved" else None
        if chosen is None:
            raise ApiError(400, "invalid_request", "a choice is answered, not cancelled")
        return await runtime.begin(
            chosen.choice,
            thread=body.thread_id,
            claims=who.claims,
            operator=who.operator,
            face=FACE,
        )
    approval = _payload(Approval, entry.payload) if entry.status == "resolved" else None
    session_id = runtime.thread_session(body.thread_id, claims=who.claims, operator=who.operator)
    return await runtime.begin_confirmation(
        session_id,
        entry.interrupt_id,
        approve=approval is not None and approval.approve,
        claims=who.claims,
        operator=who.operator,
        face=FACE,
    )


def _payload(model: type[P], payload: Any) -> P:
    try:
        return model.model_validate(payload)
    except ValidationError as invalid:
        why = problems(invalid.errors())
        raise ApiError(422, "invalid_request", f"resume payload: {why}") from None


async def stream(turn: RunningTurn, body: RunAgentInput) -> AsyncIterator[str]:
    """The turn as AG-UI events."""
    thread, run = body.thread_id, body.run_id
    yield _ENCODER.encode(RunStartedEvent(thread_id=thread, run_id=run))
    translator = _Translator(turn.run_id)
    async for event in turn.events():
        for translated in translator.translate(event):
            yield _ENCODER.encode(translated)
    for closing in translator.close(thread, run):
        yield _ENCODER.encode(closing)


class _Translator:
    """Our events into AG-UI's, in order: it opens and closes text messages and steps."""

    def __init__(self, root_run_id: str) -> None:
        self.root = root_run_id
        self.text_message: str | None = None
        self.steps: dict[str, str] = {}
        self.streamed: list[Event] = []

    def translate(self, event: Event) -> list[BaseEvent]:
        self.streamed.append(event)
        if isinstance(event, events.TextDelta):
            return self._text(event)
        if isinstance(event, events.ToolCall):
            return [*self._end_text(), *self._tool_call(event)]
        if isinstance(event, events.ToolResult):
            content = event.result if event.status == "ok" else {"error": event.error}
            return [
                ToolCallResultEvent(
                    message_id=f"result-{event.call_id}",
                    tool_call_id=event.call_id,
                    content=json.dumps(content, ensure_ascii=False),
                    role="tool",
                )
            ]
        if isinstance(event, events.SubagentStart):
            name = f"{event.subagent} ({event.run_id})"
            self.steps[event.run_id] = name
            return [*self._end_text(), StepStartedEvent(step_name=name)]
        if isinstance(event, events.SubagentEnd) and event.run_id in self.steps:
            return [StepFinishedEvent(step_name=self.steps.pop(event.run_id))]
        return []

    def _text(self, event: events.TextDelta) -> list[BaseEvent]:
        if event.run_id != self.root or not event.text:
            return []  # a specialist's words are its result, not the reply
        started: list[BaseEvent] = []
        if self.text_message is None:
            self.text_message = f"msg-{event.id.replace(':', '-')}"
            started.append(TextMessageStartEvent(message_id=self.text_message, role="assistant"))
        return [*started, TextMessageContentEvent(message_id=self.text_message, delta=event.text)]

    def _end_text(self) -> list[BaseEvent]:
        if self.text_message is None:
            return []
        ended = TextMessageEndEvent(message_id=self.text_message)
        self.text_message = None
        return [ended]

    def _tool_call(self, event: events.ToolCall) -> list[BaseEvent]:
        arguments = json.dumps(event.arguments, ensure_ascii=False)
        return [
            ToolCallStartEvent(tool_call_id=event.call_id, tool_call_name=event.name),
            ToolCallArgsEvent(tool_call_id=event.call_id, delta=arguments),
            ToolCallEndEvent(tool_call_id=event.call_id),
        ]

    def close(self, thread: str, run: str) -> list[BaseEvent]:
        """What ends the run: `RUN_FINISHED` with its outcome, or `RUN_ERROR`."""
        ended = self._end_text()
        done = next((e for e in self.streamed if isinstance(e, events.Done)), None)
        failure = next((e for e in self.streamed if isinstance(e, events.Error)), None)
        if done is None or failure is not None:
            message = failure.message if failure is not None else "the run ended early"
            code = failure.code if failure is not None else "cancelled"
            return [*ended, RunErrorEvent(message=message, code=code)]
        usage = TokenUsage(
            input_tokens=done.usage.input_tokens,
            output_tokens=done.usage.output_tokens,
            total_tokens=done.usage.input_tokens + done.usage.output_tokens,
            cached_input_tokens=done.usage.cached_tokens,
        )
        finished = RunFinishedEvent(
            thread_id=thread,
            run_id=run,
            outcome=self._outcome(done),
            result={"session_id": done.session_id, "done_reason": done.reason},
            usage=[usage],
        )
        return [*ended, finished]

    def _outcome(
        self, done: events.Done
    ) -> RunFinishedSuccessOutcome | RunFinishedInterruptOutcome | RunFinishedCancelledOutcome:
        if done.reason == "cancelled":
            return RunFinishedCancelledOutcome(type="cancelled")
        waiting = Waiting.of(self.streamed)
        if waiting is None:
            return RunFinishedSuccessOutcome(type="success")
        return RunFinishedInterruptOutcome(type="interrupt", interrupts=[_interrupt(waiting)])


def _interrupt(waiting: Waiting) -> Interrupt:
    if waiting.confirmation is not None:
        call = waiting.confirmation
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        return Interrupt(
            id=call.call_id,
            reason="confirmation_required",
            message=f"Approve `{call.name}` {arguments}?",
            tool_call_id=call.call_id,
            response_schema={
                "type": "object",
                "properties": {"approve": {"type": "boolean"}},
                "required": ["approve"],
                "additionalProperties": False,
            },
        )
    assert waiting.choice is not None
    choice = waiting.choice
    return Interrupt(
        id=f"{CHOICE}{choice.run_id}",
        reason="choice",
        message=f"{choice.question} Options: {', '.join(choice.options)}",
        response_schema={
            "type": "object",
            "properties": {"choice": {"type": "string", "enum": list(choice.options)}},
            "required": ["choice"],
            "additionalProperties": False,
        },
    )


__all__ = ["FACE", "router", "run_error"]
