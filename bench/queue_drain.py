"""Background turns drained from the durable queue by one and by two `amodal worker`s on
PostgreSQL, and what an idle server's sweeps cost (not a test; nothing asserts on time).

    python -m bench.queue_drain [--turns 1000] [--quick] [--url postgresql://...]

Each run gets a fresh schema: the turns are queued through `Runtime.enqueue` as fast as
one client can (the workers are already waiting), each turn is one model call to the
scripted model (a short reply, no latency), and the run ends when the queue says every
turn is `done`. Printed per run: turns/s, the p50/p99 queue wait (queued to started, from
the queue's own times), and the CPU a turn of the workers and of this process (the
client and the scripted model). Then the ratio of two workers' throughput to one's, and
the ceiling two workers can reach on this machine when the run is CPU-bound:
`2 x workers' CPU a turn with one / (workers' + others' CPU a turn with two)` (bench (c)
states its ceiling the same way; PostgreSQL's own CPU is not counted, so the true
ceiling is lower). Last, an idle `amodal serve` (background work on, nothing queued)
for a while: its CPU over that time as a share of one core (the queue polls and the
resume sweeps; the target is under 1%).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import anyio
import psycopg

from runtime.api import Runtime
from runtime.testing import ScriptedModel
from runtime.testing.server_process import ServeProcess, WorkerProcess

DEFAULT_URL = os.environ.get(
    "AMODAL_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REPO = {
    "amodal.json": '{"name": "queue-bench", "version": "1.0.0"}\n',
    "agents/default/AGENT.md": "You answer in one line.\n",
}
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a live process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Schema:
    def __init__(self, base: str) -> None:
        self.base = base
        self.name = f"amodal_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(base, autocommit=True) as connection:
            connection.execute(f'CREATE SCHEMA "{self.name}"')
        separator = "&" if "?" in base else "?"
        self.url = f"{base}{separator}options={quote(f'-csearch_path={self.name}')}"

    def drop(self) -> None:
        with psycopg.connect(self.base, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')


def write_repo(root: Path) -> Path:
    for relative, text in REPO.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


async def enqueue_all(repo: Path, url: str, turns: int) -> None:
    async with Runtime.open(repo, database=url) as rt:
        for i in range(turns):
            await rt.enqueue(f"job {i}", operator=True)


def queue_done(url: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT count(*) FROM turn_queue WHERE state = 'done'").fetchone()
    return int(row[0]) if row else 0


def queue_waits(url: str) -> list[float]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT extract(epoch FROM started_at - created_at) FROM turn_queue"
        ).fetchall()
    return sorted(float(row[0]) for row in rows if row[0] is not None)


def drain(repo: Path, base: str, env: dict[str, str], workers: int, turns: int) -> dict[str, float]:
    schema = Schema(base)
    try:
        anyio.run(enqueue_all, repo, schema.url, 0)  # migrate before the workers start
        run_env = {**env, "DATABASE_URL": schema.url}
        started = [
            WorkerProcess(repo, run_env, "--no-reload", "--concurrency", "4")
            for _ in range(workers)
        ]
        try:
            for worker in started:
                worker.wait_ready()
            before = {w.process.pid: cpu_seconds(w.process.pid) for w in started}
            mine = time.process_time()
            clock = time.monotonic()
            anyio.run(enqueue_all, repo, schema.url, turns)
            while queue_done(schema.url) < turns:
                time.sleep(0.1)
            wall = time.monotonic() - clock
            worker_cpu = sum(cpu_seconds(pid) - cpu for pid, cpu in before.items())
            other_cpu = time.process_time() - mine
        finally:
            for worker in started:
                worker.stop()
        waits = queue_waits(schema.url)
    finally:
        schema.drop()
    return {
        "turns_s": turns / wall,
        "wall": wall,
        "p50_wait": statistics.median(waits),
        "p99_wait": waits[min(len(waits) - 1, int(len(waits) * 0.99))],
        "worker_ms": worker_cpu / turns * 1000,
        "other_ms": other_cpu / turns * 1000,
    }


def idle_cost(repo: Path, base: str, env: dict[str, str], seconds: float) -> float:
    """An idle `amodal serve`'s CPU over `seconds`, as a share of one core."""
    schema = Schema(base)
    try:
        with ServeProcess(repo, {**env, "DATABASE_URL": schema.url}, "--no-reload") as server:
            server.wait_ready()
            time.sleep(2)  # let start-up work settle
            before = cpu_seconds(server.pid)
            time.sleep(seconds)
            return (cpu_seconds(server.pid) - before) / seconds
    finally:
        schema.drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="100 turns, a 10 s idle window")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument(
        "--url", default=DEFAULT_URL, help="a PostgreSQL database to make schemas in"
    )
    args = parser.parse_args()
    turns, idle = (100, 10.0) if args.quick else (args.turns, args.idle_seconds)
    with ScriptedModel() as model, tempfile.TemporaryDirectory() as directory:
        model.respond(lambda request: "Done.")
        repo = write_repo(Path(directory) / "repo")
        env = {
            "OPENAI_BASE_URL": model.base_url,
            "MODEL_MAIN": "scripted",
            "AMODAL_DATA_DIR": str(Path(directory) / "data"),
        }
        results = {n: drain(repo, args.url, env, n, turns) for n in (1, 2)}
        print(
            f"{turns} queued turns, one model call each, workers of --concurrency 4, on PostgreSQL"
        )
        print(
            f"{'workers':<9}{'turns/s':>9}{'wall s':>8}{'p50 wait':>10}{'p99 wait':>10}"
            f"{'wrk cpu':>9}{'oth cpu':>9}"
        )
        for n, r in results.items():
            print(
                f"{n:<9}{r['turns_s']:>9.1f}{r['wall']:>8.1f}{r['p50_wait']:>9.2f}s{r['p99_wait']:>9.2f}s"
                f"{r['worker_ms']:>7.1f}ms{r['other_ms']:>7.1f}ms"
            )
        one, two = results[1], results[2]
        ceiling = 2 * one["worker_ms"] / (two["worker_ms"] + two["other_ms"])
        cores = len(os.sched_getaffinity(0))
        print(
            f"two workers / one: {two['turns_s'] / one['turns_s']:.2f}x throughput, "
            f"p99 wait {one['p99_wait'] / two['p99_wait']:.2f}x lower; "
            f"ceiling on {cores} cores shared with the client, the model and PostgreSQL: "
            f"{min(ceiling, 2.0):.2f}x (CPU-bound)"
        )
        share = idle_cost(repo, args.url, env, idle)
        print(
            f"idle amodal serve over {idle:g} s (queue polls + resume sweeps): "
            f"{share * 100:.2f}% of a core"
        )


if __name__ == "__main__":
    main()
