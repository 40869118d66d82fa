"""`amodal import claude-code`: Claude Code subagents and skills (SPEC 19).

Reads `.claude/agents/*.md` (a project's or a user's), plugin trees and marketplaces
(`plugins/*/agents/*.md`, `*/skills/*/SKILL.md`), or a folder of agent files. Each
frontmatter field and tool maps to the runtime's equivalent; what has none is a
warning that names it and says what to use instead.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from runtime.importers._skills import read_skill
from runtime.importers._source import (
    SourceError,
    folders_named,
    markdown_files,
    outside,
    read_markdown,
    skill_files,
)
from runtime.importers.report import ImportReport, Outcome
from runtime.importers.writer import ALL, AgentDraft, Drafts, declared_mcp_servers, run_import

FORMAT = "claude-code"
DEFAULT_TOOLS = ("read_file", "write_file", "list_files", "glob_files", "grep_files")
TOOLS: dict[str, tuple[str, ...]] = {
    "Read": ("read_file",),
    "Write": ("write_file",),
    "Edit": ("write_file",),
    "MultiEdit": ("write_file",),
    "LS": ("list_files",),
    "Glob": ("glob_files",),
    "Grep": ("grep_files",),
    "Skill": ("load_skill",),
    "AskUserQuestion": (),  # ask_choice: a protocol tool, offered in every chat
}
_DELEGATE = ("Task", "Agent")
_SHELL = (
    "no shell tool in the runtime (left out on purpose, for safety); give the agent an MCP "
    "server or a custom tool (tools/) that runs exactly the commands it needs"
)
_TEAM = "agent-team coordination has no equivalent; delegate with call_subagent instead"
NO_EQUIVALENT: dict[str, str] = {
    "Bash": _SHELL,
    "BashOutput": _SHELL,
    "KillShell": _SHELL,
    "KillBash": _SHELL,
    "WebFetch": "no web tool; declare a REST connection (connections/) or an MCP server",
    "WebSearch": "no web search; declare an MCP server that searches",
    "TodoWrite": "no to-do tool; the agent keeps its plan in its replies or in a store",
    "TodoRead": "no to-do tool; the agent keeps its plan in its replies or in a store",
    "NotebookEdit": "no notebook tool; write_file edits a notebook as JSON text",
    "NotebookRead": "no notebook tool; read_file reads a notebook as JSON text",
    "ExitPlanMode": "no plan mode; the agent answers with its plan",
    "EnterPlanMode": "no plan mode; the agent answers with its plan",
    "SlashCommand": "no slash commands",
    "ListMcpResourcesTool": "MCP resources are not offered, only MCP tools",
    "ReadMcpResourceTool": "MCP resources are not offered, only MCP tools",
    **dict.fromkeys(
        (
            "TaskCreate",
            "TaskList",
            "TaskGet",
            "TaskUpdate",
            "TaskOutput",
            "TaskStop",
            "SendMessage",
            "TeamCreate",
            "TeamDelete",
        ),
        _TEAM,
    ),
}
TIERS = {"haiku": "simple", "sonnet": "default", "inherit": "default", "opus": "advanced"}
FIELDS_WITHOUT_EQUIVALENT: dict[str, str] = {
    "permissionMode": "no permission modes: the agent's tools are what agent.json lists, "
    "and a tool that needs a person's approval asks every time",
    "hooks": "no hooks; a custom tool or an MCP server can do the work a hook did",
    "color": "the runtime shows no agent colours; dropped",
    "memory": "no memory scopes; give the agent a store for what it must remember",
    "background": "no background runs; specialists run while the turn waits",
    "isolation": "no worktree isolation; the file tools work in the file-tool root",
    "mcpServers": "MCP servers are declared once, in amodal.json `mcp.servers`, and "
    "listed under `mcp` in agent.json",
    "effort": "no reasoning-effort setting",
    "initialPrompt": "no initial prompt; put it in the prompt",
}
_ENTRY = re.compile(r"\s*([^,(]+?)\s*(?:\(([^)]*)\))?\s*(?:,|$)")


def import_claude_code(source: Path, target: Path, *, dry_run: bool = False) -> ImportReport:
    """Import every Claude Code agent and skill found under `source` into the repo `target`."""
    source = source.expanduser().resolve()
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or folder")
    drafts = read_claude_code(source, declared_mcp_servers(target), exclude=target.resolve())
    return run_import(FORMAT, source, target, drafts, dry_run=dry_run)


def read_claude_code(
    source: Path, mcp_servers: frozenset[str] = frozenset(), *, exclude: Path | None = None
) -> Drafts:
    """Drafts of every agent and skill under `source`, leaving out the folder `exclude`
    (the repo being imported into, when it lies inside the source)."""
    drafts = Drafts()
    tree = source if source.is_dir() else source.parent
    for path in outside(agent_files(source), exclude):
        _read_agent(path, tree, drafts, mcp_servers)
    skills = skill_files(source) if source.is_dir() else []
    for path in outside(skills, exclude):
        read_skill(path, tree, drafts, _skill_tools)
    if any(draft.inherits_tools for draft in drafts.agents):
        drafts.notes.append(_INHERIT_NOTE)
    return drafts


_INHERIT_NOTE = (
    "agents that list no `tools` get read_file, write_file, list_files, glob_files and "
    "grep_files; Claude Code would also give them Bash, WebFetch, WebSearch and TodoWrite, "
    "which have no equivalent here (docs/import.md says what to use instead)"
)


def agent_files(source: Path) -> list[Path]:
    """Agent files: `*.md` under every `agents/` folder, or, without any, under `source`."""
    if source.is_file():
        return [source]
    folders = folders_named(source, ("agents",))
    if not folders:
        # A folder of agent files (`~/.claude/agents` itself), unless it is a skills tree.
        return [] if folders_named(source, ("skills",)) else markdown_files(source)
    return sorted({path for folder in folders for path in markdown_files(folder)})


def _read_agent(path: Path, tree: Path, drafts: Drafts, mcp_servers: frozenset[str]) -> None:
    relative = path.relative_to(tree).as_posix()
    if path.suffix != ".md":
        reason = "not an agent: Claude Code agents are Markdown files (`*.md`)"
        drafts.skipped.append(Outcome("agent", relative, None, reason=reason))
        return
    try:
        document = read_markdown(path, tree)
    except SourceError as error:
        drafts.skipped.append(Outcome("agent", relative, None, reason=str(error)))
        return
    front = document.front
    if front is None:
        drafts.skipped.append(
            Outcome(
                "agent",
                relative,
                None,
                reason="not an agent: no frontmatter with `name` and `description`",
            )
        )
        return
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():
        drafts.skipped.append(
            Outcome(
                "agent", relative, None, reason="no `description`: Claude Code does not load it"
            )
        )
        return
    warnings = [
        f"frontmatter: not valid YAML (an unquoted ': ' in `{key}`); read with the value quoted"
        for key in document.repaired
    ]
    warnings += document.changes
    name = front.get("name")
    if not isinstance(name, str) or not name.strip():
        warnings.append("name: missing; the agent is named after its file")
        name = path.stem
    draft = AgentDraft(
        source=relative,
        key=name.strip(),
        description=description,
        body=document.body,
        warnings=warnings,
    )
    _map_fields(front, draft, mcp_servers)
    draft.inherits_tools = "tools" not in front
    drafts.agents.append(draft)


def _map_fields(front: dict[str, Any], draft: AgentDraft, mcp: frozenset[str]) -> None:
    warnings = draft.warnings
    allowed = _tool_entries(front["tools"]) if "tools" in front else None
    denied = {name for name, _ in _tool_entries(front.get("disallowedTools"))}
    if allowed is None:
        draft.tools = set(DEFAULT_TOOLS)
        writers = {"Write", "Edit", "MultiEdit"}
        if denied & writers and not writers <= denied:
            warnings.append(
                f"disallowedTools: {', '.join(sorted(denied & writers))} but not every "
                "writing tool; the runtime has one write_file for all, so it is left out"
            )
        for name in denied:
            for tool in TOOLS.get(name, ()):
                draft.tools.discard(tool)
    else:
        for name, arguments in allowed:
            if name in denied:
                continue
            _map_tool(name, arguments, draft, mcp)
    _map_model(front.get("model"), draft)
    for key, value in front.items():
        if key in ("name", "description", "tools", "disallowedTools", "model"):
            continue
        if key == "skills":
            items = value.split(",") if isinstance(value, str) else list(value or [])
            named = [str(item).strip() for item in items if str(item).strip()]
            if draft.skills != ALL:
                draft.skills = [*draft.skills, *named]
            warnings.append(
                "skills: Claude Code preloads these skills' text; here the agent sees their "
                "names and descriptions and loads each with load_skill"
            )
        elif key == "maxTurns" and isinstance(value, int) and value >= 1:
            draft.max_tool_calls = min(value, 200)
            warnings.append(
                f"maxTurns: {value} turns became maxToolCalls {draft.max_tool_calls}, a budget "
                "of tool calls per run"
            )
        elif key in FIELDS_WITHOUT_EQUIVALENT:
            warnings.append(f"{key}: {FIELDS_WITHOUT_EQUIVALENT[key]}")
        else:
            warnings.append(f"{key}: not a Claude Code field this importer knows; left out")


def _tool_entries(value: Any) -> list[tuple[str, str | None]]:
    """`Read, Task(a, b)` or a YAML list into (name, arguments) pairs."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    entries = []
    for item in items:
        for match in _ENTRY.finditer(str(item)):
            name = match.group(1).strip()
            if name:
                entries.append((name, match.group(2)))
    return entries


def _map_tool(name: str, arguments: str | None, draft: AgentDraft, mcp: frozenset[str]) -> None:
    if name in TOOLS:
        draft.tools.update(TOOLS[name])
        if name == "Skill" and draft.skills != ALL:
            draft.skills = ALL  # the Skill tool reaches every skill of the session
    elif name in _DELEGATE:
        named = [part.strip() for part in (arguments or "").split(",") if part.strip()]
        if not named:
            draft.subagents = ALL
        elif draft.subagents != ALL:
            draft.subagents = [*draft.subagents, *named]
    elif name.startswith("mcp__"):
        _map_mcp(name, draft, mcp)
    elif name in NO_EQUIVALENT:
        draft.warnings.append(f"tools: {name}: {NO_EQUIVALENT[name]}")
    else:
        draft.warnings.append(
            f"tools: {name}: not a Claude Code tool this importer knows; left out"
        )


def _map_mcp(name: str, draft: AgentDraft, mcp: frozenset[str]) -> None:
    _, server, tool = [*name.split("__", 2), ""][:3]
    runtime_name = f"{server.replace('-', '_')}__{tool}" if tool else server
    if server in mcp:
        if tool:
            draft.tools.add(runtime_name)
        elif server not in draft.mcp:
            draft.mcp.append(server)
        return
    draft.warnings.append(
        f"tools: {name}: MCP server {server!r} is not declared in amodal.json; declare it under "
        f"`mcp.servers`, then add {runtime_name!r} to this agent's "
        + ("`tools`" if tool else "`mcp`")
    )


def _map_model(model: Any, draft: AgentDraft) -> None:
    if model is None:
        return
    text = str(model).strip().lower()
    if text in TIERS:
        draft.model_tier = TIERS[text]
        return
    family = next((alias for alias in ("haiku", "sonnet", "opus") if alias in text), None)
    if family:
        draft.model_tier = TIERS[family]
        draft.warnings.append(
            f"model: {model!r} became the {draft.model_tier!r} tier; the tier's model is "
            "set in amodal.json `models`"
        )
    else:
        draft.warnings.append(
            f"model: {model!r} is not a Claude Code alias (haiku, sonnet, opus, inherit); the "
            "agent uses the default tier"
        )


def _skill_tools(names: list[str], warnings: list[str]) -> list[str]:
    tools: list[str] = []
    for name, _ in _tool_entries(names):
        mapped = TOOLS.get(name)
        if mapped is None:
            reason = NO_EQUIVALENT.get(name, "not a tool this importer maps")
            warnings.append(f"allowed-tools: {name}: {reason}; left out")
        for tool in mapped or ():
            if tool not in tools:
                tools.append(tool)
    return tools
