"""Reading a whole agent repo into a Bundle, or into the complete list of what is wrong."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from runtime.exceptions import DefinitionError, DefinitionWarning, InvalidRepoError
from runtime.repo._checks import MEMO
from runtime.repo._reader import LoadCache, Reader, split_suffix
from runtime.repo._report import Report, did_you_mean, known, normalized
from runtime.repo.agents import load_agents
from runtime.repo.bundle import (
    DEFAULT_AGENT,
    MAIN_AGENT,
    AgentDefinition,
    Bundle,
    CustomTool,
    Declared,
    McpServerDefinition,
    StoreDefinition,
    server_of,
)
from runtime.repo.config import cost_limit, load_config, unpriced_message, unpriced_models
from runtime.repo.custom_tools import TOOLS_DIR, load_custom_tools
from runtime.repo.formats import RepoConfig
from runtime.repo.integrations import load_connections
from runtime.repo.knowledge import load_knowledge
from runtime.repo.registry import (
    MEMORY_TOOLS,
    REQUEST,
    ToolInfo,
    builtin_tools,
    custom_tools,
    duplicates,
    store_ops,
    store_tools,
)
from runtime.repo.skills import LoadedSkill, load_skills
from runtime.repo.store_files import STORES_DIR, load_stores

if TYPE_CHECKING:
    from runtime.repo.automations import AutomationDefinition
    from runtime.repo.eval_suites import Suite

_AUTOMATIONS_DIR = "automations"
_EVALS_DIR = "evals"
"""runtime.repo.automations.AUTOMATIONS_DIR and runtime.repo.evals.EVALS_DIR: those
modules (croniter's, the formats of each) are imported only for a repo with the folder."""


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What a load found: a bundle when the repo is valid, and every finding either way."""

    bundle: Bundle | None
    errors: tuple[DefinitionError, ...]
    warnings: tuple[DefinitionWarning, ...]
    suites: tuple[Suite, ...] = ()
    """The eval suites of `evals/`, when the load was asked for them (`evals=True`)."""

    @property
    def ok(self) -> bool:
        return self.bundle is not None


def load_repo(
    root: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    offline: bool = False,
    evals: bool = False,
    cache: LoadCache | None = None,
) -> LoadResult:
    """Read and validate the agent repo at `root`; never raises for a problem in the repo.

    `environ` resolves `env:NAME` references (default: the process environment);
    `offline` checks only their form, for validating without the deployment's secrets;
    `evals` also reads and checks the eval suites of `evals/` (their problems are the
    repo's errors then), which a served bundle never needs. `cache` (a reload keeps one
    between loads of a repo) reuses each agent, skill, store, knowledge document and
    custom tool whose files did not change: the result is the same as without it.
    """
    if cache is not None:
        cache.begin()
    report = Report()
    reader = Reader(Path(root).resolve(), report, cache)
    environ = os.environ if environ is None else environ
    config, config_secrets = load_config(reader, environ, offline)
    stores = load_stores(reader)
    knowledge = load_knowledge(reader)
    tools = load_custom_tools(reader)
    loaded_skills = load_skills(reader)
    skills = loaded_skills.skills
    outside = load_connections(reader, config, config_secrets, environ, offline)
    loaded_agents = load_agents(reader)
    agents, main = loaded_agents.agents, loaded_agents.main
    if cache is not None:
        cache.end()

    registry = _registry(report, stores, tools)
    broken = (
        loaded_agents.broken
        | loaded_skills.broken
        | _failed(reader, STORES_DIR, {store.name for store in stores}, folders=False)
        | _failed(reader, TOOLS_DIR, {tool.name for tool in tools}, folders=True)
        | outside.broken
    )
    _check_custom_tool_names(report, tools, outside.mcp)
    names = _Names(
        tools=MappingProxyType(registry),
        skills={loaded.skill.name: loaded for loaded in skills},
        agents=frozenset(agent.name for agent in agents),
        broken_agents=loaded_agents.broken,
        broken=frozenset(normalized(name) for name in broken),
        stores=frozenset(store.name for store in stores),
        connections=frozenset(outside.rest),
        mcp=frozenset(outside.mcp) if config else None,
    )
    for loaded in skills:
        _check_skill_tools(report, loaded, names)
    for agent in agents:
        _check_agent(report, agent, names)
        if config is not None:
            _check_prices(report, agent, config)
    for partial in loaded_agents.partial:
        # An agent with errors of its own: what is right of it is checked too, so a repo
        # with typos shows every one of them in one pass.
        _check_agent(report, partial.definition, names, broken_fields=partial.broken_fields)
    _check_display_names(report, agents)
    _warn_specialist_confirmations(report, agents, tools, outside.mcp)
    suites: list[Suite] = []
    if evals and reader.is_dir(_EVALS_DIR):
        # Only `amodal validate` and `amodal eval` read the suites, of a repo that has
        # some: their formats (and the turn events they name) are imported then.
        from runtime.repo.evals import EvalNames, load_suites

        # A reader of its own: suites are not part of what the bundle version hashes.
        suites = load_suites(
            Reader(reader.root, report),
            EvalNames(
                tools=frozenset(registry),
                agents=names.agents,
                stores=MappingProxyType({store.name: store for store in stores}),
                mcp=names.mcp,
                is_broken=names.is_broken,
            ),
        )

    automations, automation_errors = _automations(reader, names, environ, offline)
    MEMO.flush()  # the checks that passed, for the next process (runtime/repo/_checks.py)
    if report.errors or config is None:
        errors = (*report.errors, *automation_errors)
        return LoadResult(None, errors, tuple(report.warnings))
    bundle = Bundle(
        root=reader.root,
        version=reader.digest(),
        config=config,
        agents=MappingProxyType({agent.name: agent for agent in agents}),
        main=main,
        skills=MappingProxyType({loaded.skill.name: loaded.skill for loaded in skills}),
        knowledge=MappingProxyType({doc.name: doc for doc in knowledge}),
        stores=MappingProxyType({store.name: store for store in stores}),
        tools=MappingProxyType({tool.name: tool for tool in tools}),
        connections=MappingProxyType(outside.rest),
        mcp_servers=MappingProxyType(outside.mcp),
        registry=MappingProxyType(registry),
        warnings=tuple(report.warnings),
        automations=MappingProxyType(automations),
        automation_errors=automation_errors,
    )
    return LoadResult(bundle, (), bundle.warnings, tuple(suites))


def _automations(
    reader: Reader, names: _Names, environ: Mapping[str, str], offline: bool
) -> tuple[dict[str, AutomationDefinition], tuple[DefinitionError, ...]]:
    if not reader.is_dir(_AUTOMATIONS_DIR):
        return {}, ()
    from runtime.repo.automations import load_automations, names_of

    loaded = load_automations(reader, names_of(names.agents, names.stores), environ, offline)
    return dict(loaded.automations), loaded.errors


def load_bundle(
    root: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
) -> Bundle:
    """The bundle of a valid repo; raises InvalidRepoError listing every error otherwise."""
    result = load_repo(root, environ=environ)
    if result.bundle is None:
        raise InvalidRepoError(result.errors, result.warnings)
    return result.bundle


@dataclass(frozen=True, slots=True)
class _Names:
    """Everything a declaration may refer to."""

    tools: Mapping[str, ToolInfo]
    skills: Mapping[str, LoadedSkill]
    agents: frozenset[str]
    broken_agents: frozenset[str]
    """Agents that exist but have errors: a reference to one is not unknown, and a typo
    of one is still offered as a did-you-mean."""
    stores: frozenset[str]
    connections: frozenset[str]
    mcp: frozenset[str] | None  # None when amodal.json failed: MCP names cannot be checked
    broken: frozenset[str]  # normalized names of what exists but failed to load

    def is_broken(self, name: str) -> bool:
        """True for a reference to something whose own errors are reported already."""
        return normalized(name) in self.broken


def _registry(
    report: Report, stores: Iterable[StoreDefinition], tools: Iterable[CustomTool]
) -> dict[str, ToolInfo]:
    infos = builtin_tools()
    for store in stores:
        infos += store_tools(store.name, store.entity)
    infos += custom_tools({tool.name: tool.description for tool in tools})
    for name, found in duplicates(infos).items():
        sources = ", ".join(f"{info.kind} tool" for info in found)
        report.error(
            f"tools/{name}",
            f"tool name {name!r} is defined more than once ({sources}); rename the custom tool",
        )
    return {info.name: info for info in infos}


def _failed(reader: Reader, directory: str, loaded: set[str], *, folders: bool) -> set[str]:
    """Names of the stores (`<name>.json` files) or custom tools (folders) under `directory`
    that exist but failed to load: their own errors are reported, references to them are not."""
    if not reader.is_dir(directory):
        return set()
    found = {
        split_suffix(name)[0]
        for name, kind in reader.listing(directory).items()
        if (kind == "dir" if folders else kind == "file" and split_suffix(name)[1] == ".json")
    }
    return found - loaded


def _check_agent(
    report: Report,
    agent: AgentDefinition,
    names: _Names,
    *,
    broken_fields: frozenset[str] = frozenset(),
) -> None:
    """The references `agent` makes. `broken_fields` are fields reported wrong already: the
    checks that read them are skipped, so one mistake is never reported twice."""
    declared_stores = {grant.store: grant.mode for grant in agent.stores}
    stores_known = "stores" not in broken_fields
    for entry in agent.tools:
        _check_tool(report, entry, names, declared_stores if stores_known else None)
    for entry in agent.skills:
        _check_skill(report, entry, names)
    for entry in agent.subagents:
        if entry.name in (DEFAULT_AGENT, MAIN_AGENT):
            _fail(report, entry, f"{entry.name!r} is never callable as a specialist")
        elif entry.name not in names.agents and not names.is_broken(entry.name):
            _unknown(report, entry, "agent", names.agents | names.broken_agents)
    for entry in agent.connections:
        if names.mcp is not None and entry.name in names.mcp:
            _fail(report, entry, f"{entry.name!r} is an MCP server: list it under `mcp`")
        elif entry.name not in names.connections and not names.is_broken(entry.name):
            _unknown(report, entry, "connection", names.connections)
    for entry in agent.mcp:
        if entry.name in names.connections:
            _fail(
                report, entry, f"{entry.name!r} is a REST connection: list it under `connections`"
            )
        elif (
            names.mcp is not None
            and entry.name not in names.mcp
            and not names.is_broken(entry.name)
        ):
            _unknown(report, entry, "MCP server", names.mcp)
    for grant in agent.stores:
        if grant.store not in names.stores and not names.is_broken(grant.store):
            report.error(
                grant.origin.file,
                f"unknown store {grant.store!r}"
                f"{did_you_mean(grant.store, names.stores)}; "
                f"{known('stores', names.stores)}",
                line=grant.origin.line,
                field=grant.origin.field,
            )
    if (
        agent.skills
        and not broken_fields  # a typo of `tools` is reported already
        and "load_skill" not in {entry.name for entry in agent.tools}
    ):
        report.warn(
            agent.skills[0].origin.file,
            f"agent {agent.name!r} declares skills but not "
            "the `load_skill` tool: it sees their names and descriptions only",
            line=agent.skills[0].origin.line,
            field="skills",
        )


def _check_prices(report: Report, agent: AgentDefinition, config: RepoConfig) -> None:
    """An agent's cost limit needs every model it may call to have a price (SPEC 22)."""
    limit = cost_limit(agent.limits)
    if limit is None or cost_limit(config.limits) is not None:  # amodal.json's says it already
        return
    origin = agent.limits_origin
    for name in unpriced_models(config):
        report.error(
            origin.file,
            unpriced_message(name, limit),
            line=origin.line,
            field=f"limits.{limit}",
        )


def _check_tool(
    report: Report, entry: Declared, names: _Names, declared_stores: Mapping[str, str] | None
) -> None:
    """One entry of `tools`; `declared_stores` None when the agent's `stores` is broken."""
    name = entry.name
    if _is_mcp_tool(name, names):
        return  # an MCP tool: its names are known only once the server is reached
    if name == REQUEST:
        _fail(report, entry, "`request` comes with connections: list them under `connections`")
        return
    if name in MEMORY_TOOLS:
        _fail(report, entry, f'{name!r} comes with memory: set `"memory": true` instead')
        return
    info = names.tools.get(name)
    if info is None:
        store = name.removeprefix("store__").rpartition("__")[0]
        if not names.is_broken(name) and not (
            name.startswith("store__") and names.is_broken(store)
        ):
            _unknown(report, entry, "tool", names.tools)
        return
    # By the registry's kind, not the name: a custom tool may be called `store__x`.
    if info.kind == "store" and info.store is not None and info.op is not None:
        if declared_stores is None:
            return
        if info.store not in declared_stores:
            _fail(report, entry, f"{name!r} needs its store declared under `stores`")
        elif info.op not in store_ops(declared_stores[info.store]):  # type: ignore[arg-type]
            _fail(
                report,
                entry,
                f"{name!r} needs store {info.store!r} with mode 'rw' (declared "
                f"{declared_stores[info.store]!r})",
            )


def _check_skill(report: Report, entry: Declared, names: _Names) -> None:
    if entry.name in names.skills or names.is_broken(entry.name):
        return
    by_folder = {loaded.folder: loaded.skill.name for loaded in names.skills.values()}
    if entry.name in by_folder:
        _fail(
            report,
            entry,
            f"unknown skill {entry.name!r}: skills are referenced by their "
            f"name, not their folder; skills/{entry.name}/SKILL.md is "
            f"{by_folder[entry.name]!r}",
        )
    else:
        _unknown(report, entry, "skill", names.skills)


def _is_mcp_tool(name: str, names: _Names) -> bool:
    if name.startswith("store__") or "__" not in name:
        return False
    if names.mcp is None:
        return True  # amodal.json failed: its servers cannot be checked
    return server_of(name, names.mcp) is not None or names.is_broken(name.split("__", 1)[0])


def _check_custom_tool_names(
    report: Report, tools: Iterable[CustomTool], servers: Mapping[str, object]
) -> None:
    for tool in tools:
        server = server_of(tool.name, servers)
        if server is not None:
            report.error(
                tool.file,
                f"custom tool {tool.name!r} would collide with the tools of MCP server "
                f"{server!r} (`{server.replace('-', '_')}__<tool>`); rename the tool",
            )


def _check_skill_tools(report: Report, loaded: LoadedSkill, names: _Names) -> None:
    for index, tool in enumerate(loaded.skill.allowed_tools):
        if _is_mcp_tool(tool, names):
            continue
        if tool not in names.tools:
            report.error(
                loaded.skill.file,
                f"unknown tool {tool!r}"
                f"{did_you_mean(tool, names.tools)}; {known('tools', names.tools)}",
                line=loaded.source.line(("allowedTools", index)),
                field=f"allowedTools[{index}]",
            )


def _unknown(report: Report, entry: Declared, kind: str, candidates: Iterable[str]) -> None:
    options = list(candidates)
    _fail(
        report,
        entry,
        f"unknown {kind} {entry.name!r}{did_you_mean(entry.name, options)}; "
        f"{known(kind + 's', options)}",
    )


def _fail(report: Report, entry: Declared, message: str) -> None:
    report.error(entry.origin.file, message, line=entry.origin.line, field=entry.origin.field)


def _warn_specialist_confirmations(
    report: Report,
    agents: list[AgentDefinition],
    tools: Iterable[CustomTool],
    servers: Mapping[str, McpServerDefinition],
) -> None:
    """A tool that needs a person's approval, on an agent other agents call as a
    specialist: a specialist is denied it (SPEC 7.4), so there it can never run."""
    confirming = {tool.name for tool in tools if tool.confirm}
    callers: dict[str, list[str]] = {}
    for agent in agents:
        for entry in agent.subagents:
            callers.setdefault(entry.name, []).append(agent.name)
    for agent in agents:
        if agent.name not in callers:
            continue
        confirmed_servers = [
            entry
            for entry in agent.mcp
            if entry.name in servers and servers[entry.name].confirm is True
        ]
        for entry in [*agent.tools, *confirmed_servers]:
            if entry in confirmed_servers:
                _warn_denied(report, entry, agent.name, callers[agent.name], "every tool of ")
                continue
            server = server_of(entry.name, servers)
            needs = entry.name in confirming or (
                server is not None
                and servers[server].needs_confirmation(
                    entry.name.removeprefix(servers[server].prefix)
                )
            )
            if needs:
                _warn_denied(report, entry, agent.name, callers[agent.name], "")


def _warn_denied(
    report: Report, entry: Declared, agent: str, callers: list[str], what: str
) -> None:
    by = ", ".join(repr(name) for name in sorted(callers))
    report.warn(
        entry.origin.file,
        f"{what}{entry.name!r} needs a person's approval, and {agent!r} is a specialist of "
        f"{by}: a specialist is denied such tools, so it runs only when a chat is rooted on "
        f"{agent!r} (give the tool to the agent that calls the specialist instead)",
        line=entry.origin.line,
        field=entry.origin.field,
    )


def _check_display_names(report: Report, agents: list[AgentDefinition]) -> None:
    seen: dict[str, AgentDefinition] = {}
    for agent in agents:
        key = agent.display_name.lower()
        if key in seen:
            report.error(
                f"agents/{agent.name}",
                f"display name {agent.display_name!r} is "
                f"already used by agents/{seen[key].name}; display names are unique "
                "ignoring case",
            )
        else:
            seen[key] = agent


__all__ = ["LoadCache", "LoadResult", "load_bundle", "load_repo"]
