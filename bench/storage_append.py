"""How long appending to a session's event log takes (not a test; nothing asserts on time).

    python -m bench.storage_append [--events N] [--url sqlite:///path]

Prints the mean and median of `append_event` (one event, one transaction) and
of `append_events` with ten events (a chat turn's worth, one transaction), and
the ratio of the per-event costs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from runtime.storage import NewEvent, SessionRecord, open_storage, utc_now

DATA = {"text": "x" * 200, "usage": {"input": 1200, "output": 80}}


async def _timed(samples: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    timings = []
    for _ in range(samples):
        start = time.perf_counter()
        await call()
        timings.append(time.perf_counter() - start)
    return timings


async def bench(target: str, events: int) -> None:
    storage = await open_storage(target)
    now = utc_now()
    await storage.create_session(SessionRecord("bench", "scope", None, "main", now, now))

    async def one() -> object:
        return await storage.append_event(
            "bench", "text", DATA, run_id="run", agent="main", bundle_version="v1"
        )

    batch = [NewEvent("text", DATA, "run", "main", "v1") for _ in range(10)]

    async def ten() -> object:
        return await storage.append_events("bench", batch)

    await _timed(200, one)  # warm up: thread pool, statement cache, WAL file
    single = await _timed(events, one)
    batched = await _timed(max(events // 10, 1), ten)
    await storage.close()

    print(f"{'operation':<22}{'mean':>10}{'median':>10}{'per event':>12}")
    for name, timings, size in (("append_event", single, 1), ("append_events(10)", batched, 10)):
        mean = statistics.mean(timings)
        print(
            f"{name:<22}{mean * 1e6:>8.0f}us{statistics.median(timings) * 1e6:>8.0f}us"
            f"{mean / size * 1e6:>10.0f}us"
        )
    ratio = statistics.mean(single) / (statistics.mean(batched) / 10)
    print(f"batching ten events makes each {ratio:.1f}x cheaper")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--url", help="database to use (default: a temporary SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        target = args.url or str(Path(directory) / "bench.db")
        anyio.run(bench, target, args.events)


if __name__ == "__main__":
    main()
