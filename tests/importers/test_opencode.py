"""amodal import opencode (SPEC 19): permissions evaluated as OpenCode does, every field,
warning and skip reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.importers.opencode import DEFAULTS, Rule, access, evaluate, rules_from, wildcard

from ._helpers import assert_valid_and_faithful, config, outcome, run, warned

OC = "opencode"
FILE_TOOLS = ["read_file", "write_file", "list_files", "glob_files", "grep_files"]


def md(front: str = "description: Reviews code.", body: str = "You review code.\n") -> str:
    return f"---\n{front}\n---\n{body}"


@pytest.mark.parametrize(
    ("value", "pattern", "expected"),
    [
        ("git status", "git status *", True),
        ("git status --short", "git status *", True),
        ("git", "git status *", False),
        ("reviewer", "review*", True),
        ("a/b.md", "*.md", True),
        ("abc", "a?c", True),
        ("abbc", "a?c", False),
    ],
)
def test_wildcards_match_the_whole_value_as_opencode_does(
    value: str, pattern: str, expected: bool
) -> None:
    assert wildcard(value, pattern) is expected


def test_the_last_matching_rule_wins_and_no_match_asks() -> None:
    rules = rules_from({"task": {"*": "deny", "review*": "allow", "reviewer-x": "ask"}}, 2)

    assert evaluate("task", "reviewer", rules) == "allow"
    assert evaluate("task", "reviewer-x", rules) == "ask"
    assert evaluate("task", "writer", rules) == "deny"
    assert evaluate("bash", "ls", rules) == "ask"


def test_access_is_allow_only_for_every_input_without_asking() -> None:
    def decide(permission: dict[str, Any], name: str) -> str:
        return access(name, [*DEFAULTS, *rules_from(permission, 2)])

    assert decide({}, "read") == "allow"  # the .env defaults are OpenCode's baseline
    assert decide({"edit": "deny"}, "edit") == "deny"
    assert decide({"edit": "ask"}, "edit") == "ask"
    assert decide({"edit": {"*": "allow", "secrets/*": "deny"}}, "edit") == "some"
    assert decide({"edit": {"*": "deny", "docs/*": "allow"}}, "edit") == "some"
    assert decide({"*": "deny", "read": "allow"}, "read") == "allow"
    assert decide({"*": "deny"}, "grep") == "deny"


def test_an_agent_without_rules_gets_every_file_tool_cleanly(tmp_path: Path) -> None:
    report = run(OC, tmp_path, {".opencode/agent/reviewer.md": md()})

    assert outcome(report, ".opencode/agent/reviewer.md").status == "imported"
    assert config(tmp_path, "reviewer")["tools"] == FILE_TOOLS
    assert_valid_and_faithful(report, tmp_path / "src")


@pytest.mark.parametrize(
    ("front", "absent", "warning"),
    [
        ("permission:\n  edit: deny", "write_file", None),
        ("tools:\n  write: false", "write_file", None),
        ("tools:\n  grep: false\n  glob: false", "grep_files", None),
        ("permission:\n  edit: ask", "write_file", "asks before each use"),
        ("permission:\n  read:\n    '*': allow\n    'secret/*': deny", "read_file", "some inputs"),
        ("permission:\n  '*': deny\n  read: allow", "write_file", None),
    ],
)
def test_permissions_decide_each_file_tool(
    tmp_path: Path, front: str, absent: str, warning: str | None
) -> None:
    report = run(OC, tmp_path, {".opencode/agent/a.md": md(f"description: A.\n{front}")})

    assert absent not in config(tmp_path, "a")["tools"]
    item = outcome(report, ".opencode/agent/a.md")
    assert (item.warnings == ()) if warning is None else warned(item, warning)


def test_permission_is_assigned_over_the_legacy_tools_map(tmp_path: Path) -> None:
    front = "description: A.\ntools:\n  bash: false\n  edit: false\npermission:\n  edit: allow"
    report = run(OC, tmp_path, {".opencode/agent/a.md": md(front)})

    assert "write_file" in config(tmp_path, "a")["tools"]
    assert outcome(report, ".opencode/agent/a.md").status == "imported"  # bash denied: silent


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("bash", "no shell tool"),
        ("webfetch", "REST connection"),
        ("websearch", "no web search"),
        ("todowrite", "no to-do tool"),
        ("lsp", "no language server"),
        ("codesearch", "grep_files"),
        ("external_directory", "never reach outside"),
        ("context7_*", "not a tool this importer maps"),
    ],
)
def test_an_allowed_permission_without_equivalent_is_a_warning(
    tmp_path: Path, key: str, says: str
) -> None:
    report = run(
        OC,
        tmp_path,
        {".opencode/agent/a.md": md(f"description: A.\npermission:\n  '{key}': allow")},
    )

    assert warned(outcome(report, ".opencode/agent/a.md"), f"permission.{key}", says)


def test_delegation_follows_task_rules_and_modes(tmp_path: Path) -> None:
    files = {
        ".opencode/agent/lead.md": md("description: Leads.\nmode: primary"),
        ".opencode/agent/picky.md": md(
            "description: Picky.\nmode: primary\npermission:\n  task:\n    '*': deny\n"
            "    'review*': allow\n    writer: ask\n    explore: allow"
        ),
        ".opencode/agent/reviewer.md": md("description: Reviews.\nmode: subagent"),
        ".opencode/agent/writer.md": md("description: Writes.\nmode: subagent"),
        ".opencode/agent/both.md": md("description: Both.\nmode: all"),
        ".opencode/agent/chief.md": md(
            "description: Chief.\nmode: subagent\npermission:\n  task: allow"
        ),
    }
    report = run(OC, tmp_path, files)

    assert config(tmp_path, "lead")["subagents"] == ["both", "chief", "reviewer", "writer"]
    assert config(tmp_path, "picky")["subagents"] == ["reviewer"]
    assert warned(outcome(report, ".opencode/agent/picky.md"), "permission.task", "writer")
    assert warned(outcome(report, ".opencode/agent/picky.md"), "task: explore", "built-in")
    assert "subagents" not in config(tmp_path, "reviewer")  # a subagent cannot delegate
    assert config(tmp_path, "chief")["subagents"] == ["both", "reviewer", "writer"]
    assert "lead" not in config(tmp_path, "both")["subagents"]  # primary: not callable
    assert_valid_and_faithful(report, tmp_path / "src")


def test_config_rules_and_agents_with_comments_and_file_prompts(tmp_path: Path) -> None:
    files = {
        "opencode.jsonc": (
            '{\n  // global rules apply to every agent\n  "permission": {"edit": "deny", '
            '"bash": "allow"},\n  "mcp": {"jira": {"type": "remote", "url": "https://x"}},\n'
            '  "agent": {\n    "inline": {"description": "Inline.", "prompt": "Say hi. // not a '
            'comment"},\n    "filed": {"description": "Filed.", "prompt": "{file:./prompts/f.md}"},'
            '\n    "lost": {"description": "Lost.", "prompt": "{file:./prompts/none.md}"},\n'
            '    "build": {"model": "anthropic/claude-opus-4"},\n'
            '    "empty": {"description": "E."},\n'
            '    "merged": {"temperature": 0.3, "description": "From json."},\n  },\n}\n'
        ),
        "prompts/f.md": "From a file with {{ braces }}.\n",
        ".opencode/agent/merged.md": md("description: From md."),
    }
    report = run(OC, tmp_path, files)

    inline = config(tmp_path, "inline")
    assert "write_file" not in inline["tools"] and "read_file" in inline["tools"]
    assert inline["subagents"] == ["filed", "merged"]
    assert outcome(report, "opencode.jsonc#agent.lost").reason.startswith(
        "prompt ./prompts/none.md"
    )
    assert "built-in agent 'build'" in outcome(report, "opencode.jsonc#agent.build").reason
    assert "no `prompt`" in outcome(report, "opencode.jsonc#agent.empty").reason
    merged = config(tmp_path, "merged")
    assert merged["description"] == "From md." and merged["modelSettings"] == {"temperature": 0.3}
    assert any("permission.bash" in note for note in report.notes)
    assert any("MCP servers jira" in note for note in report.notes)
    assert_valid_and_faithful(report, tmp_path / "src")


@pytest.mark.parametrize(
    ("front", "check", "warning"),
    [
        ("temperature: 0.1", {"modelSettings": {"temperature": 0.1}}, None),
        ("temperature: 3", {}, "outside 0..2"),
        ("steps: 12", {"maxToolCalls": 12}, "steps: 12 steps became maxToolCalls 12"),
        ("maxSteps: 400", {"maxToolCalls": 200}, "maxSteps"),
        ("model: anthropic/claude-haiku-4", {"modelTier": "simple"}, "per tier"),
        ("model: openai/gpt-5", {}, "'default' tier"),
        ("top_p: 0.9", {}, "no top_p"),
        ("hidden: true", {}, "stays callable"),
        ("color: '#ff0000'", {}, "no agent colours"),
        ("variant: high", {}, "no model variants"),
        ("options:\n  reasoning: high", {}, "no provider options"),
        ("flavour: vanilla", {}, "not an OpenCode field"),
        ("mode: sideways", {}, "read as all"),
    ],
)
def test_each_field_maps_or_warns(
    tmp_path: Path, front: str, check: dict[str, Any], warning: str | None
) -> None:
    report = run(OC, tmp_path, {".opencode/agent/a.md": md(f"description: A.\n{front}")})

    written = config(tmp_path, "a")
    assert {key: written[key] for key in check} == check
    item = outcome(report, ".opencode/agent/a.md")
    assert (item.warnings == ()) if warning is None else warned(item, warning)


def test_disabled_agents_are_skipped_and_missing_descriptions_warned(tmp_path: Path) -> None:
    files = {
        ".opencode/agents/off.md": md("description: Off.\ndisable: true"),
        ".opencode/agents/bare.md": "Just a prompt.\n",
        ".opencode/agents/review/security.md": md("description: Security review."),
    }
    report = run(OC, tmp_path, files)

    assert outcome(report, ".opencode/agents/off.md").reason == (
        "disabled in the source (`disable: true`)"
    )
    assert warned(outcome(report, ".opencode/agents/bare.md"), "description: missing")
    nested = outcome(report, ".opencode/agents/review/security.md")
    assert nested.name == "review-security" and warned(nested, "'review/security'")
    assert_valid_and_faithful(report, tmp_path / "src")


def test_skills_go_to_every_agent_the_skill_rules_allow(tmp_path: Path) -> None:
    files = {
        ".opencode/skill/pdf/SKILL.md": "---\nname: pdf\ndescription: PDFs.\n---\nP.\n",
        ".opencode/skill/csv/SKILL.md": "---\nname: csv\ndescription: CSVs.\n---\nC.\n",
        ".opencode/agent/a.md": md(),
        ".opencode/agent/b.md": md("description: B.\npermission:\n  skill:\n    pdf: deny"),
        ".opencode/agent/c.md": md("description: C.\npermission:\n  skill: deny"),
    }
    run(OC, tmp_path, files)

    assert config(tmp_path, "a")["skills"] == ["csv", "pdf"]
    assert "load_skill" in config(tmp_path, "a")["tools"]
    assert config(tmp_path, "b")["skills"] == ["csv"]
    assert "skills" not in config(tmp_path, "c")


def test_a_second_import_changes_no_file(tmp_path: Path) -> None:
    files = {
        ".opencode/agent/a.md": md(body="{% if %}\n## Prompt\n"),
        ".opencode/agent/b.md": md("description: B.\nmode: subagent"),
    }
    first = run(OC, tmp_path, files)
    repo = tmp_path / "repo"
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in repo.rglob("*") if p.is_file()}

    second = run(OC, tmp_path, {})

    assert first.written and second.written == ()
    assert before == {
        p: (p.read_bytes(), p.stat().st_mtime_ns) for p in repo.rglob("*") if p.is_file()
    }
    assert_valid_and_faithful(second, tmp_path / "src")


def test_an_invalid_config_is_reported_and_agents_still_import(tmp_path: Path) -> None:
    files = {"opencode.json": "{ not json", ".opencode/agent/a.md": md()}
    report = run(OC, tmp_path, files)

    assert "invalid JSON" in (outcome(report, "opencode.json").reason or "")
    assert outcome(report, ".opencode/agent/a.md").status == "imported"


def test_rules_from_reads_v2_permission_lists() -> None:
    rules = rules_from([{"action": "edit", "resource": "*", "effect": "deny"}], 1)

    assert rules == [Rule("edit", "*", "deny", 1)]
