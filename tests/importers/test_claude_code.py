"""amodal import claude-code (SPEC 19): every mapping rule, warning and skip reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.importers.claude_code import NO_EQUIVALENT

from ._helpers import assert_valid_and_faithful, config, outcome, run, warned

CC = "claude-code"


def agent(
    name: str, tools: str | None = None, body: str = "You review code.\n", **front: str
) -> str:
    lines = [f"name: {name}", f"description: {front.pop('description', 'Reviews code.')}"]
    if tools is not None:
        lines.append(f"tools: {tools}")
    lines += [f"{key}: {value}" for key, value in front.items()]
    return "---\n" + "\n".join(lines) + "\n---\n" + body


def test_each_claude_tool_maps_to_its_runtime_tool_cleanly(tmp_path: Path) -> None:
    tools = "Read, Write, Edit, MultiEdit, LS, Glob, Grep, AskUserQuestion"
    report = run(CC, tmp_path, {"agents/reviewer.md": agent("reviewer", tools)})

    item = outcome(report, "agents/reviewer.md")
    assert item.status == "imported" and item.warnings == ()
    assert config(tmp_path, "reviewer")["tools"] == [
        "read_file",
        "write_file",
        "list_files",
        "glob_files",
        "grep_files",
    ]
    assert_valid_and_faithful(report, tmp_path / "src")


def test_task_with_names_gives_call_subagent_and_that_delegation_list(tmp_path: Path) -> None:
    files = {
        "agents/lead.md": agent("lead", "Read, Task(writer, tester, ghost)"),
        "agents/writer.md": agent("writer", "Write"),
        "agents/tester.md": agent("tester", "Read"),
        "agents/other.md": agent("other", "Read"),
    }
    report = run(CC, tmp_path, files)

    lead = config(tmp_path, "lead")
    assert lead["tools"] == ["read_file", "call_subagent"]
    assert lead["subagents"] == ["writer", "tester"]
    assert warned(outcome(report, "agents/lead.md"), "delegation", "ghost", "no such agent")
    assert_valid_and_faithful(report, tmp_path / "src")


def test_agent_or_task_without_names_may_delegate_to_every_other_agent(tmp_path: Path) -> None:
    files = {
        "agents/lead.md": agent("lead", "Agent"),
        "agents/a.md": agent("a", "Read"),
        "agents/b.md": agent("b", "Read"),
    }
    run(CC, tmp_path, files)

    assert config(tmp_path, "lead")["subagents"] == ["a", "b"]


def test_skill_tool_gives_load_skill_and_every_imported_skill(tmp_path: Path) -> None:
    files = {
        "agents/a.md": agent("a", "Read, Skill"),
        "skills/pdf/SKILL.md": "---\nname: pdf\ndescription: Read PDFs.\n---\nUse it.\n",
        "skills/csv/SKILL.md": "---\nname: csv\ndescription: Read CSVs.\n---\nUse it.\n",
    }
    report = run(CC, tmp_path, files)

    assert config(tmp_path, "a")["tools"] == ["read_file", "load_skill"]
    assert config(tmp_path, "a")["skills"] == ["csv", "pdf"]
    assert outcome(report, "agents/a.md").status == "imported"


def test_omitted_tools_give_the_file_tools_with_one_note_and_no_warning(tmp_path: Path) -> None:
    report = run(CC, tmp_path, {"agents/a.md": agent("a")})

    assert outcome(report, "agents/a.md").status == "imported"
    assert config(tmp_path, "a")["tools"] == [
        "read_file",
        "write_file",
        "list_files",
        "glob_files",
        "grep_files",
    ]
    assert any("Bash, WebFetch, WebSearch" in note for note in report.notes)


def test_disallowed_tools_remove_their_runtime_tools(tmp_path: Path) -> None:
    files = {
        "agents/ro.md": agent("ro", disallowedTools="Write, Edit, MultiEdit, Glob"),
        "agents/half.md": agent("half", disallowedTools="Write"),
        "agents/listed.md": agent("listed", "Read, Grep", disallowedTools="Grep"),
    }
    report = run(CC, tmp_path, files)

    assert config(tmp_path, "ro")["tools"] == ["read_file", "list_files", "grep_files"]
    assert "write_file" not in config(tmp_path, "half")["tools"]
    assert warned(outcome(report, "agents/half.md"), "disallowedTools", "Write", "write_file")
    assert config(tmp_path, "listed")["tools"] == ["read_file"]


def test_an_empty_tools_list_gives_no_tools(tmp_path: Path) -> None:
    run(CC, tmp_path, {"agents/a.md": agent("a", "[]")})

    assert config(tmp_path, "a")["tools"] == []


@pytest.mark.parametrize("tool", sorted(NO_EQUIVALENT))
def test_a_tool_without_equivalent_is_a_warning_saying_what_to_use(
    tmp_path: Path, tool: str
) -> None:
    report = run(CC, tmp_path, {"agents/a.md": agent("a", f"Read, {tool}")})

    item = outcome(report, "agents/a.md")
    assert item.status == "imported with warnings"
    assert warned(item, f"tools: {tool}:", NO_EQUIVALENT[tool])
    assert config(tmp_path, "a")["tools"] == ["read_file"]


def test_bash_warning_names_the_safe_alternatives(tmp_path: Path) -> None:
    report = run(CC, tmp_path, {"agents/a.md": agent("a", "Bash")})

    assert warned(outcome(report, "agents/a.md"), "tools: Bash", "MCP server", "custom tool")


def test_an_unknown_tool_is_a_warning(tmp_path: Path) -> None:
    report = run(CC, tmp_path, {"agents/a.md": agent("a", "Read, Teleport")})

    assert warned(outcome(report, "agents/a.md"), "tools: Teleport", "not a Claude Code tool")


def test_mcp_tools_map_when_their_server_is_declared_and_warn_when_not(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "amodal.json").write_text(
        '{"name": "r", "version": "1", "mcp": {"servers": {"git-hub": '
        '{"transport": "stdio", "command": "gh-mcp"}}}}'
    )
    files = {
        "agents/a.md": agent("a", "mcp__git-hub__list_issues, mcp__git-hub, mcp__jira__search"),
    }
    report = run(CC, tmp_path, files)

    assert config(tmp_path, "a")["tools"] == ["git_hub__list_issues"]
    assert config(tmp_path, "a")["mcp"] == ["git-hub"]
    assert warned(
        outcome(report, "agents/a.md"), "mcp__jira__search", "not declared", "jira__search"
    )


@pytest.mark.parametrize(
    ("model", "tier", "warning"),
    [
        ("haiku", "simple", None),
        ("sonnet", "default", None),
        ("inherit", "default", None),
        ("opus", "advanced", None),
        ("claude-opus-4-1-20250805", "advanced", "became the 'advanced' tier"),
        ("gpt-5", "default", "not a Claude Code alias"),
    ],
)
def test_model_aliases_map_to_tiers(
    tmp_path: Path, model: str, tier: str, warning: str | None
) -> None:
    report = run(CC, tmp_path, {"agents/a.md": agent("a", "Read", model=model)})

    assert config(tmp_path, "a").get("modelTier", "default") == tier
    item = outcome(report, "agents/a.md")
    assert (item.warnings == ()) if warning is None else warned(item, "model:", warning)


def test_an_unbound_tier_is_noted_once(tmp_path: Path) -> None:
    report = run(CC, tmp_path, {"agents/a.md": agent("a", "Read", model="opus")})

    assert any("models.advanced" in note for note in report.notes)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("permissionMode", "acceptEdits", "no permission modes"),
        ("hooks", "{}", "no hooks"),
        ("color", "blue", "no agent colours"),
        ("memory", "project", "store"),
        ("background", "true", "no background runs"),
        ("isolation", "worktree", "no worktree isolation"),
        ("mcpServers", "[github]", "amodal.json `mcp.servers`"),
        ("effort", "high", "no reasoning-effort"),
        ("initialPrompt", "hi", "put it in the prompt"),
        ("flavour", "vanilla", "not a Claude Code field"),
    ],
)
def test_a_field_without_equivalent_is_a_warning_naming_it(
    tmp_path: Path, field: str, value: str, says: str
) -> None:
    front = {field: value}
    report = run(CC, tmp_path, {"agents/a.md": agent("a", "Read", **front)})

    assert warned(outcome(report, "agents/a.md"), f"{field}:", says)
    assert_valid_and_faithful(report, tmp_path / "src")


def test_max_turns_becomes_a_tool_call_budget_with_a_warning(tmp_path: Path) -> None:
    report = run(CC, tmp_path, {"agents/a.md": agent("a", "Read", maxTurns="500")})

    assert config(tmp_path, "a")["maxToolCalls"] == 200
    assert warned(outcome(report, "agents/a.md"), "maxTurns", "maxToolCalls 200")


def test_listed_skills_are_declared_with_load_skill(tmp_path: Path) -> None:
    files = {
        "agents/a.md": agent("a", "Read", skills="pdf, ghost"),
        "skills/pdf/SKILL.md": "---\nname: pdf\ndescription: Read PDFs.\n---\nUse it.\n",
    }
    report = run(CC, tmp_path, files)

    assert config(tmp_path, "a")["skills"] == ["pdf"]
    assert "load_skill" in config(tmp_path, "a")["tools"]
    item = outcome(report, "agents/a.md")
    assert warned(item, "skills:", "preloads")
    assert warned(item, "skills: ghost", "no such skill")
    assert_valid_and_faithful(report, tmp_path / "src")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("# Notes\nNot an agent.\n", "no frontmatter"),
        ("---\nname: a\n---\nBody.\n", "no `description`"),
        ("---\nname: a\ndescription: x\nBody.\n", "never closed"),
        ("---\nname: [a\ndescription: x\n---\nBody.\n", "not valid YAML"),
        ("---\n- a\n- b\n---\nBody.\n", "not `key: value` pairs"),
        ("---\nname: a\ndescription: x\n---\n\n  \n", "the prompt is empty"),
    ],
)
def test_each_skip_reason_is_reported(tmp_path: Path, text: str, reason: str) -> None:
    report = run(CC, tmp_path, {"agents/a.md": text})

    item = outcome(report, "agents/a.md")
    assert item.status == "skipped" and reason in (item.reason or "")
    assert not (tmp_path / "repo/agents/a").exists()
    assert report.validation_errors == ()


def test_a_file_that_is_not_utf8_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "src/agents").mkdir(parents=True)
    (tmp_path / "src/agents/a.md").write_bytes(b"---\nname: a\n---\n\xff\xfe")

    report = run(CC, tmp_path, {})

    assert outcome(report, "agents/a.md").reason == "the file is not UTF-8 text"


def test_an_unquoted_colon_in_a_value_is_repaired_with_a_warning(tmp_path: Path) -> None:
    text = "---\nname: a\ndescription: Use when: the user asks for a review\n---\nReview.\n"
    report = run(CC, tmp_path, {"agents/a.md": text})

    item = outcome(report, "agents/a.md")
    assert item.status == "imported with warnings"
    assert warned(item, "frontmatter", "unquoted ': '", "description")
    assert config(tmp_path, "a")["description"] == "Use when: the user asks for a review"


def test_names_are_normalised_and_collisions_renamed_deterministically(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "agents/taken").mkdir(parents=True)
    (repo / "amodal.json").write_text('{"name": "r", "version": "1"}')
    (repo / "agents/taken/AGENT.md").write_text("A person's own agent.\n")
    files = {
        "a/agents/one.md": agent("Code Reviewer", "Read"),
        "b/agents/two.md": agent("code-reviewer", "Read"),
        "c/agents/main.md": agent("main", "Read"),
        "d/agents/taken.md": agent("taken", "Read"),
        "e/agents/no-name.md": "---\ndescription: Unnamed.\n---\nHello.\n",
    }
    report = run(CC, tmp_path, files)

    names = {item.source: item.name for item in report.outcomes}
    assert names == {
        "a/agents/one.md": "code-reviewer",
        "b/agents/two.md": "code-reviewer-2",
        "c/agents/main.md": "main-2",
        "d/agents/taken.md": "taken-2",
        "e/agents/no-name.md": "no-name",
    }
    assert warned(outcome(report, "a/agents/one.md"), "'Code Reviewer' -> 'code-reviewer'")
    assert warned(outcome(report, "b/agents/two.md"), "taken, so renamed")
    assert warned(outcome(report, "e/agents/no-name.md"), "name: missing")
    assert (repo / "agents/taken/AGENT.md").read_text() == "A person's own agent.\n"
    assert_valid_and_faithful(report, tmp_path / "src")


def test_a_description_keeps_1024_characters_and_warns_when_cut(tmp_path: Path) -> None:
    files = {
        "agents/long.md": agent("long", "Read", description="x" * 1500),
        "agents/lines.md": agent("lines", "Read", description="|\n  First line.\n  Second."),
    }
    report = run(CC, tmp_path, files)

    assert len(config(tmp_path, "long")["description"]) == 1024
    assert warned(outcome(report, "agents/long.md"), "description: 1,500 characters")
    assert config(tmp_path, "lines")["description"] == "First line.\nSecond."
    assert outcome(report, "agents/lines.md").status == "imported"


@pytest.mark.parametrize(
    "body",
    [
        "Use {{ user }} and {% if x %} and {# note #} literally.\n",
        "Jinja says {% raw %} and {% endraw %} too: {{ x }}\n",
        "Intro.\n\n## Prompt\n\nThe real prompt.\n\n## Config\n\nNot config.\n",
        "Helm: {{ .Values.image }}\n\n## Prompt\nWith {{{ braces }}}.\n",
        "\n\n  Indented first line, trailing spaces   \n\n\n",
    ],
)
def test_prompts_render_byte_for_byte(tmp_path: Path, body: str) -> None:
    report = run(CC, tmp_path, {"agents/a.md": agent("a", "Read", body=body)})

    assert outcome(report, "agents/a.md").status == "imported"
    assert_valid_and_faithful(report, tmp_path / "src")


def test_layouts_project_user_folder_and_plugin_marketplace(tmp_path: Path) -> None:
    files = {
        ".claude/agents/local.md": agent("local", "Read"),
        ".claude/agents/group/nested.md": agent("nested", "Read"),
        ".claude/skills/notes/SKILL.md": "---\nname: notes\ndescription: Notes.\n---\nN.\n",
        "plugins/p1/agents/p1-agent.md": agent("p1-agent", "Read"),
        "plugins/p1/skills/audit/SKILL.md": "---\nname: audit\ndescription: Audit.\n---\nA.\n",
        "plugins/p1/commands/deploy.md": "---\ndescription: a slash command\n---\nDeploy.\n",
        "README.md": "# A marketplace\n",
    }
    report = run(CC, tmp_path, files)

    assert sorted(item.source for item in report.outcomes) == [
        ".claude/agents/group/nested.md",
        ".claude/agents/local.md",
        ".claude/skills/notes/SKILL.md",
        "plugins/p1/agents/p1-agent.md",
        "plugins/p1/skills/audit/SKILL.md",
    ]
    assert_valid_and_faithful(report, tmp_path / "src")
    folder = run(CC, tmp_path / "user", {"only.md": agent("only", "Read")})
    assert [item.name for item in folder.outcomes] == ["only"]


def test_skills_keep_their_files_and_report_what_they_lose(tmp_path: Path) -> None:
    skill = (
        "---\nname: audit\ndescription: Audit pages.\nlicense: MIT\n"
        "allowed-tools: Read, Grep, Bash\nuser-invocable: true\n---\n# Audit\nSee references.\n"
    )
    files = {
        "skills/audit/SKILL.md": skill,
        "skills/audit/references/guide.md": "Guide.\n",
        "skills/audit/scripts/check.py": "print('ok')\n",
        "skills/nodesc/SKILL.md": "---\nname: nodesc\n---\nBody.\n",
    }
    (tmp_path / "src/skills/audit/assets").mkdir(parents=True)
    (tmp_path / "src/skills/audit/assets/logo.png").write_bytes(b"\x89PNG\xff\xfe")
    report = run(CC, tmp_path, files)

    item = outcome(report, "skills/audit/SKILL.md")
    assert warned(item, "allowed-tools: Bash")
    assert warned(item, "user-invocable", "not a skill field")
    assert warned(item, "scripts/check.py", "does not run skill scripts")
    assert warned(item, "assets/logo.png", "not text")
    assert outcome(report, "skills/nodesc/SKILL.md").reason == "no `description`: a skill needs one"
    written = (tmp_path / "repo/skills/audit/SKILL.md").read_text()
    assert "# license: MIT" in written and "allowedTools:\n- read_file\n- grep_files" in written
    assert_valid_and_faithful(report, tmp_path / "src")
    from runtime.repo import load_repo

    bundle = load_repo(tmp_path / "repo").bundle
    assert bundle is not None
    assert set(bundle.skills["audit"].files) == {"references/guide.md", "scripts/check.py"}
    assert bundle.skills["audit"].body.startswith("# Audit")


def test_skill_name_collisions_are_renamed(tmp_path: Path) -> None:
    files = {
        "a/skills/pdf/SKILL.md": "---\nname: pdf\ndescription: One.\n---\nA.\n",
        "b/skills/pdf/SKILL.md": "---\nname: PDF\ndescription: Two.\n---\nB.\n",
    }
    report = run(CC, tmp_path, files)

    assert [item.name for item in report.outcomes] == ["pdf", "PDF-2"]
    assert warned(outcome(report, "b/skills/pdf/SKILL.md"), "'PDF' -> 'PDF-2'")
    assert_valid_and_faithful(report, tmp_path / "src")


def test_a_second_import_changes_no_file(tmp_path: Path) -> None:
    files = {
        "agents/lead.md": agent("lead", "Read, Task(writer)", body="{{ x }}\n"),
        "agents/writer.md": agent("Writer", "Write"),
        "skills/pdf/SKILL.md": "---\nname: pdf\ndescription: One.\n---\nA.\n",
        "skills/pdf/ref.md": "Ref.\n",
    }
    first = run(CC, tmp_path, files)
    repo = tmp_path / "repo"
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in repo.rglob("*") if p.is_file()}

    second = run(CC, tmp_path, {})

    assert first.written and second.written == ()
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in repo.rglob("*") if p.is_file()}
    assert after == before
    assert [o.as_json() for o in second.outcomes] == [o.as_json() for o in first.outcomes]


def test_dry_run_writes_nothing_and_reports_the_same(tmp_path: Path) -> None:
    dry = run(CC, tmp_path, {"agents/a.md": agent("a", "Read, Bash")}, dry_run=True)

    assert not (tmp_path / "repo").exists()
    assert outcome(dry, "agents/a.md").status == "imported with warnings"
    assert "agents/a/AGENT.md" in dry.written


def test_a_repo_inside_the_source_is_not_read_back_as_source(tmp_path: Path) -> None:
    from runtime.importers import import_claude_code
    from tests.conftest import write_repo

    source = write_repo(tmp_path / "src", {"agents/a.md": agent("a", "Read")})
    first = import_claude_code(source, source / "team")
    second = import_claude_code(source, source / "team")

    assert [item.source for item in second.outcomes] == ["agents/a.md"]
    assert second.written == () and first.written
