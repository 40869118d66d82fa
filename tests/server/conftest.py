"""The HTTP API in process (httpx over the ASGI app) and as a real `amodal serve` process."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from runtime.api import Runtime
from runtime.server import Authenticator, create_app


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


def listening_port(pid: int) -> int | None:
    """The TCP port process `pid` listens on; None until it listens (or once it has exited)."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return None
    return next((c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN), None)


class ServeProcess:
    """`amodal serve` in a subprocess, as a user runs it, on a port the kernel picks.

    It runs with `--port 0` and `wait_ready` reads the port off the process's own listening
    socket: a free port picked here and bound by the server seconds later (once it has
    imported and opened its database) could be taken in between by any process on the
    machine, failing the start, or worse, leaving another server to answer the test.
    """

    def __init__(self, repo: Path, env: Mapping[str, str], *args: str) -> None:
        self.port: int | None = None
        executable = Path(sys.executable).with_name("amodal")
        self.process = subprocess.Popen(
            [str(executable), "--repo", str(repo), "serve", "--port", "0", *args],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @property
    def url(self) -> str:
        if self.port is None:
            raise AssertionError("call wait_ready() first: the server picks its port as it starts")
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 120) -> None:
        """Until /health answers 200. The deadline only bounds a server that hangs: one that
        fails exits, and that is seen at once; a start takes seconds on a busy machine."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited: {self.process.stderr.read()}")  # type: ignore[union-attr]
            if self.port is None:
                self.port = listening_port(self.process.pid)
            if self.port is not None:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{self.url}/health", timeout=10).status_code == 200:
                        return
            time.sleep(0.05)
        raise AssertionError(f"server did not answer /health within {timeout:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


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
