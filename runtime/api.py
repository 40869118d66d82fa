"""`Runtime`: the runtime as a library (SPEC 15). The CLI and the HTTP server are built on it.

    async with Runtime.open("path/to/repo") as rt:
        result = await rt.chat("Review TXN-001", agent="compliance-checker")
        print(result.text)

    print(Runtime.run_sync("path/to/repo", "Hello").text)   # one turn, for scripts

Claims given here are trusted: the embedding application verified them (the HTTP
server verifies credentials before it calls in). `operator=True` asks for the
operator's unscoped surface.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from runtime import events
from runtime._text import json_problem
from runtime.engine.chats import ChatService
from runtime.engine.model_pool import ModelRouter
from runtime.engine.streams import TurnStreams
from runtime.events import DoneReason, Event, Usage
from runtime.exceptions import InvalidRequestError
from runtime.models import Model
from runtime.observe.hooks import Observers, RunObserver
from runtime.outside.mcp import McpServers
from runtime.outside.rest import Connections
from runtime.repo.bundle import AgentDefinition, Bundle
from runtime.repo.reload import LiveBundle, watch
from runtime.storage import Storage, default_database_path, open_storage
from runtime.surface.caller import Caller, ChatRequest
from runtime.surface.inspection import inspect_agent

ModelChoice = str | Model | tuple[Any, str] | None
"""A model name, an `(openai.AsyncOpenAI, model name)` pair, or any `Model`."""


@dataclass(frozen=True, slots=True)
class ChatResult:
    """One finished turn."""

    text: str
    """The root agent's reply (specialists' text is in their own events)."""
    session_id: str
    agent: str
    """The agent the turn ran as (`main` for unscoped chat)."""
    reason: DoneReason
    usage: Usage
    events: tuple[Event, ...]
    error: str | None = None
    """The `error` event's message when the turn failed (reason `error`)."""

    @classmethod
    def of(cls, streamed: Iterable[Event]) -> ChatResult:
        """The result of a turn's whole event stream (it starts with `session`, ends with
        `done`)."""
        collected = tuple(streamed)
        first, last = collected[0], collected[-1]
        if not isinstance(first, events.Session) or not isinstance(last, events.Done):
            raise ValueError("a turn's events start with `session` and end with `done`")
        root = first.run_id
        text = "".join(
            e.text for e in collected if isinstance(e, events.TextDelta) and e.run_id == root
        )
        error = next((e.message for e in collected if isinstance(e, events.Error)), None)
        return cls(text, first.session_id, first.agent, last.reason, last.usage, collected, error)


class Runtime:
    """An agent repo, its database and its models, open for chats. Make one with `open`."""

    def __init__(
        self,
        live: LiveBundle,
        storage: Storage,
        chats: ChatService,
        streams: TurnStreams,
        mcp: McpServers,
    ) -> None:
        self.live = live
        self.storage = storage
        self.chats = chats
        """The lower-level service the HTTP server uses (turns that refuse before streaming)."""
        self.streams = streams
        """Turns run in the background for clients that may lose their stream (HTTP)."""
        self.mcp = mcp
        """The repo's MCP servers: `rt.mcp.snapshot()` has each one's status, tools, error."""

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        repo: str | os.PathLike[str] | Bundle,
        *,
        database: str | os.PathLike[str] | Storage | None = None,
        model: ModelChoice = None,
        observers: Iterable[RunObserver] = (),
        watch_repo: bool = False,
    ) -> AsyncIterator[Runtime]:
        """Load the repo (`InvalidRepoError` listing every problem; or take a loaded
        `Bundle`), open the database (`database`: a path or URL, else `DATABASE_URL`,
        else SQLite under the repo's `.amodal/`; or an open `Storage`, which stays yours
        to close) and the models. Leaving the block closes what it opened. `watch_repo`
        reloads the repo when its files change (a bad edit keeps the last good bundle)."""
        if isinstance(repo, Bundle):
            live = LiveBundle(repo.root, repo)
        else:
            live = await anyio.to_thread.run_sync(LiveBundle.load, Path(repo))
        if database is None:
            database = os.environ.get("DATABASE_URL") or default_database_path(live.root)
        router = _router(model)
        watching = Observers(observers)  # a copy: one runtime's additions stay its own
        connections = Connections()
        try:
            with _own_errors():
                # MCP servers start before the first turn (each has START_TIMEOUT to answer);
                # one that fails is retried in the background and never stops the runtime.
                async with (
                    McpServers.open(live().mcp_servers) as mcp,
                    cls._running(
                        live, database, router, watching, connections, mcp, watch_repo
                    ) as runtime,
                ):
                    yield runtime
        finally:
            with anyio.CancelScope(shield=True):
                await connections.aclose()
                await router.aclose()
                watching.close()

    @contextlib.asynccontextmanager
    async def with_database(
        self, database: str | os.PathLike[str] | Storage
    ) -> AsyncIterator[Runtime]:
        """This runtime's repo, models and observers over another database: a path or URL
        (opened here, closed when the block ends) or an open `Storage` (left open). Evals
        give each case a throwaway one: `async with rt.with_database(":memory:") as case:`."""
        chats = self.chats
        with _own_errors():
            async with self._running(
                self.live, database, chats.models, chats.observers, chats.connections, self.mcp
            ) as runtime:
                yield runtime

    @classmethod
    @contextlib.asynccontextmanager
    async def _running(
        cls,
        live: LiveBundle,
        database: str | os.PathLike[str] | Storage,
        models: ModelRouter,
        observers: Observers,
        connections: Connections,
        mcp: McpServers,
        watch_repo: bool = False,
    ) -> AsyncIterator[Runtime]:
        """A runtime over `database` (closed at the end when opened here) with its background
        tasks: the lease keeper, turns run for HTTP clients, and the repo watcher."""
        owned = isinstance(database, str | os.PathLike)
        storage = (
            await open_storage(database) if isinstance(database, str | os.PathLike) else database
        )
        chats = ChatService(
            live, storage, models, observers=observers, connections=connections, mcp=mcp
        )
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(chats.leases.run)
                runtime = cls(live, storage, chats, TurnStreams(chats.leases, group), mcp)
                if watch_repo:
                    ignore = default_database_path(live.root).parent
                    group.start_soon(
                        lambda: watch(live, ignore=ignore, on_reload=runtime._reloaded)
                    )
                yield runtime
                group.cancel_scope.cancel()
        finally:
            if owned:
                with anyio.CancelScope(shield=True):
                    await storage.close()

    @classmethod
    def run_sync(cls, repo: str | os.PathLike[str], message: str, **options: Any) -> ChatResult:
        """One turn, blocking, for scripts: `open`'s options (`database`, `model`, `observers`)
        and `chat`'s (`agent`, `session_id`, `claims`, `context`, `operator`) in one call."""
        opening = {k: options.pop(k) for k in ("database", "model", "observers") if k in options}

        async def once() -> ChatResult:
            async with cls.open(repo, **opening) as runtime:
                return await runtime.chat(message, **options)

        return anyio.run(once)

    @property
    def bundle(self) -> Bundle:
        """The newest good bundle (new turns use it; running turns keep theirs)."""
        return self.live()

    def agents(self) -> list[AgentDefinition]:
        """The repo's agents, by name."""
        return [self.bundle.agents[name] for name in sorted(self.bundle.agents)]

    def inspect(
        self,
        agent: str,
        *,
        claims: Mapping[str, str] | None = None,
        context: Mapping[str, str] | None = None,
        subagent: bool = False,
    ) -> dict[str, Any]:
        """What `agent` may use for this caller, why anything is missing, and its prompt: the
        shape of `amodal inspect --json`."""
        return inspect_agent(
            self.bundle,
            agent,
            claims or {},
            context or {},
            subagent=subagent,
            servers=self.mcp.snapshot(),
        )

    async def reload(self) -> bool:
        """Reload the repo now; True when a good bundle is in place. MCP servers whose
        declaration changed restart; the others keep running."""
        ok = await anyio.to_thread.run_sync(self.live.reload)
        self._reloaded()
        return ok

    def _reloaded(self) -> None:
        self.mcp.reconcile(self.bundle.mcp_servers)

    async def chat(
        self,
        message: str,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        claims: Mapping[str, str] | None = None,
        context: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> ChatResult:
        """One turn, run to its end. Refusals raise (`UnknownAgentError`,
        `SessionNotFoundError`, `SessionBusyError`, ...); a failure while it runs is
        `result.reason == "error"` with `result.error`."""
        return ChatResult.of(
            [
                event
                async for event in self.stream(
                    message,
                    agent=agent,
                    session_id=session_id,
                    claims=claims,
                    context=context,
                    operator=operator,
                )
            ]
        )

    async def stream(
        self,
        message: str,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        claims: Mapping[str, str] | None = None,
        context: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> AsyncIterator[Event]:
        """The turn's typed events as they happen, ending with `Done`. The turn starts when
        iteration starts; stopping early cancels it cleanly (what was committed stays)."""
        request = ChatRequest(message, agent, dict(context or {}), session_id)
        _check_text(request)
        turn = await self.chats.start_turn(request, _caller(claims, operator))
        # aclosing: a consumer that stops early closes the turn now, not when it is collected.
        async with contextlib.aclosing(turn.events()) as streamed:
            async for event in streamed:
                yield event

    async def confirm(
        self,
        session_id: str,
        call_id: str,
        *,
        approve: bool,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> ChatResult:
        """Answer a pending confirmation: approval runs the call once, denial tells the model.
        The run then goes on; its result is this turn's."""
        turn = await self.chats.start_confirmation(
            session_id, call_id, approve, _caller(claims, operator)
        )
        return ChatResult.of([event async for event in turn.events()])


def _check_text(request: ChatRequest) -> None:
    """Refuse strings that are no text before anything runs: they would fail mid-turn."""
    strings = {
        "message": request.message,
        "agent": request.agent,
        "session_id": request.session_id,
        "context": dict(request.context),
    }
    problem = json_problem(strings)
    if problem is not None:
        raise InvalidRequestError(problem)


@contextlib.contextmanager
def _own_errors() -> Iterator[None]:
    """Give back what the caller's block raised, not the runtime's task groups' wrapping: the
    caller asked for a runtime, not a task group (whose tasks never fail on their own)."""
    try:
        yield
    except BaseExceptionGroup as failed:
        error: BaseException = failed
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        if error is failed:
            raise
        raise error from None


def _caller(claims: Mapping[str, str] | None, operator: bool) -> Caller:
    return Caller(claims=dict(claims or {}), operator=operator)


def _router(model: ModelChoice) -> ModelRouter:
    if model is None or isinstance(model, str):
        return ModelRouter(os.environ, model_name=model)
    if isinstance(model, tuple):
        from runtime.models.openai import OpenAIModel

        client, name = model
        return ModelRouter(os.environ, model=OpenAIModel(name, client))
    if isinstance(model, Model):
        return ModelRouter(os.environ, model=model)
    raise TypeError(
        "model= takes a model name, an (openai.AsyncOpenAI, name) pair or a runtime.models.Model; "
        f"got {type(model).__name__}"
    )
