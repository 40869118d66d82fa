"""Turning imported definitions into an agent repo: names, prompts, files, idempotent writes.

Importers (`claude_code`, `opencode`) read their format into drafts; this module gives
every draft its name in the repo (normalised, collisions renamed deterministically and
reported), keeps each prompt byte for byte (template syntax escaped, checked by
rendering), and writes only the files whose content changed, so a second import of the
same source changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runtime.exceptions import TemplateRenderError
from runtime.importers._source import normalise_name, unique
from runtime.importers.report import ImportReport, Outcome
from runtime.repo import _markdown, _yaml, load_repo
from runtime.repo.bundle import MAIN_AGENT
from runtime.repo.registry import CALL_SUBAGENT, LOAD_SKILL
from runtime.repo.scaffold import files_to_init, init_repo
from runtime.repo.templates import Template
from runtime.tools.files import write_atomically

MAX_DESCRIPTION = 1024
ALL = "*"  # a delegation or skill list meaning "every one imported"
TOOL_ORDER = (
    "read_file",
    "write_file",
    "list_files",
    "glob_files",
    "grep_files",
    LOAD_SKILL,
    CALL_SUBAGENT,
)
_RESERVED_HEADING = re.compile(r"^##[ \t]+(prompt|config)[ \t#]*$", re.IGNORECASE)
_DELIMITER = re.compile(r"\{(?=[{%#])")
_MARKER = re.compile(r"^# amodal import ([\w-]+): (.+)$", re.MULTILINE)


@dataclass
class AgentDraft:
    """One source agent as the runtime will have it, before it has its name in the repo."""

    source: str  # the file, relative to the import source
    key: str  # the name other source agents use for it (delegation lists)
    description: str
    body: str  # the prompt exactly as the source has it
    tools: set[str] = field(default_factory=set)
    subagents: list[str] | str = field(default_factory=list)  # source keys, or ALL
    skills: list[str] | str = field(default_factory=list)  # source skill names, or ALL
    mcp: list[str] = field(default_factory=list)  # MCP servers declared in amodal.json
    model_tier: str = "default"
    temperature: float | None = None
    max_tool_calls: int | None = None
    callable: bool = True  # others may delegate to it (OpenCode: not a primary agent)
    inherits_tools: bool = False  # the source lists no tools: it has the defaults
    warnings: list[str] = field(default_factory=list)


@dataclass
class SkillDraft:
    source: str  # the SKILL.md, relative to the import source
    name: str
    description: str
    body: str
    folder: str  # the source folder's name
    allowed_tools: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)  # informational fields kept as text
    files: dict[str, bytes] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass
class Drafts:
    agents: list[AgentDraft] = field(default_factory=list)
    skills: list[SkillDraft] = field(default_factory=list)
    skipped: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def escape_prompt(body: str) -> str:
    """`body` as an AGENT.md prompt that renders to exactly `body`.

    Without template syntax the text stays as it is. Otherwise the whole prompt goes
    inside one `{% raw %}` block, the form a person would write; a prompt that itself
    says `endraw`, or has a `## Prompt`/`## Config` heading (which the loader would
    take as sections), has each `{` of a delimiter written as `{{ '{' }}` instead.
    """
    headings = {
        heading.index
        for heading in _markdown.headings(body)
        if _RESERVED_HEADING.match(body.splitlines()[heading.index])
    }
    if not _DELIMITER.search(body) and not headings:
        return body
    if not headings and "endraw" not in body:
        return "{% raw %}" + expected_prompt(body) + "{% endraw %}\n"
    lines = _DELIMITER.sub("{{ '{' }}", body).split("\n")
    for index in headings:
        lines[index] = "{{ '' }}" + lines[index]
    return "\n".join(lines)


def expected_prompt(body: str) -> str:
    """What the loader keeps of a prompt: no leading blank lines, no trailing space."""
    return body.lstrip("\n").rstrip()


def renders_unchanged(escaped: str, body: str, file: str) -> bool:
    text = escaped.lstrip("\n").rstrip()
    try:
        rendered = Template(text, file).render({})
    except TemplateRenderError:
        return False
    return rendered.rstrip() == expected_prompt(body)


def marker(format_name: str, source: str) -> str:
    return f"# amodal import {format_name}: {source}"


@dataclass(frozen=True, slots=True)
class _Earlier:
    """A folder an earlier import wrote: where, for which source file, and its text."""

    folder: str
    source: str  # the source file as its marker names it
    name: str  # a skill's name ("" for an agent)
    body: str  # the file after its frontmatter: the prompt or the skill as written


@dataclass
class _Existing:
    """What the target repo holds already, and which of it an earlier import wrote."""

    ours: list[_Earlier]
    taken: set[str]  # folder names written by a person or another source
    skill_names: dict[str, str]  # lowercased -> real names of skills that are not ours
    claimed: set[str] = field(default_factory=set)  # folders matched to a source already

    @property
    def used_folders(self) -> set[str]:
        return self.taken | {earlier.folder for earlier in self.ours}

    def earlier(self, source: str, body: str) -> _Earlier | None:
        """The earlier import of the file `source` (relative to SOURCE). A file is known by
        its name and content, not by how SOURCE was written: the same path; else the one
        earlier file whose path ends like this one (`agents/x.md` and `x.md`, the tree
        imported from its root or from its agents folder), by content when several do."""
        free = [e for e in self.ours if e.folder not in self.claimed]
        same = [e for e in free if e.source == source]
        if not same:
            ends = [e for e in free if _same_ending(e.source, source)]
            same = ends if len(ends) == 1 else [e for e in ends if e.body == body]
        if len(same) != 1:
            return None
        self.claimed.add(same[0].folder)
        return same[0]


def _same_ending(one: str, other: str) -> bool:
    """True when one path is the other with folders in front (`a/agents/x.md`, `x.md`)."""
    a, b = one.split("/"), other.split("/")
    shorter, longer = sorted((a, b), key=len)
    return longer[len(longer) - len(shorter) :] == shorter


def _scan(root: Path, folder: str, file: str, format_name: str) -> _Existing:
    existing = _Existing([], set(), {})
    directory = root / folder
    for entry in sorted(directory.iterdir()) if directory.is_dir() else []:
        if not entry.is_dir():
            continue
        path = entry / file
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        document = _markdown.split(text)
        found = _MARKER.search(document.frontmatter or "")
        name = _skill_name(document) if folder == "skills" and text else ""
        if found and found.group(1) == format_name:
            existing.ours.append(_Earlier(entry.name, found.group(2).strip(), name, document.body))
        else:
            existing.taken.add(entry.name)
            if name:
                existing.skill_names[name.lower()] = name
    return existing


def _skill_name(document: _markdown.Document) -> str:
    headings = _markdown.headings(document.body)
    if headings and headings[0].level == 1 and headings[0].title.lower().startswith("skill:"):
        return headings[0].title.split(":", 1)[1].strip()
    try:
        front = _yaml.load(document.frontmatter or "") or {}
    except _yaml.YamlError:
        return ""
    name = front.get("name") if isinstance(front, dict) else None
    return str(name) if name else ""


def _allocate(base: str, used: set[str]) -> str:
    """`base`, or `base-2`, `base-3`, ... : the first free one (compared ignoring case)."""
    lowered = {name.lower() for name in used}
    candidate, number = base, 2
    while candidate.lower() in lowered:
        suffix = f"-{number}"
        candidate = base[: 64 - len(suffix)] + suffix
        number += 1
    return candidate


@dataclass
class Plan:
    files: dict[str, bytes]
    outcomes: list[Outcome]
    notes: list[str]
    tiers: set[str]


def build_plan(root: Path, format_name: str, drafts: Drafts) -> Plan:
    """Every file the import writes, and the report line of every source file."""
    files: dict[str, bytes] = {}
    outcomes: list[Outcome] = list(drafts.skipped)
    skill_names = _plan_skills(root, format_name, drafts.skills, files, outcomes)
    prompts: dict[str, str] = {}
    for draft in sorted(drafts.agents, key=lambda d: d.source):
        escaped = escape_prompt(draft.body)
        label = f"agents/{normalise_name(draft.key)}/AGENT.md"
        if not expected_prompt(draft.body):
            reason = "the prompt is empty"
        elif not renders_unchanged(escaped, draft.body, label):
            reason = "its prompt could not be escaped to render unchanged"
        else:
            prompts[draft.source] = escaped
            continue
        outcomes.append(Outcome("agent", draft.source, None, reason=reason))
    kept = sorted((d for d in drafts.agents if d.source in prompts), key=lambda d: d.source)
    existing = _scan(root, "agents", "AGENT.md", format_name)
    names: dict[str, str] = {}  # source -> agent folder
    markers: dict[str, str] = {}  # source -> the source its marker names (kept from before)
    used = existing.used_folders | {MAIN_AGENT}
    for draft in kept:  # earlier imports first, so a new file never takes their folder
        earlier = existing.earlier(draft.source, prompts[draft.source])
        if earlier is not None:
            names[draft.source], markers[draft.source] = earlier.folder, earlier.source
    for draft in kept:
        base = normalise_name(draft.key)
        name = names.get(draft.source) or _allocate(base, used)
        used.add(name)
        names[draft.source] = name
        if name != draft.key:
            why = "taken, so renamed" if name != base else "normalised to a folder name"
            draft.warnings.insert(0, f"name: {draft.key!r} -> {name!r} ({why})")
    by_key: dict[str, str] = {}
    for draft in kept:
        by_key.setdefault(draft.key, names[draft.source])
    callable_names = sorted(names[d.source] for d in kept if d.callable)
    tiers = set()
    for draft in kept:
        name = names[draft.source]
        config = _agent_config(draft, name, by_key, callable_names, skill_names)
        tiers.add(draft.model_tier)
        front = f"---\n{marker(format_name, markers.get(draft.source, draft.source))}\n---\n"
        files[f"agents/{name}/AGENT.md"] = (front + prompts[draft.source]).encode()
        files[f"agents/{name}/agent.json"] = (json.dumps(config, indent=2) + "\n").encode()
        outcomes.append(Outcome("agent", draft.source, name, unique(draft.warnings)))
    return Plan(files, outcomes, list(drafts.notes), tiers)


def _agent_config(
    draft: AgentDraft,
    name: str,
    by_key: dict[str, str],
    callable_names: list[str],
    skill_names: dict[str, str],
) -> dict[str, Any]:
    description = draft.description.strip()
    if len(description) > MAX_DESCRIPTION:
        draft.warnings.append(
            f"description: {len(description):,} characters; the runtime keeps "
            f"{MAX_DESCRIPTION:,}, so it was cut with '…' at the end"
        )
        description = description[: MAX_DESCRIPTION - 1].rstrip() + "…"
    subagents = _resolve_subagents(draft, name, by_key, callable_names)
    skills = _resolve_skills(draft, skill_names)
    tools = set(draft.tools) - {CALL_SUBAGENT, LOAD_SKILL}
    if subagents:
        tools.add(CALL_SUBAGENT)
    if skills:
        tools.add(LOAD_SKILL)
    config: dict[str, Any] = {"description": description}
    if draft.model_tier != "default":
        config["modelTier"] = draft.model_tier
    if draft.temperature is not None:
        config["modelSettings"] = {"temperature": draft.temperature}
    if draft.max_tool_calls is not None:
        config["maxToolCalls"] = draft.max_tool_calls
    config["tools"] = sorted(
        tools, key=lambda t: (TOOL_ORDER.index(t) if t in TOOL_ORDER else 99, t)
    )
    if skills:
        config["skills"] = skills
    if subagents:
        config["subagents"] = subagents
    if draft.mcp:
        config["mcp"] = draft.mcp
    return config


def _resolve_subagents(
    draft: AgentDraft, name: str, by_key: dict[str, str], callable_names: list[str]
) -> list[str]:
    if draft.subagents == ALL:
        return [other for other in callable_names if other != name]
    found, missing = [], []
    for key in draft.subagents:
        target = by_key.get(key) or by_key.get(normalise_name(key))
        if target is None:
            missing.append(key)
        elif target != name and target not in found:
            found.append(target)
    if missing:
        draft.warnings.append(
            f"delegation: {', '.join(sorted(missing))}: no such agent in this import, so "
            "not a subagent (import it too, or add it to `subagents` once it exists)"
        )
    return found


def _resolve_skills(draft: AgentDraft, skill_names: dict[str, str]) -> list[str]:
    if draft.skills == ALL:
        return sorted(set(skill_names.values()), key=str.lower)
    found, missing = [], []
    for wanted in draft.skills:
        target = skill_names.get(wanted.lower())
        if target is None:
            missing.append(wanted)
        elif target not in found:
            found.append(target)
    if missing:
        draft.warnings.append(
            f"skills: {', '.join(missing)}: no such skill in this import or the repo; left out"
        )
    return found


def _plan_skills(
    root: Path,
    format_name: str,
    skills: list[SkillDraft],
    files: dict[str, bytes],
    outcomes: list[Outcome],
) -> dict[str, str]:
    """Plan the skills' files; the map from every known skill name (lowercased) to its
    name in the repo, for agents' `skills` lists."""
    existing = _scan(root, "skills", "SKILL.md", format_name)
    names = dict(existing.skill_names)
    used_names = set(existing.skill_names.values()) | {e.name for e in existing.ours if e.name}
    used_folders = existing.used_folders
    ordered = sorted(skills, key=lambda d: d.source)
    earlier = {d.source: existing.earlier(d.source, d.body) for d in ordered}
    for draft in ordered:
        before = earlier[draft.source]
        folder = before.folder if before else _allocate(normalise_name(draft.folder), used_folders)
        used_folders.add(folder)
        name = before.name if before and before.name else _allocate(draft.name, used_names)
        used_names.add(name)
        if name != draft.name:
            draft.warnings.insert(0, f"name: {draft.name!r} -> {name!r} (taken, so renamed)")
        names.setdefault(draft.name.lower(), name)
        front: dict[str, Any] = {"name": name, "description": draft.description}
        if draft.allowed_tools:
            front["allowedTools"] = draft.allowed_tools
        source = before.source if before else draft.source
        header = "\n".join([marker(format_name, source), *(f"# {line}" for line in draft.comments)])
        dumped = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=10**9)
        files[f"skills/{folder}/SKILL.md"] = f"---\n{header}\n{dumped}---\n{draft.body}".encode()
        for relative, data in draft.files.items():
            files[f"skills/{folder}/{relative}"] = data
        outcomes.append(Outcome("skill", draft.source, name, unique(draft.warnings)))
    return names


def tier_notes(root: Path, tiers: Iterable[str]) -> list[str]:
    """A note for each tier the imported agents use that amodal.json does not bind."""
    try:
        config = json.loads((root / "amodal.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    models = config.get("models") if isinstance(config, dict) else None
    bound = set(models) if isinstance(models, dict) else set()
    return [
        f"agents use the `{tier}` model tier, which amodal.json does not bind: set "
        f"`models.{tier}` there (until then they use the main model)"
        for tier in sorted(set(tiers) & {"simple", "advanced"})
        if tier not in bound
    ]


def declared_mcp_servers(target: Path) -> frozenset[str]:
    """The MCP servers the target repo's amodal.json declares (none when it has none)."""
    try:
        config = json.loads((target / "amodal.json").read_text(encoding="utf-8"))
        return frozenset(config.get("mcp", {}).get("servers", {}))
    except (OSError, ValueError, AttributeError):
        return frozenset()


FILE_TOOL_NAMES = ("read_file", "write_file", "list_files", "glob_files", "grep_files")


def root_notes(target: Path, files: Mapping[str, bytes]) -> list[str]:
    """Where imported agents' file tools look: the new repo, unless told otherwise. In
    Claude Code they saw the project; here they see the repo (whose own files are
    protected), so "review my last change" would find no code."""
    try:
        config = json.loads((target / "amodal.json").read_text(encoding="utf-8"))
        if config.get("fileTools", {}).get("root", ".") != ".":
            return []  # pointed somewhere already
    except (OSError, ValueError, AttributeError):
        pass
    for relative, data in files.items():
        if not relative.endswith("/agent.json"):
            continue
        try:
            tools = json.loads(data).get("tools", [])
        except (ValueError, AttributeError):
            continue
        names = {tool if isinstance(tool, str) else tool.get("name") for tool in tools}
        if names & set(FILE_TOOL_NAMES):
            return [
                "the file tools of imported agents work in this repo, not in your code: set "
                '`"fileTools": {"root": "<the code\'s folder, relative to the repo>"}` in '
                'amodal.json (e.g. ".." when the repo is a folder of the project) so they '
                "can read it (docs/import.md)"
            ]
    return []


def run_import(
    format_name: str, source: Path, target: Path, drafts: Drafts, *, dry_run: bool
) -> ImportReport:
    """Write `drafts` into the repo at `target` (made with `amodal init` when it has no
    amodal.json), validate it, and report; with `dry_run` nothing is written."""
    plan = build_plan(target, format_name, drafts)
    written: list[str] = []
    if not (target / "amodal.json").is_file():
        # The dry run counts the files `amodal init` would write, as the real run writes them.
        if dry_run:
            written.extend(files_to_init(target, tour=False))
        else:
            written.extend(str(path.relative_to(target)) for path in init_repo(target, tour=False))
    for relative, data in sorted(plan.files.items()):
        path = target / relative
        if path.is_file() and path.read_bytes() == data:
            continue
        if relative not in written:
            written.append(relative)
        if not dry_run:
            write_atomically(path, data)
    errors: tuple[str, ...] = ()
    if not dry_run:
        result = load_repo(target, offline=True)
        errors = tuple(str(error) for error in result.errors)
    return ImportReport(
        format=format_name,
        source=str(source),
        target=str(target),
        outcomes=tuple(sorted(plan.outcomes, key=lambda o: (o.kind, o.source))),
        notes=tuple(plan.notes + tier_notes(target, plan.tiers) + root_notes(target, plan.files)),
        written=tuple(written),
        dry_run=dry_run,
        validation_errors=errors,
    )
