"""AGENT.md and CONTEXT.md as sandboxed templates over the request context (SPEC 5.3)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime import load_bundle, load_repo
from runtime.repo.templates import (
    SCOPE_LARGE_CHARS,
    Template,
    TemplateRenderError,
    check_template,
    clean_context,
)
from runtime.surface.prompt import context_prompt, system_prompt
from runtime.surface.resolution import SurfaceContext, resolve


def render(source: str, scope: dict[str, str] | None = None) -> str:
    return Template(source, "agents/t/CONTEXT.md").render(scope or {})


# --- the scope rules ----------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["1st", "with-dash", "has space", "dotted.key", "é", "", "a" * 65, "{{x}}"]
)
def test_context_keys_that_are_not_identifiers_are_dropped_and_logged(
    events: Callable[[str], list[logging.LogRecord]], key: str
) -> None:
    assert clean_context({key: "value", "page": "review"}) == {"page": "review"}
    [record] = events("context_keys_dropped")
    assert record.keys == [key]  # type: ignore[attr-defined]


@pytest.mark.parametrize("key", ["page", "_private", "A1", "mission_id", "a" * 64])
def test_identifier_context_keys_are_kept(
    events: Callable[[str], list[logging.LogRecord]], key: str
) -> None:
    assert clean_context({key: "value"}) == {key: "value"}
    assert events("context_keys_dropped") == []


@pytest.mark.parametrize("value", ["", " ", "\n\t  "])
def test_empty_and_whitespace_only_context_values_are_dropped(value: str) -> None:
    assert clean_context({"page": value, "topic": "solar"}) == {"topic": "solar"}


def test_context_values_are_kept_exactly_as_sent() -> None:
    scope = {"topic": "  solar panels \n", "flag": "false", "count": "0"}
    assert clean_context(scope) == scope


@pytest.mark.parametrize("value", ["false", "0", "False", "no", "None"])
def test_false_and_zero_strings_are_truthy_in_if(value: str) -> None:
    source = "{% if scope.flag %}set{% else %}unset{% endif %}"
    assert render(source, clean_context({"flag": value})) == "set"
    assert render(source, clean_context({"flag": " "})) == "unset"
    assert render(source, {}) == "unset"


def test_a_large_scope_is_kept_and_logged(events: Callable[[str], list[logging.LogRecord]]) -> None:
    big = "x" * SCOPE_LARGE_CHARS  # with its one-letter key, one character over
    assert clean_context({"k": big}) == {"k": big}
    [record] = events("prompt_template_scope_large")
    assert record.levelno == logging.WARNING
    assert record.chars == SCOPE_LARGE_CHARS + 1  # type: ignore[attr-defined]


def test_a_scope_at_the_limit_is_not_logged_as_large(
    events: Callable[[str], list[logging.LogRecord]],
) -> None:
    clean_context({"k": "x" * (SCOPE_LARGE_CHARS - 1)})
    assert SCOPE_LARGE_CHARS == 100_000
    assert events("prompt_template_scope_large") == []


def test_scope_size_counts_only_the_values_that_are_kept(
    events: Callable[[str], list[logging.LogRecord]],
) -> None:
    clean_context({"bad-key": "x" * SCOPE_LARGE_CHARS, "blank": " " * SCOPE_LARGE_CHARS})
    assert events("prompt_template_scope_large") == []


# --- values are inert ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["{{ 7*7 }}", "{% if true %}yes{% endif %}", "{# hidden #}", "{{ scope.__class__ }}",
     "{% raw %}x{% endraw %}"],
)  # fmt: skip
def test_template_syntax_inside_a_context_value_is_printed_literally(value: str) -> None:
    assert render("Topic: {{ scope.topic }}.", {"topic": value}) == f"Topic: {value}."


def test_a_context_value_is_inert_in_context_md(make_repo: Callable[..., Path]) -> None:
    root = make_repo({"agents/default/CONTEXT.md": "About {{ scope.topic }}.\n"})
    agent = load_bundle(root).agents["default"]
    assert context_prompt(agent, {"topic": "{{ 7*7 }}"}) == "About {{ 7*7 }}."


def test_a_context_value_is_inert_in_agent_md(make_repo: Callable[..., Path]) -> None:
    root = make_repo({"agents/default/AGENT.md": "You help with {{ scope.topic }}.\n"})
    bundle = load_bundle(root)
    surface = resolve(bundle, "default", SurfaceContext.for_caller("default"), root="default")
    text = system_prompt(bundle, bundle.agents["default"], surface, {"topic": "{{ 7*7 }}"})
    assert "You help with {{ 7*7 }}." in text
    assert "49" not in text


def test_raw_blocks_print_template_syntax(make_repo: Callable[..., Path]) -> None:
    assert render("{% raw %}Write {{ scope.page }} here.{% endraw %}") == (
        "Write {{ scope.page }} here."
    )
    root = make_repo(
        {"agents/default/AGENT.md": "Show {% raw %}{{ scope.x }}{% endraw %} as is.\n"}
    )
    bundle = load_bundle(root)
    surface = resolve(bundle, "default", SurfaceContext.for_caller("default"), root="default")
    text = system_prompt(bundle, bundle.agents["default"], surface, {"x": "value"})
    assert "Show {{ scope.x }} as is." in text


def test_a_missing_scope_value_renders_empty() -> None:
    assert render("[{{ scope.page }}]") == "[]"


def test_a_template_without_syntax_is_returned_as_written() -> None:
    source = "Plain text with a } and a { and 50% off.\n"
    assert render(source) == source
    assert check_template(source) == []


# --- the sandbox --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "attribute"),
    [
        ("{{ scope.__class__ }}", "__class__"),
        ("{{ ''.__class__.__mro__ }}", "__class__"),
        ("{{ scope['__class__'] }}", "__class__"),
        ("{{ scope.page.__init__.__globals__ }}", "__init__"),
        ("{{ scope._hidden }}", "_hidden"),
    ],
)
def test_reaching_python_internals_is_a_load_error_with_its_line(
    make_repo: Callable[..., Path], source: str, attribute: str
) -> None:
    root = make_repo({"agents/default/AGENT.md": f"# Lead\n\n## Prompt\n\nHello.\n{source}\n"})
    result = load_repo(root)
    assert result.bundle is None
    errors = [error for error in result.errors if attribute in error.message]
    assert errors, result.errors
    assert all(error.file == "agents/default/AGENT.md" for error in errors)
    assert all(error.line == 6 for error in errors)
    assert "Python internals" in errors[0].message


def test_reaching_python_internals_in_context_md_is_a_load_error(
    make_repo: Callable[..., Path],
) -> None:
    root = make_repo({"agents/default/CONTEXT.md": "Page.\n\n{{ ''.__class__.__mro__ }}\n"})
    result = load_repo(root)
    assert result.bundle is None
    assert {(e.file, e.line) for e in result.errors} == {("agents/default/CONTEXT.md", 3)}
    assert any("'__mro__'" in error.message for error in result.errors)


def test_an_unknown_template_variable_is_a_load_error(make_repo: Callable[..., Path]) -> None:
    root = make_repo({"agents/default/AGENT.md": "Hello\n{{ page }}\n"})
    [error] = load_repo(root).errors
    assert (error.file, error.line) == ("agents/default/AGENT.md", 2)
    assert "only `scope`" in error.message


def test_a_template_syntax_error_is_a_load_error_with_its_line(
    make_repo: Callable[..., Path],
) -> None:
    root = make_repo({"agents/default/CONTEXT.md": "One.\nTwo.\n{% if scope.page %}\n"})
    [error] = load_repo(root).errors
    assert (error.file, error.line) == ("agents/default/CONTEXT.md", 3)
    assert "syntax error" in error.message


@pytest.mark.parametrize(
    ("source", "attribute"),
    [
        ("{{ scope|attr('__class__') }}", "__class__"),
        ('{{ "{0.__class__}".format(scope) }}', "__class__"),
        ("{{ scope.update({'page': 'admin'}) }}", "update"),
        ("{{ scope.pop('page') }}", "pop"),
    ],
)
def test_reaching_internals_at_render_time_fails_naming_the_file(
    make_repo: Callable[..., Path], source: str, attribute: str
) -> None:
    root = make_repo({"agents/default/AGENT.md": f"Hello.\n{source}\n"})
    bundle = load_bundle(root)  # nothing visible to a static check
    surface = resolve(bundle, "default", SurfaceContext.for_caller("default"), root="default")
    with pytest.raises(TemplateRenderError) as raised:
        system_prompt(bundle, bundle.agents["default"], surface, {"page": "review"})
    message = str(raised.value)
    assert message.startswith("agents/default/AGENT.md:2: ")
    assert repr(attribute) in message


def test_a_render_error_in_context_md_names_the_file(make_repo: Callable[..., Path]) -> None:
    root = make_repo({"agents/default/CONTEXT.md": "{{ scope|attr('__class__') }}\n"})
    agent = load_bundle(root).agents["default"]
    with pytest.raises(TemplateRenderError, match=r"^agents/default/CONTEXT\.md:1: "):
        context_prompt(agent, {})


def test_templates_can_still_use_loops_and_filters() -> None:
    source = "{% for word in scope.tags.split(',') %}{{ loop.index }}={{ word|upper }} {% endfor %}"
    assert render(source, {"tags": "a,b"}) == "1=A 2=B "
    assert check_template(source) == []
