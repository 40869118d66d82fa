"""A2A 1.0 (SPEC 24): other agent systems delegate to this repo's agents.

Each agent the caller may root has an agent card, at `/a2a/{agent}/.well-known/agent-card.json`
(and `/.well-known/agent-card.json` for `default`), and a JSON-RPC interface at
`/a2a/{agent}`: `SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`,
`ListTasks`, answered by the `a2a-sdk` package's dispatcher over a request handler of
our own, on `Runtime`.

The mapping: a `contextId` is a session; a task is a turn (its id, `<session>.<run>`,
names them, so no table maps it and a task of another owner's session is not found);
a turn that ends awaiting a confirmation or a choice is `TASK_STATE_INPUT_REQUIRED`,
answered by the next message on the task (a data part `{"approve": true|false}`, or
`{"choice": "..."}` or plain text), and the turn that answer starts belongs to the same
task; cancelling a waiting task declines its pending call; the reply is the task's
artifact `reply`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from datetime import datetime
from typing import Annotated, Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event as A2AEvent
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import MAX_LIST_TASKS_PAGE_SIZE, PROTOCOL_VERSION_CURRENT
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from fastapi import APIRouter, Header, Path, Request
from fastapi.responses import JSONResponse, Response
from google.protobuf import json_format, struct_pb2

from runtime import events
from runtime.api import PastTurn, RunningTurn, Runtime
from runtime.exceptions import RequestError, SessionBusyError, SessionNotFoundError
from runtime.repo.bundle import DEFAULT_AGENT
from runtime.server.auth import Authenticator
from runtime.server.errors import ApiError
from runtime.server.faces._common import (
    SESSION_ID,
    SSE_CONTENT,
    JSONRPCErrorBody,
    Waiting,
    error_content,
    root_text,
    split_turn_id,
    turn_id,
)
from runtime.surface.caller import Caller

FACE = "a2a"
AgentName = Annotated[str, Path(description="an agent the caller may root")]
REPLY = "reply"
"""The artifact a task's reply is."""
SCANNED_SESSIONS = 100
"""ListTasks without a contextId looks through this many of the caller's latest sessions."""
WORKING = TaskState.TASK_STATE_WORKING
WAITING = TaskState.TASK_STATE_INPUT_REQUIRED
ENDED = {
    "model_stop": TaskState.TASK_STATE_COMPLETED,
    "stop_execution": TaskState.TASK_STATE_COMPLETED,
    "max_tool_calls": TaskState.TASK_STATE_COMPLETED,
    "budget_exhausted": TaskState.TASK_STATE_COMPLETED,
    "awaiting_confirmation": WAITING,
    "awaiting_choice": WAITING,
    "error": TaskState.TASK_STATE_FAILED,
    "cancelled": TaskState.TASK_STATE_CANCELED,
}
"""A task's state by the done reason of its last turn."""


def refusal(refused: ApiError | RequestError) -> Response:
    """A refusal before the dispatcher runs (no credential, no such agent), in JSON-RPC."""
    if isinstance(refused, ApiError):
        return jsonrpc_error(refused.status, refused.code, refused.message)
    return jsonrpc_error(refused.status, refused.code, str(refused))


def jsonrpc_error(status: int, code: str, message: str) -> Response:
    """A JSON-RPC error answer for a request refused before the dispatcher read it."""
    error = InvalidRequestError(message=message, data={"code": code})
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(build_error_response(None, error), status_code=status, headers=headers)


# ------------------------------------------------------------------ tasks from turns


def tasks_of(turns: Sequence[PastTurn]) -> list[list[PastTurn]]:
    """A session's turns grouped into tasks: a turn that answers what the one before it
    waited for (an approval, a choice) belongs to that turn's task."""
    grouped: list[list[PastTurn]] = []
    for turn in turns:
        if grouped and _answers(grouped[-1][-1], turn):
            grouped[-1].append(turn)
        else:
            grouped.append([turn])
    return grouped


def _answers(before: PastTurn, turn: PastTurn) -> bool:
    reason = before.done.reason if before.done is not None else None
    if reason == "awaiting_choice":
        return True  # the person's next message is the choice (SPEC 6.1)
    return reason == "awaiting_confirmation" and turn.message is None


def state_of(task: Sequence[PastTurn], last_of_session: bool) -> TaskState:
    done = task[-1].done
    if done is None:
        return WORKING
    state = ENDED.get(done.reason, TaskState.TASK_STATE_COMPLETED)
    if state == WAITING and not last_of_session:  # a new message came instead of an answer
        return TaskState.TASK_STATE_CANCELED
    return state


def task_json(
    session_id: str,
    task: Sequence[PastTurn],
    *,
    last_of_session: bool,
    history_length: int | None = None,
    artifacts: bool = True,
) -> Task:
    """The A2A task of a session's turns."""
    first, last = task[0], task[-1]
    ident = turn_id(session_id, first.run_id)
    state = state_of(task, last_of_session)
    history = _history(session_id, ident, task)
    if history_length is not None:
        history = history[-history_length:] if history_length else []
    reply = "\n\n".join(text for turn in task if (text := root_text(turn.events, turn.run_id)))
    found = Task(
        id=ident,
        context_id=session_id,
        status=TaskStatus(
            state=state,
            message=_status_message(session_id, ident, task, state),
            timestamp=last.ended_at or last.started_at,
        ),
        history=history,
        metadata={"agent": first.agent},
    )
    if artifacts and reply and state != WAITING:
        found.artifacts.append(Artifact(artifact_id=REPLY, name=REPLY, parts=[Part(text=reply)]))
    return found


def _history(session_id: str, ident: str, task: Sequence[PastTurn]) -> list[Message]:
    said: list[Message] = []
    for turn in task:
        if turn.message is not None:
            said.append(
                _message(Role.ROLE_USER, f"{turn.run_id}-user", session_id, ident, turn.message)
            )
        text = root_text(turn.events, turn.run_id)
        if text:
            said.append(_message(Role.ROLE_AGENT, f"{turn.run_id}-agent", session_id, ident, text))
    return said


def _message(
    role: Role,
    message_id: str,
    session_id: str,
    ident: str,
    text: str,
    data: Any = None,
) -> Message:
    parts = [Part(text=text)]
    if data is not None:
        parts.append(Part(data=json_format.ParseDict(data, struct_pb2.Value())))
    return Message(
        message_id=message_id, role=role, context_id=session_id, task_id=ident, parts=parts
    )


def _status_message(
    session_id: str, ident: str, task: Sequence[PastTurn], state: TaskState
) -> Message | None:
    last = task[-1]
    if state == WAITING:
        waiting = Waiting.of(last.events)
        if waiting is not None:
            pending = waiting.as_json()
            note = _how_to_answer(waiting)
            return _message(
                Role.ROLE_AGENT, f"{last.run_id}-waiting", session_id, ident, note, pending
            )
    failure = next((e for e in last.events if isinstance(e, events.Error)), None)
    if state == TaskState.TASK_STATE_FAILED and failure is not None:
        return _message(Role.ROLE_AGENT, f"{last.run_id}-error", session_id, ident, failure.message)
    return None


def _how_to_answer(waiting: Waiting) -> str:
    if waiting.confirmation is not None:
        call = waiting.confirmation
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        return (
            f"Waiting for approval of `{call.name}` {arguments}: send a message on this task "
            'with a data part {"approve": true} or {"approve": false}.'
        )
    assert waiting.choice is not None
    options = ", ".join(waiting.choice.options)
    return (
        f"{waiting.choice.question} Options: {options}. Send a message on this task with the "
        'option as text, or a data part {"choice": "..."}.'
    )


# ------------------------------------------------------------------ the request handler


class AgentHandler(RequestHandler):
    """The A2A methods for one agent and one caller, on `Runtime`."""

    def __init__(self, runtime: Runtime, caller: Caller, agent: str) -> None:
        self.runtime = runtime
        self.caller = caller
        self.agent = agent

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        turn, ident = await self._start(params.message)
        length = _history_length(params.configuration)
        if params.configuration.return_immediately:
            return _working(turn, ident, params.message)
        async for _ in turn.events():
            pass
        return await self._task(ident, length)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2AEvent]:
        turn, ident = await self._start(params.message)
        session_id = turn.session_id
        yield _working(turn, ident, params.message)
        yield TaskStatusUpdateEvent(
            task_id=ident, context_id=session_id, status=TaskStatus(state=WORKING)
        )
        first = True
        async for event in turn.events():
            if isinstance(event, events.TextDelta) and event.run_id == turn.run_id and event.text:
                yield TaskArtifactUpdateEvent(
                    task_id=ident,
                    context_id=session_id,
                    artifact=Artifact(artifact_id=REPLY, name=REPLY, parts=[Part(text=event.text)]),
                    append=not first,
                )
                first = False
        task = await self._task(ident, None)
        yield TaskArtifactUpdateEvent(
            task_id=ident,
            context_id=session_id,
            artifact=Artifact(artifact_id=REPLY, name=REPLY),
            append=True,
            last_chunk=True,
        )
        yield TaskStatusUpdateEvent(task_id=ident, context_id=session_id, status=task.status)

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        return await self._task(params.id, _history_length(params))

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        size = params.page_size or 50
        if not 1 <= size <= MAX_LIST_TASKS_PAGE_SIZE:
            raise InvalidParamsError(f"pageSize is 1 to {MAX_LIST_TASKS_PAGE_SIZE}")
        start = int(params.page_token) if params.page_token.isdigit() else 0
        if params.page_token and not params.page_token.isdigit():
            raise InvalidParamsError("pageToken: pass the nextPageToken of the last page")
        found = await self._all_tasks(params)
        page = found[start : start + size]
        more = start + size < len(found)
        return ListTasksResponse(
            tasks=page,
            next_page_token=str(start + size) if more else "",
            page_size=size,
            total_size=len(found),
        )

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        task = await self._task(params.id, None)
        if task.status.state not in (WORKING, WAITING):
            state = TaskState.Name(task.status.state)
            raise TaskNotCancelableError(f"task {params.id!r} is {state}: it has ended")
        try:
            await self.runtime.cancel(
                task.context_id, claims=self.caller.claims, operator=self.caller.operator, face=FACE
            )
        except SessionBusyError:
            raise TaskNotCancelableError(
                f"task {params.id!r} runs on another server of this deployment; cancel it there"
            ) from None
        return await self._task(params.id, None)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2AEvent]:
        raise UnsupportedOperationError("SubscribeToTask: poll GetTask instead")
        yield  # an async generator, as the interface says

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError()

    # -------------------------------------------------------------- helpers

    async def _turns(self, session_id: str) -> list[PastTurn]:
        who = self.caller
        return await self.runtime.turns(session_id, claims=who.claims, operator=who.operator)

    async def _find(self, ident: str) -> tuple[str, list[list[PastTurn]], int]:
        """The session of task `ident` of this agent for this caller, its tasks, and the
        task's index among them; `TaskNotFoundError` for any other id."""
        found = split_turn_id(ident)
        if found is None:
            raise TaskNotFoundError(f"no task {ident!r}")
        session_id, run_id = found
        try:
            grouped = tasks_of(await self._turns(session_id))
        except SessionNotFoundError:
            raise TaskNotFoundError(f"no task {ident!r}") from None
        for index, task in enumerate(grouped):
            if task[0].run_id == run_id and task[0].agent == self.agent:
                return session_id, grouped, index
        raise TaskNotFoundError(f"no task {ident!r}")

    async def _task(self, ident: str, history_length: int | None) -> Task:
        session_id, grouped, index = await self._find(ident)
        last = index == len(grouped) - 1
        return task_json(
            session_id, grouped[index], last_of_session=last, history_length=history_length
        )

    async def _all_tasks(self, params: ListTasksRequest) -> list[Task]:
        """The caller's tasks of this agent, newest first, as `params` filters them."""
        who = self.caller
        if params.context_id:
            session_ids = [params.context_id]
        else:
            sessions = await self.runtime.sessions(
                claims=who.claims, operator=who.operator, limit=SCANNED_SESSIONS
            )
            session_ids = [session.id for session in sessions]
        after = (
            params.status_timestamp_after.ToDatetime()
            if params.HasField("status_timestamp_after")
            else None
        )
        length = _history_length(params)
        found: list[tuple[datetime, Task]] = []
        for session_id in session_ids:
            try:
                grouped = tasks_of(await self._turns(session_id))
            except SessionNotFoundError:
                continue
            for index, task in enumerate(grouped):
                if task[0].agent != self.agent:
                    continue
                built = task_json(
                    session_id,
                    task,
                    last_of_session=index == len(grouped) - 1,
                    history_length=length,
                    artifacts=params.include_artifacts,
                )
                when = built.status.timestamp.ToDatetime()
                if params.status and built.status.state != params.status:
                    continue
                if after is not None and when < after:
                    continue
                found.append((when, built))
        found.sort(key=lambda pair: pair[0], reverse=True)
        return [task for _, task in found]

    async def _start(self, message: Message) -> tuple[RunningTurn, str]:
        """Start the turn a message asks for; its task's id."""
        if message.role != Role.ROLE_USER:
            raise InvalidParamsError("message.role: a message to an agent is the user's")
        text, data = _parts(message)
        who = self.caller
        try:
            if message.task_id:
                return await self._answer(message, text, data)
            session_id = message.context_id or None
            if session_id is not None:
                open_task = await self._waiting_choice(session_id)
                if open_task is not None:  # the next message is the choice (SPEC 6.1)
                    return await self._answer(message, text, data, open_task)
            turn = await self.runtime.begin(
                _said(text, data),
                agent=self.agent,
                session_id=session_id,
                claims=who.claims,
                operator=who.operator,
                face=FACE,
            )
        except SessionNotFoundError:
            raise InvalidParamsError(
                f"unknown contextId {message.context_id!r}: leave it out to start a conversation"
            ) from None
        except RequestError as refused:
            raise _refusal(refused) from None
        return turn, turn_id(turn.session_id, turn.run_id)

    async def _waiting_choice(self, session_id: str) -> str | None:
        """The id of the session's task that waits for a choice, if one does."""
        if not SESSION_ID.fullmatch(session_id):
            raise InvalidParamsError("contextId: 1-64 letters, digits, '-' or '_'")
        grouped = tasks_of(await self._turns(session_id))
        last = grouped[-1] if grouped else None
        done = last[-1].done if last else None
        if last is None or done is None or done.reason != "awaiting_choice":
            return None
        return turn_id(session_id, last[0].run_id)

    async def _answer(
        self, message: Message, text: str, data: list[Any], ident: str | None = None
    ) -> tuple[RunningTurn, str]:
        """Answer what task `ident` (the message's task) waits for: an approval, a choice."""
        ident = ident or message.task_id
        session_id, grouped, index = await self._find(ident)
        if message.context_id and message.context_id != session_id:
            raise InvalidParamsError("contextId: the task belongs to another context")
        state = state_of(grouped[index], index == len(grouped) - 1)
        waiting = Waiting.of(grouped[index][-1].events)
        if state != WAITING or waiting is None:
            raise UnsupportedOperationError(
                f"task {ident!r} is {TaskState.Name(state)}: it takes no more messages; send a "
                f"new message with contextId {session_id!r} to go on"
            )
        who = self.caller
        try:
            if waiting.confirmation is not None:
                approve = _approval(data)
                turn = await self.runtime.begin_confirmation(
                    session_id,
                    waiting.confirmation.call_id,
                    approve=approve,
                    claims=who.claims,
                    operator=who.operator,
                    face=FACE,
                )
            else:
                turn = await self.runtime.begin(
                    _choice(text, data),
                    session_id=session_id,
                    claims=who.claims,
                    operator=who.operator,
                    face=FACE,
                )
        except RequestError as refused:
            raise _refusal(refused) from None
        return turn, ident


def _parts(message: Message) -> tuple[str, list[Any]]:
    """A message's text (its text parts) and its data parts' values."""
    texts: list[str] = []
    data: list[Any] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            data.append(json_format.MessageToDict(part.data))
        else:
            raise ContentTypeNotSupportedError(
                f"a {kind or 'empty'} part: this agent takes text and data parts"
            )
    return "\n".join(texts), data


def _said(text: str, data: list[Any]) -> str:
    """What a new message says: its text, and its data parts as JSON."""
    blocks = [text] if text.strip() else []
    blocks += ["```json\n" + json.dumps(value, ensure_ascii=False) + "\n```" for value in data]
    if not blocks:
        raise InvalidParamsError("message.parts: say something (a text or a data part)")
    return "\n\n".join(blocks)


def _approval(data: list[Any]) -> bool:
    for value in data:
        if (
            isinstance(value, dict)
            and set(value) == {"approve"}
            and isinstance(value["approve"], bool)
        ):
            return value["approve"]
    raise InvalidParamsError(
        'this task waits for an approval: send a data part {"approve": true} or {"approve": false}'
    )


def _choice(text: str, data: list[Any]) -> str:
    for value in data:
        if isinstance(value, dict) and isinstance(value.get("choice"), str) and value["choice"]:
            return str(value["choice"])
    if text.strip():
        return text
    raise InvalidParamsError('this task waits for a choice: send it as text or {"choice": "..."}')


def _refusal(refused: RequestError) -> A2AError:
    if isinstance(refused, SessionNotFoundError):
        return TaskNotFoundError(str(refused))
    if isinstance(refused, SessionBusyError):
        return InvalidRequestError(str(refused))
    return InvalidParamsError(str(refused))


def _history_length(params: Any) -> int | None:
    if params.HasField("history_length"):
        return int(params.history_length)
    return None


def _working(turn: RunningTurn, ident: str, message: Message) -> Task:
    """A task as it starts: working, with the message that started it."""
    asked = Message()
    asked.CopyFrom(message)
    asked.context_id, asked.task_id = turn.session_id, ident
    return Task(
        id=ident,
        context_id=turn.session_id,
        status=TaskStatus(state=WORKING),
        history=[asked],
        metadata={"agent": turn.agent},
    )


# ------------------------------------------------------------------ routes


def agent_card(
    runtime: Runtime, caller: Caller, agent: str, base_url: str, secured: bool
) -> AgentCard:
    """The card of `agent` as `caller` sees it: its skills are the ones its surface grants."""
    bundle = runtime.bundle
    definition = bundle.agents.get(agent)
    surface = runtime.inspect(agent, claims=caller.claims)
    skills = [
        AgentSkill(
            id=name,
            name=name,
            description=bundle.skills[name].description if name in bundle.skills else name,
            tags=["skill"],
        )
        for name in surface["skills"]
    ]
    description = (definition.description or definition.display_name) if definition else ""
    if not skills:  # A2A wants one skill at least: an agent without skills offers itself
        skills = [
            AgentSkill(id=agent, name=agent, description=description or agent, tags=["agent"])
        ]
    card = AgentCard(
        name=agent,
        description=description,
        version=bundle.config.version,
        supported_interfaces=[
            AgentInterface(
                url=f"{base_url}/a2a/{agent}",
                protocol_binding="JSONRPC",
                protocol_version=PROTOCOL_VERSION_CURRENT,
            )
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=skills,
    )
    if secured:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card


def router(runtime: Runtime, auth: Authenticator) -> APIRouter:
    """The agent cards and the JSON-RPC interface of every agent."""
    routes = APIRouter(tags=["a2a"])

    def caller_for(authorization: str | None, agent: str) -> Caller:
        who = auth.caller(authorization)
        if agent not in runtime.roots(claims=who.claims, operator=who.operator):
            raise ApiError(404, "unknown_agent", f"no agent {agent!r} for this caller")
        return who

    def card_answer(request: Request, authorization: str | None, agent: str) -> Response:
        try:
            who = caller_for(authorization, agent)
        except (ApiError, RequestError) as refused:
            return refusal(refused)
        base = str(request.base_url).rstrip("/")
        card = agent_card(runtime, who, agent, base, auth.configured)
        return JSONResponse(agent_card_to_dict(card))

    @routes.get(
        "/a2a/{agent}/.well-known/agent-card.json",
        responses=CARD_ANSWERS,
        openapi_extra=error_content("JSONRPCErrorBody"),
    )
    async def card(
        request: Request, agent: AgentName, authorization: Annotated[str | None, Header()] = None
    ) -> Response:
        """The agent's A2A agent card."""
        return card_answer(request, authorization, agent)

    @routes.get(
        "/.well-known/agent-card.json",
        responses=CARD_ANSWERS,
        openapi_extra=error_content("JSONRPCErrorBody"),
    )
    async def default_card(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> Response:
        """The agent card of `default`, when the repo has it."""
        return card_answer(request, authorization, DEFAULT_AGENT)

    @routes.post(
        "/a2a/{agent}",
        response_model=None,
        responses=RPC_ANSWERS,
        openapi_extra=RPC_REQUEST,
    )
    async def rpc(
        request: Request, agent: AgentName, authorization: Annotated[str | None, Header()] = None
    ) -> Response:
        """A2A's JSON-RPC methods: SendMessage, SendStreamingMessage, GetTask, CancelTask,
        ListTasks."""
        try:
            who = caller_for(authorization, agent)
        except (ApiError, RequestError) as refused:
            return refusal(refused)
        dispatcher = JsonRpcDispatcher(AgentHandler(runtime, who, agent))
        return await dispatcher.handle_requests(request)

    return routes


CARD_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The agent card",
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    404: {"model": JSONRPCErrorBody, "description": "No such agent for this caller"},
}
A2A_METHODS = ["SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "ListTasks"]
RPC_REQUEST: dict[str, Any] = {
    **error_content("JSONRPCErrorBody"),
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["jsonrpc", "method", "id"],
                    "properties": {
                        "jsonrpc": {"type": "string", "enum": ["2.0"]},
                        "id": {"type": ["string", "integer"]},
                        "method": {"type": "string", "enum": A2A_METHODS},
                        "params": {"type": "object"},
                    },
                }
            }
        },
    },
    "parameters": [
        {
            "name": "a2a-version",
            "in": "header",
            "required": True,
            "description": "The A2A protocol version the client speaks",
            "schema": {"type": "string", "enum": ["1.0"]},
        }
    ],
}
RPC_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The JSON-RPC answer (errors too, as JSON-RPC errors), or for "
        "SendStreamingMessage an event stream of them",
        "content": {
            "application/json": {"schema": {"type": "object", "required": ["jsonrpc"]}},
            "text/event-stream": SSE_CONTENT,
        },
    },
    404: {"model": JSONRPCErrorBody, "description": "No such agent for this caller"},
}
