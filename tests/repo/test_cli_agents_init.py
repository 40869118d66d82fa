"""`amodal agents` and `amodal init` as a user runs them."""

from __future__ import annotations


def test_agents_json_lists_every_agent_with_the_documented_keys(amodal, example_repo):
    result = amodal("agents", "--json", cwd=example_repo)

    assert result.code == 0, result.stderr
    rows = result.json()
    assert [row["name"] for row in rows] == ["default", "researcher", "reviewer", "writer"]
    assert all(
        set(row) == {"name", "display_name", "description", "role", "default"} for row in rows
    )
    default = rows[0]
    assert default == {
        "name": "default",
        "display_name": "Desk Lead",
        "description": "Answers questions and coordinates the research desk's specialists.",
        "role": "planner",
        "default": True,
    }
    assert [row["default"] for row in rows[1:]] == [False, False, False]
    assert rows[3]["display_name"] == "Writer"  # from AGENT.md frontmatter


def test_agents_json_gives_null_role_for_an_agent_without_one(amodal, make_repo):
    result = amodal("agents", "--json", cwd=make_repo())

    assert result.json() == [
        {
            "name": "default",
            "display_name": "default",
            "description": "",
            "role": None,
            "default": True,
        }
    ]


def test_agents_prints_a_table_marking_the_default(amodal, example_repo):
    result = amodal("agents", cwd=example_repo)

    assert result.code == 0
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["NAME", "DISPLAY", "NAME", "ROLE", "DESCRIPTION"]
    assert rows[0].startswith("default (default)")
    assert "Desk Lead" in rows[0]
    assert [row.split()[0] for row in rows] == ["default", "researcher", "reviewer", "writer"]


def test_agents_table_shows_the_first_line_and_json_the_whole_description(amodal, make_repo):
    description = "Reviews diffs.\nUse it after every change."
    root = make_repo({"agents/default/agent.json": {"description": description}})

    table = amodal("agents", cwd=root)
    rows = amodal("agents", "--json", cwd=root).json()

    assert table.stdout.splitlines()[1].rstrip().endswith("Reviews diffs.")
    assert "Use it after every change." not in table.stdout
    assert rows[0]["description"] == description


def test_agents_on_an_invalid_repo_prints_the_errors_and_exits_one(amodal, make_repo):
    root = make_repo({"agents/default/agent.json": {"rol": "tester"}})

    result = amodal("agents", "--json", cwd=root)

    assert result.code == 1
    output = result.stdout + result.stderr
    assert "agents/default/agent.json:2: rol: unknown key 'rol'" in output
    assert "did you mean 'role'?" in output


def test_init_makes_a_repo_that_validates_and_lists_its_agents(amodal, tmp_path):
    target = tmp_path / "My Team"

    created = amodal("init", str(target))
    validated = amodal("validate", "--json", cwd=target)
    listed = amodal("agents", "--json", cwd=target)

    assert created.code == 0, created.stderr
    assert "created" in created.stdout
    assert (target / "amodal.json").is_file()
    assert (target / "agents/default/AGENT.md").is_file()
    assert validated.code == 0, validated.stdout + validated.stderr
    assert validated.json() == []
    assert "warning" not in validated.stderr
    assert [row["name"] for row in listed.json()] == ["default", "writer"]  # the tour roots on it


def test_init_without_a_path_uses_the_current_folder(amodal, tmp_path):
    target = tmp_path / "here"
    target.mkdir()

    created = amodal("init", cwd=target)
    validated = amodal("validate", cwd=target)

    assert created.code == 0
    assert validated.code == 0, validated.stdout + validated.stderr
    assert '"name": "here"' in (target / "amodal.json").read_text(encoding="utf-8")


def test_init_refuses_to_overwrite_an_existing_repo(amodal, example_repo):
    before = (example_repo / "amodal.json").read_text(encoding="utf-8")

    result = amodal("init", str(example_repo))

    assert result.code == 1
    assert "already exists" in result.stderr
    assert (example_repo / "amodal.json").read_text(encoding="utf-8") == before
