"""A missing `anthropic` extra degrades, never blocks (SPEC 9.1), as the `mcp` extra does: a
repo naming an `anthropic` model starts, `amodal validate` warns with the pip command, each
call to that model fails naming it, and a fallback chain moves on to its next entry.

The CLI runs in a subprocess whose `sitecustomize` makes `anthropic` unimportable (as on a
machine that installed only `.[local]`): `sys.modules["anthropic"] = None` is how Python
spells "not installed, do not look".
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import events
from runtime.testing import ScriptedModel
from tests.conftest import CliResult

PIP = "pip install 'amodal-runtime[anthropic]'"


@pytest.fixture
def without_anthropic(tmp_path: Path) -> dict[str, str]:
    """The environment of a child process in which `anthropic` cannot be imported."""
    hook = tmp_path / "no-anthropic"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys\nsys.modules['anthropic'] = None  # the `anthropic` extra is not installed\n"
    )
    path = [str(hook), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(path), "AMODAL_DATA_DIR": str(tmp_path / "data")}


def repo_files(fallback_url: str | None = None) -> dict[str, Any]:
    main: dict[str, Any] = {"model": "claude-x", "provider": "anthropic"}
    if fallback_url is not None:
        main["fallback"] = [
            {"model": "gpt-backup", "provider": "openai", "baseUrl": fallback_url, "apiKey": "k"}
        ]
    return {"amodal.json": {"name": "r", "version": "1", "models": {"main": main}}}


def test_the_hook_really_hides_the_sdk(without_anthropic: dict[str, str]) -> None:
    probe = "try:\n    import anthropic\nexcept ImportError:\n    print('gone')"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **without_anthropic},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == "gone\n"


def test_validate_warns_with_the_pip_command_and_the_repo_is_valid(
    amodal: Callable[..., CliResult],
    make_repo: Callable[..., Path],
    without_anthropic: dict[str, str],
) -> None:
    repo = make_repo(repo_files())
    result = amodal("--repo", str(repo), "validate", env=without_anthropic)
    assert result.code == 0, result.stdout + result.stderr
    assert "amodal.json" in result.stderr and "warning:" in result.stderr
    assert "provider 'anthropic' needs the 'anthropic' package" in result.stderr
    assert PIP in result.stderr
    assert "valid:" in result.stderr


def test_chat_answers_from_the_fallback_when_the_anthropic_model_cannot_be_called(
    amodal: Callable[..., CliResult],
    make_repo: Callable[..., Path],
    without_anthropic: dict[str, str],
    scripted_model: ScriptedModel,
) -> None:
    scripted_model.reply("The backup model answers.")
    repo = make_repo(repo_files(scripted_model.base_url))
    result = amodal("--repo", str(repo), "chat", "hi", env=without_anthropic)
    assert result.code == 0, result.stderr
    assert result.stdout == "The backup model answers.\n"
    assert PIP in result.stderr  # the validation warning, said before the turn
    assert [request.body["model"] for request in scripted_model.requests] == ["gpt-backup"]


def test_chat_without_a_fallback_fails_the_turn_naming_the_pip_command(
    amodal: Callable[..., CliResult],
    make_repo: Callable[..., Path],
    without_anthropic: dict[str, str],
) -> None:
    repo = make_repo(repo_files())
    result = amodal("--repo", str(repo), "chat", "hi", env=without_anthropic)
    assert result.code == 1, result.stdout + result.stderr
    assert "model 'claude-x'" in result.stderr
    assert f"provider 'anthropic' needs the 'anthropic' package, which is not installed: {PIP}" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.anyio
async def test_the_runtime_opens_and_the_turn_ends_with_a_model_error(
    make_repo: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime import Runtime

    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if the extra were missing
    async with Runtime.open(make_repo(repo_files()), database=":memory:") as rt:
        result = await rt.chat("hi")
        history = await rt.session(result.session_id, operator=True)
    assert result.reason == "error"
    assert result.error is not None and PIP in result.error
    error = next(e for e in result.events if isinstance(e, events.Error))
    assert error.code == "model_error"
    # Nothing is lost: the person's message is in the session's log, to try again later.
    assert "hi" in [e.data.get("text") for e in history.entries if e.type == "user"]
