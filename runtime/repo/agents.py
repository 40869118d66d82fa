"""agents/<name>/: AGENT.md (required), agent.json, agent.py and CONTEXT.md, merged into one
AgentDefinition per directory, plus the reserved `main` directory of unscoped chat."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runtime.models import ModelSettings
from runtime.repo import _markdown
from runtime.repo._python import callable_line, predicate_problem, run_module
from runtime.repo._reader import Reader
from runtime.repo._report import Report, Source, format_field
from runtime.repo.bundle import (
    MAIN_AGENT,
    AgentDefinition,
    Declared,
    MainDefinition,
    Origin,
    StoreGrant,
)
from runtime.repo.formats import CONFIG_FIELDS, AgentConfig, Entry, FrontmatterConfig, StoreAccess
from runtime.repo.registry import FILE_TOOLS
from runtime.repo.templates import Template, check_template

logger = logging.getLogger("amodal")

AGENTS_DIR = "agents"
AGENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
AGENT_FILES = ("AGENT.md", "agent.json", "agent.py", "CONTEXT.md")
_DEFAULTS = AgentConfig()
_LIST_FIELDS = ("tools", "skills", "subagents", "connections", "mcp")
# Module-level names of agent.py that would be mistaken for configuration.
_CONFIG_NAMES = CONFIG_FIELDS | set(AgentConfig.model_fields)


@dataclass(frozen=True, slots=True)
class _Config:
    """A parsed configuration and the file it came from."""

    config: AgentConfig
    source: Source
    fields: frozenset[str]  # the aliases the file actually sets
    broken: frozenset[str] = frozenset()
    """Aliases it sets whose values are wrong (reported): `config` holds their defaults."""


@dataclass(frozen=True, slots=True)
class PartialAgent:
    """An agent with errors of its own, built from the parts that are right, so that the
    references those parts make are checked in the same pass (every problem at once)."""

    definition: AgentDefinition
    broken_fields: frozenset[str]
    """The fields whose values were wrong: checks that read them are skipped."""


@dataclass(frozen=True, slots=True)
class LoadedAgents:
    agents: list[AgentDefinition]
    main: MainDefinition
    broken: frozenset[str]  # agents that exist but failed to load: not "unknown" to others
    partial: tuple[PartialAgent, ...] = ()


def load_agents(reader: Reader) -> LoadedAgents:
    agents: list[AgentDefinition] = []
    broken: set[str] = set()
    partials: list[PartialAgent] = []
    main = MainDefinition(None, frozenset(), "")
    if not reader.is_dir(AGENTS_DIR):
        reader.report.warn(AGENTS_DIR, "the repo has no agents/ directory")
        return LoadedAgents(agents, main, frozenset())
    for name, kind in reader.listing(AGENTS_DIR).items():
        relative = f"{AGENTS_DIR}/{name}"
        entry = reader.root / relative
        if kind != "dir":
            reader.report.warn(relative, "ignored: an agent is a folder `agents/<name>/`")
        elif not reader.is_file(f"{relative}/AGENT.md"):
            reader.report.warn(
                relative,
                "ignored: the folder has no AGENT.md, so it defines no "
                "agent (add AGENT.md with the agent's prompt)",
            )
        elif not AGENT_NAME.match(entry.name):
            reader.report.error(
                relative,
                f"agent name {entry.name!r} must be 1-64 lowercase "
                "letters, digits, '-' or '_', starting with a letter or digit "
                "(rename the folder)",
            )
        elif entry.name == MAIN_AGENT:
            main = reader.unit(relative, partial(_load_main, reader, entry))
        else:
            agent = reader.unit(relative, partial(_load_agent, reader, entry))
            if isinstance(agent, AgentDefinition):
                agents.append(agent)
                continue
            broken.add(entry.name)
            if agent is not None:
                partials.append(agent)
    return LoadedAgents(agents, main, frozenset(broken), tuple(partials))


def _load_agent(reader: Reader, folder: Path) -> AgentDefinition | PartialAgent | None:
    """The agent's definition; with errors of its own, what can be built of it."""
    report, name = reader.report, folder.name
    base = f"{AGENTS_DIR}/{name}"
    _warn_extra_files(reader, base)
    errors_before = len(report.errors)

    prompt, front = _read_agent_md(reader, f"{base}/AGENT.md", allow_empty=False)
    from_json = (
        _read_agent_json(reader, f"{base}/agent.json")
        if reader.is_file(f"{base}/agent.json")
        else None
    )
    from_py = (
        _read_agent_py(reader, folder / "agent.py", f"{base}/agent.py")
        if reader.is_file(f"{base}/agent.py")
        else None
    )
    from_front = _frontmatter_config(
        report,
        front,
        has_files=reader.is_file(f"{base}/agent.json") or reader.is_file(f"{base}/agent.py"),
    )
    context = (
        _read_context(reader, f"{base}/CONTEXT.md")
        if reader.is_file(f"{base}/CONTEXT.md")
        else None
    )

    if from_json and from_py:
        overridden = sorted(from_json.fields & from_py.fields)
        if overridden:
            logger.warning(
                "agent_definition_overrides_json",
                extra={
                    "event": "agent_definition_overrides_json",
                    "agent": name,
                    "fields": overridden,
                },
            )
    layers = [layer for layer in (from_front, from_json, from_py) if layer is not None]
    # Built even without a prompt, so agent.py's predicates are checked in the same pass.
    definition = _definition(reader, name, layers, prompt or Template("", base), context)
    if prompt is not None and len(report.errors) == errors_before:
        return definition
    if definition is None:
        return None
    return PartialAgent(definition, frozenset().union(*(layer.broken for layer in layers)))


def _definition(
    reader: Reader, name: str, layers: list[_Config], prompt: Template, context: Template | None
) -> AgentDefinition | None:
    """Merge the configuration files (later layers win field by field) into a definition."""

    def pick(alias: str) -> _Config | None:
        chosen = None
        for layer in layers:
            if alias in layer.fields:
                chosen = layer
        return chosen

    def value(alias: str, attribute: str) -> Any:
        layer = pick(alias)
        return getattr(layer.config, attribute) if layer else getattr(_DEFAULTS, attribute)

    entries: dict[str, tuple[Declared, ...]] = {}
    for field in _LIST_FIELDS:
        layer = pick(field)
        items: tuple[Entry, ...] = getattr(layer.config, field) if layer else ()
        entries[field] = tuple(
            Declared(
                item.name,
                _origin(layer, (field, index)),
                _predicate(reader.report, layer, (field, index), item),
            )
            for index, item in enumerate(items)
        )
    store_layer = pick("stores")
    stores = tuple(
        StoreGrant(
            store,
            access.mode,
            _origin(store_layer, ("stores", store)),
            _predicate(reader.report, store_layer, ("stores", store), access),
        )
        for store, access in (store_layer.config.stores.items() if store_layer else ())
    )
    persona = value("persona", "persona")
    settings = value("modelSettings", "model_settings")
    display = value("displayName", "display_name") if pick("displayName") else value("name", "name")
    return AgentDefinition(
        name=name,
        display_name=display or name,
        description=value("description", "description"),
        role=value("role", "role"),
        tone=persona.tone if persona else None,
        personality=persona.personality if persona else None,
        tools=entries["tools"],
        skills=entries["skills"],
        subagents=entries["subagents"],
        connections=entries["connections"],
        mcp=entries["mcp"],
        stores=stores,
        max_tool_calls=value("maxToolCalls", "max_tool_calls"),
        model_tier=value("modelTier", "model_tier"),
        model_settings=ModelSettings(settings.temperature, settings.max_tokens)
        if settings
        else ModelSettings(),
        compaction=value("compaction", "compaction"),
        memory_config=value("memory", "memory"),
        prompt=prompt,
        context=context,
        digest=reader.digest(f"{AGENTS_DIR}/{name}/"),
        limits=value("limits", "limits"),
        limits_origin=_origin(pick("limits"), ("limits",)),
    )


def _origin(layer: _Config | None, path: tuple[str | int, ...]) -> Origin:
    if layer is None:
        return Origin("")
    source = layer.source
    return Origin(source.path, format_field(path), lambda: source.line(path))


def _predicate(
    report: Report, layer: _Config | None, path: tuple[str | int, ...], entry: Entry | StoreAccess
) -> Any:
    """The entry's predicate, after checking it may have one and that it is well-formed."""
    if layer is None or "conditional" not in entry.model_fields_set:
        return None
    conditional = entry.conditional
    field = format_field((*path, "conditional"))
    # The line only for an error: mapping lines parses the file again (ast for agent.py).
    if layer.source.syntax != "python":
        report.error(
            layer.source.path,
            "`conditional` is not allowed here: predicates are "
            "Python functions and live in agent.py",
            line=layer.source.line((*path, "conditional")),
            field=field,
        )
        return None
    if conditional is None:
        return None  # `"conditional": None` in agent.py: no predicate, as if absent
    problem = predicate_problem(conditional)
    if problem:
        line = callable_line(conditional) or layer.source.line((*path, "conditional"))
        report.error(layer.source.path, problem, line=line, field=field)
        return None
    return conditional


def _read_agent_md(
    reader: Reader, relative: str, *, allow_empty: bool
) -> tuple[Template | None, tuple[dict[str, Any], Source] | None]:
    """The prompt template and the frontmatter (data and source) of an AGENT.md."""
    report = reader.report
    text = reader.read(relative)
    if text is None:
        return None, None
    document = _markdown.split(text)
    if document.unclosed_frontmatter:
        report.error(
            relative,
            "the frontmatter opened by `---` on line 1 is never closed (end it with a line `---`)",
            line=1,
        )
        return None, None
    front = None
    if document.frontmatter is not None:
        source = Source(relative, document.frontmatter, "yaml", first_line=2)
        data = report.parse_yaml(source)
        if data is not None and not isinstance(data, dict):
            report.error(relative, "the frontmatter must be YAML key: value pairs", line=2)
        elif isinstance(data, dict):
            front = (data, source)

    found_sections = _markdown.sections(document.body, ("Config", "Prompt"))
    config_section = found_sections.get("config")
    if config_section is not None:
        report.warn(
            relative,
            "the `## Config` section is not parsed; put configuration in "
            "agent.json, agent.py or the frontmatter",
            line=document.body_line + config_section[1] - 1,
        )
    found = found_sections.get("prompt")
    body, offset = found if found else (document.body, 0)
    stripped = body.lstrip("\n")
    first_line = document.body_line + offset + body[: len(body) - len(stripped)].count("\n")
    prompt = stripped.rstrip()
    if not prompt:
        if not allow_empty:
            report.error(
                relative,
                "the prompt is empty: write the agent's instructions in "
                "AGENT.md" + (" under `## Prompt`" if found else ""),
                line=document.body_line,
            )
        return None, front
    if not _check_template(report, relative, prompt, first_line):
        return None, front
    return Template(prompt, relative, first_line), front


def _read_context(reader: Reader, relative: str) -> Template | None:
    text = reader.read(relative)
    if text is None or not _check_template(reader.report, relative, text, 1):
        return None
    if not text.strip():
        reader.report.warn(relative, "CONTEXT.md is empty")
        return None
    return Template(text, relative, 1)


def _check_template(report: Report, relative: str, text: str, first_line: int) -> bool:
    try:
        problems = check_template(text)
    except RecursionError:  # Jinja's parser recurses once per nested expression
        problems = [(1, "the template nests expressions too deeply to compile")]
    for line, message in problems:
        report.error(relative, message, line=first_line + line - 1)
    return not problems


def _read_agent_json(reader: Reader, relative: str) -> _Config | None:
    report = reader.report
    text = reader.read(relative)
    if text is None:
        return None
    source = Source(relative, text)
    data = report.parse_json(source)
    if data is None:
        return None
    if not isinstance(data, dict):
        report.error(relative, "agent.json must be a JSON object", line=1)
        return None
    return _validated(report, AgentConfig, data, source)


def _validated(
    report: Report, model: type[AgentConfig], data: dict[str, Any], source: Source
) -> _Config | None:
    """`data` as `model`; when some fields are wrong, each problem is reported and the
    configuration keeps the fields that are right (the others at their defaults, listed in
    `broken`), so the references they make are checked in the same pass."""
    try:
        return _Config(model.model_validate(data), source, frozenset(data))
    except ValidationError as error:
        wrong = {str(detail["loc"][0]) for detail in error.errors() if detail["loc"]}
    report.validate(model, data, source)  # reports every problem, with its line
    kept = {key: value for key, value in data.items() if key not in wrong}
    try:
        config = model.model_validate(kept)
    except ValidationError:
        return None  # the problems are not of single fields: nothing is kept
    return _Config(config, source, frozenset(data), frozenset(wrong & set(data)))


def _read_agent_py(reader: Reader, path: Path, relative: str) -> _Config | None:
    report = reader.report
    text = reader.read(relative)
    if text is None:
        return None
    namespace = run_module(path, text, relative, report)
    if namespace is None:
        return None
    source = Source(relative, text, "python")
    misplaced = sorted(_CONFIG_NAMES & namespace.keys())
    for name in misplaced:
        report.error(
            relative,
            f"module-level {name!r} looks like configuration: put it inside the `agent` dict",
            line=source.line(("<global>", name)),
            field=name,
        )
    agent = namespace.get("agent")
    if agent is None:
        report.error(
            relative,
            "agent.py must bind a module-level `agent` dict with the same "
            'fields as agent.json, e.g. agent = {"tools": [...]}',
        )
        return None
    if not isinstance(agent, dict):
        report.error(
            relative,
            f"`agent` must be a dict, got {type(agent).__name__}",
            line=source.line(("<global>", "agent")),
            field="agent",
        )
        return None
    return _validated(report, AgentConfig, agent, source)


def _frontmatter_config(
    report: Report, front: tuple[dict[str, Any], Source] | None, *, has_files: bool
) -> _Config | None:
    if front is None:
        return None
    data, source = front
    if "name" in data:
        report.error(
            source.path,
            "in AGENT.md frontmatter the display name is `displayName`",
            line=source.line(("name",)),
            field="name",
        )
        return None
    if has_files:
        for key in sorted(set(data) & (CONFIG_FIELDS | {"displayName"})):
            report.error(
                source.path,
                f"{key!r} is configuration, and this agent has agent.json "
                "or agent.py: keep each field in one file (move it there)",
                line=source.line((key,)),
                field=key,
            )
        data = {
            key: value for key, value in data.items() if key not in CONFIG_FIELDS | {"displayName"}
        }
    return _validated(report, FrontmatterConfig, data, source)


def _warn_extra_files(reader: Reader, base: str) -> None:
    for name in reader.listing(base):
        if name not in AGENT_FILES and name != "__pycache__":
            reader.report.warn(
                f"{base}/{name}",
                "ignored: an agent folder holds only " + ", ".join(AGENT_FILES),
            )


def _load_main(reader: Reader, folder: Path) -> MainDefinition:
    """`agents/main/`: the prompt of unscoped chat; agent.json may only opt into file tools."""
    report = reader.report
    base = f"{AGENTS_DIR}/{MAIN_AGENT}"
    prompt, front = _read_agent_md(reader, f"{base}/AGENT.md", allow_empty=True)
    if front is not None:
        report.warn(
            f"{base}/AGENT.md",
            "frontmatter of main is ignored: unscoped chat is not restricted",
            line=2,
        )
    for ignored in ("agent.py", "CONTEXT.md"):
        if reader.is_file(f"{base}/{ignored}"):
            report.warn(f"{base}/{ignored}", f"ignored: main takes no {ignored}")
    tools: frozenset[str] = frozenset()
    if prompt is None:
        if reader.is_file(f"{base}/agent.json"):
            report.warn(f"{base}/agent.json", "ignored: main/AGENT.md is empty")
        return MainDefinition(None, tools, reader.digest(f"{base}/"))
    if reader.is_file(f"{base}/agent.json"):
        parsed = _read_agent_json(reader, f"{base}/agent.json")
        if parsed is not None and not parsed.broken:
            tools = _main_tools(report, parsed)
    return MainDefinition(prompt, tools, reader.digest(f"{base}/"))


def _main_tools(report: Report, parsed: _Config) -> frozenset[str]:
    for key in sorted(parsed.fields - {"tools"}):
        report.warn(
            parsed.source.path,
            f"{key!r} is ignored: main/agent.json may only opt "
            "unscoped chat into file tools through `tools`",
            line=parsed.source.line((key,)),
            field=key,
        )
    tools = set()
    for index, entry in enumerate(parsed.config.tools):
        if entry.name in FILE_TOOLS:
            tools.add(entry.name)
        else:
            report.error(
                parsed.source.path,
                f"{entry.name!r}: main/agent.json `tools` may only "
                f"list {', '.join(FILE_TOOLS)} (unscoped chat has every other tool)",
                line=parsed.source.line(("tools", index)),
                field=f"tools[{index}]",
            )
    return frozenset(tools)
