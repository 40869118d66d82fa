"""The `amodal serve` process: the API on uvicorn, hot reload, and the stores' expiry purge."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import uvicorn

from runtime.api import Runtime
from runtime.documents import purge_interval, purge_periodically
from runtime.exceptions import AmodalError
from runtime.observe import tracing_from_environment
from runtime.reload import LiveBundle
from runtime.server.app import create_app
from runtime.server.auth import Authenticator, check_binding


def run_server(repo: Path, host: str, port: int, *, reload: bool) -> int:
    """Serve until interrupted; the process exit code."""
    try:
        anyio.run(serve, repo, host, port, reload)
    except AmodalError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    except BaseExceptionGroup as group:
        refused = group.subgroup(AmodalError)
        if refused is not None:  # raised inside the runtime's task group: say it plainly
            print(f"Error: {_first(refused)}", file=sys.stderr)
            return 1
        if group.subgroup(SystemExit) is None:
            raise
        # uvicorn exits when it cannot listen (it has logged why, e.g. the port is taken).
        print(f"Error: could not serve on {host}:{port}", file=sys.stderr)
        return 1
    return 0


def _first(group: BaseExceptionGroup[AmodalError]) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


async def serve(repo: Path, host: str, port: int, reload: bool) -> None:
    purge_every = purge_interval(os.environ)
    tracing = tracing_from_environment(os.environ)
    async with Runtime.open(repo, watch_repo=reload, observers=tracing) as runtime:
        live = runtime.live
        auth = Authenticator(live().config.auth, os.environ)
        check_binding(host, auth)  # before anything listens
        # The offline model starts now (not on the first chat), and a repo with no model at
        # all fails here with the message that names both ways out.
        await runtime.chats.models.model(live(), "default")
        live.on_reload = _announce(live)
        http = uvicorn.Server(
            uvicorn.Config(
                create_app(runtime, auth),
                host=host,
                port=port,
                log_level="warning",
                lifespan="off",
                timeout_graceful_shutdown=5,
            )
        )
        print(
            f"amodal: serving {live().config.name} (bundle {live().version}) on "
            f"http://{host}:{port}, database {runtime.storage!r}",
            file=sys.stderr,
        )
        async with anyio.create_task_group() as group:
            group.start_soon(purge_periodically, runtime.storage, purge_every)
            await http.serve()
            group.cancel_scope.cancel()


def _announce(live: LiveBundle) -> Callable[[bool], None]:
    def announce(ok: bool) -> None:
        if ok:  # a failed reload is logged as reload_failed with every error
            print(f"amodal: reloaded (bundle {live().version})", file=sys.stderr)

    return announce
