"""The file formats of an agent repo, as strict pydantic models.

These are the trust boundary: everything a person writes in amodal.json,
agent.json (or agent.py, or AGENT.md frontmatter), SKILL.md frontmatter,
stores/*.json and tools/*/tool.json is parsed here. Unknown keys are errors so a
typo never becomes a silent default. The same models generate the JSON Schemas
shipped for editors (`amodal schema`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SecretStr,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic import Strict as PydanticStrict
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue, SkipJsonSchema
from pydantic_core import CoreSchema

from runtime.models import ModelTier
from runtime.models.endpoints import PROVIDERS

TONES: dict[str, str] = {
    "neutral": "Plain and even: state things directly, without flourish.",
    "friendly": "Warm and approachable: speak like a helpful colleague.",
    "concise": "Brief: lead with the answer, cut every word that does not carry weight.",
    "formal": "Formal and precise: complete sentences, no slang, no jokes.",
    "playful": "Light and playful: a little humour is welcome, clarity still comes first.",
    "teacher": "Patient and explanatory: say why, build up step by step, check understanding.",
    "technical": "Technical and exact: name things precisely, show the details an expert needs.",
}
"""The seven tones a persona may take, each with the words layered into the prompt."""

BUILTIN_ROLES = ("planner", "designer", "builder", "tester", "reviewer", "researcher")
CUSTOM_ROLE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 -]{0,23}$")

# Keys of amodal.json that the reference platform defines and this runtime does not implement.
FOREIGN_REPO_KEYS = (
    "packages",
    "pages",
    "platform",
    "embed",
    "sandbox",
    "webTools",
    "proactive",
    "stores",
)


class Strict(BaseModel):
    """A file shape: camelCase keys, unknown keys rejected, immutable once parsed."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=False,
        str_strip_whitespace=False,
        defer_build=True,
    )


class Shorthand(Strict):
    """A shape that may also be written as a bare string (its main field)."""

    shorthand_schema: ClassVar[dict[str, Any]] = {"type": "string", "minLength": 1}

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"anyOf": [cls.shorthand_schema, handler(core_schema)]}


# ---------------------------------------------------------------- amodal.json

Count = Annotated[int, PydanticStrict()]
"""A whole number as a file writes it: `"8"`, `8.0` or `true` are errors, never an 8 or a 1."""


Usd = Annotated[float, PydanticStrict(), Field(ge=0, le=100_000)]
"""US dollars per million tokens."""


class ModelPrice(Strict):
    """A model's price in USD per million tokens (SPEC 20), overriding the catalog's."""

    input: Usd
    output: Usd
    cached_input: Usd | None = None


MODEL_ENTRIES = ("main", "simple", "advanced")
"""The keys of `models`: the session model and the two tiers that may be bound."""


def _known_provider(provider: str | None) -> str | None:
    if provider is not None and provider not in PROVIDERS:
        known = ", ".join(repr(name) for name in PROVIDERS)
        raise ValueError(f"unknown provider {provider!r}; known providers: {known}")
    return provider


class _ModelFields(Shorthand):
    """What a model entry and a fallback entry share: where the model is called
    (`provider`, `baseUrl`, `apiKey`) and what is known of it (SPEC 20)."""

    model: Annotated[str, StringConstraints(min_length=1)] | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    provider: str | None = None
    context_window: Count | None = Field(default=None, ge=1_024, le=100_000_000)
    max_output_tokens: Count | None = Field(default=None, ge=1, le=10_000_000)
    price: ModelPrice | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        return {"model": data} if isinstance(data, str) else data

    @field_validator("provider")
    @classmethod
    def _provider(cls, provider: str | None) -> str | None:
        return _known_provider(provider)

    @model_validator(mode="after")
    def _room_to_answer(self) -> Self:
        window, longest = self.context_window, self.max_output_tokens
        if window is not None and longest is not None and longest >= window:
            raise ValueError(
                f"maxOutputTokens ({longest}) must be less than contextWindow ({window}): "
                "the window holds the input and the answer"
            )
        return self


class ModelEntry(_ModelFields):
    """A model: its name, where it is called, and what is known of it."""

    model: Annotated[str, StringConstraints(min_length=1)]


class FallbackEntry(_ModelFields):
    """One entry of a `fallback` list: a model (a name, or `{model, baseUrl?, apiKey?,
    provider?, ...}`), or `{"tier": NAME}`: that entry of `models`, with its own fallbacks."""

    tier: str | None = None

    @field_validator("tier")
    @classmethod
    def _tier(cls, tier: str | None) -> str | None:
        if tier is not None and tier not in MODEL_ENTRIES:
            known = ", ".join(repr(name) for name in MODEL_ENTRIES)
            raise ValueError(f"unknown tier {tier!r}; known tiers: {known}")
        return tier

    @model_validator(mode="after")
    def _one_kind(self) -> FallbackEntry:
        if self.tier is not None:
            if self.model_fields_set - {"tier"}:
                raise ValueError('a tier reference is {"tier": NAME} alone')
        elif self.model is None:
            raise ValueError('a fallback entry names a model, or a tier as {"tier": NAME}')
        return self

    def entry(self) -> ModelEntry:
        """This entry as a model entry (not for a tier reference)."""
        assert self.model is not None
        return ModelEntry.model_construct(
            **{name: getattr(self, name) for name in _ModelFields.model_fields}
        )


class ModelBinding(ModelEntry):
    """An entry of `models`: a model entry, and the models to ask when it fails (SPEC 25)."""

    fallback: tuple[FallbackEntry, ...] = ()


class Models(Strict):
    main: ModelBinding | None = None
    simple: ModelBinding | None = None
    advanced: ModelBinding | None = None


MCP_SERVER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
CONNECTION_NAME = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
# Keys of connections/<name>/spec.json that the reference platform defines and this
# runtime does not implement.
FOREIGN_CONNECTION_KEYS = ("specUrl", "format", "sync", "filter")


class McpServer(Strict):
    """One MCP server: `mcp.servers.<name>` in amodal.json, or a `connections/<name>/spec.json`
    with `"protocol": "mcp"`. Values of `env` and `headers` are secrets: never logged."""

    transport: Literal["stdio", "http", "sse"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, SecretStr] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    timeout: float = Field(default=60, gt=0, le=600)
    tools: tuple[str, ...] | None = None
    confirm: bool | tuple[str, ...] = False
    max_result_bytes: int = Field(default=1_048_576, ge=1_024, le=104_857_600)

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServer:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("a stdio server needs `command`")
            if self.url is not None or self.headers:
                raise ValueError("`url` and `headers` are for http and sse servers")
        else:
            if not self.url:
                raise ValueError(f"an {self.transport} server needs `url`")
            if not re.match(r"^https?://[^/\s]+", self.url):
                raise ValueError(f"`url` must be an http:// or https:// URL (got {self.url!r})")
            if self.command is not None or self.args or self.env or self.cwd is not None:
                raise ValueError("`command`, `args`, `env` and `cwd` are for stdio servers")
        return self


class McpConnectionSpec(McpServer):
    """connections/<name>/spec.json of an MCP server."""

    protocol: Literal["mcp"]


class Mcp(Strict):
    servers: dict[str, McpServer] = Field(default_factory=dict)


class ConnectionAuth(Strict):
    """How a REST connection authenticates; secrets written as `env:NAME`."""

    type: Literal["bearer", "api_key", "basic", "header", "none"] = "none"
    token: SecretStr | None = None
    header: str | None = None
    prefix: str | None = None
    username: str | None = None
    password: SecretStr | None = None
    query_param: str | None = None

    @model_validator(mode="after")
    def _needs(self) -> ConnectionAuth:
        needed = {
            "bearer": ("token",),
            "api_key": ("token",),
            "basic": ("username", "password"),
            "header": ("header", "token"),
            "none": (),
        }[self.type]
        missing = [to_camel(name) for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"auth type {self.type!r} needs " + " and ".join(missing))
        if self.type == "api_key" and self.header and self.query_param:
            raise ValueError("an api_key goes in one place: `header` or `queryParam`, not both")
        return self


class ContextInjection(Strict):
    """A value sent on every call, taken from a verified claim of the caller."""

    from_: Annotated[str, StringConstraints(pattern=r"^claim:[A-Za-z0-9_.:-]{1,64}$")] = Field(
        alias="from"
    )
    in_: Literal["header", "query"] = Field(alias="in")
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]

    @property
    def claim(self) -> str:
        return self.from_.removeprefix("claim:")


class ConnectionSpec(Strict):
    """connections/<name>/spec.json of a REST connection."""

    protocol: Literal["rest"] = "rest"
    base_url: Annotated[str, StringConstraints(pattern=r"^https?://[^/?#@\\\s]+(/[^?#\s]*)?$")]
    auth: ConnectionAuth = ConnectionAuth()
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    timeout: float = Field(default=30, gt=0, le=300)
    max_response_bytes: int = Field(default=1_048_576, ge=1, le=104_857_600)
    test_path: str | None = None
    context_injection: tuple[ContextInjection, ...] = ()
    # Accepted for compatibility with the reference platform; the loader warns about each.
    spec_url: SkipJsonSchema[Any] = None
    format: SkipJsonSchema[Any] = None
    sync: SkipJsonSchema[Any] = None
    filter: SkipJsonSchema[Any] = None


HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")


class AccessEndpoint(Strict):
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
    path: Annotated[str, StringConstraints(pattern=r"^/[^?#\s]*$")]
    confirm: bool = False

    @field_validator("path")
    @classmethod
    def _segments(cls, path: str) -> str:
        parts = [part for part in path.split("/") if part]
        for index, part in enumerate(parts):
            if part == "**" and index != len(parts) - 1:
                raise ValueError(
                    "`**` matches the rest of the path, so it may only be the last segment "
                    "(`/files/**`); write `*` or `{name}` for one segment"
                )
            if "*" in part and part not in ("*", "**"):
                raise ValueError(f"segment {part!r}: `*` matches a whole segment, not part of one")
            if part in (".", ".."):
                raise ValueError("'.' and '..' segments never match: no call path has them")
        return path


class AccessFile(Strict):
    """connections/<name>/access.json: which endpoints agents may call."""

    default: Literal["allow-read", "deny"] = "allow-read"
    endpoints: tuple[AccessEndpoint, ...] = ()


class JwtAuth(Strict):
    key: SecretStr
    algorithms: tuple[str, ...] = Field(min_length=1)
    audience: str | None = None
    issuer: str | None = None


class ApiKey(Strict):
    key: SecretStr
    claims: dict[str, str]


class Auth(Strict):
    jwt: JwtAuth | None = None
    api_keys: tuple[ApiKey, ...] = ()


class Delegation(Strict):
    max_runs_per_turn: Count = Field(default=60, ge=1, le=1000)
    max_concurrent: Count = Field(default=16, ge=1, le=256)


Amount = Annotated[float, PydanticStrict(), Field(gt=0, le=1e12)]
"""A positive number as a file writes it (`"5"` or `true` are errors): dollars, seconds."""
Tokens = Annotated[int, PydanticStrict(), Field(ge=1, le=10**15)]


class BudgetLimits(Strict):
    """What one turn, one session and one owner's day may spend (SPEC 22); unset: no bound.
    Tokens are input plus output across the whole delegation tree."""

    max_turn_tokens: Tokens | None = None
    max_turn_cost_usd: Amount | None = None
    max_turn_seconds: Amount | None = None
    """Wall clock of the turn, its specialists included."""
    max_session_tokens: Tokens | None = None
    max_session_cost_usd: Amount | None = None
    max_daily_cost_usd_per_owner: Amount | None = None
    """Per owner per UTC day, across sessions, processes and replicas (counted in the
    database)."""

    def costs_money(self) -> bool:
        """Whether a limit is in dollars (then every model called must have a price)."""
        return any(
            value is not None
            for value in (
                self.max_turn_cost_usd,
                self.max_session_cost_usd,
                self.max_daily_cost_usd_per_owner,
            )
        )

    def over(self, other: BudgetLimits | None) -> BudgetLimits:
        """These limits with every field `other` sets taken from `other` (an agent's own)."""
        if other is None:
            return self
        return self.model_copy(update=other.model_dump(include=other.model_fields_set))


class Limits(BudgetLimits):
    max_tool_calls: Count = Field(default=25, ge=1, le=200)
    max_tool_result_chars: Count = Field(default=20_000, ge=1_000, le=1_000_000)
    max_request_bytes: Count = Field(default=1_048_576, ge=1_024, le=104_857_600)
    repeated_call_limit: Count = Field(default=8, ge=2, le=1_000)
    """The same tool with the same arguments this many times in one run is refused."""


class CompactionConfig(Shorthand):
    """`compaction` (SPEC 20): when a long session's view is compacted, and by which model;
    `true` for the defaults, `false` for none."""

    shorthand_schema: ClassVar[dict[str, Any]] = {"type": "boolean"}

    threshold: Annotated[float, PydanticStrict()] = Field(default=0.8, gt=0, lt=1)
    """Compact before a call whose input would reach this share of the model's room."""
    keep_recent_turns: Count = Field(default=2, ge=1, le=100)
    """The newest user turns always shown whole."""
    model: ModelTier = "simple"
    """The tier whose model writes the summaries."""
    enabled: SkipJsonSchema[bool] = True
    """False when the file says `false`."""

    @model_validator(mode="before")
    @classmethod
    def _from_switch(cls, data: Any) -> Any:
        if data is True:
            return {}
        return {"enabled": False} if data is False else data


MemoryScope = Literal["user", "scope", "agent"]


class MemoryConfig(Shorthand):
    """`memory` (SPEC 21): the notes an agent keeps across sessions, whose they are, and how
    many; `true` for the defaults, `false` for none."""

    shorthand_schema: ClassVar[dict[str, Any]] = {"type": "boolean"}

    scope: MemoryScope = "user"
    """Whose notes: each person's (`user`, by the `sub` claim), one scope's, or the agent's."""
    max_entries: Count = Field(default=50, ge=1, le=100)
    max_chars: Count = Field(default=8000, ge=100, le=100_000)
    """The characters of all of one owner's entries together."""
    enabled: bool = True
    """`{"enabled": false}` (the reference platform's spelling) is `false`."""

    @model_validator(mode="before")
    @classmethod
    def _from_switch(cls, data: Any) -> Any:
        if data is True:
            return {}
        return {"enabled": False} if data is False else data


class FileTools(Strict):
    root: str = "."


class RepoConfig(Strict):
    """amodal.json."""

    name: Annotated[str, StringConstraints(min_length=1)]
    version: Annotated[str, StringConstraints(min_length=1)]
    description: str = ""
    base_prompt: str | None = None
    models: Models = Models()
    mcp: Mcp = Mcp()
    auth: Auth = Auth()
    delegation: Delegation = Delegation()
    limits: Limits = Limits()
    file_tools: FileTools = FileTools()
    compaction: CompactionConfig = CompactionConfig()
    memory: MemoryConfig | None = None
    """The memory of agents that do not set their own (SPEC 21); None: none."""
    # Accepted for compatibility with the reference platform; the loader warns about each.
    packages: SkipJsonSchema[Any] = None
    pages: SkipJsonSchema[Any] = None
    platform: SkipJsonSchema[Any] = None
    embed: SkipJsonSchema[Any] = None
    sandbox: SkipJsonSchema[Any] = None
    web_tools: SkipJsonSchema[Any] = None
    proactive: SkipJsonSchema[Any] = None
    stores: SkipJsonSchema[Any] = None


# ---------------------------------------------------------------- agents


class Entry(Shorthand):
    """A list entry: a name, or `{"name": ...}` (plus `conditional` in agent.py)."""

    name: Annotated[str, StringConstraints(min_length=1)]
    conditional: SkipJsonSchema[Any] = None

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data


class StoreAccess(Shorthand):
    """A store entry: `"read"`, `"rw"` or `{"mode": ...}` (plus `conditional` in agent.py)."""

    shorthand_schema: ClassVar[dict[str, Any]] = {"enum": ["read", "rw"]}

    mode: Literal["read", "rw"]
    conditional: SkipJsonSchema[Any] = None

    @model_validator(mode="before")
    @classmethod
    def _from_mode(cls, data: Any) -> Any:
        return {"mode": data} if isinstance(data, str) else data


class Persona(Strict):
    tone: Literal["neutral", "friendly", "concise", "formal", "playful", "teacher", "technical"] | (
        None
    ) = None
    personality: Annotated[str, StringConstraints(max_length=2000)] | None = None


Description = Annotated[str, StringConstraints(max_length=1024)]
"""What an agent is for: its first line is the roster summary, the whole text goes to
delegating agents."""


class ModelSettingsFile(Strict):
    """Sampling settings passed to the model on this agent's calls."""

    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)


class AgentConfig(Strict):
    """agent.json, the `agent` dict of agent.py, or AGENT.md frontmatter (with `displayName`)."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=40)] | None = None
    description: Description = ""
    role: str | None = None
    persona: Persona | None = None
    tools: tuple[Entry, ...] = ()
    skills: tuple[Entry, ...] = ()
    subagents: tuple[Entry, ...] = ()
    connections: tuple[Entry, ...] = ()
    mcp: tuple[Entry, ...] = ()
    stores: dict[str, StoreAccess] = Field(default_factory=dict)
    max_tool_calls: int | None = Field(default=None, ge=1, le=200)
    model_tier: ModelTier = "default"
    model_settings: ModelSettingsFile | None = None
    compaction: CompactionConfig | None = None
    """None: amodal.json's `compaction`."""
    memory: MemoryConfig | None = None
    """None: amodal.json's `memory`."""
    limits: BudgetLimits | None = None
    """The budgets of a turn this agent roots (SPEC 22), field by field over amodal.json's;
    as a specialist, they bound its own subtree besides the turn's (the stricter holds)."""
    max_depth: int | None = Field(default=None, ge=1, le=5)
    timeout: int | None = Field(default=None, ge=5, le=600)
    target_output_min: int | None = Field(default=None, ge=50, le=4000)
    target_output_max: int | None = Field(default=None, ge=50, le=4000)

    @field_validator("role")
    @classmethod
    def _role(cls, role: str | None) -> str | None:
        if role is None:
            return None
        if role.lower() in BUILTIN_ROLES:
            return role.lower()
        if not CUSTOM_ROLE.match(role):
            raise ValueError(
                f"a role is one of {', '.join(BUILTIN_ROLES)}, or a custom role of 1-24 letters, "
                "digits, spaces and hyphens starting with a letter or digit"
            )
        return role

    @model_validator(mode="after")
    def _output_range(self) -> AgentConfig:
        low, high = self.target_output_min, self.target_output_max
        if low is not None and high is not None and low > high:
            raise ValueError("targetOutputMin must not be greater than targetOutputMax")
        return self


class FrontmatterConfig(AgentConfig):
    """AGENT.md frontmatter: agent.json's fields, with the display name as `displayName`."""

    name: SkipJsonSchema[None] = None
    display_name: Annotated[str, StringConstraints(min_length=1, max_length=40)] | None = None


CONFIG_FIELDS = frozenset(field.alias or key for key, field in AgentConfig.model_fields.items())


# ---------------------------------------------------------------- skills, stores, tools


class SkillFrontmatter(Strict):
    name: str | None = None
    description: str | None = None
    allowed_tools: tuple[str, ...] = ()


class StoreField(Strict):
    type: Literal["string", "number", "boolean", "datetime", "enum", "array", "object"]
    nullable: bool = False
    values: tuple[str, ...] | None = None
    min: float | None = None
    max: float | None = None
    item: StoreField | None = None
    fields: dict[str, StoreField] | None = None

    @model_validator(mode="after")
    def _shape(self) -> StoreField:
        if (self.type == "enum") != (self.values is not None):
            raise ValueError("`values` is required for an enum and only allowed for an enum")
        if self.type == "enum" and not self.values:
            raise ValueError("an enum needs at least one value")
        if self.item is not None and self.type != "array":
            raise ValueError("`item` is only allowed for an array")
        if self.fields is not None and self.type != "object":
            raise ValueError("`fields` is only allowed for an object")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("`min` must not be greater than `max`")
        return self


class StoreEntity(Strict):
    name: Annotated[str, StringConstraints(min_length=1)]
    key: Annotated[str, StringConstraints(min_length=1)]
    schema_: dict[str, StoreField] = Field(alias="schema", min_length=1)


class StoreHistory(Strict):
    versions: int = Field(ge=1, le=100)


class StoreFile(Strict):
    """stores/<name>.json."""

    name: str | None = None
    entity: StoreEntity
    ttl: int | None = Field(default=None, ge=1)
    history: StoreHistory | None = None
    shared: bool = False


class ToolFile(Strict):
    """tools/<name>/tool.json."""

    description: Annotated[str, StringConstraints(min_length=1)]
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    confirm: bool = False
    timeout: float = Field(default=30, gt=0, le=600)
    idempotent: bool = False
    """Running it twice with the same arguments does what running it once does: a call a
    crash interrupted is run again when its turn continues (SPEC 23)."""
