"""`amodal import` as a new user runs it: import, validate, chat with an imported agent."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from runtime.testing import ScriptedModel
from tests.conftest import CliResult, write_repo

REVIEWER = (
    "---\nname: code-reviewer\ndescription: Reviews diffs for bugs. Use after every change.\n"
    "tools: Read, Grep, Glob, Bash\nmodel: sonnet\n---\nYou are a careful code reviewer.\n"
)


def test_import_validate_and_chat_with_an_imported_agent(
    amodal: Callable[..., CliResult], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    source = write_repo(tmp_path / "claude-agents", {"code-reviewer.md": REVIEWER})
    team = tmp_path / "my-team"

    imported = amodal("import", "claude-code", str(source), "--into", str(team))
    validated = amodal("validate", cwd=team)
    scripted_model.reply("Looks good to me.")
    chatted = amodal(
        "chat",
        "--agent",
        "code-reviewer",
        "Review my change",
        cwd=team,
        env={"AMODAL_DATA_DIR": str(tmp_path / "data")},
    )

    assert imported.code == 0, imported.stderr
    assert "imported with warnings: code-reviewer.md -> agents/code-reviewer" in imported.stdout
    assert "warning: tools: Bash: no shell tool" in imported.stdout
    assert "1 agents imported (0 clean, 1 with warnings), 0 skipped" in imported.stdout
    assert validated.code == 0, validated.stdout + validated.stderr
    assert chatted.code == 0, chatted.stderr
    assert chatted.stdout == "Looks good to me.\n"
    request = scripted_model.requests[0]
    assert "You are a careful code reviewer." in request.messages[0]["content"]
    assert set(request.tools) >= {"read_file", "grep_files", "glob_files"}


def test_json_report_and_dry_run(amodal: Callable[..., CliResult], tmp_path: Path) -> None:
    source = write_repo(tmp_path / "src", {"agents/code-reviewer.md": REVIEWER, "x.md": "# no"})
    team = tmp_path / "team"

    dry = amodal("import", "claude-code", str(source), "--into", str(team), "--dry-run", "--json")

    assert dry.code == 0, dry.stderr
    assert not team.exists()
    rows = json.loads(dry.stdout)
    notes = [row["note"] for row in rows if row["kind"] == "note"]
    assert notes and all("fileTools" in note for note in notes)  # where its files are
    rows = [row for row in rows if row["kind"] != "note"]
    assert rows == [
        {
            "source": "agents/code-reviewer.md",
            "agent": "code-reviewer",
            "kind": "agent",
            "status": "imported with warnings",
            "warnings": [rows[0]["warnings"][0]],
            "reason": None,
        }
    ]
    assert "would write" in dry.stderr


def test_import_without_a_repo_or_into_is_a_clear_error(
    amodal: Callable[..., CliResult], tmp_path: Path
) -> None:
    source = write_repo(tmp_path / "src", {"a.md": REVIEWER})

    result = amodal("import", "opencode", str(source), cwd=tmp_path)

    assert result.code == 1
    assert "no agent repo here" in result.stderr


def test_a_dry_run_counts_the_files_the_import_writes_and_the_note_says_where_files_are(
    amodal: Callable[..., CliResult], tmp_path: Path
) -> None:
    source = write_repo(tmp_path / "claude-agents", {"code-reviewer.md": REVIEWER})
    team = tmp_path / "my-team"

    dry = amodal("import", "claude-code", str(source), "--into", str(team), "--dry-run")
    real = amodal("import", "claude-code", str(source), "--into", str(team))

    assert dry.code == 0 and real.code == 0, dry.stderr + real.stderr
    written = sum(1 for path in team.rglob("*") if path.is_file())
    assert f"would write {written} file(s) in {team}" in dry.stdout
    assert f"; wrote {written} file(s) in {team}" in real.stdout
    for report in (dry.stdout, real.stdout):
        assert "note: the file tools of imported agents work in this repo" in report
        assert '"fileTools": {"root":' in report
    # Pointed at the code, the note is not repeated.
    config = json.loads((team / "amodal.json").read_text())
    (team / "amodal.json").write_text(json.dumps({**config, "fileTools": {"root": ".."}}))
    again = amodal("import", "claude-code", str(source), "--into", str(team))
    assert again.code == 0 and "fileTools" not in again.stdout


def test_importing_into_the_current_folder_does_not_suggest_cd_dot(
    amodal: Callable[..., CliResult], tmp_path: Path
) -> None:
    source = write_repo(tmp_path / "claude-agents", {"code-reviewer.md": REVIEWER})
    team = tmp_path / "my-team"
    team.mkdir()

    result = amodal("import", "claude-code", str(source), "--into", ".", cwd=team)
    made = amodal("init", cwd=tmp_path / "claude-agents")

    assert result.code == 0, result.stderr
    assert "next: amodal validate && amodal agents" in result.stderr
    assert "cd ." not in result.stderr and "cd ." not in made.stderr
