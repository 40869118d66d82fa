"""Custom tools (`tools/<name>/handler.py`) and the `ctx` their handler gets (SPEC 9.3).

`handler(args, ctx)` runs with the powers of the agent that called it, never
more: `ctx` is built from the caller's resolved surface, and anything outside it
raises `PermissionError` naming what is missing.

    async def handler(args, ctx):
        page = await ctx.request("library", "GET", "/books", query={"q": args["topic"]})
        notes = ctx.store("research-notes")
        await notes.put({"id": "n1", "topic": args["topic"], "body": "..."})
        review = await ctx.call_subagent("reviewer", "Check this", attachments=[
            {"type": "text", "text": "the draft"}])
        ctx.log.info("looked up %s", args["topic"])
        return {"books": page["body"], "review": review}
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

from runtime.outside.rest import READ_METHODS, Connections, Refused, needs_confirmation
from runtime.repo.bundle import CustomTool, StoreDefinition, StoreMode
from runtime.repo.registry import ASK_CHOICE, STOP_EXECUTION
from runtime.storage import DocumentStorage
from runtime.tools import Tool, ToolContext, ToolError
from runtime.tools.delegation import Specialists, delegate
from runtime.tools.store_tools import (
    delete_document,
    get_document,
    put_document,
    query_documents,
)


class TurnPowers(Specialists, Protocol):
    """What a custom tool's `ctx` reaches through: the turn it runs in
    (`runtime.engine.runs.TurnScope`), which also runs the specialists it calls."""

    @property
    def storage(self) -> DocumentStorage: ...

    @property
    def connections(self) -> Connections: ...


def custom_tool(
    definition: CustomTool, turn: TurnPowers, tools: Mapping[str, Tool], delegates: bool
) -> Tool:
    """The tool of `tools/<name>/`; its handler gets a `ToolHandlerContext` for each call.
    `tools` is the calling run's tool set (what `ctx.call_tool` may reach); `delegates`
    says whether the caller has specialists its handler could call."""

    async def run(arguments: dict[str, Any], context: ToolContext) -> Any:
        return await definition.handler(
            arguments, ToolHandlerContext(context, turn, tools, definition.name)
        )

    return Tool(
        definition.name,
        definition.description,
        definition.parameters(),
        run,
        definition.confirm,
        definition.timeout,
        nests=delegates,  # then their events stream live while it runs
    )


class ToolHandlerContext:
    """The `ctx` of a custom tool's handler: who called, and the caller's powers."""

    def __init__(
        self, context: ToolContext, turn: TurnPowers, tools: Mapping[str, Tool], tool: str
    ) -> None:
        self._context = context
        self._turn = turn
        self._tools = tools
        self.session_id = context.session_id
        self.run_id = context.run_id
        self.call_id = context.call_id
        self.agent = context.agent
        """The agent whose run called the tool."""
        self.claims: Mapping[str, str] = MappingProxyType(dict(context.caller.claims))
        """The caller's verified claims (read-only)."""
        self.context: Mapping[str, str] = MappingProxyType(dict(context.caller.context))
        """The request context (read-only; what the client sent: never a permission)."""
        self.scope_id = context.caller.scope_id
        self.user_id = context.caller.user_id
        self.org_id = context.caller.org_id
        self._tool = tool

    @functools.cached_property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger for the handler (`amodal.tools.<tool>`), naming the tool, session, agent."""
        return logging.LoggerAdapter(
            logging.getLogger(f"amodal.tools.{self._tool}"),
            {"tool": self._tool, "session": self.session_id, "agent": self.agent},
        )

    async def request(
        self,
        connection: str,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> dict[str, Any]:
        """One call through a connection of the caller's surface, under every rule of the
        `request` tool: `{"status", "headers", "body"}`. An endpoint that needs a person's
        approval cannot be called from here."""
        surface = self._context.surface
        if connection not in surface.connections:
            raise PermissionError(
                f"connection {connection!r} is not in {self.agent!r}'s surface for this caller; "
                f"it has: {', '.join(surface.connections) or 'none'}"
            )
        definition = self._context.bundle.connections[connection]
        method = method.upper()
        if surface.read_only and method not in READ_METHODS:
            raise PermissionError(
                f"{method} {path} on connection {connection!r}: this run is read-only "
                "(an automation writes only with writeEnabled: true)"
            )
        if needs_confirmation(definition, method, path):
            raise PermissionError(
                f"{method} {path} on connection {connection!r} needs a person's approval; "
                "a tool cannot give it"
            )
        try:
            return await self._turn.connections.call(
                definition, method, path, claims=self._context.caller.claims, query=query, body=body
            )
        except Refused as refusal:
            raise PermissionError(str(refusal)) from None

    def store(self, name: str) -> StoreHandle:
        """A store of the caller's surface, in the caller's scope and the surface's mode."""
        mode = self._context.surface.stores.get(name)
        if mode is None:
            granted = ", ".join(self._context.surface.stores) or "none"
            raise PermissionError(
                f"store {name!r} is not in {self.agent!r}'s surface for this caller; "
                f"it has: {granted}"
            )
        return StoreHandle(
            self._context.bundle.stores[name],
            mode,
            self._turn.storage,
            self._context.caller.scope_id,
        )

    async def call_subagent(
        self,
        name: str,
        task: str,
        input: Mapping[str, Any] | None = None,
        attachments: Sequence[Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Run a specialist of the caller's surface: `{"subagent", "result"}` or
        `{"subagent", "error"}`. It counts toward the turn's delegation bounds, uses the
        session model, and gets `attachments` as extra parts of its task message."""
        callable_ = self._context.surface.subagents
        if name not in callable_:
            raise PermissionError(
                f"specialist {name!r} is not callable by {self.agent!r} for this caller; "
                f"callable: {', '.join(callable_) or 'none'}"
            )
        parts = [_attachment(item) for item in attachments or ()]
        asked: dict[str, Any] = {"subagent": name, "task": task}
        if input is not None:
            asked["input"] = dict(input)
        return await delegate(
            self._turn,
            callable_,
            self._context.caller,
            self.run_id,
            self.call_id,
            self._context.depth + 1,
            asked,
            attachments=parts,
            tier="default",  # a composite tool's specialists use the session model
        )

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> Any:
        """Another tool of the caller's surface; its result, or its `ToolError`. A tool
        that needs a person's approval cannot be called from here."""
        tool = self._tools.get(name)
        if tool is None or name in (ASK_CHOICE, STOP_EXECUTION):
            raise PermissionError(
                f"tool {name!r} is not callable from a tool for {self.agent!r}; callable: "
                + ", ".join(t for t in self._tools if t not in (ASK_CHOICE, STOP_EXECUTION))
            )
        arguments = dict(arguments)
        problems = tool.argument_errors(arguments)
        if problems:
            raise ToolError(f"invalid arguments for {name!r}: " + "; ".join(problems))
        if tool.needs_confirmation(arguments):
            raise PermissionError(f"tool {name!r} needs a person's approval; a tool cannot give it")
        return await tool.handler(arguments, self._context)


class StoreHandle:
    """One store as a custom tool sees it: the caller's partition, the surface's mode."""

    def __init__(
        self, store: StoreDefinition, mode: StoreMode, storage: DocumentStorage, scope_id: str
    ) -> None:
        self.name = store.name
        self.mode = mode
        self._store = store
        self._storage = storage
        self._scope = scope_id

    async def get(self, key: str) -> dict[str, Any] | None:
        """The document, or None."""
        return await get_document(self._storage, self._store, self._scope, key)

    async def query(
        self,
        filter: Mapping[str, Any] | None = None,
        sort: str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> dict[str, Any]:
        """`{documents, total, limit, offset, has_more}`; equality filters, one sort field."""
        return await query_documents(
            self._storage, self._store, self._scope, filter, sort, limit, offset
        )

    async def put(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace a document: `{ok, key, version, created}`."""
        self._writable()
        return await put_document(self._storage, self._store, self._scope, dict(document))

    async def delete(self, key: str) -> bool:
        self._writable()
        return await delete_document(self._storage, self._store, self._scope, key)

    def _writable(self) -> None:
        if self.mode != "rw":
            raise PermissionError(f"store {self.name!r} is read-only for this caller")


def _attachment(item: Mapping[str, Any]) -> dict[str, Any]:
    """An attachment as the specialist's message will carry it (validated here)."""
    if not isinstance(item, Mapping):
        raise ValueError("an attachment is a dict: {'type': 'text', 'text': ...} or "
                         "{'type': ..., 'mime_type': ..., 'data': ...}")  # fmt: skip
    if item.get("type") == "text" and isinstance(item.get("text"), str):
        return {"type": "text", "text": item["text"]}
    kind, mime, data = item.get("type"), item.get("mime_type"), item.get("data")
    if isinstance(kind, str) and isinstance(mime, str) and isinstance(data, str | bytes):
        size = len(data) if isinstance(data, bytes) else _size(data)
        return {"type": kind, "mime_type": mime, "bytes": size}
    raise ValueError(
        "an attachment is {'type': 'text', 'text': str} or "
        "{'type': str, 'mime_type': str, 'data': str | bytes}"
    )


def _size(data: str) -> int:
    """The bytes behind base64 text (the text's own length when it is not base64)."""
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data.encode())


__all__ = ["StoreHandle", "ToolHandlerContext", "custom_tool"]
