"""A missing optional part degrades, never blocks (SPEC 9.1): a repo that declares MCP servers,
run where the `mcp` extra is not installed.

The CLI runs in a subprocess whose `sitecustomize` makes `mcp` unimportable (as on a machine
that installed only `.[local]`); the runtime's own checks run in this process with the same
import hook (`sys.modules["mcp"] = None` is how Python spells "not installed, do not look").
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.api import Runtime
from runtime.server import Authenticator, create_app
from runtime.testing import ScriptedModel
from tests._harness import done
from tests.conftest import CliResult

PIP = "pip install 'amodal-runtime[mcp]'"


@pytest.fixture
def without_mcp(tmp_path: Path) -> dict[str, str]:
    """The environment of a child process in which the `mcp` package cannot be imported."""
    hook = tmp_path / "no-mcp"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys\nsys.modules['mcp'] = None  # the `mcp` extra is not installed\n"
    )
    path = [str(hook), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(path), "AMODAL_DATA_DIR": str(tmp_path / "data")}


def test_the_hook_really_hides_the_sdk(without_mcp: dict[str, str]) -> None:
    probe = "try:\n    import mcp\nexcept ImportError:\n    print('gone')"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **without_mcp},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "gone\n"


def test_validate_warns_with_the_pip_command_and_the_repo_is_valid(
    amodal: Callable[..., CliResult], example_repo: Path, without_mcp: dict[str, str]
) -> None:
    result = amodal("validate", cwd=example_repo, env=without_mcp)
    assert result.code == 0, result.stdout + result.stderr
    assert f"amodal.json: warning: MCP servers need the `mcp` extra: {PIP}" in result.stderr
    assert "(almanac) do not start" in result.stderr
    assert "valid: 4 agents" in result.stderr
    assert "error" not in result.stdout


def test_chat_answers_and_the_agent_is_told_its_server_is_missing(
    amodal: Callable[..., CliResult],
    example_repo: Path,
    without_mcp: dict[str, str],
    scripted_model: ScriptedModel,
) -> None:
    scripted_model.reply("The almanac is not available here, but I can still look things up.")
    result = amodal(
        "chat", "--agent", "researcher", "How many days until June?",
        cwd=example_repo, env=without_mcp,
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert result.stdout == "The almanac is not available here, but I can still look things up.\n"
    assert PIP in result.stderr  # the validation warning, said once before the turn
    system = scripted_model.requests[0].system or ""
    assert "## Unavailable MCP servers" in system
    assert "- almanac: failed" in system
    assert not [t for t in scripted_model.requests[0].tools if t.startswith("almanac__")]


def test_inspect_lists_the_server_as_failed_with_the_pip_command(
    amodal: Callable[..., CliResult], example_repo: Path, without_mcp: dict[str, str]
) -> None:
    result = amodal("inspect", "researcher", "--json", cwd=example_repo, env=without_mcp)
    assert result.code == 0, result.stderr
    excluded = {(e["kind"], e["name"]): e["reason"] for e in result.json()["excluded"]}
    assert excluded[("mcp", "almanac")] == (
        f"server failed: the `mcp` extra is not installed: {PIP}"
    )


@pytest.mark.anyio
async def test_health_reports_the_server_failed_and_chat_with_the_rest_works(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    scripted_model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # the import hook: `mcp` is not installed
    files = {
        "amodal.json": {
            "name": "t",
            "version": "1",
            "mcp": {"servers": {"desk": {"transport": "stdio", "command": "python"}}},
        },
        "agents/default/agent.json": {"mcp": ["desk"], "tools": ["desk__add"]},
    }
    lab = await harness_for(make_repo(files))
    rt: Runtime = lab.runtime
    state = rt.mcp.snapshot().servers["desk"]
    assert (state.status, state.error) == ("failed", f"the `mcp` extra is not installed: {PIP}")

    app = create_app(rt, Authenticator(rt.bundle.config.auth, {}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        health = (await client.get("/health")).json()
    assert health["status"] == "ok"
    assert health["mcp"]["desk"] == {
        "status": "failed",
        "tools": 0,
        "error": f"the `mcp` extra is not installed: {PIP}",
    }

    scripted_model.reply("I cannot add right now: that server is missing.")
    streamed = await lab.chat("add 2 and 2")
    assert done(streamed).reason == "model_stop"
    assert "- desk: failed; missing tools: desk__add" in (scripted_model.requests[0].system or "")
    assert not [t for t in scripted_model.requests[0].tools if t.startswith("desk__")]
