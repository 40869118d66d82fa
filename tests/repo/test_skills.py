"""skills/ (SPEC 1.3): names from the heading or frontmatter, uniqueness, allowedTools."""

from __future__ import annotations

from ._helpers import errors_in, line_of, load, only_error, valid, warnings_in

AGENT_JSON = "agents/default/agent.json"
USES_SKILLS = {"tools": ["load_skill"]}


def test_heading_form_gives_name_and_description_from_trigger_and_intro(make_repo):
    text = (
        "# Skill: Craft Greeting\nTrigger: the person says hello.\n\n"
        "Greet them warmly.\n\n## Steps\n\n1. Say hi.\n"
    )
    root = make_repo({"skills/craft-greeting/SKILL.md": text})

    skill = valid(load(root)).bundle.skills["Craft Greeting"]

    assert skill.description == "the person says hello. Greet them warmly."
    assert skill.file == "skills/craft-greeting/SKILL.md"
    assert "1. Say hi." in skill.body


def test_frontmatter_form_gives_name_description_and_allowed_tools(make_repo):
    text = (
        "---\nname: Cite Sources\ndescription: How to cite.\n"
        "allowedTools: [load_knowledge]\n---\nCite everything.\n"
    )
    root = make_repo({"skills/cite/SKILL.md": text})

    skill = valid(load(root)).bundle.skills["Cite Sources"]

    assert skill.description == "How to cite."
    assert skill.allowed_tools == ("load_knowledge",)
    assert skill.body == "Cite everything."


def test_heading_name_wins_over_frontmatter_name(make_repo):
    text = "---\nname: Old Name\n---\n# Skill: New Name\nBody.\n"
    root = make_repo({"skills/renamed/SKILL.md": text})

    assert set(valid(load(root)).bundle.skills) == {"New Name"}


def test_skill_without_heading_or_frontmatter_name_is_an_error(make_repo):
    root = make_repo({"skills/nameless/SKILL.md": "---\ndescription: x\n---\nJust text.\n"})

    error = only_error(load(root))

    assert (error.file, error.line) == ("skills/nameless/SKILL.md", 4)
    assert "`# Skill: <Name>`" in error.message
    assert "`name`" in error.message


def test_skill_names_are_unique_ignoring_case_naming_both_files(make_repo):
    root = make_repo(
        {
            "skills/a/SKILL.md": "# Skill: Summarize\nBody.\n",
            "skills/b/SKILL.md": "---\nname: SUMMARIZE\n---\nBody.\n",
        }
    )

    error = only_error(load(root))

    assert error.file == "skills/b/SKILL.md"
    assert "skills/a/SKILL.md" in error.message
    assert "unique ignoring case" in error.message


def test_agents_reference_a_skill_by_its_loaded_name(make_repo):
    root = make_repo(
        {
            "skills/craft-greeting/SKILL.md": "# Skill: Craft Greeting\nBody.\n",
            AGENT_JSON: {**USES_SKILLS, "skills": ["Craft Greeting"]},
        }
    )

    [entry] = valid(load(root)).bundle.agents["default"].skills

    assert entry.name == "Craft Greeting"


def test_skill_referenced_by_its_folder_name_is_an_error_explaining_the_loaded_name(make_repo):
    root = make_repo(
        {
            "skills/craft-greeting/SKILL.md": "# Skill: Craft Greeting\nBody.\n",
            AGENT_JSON: {**USES_SKILLS, "skills": ["craft-greeting"]},
        }
    )

    error = only_error(load(root))

    assert (error.file, error.field) == (AGENT_JSON, "skills[0]")
    assert error.line == line_of(root / AGENT_JSON, '"craft-greeting"')
    assert "not their folder" in error.message
    assert "'Craft Greeting'" in error.message


def test_unknown_skill_is_an_error_listing_the_known_skills(make_repo):
    root = make_repo(
        {
            "skills/a/SKILL.md": "# Skill: Summarize\nBody.\n",
            "skills/b/SKILL.md": "# Skill: Translate\nBody.\n",
            AGENT_JSON: {**USES_SKILLS, "skills": ["Sumarize"]},
        }
    )

    error = only_error(load(root))

    assert "did you mean 'Summarize'?" in error.message
    assert "known skills: 'Summarize', 'Translate'" in error.message


def test_a_broken_skill_is_reported_once_not_again_as_unknown_where_referenced(make_repo):
    root = make_repo(
        {
            "skills/summarize/SKILL.md": "---\nallowedTools: [\n---\n# Skill: Summarize\n",
            AGENT_JSON: {**USES_SKILLS, "skills": ["Summarize"]},
        }
    )

    error = only_error(load(root))

    assert error.file == "skills/summarize/SKILL.md"


def test_allowed_tools_must_name_known_tools_at_their_line(make_repo):
    text = "---\nname: Notes\nallowedTools:\n  - load_knowledge\n  - lod_skill\n---\nBody.\n"
    root = make_repo({"skills/notes/SKILL.md": text})

    error = only_error(load(root))

    assert (error.file, error.line, error.field) == ("skills/notes/SKILL.md", 5, "allowedTools[1]")
    assert "did you mean 'load_skill'?" in error.message
    assert "known tools:" in error.message


def test_misspelt_frontmatter_key_suggests_the_camel_case_key(make_repo):
    root = make_repo({"skills/notes/SKILL.md": "---\nname: Notes\nallowed_tools: []\n---\nBody.\n"})

    error = only_error(load(root))

    assert (error.line, error.field) == (3, "allowed_tools")
    assert "did you mean 'allowedTools'?" in error.message


def test_frontmatter_of_only_comments_is_empty_not_a_silently_dropped_skill(make_repo):
    root = make_repo({"skills/notes/SKILL.md": "---\n# nothing yet\n---\n# Skill: Notes\nBody.\n"})

    assert set(valid(load(root)).bundle.skills) == {"Notes"}


def test_invalid_skill_yaml_is_an_error_at_its_line(make_repo):
    root = make_repo({"skills/notes/SKILL.md": "---\nname: Notes\ndescription: [x\n---\nBody.\n"})

    error = only_error(load(root))

    assert error.file == "skills/notes/SKILL.md"
    assert error.line in (3, 4)
    assert error.message.startswith("invalid YAML")


def test_folder_without_skill_md_and_stray_files_are_ignored_with_warnings(make_repo):
    root = make_repo({"skills/draft/notes.md": "x", "skills/README.md": "x"})

    result = valid(load(root))

    assert result.bundle.skills == {}
    assert "no SKILL.md" in warnings_in(result, "skills/draft")[0].message
    assert warnings_in(result, "skills/README.md")


def test_skills_without_load_skill_tool_warn_that_only_names_are_seen(make_repo):
    root = make_repo(
        {"skills/a/SKILL.md": "# Skill: Summarize\nBody.\n", AGENT_JSON: {"skills": ["Summarize"]}}
    )

    result = valid(load(root))

    [warning] = warnings_in(result, AGENT_JSON)
    assert "`load_skill`" in warning.message


def test_all_skill_errors_are_reported_together(make_repo):
    root = make_repo(
        {
            "skills/a/SKILL.md": "No name.\n",
            "skills/b/SKILL.md": "---\nname: B\nallowedTools: [nope]\n---\nBody.\n",
        }
    )

    result = load(root)

    assert len(errors_in(result, "skills/a/SKILL.md")) == 1
    assert len(errors_in(result, "skills/b/SKILL.md")) == 1


def test_supporting_text_files_of_a_skill_are_loaded_by_path(make_repo):
    root = make_repo(
        {
            "skills/audit/SKILL.md": "# Skill: Audit\nRead references/checklist.md first.\n",
            "skills/audit/references/checklist.md": "- [ ] contrast\n",
            "skills/audit/scripts/check.py": "print('ok')\n",
            "skills/audit/.hidden": "not served",
        }
    )

    skill = valid(load(root)).bundle.skills["Audit"]

    assert skill.files == {
        "references/checklist.md": "- [ ] contrast\n",
        "scripts/check.py": "print('ok')\n",
    }


def test_binary_and_oversized_supporting_files_are_left_out_with_a_warning(make_repo):
    root = make_repo({"skills/audit/SKILL.md": "# Skill: Audit\nAudit.\n"})
    (root / "skills/audit/logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    (root / "skills/audit/huge.txt").write_text("x" * 1_000_001)

    result = valid(load(root))

    assert result.bundle.skills["Audit"].files == {}
    assert "not UTF-8 text" in warnings_in(result, "skills/audit/logo.png")[0].message
    assert "larger than" in warnings_in(result, "skills/audit/huge.txt")[0].message


def test_editing_a_supporting_file_changes_the_bundle_version(make_repo):
    root = make_repo(
        {
            "skills/audit/SKILL.md": "# Skill: Audit\nAudit.\n",
            "skills/audit/notes.md": "v1\n",
        }
    )
    before = valid(load(root)).bundle.version
    (root / "skills/audit/notes.md").write_text("v2\n")

    assert valid(load(root)).bundle.version != before
