"""The bundle: an immutable, versioned snapshot of a valid agent repo.

Everything downstream (surfaces, prompts, chats) reads a Bundle and nothing
else: after loading, no repo file is read again until a reload makes a new one.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from runtime.exceptions import DefinitionError, DefinitionWarning
from runtime.models import ModelSettings, ModelTier
from runtime.repo.formats import (
    BudgetLimits,
    CompactionConfig,
    ContextInjection,
    MemoryConfig,
    RepoConfig,
    StoreField,
)
from runtime.repo.registry import ToolInfo
from runtime.repo.templates import Template

if TYPE_CHECKING:
    from runtime.repo.automations import AutomationDefinition

Predicate = Callable[[Any], object]
"""A synchronous function of the SurfaceContext; only an exact `True` includes its entry."""

StoreMode = Literal["read", "rw"]

DEFAULT_AGENT = "default"
MAIN_AGENT = "main"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a declaration was written, for messages and `amodal inspect`.

    The line is found on first use: mapping keys to lines means parsing the file a
    second time, which a valid repo's load should not pay for.
    """

    file: str
    field: str = ""
    locate: Callable[[], int | None] | None = dataclasses.field(
        default=None, compare=False, repr=False
    )

    @property
    def line(self) -> int | None:
        return self.locate() if self.locate is not None else None

    def __str__(self) -> str:
        line = self.line
        return self.file if line is None else f"{self.file}:{line}"


@dataclass(frozen=True, slots=True)
class Declared:
    """One declared entry of an agent (a tool, skill, subagent, connection or MCP server)."""

    name: str
    origin: Origin
    conditional: Predicate | None = None


@dataclass(frozen=True, slots=True)
class StoreGrant:
    """One declared store with its access mode."""

    store: str
    mode: StoreMode
    origin: Origin
    conditional: Predicate | None = None


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """One `agents/<name>/` directory, merged from AGENT.md, agent.json and agent.py."""

    name: str
    display_name: str
    description: str
    role: str | None
    tone: str | None
    personality: str | None
    tools: tuple[Declared, ...]
    skills: tuple[Declared, ...]
    subagents: tuple[Declared, ...]
    connections: tuple[Declared, ...]
    mcp: tuple[Declared, ...]
    stores: tuple[StoreGrant, ...]
    max_tool_calls: int | None
    model_tier: ModelTier
    model_settings: ModelSettings
    """`modelSettings`: passed to the model on this agent's calls."""
    compaction: CompactionConfig | None
    """Its own `compaction`, or None for amodal.json's."""
    prompt: Template
    context: Template | None
    digest: str
    """A hash of the agent's own files: a session rebuilds its prompt when it changes."""
    memory_config: MemoryConfig | None = None
    """Its own `memory`, or None for amodal.json's (`Bundle.memory` says which applies)."""
    limits: BudgetLimits | None = None
    """Its own budgets (SPEC 22), or None for amodal.json's: over amodal.json's for a turn
    it roots; as a specialist, on top of the turn's for its subtree."""
    limits_origin: Origin = Origin("")
    """Where `limits` was written."""

    @property
    def is_default(self) -> bool:
        return self.name == DEFAULT_AGENT

    @property
    def summary(self) -> str:
        """The first line of the description: what rosters show (delegating agents get it all)."""
        return summary_line(self.description)


def summary_line(description: str) -> str:
    """The first non-blank line of a description, trimmed."""
    return next((line.strip() for line in description.splitlines() if line.strip()), "")


@dataclass(frozen=True, slots=True)
class MainDefinition:
    """`agents/main/`: the instructions of unscoped chat and its file-tool opt-ins."""

    prompt: Template | None
    tools: frozenset[str]
    digest: str


@dataclass(frozen=True, slots=True)
class SkillDefinition:
    name: str
    description: str
    body: str
    allowed_tools: tuple[str, ...]
    file: str
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Supporting text files of the skill's folder, by path relative to it (`load_skill`)."""


@dataclass(frozen=True, slots=True)
class KnowledgeDocument:
    name: str
    title: str
    body: str
    file: str


@dataclass(frozen=True, slots=True)
class StoreDefinition:
    name: str
    entity: str
    key: str
    key_fields: tuple[str, ...]
    schema: Mapping[str, StoreField]
    ttl: int | None
    history_versions: int
    shared: bool
    file: str


@dataclass(frozen=True, slots=True)
class CustomTool:
    name: str
    description: str
    _parameters: Mapping[str, Any]
    confirm: bool
    timeout: float
    handler: Callable[..., Any]
    file: str
    idempotent: bool = False

    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments (a copy: the bundle itself never changes)."""
        return copy.deepcopy(dict(self._parameters))


McpTransport = Literal["stdio", "http", "sse"]


DEFAULT_MAX_RESULT_BYTES = 1_048_576
"""An MCP result larger than this, as JSON, is kept cut (`maxResultBytes` per server)."""


@dataclass(frozen=True, slots=True)
class McpServerDefinition:
    """One declared MCP server (amodal.json `mcp.servers`, or connections/<name>/ with
    `"protocol": "mcp"`), its `env:` references resolved. `env` and `headers` values, and
    every value that came from `env:`, are secrets: kept out of reprs, logs and events."""

    name: str
    transport: McpTransport
    command: str | None
    args: tuple[str, ...]
    cwd: Path | None
    url: str | None
    timeout: float
    allowed: frozenset[str] | None
    """The `tools` allow-list (None: every tool of the server)."""
    confirm: bool | frozenset[str]
    file: str
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    """A result larger than this (as JSON) is stored and shown cut, with `truncated`."""
    env: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    secrets: tuple[str, ...] = dataclasses.field(default=(), repr=False)

    @property
    def prefix(self) -> str:
        """What its tool names start with: `my-docs` -> `my_docs__`."""
        return mcp_prefix(self.name)

    def offers(self, tool: str) -> bool:
        return self.allowed is None or tool in self.allowed

    def needs_confirmation(self, tool: str) -> bool:
        return self.confirm is True or (not isinstance(self.confirm, bool) and tool in self.confirm)


def mcp_prefix(server: str) -> str:
    return server.replace("-", "_") + "__"


def server_of(tool: str, servers: Iterable[str]) -> str | None:
    """The server among `servers` whose tool `tool` would be (`my_db__query` -> `my-db`).
    The loader refuses servers whose prefixes could collide (one starting with another's),
    so at most one matches; the longest prefix wins all the same."""
    matching = [name for name in servers if tool.startswith(mcp_prefix(name))]
    return max(matching, key=lambda name: len(mcp_prefix(name)), default=None)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One rule of access.json: a method and a path pattern (`{x}` and `*` match one segment,
    `**` the rest)."""

    method: str
    path: str
    confirm: bool = False

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(part for part in self.path.split("/") if part)


@dataclass(frozen=True, slots=True)
class ConnectionDefinition:
    """One REST connection, `connections/<name>/`, its `env:` references resolved. Auth
    values, static header values and every value that came from `env:` are secrets."""

    name: str
    base_url: str
    auth_type: Literal["bearer", "api_key", "basic", "header", "none"]
    timeout: float
    max_response_bytes: int
    test_path: str | None
    injections: tuple[ContextInjection, ...]
    default_access: Literal["allow-read", "deny"]
    endpoints: tuple[Endpoint, ...]
    surface: str | None
    """surface.md: what the API is, for the agent's resources layer."""
    rules: str | None
    """rules.md: how to use it, for the agent's resources layer."""
    file: str
    auth_headers: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    """Headers that authenticate each call (from `auth` and static `headers`)."""
    auth_query: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    """Query parameters that authenticate each call (an api_key in `queryParam`)."""
    secrets: tuple[str, ...] = dataclasses.field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class Bundle:
    """A valid agent repo, read once. Build one with `runtime.load_bundle`."""

    root: Path
    version: str
    config: RepoConfig
    agents: Mapping[str, AgentDefinition]
    main: MainDefinition
    skills: Mapping[str, SkillDefinition]
    knowledge: Mapping[str, KnowledgeDocument]
    stores: Mapping[str, StoreDefinition]
    tools: Mapping[str, CustomTool]
    connections: Mapping[str, ConnectionDefinition]
    """REST connections by name."""
    mcp_servers: Mapping[str, McpServerDefinition]
    """MCP servers by name, from amodal.json and connections/ alike."""
    registry: Mapping[str, ToolInfo]
    warnings: tuple[DefinitionWarning, ...]
    automations: Mapping[str, AutomationDefinition] = dataclasses.field(default_factory=dict)
    """The automations that loaded (SPEC 23), by name."""
    automation_errors: tuple[DefinitionError, ...] = ()
    """What is wrong with the automations left out: they alone do not run (`amodal
    validate` fails on them; the repo is served with the others)."""

    @property
    def default_agent(self) -> AgentDefinition | None:
        return self.agents.get(DEFAULT_AGENT)

    def compaction(self, agent: AgentDefinition | None) -> CompactionConfig | None:
        """How a session rooted on `agent` (None: unscoped) is compacted; None: it is not."""
        chosen = (
            self.config.compaction
            if agent is None or agent.compaction is None
            else agent.compaction
        )
        return chosen if chosen.enabled else None

    def memory(self, agent: AgentDefinition | None) -> MemoryConfig | None:
        """The memory of `agent` (its own, else amodal.json's); None: it keeps none.
        Unscoped chat (`agent` None) keeps none: memory belongs to a named agent."""
        if agent is None:
            return None
        chosen = agent.memory_config or self.config.memory
        return chosen if chosen is not None and chosen.enabled else None
