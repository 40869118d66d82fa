"""The bundle: an immutable, versioned snapshot of a valid agent repo.

Everything downstream (surfaces, prompts, chats) reads a Bundle and nothing
else: after loading, no repo file is read again until a reload makes a new one.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from runtime.exceptions import DefinitionWarning
from runtime.formats import RepoConfig, StoreField
from runtime.models import ModelSettings
from runtime.registry import ToolInfo
from runtime.templates import Template

Predicate = Callable[[Any], object]
"""A synchronous function of the SurfaceContext; only an exact `True` includes its entry."""

StoreMode = Literal["read", "rw"]
ModelTier = Literal["simple", "default", "advanced"]

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
    prompt: Template
    context: Template | None
    digest: str
    """A hash of the agent's own files: a session rebuilds its prompt when it changes."""

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

    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments (a copy: the bundle itself never changes)."""
        return copy.deepcopy(dict(self._parameters))


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
    connections: frozenset[str]
    registry: Mapping[str, ToolInfo]
    warnings: tuple[DefinitionWarning, ...]

    @property
    def default_agent(self) -> AgentDefinition | None:
        return self.agents.get(DEFAULT_AGENT)

    @property
    def mcp_servers(self) -> frozenset[str]:
        return frozenset(self.config.mcp.servers)
