"""`amodal chat` and `amodal serve` as a person runs them in a terminal."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Mapping

import anyio
import uvicorn

from runtime.chat import Caller, ChatRequest, ChatRuntime
from runtime.exceptions import AmodalError
from runtime.local_model import offline_model_if_needed
from runtime.reload import LiveBundle, watch
from runtime.rooting import choose_root
from runtime.server import check_binding, close_server, open_server
from runtime.server.auth import Authenticator
from runtime.storage import default_database_path
from runtime.stores import purge_interval, purge_periodically


def run_chat(
    live: LiveBundle,
    message: str | None,
    *,
    agent: str | None,
    context: Mapping[str, str],
    session_id: str | None,
    as_json: bool,
) -> int:
    """One turn (or an interactive loop without a message); the process exit code."""
    try:
        return anyio.run(_chat, live, message, agent, dict(context), session_id, as_json)
    except AmodalError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


async def _chat(
    live: LiveBundle,
    message: str | None,
    agent: str | None,
    context: dict[str, str],
    session_id: str | None,
    as_json: bool,
) -> int:
    if agent is not None:  # refuse an unknown agent before starting any model
        choose_root(live(), agent, None)
    with offline_model_if_needed(live().config, os.environ) as fallback:
        server = await open_server(live, fallback_model=fallback)
        try:
            runtime = server.runtime
            if message is not None:
                ok, _ = await _turn(runtime, message, agent, context, session_id, as_json)
                return 0 if ok else 1
            failed = False
            while True:
                print("> ", end="", file=sys.stderr, flush=True)
                line = await anyio.to_thread.run_sync(sys.stdin.readline)
                if not line or line.strip() in ("exit", "quit"):
                    return 1 if failed else 0
                if line.strip():
                    ok, session_id = await _turn(
                        runtime, line.strip(), agent, context, session_id, as_json
                    )
                    failed = failed or not ok
                    agent = None  # the root is sticky; name it again only to re-root
        finally:
            await close_server(server)


async def _turn(
    runtime: ChatRuntime,
    message: str,
    agent: str | None,
    context: dict[str, str],
    session_id: str | None,
    as_json: bool,
) -> tuple[bool, str]:
    turn = await runtime.start_turn(
        ChatRequest(message, agent, context, session_id), Caller(operator=True)
    )
    status = _Status(enabled=not as_json and sys.stderr.isatty())
    ok = True
    async for event in turn.events():
        if as_json:
            print(json.dumps(event.as_json(), ensure_ascii=False), flush=True)
            ok = ok and not (event.type == "done" and event.data["reason"] == "error")
            continue
        if event.type == "text_delta" and event.run_id == turn.run_id:
            status.clear()
            sys.stdout.write(event.data["text"])
            sys.stdout.flush()
        elif event.type == "tool_call":
            status.show(f"running {event.data['name']}...")
        elif event.type == "tool_result":
            status.clear()
        elif event.type == "agent":
            print(f"[{event.data['from']} -> {event.data['to']}]", file=sys.stderr)
        elif event.type == "choice":
            print(f"\n{event.data['question']}", file=sys.stderr)
            for index, option in enumerate(event.data["options"], 1):
                print(f"  {index}. {option}", file=sys.stderr)
        elif event.type == "confirmation_required":
            print(
                f"\n{event.data['name']} needs a person's approval: with `amodal serve` running, "
                f"POST /sessions/{turn.session_id}/confirmations/{event.data['call_id']} "
                '{"approve": true} (or false)',
                file=sys.stderr,
            )
        elif event.type == "error":
            status.clear()
            print(f"\nError: {event.data['message']}", file=sys.stderr)
            ok = False
        elif event.type == "done":
            status.clear()
            sys.stdout.write("\n")
            ok = ok and event.data["reason"] != "error"
    if not as_json:
        print(f"(session {turn.session_id})", file=sys.stderr)
    return ok, turn.session_id


class _Status:
    """A one-line status on stderr while tools run (only on a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\033[2K· {text}")
            sys.stderr.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[2K")
            sys.stderr.flush()
            self.shown = False


def run_server(live: LiveBundle, host: str, port: int, *, reload: bool) -> int:
    try:
        anyio.run(_serve, live, host, port, reload)
    except AmodalError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    except BaseExceptionGroup as group:
        if group.subgroup(SystemExit) is None:
            raise
        # uvicorn exits when it cannot listen (it has logged why, e.g. the port is taken).
        print(f"Error: could not serve on {host}:{port}", file=sys.stderr)
        return 1
    return 0


def _announce(live: LiveBundle) -> Callable[[bool], None]:
    def announce(ok: bool) -> None:
        if ok:  # a failed reload is logged as reload_failed with every error
            print(f"amodal: reloaded (bundle {live().version})", file=sys.stderr)

    return announce


async def _serve(live: LiveBundle, host: str, port: int, reload: bool) -> None:
    repo = live.root
    check_binding(host, Authenticator(live().config.auth, os.environ))  # before anything starts
    purge_every = purge_interval(os.environ)
    with offline_model_if_needed(live().config, os.environ) as fallback:
        server = await open_server(live, fallback_model=fallback)
        try:
            http = uvicorn.Server(
                uvicorn.Config(
                    server.app,
                    host=host,
                    port=port,
                    log_level="warning",
                    lifespan="off",
                    timeout_graceful_shutdown=5,
                )
            )
            print(
                f"amodal: serving {server.live().config.name} (bundle "
                f"{server.live().version}) on http://{host}:{port}, "
                f"database {server.runtime.storage!r}",
                file=sys.stderr,
            )
            async with anyio.create_task_group() as group:
                if reload:
                    data_dir = default_database_path(repo).parent
                    group.start_soon(
                        functools.partial(
                            watch, server.live, ignore=data_dir, on_reload=_announce(live)
                        )
                    )
                group.start_soon(purge_periodically, server.runtime.storage, purge_every)
                await http.serve()
                group.cancel_scope.cancel()
        finally:
            await close_server(server)
