"""`amodal import opencode`: OpenCode agents and skills (SPEC 19).

Reads `.opencode/agent(s)/**/*.md` (nested folders give `review/security`), the `agent`
entries of `opencode.json(c)`, and `skill(s)/*/SKILL.md`. OpenCode decides what an agent
may do with ordered permission rules where the last match wins; this module evaluates
them the same way (OpenCode's defaults, then the config's `permission`, then the agent's
legacy `tools` map and `permission`) and grants a runtime tool only where OpenCode would
run it for every input without asking, so an import never grants more than the source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.importers._skills import read_skill
from runtime.importers._source import (
    SourceError,
    folders_named,
    markdown_files,
    normalised,
    outside,
    read_jsonc,
    read_markdown,
    read_text,
    skill_files,
)
from runtime.importers.report import ImportReport, Outcome
from runtime.importers.writer import AgentDraft, Drafts, declared_mcp_servers, run_import

FORMAT = "opencode"
CONFIG_NAMES = ("opencode.json", "opencode.jsonc")
BUILTIN_AGENTS = frozenset(
    {"build", "plan", "general", "explore", "title", "summary", "compaction"}
)
# Runtime tool -> the OpenCode permission that gates its equivalent.
PERMISSIONS = {
    "read_file": "read",
    "write_file": "edit",
    "list_files": "list",
    "glob_files": "glob",
    "grep_files": "grep",
}
_EDIT_TOOLS = frozenset({"edit", "write", "patch", "multiedit", "apply_patch"})
_SHELL = (
    "no shell tool in the runtime (left out on purpose, for safety); give the agent an MCP "
    "server or a custom tool (tools/) that runs exactly the commands it needs"
)
NO_EQUIVALENT: dict[str, str] = {
    "bash": _SHELL,
    "webfetch": "no web tool; declare a REST connection (connections/) or an MCP server",
    "websearch": "no web search; declare an MCP server that searches",
    "codesearch": "no code search service; grep_files and glob_files search the files",
    "lsp": "no language server tool",
    "todowrite": "no to-do tool; the agent keeps its plan in its replies or in a store",
    "todoread": "no to-do tool; the agent keeps its plan in its replies or in a store",
    "external_directory": "the file tools never reach outside the file-tool root",
}
_KNOWN = frozenset({*PERMISSIONS.values(), *_EDIT_TOOLS, "task", "skill", "question"})
WITHOUT_TOOL: dict[str, str] = {
    "doom_loop": "no loop detection; the run's maxToolCalls budget bounds a loop instead",
    "plan_enter": "no plan mode; the agent answers with its plan",
    "plan_exit": "no plan mode; the agent answers with its plan",
}
"""OpenCode permissions that gate a behaviour, not a tool: set by an agent, each is reported."""
FIELDS_WITHOUT_EQUIVALENT: dict[str, str] = {
    "top_p": "no top_p setting; modelSettings has temperature and maxTokens",
    "hidden": "every agent is listed; it stays callable by the agents that list it",
    "color": "the runtime shows no agent colours; dropped",
    "variant": "no model variants; the agent uses its tier's model",
    "options": "no provider options; the endpoint's defaults apply",
}
_HANDLED = frozenset(
    {
        "description",
        "mode",
        "model",
        "temperature",
        "prompt",
        "tools",
        "permission",
        "permissions",
        "disable",
        "steps",
        "maxSteps",
        "name",
    }
)
_FILE_REFERENCE = re.compile(r"^\{file:(.+)\}$")


@dataclass(frozen=True, slots=True)
class Rule:
    """One permission rule: `permission` and `pattern` are wildcards; `layer` says whose
    rule it is (0: OpenCode's defaults, 1: the config, 2: the agent, 3: subagent runs)."""

    permission: str
    pattern: str
    action: str
    layer: int


DEFAULTS = (
    Rule("*", "*", "allow", 0),
    Rule("doom_loop", "*", "ask", 0),
    Rule("external_directory", "*", "ask", 0),
    Rule("question", "*", "deny", 0),
    Rule("plan_enter", "*", "deny", 0),
    Rule("plan_exit", "*", "deny", 0),
    Rule("read", "*", "allow", 0),
    Rule("read", "*.env", "ask", 0),
    Rule("read", "*.env.*", "ask", 0),
    Rule("read", "*.env.example", "allow", 0),
)


def wildcard(value: str, pattern: str) -> bool:
    """OpenCode's match: `*` any characters, `?` one, the rest literal, the whole value;
    a pattern ending in ` *` also matches the bare command."""
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    if regex.endswith(r"\ .*"):
        regex = regex[:-4] + "( .*)?"
    return re.fullmatch(regex, value, re.DOTALL) is not None


def rules_from(value: Any, layer: int) -> list[Rule]:
    """A `permission` value (an action, or a map of actions or of pattern maps), or a V2
    `permissions` list, as rules in their written order."""
    if isinstance(value, str):
        return [Rule("*", "*", value, layer)]
    rules = []
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                rules.append(
                    Rule(
                        str(item.get("action", "*")),
                        str(item.get("resource", "*")),
                        str(item.get("effect", "ask")),
                        layer,
                    )
                )
        return rules
    for key, entry in (value or {}).items():
        if isinstance(entry, str):
            rules.append(Rule(str(key), "*", entry, layer))
        elif isinstance(entry, dict):
            rules.extend(Rule(str(key), str(p), str(a), layer) for p, a in entry.items())
    return rules


def agent_permission(entry: dict[str, Any]) -> dict[str, Any]:
    """The legacy `tools` map turned into permissions, then `permission` assigned over it
    (a key in both keeps the first one's place, as JavaScript's Object.assign does)."""
    merged: dict[str, Any] = {}
    tools = entry.get("tools")
    for tool, enabled in (tools if isinstance(tools, dict) else {}).items():
        key = "edit" if tool in _EDIT_TOOLS else str(tool)
        merged[key] = "allow" if enabled else "deny"
    permission = entry.get("permission")
    if isinstance(permission, str):
        permission = {"*": permission}
    merged.update(permission if isinstance(permission, dict) else {})
    return merged


def _shape_warnings(entry: dict[str, Any]) -> list[str]:
    """Warnings for `tools` and `permission` values OpenCode would not read (ignored)."""
    warnings = []
    tools = entry.get("tools")
    if tools is not None and not isinstance(tools, dict):
        warnings.append(
            f"tools: {tools!r} is not a map of tool names to true or false, as OpenCode "
            "reads it; ignored"
        )
    permission = entry.get("permission")
    if permission is not None and not isinstance(permission, str | dict):
        warnings.append(f"permission: {permission!r} is not an action or a map; ignored")
    return warnings


def evaluate(permission: str, pattern: str, rules: list[Rule]) -> str:
    """The action of the last rule matching both; `ask` when none does."""
    for rule in reversed(rules):
        if wildcard(permission, rule.permission) and wildcard(pattern, rule.pattern):
            return rule.action
    return "ask"


def access(permission: str, rules: list[Rule]) -> str:
    """`allow` (every input, without asking), `deny` (the tool is removed), `ask`, or
    `some` (allowed for some inputs only). Patterns of OpenCode's own defaults (asking
    before reading `.env` files) are its baseline and not counted as a limit."""
    matching = [rule for rule in rules if wildcard(permission, rule.permission)]
    stars = [index for index, rule in enumerate(matching) if rule.pattern == "*"]
    star = stars[-1] if stars else -1
    base = matching[star].action if stars else "ask"
    later = [rule for rule in matching[star + 1 :] if rule.layer > 0]
    if base == "deny" and not any(rule.action != "deny" for rule in later):
        return "deny"
    if base == "allow" and all(rule.action == "allow" for rule in later):
        return "allow"
    if base == "ask" and not later:
        return "ask"
    return "some"


def import_opencode(source: Path, target: Path, *, dry_run: bool = False) -> ImportReport:
    """Import every OpenCode agent and skill found under `source` into the repo `target`."""
    source = source.expanduser().resolve()
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or folder")
    drafts = read_opencode(source, declared_mcp_servers(target), exclude=target.resolve())
    return run_import(FORMAT, source, target, drafts, dry_run=dry_run)


@dataclass
class _Agent:
    """One OpenCode agent as read: its settings, prompt, and where it came from."""

    key: str
    source: str
    entry: dict[str, Any]
    body: str | None
    warnings: list[str]


def read_opencode(
    source: Path, mcp_servers: frozenset[str] = frozenset(), *, exclude: Path | None = None
) -> Drafts:
    """Drafts of every agent and skill under `source`, leaving out the folder `exclude`
    (the repo being imported into, when it lies inside the source)."""
    drafts = Drafts()
    config, config_path = _config(source, drafts)
    tree = source if source.is_dir() else source.parent
    if config_path is not None and not config_path.parent.is_relative_to(tree):
        tree = config_path.parent  # SOURCE is an agent folder and the config sits above it
    prompts = _prompt_files(config, config_path, tree)
    agents = _markdown_agents(source, tree, drafts, exclude, prompts)
    _config_agents(config, config_path, source, tree, agents, drafts)
    global_rules = rules_from(config.get("permission") or config.get("permissions"), 1)
    global_rules = rules_from(agent_permission({"tools": config.get("tools")}), 1) + global_rules
    _global_notes(global_rules, config, drafts)
    skills = skill_files(source) if source.is_dir() else []
    for path in outside(skills, exclude):
        read_skill(path, tree, drafts, _skill_tools)
    skill_names = [skill.name for skill in drafts.skills]
    callable_keys = [a.key for a in agents.values() if a.entry.get("mode") != "primary"]
    servers = sorted(mcp_servers & set(config.get("mcp") or {}))
    for agent in sorted(agents.values(), key=lambda a: a.source):
        draft = _draft(agent, global_rules, callable_keys, skill_names, servers, drafts)
        if draft is not None:
            drafts.agents.append(draft)
    return drafts


def _config(source: Path, drafts: Drafts) -> tuple[dict[str, Any], Path | None]:
    folder = source if source.is_dir() else source.parent
    places = [folder, folder / ".opencode"]
    if folder.name in ("agent", "agents"):
        places.append(folder.parent)
    for place in places:
        for name in CONFIG_NAMES:
            path = place / name
            if path.is_file():
                relative = _relative(path, source)
                try:
                    data = read_jsonc(path, place)
                except SourceError as error:
                    drafts.skipped.append(Outcome("agent", relative, None, reason=str(error)))
                    return {}, None
                if isinstance(data, dict):
                    return data, path
                drafts.skipped.append(Outcome("agent", relative, None, reason="not a JSON object"))
                return {}, None
    return {}, None


def _relative(path: Path, source: Path) -> str:
    base = source if source.is_dir() else source.parent
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def _markdown_agents(
    source: Path, tree: Path, drafts: Drafts, exclude: Path | None, prompts: set[Path]
) -> dict[str, _Agent]:
    """The Markdown agents where OpenCode reads them: every `*.md` under a folder named
    `agent` or `agents` (SOURCE itself may be one), or SOURCE when it is one `.md` file.
    Other Markdown (a README, docs, the files opencode.json takes prompts from) is not
    an agent."""
    if source.is_file():
        if source.name in CONFIG_NAMES:
            return {}
        if source.suffix != ".md":
            reason = "not an OpenCode agent: agents are Markdown files (`*.md`) or opencode.json"
            drafts.skipped.append(Outcome("agent", source.name, None, reason=reason))
            return {}
        places = [(source.parent, [source])]
    else:
        folders = [
            folder
            for folder in folders_named(source, ("agent", "agents"))
            if ".claude" not in folder.relative_to(source).parts
        ]
        places = [(folder, markdown_files(folder)) for folder in folders]
    agents: dict[str, _Agent] = {}
    for folder, files in places:
        for path in outside(files, exclude):
            if path.resolve() in prompts:
                continue  # opencode.json's prompt for one of its agents
            relative = _relative(path, source)
            try:
                document = read_markdown(path, tree)
            except SourceError as error:
                drafts.skipped.append(Outcome("agent", relative, None, reason=str(error)))
                continue
            key = path.relative_to(folder).with_suffix("").as_posix()
            warnings = [
                f"frontmatter: not valid YAML (an unquoted ': ' in `{k}`); read with the "
                "value quoted"
                for k in document.repaired
            ]
            warnings += document.changes
            agents.setdefault(
                key, _Agent(key, relative, document.front or {}, document.body, warnings)
            )
    return agents


def _prompt_files(config: dict[str, Any], path: Path | None, tree: Path) -> set[Path]:
    """The files opencode.json's agents take their prompt from (`{file:./x.md}`)."""
    entries = config.get("agent") or {}
    if path is None or not isinstance(entries, dict):
        return set()
    found = set()
    for entry in entries.values():
        reference = (
            _FILE_REFERENCE.match(str(entry.get("prompt", "")).strip())
            if isinstance(entry, dict)
            else None
        )
        if reference:
            file = (path.parent / Path(reference.group(1).strip()).expanduser()).resolve()
            if file.is_relative_to(tree.resolve()):
                found.add(file)
    return found


def _config_agents(
    config: dict[str, Any],
    path: Path | None,
    source: Path,
    tree: Path,
    agents: dict[str, _Agent],
    drafts: Drafts,
) -> None:
    entries = config.get("agent") or {}
    if path is None or not isinstance(entries, dict):
        return
    relative = _relative(path, source)
    for key, entry in entries.items():
        where = f"{relative}#agent.{key}"
        if not isinstance(entry, dict):
            drafts.skipped.append(Outcome("agent", where, None, reason="not a JSON object"))
            continue
        prompt = entry.get("prompt")
        if key in agents:
            # A Markdown file of the same name: its frontmatter wins field by field.
            agents[key].entry = {**entry, **agents[key].entry}
            continue
        if prompt is None:
            reason = (
                f"configures OpenCode's built-in agent {key!r}, whose prompt is OpenCode's own "
                "and not in the source"
                if key in BUILTIN_AGENTS
                else "no `prompt` and no Markdown file of that name"
            )
            drafts.skipped.append(Outcome("agent", where, None, reason=reason))
            continue
        body = str(prompt)
        changes: tuple[str, ...] = ()
        reference = _FILE_REFERENCE.match(body.strip())
        if reference:
            file = path.parent / Path(reference.group(1).strip()).expanduser()
            try:
                body, changes = normalised(read_text(file, tree))
            except SourceError as error:
                drafts.skipped.append(
                    Outcome("agent", where, None, reason=f"prompt {reference.group(1)}: {error}")
                )
                continue
        agents[key] = _Agent(
            key, where, {k: v for k, v in entry.items() if k != "prompt"}, body, list(changes)
        )


def _draft(
    agent: _Agent,
    global_rules: list[Rule],
    callable_keys: list[str],
    skill_names: list[str],
    servers: list[str],
    drafts: Drafts,
) -> AgentDraft | None:
    entry, warnings = agent.entry, list(agent.warnings)
    if entry.get("disable") is True:
        drafts.skipped.append(
            Outcome("agent", agent.source, None, reason="disabled in the source (`disable: true`)")
        )
        return None
    description = entry.get("description")
    if not isinstance(description, str) or not description.strip():
        description = ""
        warnings.append("description: missing; delegating agents see only the agent's name")
    mode = entry.get("mode", "all")
    if mode not in ("primary", "subagent", "all"):
        warnings.append(f"mode: {mode!r} is not primary, subagent or all; read as all")
        mode = "all"
    own = agent_permission(entry)
    warnings += _shape_warnings(entry)
    rules = [*DEFAULTS, *global_rules, *rules_from(own, 2)]
    if mode == "subagent" and "task" not in own:
        # OpenCode runs a subagent with task denied unless its own rules allow it.
        rules.append(Rule("task", "*", "deny", 3))
    draft = AgentDraft(
        source=agent.source,
        key=agent.key,
        description=description,
        body=agent.body or "",
        callable=mode != "primary",
        warnings=warnings,
    )
    _map_tools(draft, rules, own)
    _map_delegation(draft, rules, callable_keys)
    allowed_skills = [name for name in skill_names if evaluate("skill", name, rules) == "allow"]
    if access("skill", rules) != "deny" and allowed_skills:
        draft.skills = allowed_skills
    draft.mcp = [server for server in servers if evaluate(f"{server}_tool", "*", rules) != "deny"]
    _map_fields(entry, draft)
    return draft


def _map_tools(draft: AgentDraft, rules: list[Rule], own: dict[str, Any]) -> None:
    for tool, permission in PERMISSIONS.items():
        decision = access(permission, rules)
        if decision == "allow":
            draft.tools.add(tool)
        elif decision == "ask":
            draft.warnings.append(
                f"permission.{permission}: OpenCode asks before each use; the runtime cannot "
                f"ask before {tool}, so it is not granted (list it in agent.json `tools` to "
                "allow it without asking)"
            )
        elif decision == "some":
            draft.warnings.append(
                f"permission.{permission}: OpenCode allows it for some inputs only; the "
                f"runtime cannot limit {tool} that way, so it is not granted (list it in "
                "agent.json `tools` to allow it everywhere under the file-tool root)"
            )
    for key in own:
        name = str(key)
        if name in NO_EQUIVALENT and access(name, rules) != "deny":
            draft.warnings.append(f"permission.{name}: {NO_EQUIVALENT[name]}")
        elif name in WITHOUT_TOOL:
            draft.warnings.append(f"permission.{name}: {WITHOUT_TOOL[name]}")
        elif re.search(r"[*?]", name):
            _warn_wildcard(draft, name, rules)
        elif name not in _KNOWN | set(NO_EQUIVALENT):
            if access(name, rules) != "deny":
                draft.warnings.append(
                    f"permission.{name}: not a tool this importer maps (an MCP tool? declare "
                    "its server in amodal.json); left out"
                )
    if "question" in own and access("question", rules) != "allow":
        draft.warnings.append(
            f"permission.question: {access('question', rules)}: ask_choice is offered in "
            "every chat of the runtime and cannot be taken away; tell the agent in its prompt "
            "not to ask"
        )


def _warn_wildcard(draft: AgentDraft, key: str, rules: list[Rule]) -> None:
    """A rule like `"*": "allow"` also allows tools that have no equivalent here: say so."""
    allowed = sorted(
        name for name in NO_EQUIVALENT if wildcard(name, key) and access(name, rules) != "deny"
    )
    if allowed:
        draft.warnings.append(
            f"permission.{key}: it allows {', '.join(allowed)} too, which have no equivalent "
            "here and are left out (docs/import.md says what to use instead)"
        )
    elif not any(wildcard(name, key) for name in _KNOWN) and access(key, rules) != "deny":
        draft.warnings.append(
            f"permission.{key}: not a tool this importer maps (an MCP tool? declare its "
            "server in amodal.json); left out"
        )


def _map_delegation(draft: AgentDraft, rules: list[Rule], callable_keys: list[str]) -> None:
    asked = []
    subagents = []
    for key in sorted(callable_keys):
        if key == draft.key:
            continue
        action = evaluate("task", key, rules)
        if action == "allow":
            subagents.append(key)
        elif action == "ask":
            asked.append(key)
    draft.subagents = subagents
    named = {
        rule.pattern
        for rule in rules
        if rule.layer in (1, 2) and rule.permission == "task" and rule.action == "allow"
    }
    missing = sorted(
        name for name in named - set(callable_keys) - {draft.key} if not re.search(r"[*?]", name)
    )
    if missing:
        draft.warnings.append(
            f"permission.task: {', '.join(missing)}: no such agent in this import (OpenCode's "
            "built-in general and explore agents have no equivalent), so not a subagent"
        )
    if asked:
        draft.warnings.append(
            f"permission.task: OpenCode asks before delegating to {', '.join(asked)}; the "
            "runtime cannot ask, so they are not subagents (add them to `subagents`)"
        )


def _map_fields(entry: dict[str, Any], draft: AgentDraft) -> None:
    model = entry.get("model")
    if model is not None:
        text = str(model).lower()
        family = next((alias for alias in ("haiku", "sonnet", "opus") if alias in text), None)
        draft.model_tier = {"haiku": "simple", "opus": "advanced"}.get(family or "", "default")
        draft.warnings.append(
            f"model: {model!r}: models are bound per tier in amodal.json `models`; the agent "
            f"uses the {draft.model_tier!r} tier"
        )
    temperature = entry.get("temperature")
    if temperature is not None:
        if isinstance(temperature, int | float) and 0 <= temperature <= 2:
            draft.temperature = float(temperature)
        else:
            draft.warnings.append(
                f"temperature: {temperature!r} is outside 0..2; the endpoint's default applies"
            )
    steps = entry.get("steps", entry.get("maxSteps"))
    if isinstance(steps, int) and steps >= 1:
        draft.max_tool_calls = min(steps, 200)
        field = "steps" if "steps" in entry else "maxSteps"
        draft.warnings.append(
            f"{field}: {steps} steps became maxToolCalls {draft.max_tool_calls}, a budget of "
            "tool calls per run"
        )
    for key in entry:
        if key in FIELDS_WITHOUT_EQUIVALENT:
            draft.warnings.append(f"{key}: {FIELDS_WITHOUT_EQUIVALENT[key]}")
        elif key not in _HANDLED:
            draft.warnings.append(f"{key}: not an OpenCode field this importer knows; left out")


def _global_notes(rules: list[Rule], config: dict[str, Any], drafts: Drafts) -> None:
    mentioned = sorted({rule.permission for rule in rules} & set(NO_EQUIVALENT))
    for name in mentioned:
        drafts.notes.append(f"opencode.json permission.{name}: {NO_EQUIVALENT[name]}")
    for key in sorted({r.permission for r in rules if re.search(r"[*?]", r.permission)}):
        allowed = sorted(
            name
            for name in NO_EQUIVALENT
            if wildcard(name, key) and evaluate(name, "*", list(DEFAULTS) + rules) != "deny"
        )
        if allowed:
            drafts.notes.append(
                f"opencode.json permission.{key}: it allows {', '.join(allowed)} too, which "
                "have no equivalent here and are left out"
            )
    servers = sorted(config.get("mcp") or {})
    if servers:
        drafts.notes.append(
            f"opencode.json declares MCP servers {', '.join(servers)}: declare the ones the "
            "agents need in amodal.json `mcp.servers`, then import again to list them under "
            "each agent's `mcp`"
        )
    drafts.notes.append(
        "OpenCode gives every agent bash, webfetch and todowrite unless denied; they have no "
        "equivalent here (docs/import.md says what to use instead)"
    )


def _skill_tools(names: list[str], warnings: list[str]) -> list[str]:
    tools: list[str] = []
    by_permission = {permission: tool for tool, permission in PERMISSIONS.items()}
    for name in names:
        key = "edit" if name.lower() in _EDIT_TOOLS else name.lower()
        tool = by_permission.get(key)
        if tool is None:
            warnings.append(f"allowed-tools: {name}: not a tool this importer maps; left out")
        elif tool not in tools:
            tools.append(tool)
    return tools
