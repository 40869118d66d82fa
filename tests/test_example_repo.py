"""The example repo at the project root is living documentation: it validates, and it shows
every part of an agent repo that SPEC 0 and issue 2 (item 7) ask it to show."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime import Bundle, load_bundle
from runtime.repo.bundle import DEFAULT_AGENT, Predicate
from runtime.repo.registry import store_tool_name
from runtime.surface.resolution import SurfaceContext

PROJECT_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bundle() -> Bundle:
    # No environment: the example must load out of the box, without any secret set.
    return load_bundle(PROJECT_ROOT, environ={})


def predicates(bundle: Bundle) -> Iterator[tuple[str, str, Predicate]]:
    """(agent, entry, predicate) for every conditional entry of every agent."""
    for agent in bundle.agents.values():
        for entries in (agent.tools, agent.skills, agent.subagents, agent.connections, agent.mcp):
            for entry in entries:
                if entry.conditional is not None:
                    yield agent.name, entry.name, entry.conditional
        for grant in agent.stores:
            if grant.conditional is not None:
                yield agent.name, grant.store, grant.conditional


def includes(predicate: Predicate, ctx: SurfaceContext) -> bool:
    """The runtime's rule: only an exact True includes; a raised error excludes."""
    try:
        return predicate(ctx) is True
    except Exception:
        return False


# ---------------------------------------------------------------- through the CLI


def test_validate_passes_with_no_errors_and_no_warnings(amodal: Callable[..., Any]) -> None:
    result = amodal("validate", cwd=PROJECT_ROOT)
    assert result.code == 0, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("valid: "), result.stderr
    assert "warning" not in result.stderr, "the example repo should teach no suspicious input"


def test_validate_json_is_an_empty_list(amodal: Callable[..., Any]) -> None:
    result = amodal("validate", "--json", cwd=PROJECT_ROOT)
    assert result.code == 0, result.stderr
    assert result.json() == []


def test_validate_offline_passes(amodal: Callable[..., Any]) -> None:
    result = amodal("validate", "--offline", cwd=PROJECT_ROOT)
    assert result.code == 0, result.stdout + result.stderr


def test_validate_finds_the_repo_from_a_subfolder(amodal: Callable[..., Any]) -> None:
    result = amodal("validate", cwd=PROJECT_ROOT / "agents" / "default")
    assert result.code == 0, result.stdout + result.stderr
    assert result.stderr.splitlines()[-1].startswith("valid: "), result.stderr


def test_agents_json_lists_every_agent_and_marks_default(
    amodal: Callable[..., Any], bundle: Bundle
) -> None:
    result = amodal("agents", "--json", cwd=PROJECT_ROOT)
    assert result.code == 0, result.stderr
    rows = result.json()
    assert [row["name"] for row in rows] == sorted(bundle.agents)
    assert [row["name"] for row in rows if row["default"]] == [DEFAULT_AGENT]
    for row in rows:
        assert set(row) == {"name", "display_name", "description", "role", "default"}
        assert row["description"], f"agent {row['name']!r} has no description"


# ---------------------------------------------------------------- what it shows


def test_has_a_default_agent(bundle: Bundle) -> None:
    assert bundle.default_agent is not None


def test_has_a_main_prompt_for_unscoped_chat(bundle: Bundle) -> None:
    assert bundle.main.prompt is not None
    assert bundle.main.prompt.source.strip()


def test_default_delegates_to_at_least_three_specialists(bundle: Bundle) -> None:
    specialists = sorted(name for name in bundle.agents if name != DEFAULT_AGENT)
    assert len(specialists) >= 3, specialists
    default = bundle.default_agent
    assert default is not None
    delegates = {entry.name for entry in default.subagents}
    assert len(delegates & set(specialists)) >= 3, delegates


def test_one_agent_uses_agent_py(bundle: Bundle) -> None:
    with_py = [
        name for name in bundle.agents if (PROJECT_ROOT / "agents" / name / "agent.py").is_file()
    ]
    assert with_py
    assert any(agent for agent, _, _ in predicates(bundle) if agent in with_py)


def test_a_permission_predicate_reads_claims_never_the_request_context(bundle: Bundle) -> None:
    # A client may send {"role": "manager"} as request context; only a verified claim counts.
    claim_gated = []
    for agent, entry, predicate in predicates(bundle):
        manager = SurfaceContext.for_caller(agent, claims={"role": "manager"})
        pretender = SurfaceContext.for_caller(agent, context={"role": "manager"})
        anonymous = SurfaceContext.for_caller(agent)
        assert not includes(predicate, pretender) or includes(predicate, anonymous), (
            f"{agent}/{entry}: {predicate.__name__} trusts `role` from the request context"
        )
        if includes(predicate, manager) and not includes(predicate, pretender):
            claim_gated.append((agent, entry))
    assert claim_gated, "no predicate grants something to a verified `role: manager` claim"


def test_predicates_are_plain_synchronous_functions_of_one_argument(bundle: Bundle) -> None:
    found = list(predicates(bundle))
    assert found
    for agent, entry, predicate in found:
        assert not inspect.iscoroutinefunction(predicate), f"{agent}/{entry}"
        assert len(inspect.signature(predicate).parameters) == 1, f"{agent}/{entry}"


def test_one_agent_has_a_context_template(bundle: Bundle) -> None:
    with_context = [agent for agent in bundle.agents.values() if agent.context is not None]
    assert with_context
    assert any("scope." in agent.context.source for agent in with_context if agent.context)


def test_one_agent_is_configured_in_agent_md_frontmatter(bundle: Bundle) -> None:
    configured = [
        name
        for name, agent in bundle.agents.items()
        if not (PROJECT_ROOT / "agents" / name / "agent.json").exists()
        and not (PROJECT_ROOT / "agents" / name / "agent.py").exists()
        and agent.description
    ]
    assert configured


_HEADING_FORM = re.compile(r"^#\s+Skill:", re.MULTILINE | re.IGNORECASE)


def test_skills_come_in_both_forms_and_use_allowed_tools(bundle: Bundle) -> None:
    forms: dict[str, list[str]] = {"heading": [], "frontmatter": []}
    for skill in bundle.skills.values():
        text = (PROJECT_ROOT / skill.file).read_text(encoding="utf-8")
        if _HEADING_FORM.search(text):
            forms["heading"].append(skill.name)
        elif text.startswith("---") and re.search(r"^name:", text, re.MULTILINE):
            forms["frontmatter"].append(skill.name)
    assert forms["heading"], "no skill in the `# Skill: Name` + `Trigger:` form"
    assert forms["frontmatter"], "no skill named in its frontmatter"
    with_tools = [skill for skill in bundle.skills.values() if skill.allowed_tools]
    assert with_tools, "no skill contributes tools through `allowedTools`"
    for skill in with_tools:
        assert set(skill.allowed_tools) <= set(bundle.registry), skill.file


def test_a_skill_is_referenced_by_its_name_not_its_folder(bundle: Bundle) -> None:
    renamed = [
        skill for skill in bundle.skills.values() if skill.name != Path(skill.file).parent.name
    ]
    referenced = {entry.name for agent in bundle.agents.values() for entry in agent.skills}
    assert any(skill.name in referenced for skill in renamed)


def test_has_two_stores_with_their_tools_in_the_registry(bundle: Bundle) -> None:
    assert len(bundle.stores) >= 2
    for name in bundle.stores:
        for op in ("get", "query", "put", "delete"):
            assert store_tool_name(name, op) in bundle.registry
    assert any("-" in name for name in bundle.stores), "show the hyphen -> underscore rule"


def test_has_knowledge(bundle: Bundle) -> None:
    assert bundle.knowledge
    for document in bundle.knowledge.values():
        assert document.body.strip(), document.file


def test_has_a_custom_tool_with_an_async_handler(bundle: Bundle) -> None:
    assert bundle.tools
    for tool in bundle.tools.values():
        assert inspect.iscoroutinefunction(tool.handler), tool.file
        assert bundle.registry[tool.name].kind == "custom"
