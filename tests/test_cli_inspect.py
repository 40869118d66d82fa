"""`amodal inspect` through its real entry point (SPEC 14)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.test_prompt import EXAMPLE_TEAM

Amodal = Callable[..., Any]  # the `amodal` fixture of conftest.py

INSPECT_KEYS = {
    "agent", "tools", "skills", "stores", "subagents", "excluded", "system_prompt",
    "context_prompt",
}  # fmt: skip


def test_inspect_json_prints_exactly_the_documented_keys(
    amodal: Amodal, example_repo: Path
) -> None:
    result = amodal(
        "--repo", str(example_repo), "inspect", "reviewer",
        "--claim", "role=manager", "--context", "page=review", "--json",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    view = result.json()
    assert set(view) == INSPECT_KEYS
    assert view["agent"] == "reviewer"
    assert view["tools"] == sorted(view["tools"])
    assert view["tools"] == [
        "ask_choice", "load_knowledge", "stop_execution",
        "store__decisions__delete", "store__decisions__get", "store__decisions__put",
        "store__decisions__query", "store__research_notes__get", "store__research_notes__query",
        "word_count",
    ]  # fmt: skip
    assert view["stores"] == {"decisions": "rw", "research-notes": "read"}
    assert (view["skills"], view["subagents"], view["excluded"]) == ([], [], [])
    assert view["system_prompt"].startswith("# Platform\n\nYou are Reviewer.")
    assert view["context_prompt"] is None


def test_inspect_json_lists_each_exclusion_with_its_reason(
    amodal: Amodal, example_repo: Path
) -> None:
    result = amodal("--repo", str(example_repo), "inspect", "reviewer", "--json")
    assert result.code == 0, result.stderr
    view = result.json()
    assert view["stores"] == {"research-notes": "read"}
    assert "word_count" not in view["tools"]
    by_name = {item["name"]: item for item in view["excluded"]}
    assert set(by_name) == {"word_count", "decisions"}
    assert all(set(item) == {"kind", "name", "reason"} for item in view["excluded"])
    assert by_name["decisions"]["kind"] == "store"
    assert "is_manager" in by_name["decisions"]["reason"]
    assert "KeyError 'role'" in by_name["decisions"]["reason"]
    assert by_name["word_count"]["kind"] == "tool"
    assert "returned False, not True" in by_name["word_count"]["reason"]


def test_a_context_value_never_acts_as_a_claim(amodal: Amodal, example_repo: Path) -> None:
    result = amodal(
        "--repo", str(example_repo), "inspect", "reviewer", "--context", "role=manager", "--json"
    )  # fmt: skip
    view = result.json()
    assert "decisions" not in view["stores"]
    assert "decisions" in {item["name"] for item in view["excluded"]}


def test_inspect_text_shows_the_surface_reasons_and_prompts(
    amodal: Amodal, example_repo: Path
) -> None:
    result = amodal("--repo", str(example_repo), "inspect", "reviewer", "--claim", "role=viewer")
    assert result.code == 0, result.stderr
    out = result.stdout
    assert out.startswith("agent: reviewer\n")
    assert "stores: research-notes (read)\n" in out
    assert "subagents: (none)\n" in out
    assert "excluded:\n" in out
    assert "  tool word_count: predicate on_review_page_or_delegated (" in out
    assert "  store decisions: predicate is_manager (" in out
    assert "returned False, not True" in out
    assert "--- system prompt ---\n# Platform\n\nYou are Reviewer." in out
    assert out.rstrip().endswith("--- context prompt ---\n(none)")


def test_inspect_subagent_resolves_as_a_delegated_specialist(
    amodal: Amodal, example_repo: Path
) -> None:
    (example_repo / "agents/writer/CONTEXT.md").write_text("Page: {{ scope.page }}\n")
    root = amodal(
        "--repo", str(example_repo), "inspect", "writer", "--context", "page=drafts", "--json"
    )  # fmt: skip
    assert root.json()["context_prompt"] == "Page: drafts"
    specialist = amodal(
        "--repo", str(example_repo), "inspect", "writer", "--context", "page=drafts",
        "--subagent", "--json",
    )  # fmt: skip
    assert specialist.code == 0, specialist.stderr
    assert specialist.json()["context_prompt"] is None

    reviewer = amodal("--repo", str(example_repo), "inspect", "reviewer", "--subagent", "--json")
    assert "word_count" in reviewer.json()["tools"]  # its predicate allows delegation


def test_inspect_shows_the_rendered_context_prompt_with_values_inert(
    amodal: Amodal, example_repo: Path
) -> None:
    result = amodal(
        "--repo", str(example_repo), "inspect", "default",
        "--context", "page=review", "--context", "topic={{ 7*7 }}", "--json",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert result.json()["context_prompt"] == (
        f"{EXAMPLE_TEAM}\nThe person is looking at the review page, about {{{{ 7*7 }}}}."
    )


def test_inspect_applies_the_context_rules(amodal: Amodal, example_repo: Path) -> None:
    result = amodal(
        "--repo", str(example_repo), "inspect", "default",
        "--context", "page= ", "--context", "bad-key=x", "--context", "deadline=0", "--json",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    # The blank page is dropped (so its `{% if %}` is false), "0" is truthy.
    assert result.json()["context_prompt"] == f"{EXAMPLE_TEAM}\nThey need the answer by 0."


def test_inspect_main_shows_unscoped_chat(amodal: Amodal, example_repo: Path) -> None:
    result = amodal("--repo", str(example_repo), "inspect", "main", "--json")
    assert result.code == 0, result.stderr
    view = result.json()
    assert view["agent"] == "main"
    assert view["subagents"] == ["researcher", "reviewer", "writer"]
    assert view["stores"] == {"decisions": "rw", "research-notes": "rw"}
    assert {"read_file", "list_files", "propose_source_change"} <= set(view["tools"])
    assert "write_file" not in view["tools"]
    assert view["excluded"] == []
    assert view["context_prompt"] is None
    assert view["system_prompt"].startswith("# Platform\n\nYou are research-desk.")


def test_inspect_finds_the_repo_from_the_current_directory(
    amodal: Amodal, example_repo: Path
) -> None:
    result = amodal("inspect", "writer", cwd=example_repo / "agents/writer")
    assert result.code == 0, result.stderr
    assert result.stdout.startswith("agent: writer\n")


def test_inspect_an_unknown_agent_exits_1_naming_the_known_agents(
    amodal: Amodal, example_repo: Path
) -> None:
    result = amodal("--repo", str(example_repo), "inspect", "reveiwer")
    assert result.code == 1
    assert result.stdout == ""
    assert "unknown agent 'reveiwer'" in result.stderr
    assert "default, main, researcher, reviewer, writer" in result.stderr


def test_inspect_default_as_a_specialist_is_refused(amodal: Amodal, example_repo: Path) -> None:
    result = amodal("--repo", str(example_repo), "inspect", "default", "--subagent")
    assert result.code == 1
    assert "never callable as a specialist" in result.stderr


def test_a_malformed_claim_or_context_exits_2(amodal: Amodal, example_repo: Path) -> None:
    for option, value in [("--claim", "role"), ("--claim", "=manager"), ("--context", "page")]:
        result = amodal("--repo", str(example_repo), "inspect", "reviewer", option, value)
        assert result.code == 2, (option, value)
        assert f"Invalid value for {option}" in result.stderr
        assert "KEY=VALUE" in result.stderr
        assert result.stdout == ""


def test_a_claim_value_may_contain_equals_signs(amodal: Amodal, example_repo: Path) -> None:
    result = amodal(
        "--repo", str(example_repo), "inspect", "reviewer", "--claim", "role=manager=x", "--json"
    )  # fmt: skip
    assert result.code == 0, result.stderr
    reasons = [item["reason"] for item in result.json()["excluded"]]
    assert any("is_manager" in reason and "returned False" in reason for reason in reasons)


def test_inspect_an_invalid_repo_exits_1_with_its_errors(
    amodal: Amodal, make_repo: Callable[..., Path]
) -> None:
    root = make_repo({"agents/default/AGENT.md": "Hi {{ scope.__class__ }}\n"})
    result = amodal("--repo", str(root), "inspect", "default")
    assert result.code == 1
    # Every error, on stderr: stdout is the command's own output (and --json stays JSON).
    assert "agents/default/AGENT.md:1: templates may not access '__class__'" in result.stderr
    assert "the repo is not valid" in result.stderr
    assert result.stdout == ""
