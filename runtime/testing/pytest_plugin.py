"""Pytest fixtures for tests that talk to a model.

Import both fixtures in a conftest.py (or load this module with `-p`):

- `no_real_model` (autouse): points `OPENAI_BASE_URL` and `ANTHROPIC_BASE_URL` at
  guard servers (one per wire) that fail the test if any request reaches them,
  sets dummy `OPENAI_API_KEY` and `ANTHROPIC_API_KEY` and removes `MODEL_MAIN`,
  `MODEL_SIMPLE` and `MODEL_ADVANCED`, so no test can reach a real endpoint or
  depend on the developer's environment.
- `scripted_model`: a started `ScriptedModel`; it points `OPENAI_BASE_URL` at
  itself and sets `MODEL_MAIN=scripted` (the model name the runtime will ask
  for; delete it with monkeypatch to test `models.main`), and calls
  `assert_done()` at teardown.
- `scripted_anthropic`: the same with a `ScriptedAnthropic` and
  `ANTHROPIC_BASE_URL`, for a repo whose model entry says `"provider": "anthropic"`.

Only the environment is changed, never the client: the code under test
resolves its endpoint exactly as in production.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime.testing._requests import RecordedRequest
from runtime.testing._server import ScriptedAnthropic, ScriptedModel, ScriptedServer
from runtime.testing._steps import Step, error

GUARD_API_KEY = "sk-amodal-test-dummy-key"
GUARD_ANTHROPIC_KEY = "sk-ant-amodal-test-dummy-key"
SCRIPTED_MODEL_NAME = "scripted"
_GUARD_MESSAGE = (
    "this test reached a model without scripting one: "
    "use the scripted_model fixture (runtime.testing.pytest_plugin)"
)


def _refuse(request: RecordedRequest) -> Step:
    # 400, not 500: the client does not retry it, so the test fails at once.
    return error(400, _GUARD_MESSAGE)


@pytest.fixture(scope="session")
def _model_guard_server() -> Iterator[ScriptedModel]:
    with ScriptedModel() as guard:
        guard.respond(_refuse)
        yield guard


@pytest.fixture(scope="session")
def _anthropic_guard_server() -> Iterator[ScriptedAnthropic]:
    with ScriptedAnthropic() as guard:
        guard.respond(_refuse)
        yield guard


@pytest.fixture(autouse=True)
def no_real_model(
    monkeypatch: pytest.MonkeyPatch,
    _model_guard_server: ScriptedModel,
    _anthropic_guard_server: ScriptedAnthropic,
) -> Iterator[ScriptedModel]:
    """Fail the test if any model request reaches a guard (i.e. no model was scripted)."""
    monkeypatch.setenv("OPENAI_BASE_URL", _model_guard_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", GUARD_API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", _anthropic_guard_server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", GUARD_ANTHROPIC_KEY)
    for name in ("MODEL_MAIN", "MODEL_SIMPLE", "MODEL_ADVANCED"):
        monkeypatch.delenv(name, raising=False)
    guards: list[ScriptedServer] = [_model_guard_server, _anthropic_guard_server]
    before = [len(guard.requests) for guard in guards]
    yield _model_guard_server
    reached = [r for guard, n in zip(guards, before, strict=True) for r in guard.requests[n:]]
    if reached:
        last = reached[-1].last_user
        pytest.fail(
            f"{len(reached)} model request(s) reached the guard endpoint "
            f"(last user message {last!r}): {_GUARD_MESSAGE}",
            pytrace=False,
        )


@pytest.fixture
def scripted_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedModel]:
    """A started scripted model the runtime's default endpoint points at; checked at teardown."""
    with ScriptedModel() as model:
        monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
        monkeypatch.setenv("MODEL_MAIN", SCRIPTED_MODEL_NAME)
        yield model
        model.assert_done()


@pytest.fixture
def scripted_anthropic(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedAnthropic]:
    """A started scripted Anthropic server that `ANTHROPIC_BASE_URL` points at (the session
    model of a repo whose `models.main` says `"provider": "anthropic"`); checked at teardown."""
    with ScriptedAnthropic() as model:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)
        monkeypatch.setenv("MODEL_MAIN", SCRIPTED_MODEL_NAME)
        yield model
        model.assert_done()
