"""evals/ (SPEC 18): suite files checked like every repo file, with file, line and
did-you-mean; read only when asked, so they never touch what a server serves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runtime import LoadResult, load_repo

from ._helpers import line_of, only_error, valid, warnings_in

SUITE = "evals/triage.yaml"


@pytest.fixture
def repo(example_repo: Path) -> Path:
    """The example repo (agents, stores, tools to refer to) without its own suites."""
    shutil.rmtree(example_repo / "evals")
    return example_repo


def load(root: Path) -> LoadResult:
    return load_repo(root, environ={}, evals=True)


def suite(root: Path, text: str, name: str = SUITE) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_a_suite_loads_with_its_agent_claims_and_context_folded_into_each_case(repo):
    suite(
        repo,
        """\
agent: reviewer
claims: {role: manager, scope: acme}
context: {page: review}
cases:
  - name: first
    message: Review this.
    expect:
      tools_called: [word_count]
      reply_contains: [words, draft]
  - name: second
    agent: writer
    claims: {role: editor}
    context: {topic: solar}
    turns: [Hello, Draft it]
""",
    )

    result = valid(load(repo))

    (loaded,) = result.suites
    first, second = loaded.cases
    assert (loaded.name, loaded.file) == ("triage", SUITE)
    assert (first.id, first.agent, first.turns, first.line) == (
        "triage/first",
        "reviewer",
        ("Review this.",),
        5,
    )
    assert dict(first.claims) == {"role": "manager", "scope": "acme"}
    assert first.expect.tools_called == ["word_count"]
    assert (second.agent, second.turns, second.line) == ("writer", ("Hello", "Draft it"), 10)
    assert dict(second.claims) == {"role": "editor", "scope": "acme"}
    assert dict(second.context) == {"page": "review", "topic": "solar"}


def test_a_case_without_an_agent_talks_to_default(repo):
    suite(repo, "cases:\n  - name: hi\n    message: Hello\n")

    (loaded,) = valid(load(repo)).suites

    assert loaded.cases[0].agent == "default"


def test_json_suites_load_too(repo):
    suite(
        repo,
        json.dumps({"cases": [{"name": "hi", "message": "Hello", "expect": {"max_tokens": 9}}]}),
        "evals/smoke.json",
    )

    (loaded,) = valid(load(repo)).suites

    assert (loaded.name, loaded.cases[0].expect.max_tokens) == ("smoke", 9)


def test_an_unknown_expectation_is_an_error_with_its_line_and_a_suggestion(repo):
    path = suite(
        repo,
        """\
cases:
  - name: hi
    message: Hello
    expect:
      reply_contain: hello
""",
    )

    error = only_error(load(repo), SUITE)

    assert (error.line, error.field) == (
        line_of(path, "reply_contain"),
        "cases[0].expect.reply_contain",
    )
    assert "did you mean 'reply_contains'?" in error.message
    assert "tools_called" in error.message  # the expected keys are listed


def test_a_schema_error_in_one_case_hides_no_other_problem_of_the_suite(repo):
    suite(
        repo,
        """\
agent: reasearcher
cases:
  - name: broken
    message: Hello
    expect:
      reply_contain: hello
  - name: unknown names
    message: Hi
    agent: nobody
    expect:
      tools_called: [no_such_tool]
      store:
        no-such-store: {k1: {}}
""",
    )

    errors = {e.field: e.message for e in load(repo).errors if e.file == SUITE}

    assert "did you mean 'reply_contains'?" in errors["cases[0].expect.reply_contain"]
    assert "unknown agent 'reasearcher'" in errors["agent"]
    assert "unknown agent 'nobody'" in errors["cases[1].agent"]
    assert "unknown tool 'no_such_tool'" in errors["cases[1].expect.tools_called[0]"]
    assert "unknown store 'no-such-store'" in errors["cases[1].expect.store.no-such-store"]


def test_an_unknown_key_of_a_case_is_an_error(repo):
    suite(repo, "cases:\n  - name: hi\n    mesage: Hello\n")

    messages = [str(error) for error in load(repo).errors]

    assert any("unknown key 'mesage' (did you mean 'message'?)" in m for m in messages), messages


@pytest.mark.parametrize(
    "case",
    [
        "  - name: both\n    message: Hi\n    turns: [Hi]\n",
        "  - name: neither\n    expect: {max_tokens: 5}\n",
    ],
    ids=["both", "neither"],
)
def test_a_case_has_either_a_message_or_turns(repo, case):
    suite(repo, "cases:\n" + case)

    error = only_error(load(repo), SUITE)

    assert error.line == 2
    assert "either `message` or `turns`" in error.message


@pytest.mark.parametrize(
    ("line", "needle", "message"),
    [
        ("agent: defualt", "agent:", "unknown agent 'defualt' (did you mean 'default'?)"),
        (
            "tools_called: [load_knowlege]",
            "tools_called",
            "unknown tool 'load_knowlege' (did you mean 'load_knowledge'?)",
        ),
        (
            "tools_not_called: [store__decision__put]",
            "tools_not_called",
            "unknown tool 'store__decision__put' (did you mean 'store__decisions__put'?)",
        ),
        (
            "subagents_called: [researchr]",
            "subagents_called",
            "unknown agent 'researchr' (did you mean 'researcher'?)",
        ),
        ("subagents_called: [default]", "subagents_called", "never called as a specialist"),
        (
            "store: {decision: {D-1: null}}",
            "store:",
            "unknown store 'decision' (did you mean 'decisions'?)",
        ),
        (
            "store: {decisions: {D-1: {aproved: true}}}",
            "store:",
            "store 'decisions' has no field 'aproved' (did you mean 'approved'?)",
        ),
        ("reply_matches: '(('", "reply_matches", "invalid regular expression '(('"),
        ("done_reason: finished", "done_reason", "got 'finished'"),
        ("max_tool_calls: -1", "max_tool_calls", "greater than or equal to 0"),
        ("max_latency_ms: '100'", "max_latency_ms", "valid integer"),
        (
            "store: {decisions: {D-1: {subject: 2026-01-31}}}",
            "store:",
            "quote dates and times",
        ),
    ],
    ids=lambda value: str(value)[:24],
)
def test_what_a_case_names_must_exist_and_be_well_formed(repo, line, needle, message):
    if line.startswith("agent:"):
        text = f"cases:\n  - name: one\n    message: Hi\n    {line}\n"
    else:
        text = f"cases:\n  - name: one\n    message: Hi\n    expect:\n      {line}\n"
    path = suite(repo, text)

    error = only_error(load(repo), SUITE)

    assert message in error.message, error
    assert error.line == line_of(path, needle)
    assert str(error).startswith(f"{SUITE}:{error.line}: cases[0].")


def test_an_unknown_suite_agent_lists_the_known_ones_including_main(repo):
    suite(repo, "agent: nobody\ncases:\n  - name: one\n    message: Hi\n")

    error = only_error(load(repo), SUITE)

    assert (error.line, error.field) == (1, "agent")
    assert "known agents: 'default', 'main', 'researcher', 'reviewer', 'writer'" in error.message


def test_main_is_unscoped_chat_and_needs_no_default_agent(make_repo):
    root = make_repo({"agents/default/AGENT.md": None, "agents/helper/AGENT.md": "Help."})
    suite(root, "agent: main\ncases:\n  - name: one\n    message: Hi\n")

    (loaded,) = valid(load(root)).suites

    assert loaded.cases[0].agent == "main"


def test_a_case_with_no_agent_in_a_repo_without_default_is_an_error(make_repo):
    root = make_repo({"agents/default/AGENT.md": None, "agents/helper/AGENT.md": "Help."})
    suite(root, "cases:\n  - name: one\n    message: Hi\n")

    error = only_error(load(root), SUITE)

    assert error.line == 2
    assert "no `default` agent" in error.message and "`main`" in error.message


def test_claim_and_context_values_are_strings_never_coerced(repo):
    suite(repo, "claims: {level: 3}\ncases:\n  - name: one\n    message: Hi\n")

    error = only_error(load(repo), SUITE)

    assert (error.line, error.field) == (1, "claims.level")
    assert error.message.startswith("expected a string, got 3: ")
    assert "quote it" in error.message


def test_yaml_booleans_where_text_belongs_say_to_quote_them(repo):
    suite(repo, "cases:\n  - name: one\n    message: Hi\n    expect: {reply_contains: yes}\n")

    error = only_error(load(repo), SUITE)

    assert (error.line, error.field) == (4, "cases[0].expect.reply_contains")
    assert error.message.startswith("expected a string or a list of strings, got True: ")


def test_a_single_name_may_stand_for_a_list(repo):
    suite(
        repo,
        "cases:\n  - name: one\n    message: Hi\n"
        "    expect: {tools_called: load_knowledge, reply_contains: hi}\n",
    )

    (loaded,) = valid(load(repo)).suites

    expect = loaded.cases[0].expect
    assert (expect.tools_called, expect.reply_contains) == (["load_knowledge"], ["hi"])


def test_case_names_are_unique_in_a_suite(repo):
    path = suite(
        repo,
        "cases:\n  - name: one\n    message: Hi\n  - name: one\n    message: Again\n",
    )

    error = only_error(load(repo), SUITE)

    assert error.line == line_of(path, "name: one", occurrence=2)
    assert "'one' is used twice" in error.message


def test_two_files_of_one_suite_name_are_an_error(repo):
    suite(repo, "cases:\n  - name: one\n    message: Hi\n")
    suite(repo, json.dumps({"cases": [{"name": "x", "message": "y"}]}), "evals/triage.json")

    error = only_error(load(repo))

    assert error.file == SUITE  # sorted: triage.json is read first and kept
    assert "defined twice" in error.message and "evals/triage.json" in error.message


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("", None, "the suite is empty"),
        ("~\n", None, "the suite is empty"),
        ("cases: []\n", 1, "at least 1 item"),
        ("cases:\n  - name: [unclosed\n", 3, "invalid YAML"),
    ],
    ids=["empty", "null", "no cases", "syntax"],
)
def test_an_empty_or_broken_suite_is_an_error(repo, text, line, message):
    suite(repo, text)

    error = only_error(load(repo), SUITE)

    assert message in error.message
    assert error.line == line


def test_a_json_syntax_error_has_its_line(repo):
    suite(repo, '{"cases": [\n  {"name": "x",\n   "message": }\n]}', "evals/smoke.json")

    error = only_error(load(repo), "evals/smoke.json")

    assert (error.line, error.message.startswith("invalid JSON")) == (3, True)


def test_files_that_are_not_suites_are_warned_about(repo):
    suite(repo, "notes", "evals/README.md")
    (repo / "evals/fixtures").mkdir()

    result = valid(load(repo))

    assert len(warnings_in(result, "evals/README.md")) == 1
    assert "ignored: a suite is" in warnings_in(result, "evals/fixtures")[0].message


def test_suites_are_read_only_when_asked_and_never_change_the_bundle_version(repo):
    before = load_repo(repo, environ={}).bundle
    suite(repo, "cases:\n  - name: one\n    mesage: typo\n")

    served = load_repo(repo, environ={})  # what a server loads
    checked = load(repo)  # what validate and eval load

    assert served.bundle is not None and served.suites == ()
    assert served.bundle.version == before.version
    assert checked.bundle is None and checked.errors[0].file == SUITE


def test_validate_reports_suite_errors_as_path_line_message(repo, amodal):
    path = suite(repo, "cases:\n  - name: one\n    message: Hi\n    agent: writr\n")

    text = amodal("validate", cwd=repo)
    as_json = amodal("validate", "--json", cwd=repo)

    line = line_of(path, "agent: writr")
    assert text.code == 1
    assert text.stdout.startswith(
        f"{SUITE}:{line}: cases[0].agent: unknown agent 'writr' (did you mean 'writer'?)"
    )
    assert as_json.code == 1
    assert as_json.json()[0] | {"message": ""} == {
        "file": SUITE,
        "line": line,
        "field": "cases[0].agent",
        "message": "",
    }


def test_validate_counts_the_suites_of_a_valid_repo(example_repo, amodal):
    result = amodal("validate", cwd=example_repo)

    assert result.code == 0, result.stdout + result.stderr
    suites = len(list((example_repo / "evals").glob("*.yaml")))
    assert f"1 custom tools, {suites} eval suites (version " in result.stderr
