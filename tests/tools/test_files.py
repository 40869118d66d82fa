"""File tools (SPEC 12): a root they cannot leave, definitions they cannot touch, proposals."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.testing import ScriptedModel
from tests._harness import Harness

pytestmark = pytest.mark.anyio

FILES = {
    "agents/default/agent.json": {
        "tools": ["read_file", "write_file", "list_files", "propose_source_change"],
    },
    "notes/hello.txt": "hello\n",
}


@pytest.fixture
async def files(make_repo: Callable[..., Path], harness_for: Callable[[Path], Any]) -> Harness:
    return await harness_for(make_repo(FILES))  # type: ignore[no-any-return]


async def call(h: Harness, model: ScriptedModel, name: str, args: dict[str, Any]) -> Any:
    model.tool_call(name, args)
    model.reply("ok")
    events = await h.chat("go")
    result = next(e.to_json() for e in events if e.type == "tool_result")
    return {**result, "session_id": events[0].session_id}


async def test_read_write_and_list_inside_the_root(
    files: Harness, scripted_model: ScriptedModel
) -> None:
    read = await call(files, scripted_model, "read_file", {"path": "notes/hello.txt"})
    assert read["result"]["content"] == "hello\n"
    wrote = await call(
        files, scripted_model, "write_file", {"path": "out/report.md", "content": "# Report\n"}
    )
    assert wrote["status"] == "ok"
    assert (files.bundle.root / "out/report.md").read_text() == "# Report\n"
    listed = await call(files, scripted_model, "list_files", {"path": "out"})
    assert listed["result"]["entries"] == [{"name": "report.md", "type": "file", "size": 9}]


@pytest.mark.parametrize(
    "path",
    [
        "agents/default/AGENT.md",
        "amodal.json",
        "skills/x/SKILL.md",
        "tools/t/handler.py",
        "stores/s.json",
        ".amodal/amodal.db",
        ".git/config",
        "../outside.txt",
        "/etc/passwd",
        "notes/../agents/default/agent.json",
    ],
)
async def test_definitions_private_data_and_outside_paths_are_refused(
    files: Harness, scripted_model: ScriptedModel, path: str
) -> None:
    wrote = await call(files, scripted_model, "write_file", {"path": path, "content": "x"})
    assert wrote["status"] == "error"
    read = await call(files, scripted_model, "read_file", {"path": path})
    assert read["status"] == "error"
    assert (files.bundle.root / "agents/default/AGENT.md").read_text() == (
        "You are a helpful assistant.\n"
    )


async def test_a_symlink_that_escapes_the_root_is_refused(
    files: Harness, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    os.symlink(secret, files.bundle.root / "notes/link.txt")
    os.symlink(files.bundle.root / "agents", files.bundle.root / "notes/agents")
    escaped = await call(files, scripted_model, "read_file", {"path": "notes/link.txt"})
    assert escaped["status"] == "error" and "outside" in escaped["error"]
    inward = await call(
        files,
        scripted_model,
        "write_file",
        {"path": "notes/agents/default/AGENT.md", "content": "pwned"},
    )
    assert inward["status"] == "error" and "definitions" in inward["error"]


async def test_a_proposed_change_is_kept_for_review_and_never_applied(
    files: Harness, scripted_model: ScriptedModel
) -> None:
    result = await call(
        files,
        scripted_model,
        "propose_source_change",
        {"path": "agents/default/AGENT.md", "content": "You obey no one.", "reason": "test"},
    )
    assert result["status"] == "ok" and result["result"]["proposal_id"].startswith("prop_")
    root = files.bundle.root
    assert (root / "agents/default/AGENT.md").read_text() == "You are a helpful assistant.\n"
    events = (await files.session(result["session_id"])).entries
    proposals = [e.data for e in events if e.type == "proposal"]
    assert proposals[0]["path"] == "agents/default/AGENT.md"
    assert proposals[0]["content"] == "You obey no one." and proposals[0]["reason"] == "test"


async def test_file_tools_are_offered_only_when_declared(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    h = await harness_for(make_repo({"agents/default/agent.json": {"tools": ["read_file"]}}))
    scripted_model.reply("ok")
    await h.chat("hi")
    assert "read_file" in scripted_model.requests[0].tools
    assert "write_file" not in scripted_model.requests[0].tools
