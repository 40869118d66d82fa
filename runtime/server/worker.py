"""The `amodal worker` process: no HTTP, only queued background turns (SPEC 23).

It opens a `Runtime` over the repo's database (`DATABASE_URL`, as `amodal serve` does)
that runs `concurrency` queued turns at a time and, like every runtime, continues the
turns of the database whose process died, and ends and delivers the automation runs
whose process died (`Automations.sweep`). Start as many as the database takes, on as
many machines: each queued turn runs once, on whichever worker claims it first.
SIGTERM or Ctrl-C stops it gracefully: it takes no more turns and waits up to
`DRAIN_SECONDS` for the ones it runs; a second signal (or the deadline) cancels them.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio

from runtime.api import Runtime
from runtime.automations import Automations
from runtime.exceptions import AmodalError
from runtime.observe.tracing import tracing_from_environment
from runtime.repo import load_bundle
from runtime.server.serve import model_for_every_worker

DRAIN_SECONDS = 30.0
"""How long a stopping worker waits for the turns it runs."""
READY = "amodal: worker ready"
"""The line a worker prints once it takes queued turns (tests and benchmarks wait for it)."""


def run_worker(repo: Path, concurrency: int, *, reload: bool) -> int:
    """Run queued turns until stopped; the process exit code."""
    try:
        bundle = load_bundle(repo)
        with model_for_every_worker(bundle.config) as environ:
            os.environ.update(environ)
            anyio.run(_work, repo, concurrency, reload)
    except AmodalError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


async def _work(repo: Path, concurrency: int, reload: bool) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with (
            Runtime.open(
                repo, watch_repo=reload, observers=tracing_from_environment(os.environ)
            ) as runtime,
            # It fires no cron slot (servers do), but sweeps for automation runs and
            # deliveries whose process died, as every server does.
            Automations.open(runtime, sweep=True),
            anyio.create_task_group() as group,
        ):
            stop = anyio.Event()

            async def work() -> None:
                await runtime.work(concurrency, stop=stop)
                group.cancel_scope.cancel()  # drained: the process ends

            async def deadline() -> None:
                await anyio.sleep(DRAIN_SECONDS)
                group.cancel_scope.cancel()

            group.start_soon(work)
            print(
                f"{READY}: {runtime.bundle.config.name} (bundle {runtime.bundle.version}), "
                f"{concurrency} background turn{'s' if concurrency != 1 else ''} at a time",
                file=sys.stderr,
                flush=True,
            )
            async for _ in signals:
                if stop.is_set():
                    group.cancel_scope.cancel()  # a second signal: stop now
                    return
                stop.set()
                group.start_soon(deadline)


__all__ = ["READY", "run_worker"]
