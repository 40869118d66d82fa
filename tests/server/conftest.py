"""The HTTP API in process (httpx over the ASGI app) and as a real `amodal serve` process."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.api import Runtime
from runtime.server import Authenticator, create_app
from runtime.testing.server_process import ServeProcess


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def parse_sse(text: str) -> list[dict[str, Any]]:
    """SSE frames as events; checks that each `event:` line names its data's type."""
    events = []
    for frame in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        event = json.loads(lines["data"])
        assert lines["event"] == event["type"]
        events.append(event)
    return events


class Api:
    def __init__(self, runtime: Runtime, client: httpx.AsyncClient) -> None:
        self.runtime = runtime
        self.client = client

    async def chat(self, **body: Any) -> list[dict[str, Any]]:
        response = await self.client.post("/chat", json=body)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        return parse_sse(response.text)


@pytest.fixture
async def api_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., Any]]:
    monkeypatch.setenv("AMODAL_DATA_DIR", str(tmp_path / "data"))
    async with contextlib.AsyncExitStack() as stack:

        async def make(root: Path, environ: Mapping[str, str] | None = None) -> Api:
            for key, value in (environ or {}).items():
                monkeypatch.setenv(key, value)
            # The live process environment: fixtures like scripted_model may set it later.
            runtime = await stack.enter_async_context(Runtime.open(root))
            app = create_app(runtime, Authenticator(runtime.bundle.config.auth, os.environ))
            client = await stack.enter_async_context(
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://amodal.test"
                )
            )
            return Api(runtime, client)

        yield make


@pytest.fixture
async def api(make_repo: Callable[..., Path], api_for: Callable[..., Any]) -> Api:
    return await api_for(make_repo())  # type: ignore[no-any-return]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    started: list[ServeProcess] = []

    def start(repo: Path, env: Mapping[str, str] | None = None, *args: str) -> ServeProcess:
        process = ServeProcess(
            repo, {"AMODAL_DATA_DIR": str(tmp_path / "data"), **(env or {})}, *args
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
