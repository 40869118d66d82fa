"""agent.py (SPEC 1.2): the `agent` dict, predicates, misplaced config names, overrides."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from ._helpers import line_of, load, only_error, valid

AGENT_PY = "agents/default/agent.py"
AGENT_JSON = "agents/default/agent.json"

PREDICATES = '''\
"""Predicates need no import from the runtime."""


def is_manager(ctx):
    return ctx.claims.get("role") == "manager"


agent = {
    "description": "Helps managers.",
    "tools": [
        "load_skill",
        {"name": "load_knowledge", "conditional": is_manager},
        {"name": "ask_choice", "conditional": lambda ctx: ctx.is_subagent},
    ],
    "stores": {"notes": {"mode": "rw", "conditional": is_manager}},
    "maxToolCalls": 4,
}
'''


def with_agent_py(make_repo, store_file, text):
    return make_repo({AGENT_PY: text, "stores/notes.json": store_file})


def test_agent_py_binds_agent_with_predicates_on_entries_and_stores(make_repo, store_file):
    root = with_agent_py(make_repo, store_file, PREDICATES)

    agent = valid(load(root)).bundle.agents["default"]

    manager = SimpleNamespace(claims={"role": "manager"}, is_subagent=False)
    guest = SimpleNamespace(claims={}, is_subagent=True)
    skill, knowledge, choice = agent.tools
    assert skill.conditional is None
    assert knowledge.conditional is not None
    assert (knowledge.conditional(manager), knowledge.conditional(guest)) == (True, False)
    assert choice.conditional is not None
    assert choice.conditional(guest) is True
    assert knowledge.origin.file == AGENT_PY
    assert knowledge.origin.line == line_of(root / AGENT_PY, '"load_knowledge"')
    [grant] = agent.stores
    assert grant.mode == "rw"
    assert grant.conditional is not None
    assert grant.conditional(manager) is True
    assert (agent.description, agent.max_tool_calls) == ("Helps managers.", 4)


def test_agent_py_is_run_afresh_on_every_load(make_repo, store_file):
    root = with_agent_py(make_repo, store_file, 'agent = {"description": "First."}\n')
    first = valid(load(root)).bundle

    (root / AGENT_PY).write_text('agent = {"description": "Second."}\n', encoding="utf-8")
    second = valid(load(root)).bundle

    assert first.agents["default"].description == "First."
    assert second.agents["default"].description == "Second."


def test_agent_py_without_agent_is_an_error_showing_the_shape(make_repo, store_file):
    root = with_agent_py(make_repo, store_file, "description_text = 'x'\n")

    error = only_error(load(root))

    assert error.file == AGENT_PY
    assert "module-level `agent` dict" in error.message


def test_agent_that_is_not_a_dict_is_an_error_at_its_line(make_repo, store_file):
    root = with_agent_py(make_repo, store_file, "import os\n\nagent = ['load_skill']\n")

    error = only_error(load(root))

    assert (error.file, error.line, error.field) == (AGENT_PY, 3, "agent")
    assert "must be a dict, got list" in error.message


def test_module_level_config_name_is_an_error_saying_to_put_it_inside_agent(make_repo, store_file):
    text = 'agent = {"description": "x"}\n\ntools = ["load_skill"]\n'
    root = with_agent_py(make_repo, store_file, text)

    error = only_error(load(root))

    assert (error.file, error.line, error.field) == (AGENT_PY, 3, "tools")
    assert "put it inside the `agent` dict" in error.message


@pytest.mark.parametrize("name", ["description", "maxToolCalls", "max_tool_calls", "stores"])
def test_every_config_field_name_is_rejected_at_module_level(make_repo, store_file, name):
    root = with_agent_py(make_repo, store_file, f"{name} = None\nagent = {{}}\n")

    assert only_error(load(root)).field == name


def test_module_level_helpers_with_other_names_are_fine(make_repo, store_file):
    text = "ALLOWED = {'manager'}\n\ndef helper(ctx):\n    return True\n\nagent = {}\n"

    valid(load(with_agent_py(make_repo, store_file, text)))


def test_async_predicate_is_an_error_naming_agent_py_and_the_def_line(make_repo, store_file):
    text = (
        "async def is_manager(ctx):\n    return True\n\n\n"
        "agent = {\n    'tools': [{'name': 'load_skill', 'conditional': is_manager}],\n}\n"
    )
    root = with_agent_py(make_repo, store_file, text)

    error = only_error(load(root))

    assert (error.file, error.line) == (AGENT_PY, 1)
    assert error.field == "tools[0].conditional"
    assert "`async def`" in error.message


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        ("def check(ctx, other):\n    return True\n", "exactly one argument"),
        ("def check():\n    return True\n", "exactly one argument"),
        ("def check(ctx):\n    yield True\n", "not yield"),
        ("class Check:\n    async def __call__(self, ctx):\n        return True\n", "async def"),
        ("check = 'yes'\n", "function of one argument, got str"),
    ],
)
def test_predicate_that_is_not_a_sync_one_argument_callable_is_an_error(
    make_repo, store_file, definition, expected
):
    target = "Check()" if definition.startswith("class") else "check"
    text = (
        f"{definition}\nagent = {{'tools': [{{'name': 'load_skill', 'conditional': {target}}}]}}\n"
    )
    root = with_agent_py(make_repo, store_file, text)

    error = only_error(load(root))

    assert error.file == AGENT_PY
    assert error.line is not None
    assert expected in error.message


def test_predicate_on_a_store_entry_is_checked_too(make_repo, store_file):
    text = (
        "async def gate(ctx):\n    return True\n\n"
        "agent = {'stores': {'notes': {'mode': 'read', 'conditional': gate}}}\n"
    )
    root = with_agent_py(make_repo, store_file, text)

    error = only_error(load(root))

    assert (error.line, error.field) == (1, "stores.notes.conditional")


def test_predicate_with_a_default_second_argument_is_accepted(make_repo, store_file):
    text = (
        "def gate(ctx, strict=False):\n    return True\n\n"
        "agent = {'tools': [{'name': 'load_skill', 'conditional': gate}]}\n"
    )

    valid(load(with_agent_py(make_repo, store_file, text)))


def test_unknown_key_in_an_agent_py_entry_is_an_error_at_its_line(make_repo, store_file):
    text = "agent = {\n    'tools': [\n        {'name': 'load_skill', 'when': None},\n    ],\n}\n"
    root = with_agent_py(make_repo, store_file, text)

    error = only_error(load(root))

    assert (error.file, error.line, error.field) == (AGENT_PY, 3, "tools[0].when")


def test_misspelt_key_in_agent_py_suggests_the_field(make_repo, store_file):
    root = with_agent_py(make_repo, store_file, "agent = {\n    'maxToolCals': 3,\n}\n")

    error = only_error(load(root))

    assert (error.line, error.field) == (2, "maxToolCals")
    assert "did you mean 'maxToolCalls'?" in error.message


def test_agent_py_syntax_error_is_at_its_line(make_repo, store_file):
    root = with_agent_py(make_repo, store_file, "x = 1\nagent = {\n")

    error = only_error(load(root))

    assert error.file == AGENT_PY
    assert error.line in (2, 3)
    assert "Python syntax error" in error.message


def test_agent_py_that_raises_is_an_error_at_the_raising_line(make_repo, store_file):
    root = with_agent_py(make_repo, store_file, "x = 1\nraise RuntimeError('no config')\n")

    error = only_error(load(root))

    assert error.line == 2
    assert "RuntimeError: no config" in error.message


@pytest.mark.parametrize("exit_call", ["raise SystemExit(2)", "import sys\nsys.exit('bye')"])
def test_agent_py_that_exits_is_an_error_not_the_end_of_the_process(
    make_repo, store_file, exit_call
):
    # Found by tests/repo/test_fuzz.py: SystemExit escaped the loader (and would end a
    # server on a hot reload).
    root = with_agent_py(make_repo, store_file, f"x = 1\n{exit_call}\n")

    error = only_error(load(root))

    assert error.file == AGENT_PY and error.line == exit_call.count("\n") + 2
    assert "raised SystemExit" in error.message


def test_agent_py_overrides_agent_json_fields_and_logs_which(
    make_repo, store_file, caplog, monkeypatch
):
    monkeypatch.setattr(logging.getLogger("amodal"), "propagate", True)
    root = make_repo(
        {
            AGENT_JSON: {"description": "From JSON.", "role": "tester", "maxToolCalls": 3},
            AGENT_PY: "agent = {'description': 'From Python.', 'maxToolCalls': 9}\n",
        }
    )

    with caplog.at_level(logging.INFO, logger="amodal"):
        agent = valid(load(root)).bundle.agents["default"]

    assert (agent.description, agent.max_tool_calls, agent.role) == ("From Python.", 9, "tester")
    [record] = [r for r in caplog.records if r.getMessage() == "agent_definition_overrides_json"]
    assert record.event == "agent_definition_overrides_json"
    assert record.agent == "default"
    assert record.fields == ["description", "maxToolCalls"]


def test_agent_py_next_to_agent_json_without_shared_fields_logs_nothing(
    make_repo, store_file, caplog, monkeypatch
):
    monkeypatch.setattr(logging.getLogger("amodal"), "propagate", True)
    root = make_repo(
        {AGENT_JSON: {"description": "From JSON."}, AGENT_PY: "agent = {'role': 'tester'}\n"}
    )

    with caplog.at_level(logging.INFO, logger="amodal"):
        agent = valid(load(root)).bundle.agents["default"]

    assert (agent.description, agent.role) == ("From JSON.", "tester")
    assert "agent_definition_overrides_json" not in caplog.messages


def test_agent_py_without_agent_md_leaves_the_folder_ignored(make_repo, store_file):
    root = make_repo({"agents/helper/agent.py": "agent = {}\n"})

    result = valid(load(root))

    assert "helper" not in result.bundle.agents
    assert [warning.file for warning in result.warnings] == ["agents/helper"]


def test_predicates_are_checked_even_when_agent_md_is_broken(make_repo, store_file):
    text = (
        "async def gate(ctx):\n    return True\n\n"
        "agent = {'tools': [{'name': 'load_skill', 'conditional': gate}]}\n"
    )
    root = make_repo({"agents/default/AGENT.md": "{{ scope.page }\n", AGENT_PY: text})

    result = load(root)

    assert sorted(error.file for error in result.errors) == ["agents/default/AGENT.md", AGENT_PY]
