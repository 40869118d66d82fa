"""`amodal validate` as a user runs it: exit codes, `path:line: message`, --json, discovery."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from runtime.repo.schema import SCHEMAS_DIR

from ._helpers import line_of


def test_validate_a_valid_repo_exits_zero_with_a_summary(amodal, example_repo):
    result = amodal("validate", cwd=example_repo)

    assert result.code == 0, result.stdout + result.stderr
    assert result.stdout == ""
    assert "valid: 4 agents, 2 skills, 2 stores, 2 knowledge documents, 1 custom tools" in (
        result.stderr
    )


def test_validate_prints_each_error_as_path_line_message_and_exits_one(amodal, make_repo):
    root = make_repo(
        {"agents/default/agent.json": '{\n  "description": "Helps.",\n  "maxToolCals": 3\n}\n'}
    )

    result = amodal("validate", cwd=root)

    assert result.code == 1
    [line] = result.stdout.splitlines()
    assert line.startswith("agents/default/agent.json:3: maxToolCals: unknown key 'maxToolCals'")
    assert "did you mean 'maxToolCalls'?" in line
    assert "1 error(s)" in result.stderr


def test_validate_reports_errors_of_every_file_in_one_run(amodal, example_repo):
    agent_json = example_repo / "agents/default/agent.json"
    agent_json.write_text(
        agent_json.read_text().replace('"Craft Greeting"', '"craft-greeting"'), encoding="utf-8"
    )
    agent_py = example_repo / "agents/reviewer/agent.py"
    agent_py.write_text(
        agent_py.read_text().replace("def is_manager", "async def is_manager"), encoding="utf-8"
    )
    (example_repo / "agents/researcher/AGENT.md").unlink()

    result = amodal("validate", cwd=example_repo)

    assert result.code == 1
    lines = result.stdout.splitlines()
    skill_line = line_of(agent_json, '"craft-greeting"')
    def_line = line_of(agent_py, "async def is_manager")
    assert any(
        line.startswith(f"agents/default/agent.json:{skill_line}: skills[0]: ")
        and "'Craft Greeting'" in line
        for line in lines
    )
    assert any(
        line.startswith(f"agents/reviewer/agent.py:{def_line}: ") and "async def" in line
        for line in lines
    )
    # The folder without AGENT.md is a warning, and the researcher it no longer defines
    # is an unknown subagent of default.
    assert "agents/researcher: warning: ignored: the folder has no AGENT.md" in result.stderr
    assert any("unknown agent 'researcher'" in line for line in lines)


def test_validate_prints_warnings_of_a_valid_repo_and_still_exits_zero(amodal, make_repo):
    root = make_repo(
        {
            "agents/draft/notes.txt": "later",
            "amodal.json": {"name": "r", "version": "1", "proactive": {"enabled": True}},
        }
    )

    result = amodal("validate", cwd=root)

    assert result.code == 0
    assert "agents/draft: warning: ignored: the folder has no AGENT.md" in result.stderr
    expected = "amodal.json:4: warning: proactive: 'proactive' is defined by the reference platform"
    assert expected in result.stderr


def test_validate_json_prints_a_list_of_errors_with_file_line_field_message(amodal, make_repo):
    root = make_repo(
        {
            "agents/default/agent.json": '{\n  "tools": ["load_skils"]\n}\n',
            "skills/greet/SKILL.md": "No name here.\n",
        }
    )

    result = amodal("validate", "--json", cwd=root)

    assert result.code == 1
    errors = result.json()
    assert all(set(error) == {"file", "line", "field", "message"} for error in errors)
    by_file = {error["file"]: error for error in errors}
    assert set(by_file) == {"agents/default/agent.json", "skills/greet/SKILL.md"}
    tool_error = by_file["agents/default/agent.json"]
    assert (tool_error["line"], tool_error["field"]) == (2, "tools[0]")
    assert "did you mean 'load_skill'?" in tool_error["message"]
    assert by_file["skills/greet/SKILL.md"]["field"] == ""


def test_validate_json_of_a_valid_repo_is_an_empty_list(amodal, example_repo):
    result = amodal("validate", "--json", cwd=example_repo)

    assert result.code == 0
    assert json.loads(result.stdout) == []


def test_validate_finds_the_repo_by_walking_up_from_a_subdirectory(amodal, example_repo):
    result = amodal("validate", cwd=example_repo / "agents" / "reviewer")

    assert result.code == 0
    assert "valid: 4 agents" in result.stderr


def test_validate_takes_the_repo_from_repo_option(amodal, example_repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    result = amodal("--repo", str(example_repo), "validate", cwd=elsewhere)

    assert result.code == 0
    assert "valid: 4 agents" in result.stderr


@pytest.fixture
def outside_any_repo(tmp_path):
    """A new empty folder with no amodal.json in it or any folder above it.

    The temporary directory itself may sit below someone's agent repo (a stray
    /tmp/amodal.json), so try a few places and use the first that is clear.
    """
    for base in (tmp_path, Path("/var/tmp"), Path("/dev/shm"), Path.home()):
        clear = base.is_dir() and not any(
            (folder / "amodal.json").exists() for folder in (base, *base.parents)
        )
        if clear:
            with tempfile.TemporaryDirectory(dir=base) as folder:
                yield Path(folder)
            return
    pytest.fail("every candidate folder lies inside an agent repo")


def test_validate_outside_any_repo_says_how_to_make_one(amodal, outside_any_repo):
    result = amodal("validate", cwd=outside_any_repo)

    assert result.code == 1
    assert "no agent repo here" in result.stderr
    assert "amodal init" in result.stderr


def test_repo_option_pointing_at_a_folder_without_amodal_json_is_an_error(amodal, tmp_path):
    result = amodal("--repo", str(tmp_path), "validate")

    assert result.code == 1
    assert "there is no amodal.json there" in result.stderr


def test_validate_resolves_env_references_from_the_environment(amodal, make_repo):
    root = make_repo(
        {"amodal.json": {"name": "r", "version": "1", "models": {"main": "env:AMODAL_TEST_M"}}}
    )

    present = amodal("validate", cwd=root, env={"AMODAL_TEST_M": "gpt-4o"})
    unset = amodal("validate", "--json", cwd=root)

    assert present.code == 0
    assert unset.code == 1
    [error] = unset.json()
    assert (error["file"], error["field"]) == ("amodal.json", "models.main")
    assert "'AMODAL_TEST_M' is not set" in error["message"]


def test_validate_offline_checks_only_the_form_of_env_references(amodal, make_repo):
    root = make_repo(
        {"amodal.json": {"name": "r", "version": "1", "models": {"main": "env:AMODAL_TEST_M"}}}
    )

    assert amodal("validate", "--offline", cwd=root).code == 0


def test_schema_prints_the_shipped_json_schema_of_agent_json(amodal):
    result = amodal("schema", "agent")

    assert result.code == 0
    assert json.loads(result.stdout) == json.loads(
        (SCHEMAS_DIR / "agent.schema.json").read_text(encoding="utf-8")
    )


def test_schema_out_writes_every_schema(amodal, tmp_path):
    result = amodal("schema", "--out", str(tmp_path / "schemas"))

    assert result.code == 0
    written = sorted(path.name for path in (tmp_path / "schemas").iterdir())
    assert written == [
        "access.schema.json",
        "agent.schema.json",
        "amodal.schema.json",
        "connection.schema.json",
        "eval.schema.json",
        "store.schema.json",
        "tool.schema.json",
    ]


def test_schema_without_a_name_is_a_usage_error(amodal):
    result = amodal("schema")

    assert result.code == 2
    assert "name a schema" in result.stderr


def test_validate_reports_every_typo_of_a_repo_in_one_pass(amodal, make_repo):
    """Errors inside one agent do not hide its other errors: a key that is wrong and the
    references of the keys that are right come out together, with a did-you-mean for an
    agent that has its own errors."""
    lead = (
        "{\n"
        '  "maxToolCals": 3,\n'
        '  "tools": ["load_knowlege"],\n'
        '  "subagents": ["helpr"],\n'
        '  "stores": {"notes": "rw"},\n'
        '  "modelTier": "fast"\n'
        "}\n"
    )
    helper_py = (
        'tools = ["load_skill"]\n\n\n'
        "def bad(x, y):\n    return True\n\n\n"
        'agent = {\n    "tools": [{"name": "load_skil"}, {"name": "load_knowledge", '
        '"conditional": bad}],\n    "maxDepth": "deep",\n}\n'
    )
    root = make_repo(
        {
            "agents/lead/AGENT.md": "You lead.\n",
            "agents/lead/agent.json": lead,
            "agents/helper/AGENT.md": "You help.\n",
            "agents/helper/agent.py": helper_py,
        }
    )

    result = amodal("validate", cwd=root)

    assert result.code == 1
    lines = result.stdout.splitlines()
    assert {": ".join(line.split(": ")[:2]) for line in lines} == {
        "agents/helper/agent.py:1: tools",  # module-level `tools`
        "agents/helper/agent.py:4: tools[1].conditional",
        "agents/helper/agent.py:9: tools[0]",  # unknown tool 'load_skil'
        "agents/helper/agent.py:10: maxDepth",
        "agents/lead/agent.json:2: maxToolCals",
        "agents/lead/agent.json:3: tools[0]",
        "agents/lead/agent.json:4: subagents[0]",
        "agents/lead/agent.json:5: stores.notes",
        "agents/lead/agent.json:6: modelTier",
    }, result.stdout
    assert "unknown tool 'load_knowlege' (did you mean 'load_knowledge'?)" in result.stdout
    assert "unknown tool 'load_skil' (did you mean 'load_skill'?)" in result.stdout
    assert "unknown agent 'helpr' (did you mean 'helper'?)" in result.stdout
    assert "unknown store 'notes'" in result.stdout
    assert "9 error(s)" in result.stderr
    # Nothing reported twice, and no warning that only follows from a reported error.
    assert len(set(lines)) == len(lines) and "warning" not in result.stderr.replace("error(s)", "")


def test_a_wrong_store_grant_does_not_also_fail_the_store_tools_that_need_it(amodal, make_repo):
    root = make_repo(
        {
            "stores/notes.json": {
                "entity": {
                    "name": "Note",
                    "key": "note:{slug}",
                    "schema": {"slug": {"type": "string"}},
                }
            },
            "agents/default/agent.json": {
                "tools": ["store__notes__put"],
                "stores": {"notes": "write"},
            },
        }
    )

    result = amodal("validate", cwd=root)

    assert result.code == 1
    [line] = result.stdout.splitlines()
    assert "stores.notes" in line and "needs its store" not in line
