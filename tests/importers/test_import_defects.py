"""What importing public collections of Claude Code and OpenCode agents showed (SPEC 19):
sources that reach outside their tree, files that are no agents, re-imports from another
root, and reports that dropped what a person must know."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runtime.importers import import_claude_code, import_opencode
from tests.conftest import CliResult, write_repo

from ._helpers import outcome, run, warned

CC, OC = "claude-code", "opencode"
AGENT = "---\nname: {name}\ndescription: Reviews code.\ntools: {tools}\n---\nYou review code.\n"


def agent(name: str, tools: str = "Read") -> str:
    return AGENT.format(name=name, tools=tools)


def written_text(repo: Path) -> str:
    return "\n".join(
        path.read_text(errors="replace") for path in sorted(repo.rglob("*")) if path.is_file()
    )


def test_a_symlinked_agent_or_skill_file_leading_out_of_the_source_is_not_read(
    tmp_path: Path,
) -> None:
    secret = write_repo(tmp_path / "elsewhere", {"secret.md": agent("leak") + "SECRET-PROMPT\n"})
    notes = secret / "notes.txt"
    notes.write_text("SECRET-NOTES\n")
    source = write_repo(
        tmp_path / "src",
        {
            "agents/fine.md": agent("fine"),
            "skills/review/SKILL.md": "---\nname: review\ndescription: Review.\n---\nDo it.\n",
        },
    )
    (source / "agents/leak.md").symlink_to(secret / "secret.md")
    (source / "skills/review/notes.txt").symlink_to(notes)

    report = import_claude_code(source, tmp_path / "repo")

    leak = outcome(report, "agents/leak.md")
    assert leak.status == "skipped" and "outside the source tree" in (leak.reason or "")
    assert warned(outcome(report, "skills/review/SKILL.md"), "notes.txt", "outside the source")
    text = written_text(tmp_path / "repo")
    assert "SECRET-PROMPT" not in text and "SECRET-NOTES" not in text


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = write_repo(tmp_path / "home", {".bashrc": "export TOKEN=SECRET-BASHRC\n"})
    monkeypatch.setenv("HOME", str(folder))
    return folder


@pytest.mark.parametrize("reference", ["/proc/self/environ", "../outside.md", "~/.bashrc"])
def test_an_opencode_file_prompt_outside_the_source_is_refused_and_reported(
    tmp_path: Path, home: Path, reference: str
) -> None:
    (tmp_path / "outside.md").write_text("SECRET-OUTSIDE\n")
    config = {"agent": {"spy": {"description": "Spies.", "prompt": f"{{file:{reference}}}"}}}
    report = run(OC, tmp_path, {"opencode.json": config})

    spy = outcome(report, "opencode.json#agent.spy")
    assert spy.status == "skipped" and "outside the source tree" in (spy.reason or "")
    text = written_text(tmp_path / "repo")
    assert "SECRET" not in text and "PATH=" not in text


def test_only_the_places_opencode_reads_agents_from_hold_agents(tmp_path: Path) -> None:
    config = {"agent": {"review": {"description": "Reviews.", "prompt": "{file:./prompts/r.md}"}}}
    files = {
        "opencode.json": config,
        "prompts/r.md": "You review with care.\n",
        "README.md": "# A collection\n",
        "docs/guide.md": "---\ndescription: Not an agent.\n---\nA guide.\n",
    }
    report = run(OC, tmp_path, files)

    assert [(o.source, o.status) for o in report.outcomes] == [
        ("opencode.json#agent.review", "imported")
    ]
    assert {p.name for p in (tmp_path / "repo/agents").iterdir()} - {"default", "main"} == {
        "review"
    }


def test_opencode_json_given_as_source_imports_its_agents_not_itself(tmp_path: Path) -> None:
    config = {"agent": {"review": {"description": "Reviews.", "prompt": "You review.\n"}}}
    source = write_repo(tmp_path / "src", {"opencode.json": config})

    report = import_opencode(source / "opencode.json", tmp_path / "repo")

    assert [(o.source, o.name) for o in report.outcomes] == [
        ("opencode.json#agent.review", "review")
    ]


@pytest.mark.parametrize("kind", [CC, OC])
def test_a_tree_imported_again_from_another_root_changes_nothing(tmp_path: Path, kind: str) -> None:
    folder = ".claude/agents" if kind == CC else ".opencode/agent"
    text = agent if kind == CC else (lambda name: "---\ndescription: Reviews.\n---\nYou review.\n")
    files = {f"{folder}/{name}.md": text(name) for name in ("alpha", "beta", "gamma")}
    if kind == CC:  # OpenCode agents list every skill they see: from agents/ they see none
        files["skills/audit/SKILL.md"] = "---\nname: audit\ndescription: Audit.\n---\nAudit.\n"
    source = write_repo(tmp_path / "src", files)
    importer = import_claude_code if kind == CC else import_opencode

    importer(source, tmp_path / "repo")
    again = importer(source / folder, tmp_path / "repo")
    once_more = importer(source, tmp_path / "repo")

    assert again.written == () and once_more.written == ()
    folders = {p.name for p in (tmp_path / "repo/agents").iterdir()} - {"default", "main"}
    assert folders == {"alpha", "beta", "gamma"}


def test_a_changed_file_imported_from_another_root_updates_its_folder(tmp_path: Path) -> None:
    source = write_repo(tmp_path / "src", {"agents/alpha.md": agent("alpha")})
    import_claude_code(source, tmp_path / "repo")
    (source / "agents/alpha.md").write_text(agent("alpha") + "And be kind.\n")

    again = import_claude_code(source / "agents", tmp_path / "repo")

    assert again.written == ("agents/alpha/AGENT.md",)
    assert "And be kind." in (tmp_path / "repo/agents/alpha/AGENT.md").read_text()


def test_json_keeps_the_notes(amodal: Callable[..., CliResult], tmp_path: Path) -> None:
    source = write_repo(
        tmp_path / "src", {"agents/plain.md": agent("plain").replace("tools: Read\n", "")}
    )

    result = amodal("import", "claude-code", str(source), "--into", str(tmp_path / "t"), "--json")

    rows = json.loads(result.stdout)
    notes = [row["note"] for row in rows if row["kind"] == "note"]
    assert any("agents that list no `tools`" in note for note in notes), rows
    assert [row["source"] for row in rows if row["kind"] == "agent"] == ["agents/plain.md"]


def test_a_tool_listed_twice_warns_once(tmp_path: Path) -> None:
    report = run(CC, tmp_path, {"agents/a.md": agent("a", "Read, Bash, Bash")})

    warnings = outcome(report, "agents/a.md").warnings
    assert sum("tools: Bash" in warning for warning in warnings) == 1


def test_a_skills_own_agents_folder_and_extensionless_scripts(tmp_path: Path) -> None:
    files = {
        "skills/review/SKILL.md": "---\nname: review\ndescription: Review.\n---\nDo it.\n",
        "skills/review/agents/helper.md": "# Notes for the helper\n",
        "skills/review/scripts/review-package": "#!/bin/bash\necho review\n",
        "agents/lead.md": agent("lead"),
    }
    report = run(CC, tmp_path, files)

    assert [o.source for o in report.outcomes if o.kind == "agent"] == ["agents/lead.md"]
    skill = outcome(report, "skills/review/SKILL.md")
    assert warned(skill, "scripts/review-package", "does not run skill scripts")
    assert (tmp_path / "repo/skills/review/agents/helper.md").is_file()


def test_every_opencode_permission_has_an_equivalent_or_a_warning(tmp_path: Path) -> None:
    front = "---\ndescription: An agent.\npermission:\n  {rule}\n---\nHi.\n"
    files = {
        ".opencode/agent/quiet.md": front.format(rule="question: deny"),
        ".opencode/agent/open.md": front.format(rule="'*': allow"),
        ".opencode/agent/loops.md": front.format(rule="doom_loop: allow"),
        ".opencode/agent/odd.md": "---\ndescription: Odd.\ntools: Read, Bash\n---\nHi.\n",
    }
    report = run(OC, tmp_path, files)

    assert warned(outcome(report, ".opencode/agent/quiet.md"), "permission.question", "ask_choice")
    assert warned(outcome(report, ".opencode/agent/open.md"), "permission.*", "bash", "webfetch")
    assert warned(outcome(report, ".opencode/agent/loops.md"), "permission.doom_loop")
    assert warned(outcome(report, ".opencode/agent/odd.md"), "tools: 'Read, Bash'", "ignored")


@pytest.fixture
def umask_022() -> Iterator[None]:
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def test_imported_files_follow_the_umask_as_init_does(tmp_path: Path, umask_022: None) -> None:
    run(CC, tmp_path, {"agents/a.md": agent("a")})

    repo = tmp_path / "repo"
    for path in (repo / "agents/a/AGENT.md", repo / "agents/a/agent.json", repo / "amodal.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_frontmatter_after_a_blank_line_points_at_line_1_and_crlf_is_reported(
    tmp_path: Path,
) -> None:
    files = {
        "agents/late.md": "\n" + agent("late"),
        "agents/windows.md": agent("windows").replace("\n", "\r\n"),
    }
    report = run(CC, tmp_path, files)

    late = outcome(report, "agents/late.md")
    assert late.status == "skipped" and "line 1 is blank" in (late.reason or "")
    assert "line 2" in (late.reason or "")
    assert warned(outcome(report, "agents/windows.md"), "line endings", "CRLF")
