"""What one agent may use for one caller: its resolved surface, and why anything is missing.

Resolution only ever narrows what an agent declared: a predicate can exclude a
declared entry, never add one. Claims come from verified credentials and are
kept apart from the request context, so `{"role": "manager"}` in the context can
never satisfy a predicate that reads `ctx.claims["role"]`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from threading import Lock
from types import MappingProxyType
from typing import Literal

from runtime.outside.mcp import NO_SERVERS, McpSnapshot
from runtime.repo.bundle import (
    DEFAULT_AGENT,
    MAIN_AGENT,
    AgentDefinition,
    Bundle,
    Declared,
    Predicate,
    StoreGrant,
    StoreMode,
    server_of,
)
from runtime.repo.registry import (
    CALL_SUBAGENT,
    FILE_TOOLS,
    LOAD_KNOWLEDGE,
    LOAD_SKILL,
    MEMORY_TOOLS,
    PROTOCOL_TOOLS,
    REQUEST,
    store_ops,
    store_tool_name,
)

logger = logging.getLogger("amodal")

ExclusionKind = Literal["tool", "skill", "subagent", "store", "connection", "mcp"]
DEFAULT_SCOPE = "default"


@dataclass(frozen=True, slots=True)
class SurfaceContext:
    """Everything a predicate may read about the caller. Frozen: predicates cannot change it.

    `claims` come only from verified credentials; `context` is the request context
    (client-controlled) after the rules of `runtime.repo.templates.clean_context`.
    """

    claims: Mapping[str, str]
    context: Mapping[str, str]
    scope_id: str
    user_id: str | None
    org_id: str | None
    human_present: bool
    is_subagent: bool
    agent_name: str

    @classmethod
    def for_caller(
        cls,
        agent_name: str,
        claims: Mapping[str, str] | None = None,
        context: Mapping[str, str] | None = None,
        *,
        human_present: bool = True,
        is_subagent: bool = False,
    ) -> SurfaceContext:
        """A context whose scope, user and org come from the `scope`, `sub` and `org` claims."""
        claims = dict(claims or {})
        return cls(
            claims=MappingProxyType(claims),
            context=MappingProxyType(dict(context or {})),
            scope_id=claims.get("scope", DEFAULT_SCOPE),
            user_id=claims.get("sub"),
            org_id=claims.get("org"),
            human_present=human_present,
            is_subagent=is_subagent,
            agent_name=agent_name,
        )

    def for_specialist(self, agent_name: str) -> SurfaceContext:
        """The context a delegated specialist's predicates see: inherited, marked as a subagent."""
        return SurfaceContext(
            self.claims,
            self.context,
            self.scope_id,
            self.user_id,
            self.org_id,
            self.human_present,
            True,
            agent_name,
        )

    def cache_key(self) -> tuple[object, ...]:
        return (
            tuple(sorted(self.claims.items())),
            tuple(sorted(self.context.items())),
            self.scope_id,
            self.user_id,
            self.org_id,
            self.human_present,
            self.is_subagent,
            self.agent_name,
        )


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A declared entry this caller does not get, and why."""

    kind: ExclusionKind
    name: str
    reason: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A granted MCP server that is not ready: the agent is told, so it does not pretend."""

    server: str
    status: str
    tools: tuple[str, ...]
    """The tools the agent would have had from it."""


@dataclass(frozen=True, slots=True)
class Surface:
    """The resolved surface of one agent for one caller."""

    agent: str  # `main` for unscoped chat
    tools: frozenset[str]
    skills: tuple[str, ...]
    stores: Mapping[str, StoreMode]
    subagents: tuple[str, ...]
    connections: tuple[str, ...]
    mcp: tuple[str, ...]
    """The granted MCP servers that are ready (their tools are in `tools`)."""
    excluded: tuple[Exclusion, ...]
    unscoped: bool = False
    unavailable: tuple[Unavailable, ...] = ()
    """Granted MCP servers that are starting or failed."""
    mcp_tools: Mapping[str, str] = field(default_factory=dict)
    """Each granted MCP tool (`server__tool`, also in `tools`) -> the server it is called on."""
    fingerprint: str = field(default="", compare=False)
    """A hash of what was granted: a session rebuilds its resources when it changes."""
    read_only: bool = False
    """A run without write power (an automation without `writeEnabled`, SPEC 23): stores
    are read-only, file writes are gone, and connections refuse every method but GET/HEAD."""

    def lacks(self, other: Surface) -> list[str]:
        """Tools `other` has and this surface does not, sorted (for the handoff note)."""
        return sorted(other.tools - self.tools)


def resolve(
    bundle: Bundle,
    agent_name: str,
    ctx: SurfaceContext,
    *,
    root: str | None = None,
    servers: McpSnapshot = NO_SERVERS,
) -> Surface:
    """The surface of `agent_name` (or `main` for unscoped chat) for this caller.

    `root` is the agent rooting the session (it is never callable as a specialist).
    `servers` is the state of the MCP servers (`Runtime.mcp.snapshot()`): only a ready
    server's tools are granted; without it, every declared server is "not connected".
    Results are cached per (bundle version, agent, root, caller, servers), so a
    predicate runs, and `predicate_excluded` is logged, once per distinct caller.
    """
    key = (bundle.version, agent_name, root, ctx.cache_key(), servers.digest)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    if agent_name == MAIN_AGENT:
        surface = _unscoped(bundle, servers)
    else:
        surface = _resolve_agent(bundle, bundle.agents[agent_name], ctx, root, servers)
    _CACHE.put(key, surface)
    return surface


def _resolve_agent(
    bundle: Bundle,
    agent: AgentDefinition,
    ctx: SurfaceContext,
    root: str | None,
    servers: McpSnapshot,
) -> Surface:
    excluded: list[Exclusion] = []

    def admitted(kind: ExclusionKind, entries: Iterable[Declared]) -> list[str]:
        names = []
        for entry in entries:
            reason = _exclusion_reason(agent, entry.name, entry.conditional, entry, ctx)
            if reason is None:
                names.append(entry.name)
            else:
                excluded.append(Exclusion(kind, entry.name, reason))
        return names

    tools = set(admitted("tool", agent.tools))
    skills = admitted("skill", agent.skills)
    tools |= _skill_tools(bundle, agent, skills, tools, excluded)
    stores = _stores(agent, ctx, excluded, bundle)

    subagents = []
    for name in admitted("subagent", agent.subagents):
        if name == root:
            excluded.append(Exclusion("subagent", name, "the active root is never callable"))
        else:
            subagents.append(name)
    connections = admitted("connection", agent.connections)
    granted = admitted("mcp", agent.mcp)

    tools = _with_store_tools(tools, stores, excluded)
    mcp = _with_mcp_tools(bundle, tools, granted, servers, excluded)
    tools |= set(PROTOCOL_TOOLS)
    if subagents:
        tools.add(CALL_SUBAGENT)
    if connections:
        tools.add(REQUEST)
    if bundle.memory(agent) is not None:
        tools |= set(MEMORY_TOOLS)  # from `memory` alone: the loader refuses them in `tools`
    # A tool whose own entry was excluded but that another declaration grants (an
    # included skill, the protocol) is not missing: listing it would contradict `tools`.
    missing = [item for item in excluded if item.kind != "tool" or item.name not in tools]
    return _surface(agent.name, tools, skills, stores, subagents, connections, mcp, missing)


def _exclusion_reason(
    agent: AgentDefinition,
    name: str,
    predicate: Predicate | None,
    entry: Declared | StoreGrant,
    ctx: SurfaceContext,
) -> str | None:
    """None when the entry is included; else why not (and it is logged)."""
    if predicate is None:
        return None
    try:
        result = predicate(ctx)
    except KeyError as error:
        reason = f"raised KeyError {error.args[0]!r} (a missing claim or context key)"
    # A predicate is user code: any failure excludes its entry, sys.exit() included.
    except (Exception, SystemExit) as error:
        reason = f"raised {type(error).__name__}: {error}"
    else:
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()  # never awaited on purpose; close it so Python does not warn
            reason = "returned an awaitable: predicates must be synchronous"
        elif result is True:
            return None
        else:
            reason = f"returned {result!r}, not True"
    where = f"{getattr(predicate, '__name__', 'predicate')} ({entry.origin})"
    reason = f"predicate {where} {reason}"
    logger.info(
        "predicate_excluded",
        extra={"event": "predicate_excluded", "agent": agent.name, "entry": name, "reason": reason},
    )
    return reason


def _skill_tools(
    bundle: Bundle,
    agent: AgentDefinition,
    included: list[str],
    declared_tools: set[str],
    excluded: list[Exclusion],
) -> set[str]:
    """Tools the included skills contribute; those only excluded skills offered are reported."""
    granted = {tool for name in included for tool in bundle.skills[name].allowed_tools}
    dropped_skills = {item.name for item in excluded if item.kind == "skill"}
    for skill in sorted(dropped_skills):
        for tool in bundle.skills[skill].allowed_tools:
            if tool not in granted and tool not in declared_tools:
                excluded.append(
                    Exclusion(
                        "tool", tool, f"contributed only by skill {skill!r}, which is excluded"
                    )
                )
    return granted


def _stores(
    agent: AgentDefinition, ctx: SurfaceContext, excluded: list[Exclusion], bundle: Bundle
) -> dict[str, StoreMode]:
    stores: dict[str, StoreMode] = {}
    for grant in agent.stores:
        reason = _exclusion_reason(agent, grant.store, grant.conditional, grant, ctx)
        if reason is not None:
            excluded.append(Exclusion("store", grant.store, reason))
        elif grant.mode == "rw" and bundle.stores[grant.store].shared:
            stores[grant.store] = "read"  # shared stores are never writable through agents
        else:
            stores[grant.store] = grant.mode
    return stores


def _with_store_tools(
    tools: set[str], stores: Mapping[str, StoreMode], excluded: list[Exclusion]
) -> set[str]:
    """Store tools exactly as the resolved modes allow, whatever else named them."""
    allowed = {
        store_tool_name(store, op) for store, mode in stores.items() for op in store_ops(mode)
    }
    for tool in sorted(tools):
        if tool.startswith("store__") and tool not in allowed:
            tools.discard(tool)
            excluded.append(
                Exclusion("tool", tool, "its store is not granted in that mode for this caller")
            )
    return tools | allowed


@dataclass
class _McpGrant:
    """What the MCP servers' state lets a surface have."""

    tools: dict[str, str] = field(default_factory=dict)  # server__tool -> its server
    ready: list[str] = field(default_factory=list)
    unavailable: list[Unavailable] = field(default_factory=list)


def _with_mcp_tools(
    bundle: Bundle,
    tools: set[str],
    granted: list[str],
    servers: McpSnapshot,
    excluded: list[Exclusion],
) -> _McpGrant:
    """MCP tools as the servers' state allows: every tool of a granted server that is ready,
    and each `server__tool` named on its own when its server offers it. A server that is
    not ready is excluded with its reason, and so is every tool it would have given. Each
    tool keeps the server it came from: that server, and no other, answers its calls."""
    declared = bundle.mcp_servers
    grant = _McpGrant()
    missing: dict[str, list[str]] = {}
    for name in sorted(tools):
        server = server_of(name, declared)
        if server is None:
            continue
        tools.discard(name)
        state = servers.state(server)
        if state is not None and state.status == "ready":
            if servers.tool(server, name) is not None:
                grant.tools[name] = server
                continue
            tool = name.removeprefix(declared[server].prefix)
            reason = state.skipped.get(name) or (
                f"server {server!r} has no tool {tool!r}"
                if declared[server].offers(tool)
                else f"not in the `tools` allow-list of server {server!r}"
            )
        else:
            reason = state.reason() if state is not None else "server not connected"
            missing.setdefault(server, []).append(name)
        excluded.append(Exclusion("tool", name, reason))
    for server in granted:
        state = servers.state(server)
        if state is not None and state.status == "ready":
            grant.ready.append(server)
            grant.tools.update((tool.tool_name, server) for tool in state.tools)
            excluded.extend(Exclusion("tool", name, why) for name, why in state.skipped.items())
            continue
        reason = state.reason() if state is not None else "server not connected"
        excluded.append(Exclusion("mcp", server, reason))
        lost = state.known if state is not None else ()
        for name in lost:
            if name not in missing.get(server, []):
                excluded.append(Exclusion("tool", name, reason))
        missing.setdefault(server, []).extend(n for n in lost if n not in missing[server])
    grant.unavailable = [
        Unavailable(
            server,
            servers.servers[server].status if server in servers.servers else "not connected",
            tuple(sorted(names)),
        )
        for server, names in sorted(missing.items())
    ]
    tools |= set(grant.tools)
    return grant


def _unscoped(bundle: Bundle, servers: McpSnapshot) -> Surface:
    """Unscoped chat: every resource of the bundle; file tools only when main opts in."""
    stores: dict[str, StoreMode] = {
        name: "read" if store.shared else "rw" for name, store in bundle.stores.items()
    }
    subagents = sorted(name for name in bundle.agents if name not in (MAIN_AGENT, DEFAULT_AGENT))
    tools = set(PROTOCOL_TOOLS) | set(bundle.tools) | {LOAD_SKILL, LOAD_KNOWLEDGE}
    tools |= set(bundle.main.tools & set(FILE_TOOLS))
    if subagents:
        tools.add(CALL_SUBAGENT)
    if bundle.connections:
        tools.add(REQUEST)
    tools = _with_store_tools(tools, stores, [])
    excluded: list[Exclusion] = []
    mcp = _with_mcp_tools(bundle, tools, sorted(bundle.mcp_servers), servers, excluded)
    return _surface(
        MAIN_AGENT,
        tools,
        sorted(bundle.skills),
        stores,
        subagents,
        sorted(bundle.connections),
        mcp,
        excluded,
        unscoped=True,
    )


def _surface(
    agent: str,
    tools: set[str],
    skills: list[str],
    stores: Mapping[str, StoreMode],
    subagents: list[str],
    connections: list[str],
    mcp: _McpGrant,
    excluded: list[Exclusion],
    *,
    unscoped: bool = False,
) -> Surface:
    ordered_stores = dict(sorted(stores.items()))
    # A server changing state is a surface change: the agent is told what it lacks.
    down = [(item.server, item.status, item.tools) for item in mcp.unavailable]
    from_servers = sorted(mcp.tools.items())
    granted = repr(
        (sorted(tools), skills, ordered_stores, subagents, connections, mcp.ready, down,
         from_servers)
    )  # fmt: skip
    return Surface(
        agent=agent,
        tools=frozenset(tools),
        skills=tuple(skills),
        stores=MappingProxyType(ordered_stores),
        subagents=tuple(subagents),
        connections=tuple(connections),
        mcp=tuple(mcp.ready),
        excluded=tuple(excluded),
        unscoped=unscoped,
        unavailable=tuple(mcp.unavailable),
        mcp_tools=MappingProxyType(dict(from_servers)),
        fingerprint=hashlib.blake2b(granted.encode(), digest_size=8).hexdigest(),
    )


WRITING_FILE_TOOLS = frozenset({"write_file", "propose_source_change"})


def read_only(surface: Surface) -> Surface:
    """`surface` without write power: each store read-only, the file tools that write gone,
    `read_only` set so connections refuse writes. Everything it drops is listed as excluded,
    so `inspect` and the agent see why."""
    if surface.read_only:
        return surface
    stores: dict[str, StoreMode] = dict.fromkeys(surface.stores, "read")
    excluded = list(surface.excluded)
    tools = set(surface.tools)
    for tool in sorted(tools):
        writes_store = tool.startswith("store__") and tool.rsplit("__", 1)[-1] in ("put", "delete")
        if writes_store or tool in WRITING_FILE_TOOLS:
            tools.discard(tool)
            excluded.append(Exclusion("tool", tool, "this run is read-only (writeEnabled: false)"))
    return dataclasses.replace(
        surface,
        tools=frozenset(tools),
        stores=MappingProxyType(dict(sorted(stores.items()))),
        excluded=tuple(excluded),
        read_only=True,
        fingerprint=surface.fingerprint + "-ro",
    )


class _LruCache:
    """A small thread-safe LRU: resolution runs on every turn and must stay cheap."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[tuple[object, ...], Surface] = OrderedDict()
        self._lock = Lock()

    def get(self, key: tuple[object, ...]) -> Surface | None:
        with self._lock:
            surface = self._items.get(key)
            if surface is not None:
                self._items.move_to_end(key)
            return surface

    def put(self, key: tuple[object, ...], surface: Surface) -> None:
        with self._lock:
            self._items[key] = surface
            if len(self._items) > self._size:
                self._items.popitem(last=False)


_CACHE = _LruCache(4096)
