"""MCP servers: one client session per declared server per runtime (SPEC 9.1).

`McpServers` is owned by a `Runtime`: it opens a session to every declared
server when the runtime opens (in its task group), shares it with every chat,
and closes it when the runtime closes (a stdio child is terminated and reaped).
A server never stops the runtime: one that fails to start, crashes, or does not
answer `initialize` and `tools/list` within 10 s is `failed`, its tools are
absent, and it is retried with backoff (1 s doubling to 60 s).
`notifications/tools/list_changed` refreshes its tools; a reload restarts only
the servers whose declaration changed.

What the rest of the runtime sees is an immutable `McpSnapshot` (each server's
status, tools and error): the surface resolves against it, so a server changing
state is a surface change like any other. The client is the official `mcp` SDK
(the optional extra `mcp`), imported only when a server is declared.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import logging
import math
import re
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Literal

import anyio

from runtime._jsonschema import ArgumentCheck, argument_check, schema_problem
from runtime.exceptions import ToolError
from runtime.outside.secrets import scrub, scrub_text, scrubbed, scrubbed_prefix
from runtime.repo.bundle import DEFAULT_MAX_RESULT_BYTES, McpServerDefinition
from runtime.repo.integrations import sdk_available

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult

logger = logging.getLogger("amodal")

ServerStatus = Literal["starting", "ready", "failed"]
START_TIMEOUT = 10.0
"""Seconds a server has to answer `initialize` and `tools/list`."""
FIRST_RETRY, LAST_RETRY = 1.0, 60.0
PING_INTERVAL = 30.0
"""How often an idle session is pinged, so `/health` notices a server that went away."""
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MISSING_SDK = "the `mcp` extra is not installed: pip install 'amodal-runtime[mcp]'"
"""The error of every server while the SDK is missing (on /health, in inspect, in logs)."""


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool of a ready server, as the model is offered it (`server__tool`)."""

    server: str
    name: str
    """The server's own name for it."""
    tool_name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ServerState:
    """What is known about one server right now."""

    name: str
    status: ServerStatus
    tools: tuple[McpTool, ...] = ()
    error: str | None = None
    known: tuple[str, ...] = ()
    """The tool names it offered when it was last ready: what an agent lacks while it is down."""
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Tools it offers that are not offered to agents (`server__tool` -> why: a bad schema)."""

    def as_json(self) -> dict[str, Any]:
        """The `/health` shape."""
        return {"status": self.status, "tools": len(self.tools), "error": self.error}

    def reason(self) -> str:
        """Why its tools are missing (for exclusions)."""
        if self.status == "failed":
            return f"server failed: {self.error}"
        return "server starting: not ready yet"


@dataclass(frozen=True, slots=True)
class McpSnapshot:
    """Every server's state at one moment; immutable, so a turn sees one consistent view."""

    servers: Mapping[str, ServerState]
    digest: str
    """A hash of everything a surface reads here: part of the surface cache's key."""

    @classmethod
    def of(cls, states: Iterable[ServerState]) -> McpSnapshot:
        by_name = {state.name: state for state in sorted(states, key=lambda s: s.name)}
        hasher = hashlib.blake2b(digest_size=8)
        for state in by_name.values():
            seen = (
                state.name,
                state.status,
                state.error,
                state.known,
                sorted(state.skipped.items()),
            )
            hasher.update(repr(seen).encode())
            for tool in state.tools:
                schema = json.dumps(tool.parameters, sort_keys=True, default=str)
                hasher.update(repr((tool.tool_name, tool.description, schema)).encode())
        return cls(MappingProxyType(by_name), hasher.hexdigest())

    def state(self, server: str) -> ServerState | None:
        return self.servers.get(server)

    def tool(self, server: str, tool_name: str) -> McpTool | None:
        """Tool `tool_name` (`server__tool`) of `server` when that server is ready. Tools are
        kept per server and found by (server, name), so a name one server offers never
        reaches another server's tool."""
        state = self.servers.get(server)
        if state is None or state.status != "ready":
            return None
        return next((tool for tool in state.tools if tool.tool_name == tool_name), None)


NO_SERVERS = McpSnapshot.of(())


class McpServers:
    """The MCP servers of one runtime. Open with `McpServers.open(servers)`."""

    def __init__(self, group: anyio.abc.TaskGroup, *, retry: bool) -> None:
        self._group = group
        self._retry = retry
        self._running: dict[str, _Server] = {}
        self._snapshot = NO_SERVERS

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, servers: Mapping[str, McpServerDefinition], *, retry: bool = True
    ) -> AsyncIterator[McpServers]:
        """Start every server and wait for each one's first attempt (at most `START_TIMEOUT`
        apiece, all at once); leaving the block stops them all. `retry=False` tries each
        once (`amodal inspect`, `amodal validate --online`). Without the `mcp` extra every
        server is `failed` with the pip command as its error: the rest of the repo runs."""
        async with anyio.create_task_group() as group:
            manager = cls(group, retry=retry)
            try:
                manager.reconcile(servers)
                await manager.started()
                yield manager
            finally:
                group.cancel_scope.cancel()

    def snapshot(self) -> McpSnapshot:
        return self._snapshot

    async def started(self) -> None:
        """Wait until every server has made its first attempt to start."""
        for server in list(self._running.values()):
            await server.first_attempt.wait()

    def reconcile(self, servers: Mapping[str, McpServerDefinition]) -> None:
        """Run exactly these declarations: stop the servers that were removed or whose
        declaration changed, start the new and changed ones, leave the rest alone."""
        for name, running in list(self._running.items()):
            if servers.get(name) != running.definition:
                running.scope.cancel()
                del self._running[name]
                logger.info(
                    "mcp_server_stopped", extra={"event": "mcp_server_stopped", "server": name}
                )
        for name, definition in servers.items():
            if name not in self._running:
                server = _Server(definition, self)
                self._running[name] = server
                self._group.start_soon(server.supervise)
        self._publish()

    async def call(self, server: str, tool: str, arguments: dict[str, Any]) -> Any:
        """Call one tool; its result mapped for the model. A tool's own error, a server that
        is not ready or stopped answering are `ToolError`s; the caller bounds the time."""
        running = self._running.get(server)
        if running is None or running.client is None:
            state = self._snapshot.state(server)
            why = state.reason() if state is not None else "server not connected"
            raise ToolError(f"MCP server {server!r} is not available ({why})")
        return await running.call(tool, arguments)

    def _publish(self) -> None:
        self._snapshot = McpSnapshot.of(server.state for server in self._running.values())


class _Server:
    """One supervised server: connects, serves calls, notices loss, retries."""

    def __init__(self, definition: McpServerDefinition, owner: McpServers) -> None:
        self.definition = definition
        self.owner = owner
        self.scope = anyio.CancelScope()
        self.first_attempt = anyio.Event()
        self.client: Client | None = None
        self.state = ServerState(definition.name, "starting")
        self._lost = anyio.Event()
        self._loss = ""
        self._relist = anyio.Event()
        self._outputs: dict[str, ArgumentCheck] = {}
        self._secrets = scrubbed(definition.secrets)

    @property
    def name(self) -> str:
        return self.definition.name

    def _set(self, state: ServerState) -> None:
        if self.owner._running.get(self.name) is not self:
            return  # replaced by a reload: its news is no longer anyone's
        self.state = state
        self.owner._publish()

    async def supervise(self) -> None:
        if not sdk_available():
            # A missing optional part degrades, never blocks: the server is failed for the
            # life of this process (installing the extra needs a restart, so no retries).
            self._set(ServerState(self.name, "failed", (), MISSING_SDK))
            logger.warning(
                "mcp_server_failed",
                extra={"event": "mcp_server_failed", "server": self.name, "error": MISSING_SDK},
            )
            self.first_attempt.set()
            return
        delay = FIRST_RETRY
        with self.scope:
            while True:
                started = time.monotonic()
                try:
                    await self._session()
                    error = self._loss
                except Exception as failure:
                    error = self._describe(failure)
                self.client = None
                known = self.state.known
                self._set(ServerState(self.name, "failed", (), error, known))
                logger.warning(
                    "mcp_server_failed",
                    extra={"event": "mcp_server_failed", "server": self.name, "error": error},
                )
                self.first_attempt.set()
                if not self.owner._retry:
                    return
                if time.monotonic() - started > LAST_RETRY:
                    delay = FIRST_RETRY  # it ran a good while: start the backoff over
                await anyio.sleep(delay)
                delay = min(delay * 2, LAST_RETRY)

    async def _session(self) -> None:
        """One session, from connecting until it is lost (returns) or fails (raises)."""
        from mcp import Client
        from mcp.types import ToolListChangedNotification

        self._lost, self._loss = anyio.Event(), ""
        self._relist = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, ToolListChangedNotification):
                self._relist.set()

        ended = anyio.Event()
        with anyio.CancelScope(deadline=anyio.current_time() + START_TIMEOUT) as start:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack, ended)
                client = Client(
                    transport,
                    mode="legacy",  # the initialize handshake: every server speaks it
                    message_handler=on_message,
                    cache=None,
                )
                await stack.enter_async_context(client)
                client.session.validate_tool_result = self._check_output  # type: ignore[method-assign]
                tools, skipped = await self._list(client)
                start.deadline = math.inf
                self.client = client
                self._set(ServerState(self.name, "ready", tools, None, _names(tools), skipped))
                logger.info(
                    "mcp_server_ready",
                    extra={"event": "mcp_server_ready", "server": self.name, "tools": len(tools)},
                )
                self.first_attempt.set()
                async with anyio.create_task_group() as group:
                    group.start_soon(self._refresh, client)
                    group.start_soon(self._ping, client)
                    group.start_soon(self._lose_when, ended)
                    await self._lost.wait()
                    group.cancel_scope.cancel()
                self.client = None
        if start.cancelled_caught:
            raise TimeoutError(
                f"the server did not answer initialize and tools/list within {START_TIMEOUT:g} s"
            )

    async def _transport(self, stack: contextlib.AsyncExitStack, ended: anyio.Event) -> Any:
        definition = self.definition
        if definition.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            assert definition.command is not None
            command = definition.command
            if command in ("python", "python3"):
                command = sys.executable  # the runtime's own interpreter, where `mcp` is installed
            parameters = StdioServerParameters(
                command=command,
                args=list(definition.args),
                env=dict(definition.env),
                cwd=definition.cwd,
            )
            return _Watched(stdio_client(parameters), ended)
        assert definition.url is not None
        if definition.transport == "sse":
            from mcp.client.sse import sse_client

            return _Watched(sse_client(definition.url, headers=dict(definition.headers)), ended)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(definition.headers),
                timeout=httpx2.Timeout(30.0, read=300.0),
                trust_env=False,
            )
        )
        return _Watched(streamable_http_client(definition.url, http_client=http), ended)

    async def _list(self, client: Client) -> tuple[tuple[McpTool, ...], dict[str, str]]:
        """The server's tools as agents are offered them, and those skipped with why. A
        schema is the server's word, never trusted: one whose references leave it, that
        does not resolve, or whose patterns RE2 cannot run is a bad schema for that tool
        alone (`runtime._jsonschema`)."""
        listed = []
        cursor: str | None = None
        for _page in range(100):  # a server whose cursor never ends cannot hang us
            page = await client.list_tools(cursor=cursor)
            listed += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        tools, skipped, outputs = [], {}, {}
        for tool in listed:
            name = self.definition.prefix + tool.name
            if not self.definition.offers(tool.name):
                continue
            problem = None
            if not TOOL_NAME.match(name):
                problem = "its name is not 1-64 letters, digits, '_' or '-'"
            else:
                problem = schema_problem(tool.input_schema)
                if problem is not None:
                    problem = f"its inputSchema is unusable: {problem}"
                elif tool.output_schema is not None:
                    problem = schema_problem(tool.output_schema)
                    problem = f"its outputSchema is unusable: {problem}" if problem else None
            if problem is not None:
                logger.warning(
                    "mcp_tool_skipped",
                    extra={"event": "mcp_tool_skipped", "server": self.name, "tool": tool.name,
                           "reason": self._scrub(problem)},
                )  # fmt: skip
                skipped[name[:200]] = self._scrub(problem)
                continue
            if tool.output_schema is not None:
                outputs[tool.name] = argument_check(tool.output_schema, name)
            description = tool.description or tool.title or tool.name
            tools.append(McpTool(self.name, tool.name, name, description, tool.input_schema))
        self._outputs = outputs
        return tuple(sorted(tools, key=lambda t: t.tool_name)), skipped

    async def _check_output(self, name: str, result: CallToolResult) -> None:
        """The SDK's check of a result against the tool's outputSchema, done with the
        runtime's validator: the SDK's own would run the server's patterns on Python's
        re, on the event loop."""
        check = self._outputs.get(name)
        if check is None or result.is_error:
            return
        problems = check(result.structured_content)
        if result.structured_content is None or problems:
            why = "; ".join(problems) or "no structured content"
            raise ToolError(
                self._scrub(
                    f"MCP tool {self.definition.prefix + name!r} broke its outputSchema: {why}"
                )
            )

    async def _refresh(self, client: Client) -> None:
        """Re-list the tools whenever the server says they changed."""
        while True:
            await self._relist.wait()
            self._relist = anyio.Event()
            try:
                with anyio.fail_after(START_TIMEOUT):
                    tools, skipped = await self._list(client)
            except Exception as failure:
                self._lose(f"listing its changed tools failed: {self._describe(failure)}")
                return
            self._set(ServerState(self.name, "ready", tools, None, _names(tools), skipped))
            logger.info(
                "mcp_tools_changed",
                extra={"event": "mcp_tools_changed", "server": self.name, "tools": len(tools)},
            )

    async def _ping(self, client: Client) -> None:
        while True:
            await anyio.sleep(PING_INTERVAL)
            try:
                # Ping belongs to the handshake-era protocol this client speaks on purpose
                # (`legacy`): the session's own method, not the Client's deprecated wrapper.
                with anyio.fail_after(START_TIMEOUT):
                    await client.session.send_ping()
            except Exception:
                self._lose("the server stopped answering pings")
                return

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        client = self.client
        assert client is not None
        try:
            result = await client.call_tool(tool, arguments)
        except MCPError as error:
            if error.code == CONNECTION_CLOSED:
                self._lose("the server closed the connection")
                raise ToolError(f"MCP server {self.name!r} stopped answering") from None
            raise ToolError(self._scrub(f"MCP server {self.name!r}: {error.message}")) from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError):
            self._lose("the server closed the connection")
            raise ToolError(f"MCP server {self.name!r} stopped answering") from None
        return result_value(result, self._secrets, self.definition.max_result_bytes)

    def _lose(self, reason: str) -> None:
        if not self._lost.is_set():
            self._loss = reason
            self._lost.set()

    async def _lose_when(self, ended: anyio.Event) -> None:
        await ended.wait()
        self._lose("the server closed the connection (it exited or the stream broke)")

    def _describe(self, failure: BaseException) -> str:
        """A failure as one line for `/health` and logs, secrets scrubbed."""
        if isinstance(failure, BaseExceptionGroup):
            inner = failure.exceptions[0] if failure.exceptions else failure
            return self._describe(inner)
        if isinstance(failure, FileNotFoundError):
            text = f"cannot start {self.definition.command!r}: no such program"
        elif isinstance(failure, TimeoutError):
            text = str(failure) or f"timed out after {START_TIMEOUT:g} s"
        else:
            text = f"{type(failure).__name__}: {failure}".rstrip(": ")
        # Scrubbed before it is cut and its spaces joined: either could split a secret.
        return " ".join(scrubbed_prefix(text, 500, self._secrets).split())

    def _scrub(self, text: str) -> str:
        return scrub_text(text, self._secrets)


def result_value(
    result: CallToolResult, secrets: tuple[str, ...] = (), limit: int = DEFAULT_MAX_RESULT_BYTES
) -> Any:
    """A tool result as the model reads it, and as it is stored: `structuredContent` when
    present, else the text joined; binary content becomes descriptors (its bytes never
    enter a prompt). A result over `limit` bytes of JSON is kept as its text, scrubbed,
    then cut, with `"truncated": true`. An `isError` result raises `ToolError` with its
    text (cut the same way). `secrets` come from `runtime.outside.secrets.scrubbed`."""
    from mcp import types

    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            parts.append(
                {"type": block.type, "mime_type": block.mime_type, "bytes": _size(block.data)}
            )
        elif isinstance(block, types.EmbeddedResource):
            contents = block.resource
            size = (
                len(contents.text.encode())
                if isinstance(contents, types.TextResourceContents)
                else _size(contents.blob)
            )
            parts.append(
                {"type": "resource", "uri": str(contents.uri), "mime_type": contents.mime_type,
                 "bytes": size}
            )  # fmt: skip
        elif isinstance(block, types.ResourceLink):
            parts.append(
                {"type": "resource_link", "uri": str(block.uri), "mime_type": block.mime_type}
            )
    text = "\n".join(texts)
    if result.is_error:
        raise ToolError(_bounded(text, secrets, limit) or "the tool reported an error")
    value: Any
    if result.structured_content is not None:
        value = result.structured_content
    elif not parts:
        value = text
    else:
        value = {"text": text} if text else {}
        value["content"] = parts
    encoded = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(encoded.encode()) > limit:
        return {"text": _bounded(encoded, secrets, limit), "truncated": True}
    return scrub(value, secrets)


def _bounded(text: str, secrets: tuple[str, ...], limit: int) -> str:
    """`text` scrubbed, and cut to at most `limit` bytes without keeping part of a secret."""
    if len(text.encode()) <= limit:
        return scrub_text(text, secrets)
    kept = len(text.encode()[:limit].decode("utf-8", errors="ignore"))
    return scrubbed_prefix(text, kept, secrets)


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _names(tools: Iterable[McpTool]) -> tuple[str, ...]:
    return tuple(tool.tool_name for tool in tools)


class _Watched:
    """A transport whose read stream sets `ended` when it ends: a stdio child that exited,
    an SSE stream that broke. That is how a crash is noticed between calls."""

    def __init__(self, transport: Any, ended: anyio.Event) -> None:
        self._transport = transport
        self._ended = ended

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._transport.__aenter__()
        return _WatchedRead(read, self._ended), write

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> bool | None:
        result: bool | None = await self._transport.__aexit__(kind, error, trace)
        return result


@dataclass
class _WatchedRead:
    stream: Any
    ended: anyio.Event
    last_context: Any = field(default=None)

    async def receive(self) -> Any:
        try:
            item = await self.stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self.ended.set()
            raise
        self.last_context = getattr(self.stream, "last_context", None)
        return item

    async def aclose(self) -> None:
        await self.stream.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
