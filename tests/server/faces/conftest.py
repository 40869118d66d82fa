"""The protocol faces served for real: the ASGI app on a loopback port (uvicorn, in the
test's event loop, so the test can reach its `Runtime` too), talked to with each
protocol's own client library."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
import uvicorn

from runtime.api import Runtime
from runtime.server import Authenticator, create_app

T = TypeVar("T")

OPERATOR_TOKEN = "operator-token-0123456789abcdef"
ANN_KEY = "key-ann-0123456789abcdef"
BOB_KEY = "key-bob-0123456789abcdef"

SECURED = {
    "auth": {
        "apiKeys": [
            {"key": "env:ANN_KEY", "claims": {"sub": "ann", "scope": "acme"}},
            {"key": "env:BOB_KEY", "claims": {"sub": "bob", "scope": "acme"}},
        ]
    }
}
CREDENTIALS = {"AMODAL_OPERATOR_TOKEN": OPERATOR_TOKEN, "ANN_KEY": ANN_KEY, "BOB_KEY": BOB_KEY}

# An agent repo every face test uses: `default`, a `writer` whose `charge` tool needs a
# person's approval, a `counter` allowed one tool call a turn, and a `helper` specialist.
FACES_REPO: dict[str, Any] = {
    "amodal.json": {"name": "faces", "version": "2.1.0", **SECURED},
    "agents/default/AGENT.md": "You help.\n",
    "agents/default/agent.json": {"description": "Answers anything.", "subagents": ["helper"]},
    "agents/writer/AGENT.md": "You write and charge.\n",
    "agents/writer/agent.json": {
        "description": "Writes notes.\nAnd charges cards.",
        "tools": ["charge"],
        "skills": ["style"],
    },
    "agents/counter/AGENT.md": "You count, one tool call at most.\n",
    "agents/counter/agent.json": {"tools": ["echo"], "maxToolCalls": 1},
    "tools/echo/tool.json": {
        "description": "Echo a word.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
    "tools/echo/handler.py": "async def handler(args, ctx):\n    return {'echo': args}\n",
    "agents/helper/AGENT.md": "You help out.\n",
    "agents/helper/agent.json": {"description": "Helps out."},
    "skills/style/SKILL.md": "---\nname: style\ndescription: Write plainly.\n---\nShort words.\n",
    "tools/charge/tool.json": {
        "description": "Charge a card.",
        "confirm": True,
        "parameters": {
            "type": "object",
            "properties": {"amount": {"type": "integer"}},
            "required": ["amount"],
        },
    },
    "tools/charge/handler.py": (
        "async def handler(args, ctx):\n    return {'charged': args['amount']}\n"
    ),
}


@dataclass
class Served:
    """The app on a loopback port, and the runtime behind it."""

    url: str
    runtime: Runtime
    stack: contextlib.AsyncExitStack

    def headers(self, token: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"} if token else {}

    def closed_after(self, client: T) -> T:
        """`client` (with `close()` or `aclose()` to await), closed when the test ends."""
        close = getattr(client, "close", None) or client.aclose  # type: ignore[attr-defined]
        self.stack.push_async_callback(close)
        return client


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def serve_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., Any]]:
    """`await serve_app(repo_root, environ)`: the app served on 127.0.0.1, stopped after the
    test."""
    monkeypatch.setenv("AMODAL_DATA_DIR", str(tmp_path / "data"))
    async with contextlib.AsyncExitStack() as stack, anyio.create_task_group() as group:

        async def start(root: Path, environ: Mapping[str, str] | None = None) -> Served:
            for key, value in (environ or {}).items():
                monkeypatch.setenv(key, value)
            runtime = await stack.enter_async_context(Runtime.open(root))
            app = create_app(runtime, Authenticator(runtime.bundle.config.auth, os.environ))
            config = uvicorn.Config(
                app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"
            )
            server = uvicorn.Server(config)
            group.start_soon(server.serve)
            while not server.started:  # noqa: ASYNC110 (uvicorn has no "started" event)
                await anyio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]

            async def stop() -> None:
                server.should_exit = True
                while server.started and not getattr(server, "_stopped", False):
                    await anyio.sleep(0.01)
                    if all(not s.is_serving() for s in server.servers):
                        break

            stack.push_async_callback(stop)
            return Served(f"http://127.0.0.1:{port}", runtime, stack)

        yield start
        await stack.aclose()
        group.cancel_scope.cancel()


@pytest.fixture
async def faces(make_repo: Callable[..., Path], serve_app: Callable[..., Any]) -> Served:
    """The faces repo served with three credentials: the operator, Ann and Bob."""
    return await serve_app(make_repo(FACES_REPO, base=False), CREDENTIALS)  # type: ignore[no-any-return]
