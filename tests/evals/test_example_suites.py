"""CI runs the example repo's deterministic suites through `amodal eval`, against a scripted
model that follows the agents (tests/evals/_desk_model.py): they pass as the repo is, and
fail when an agent regresses."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from junitparser import JUnitXml

from runtime.testing import ScriptedModel
from tests.evals._desk_model import desk_responder

DETERMINISTIC = ("desk", "reviewer")
"""The suites a scripted model can pass; `quality` is for a real model."""


@pytest.fixture
def desk(scripted_model: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted_model.respond(desk_responder)
    monkeypatch.setenv("AMODAL_DATA_DIR", str(tmp_path / "data"))


def test_the_deterministic_example_suites_pass(
    desk: None, example_repo: Path, amodal: Callable[..., Any], tmp_path: Path
) -> None:
    report = tmp_path / "junit.xml"

    result = amodal("eval", *DETERMINISTIC, "--junit", str(report), cwd=example_repo)

    assert result.code == 0, result.stdout + result.stderr
    xml = JUnitXml.fromfile(str(report))
    cases = sum(len(list(suite)) for suite in xml)
    assert (xml.failures, xml.errors) == (0, 0)
    assert cases == xml.tests == 10
    assert {suite.name for suite in xml} == set(DETERMINISTIC)


def test_every_example_suite_is_either_deterministic_or_for_a_real_model() -> None:
    root = Path(__file__).resolve().parents[2]
    assert {path.stem for path in (root / "evals").glob("*.yaml")} == {*DETERMINISTIC, "quality"}


def edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def test_the_suites_fail_when_the_lead_loses_a_tool(
    desk: None, example_repo: Path, amodal: Callable[..., Any]
) -> None:
    edit_json(
        example_repo / "agents/default/agent.json",
        lambda agent: agent["tools"].remove("load_knowledge"),
    )
    assert amodal("validate", cwd=example_repo).code == 0  # still a valid repo

    result = amodal("eval", "desk", cwd=example_repo)

    assert result.code == 1
    assert "FAIL desk/answers a definition from the glossary (0/1 passed" in result.stdout
    assert (
        "  tools_called: expected the tools [load_knowledge] to be called in this order; "
        "load_knowledge was not called. The trajectory was empty (no tool was called)"
    ) in result.stdout
    assert "FAIL desk/follows up in the same session" in result.stdout
    assert "2 failed" in result.stdout


def test_the_suites_fail_when_the_lead_loses_a_specialist(
    desk: None, example_repo: Path, amodal: Callable[..., Any]
) -> None:
    edit_json(
        example_repo / "agents/default/agent.json",
        lambda agent: agent["subagents"].remove("researcher"),
    )

    result = amodal("eval", "desk", "--case", "hands research to the researcher", cwd=example_repo)

    assert result.code == 1
    assert (
        "  subagents_called: expected the specialists 'researcher' to run; "
        "the specialists that ran: none"
    ) in result.stdout


def test_the_suites_fail_when_a_manager_loses_the_decisions_store(
    desk: None, example_repo: Path, amodal: Callable[..., Any]
) -> None:
    predicates = example_repo / "agents/reviewer/agent.py"
    predicates.write_text(
        predicates.read_text().replace('return ctx.claims["role"] == "manager"', "return False")
    )

    result = amodal("eval", "reviewer", cwd=example_repo)

    assert result.code == 1
    assert "FAIL reviewer/a manager records the decision" in result.stdout
    assert "store: decisions 'D-7' should exist with" in result.stdout
    assert "1 failed" in result.stdout  # the editor's case still passes: it expects no put
