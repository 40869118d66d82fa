"""An MCP server (SPEC 24): every agent the caller may root is a tool of that name, so Claude
Desktop, Cursor or any MCP client can hand an agent a task.

A tool's input is `{message, session_id?}`; its result is the reply as text, with
`structuredContent` `{session_id, agent, done_reason}` (pass `session_id` back to
continue the conversation). A turn that ends awaiting a person's approval says so and
how a person answers it: a calling model never approves anything by itself.

Two transports, one server per caller (`server_for`): streamable HTTP at `/mcp` on
`amodal serve`, stateless (each request is answered on its own, with the credentials
it carries, on any server process), and stdio (`amodal mcp`, as the operator or with
`--token`). Built on the `mcp` package's low-level `Server`, whose tools are listed per
caller and per request, so a reload or another caller's surface shows at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    CallToolRequestParams,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError
from starlette.types import Message, Receive, Scope, Send

from runtime._version import __version__
from runtime.api import ChatResult, Runtime
from runtime.exceptions import RequestError
from runtime.repo.bundle import Bundle
from runtime.server.auth import Authenticator
from runtime.server.faces._common import (
    SESSION_ID,
    JSONRPCErrorBody,
    error_content,
    problems,
    reply_with_note,
)
from runtime.surface.caller import Caller

FACE = "mcp"
INSTRUCTIONS = (
    "Each tool is an agent of this repo: give it a task as `message`. To continue a "
    "conversation, pass back the `session_id` of its last result."
)
UNSCOPED = "Unscoped chat: every resource of the repo (the operator's)."


class AgentTask(BaseModel):
    """A tool's input: what to tell the agent, and the conversation to continue."""

    model_config = ConfigDict(extra="forbid", strict=True)
    message: str = Field(min_length=1, description="What to tell the agent.")
    session_id: str | None = Field(
        None,
        pattern=SESSION_ID.pattern,
        description="Continue this conversation (`session_id` of an earlier result).",
    )


class AgentReply(BaseModel):
    """A tool's `structuredContent`."""

    session_id: str = Field(description="Pass it back as `session_id` to continue.")
    agent: str
    done_reason: str = Field(
        description="model_stop, awaiting_confirmation (a person must approve a call), "
        "awaiting_choice, max_tool_calls, budget_exhausted (a token, cost or time limit "
        "was reached), stop_execution, cancelled or error"
    )


def jsonrpc_error(status: int, code: str, message: str) -> Response:
    """A JSON-RPC error object, for a request refused before it reached the server."""
    error = JSONRPCError(
        jsonrpc="2.0", id=None, error=ErrorData(code=INVALID_REQUEST, message=message, data=code)
    )
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(error.model_dump(mode="json"), status_code=status, headers=headers)


def server_for(runtime: Runtime, caller: Caller, agents: Sequence[str] = ()) -> Server[Any]:
    """An MCP server whose tools are the agents `caller` may root (only `agents`, if given)."""

    def names() -> list[str]:
        roots = runtime.roots(claims=caller.claims, operator=caller.operator)
        return [name for name in roots if not agents or name in agents]

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        bundle = runtime.bundle
        return ListToolsResult(tools=[_tool(bundle, name) for name in names()])

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        if params.name not in names():
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r}; tools: {names()}")
        try:
            task = AgentTask.model_validate(params.arguments or {})
        except ValidationError as invalid:
            return _failed(f"invalid arguments: {problems(invalid.errors())}")
        return await _run(runtime, caller, params.name, task)

    return Server(
        "amodal",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _tool(bundle: Bundle, name: str) -> Tool:
    agent = bundle.agents.get(name)
    return Tool(
        name=name,
        title=agent.display_name if agent is not None else "Unscoped chat",
        description=(agent.description or agent.display_name) if agent is not None else UNSCOPED,
        input_schema=AgentTask.model_json_schema(),
        output_schema=AgentReply.model_json_schema(),
    )


async def _run(runtime: Runtime, caller: Caller, agent: str, task: AgentTask) -> CallToolResult:
    """One turn of `agent`; refusals (an unknown or busy session) are tool errors."""
    try:
        turn = await runtime.begin(
            task.message,
            agent=agent,
            session_id=task.session_id,
            claims=caller.claims,
            operator=caller.operator,
            face=FACE,
        )
    except RequestError as refused:
        return _failed(str(refused))
    result = ChatResult.of([event async for event in turn.events()])
    reply = AgentReply(session_id=result.session_id, agent=result.agent, done_reason=result.reason)
    failed = result.reason == "error"
    text = (
        f"The agent failed: {result.error}"
        if failed
        else reply_with_note(result.text, result.events)
    )
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=reply.model_dump(mode="json"),
        is_error=failed,
    )


def _failed(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


# ------------------------------------------------------------------ streamable HTTP


class _Answered(Response):
    """A response the MCP transport writes itself, from the request's own ASGI channel."""

    def __init__(self, server: Server[Any], body: bytes) -> None:
        super().__init__()
        self.server = server
        self.body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sent = False

        async def replay() -> Message:  # the body the route read, then the client's channel
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}

        manager = StreamableHTTPSessionManager(self.server, stateless=True, json_response=True)
        async with manager.run():
            await manager.handle_request(scope, replay, send)


class Envelope(BaseModel):
    """What a JSON-RPC message of MCP must be, checked before the transport reads it: the
    transport takes a request id of any type as a notification, MCP's ids are strings or
    integers."""

    model_config = ConfigDict(extra="allow", strict=True)
    jsonrpc: Literal["2.0"]
    method: str
    id: StrictInt | StrictStr | None = None
    params: dict[str, Any] | None = None


def envelope_problem(body: bytes) -> str | None:
    """What is wrong with a message's JSON-RPC envelope, or None (also for a body that is no
    JSON object: the transport answers those with its own parse error)."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    for key in ("id", "params"):
        if key in message and message[key] is None:
            return f"{key}: a string or an integer for an id, an object for params"
    try:
        Envelope.model_validate(message)
    except ValidationError as invalid:
        return f"not a JSON-RPC message: {problems(invalid.errors())}"
    return None


def router(runtime: Runtime, auth: Authenticator) -> APIRouter:
    """`POST /mcp`: MCP over streamable HTTP, with the caller's credentials."""
    routes = APIRouter(tags=["mcp"])

    @routes.post(
        "/mcp",
        response_model=None,
        responses=MCP_ANSWERS,
        openapi_extra=MCP_REQUEST,
    )
    async def mcp(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> Response:
        """MCP's streamable HTTP transport (stateless): JSON-RPC in, JSON-RPC out."""
        try:
            caller = auth.caller(authorization)
        except RequestError as refused:
            return jsonrpc_error(refused.status, refused.code, str(refused))
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":  # the transport would say so in plain text
            return jsonrpc_error(415, "unsupported_media_type", "send the message as JSON")
        body = await request.body()
        problem = envelope_problem(body)
        if problem is not None:
            return jsonrpc_error(400, "invalid_request", problem)
        return _Answered(server_for(runtime, caller), body)

    return routes


JSONRPC_MESSAGE: dict[str, Any] = {
    "type": "object",
    "required": ["jsonrpc", "method"],
    "description": "A JSON-RPC request or notification: `initialize`, `ping`, `tools/list`, "
    "`tools/call`, ... (a method MCP does not have gets a JSON-RPC error)",
    "properties": {
        "jsonrpc": {"type": "string", "enum": ["2.0"]},
        "id": {
            "type": ["string", "integer"],
            "description": "a request's id (without one, a notification)",
        },
        "method": {"type": "string"},
        "params": {"type": "object", "description": "the method's parameters"},
    },
}
MCP_REQUEST: dict[str, Any] = {
    **error_content("JSONRPCErrorBody"),
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": JSONRPC_MESSAGE}},
    },
    "parameters": [
        {
            "name": "accept",
            "in": "header",
            "required": True,
            "description": "MCP's streamable HTTP transport answers JSON or an event stream",
            "schema": {"type": "string", "enum": ["application/json, text/event-stream"]},
        }
    ],
}
MCP_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The JSON-RPC answer",
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    202: {"description": "A notification, accepted"},
    400: {"model": JSONRPCErrorBody, "description": "Not a JSON-RPC message"},
    406: {"description": "The Accept header does not take JSON and an event stream"},
    415: {"model": JSONRPCErrorBody, "description": "The body is not `application/json`"},
}


# ------------------------------------------------------------------ stdio


def run_stdio(repo: Path | Bundle, *, agents: Sequence[str] = (), token: str | None = None) -> None:
    """`amodal mcp`: serve the repo's agents over stdio until the client closes it, as the
    operator or as the caller `token` is a credential of (verified like any request's)."""
    anyio.run(_serve_stdio, repo, tuple(agents), token)


async def _serve_stdio(repo: Path | Bundle, agents: tuple[str, ...], token: str | None) -> None:
    async with Runtime.open(repo, watch_repo=True) as runtime:
        caller = stdio_caller(runtime, token)
        unknown = sorted(
            set(agents) - set(runtime.roots(claims=caller.claims, operator=caller.operator))
        )
        if unknown:
            raise RequestError(f"--agent {', '.join(unknown)}: no such agent for this caller")
        server = server_for(runtime, caller, agents)
        async with stdio_server() as (reading, writing):
            await server.run(reading, writing, server.create_initialization_options())


def stdio_caller(runtime: Runtime, token: str | None) -> Caller:
    """The operator without a token; else whoever `token` is a credential of."""
    if token is None:
        return Caller(operator=True)
    return Authenticator(runtime.bundle.config.auth, os.environ).caller(f"Bearer {token}")


__all__ = ["FACE", "jsonrpc_error", "router", "run_stdio", "server_for"]
