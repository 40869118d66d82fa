"""Chats for tests: a `Runtime` over a test repo, its database in tmp_path, the scripted model
over loopback. Loaded as a pytest plugin by tests/conftest.py.

- `harness_for(root, database=None)`: a `Harness` (closed after the test); `database` is a
  URL (e.g. the `database_url` fixture's PostgreSQL schema), else a SQLite file in tmp_path.
- `harness`: one over a minimal repo.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import events
from runtime.api import Runtime, SessionHistory
from runtime.events import Event
from runtime.repo.bundle import Bundle
from runtime.storage import AgentRunRecord
from runtime.surface.caller import Caller


class Harness:
    """A runtime whose repo can be reloaded, with helpers to run turns and collect events."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    @property
    def bundle(self) -> Bundle:
        return self.runtime.bundle

    def reload(self) -> Bundle:
        """Reload the repo from disk (as a file watcher would); the new bundle."""
        assert self.runtime.live.reload(), self.runtime.live.reload_error
        return self.runtime.bundle

    async def chat(self, message: str, caller: Caller | None = None, **request: Any) -> list[Event]:
        who = caller or Caller(operator=True)
        turn = await self.runtime.begin(
            message, claims=who.claims, operator=who.operator, **request
        )
        return [event async for event in turn.events()]

    async def confirm(
        self, session_id: str, call_id: str, approve: bool, caller: Caller | None = None
    ) -> list[Event]:
        who = caller or Caller(operator=True)
        turn = await self.runtime.begin_confirmation(
            session_id, call_id, approve=approve, claims=who.claims, operator=who.operator
        )
        return [event async for event in turn.events()]

    async def session(self, session_id: str) -> SessionHistory:
        """The session and its log, as the operator sees it."""
        return await self.runtime.session(session_id, operator=True)

    async def runs(self, session_id: str) -> list[AgentRunRecord]:
        return await self.runtime.runs(session_id, operator=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def harness_for(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """`await harness_for(repo)`: a harness, closed (models and storage) after the test."""
    async with contextlib.AsyncExitStack() as stack:
        count = 0

        async def make(root: Path, database: str | None = None) -> Harness:
            nonlocal count
            count += 1
            url = database or str(tmp_path / f"amodal{count}.db")
            return Harness(await stack.enter_async_context(Runtime.open(root, database=url)))

        yield make


@pytest.fixture
async def harness(make_repo: Callable[..., Path], harness_for: Callable[..., Any]) -> Harness:
    return await harness_for(make_repo())  # type: ignore[no-any-return]


def types(streamed: list[Event]) -> list[str]:
    return [event.type for event in streamed]


def done(streamed: list[Event]) -> events.Done:
    last = streamed[-1]
    assert isinstance(last, events.Done), types(streamed)
    return last


def of_type(streamed: list[Event], kind: type[Any]) -> list[Any]:
    """The events of one type, e.g. `of_type(events, events.ToolResult)`."""
    return [event for event in streamed if isinstance(event, kind)]
