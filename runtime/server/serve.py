"""The `amodal serve` process: the API on uvicorn, in one process or several on one port.

The parent checks what can fail before anything listens (the repo, binding without
auth, a model to talk to; it starts the offline model once when none is
configured), then hands the socket to uvicorn. Each server process runs
`ServedApp`: at start-up it opens its own `Runtime` over the shared database
(with hot reload and the stores' expiry purge) and serves `create_app` over it; at
shutdown it closes it. Several processes (`--workers N`) share one database, so a
session may continue on any of them and still runs one turn at a time.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from runtime.api import Runtime
from runtime.documents import purge_interval, purge_periodically
from runtime.exceptions import AmodalError, NoModelError
from runtime.models.endpoints import resolve_endpoint
from runtime.observe import tracing_from_environment
from runtime.repo import load_bundle
from runtime.server.app import create_app
from runtime.server.auth import Authenticator, check_binding

REPO_ENV = "AMODAL_SERVE_REPO"
RELOAD_ENV = "AMODAL_SERVE_RELOAD"


def run_server(repo: Path, host: str, port: int, *, reload: bool, workers: int = 1) -> int:
    """Serve until interrupted; the process exit code."""
    try:
        bundle = load_bundle(repo)
        check_binding(host, Authenticator(bundle.config.auth, os.environ))
        with _model_for_every_worker(bundle.config) as environ:
            os.environ.update(environ)
            os.environ[REPO_ENV] = str(repo.resolve())
            os.environ[RELOAD_ENV] = "1" if reload else "0"
            print(
                f"amodal: serving {bundle.config.name} (bundle {bundle.version}) on "
                f"http://{host}:{port}"
                + (f" with {workers} worker processes" if workers > 1 else ""),
                file=sys.stderr,
            )
            uvicorn.run(
                "runtime.server.serve:served_app",
                factory=True,
                host=host,
                port=port,
                workers=workers,
                lifespan="on",
                log_level="warning",
                timeout_graceful_shutdown=5,
            )
    except AmodalError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    except SystemExit as exiting:  # uvicorn exits when it cannot listen or start
        if exiting.code not in (0, None):
            print(f"Error: could not serve on {host}:{port}", file=sys.stderr)
            return 1
    return 0


@contextlib.contextmanager
def _model_for_every_worker(config: Any) -> Iterator[dict[str, str]]:
    """The environment that points every worker at a model: nothing to change when one is
    configured; else the offline model, started once here (or `NoModelError`)."""
    if resolve_endpoint(config, "default", os.environ) is not None:
        yield {}
        return
    from runtime.models import local

    if not local.local_model_installed():
        raise NoModelError(local.NO_MODEL)
    with local.start_local_model() as endpoint:
        print(local.ANNOUNCEMENT, file=sys.stderr)
        yield {
            "OPENAI_BASE_URL": endpoint.base_url,
            "OPENAI_API_KEY": endpoint.api_key or "local",
            "MODEL_MAIN": endpoint.model,
        }


def served_app() -> ASGIApp:
    """The ASGI app of one server process (uvicorn's factory; settings from the parent)."""
    return ServedApp(Path(os.environ[REPO_ENV]), reload=os.environ.get(RELOAD_ENV) == "1")


class ServedApp:
    """Opens a runtime when the server starts, serves the API over it, closes it at the end."""

    def __init__(self, repo: Path, *, reload: bool) -> None:
        self.repo = repo
        self.reload = reload
        self._app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif self._app is not None:
            await self._app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        try:
            async with (
                Runtime.open(
                    self.repo,
                    watch_repo=self.reload,
                    observers=tracing_from_environment(os.environ),
                ) as runtime,
                anyio.create_task_group() as group,
            ):
                live = runtime.live

                def announce(ok: bool) -> None:  # a failed reload logs reload_failed itself
                    if ok:
                        print(f"amodal: reloaded (bundle {live().version})", file=sys.stderr)

                live.on_reload = announce
                self._app = create_app(runtime, Authenticator(live().config.auth, os.environ))
                group.start_soon(purge_periodically, runtime.storage, purge_interval(os.environ))
                await send({"type": "lifespan.startup.complete"})
                await receive()  # lifespan.shutdown: requests are done (or timed out)
                group.cancel_scope.cancel()
        except Exception as error:
            message = str(error) if isinstance(error, AmodalError) else repr(error)
            print(f"Error: {message}", file=sys.stderr)
            await send({"type": "lifespan.startup.failed", "message": message})
            return
        await send({"type": "lifespan.shutdown.complete"})
