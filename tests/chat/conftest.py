"""A ChatRuntime over a test repo, SQLite in tmp_path, and the scripted model over loopback."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from runtime import load_bundle
from runtime.bundle import Bundle
from runtime.chat import Caller, ChatRequest, ChatRuntime, ModelRouter
from runtime.events import Event
from runtime.storage import open_storage


class Harness:
    """A runtime whose bundle can be swapped, with helpers to run turns and collect events."""

    def __init__(self, runtime: ChatRuntime, bundles: list[Bundle]) -> None:
        self.runtime = runtime
        self.bundles = bundles

    def reload(self, root: Path) -> Bundle:
        self.bundles.append(load_bundle(root))
        return self.bundles[-1]

    async def chat(self, message: str, caller: Caller | None = None, **request: Any) -> list[Event]:
        turn = await self.runtime.start_turn(
            ChatRequest(message, **request), caller or Caller(operator=True)
        )
        return [event async for event in turn.events()]

    async def confirm(
        self, session_id: str, call_id: str, approve: bool, caller: Caller | None = None
    ) -> list[Event]:
        turn = await self.runtime.start_confirmation(
            session_id, call_id, approve, caller or Caller(operator=True)
        )
        return [event async for event in turn.events()]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def harness_for(tmp_path: Path) -> AsyncIterator[Callable[[Path], Any]]:
    """`await harness_for(repo)`: a harness closed (models and storage) after the test."""
    runtimes: list[ChatRuntime] = []

    async def make(root: Path) -> Harness:
        bundles = [load_bundle(root)]
        storage = await open_storage(tmp_path / f"amodal{len(runtimes)}.db")
        runtime = ChatRuntime(lambda: bundles[-1], storage, ModelRouter(os.environ))
        runtimes.append(runtime)
        return Harness(runtime, bundles)

    yield make
    for runtime in runtimes:
        await runtime.models.aclose()
        await runtime.storage.close()


@pytest.fixture
async def harness(make_repo: Callable[..., Path], harness_for: Callable[[Path], Any]) -> Harness:
    return await harness_for(make_repo())  # type: ignore[no-any-return]


def types(events: list[Event]) -> list[str]:
    return [event.type for event in events]


def done(events: list[Event]) -> dict[str, Any]:
    assert events[-1].type == "done", types(events)
    return events[-1].data
