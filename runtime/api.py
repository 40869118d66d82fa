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
import dataclasses
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from runtime import events
from runtime._text import json_problem
from runtime.engine.background import Workers
from runtime.engine.chats import FIRST_MESSAGE, ChatService, thread_session_id
from runtime.engine.log import PastTurn, PromptEntry, TextEntry, position
from runtime.engine.memories import delete_entry, list_entries
from runtime.engine.model_pool import ModelRouter
from runtime.engine.resume import Resumer
from runtime.engine.rooting import rootable
from runtime.engine.services import Services
from runtime.engine.streams import LiveTurn, TurnStreams
from runtime.events import DoneReason, Event, Usage
from runtime.exceptions import InvalidRequestError, RunError
from runtime.models import Model, ModelTier
from runtime.observe import Observers, RunObserver
from runtime.outside.mcp import McpServers
from runtime.outside.rest import Connections
from runtime.repo.bundle import AgentDefinition, Bundle
from runtime.repo.reload import LiveBundle, watch
from runtime.storage import (
    USAGE_GROUPS,
    AgentRunRecord,
    MemoryEntry,
    PendingConfirmation,
    QueuedTurn,
    SessionRecord,
    Storage,
    StoredEvent,
    UsageGroup,
    UsageQuery,
    UsageRow,
    default_database_path,
    open_storage,
)
from runtime.surface.caller import Caller, ChatRequest, EarlierMessage
from runtime.surface.inspection import inspect_agent

ModelChoice = str | Model | None
"""A model name, or any `Model` (`OpenAIModel(client, name)` for your own `openai` client)."""


@dataclass(frozen=True, slots=True)
class UsageReport:
    """What `Runtime.usage` found: one row per group (none without a group) and the total."""

    rows: tuple[UsageRow, ...]
    total: UsageRow

    def as_json(self) -> dict[str, Any]:
        """The shape of `GET /usage`: `{"rows": [...], "total": {...}}`."""
        return {"rows": [row.as_json() for row in self.rows], "total": self.total.as_json()}


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

    def raise_for_error(self) -> ChatResult:
        """Raise what failed the turn (the original exception when it ran in this process,
        else a `RunError` with its message); the result itself when it did not fail."""
        failed = next((e for e in self.events if isinstance(e, events.Error)), None)
        if failed is None:
            return self
        if failed.cause is not None:
            raise failed.cause
        raise RunError(f"{failed.code}: {failed.message}")


class RunningTurn:
    """A turn started with `Runtime.begin`: it runs to its end whoever follows it."""

    def __init__(self, live: LiveTurn) -> None:
        self._live = live

    @property
    def session_id(self) -> str:
        return self._live.turn.session_id

    @property
    def agent(self) -> str:
        return self._live.turn.agent

    @property
    def run_id(self) -> str:
        """The turn's root run: its id among the session's turns (`Runtime.turns`)."""
        return self._live.turn.run_id

    def events(self) -> AsyncIterator[Event]:
        """Every event of the turn from its start, as they happen, until its `done`. Any
        number of consumers may follow it; one that stops early stops nothing."""
        return self._live.tail()


@dataclass(frozen=True, slots=True)
class QueuedChat:
    """A background turn in the durable queue (`Runtime.enqueue`): its session, and the id
    its root run will have (its id among the session's turns, `Runtime.turns`)."""

    session_id: str
    turn_id: str


@dataclass(frozen=True, slots=True)
class SessionHistory:
    """A session and its log as its caller may read it (`GET /sessions/{id}`)."""

    session: SessionRecord
    entries: tuple[StoredEvent, ...]


class Runtime:
    """An agent repo, its database and its models, open for chats. Make one with `open`.

    Every front end (the CLI, the HTTP server and its protocol faces, the console, evals)
    goes through these methods; the turn engine behind them is internal."""

    def __init__(
        self,
        live: LiveBundle,
        services: Services,
        mcp: McpServers,
        chats: ChatService,
        streams: TurnStreams,
    ) -> None:
        self.live = live
        """The newest good bundle and the last reload's error (`live.reload_error`)."""
        self.storage = services.storage
        self.mcp = mcp
        """The repo's MCP servers: `rt.mcp.snapshot()` has each one's status, tools, error."""
        self._services = services
        self._chats = chats
        self._streams = streams

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
        background: int = 0,
    ) -> AsyncIterator[Runtime]:
        """Load the repo (`InvalidRepoError` listing every problem; or take a loaded
        `Bundle`), open the database (`database`: a path or URL, else `DATABASE_URL`,
        else SQLite under the repo's `.amodal/`; or an open `Storage`, which stays yours
        to close) and the models. Leaving the block closes what it opened. `watch_repo`
        reloads the repo when its files change (a bad edit keeps the last good bundle).
        `background`: how many queued background turns this runtime runs at once (0: it
        runs none; `amodal serve` runs them unless `--no-background`, see `enqueue`).
        Every runtime continues the turns of the database whose process died (SPEC 23)."""
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
            await router.warm(live())
            with _own_errors():
                # MCP servers start before the first turn (each has START_TIMEOUT to answer);
                # one that fails is retried in the background and never stops the runtime.
                async with (
                    McpServers.open(live().mcp_servers) as mcp,
                    cls._running(
                        live, database, router, watching, connections, mcp, watch_repo, background
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
        own = self._services
        with _own_errors():
            async with self._running(
                self.live, database, own.models, own.observers, own.connections, self.mcp
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
        background: int = 0,
    ) -> AsyncIterator[Runtime]:
        """A runtime over `database` (closed at the end when opened here) with its background
        tasks: the lease keeper, turns run for HTTP clients, the sweep that continues dead
        turns, the workers of queued turns (`background` of them), and the repo watcher."""
        owned = isinstance(database, str | os.PathLike)
        storage = (
            await open_storage(database) if isinstance(database, str | os.PathLike) else database
        )
        services = Services(storage, models, observers, connections, mcp)
        chats = ChatService(live, services)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(chats.leases.run)
                streams = TurnStreams(chats.leases, group)
                runtime = cls(live, services, mcp, chats, streams)
                group.start_soon(Resumer(chats, streams).run)  # turns whose process died
                if background:
                    group.start_soon(Workers(chats, streams, background).run)
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
    def run_sync(
        cls,
        repo: str | os.PathLike[str] | Bundle,
        message: str,
        *,
        database: str | os.PathLike[str] | Storage | None = None,
        model: ModelChoice = None,
        observers: Iterable[RunObserver] = (),
        agent: str | None = None,
        session_id: str | None = None,
        claims: Mapping[str, str] | None = None,
        context: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> ChatResult:
        """One turn, blocking, for scripts: `open` the repo, `chat` once, close."""

        async def once() -> ChatResult:
            async with cls.open(repo, database=database, model=model, observers=observers) as rt:
                return await rt.chat(
                    message,
                    agent=agent,
                    session_id=session_id,
                    claims=claims,
                    context=context,
                    operator=operator,
                )

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

    async def model(self, tier: ModelTier = "default") -> Model:
        """The model a call at `tier` uses (the judge of evals asks for `advanced`)."""
        return await self._services.models.model(self.bundle, tier)

    def add_observer(self, observer: RunObserver) -> None:
        """Watch every turn from now on (the server's `/metrics` does)."""
        self._services.observers.add(observer)

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
        `result.reason == "error"` with `result.error` (`result.raise_for_error()`)."""
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
        request = _request(message, agent, context, session_id)
        turn = await self._chats.start_turn(request, _caller(claims, operator))
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
        The run then goes on; its result is this turn's. Pass the claims (or `operator`)
        the session was started with: another caller's session is not found."""
        turn = await self._chats.start_confirmation(
            session_id, call_id, approve, _caller(claims, operator)
        )
        return ChatResult.of([event async for event in turn.events()])

    async def begin(
        self,
        message: str,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        claims: Mapping[str, str] | None = None,
        context: Mapping[str, str] | None = None,
        operator: bool = False,
        autonomous: bool = False,
        history: Sequence[EarlierMessage] = (),
        thread: str | None = None,
        face: str = "chat",
        metadata: Mapping[str, Any] | None = None,
    ) -> RunningTurn:
        """Start a turn that runs to its end whoever follows it, as the HTTP server does: a
        client that goes away can pick its events up again (`follow`). Refusals raise
        before it starts. `autonomous`: no person is present (SPEC 3).

        `history` seeds the transcript of the session this turn starts (the earlier messages
        an OpenAI client sends; ignored when the turn continues a session). `thread` is the
        caller's own name for the conversation instead of a `session_id` (an AG-UI thread):
        its session is continued, or started under `thread_session(thread)`. `face` names
        the front end asking, for `/metrics`. `metadata` is kept on the session the turn
        starts (`{"kind": "automation", "read_only": true}`: every turn of it read-only)."""
        request = _request(message, agent, context, session_id, autonomous)
        request = dataclasses.replace(
            request,
            history=tuple(history),
            thread=thread,
            face=face,
            metadata=dict(metadata or {}),
        )
        _check_history(request.history, thread)
        turn = await self._chats.start_turn(request, _caller(claims, operator))
        return RunningTurn(self._streams.start(turn))

    async def enqueue(
        self,
        message: str,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        claims: Mapping[str, str] | None = None,
        context: Mapping[str, str] | None = None,
        operator: bool = False,
        autonomous: bool = False,
        thread: str | None = None,
        face: str = "chat",
        metadata: Mapping[str, Any] | None = None,
    ) -> QueuedChat:
        """Queue a background turn (SPEC 23) and return at once: it runs on whichever process
        of the database takes background work first (`amodal serve`, `amodal worker`, a
        runtime opened with `background=N`, `work`), once, and survives the death of the
        process running it. Refusals raise now, as `begin` would (`UnknownAgentError`,
        `SessionNotFoundError`, ...); the session is created when new. Follow it with
        `follow(session_id)`; it is `turn_id` among `turns(session_id)`. `metadata` is kept
        on the session it starts, as with `begin` (automations' `read_only` holds for it)."""
        request = _request(message, agent, context, session_id, autonomous)
        request = dataclasses.replace(
            request, thread=thread, face=face, metadata=dict(metadata or {})
        )
        queued = await self._chats.enqueue(request, _caller(claims, operator))
        return QueuedChat(queued.session_id, queued.turn_id)

    async def work(self, concurrency: int = 1, *, stop: anyio.Event | None = None) -> None:
        """Run queued background turns, `concurrency` at a time, until cancelled, or until
        `stop` is set and the turns running have ended (what `amodal worker` does)."""
        await Workers(self._chats, self._streams, concurrency).run(stop)

    async def queued_turn(self, turn_id: str) -> QueuedTurn | None:
        """A background turn of the queue by its `turn_id`, whatever its state (`queued`,
        `claimed`, `started`, `done`), with its times; None for an unknown id."""
        return await self.storage.get_queued_turn(turn_id)

    async def queue_counts(self) -> dict[str, int]:
        """How many background turns are `queued`, `claimed`, `started` and `done`."""
        return await self.storage.queue_counts()

    async def begin_confirmation(
        self,
        session_id: str,
        call_id: str,
        *,
        approve: bool,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
        face: str = "chat",
    ) -> RunningTurn:
        """`confirm`, run like `begin`."""
        turn = await self._chats.start_confirmation(
            session_id, call_id, approve, _caller(claims, operator), face
        )
        return RunningTurn(self._streams.start(turn))

    async def cancel(
        self,
        session_id: str,
        *,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
        face: str = "chat",
    ) -> bool:
        """Stop what the session is doing or waiting for, and return once it has stopped: its
        turn running in this process is cancelled (what was committed stays); a confirmation
        it waits for is declined and a choice withdrawn, in a turn of their own that calls
        no model. False when the session is doing and waiting for nothing;
        `SessionBusyError` when its turn runs on another server of the database."""
        caller = _caller(claims, operator)
        await self._chats.check_session(session_id, caller)
        if await self._streams.cancel(session_id):
            return True
        turn = await self._chats.start_withdrawal(session_id, caller, face)
        if turn is None:
            return False
        async for _ in RunningTurn(self._streams.start(turn)).events():
            pass
        return True

    async def turns(
        self,
        session_id: str,
        *,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> list[PastTurn]:
        """The session's turns, oldest first, from its log (a running one has no `done` yet):
        how a face finds a turn by its `run_id`. `SessionNotFoundError` for another caller's."""
        return await self._chats.get_turns(session_id, _caller(claims, operator))

    def roots(
        self, *, claims: Mapping[str, str] | None = None, operator: bool = False
    ) -> list[str]:
        """The agents this caller may root a chat at, by name (`main`, unscoped chat, for an
        operator or in a repo without `default`): what a face lists."""
        return rootable(self.bundle, operator=_caller(claims, operator).operator)

    def thread_session(
        self, thread: str, *, claims: Mapping[str, str] | None = None, operator: bool = False
    ) -> str:
        """The session id of the caller's conversation named `thread` (`begin(thread=...)`):
        derived from the caller and the name, so another caller's thread of the same name is
        another session."""
        return thread_session_id(_caller(claims, operator), thread)

    async def follow(
        self,
        session_id: str,
        *,
        after: str | None = None,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> AsyncIterator[Event]:
        """The session's events after the event id `after` (`SEQ` or `SEQ:K`; from the start
        when None), then its running turn's until its `done`, on any server of the
        database. Refusals raise here, before any event: `SessionNotFoundError` first, then
        `InvalidEventIdError`."""
        await self._chats.get_session(session_id, _caller(claims, operator))
        seen = position(after) if after else (0, 0)
        return self._streams.follow(session_id, seen)

    async def compact(
        self,
        session_id: str,
        *,
        focus: str | None = None,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> events.Compaction | None:
        """Compact the session now (SPEC 20): its older turns become a summary the model is
        shown instead, written with `focus` in mind when given; the log keeps everything.
        None when nothing is older than the turns kept whole. `SessionBusyError` while a
        turn runs."""
        if focus is not None:
            problem = json_problem(focus, "focus")
            if problem is not None:
                raise InvalidRequestError(problem)
        done = await self._chats.compact(session_id, _caller(claims, operator), focus)
        return next((e for e in done if isinstance(e, events.Compaction)), None)

    async def sessions(
        self,
        *,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
        limit: int = 20,
        offset: int = 0,
    ) -> list[SessionRecord]:
        """The caller's own sessions (every session for the operator), newest activity first."""
        return await self._chats.list_sessions(
            _caller(claims, operator), limit=limit, offset=offset
        )

    async def session(
        self,
        session_id: str,
        *,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> SessionHistory:
        """A session with its log; `SessionNotFoundError` for another caller's. The pieces a
        reply streamed in are left out (the answer's entry has it whole; `follow` streams
        them), and so is the system prompt but for the operator: it is the operator's
        business, not every caller's."""
        record, entries = await self._chats.get_session(session_id, _caller(claims, operator))
        hidden = {TextEntry.kind} if operator else {TextEntry.kind, PromptEntry.kind}
        return SessionHistory(record, tuple(e for e in entries if e.type not in hidden))

    async def runs(
        self,
        session_id: str,
        *,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> list[AgentRunRecord]:
        """Every run of the session (its turns and their specialists): the delegation tree."""
        return await self._chats.get_runs(session_id, _caller(claims, operator))

    async def pending_confirmations(
        self, *, limit: int = 100, operator: bool = False
    ) -> list[PendingConfirmation]:
        """Every tool call of every session waiting for a person's approval, oldest first:
        the operator's to answer (`confirm`). An automation's run leaves its `confirm`
        tools here. `PermissionError` for any other caller."""
        if not operator:
            raise PermissionError("only an operator lists every pending confirmation")
        return await self.storage.list_all_pending(limit)

    async def usage(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        group_by: UsageGroup | None = None,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
        limit: int = 1000,
    ) -> UsageReport:
        """What model calls spent from `since` to `until` (SPEC 22), grouped by `group_by`
        (`agent`, `model`, `owner`, `scope`, `day`, or `session`); the caller's own calls
        (every caller's for the operator). `InvalidRequestError` for a naive datetime, an
        unknown group or a range that ends before it starts."""
        caller = _caller(claims, operator)
        if since is not None and until is not None and until < since:
            raise InvalidRequestError("`until` is before `since`")
        for name, moment in (("since", since), ("until", until)):
            if moment is not None and moment.tzinfo is None:
                raise InvalidRequestError(f"`{name}` needs a time zone (e.g. 2025-01-02T00:00Z)")
        if group_by is not None and group_by not in USAGE_GROUPS:
            raise InvalidRequestError(
                f"unknown group {group_by!r}; group by one of {', '.join(USAGE_GROUPS)}"
            )
        query = UsageQuery(
            since,
            until,
            group_by,
            None if caller.operator else caller.scope_id,
            caller.owner,
            limit,
        )
        rows, total = await self.storage.usage_report(query)
        return UsageReport(tuple(rows), total)

    async def delete_session(
        self,
        session_id: str,
        *,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> None:
        await self._chats.delete_session(session_id, _caller(claims, operator))

    async def memory(
        self,
        agent: str,
        *,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
        owner: str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[MemoryEntry]:
        """What `agent` remembers about the caller (SPEC 21), oldest first: the notes its
        tools would reach for these claims. `owner` is the operator's filter: that owner's
        notes (a `sub`; "" for the operator's own and the shared ones). `UnknownAgentError`
        for an agent the bundle lacks."""
        return await list_entries(
            self._services.storage,
            self.bundle,
            agent,
            _caller(claims, operator),
            owner=owner,
            limit=limit,
            offset=offset,
        )

    async def delete_memory(
        self,
        entry_id: str,
        *,
        claims: Mapping[str, str] | None = None,
        operator: bool = False,
    ) -> None:
        """Delete one memory entry: the caller's own (or their scope's), or any for the
        operator; `MemoryNotFoundError` for one the caller may not see."""
        await delete_entry(self._services.storage, entry_id, _caller(claims, operator))


def _request(
    message: str,
    agent: str | None,
    context: Mapping[str, str] | None,
    session_id: str | None,
    autonomous: bool = False,
) -> ChatRequest:
    request = ChatRequest(message, agent, dict(context or {}), session_id, autonomous)
    _check_text(request)
    return request


def _check_history(history: tuple[EarlierMessage, ...], thread: str | None) -> None:
    strings = {"history": [m.text for m in history], "thread": thread}
    problem = json_problem(strings)
    if problem is not None:
        raise InvalidRequestError(problem)
    roles = {m.role for m in history} - {"user", "assistant", "system"}
    if roles:
        raise InvalidRequestError(f"history: unknown roles {sorted(roles)}")


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
    if isinstance(model, Model):
        return ModelRouter(os.environ, model=model)
    raise TypeError(
        "model= takes a model name or a runtime.models.Model (OpenAIModel(client, name) for "
        f"your own openai client); got {type(model).__name__}"
    )


__all__ = [
    "FIRST_MESSAGE",
    "ChatResult",
    "EarlierMessage",
    "ModelChoice",
    "PastTurn",
    "RunningTurn",
    "Runtime",
    "SessionHistory",
    "UsageReport",
]
