"""agents/ (SPEC 1.2): folders, AGENT.md, agent.json, CONTEXT.md and display names."""

from __future__ import annotations

import pytest

from runtime.repo.bundle import ModelSettings

from ._helpers import errors_in, line_of, load, only_error, valid, warnings_in

AGENT_MD = "agents/default/AGENT.md"
AGENT_JSON = "agents/default/agent.json"
CONTEXT_MD = "agents/default/CONTEXT.md"


# ---------------------------------------------------------------- folders and names


def test_a_folder_with_agent_md_defines_an_agent_named_after_the_folder(make_repo):
    root = make_repo({"agents/fact-checker_2/AGENT.md": "Check facts."})

    bundle = valid(load(root)).bundle

    assert set(bundle.agents) == {"default", "fact-checker_2"}
    assert bundle.agents["fact-checker_2"].prompt.source == "Check facts."


def test_a_folder_without_agent_md_is_ignored_with_a_warning(make_repo):
    root = make_repo({"agents/helper/agent.json": {"description": "No prompt yet."}})

    result = valid(load(root))

    assert "helper" not in result.bundle.agents
    [warning] = warnings_in(result, "agents/helper")
    assert "no AGENT.md" in warning.message
    assert "ignored" in warning.message


def test_a_file_directly_under_agents_is_ignored_with_a_warning(make_repo):
    root = make_repo({"agents/notes.md": "Not an agent."})

    result = valid(load(root))

    [warning] = warnings_in(result, "agents/notes.md")
    assert "agents/<name>/" in warning.message


def test_a_repo_without_agents_folder_warns(make_repo):
    root = make_repo({"agents": None})

    result = valid(load(root))

    assert result.bundle.agents == {}
    assert [warning.file for warning in result.warnings] == ["agents"]


@pytest.mark.parametrize("name", ["Researcher", "_private", "-dash", "has space", "a" * 65])
def test_an_agent_folder_name_outside_the_pattern_is_an_error(make_repo, name):
    root = make_repo({f"agents/{name}/AGENT.md": "Prompt."})

    error = only_error(load(root))

    assert error.file == f"agents/{name}"
    assert "rename the folder" in error.message


@pytest.mark.parametrize("name", ["a", "0day", "a" * 64, "x_y-z"])
def test_an_agent_folder_name_inside_the_pattern_is_accepted(make_repo, name):
    root = make_repo({f"agents/{name}/AGENT.md": "Prompt."})

    assert name in valid(load(root)).bundle.agents


def test_another_file_in_an_agent_folder_is_a_warning(make_repo):
    root = make_repo({"agents/default/notes.txt": "scratch"})

    result = valid(load(root))

    [warning] = warnings_in(result, "agents/default/notes.txt")
    assert "AGENT.md, agent.json, agent.py, CONTEXT.md" in warning.message


# ---------------------------------------------------------------- AGENT.md


def test_prompt_is_the_text_under_the_prompt_heading_up_to_the_next_section(make_repo):
    text = (
        "# Researcher\n\nIntro not in the prompt.\n\n## Prompt\n\nFind facts.\n\n"
        "### Detail\n\nStill the prompt.\n\n## Notes\n\nNot the prompt.\n"
    )
    root = make_repo({AGENT_MD: text})

    prompt = valid(load(root)).bundle.agents["default"].prompt

    assert prompt.source == "Find facts.\n\n### Detail\n\nStill the prompt."
    assert prompt.first_line == line_of(root / AGENT_MD, "Find facts.")


def test_prompt_is_the_whole_body_without_a_prompt_heading(make_repo):
    root = make_repo(
        {AGENT_MD: "---\ndescription: Helps.\n---\n\nHelp people.\n\n## Tips\nBe kind.\n"}
    )

    prompt = valid(load(root)).bundle.agents["default"].prompt

    assert prompt.source == "Help people.\n\n## Tips\nBe kind."
    assert prompt.first_line == 5


def test_a_prompt_heading_inside_a_code_fence_is_not_a_section(make_repo):
    root = make_repo({AGENT_MD: "Use this format:\n\n```\n## Prompt\nnot a heading\n```\n"})

    prompt = valid(load(root)).bundle.agents["default"].prompt

    assert prompt.source.startswith("Use this format:")


@pytest.mark.parametrize("text", ["", "   \n\n", "---\ndescription: Helps.\n---\n\n"])
def test_an_empty_prompt_is_an_error(make_repo, text):
    root = make_repo({AGENT_MD: text})

    error = only_error(load(root))

    assert error.file == AGENT_MD
    assert "prompt is empty" in error.message


def test_an_empty_prompt_section_is_an_error_pointing_at_the_section(make_repo):
    root = make_repo({AGENT_MD: "# Agent\n\n## Prompt\n\n## Notes\n\nSomething.\n"})

    error = only_error(load(root))

    assert "under `## Prompt`" in error.message


def test_a_config_section_is_not_parsed_and_warns_where_config_belongs(make_repo):
    root = make_repo({AGENT_MD: "Help people.\n\n## Config\n\ntools: [load_skill]\n"})

    result = valid(load(root))

    [warning] = warnings_in(result, AGENT_MD)
    assert warning.line == 3
    assert "`## Config` section is not parsed" in warning.message
    assert "agent.json" in warning.message
    assert result.bundle.agents["default"].tools == ()


def test_frontmatter_configures_an_agent_without_agent_json(make_repo):
    text = (
        "---\ndisplayName: Helper\ndescription: Helps.\nrole: Tester\n"
        "persona:\n  tone: concise\ntools: [load_knowledge]\nmaxToolCalls: 4\n"
        "modelTier: advanced\n---\nHelp.\n"
    )
    root = make_repo({AGENT_MD: text})

    agent = valid(load(root)).bundle.agents["default"]

    assert agent.display_name == "Helper"
    assert agent.description == "Helps."
    assert agent.role == "tester"
    assert agent.tone == "concise"
    assert [entry.name for entry in agent.tools] == ["load_knowledge"]
    assert agent.tools[0].origin.file == AGENT_MD
    assert agent.tools[0].origin.line == line_of(root / AGENT_MD, "tools:")
    assert (agent.max_tool_calls, agent.model_tier) == (4, "advanced")


def test_frontmatter_unknown_key_is_an_error_at_its_file_line(make_repo):
    root = make_repo({AGENT_MD: "---\ndescription: Helps.\ntols: [load_skill]\n---\nHelp.\n"})

    error = only_error(load(root))

    assert (error.file, error.line, error.field) == (AGENT_MD, 3, "tols")
    assert "did you mean 'tools'?" in error.message


def test_frontmatter_unknown_key_never_suggests_name_which_frontmatter_rejects(make_repo):
    root = make_repo({AGENT_MD: "---\nnme: Helper\n---\nHelp.\n"})

    error = only_error(load(root))

    assert "'name'" not in error.message
    assert "displayName" in error.message


def test_frontmatter_name_is_an_error_pointing_to_display_name(make_repo):
    root = make_repo({AGENT_MD: "---\ndescription: Helps.\nname: Helper\n---\nHelp.\n"})

    error = only_error(load(root))

    assert (error.line, error.field) == (3, "name")
    assert "`displayName`" in error.message


@pytest.mark.parametrize("other", ["agent.json", "agent.py"])
def test_frontmatter_config_next_to_agent_json_or_py_is_an_error_per_key(make_repo, other):
    content = {"agent.json": "{}", "agent.py": "agent = {}\n"}[other]
    root = make_repo(
        {
            AGENT_MD: "---\ndisplayName: Helper\ntools: [load_skill]\n---\nHelp.\n",
            f"agents/default/{other}": content,
        }
    )

    result = load(root)

    errors = errors_in(result, AGENT_MD)
    assert [(error.field, error.line) for error in errors] == [("displayName", 2), ("tools", 3)]
    assert all("keep each field in one file" in error.message for error in errors)
    assert result.bundle is None


def test_invalid_frontmatter_yaml_is_an_error_at_its_line_in_agent_md(make_repo):
    root = make_repo({AGENT_MD: "---\ndescription: Helps.\ntools: [load_skill\n---\nHelp.\n"})

    error = only_error(load(root))

    assert error.file == AGENT_MD
    assert error.message.startswith("invalid YAML")
    assert error.line in (3, 4)  # libyaml reports the end of the unclosed flow sequence


def test_frontmatter_that_is_not_a_mapping_is_an_error(make_repo):
    root = make_repo({AGENT_MD: "---\n- a list\n---\nHelp.\n"})

    error = only_error(load(root))

    assert error.line == 2
    assert "key: value" in error.message


def test_unclosed_frontmatter_is_an_error_on_line_one(make_repo):
    root = make_repo({AGENT_MD: "---\ndescription: Helps.\n\nHelp.\n"})

    error = only_error(load(root))

    assert error.line == 1
    assert "never closed" in error.message


def test_agent_md_that_is_not_utf8_is_an_error_at_the_bad_line(make_repo):
    root = make_repo()
    (root / AGENT_MD).write_bytes(b"Help.\n\xff\xfe\n")

    error = only_error(load(root))

    assert (error.file, error.line) == (AGENT_MD, 2)
    assert "UTF-8" in error.message


# ---------------------------------------------------------------- templates


def test_agent_md_template_over_scope_is_accepted(make_repo):
    root = make_repo({AGENT_MD: "{% if scope.page %}On {{ scope.page }}.{% endif %} Help.\n"})

    prompt = valid(load(root)).bundle.agents["default"].prompt

    assert prompt.render({"page": "billing"}) == "On billing. Help."


def test_template_syntax_error_reports_its_line_in_agent_md_after_frontmatter(make_repo):
    text = "---\ndescription: Helps.\n---\n# Agent\n\n## Prompt\n\nHello.\n{{ scope.page }\n"
    root = make_repo({AGENT_MD: text})

    error = only_error(load(root))

    assert error.file == AGENT_MD
    assert error.line == line_of(root / AGENT_MD, "{{ scope.page }")
    assert "template syntax error" in error.message


def test_unknown_template_variable_is_an_error_at_its_line(make_repo):
    root = make_repo({AGENT_MD: "Help.\n\nThe user is {{ user }}.\n"})

    error = only_error(load(root))

    assert error.line == 3
    assert "unknown template variable 'user'" in error.message
    assert "scope" in error.message


def test_template_access_to_python_internals_is_an_error_at_load(make_repo):
    root = make_repo({AGENT_MD: "Help.\n{{ scope.__class__ }}\n"})

    error = only_error(load(root))

    assert error.line == 2
    assert "'__class__'" in error.message


def test_template_subscript_of_an_underscore_name_is_an_error_at_load(make_repo):
    root = make_repo({AGENT_MD: "Help.\n{{ scope['__class__'] }}\n"})

    error = only_error(load(root))

    assert "'__class__'" in error.message


def test_context_md_is_compiled_at_load(make_repo):
    root = make_repo({CONTEXT_MD: "{% if scope.page %}Page: {{ scope.page }}{% endif %}\n"})

    context = valid(load(root)).bundle.agents["default"].context

    assert context is not None
    assert context.render({"page": "home"}).strip() == "Page: home"


def test_context_md_syntax_error_is_an_error_at_its_line(make_repo):
    root = make_repo({CONTEXT_MD: "First line.\n{% if scope.page %}\nno endif\n"})

    error = only_error(load(root))

    assert error.file == CONTEXT_MD
    assert error.line is not None
    assert "template syntax error" in error.message


def test_empty_context_md_is_a_warning(make_repo):
    root = make_repo({CONTEXT_MD: "\n"})

    result = valid(load(root))

    assert result.bundle.agents["default"].context is None
    assert [warning.file for warning in result.warnings] == [CONTEXT_MD]


# ---------------------------------------------------------------- agent.json


def test_misspelt_key_in_agent_json_names_line_and_suggests_fix(make_repo):
    root = make_repo({AGENT_JSON: '{\n  "description": "Helps.",\n  "maxToolCals": 3\n}\n'})

    error = only_error(load(root))

    assert (error.file, error.line, error.field) == (AGENT_JSON, 3, "maxToolCals")
    assert "did you mean 'maxToolCalls'" in error.message


def test_agent_json_fields_become_the_definition(make_repo):
    root = make_repo(
        {
            AGENT_JSON: {
                "name": "Desk Lead",
                "description": "Leads.",
                "role": "Planner",
                "persona": {"tone": "formal", "personality": "Calm."},
                "tools": ["load_skill", {"name": "load_knowledge"}],
                "maxToolCalls": 7,
                "modelTier": "simple",
                "maxDepth": 2,
                "timeout": 60,
                "targetOutputMin": 100,
                "targetOutputMax": 100,
            }
        }
    )

    agent = valid(load(root)).bundle.agents["default"]

    assert agent.display_name == "Desk Lead"
    assert agent.role == "planner"
    assert (agent.tone, agent.personality) == ("formal", "Calm.")
    assert [entry.name for entry in agent.tools] == ["load_skill", "load_knowledge"]
    assert all(entry.conditional is None for entry in agent.tools)
    assert (agent.max_tool_calls, agent.model_tier) == (7, "simple")


def test_display_name_defaults_to_the_folder_name(make_repo):
    agent = valid(load(make_repo())).bundle.agents["default"]

    assert agent.display_name == "default"
    assert agent.max_tool_calls is None
    assert agent.model_tier == "default"


def test_custom_role_is_kept_as_written(make_repo):
    root = make_repo({AGENT_JSON: {"role": "Data Wrangler"}})

    assert valid(load(root)).bundle.agents["default"].role == "Data Wrangler"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("name", "x" * 41, "at most 40 characters"),
        ("name", "", "at least 1 character"),
        ("description", "d" * 1025, "at most 1024 characters"),
        ("role", "chief!", "custom role"),
        ("maxToolCalls", 0, "greater than or equal to 1"),
        ("maxToolCalls", 201, "less than or equal to 200"),
        ("maxToolCalls", "ten", "valid integer"),
        ("modelTier", "huge", "'simple', 'default' or 'advanced'"),
        ("maxDepth", 0, "greater than or equal to 1"),
        ("maxDepth", 6, "less than or equal to 5"),
        ("timeout", 4, "greater than or equal to 5"),
        ("timeout", 601, "less than or equal to 600"),
        ("targetOutputMin", 49, "greater than or equal to 50"),
        ("targetOutputMax", 4001, "less than or equal to 4000"),
        ("tools", "load_skill", "valid tuple"),
    ],
)
def test_agent_json_field_out_of_range_is_an_error_at_its_line(make_repo, field, value, expected):
    root = make_repo({AGENT_JSON: {field: value}})

    error = only_error(load(root))

    assert (error.file, error.field) == (AGENT_JSON, field)
    assert error.line == line_of(root / AGENT_JSON, f'"{field}"')
    assert expected in error.message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("maxToolCalls", 1),
        ("maxToolCalls", 200),
        ("maxDepth", 5),
        ("timeout", 5),
        ("timeout", 600),
        ("targetOutputMin", 50),
        ("targetOutputMax", 4000),
        ("name", "x" * 40),
        ("description", "d" * 1024),
        ("description", "First line.\nMore for delegating agents."),
    ],
)
def test_agent_json_field_at_the_edge_of_its_range_is_accepted(make_repo, field, value):
    valid(load(make_repo({AGENT_JSON: {field: value}})))


@pytest.mark.parametrize(
    ("settings", "field", "expected"),
    [
        ({"temperature": 2.5}, "modelSettings.temperature", "less than or equal to 2"),
        ({"temperature": -0.1}, "modelSettings.temperature", "greater than or equal to 0"),
        ({"maxTokens": 0}, "modelSettings.maxTokens", "greater than or equal to 1"),
        ({"topP": 0.5}, "modelSettings.topP", "unknown key 'topP'"),
    ],
)
def test_model_settings_out_of_range_are_errors_naming_the_field(
    make_repo, settings, field, expected
):
    error = only_error(load(make_repo({AGENT_JSON: {"modelSettings": settings}})))

    assert (error.file, error.field) == (AGENT_JSON, field)
    assert expected in error.message


def test_model_settings_reach_the_definition_from_each_format(make_repo):
    root = make_repo(
        {
            AGENT_JSON: {"modelSettings": {"temperature": 0.2, "maxTokens": 800}},
            "agents/noted/AGENT.md": "---\nmodelSettings:\n  temperature: 1.5\n---\nNotes.",
            "agents/coded/AGENT.md": "Code.",
            "agents/coded/agent.py": 'agent = {"modelSettings": {"maxTokens": 64}}\n',
        }
    )

    agents = valid(load(root)).bundle.agents

    assert agents["default"].model_settings == ModelSettings(temperature=0.2, max_tokens=800)
    assert agents["noted"].model_settings == ModelSettings(temperature=1.5, max_tokens=None)
    assert agents["coded"].model_settings == ModelSettings(temperature=None, max_tokens=64)


def test_an_agent_without_model_settings_leaves_both_to_the_endpoint(make_repo):
    agent = valid(load(make_repo({}))).bundle.agents["default"]

    assert agent.model_settings == ModelSettings(temperature=None, max_tokens=None)


def test_a_long_description_keeps_every_line_and_its_first_is_the_summary(make_repo):
    text = "Reviews pull requests.\n\nUse it after every change; " + "x" * 900
    agent = valid(load(make_repo({AGENT_JSON: {"description": text}}))).bundle.agents["default"]

    assert agent.description == text
    assert agent.summary == "Reviews pull requests."


def test_target_output_min_above_max_is_an_error(make_repo):
    root = make_repo({AGENT_JSON: {"targetOutputMin": 500, "targetOutputMax": 100}})

    error = only_error(load(root))

    assert "targetOutputMin must not be greater than targetOutputMax" in error.message


def test_unknown_persona_tone_lists_the_tones(make_repo):
    root = make_repo({AGENT_JSON: {"persona": {"tone": "grumpy"}}})

    error = only_error(load(root))

    assert error.field == "persona.tone"
    assert "'friendly'" in error.message
    assert "'grumpy'" in error.message


def test_personality_longer_than_2000_characters_is_an_error(make_repo):
    root = make_repo({AGENT_JSON: {"persona": {"personality": "p" * 2001}}})

    assert only_error(load(root)).field == "persona.personality"


def test_list_entry_may_be_a_name_or_an_object_with_only_name(make_repo):
    root = make_repo({AGENT_JSON: {"tools": ["load_skill", {"name": "load_knowledge"}]}})

    assert len(valid(load(root)).bundle.agents["default"].tools) == 2


def test_list_entry_with_another_key_is_an_error_at_its_line(make_repo):
    root = make_repo(
        {
            AGENT_JSON: (
                '{\n  "tools": [\n    "load_skill",\n'
                '    {"name": "load_knowledge", "when": 1}\n  ]\n}'
            )
        }
    )

    error = only_error(load(root))

    assert (error.line, error.field) == (4, "tools[1].when")
    assert "unknown key 'when'" in error.message


def test_list_entry_without_name_suggests_name(make_repo):
    root = make_repo({AGENT_JSON: {"tools": [{"nme": "load_skill"}]}})

    result = load(root)

    messages = [error.message for error in errors_in(result, AGENT_JSON)]
    assert "missing required key 'name'" in messages
    assert any("did you mean 'name'?" in message for message in messages)


def test_conditional_in_agent_json_is_an_error_saying_predicates_live_in_agent_py(make_repo):
    root = make_repo(
        {AGENT_JSON: '{\n  "tools": [\n    {"name": "load_skill", "conditional": "x"}\n  ]\n}'}
    )

    error = only_error(load(root))

    assert (error.line, error.field) == (3, "tools[0].conditional")
    assert "agent.py" in error.message


def test_null_conditional_in_agent_json_is_an_error_too(make_repo):
    root = make_repo({AGENT_JSON: {"tools": [{"name": "load_skill", "conditional": None}]}})

    assert "agent.py" in only_error(load(root)).message


def test_conditional_on_a_store_in_agent_json_is_an_error(make_repo, store_file):
    root = make_repo(
        {
            "stores/notes.json": store_file,
            AGENT_JSON: {"stores": {"notes": {"mode": "rw", "conditional": True}}},
        }
    )

    error = only_error(load(root))

    assert error.field == "stores.notes.conditional"
    assert "agent.py" in error.message


def test_conditional_in_frontmatter_is_an_error(make_repo):
    root = make_repo(
        {AGENT_MD: "---\ntools:\n  - name: load_skill\n    conditional: yes\n---\nHi.\n"}
    )

    error = only_error(load(root))

    assert (error.file, error.line) == (AGENT_MD, 4)
    assert "agent.py" in error.message


@pytest.mark.parametrize("access", ["read", "rw", {"mode": "read"}, {"mode": "rw"}])
def test_store_access_may_be_a_mode_or_an_object(make_repo, store_file, access):
    root = make_repo({"stores/notes.json": store_file, AGENT_JSON: {"stores": {"notes": access}}})

    [grant] = valid(load(root)).bundle.agents["default"].stores

    assert grant.store == "notes"
    assert grant.mode == (access if isinstance(access, str) else access["mode"])


@pytest.mark.parametrize("access", ["write", {"mode": "admin"}, {"mode": "rw", "ttl": 3}, 1])
def test_store_access_of_another_shape_is_an_error(make_repo, store_file, access):
    root = make_repo({"stores/notes.json": store_file, AGENT_JSON: {"stores": {"notes": access}}})

    error = only_error(load(root))

    assert error.field.startswith("stores.notes")


def test_agent_json_that_is_not_an_object_is_an_error(make_repo):
    root = make_repo({AGENT_JSON: '["load_skill"]'})

    error = only_error(load(root))

    assert (error.file, error.line) == (AGENT_JSON, 1)
    assert "JSON object" in error.message


def test_agent_json_syntax_error_is_at_its_line(make_repo):
    root = make_repo({AGENT_JSON: '{\n  "description": "Helps."\n  "role": "tester"\n}'})

    error = only_error(load(root))

    assert (error.file, error.line) == (AGENT_JSON, 3)
    assert error.message.startswith("invalid JSON")


def test_absurdly_nested_json_is_an_error_not_a_crash(make_repo):
    root = make_repo({AGENT_JSON: '{"tools": ' + "[" * 5000 + "]" * 5000 + "}"})

    error = only_error(load(root))

    assert "nested more than" in error.message


# ---------------------------------------------------------------- display names


def test_display_names_must_be_unique_ignoring_case(make_repo):
    root = make_repo(
        {
            "agents/alpha/AGENT.md": "A.",
            "agents/alpha/agent.json": {"name": "Helper"},
            "agents/beta/AGENT.md": "B.",
            "agents/beta/agent.json": {"name": "HELPER"},
        }
    )

    error = only_error(load(root))

    assert error.file == "agents/beta"
    assert "'HELPER'" in error.message
    assert "agents/alpha" in error.message


def test_display_name_may_not_equal_another_agents_folder_name(make_repo):
    root = make_repo(
        {"agents/alpha/AGENT.md": "A.", "agents/alpha/agent.json": {"name": "Default"}}
    )

    error = only_error(load(root))

    assert "unique ignoring case" in error.message


def test_distinct_display_names_are_accepted(make_repo):
    root = make_repo(
        {"agents/alpha/AGENT.md": "A.", "agents/alpha/agent.json": {"name": "Alpha One"}}
    )

    assert valid(load(root)).bundle.agents["alpha"].display_name == "Alpha One"


def test_recursive_yaml_alias_in_frontmatter_is_an_error_not_a_crash(make_repo):
    root = make_repo({AGENT_MD: "---\ntools: &loop [*loop]\n---\nHelp.\n"})

    error = only_error(load(root))

    assert (error.file, error.line) == (AGENT_MD, 2)
    assert "YAML aliases (`*loop`) are not supported" in error.message


def test_template_nested_too_deeply_is_an_error_not_a_crash(make_repo):
    root = make_repo({AGENT_MD: "Help.\n{{ " + "(" * 400 + "1" + ")" * 400 + " }}\n"})

    error = only_error(load(root))

    assert error.file == AGENT_MD
