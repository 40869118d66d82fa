"""load_skill(name, file): a skill's supporting text files, for the agents that have it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.testing import ScriptedModel
from tests._harness import Harness
from tests.tools.test_files import call

pytestmark = pytest.mark.anyio

FILES = {
    "agents/default/agent.json": {"tools": ["load_skill"], "skills": ["Audit"]},
    "skills/audit/SKILL.md": "# Skill: Audit\nRead references/checklist.md first.\n",
    "skills/audit/references/checklist.md": "- [ ] contrast\n",
    "skills/other/SKILL.md": "# Skill: Other\nNot this agent's.\n",
    "skills/other/secret.md": "other's file\n",
}


@pytest.fixture
async def repo(make_repo: Callable[..., Path], harness_for: Callable[[Path], Any]) -> Harness:
    return await harness_for(make_repo(FILES))  # type: ignore[no-any-return]


async def test_loading_a_skill_lists_its_files_and_a_file_loads_by_path(
    repo: Harness, scripted_model: ScriptedModel
) -> None:
    skill = await call(repo, scripted_model, "load_skill", {"name": "Audit"})
    file = await call(
        repo, scripted_model, "load_skill", {"name": "Audit", "file": "references/checklist.md"}
    )

    assert skill["result"]["files"] == ["references/checklist.md"]
    assert file["result"] == {
        "name": "Audit",
        "file": "references/checklist.md",
        "content": "- [ ] contrast\n",
    }


async def test_an_unknown_file_is_an_error_listing_the_skills_files(
    repo: Harness, scripted_model: ScriptedModel
) -> None:
    missing = await call(
        repo, scripted_model, "load_skill", {"name": "Audit", "file": "../other/secret.md"}
    )

    assert missing["status"] == "error"
    assert "its files: references/checklist.md" in missing["error"]


async def test_another_skills_files_are_out_of_reach(
    repo: Harness, scripted_model: ScriptedModel
) -> None:
    refused = await call(repo, scripted_model, "load_skill", {"name": "Other", "file": "secret.md"})

    assert refused["status"] == "error"  # `Other` is not in this agent's surface
    assert "secret" not in str(refused.get("result", ""))
