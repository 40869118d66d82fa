"""The `amodal serve` process: the API on uvicorn, in one process or several on one port.

The parent checks what can fail before anything listens (the repo, binding without
auth, a model to talk to; it starts the offline model once when none is
configured), then binds the port and hands it to uvicorn. Each server process runs
`ServedApp`: at start-up it opens its own `Runtime` over the shared database
(with hot reload, the stores' expiry purge and the automations' cron scheduler) and
serves `create_app` over it; at shutdown it closes it. Several processes (`--workers N`)
share one database, so a session may continue on any of them and still runs one turn at
a time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.supervisors import Multiprocess

from runtime.api import Runtime
from runtime.automations import Automations
from runtime.exceptions import AmodalError, NoModelError
from runtime.observe.tracing import tracing_from_environment
from runtime.repo import load_bundle
from runtime.repo.model_bindings import resolve_endpoint
from runtime.server.app import create_app
from runtime.server.auth import Authenticator, check_binding
from runtime.stores import purge_interval, purge_periodically

REPO_ENV = "AMODAL_SERVE_REPO"
RELOAD_ENV = "AMODAL_SERVE_RELOAD"
PARENT_ENV = "AMODAL_SERVE_PARENT"  # set for worker processes: the supervisor's pid
WORKER_HEALTHCHECK_SECONDS = 120
"""How long uvicorn's supervisor waits for a worker to answer its health ping before it
kills and replaces it. A new worker answers only once its interpreter has started and
imported the runtime, which took 9-19 s on a loaded machine: with uvicorn's default of
5 s, workers were replaced every 5 s and the server never became healthy."""


def run_server(repo: Path, host: str, port: int, *, reload: bool, workers: int = 1) -> int:
    """Serve until interrupted; the process exit code."""
    try:
        bundle = load_bundle(repo)
        check_binding(host, Authenticator(bundle.config.auth, os.environ))
        with _model_for_every_worker(bundle.config) as environ:
            os.environ.update(environ)
            os.environ[REPO_ENV] = str(repo.resolve())
            os.environ[RELOAD_ENV] = "1" if reload else "0"
            if workers > 1:  # a worker stops when this process is gone
                os.environ[PARENT_ENV] = str(os.getpid())
            config = uvicorn.Config(
                "runtime.server.serve:served_app",
                factory=True,
                host=host,
                port=port,
                workers=workers,
                lifespan="on",
                log_level="warning",
                timeout_graceful_shutdown=5,
                timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
            )
            try:
                sock = _bind(config)
            except OSError as error:  # the port is taken, or the address is not ours
                print(f"Error: could not serve on {host}:{port}: {error}", file=sys.stderr)
                return 1
            bound = sock.getsockname()[1]
            print(
                f"amodal: serving {bundle.config.name} (bundle {bundle.version}) on "
                f"http://{host}:{bound}"
                + (f" with {workers} worker processes" if workers > 1 else ""),
                file=sys.stderr,
                flush=True,
            )
            if workers > 1:
                Multiprocess(config, sockets=[sock]).run()
            else:
                server = uvicorn.Server(config)
                server.run(sockets=[sock])
                if not server.started:
                    return 1  # it has said why (a failed start-up, a busy port)
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


def _bind(config: uvicorn.Config) -> socket.socket:
    """The server's socket, bound before any worker starts: `--port 0` gets a port from the
    kernel, and the line run_server prints says which (tests and benchmarks read it)."""
    if config.workers == 1:
        return config.bind_socket()
    return WorkerPort.reserve(config.host, config.port)


class WorkerPort(socket.socket):
    """The port of `--workers N`, held by the parent: bound with SO_REUSEPORT, never listening.

    uvicorn hands the parent's sockets to each worker process by pickling them; this one
    unpickles in each worker as a new socket bound to the same port, so every worker
    listens on a socket of its own and the kernel spreads new connections evenly over
    them. With one shared listening socket, whichever worker wakes first accepts every
    connection waiting (asyncio accepts up to the backlog at once), and a burst queues on
    one worker while the other idles."""

    @classmethod
    def reserve(cls, host: str, port: int) -> WorkerPort:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # A plain bind first: it fails when anything holds the port, where SO_REUSEPORT
        # would silently share it with another server of the same user.
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
            port = probe.getsockname()[1]
        reserved = cls(family)
        try:
            _share_port(reserved)
            reserved.bind((host, port))
        except OSError:
            reserved.close()
            raise
        return reserved

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _worker_socket, (self.family, self.getsockname()[:2])


def _worker_socket(family: socket.AddressFamily, address: tuple[str, int]) -> socket.socket:
    """A worker's own socket on the shared port (uvicorn listens on it)."""
    sock = socket.socket(family)
    _share_port(sock)
    sock.bind(address)
    return sock


def _share_port(sock: socket.socket) -> None:
    # SO_REUSEADDR too, as uvicorn sets it: a restart must not wait out the connections
    # the last server left in TIME_WAIT on the port.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)


async def _stop_when_orphaned(parent: int) -> None:
    """Stops this worker when its supervisor is gone (kill -9): else it would serve on
    alone, and share the port with the workers of the next server started on it."""
    while os.getppid() == parent:  # noqa: ASYNC110 (no event tells a parent's death)
        await anyio.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful shutdown


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
                # Every server process runs the cron scheduler: a slot is one database row,
                # so however many processes and replicas tick, each slot runs once.
                Automations.open(runtime, schedule=True) as automations,
                anyio.create_task_group() as group,
            ):
                live = runtime.live

                def announce(ok: bool) -> None:  # a failed reload logs reload_failed itself
                    if ok:
                        print(f"amodal: reloaded (bundle {live().version})", file=sys.stderr)

                live.on_reload = announce
                auth = Authenticator(live().config.auth, os.environ)
                self._app = create_app(runtime, auth, automations)
                group.start_soon(purge_periodically, runtime.storage, purge_interval(os.environ))
                if PARENT_ENV in os.environ:
                    group.start_soon(_stop_when_orphaned, int(os.environ[PARENT_ENV]))
                await send({"type": "lifespan.startup.complete"})
                await receive()  # lifespan.shutdown: requests are done (or timed out)
                group.cancel_scope.cancel()
        except Exception as error:
            message = str(error) if isinstance(error, AmodalError) else repr(error)
            print(f"Error: {message}", file=sys.stderr)
            await send({"type": "lifespan.startup.failed", "message": message})
            return
        await send({"type": "lifespan.shutdown.complete"})
