"""`GET /usage` over a million recorded model calls on PostgreSQL (SPEC 22: under 200 ms).

Generates the rows in the database itself (`generate_series`: 2,000 owners in 20 scopes,
100,000 sessions of two turns of five calls over 90 days, each session a lead and one
specialist of 50 agents on two of 8 models; then the daily sums that recording keeps as it
goes, built at once), then times `GET /usage` through
the real app (httpx over ASGI, the operator's and an end user's credential) for the
queries a person asks: the total, by agent, by model, by day over 30 days, by owner, the
costliest sessions, and an end user's own month. Each query runs a few times; the table
shows the median and the slowest.

    python -m bench.usage_query                  # 1,000,000 rows, 7 runs a query
    python -m bench.usage_query --quick          # 200,000 rows, 3 runs
    python -m bench.usage_query --rows 2000000 --url postgresql://...  --json

The database: `--url`, else AMODAL_TEST_DATABASE_URL, else postgresql://postgres@127.0.0.1
:5432/test. Everything is written into a new schema, dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import psycopg

from runtime.api import Runtime
from runtime.server import Authenticator, create_app

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
TARGET_MS = 200.0
OPERATOR = "operator-token-0123456789abcdef"
ALICE = "key-alice-0123456789abcdef"

GENERATE = """
INSERT INTO usage_records (session_id, turn_id, run_id, agent, model, owner, scope_id, at,
                           day, input_tokens, output_tokens, cached_tokens, cost_usd, estimated,
                           turn_first, agent_first, model_first)
SELECT 's' || (i / 10), 't' || (i / 5), 'r' || (i / 2),
       'agent' || ((i / 10 + (i %% 10 / 7)) %% 50), 'model' || ((i / 10) %% 4 + 4 * (i %% 10 / 7)),
       'user' || ((i / 10) %% 2000), 'scope' || ((i / 10) %% 20), at,
       to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), 500 + i %% 3000, 50 + i %% 400,
       i %% 200, (500 + i %% 3000) * 0.000002 + (50 + i %% 400) * 0.000008, false,
       (i %% 5 = 0)::int, (i %% 5 = 0)::int, (i %% 5 = 0)::int
FROM (SELECT i, %(start)s::timestamptz + (i * %(step)s) * interval '1 second' AS at
      FROM generate_series(0, %(count)s - 1) AS i) AS generated
"""
SUMMARISE = """
INSERT INTO usage_days (day, agent, model, owner_key, owner, scope_id, input_tokens,
                        output_tokens, cached_tokens, cost_usd, calls, turn_first, agent_first,
                        model_first)
SELECT day, agent, model, 'u:' || owner, owner, scope_id, SUM(input_tokens), SUM(output_tokens),
       SUM(cached_tokens), SUM(cost_usd), COUNT(*), SUM(turn_first), SUM(agent_first),
       SUM(model_first)
FROM usage_records GROUP BY day, agent, model, owner, scope_id;
INSERT INTO usage_owner_days (owner_key, day, tokens, cost_usd)
SELECT 'u:' || owner, day, SUM(input_tokens + output_tokens), SUM(cost_usd)
FROM usage_records GROUP BY owner, day
"""
"""What recording each call keeps up to date as it goes, built at once for the generated rows."""


def repo(root: Path) -> Path:
    files = {
        "amodal.json": {
            "name": "usage-bench",
            "version": "1",
            "auth": {
                "apiKeys": [
                    # user7 of scope7 (7 % 20): one of the owners the rows spread over
                    {"key": "env:BENCH_ALICE", "claims": {"sub": "user7", "scope": "scope7"}}
                ]
            },
        },
        "agents/default/AGENT.md": "You answer.\n",
    }
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return root


def queries(now: datetime) -> dict[str, tuple[str, str]]:
    month = (now - timedelta(days=30)).isoformat().replace("+00:00", "Z")
    return {
        "total (all time)": (OPERATOR, ""),
        "by agent (all time)": (OPERATOR, "?group_by=agent"),
        "by model (all time)": (OPERATOR, "?group_by=model"),
        "by day (30 days)": (OPERATOR, f"?group_by=day&since={month}"),
        "by owner (30 days)": (OPERATOR, f"?group_by=owner&since={month}"),
        "by session (30 days)": (OPERATOR, f"?group_by=session&since={month}&limit=10"),
        "an end user's month by agent": (ALICE, f"?group_by=agent&since={month}"),
    }


async def measure(url: str, rows: int, runs: int) -> dict[str, Any]:
    os.environ["AMODAL_OPERATOR_TOKEN"] = OPERATOR
    os.environ["BENCH_ALICE"] = ALICE
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as folder:
        async with Runtime.open(repo(Path(folder) / "repo"), database=url) as runtime:
            started = time.perf_counter()
            with psycopg.connect(url, autocommit=True) as connection:
                span = 90 * 86400
                connection.execute(
                    GENERATE,
                    {"start": now - timedelta(seconds=span), "step": span / rows, "count": rows},
                )
                for statement in SUMMARISE.split(";"):
                    connection.execute(statement)
                connection.execute("ANALYZE")
            generated = time.perf_counter() - started
            app = create_app(runtime, Authenticator(runtime.bundle.config.auth, os.environ))
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
                results = {}
                for name, (token, query) in queries(now).items():
                    times = []
                    body: dict[str, Any] = {}
                    for _ in range(runs):
                        clock = time.perf_counter()
                        response = await client.get(
                            f"/usage{query}", headers={"Authorization": f"Bearer {token}"}
                        )
                        times.append((time.perf_counter() - clock) * 1000)
                        response.raise_for_status()
                        body = response.json()
                    results[name] = {
                        "median_ms": statistics.median(times),
                        "max_ms": max(times),
                        "rows": len(body["rows"]),
                        "calls_counted": body["total"]["model_calls"],
                    }
    return {
        "rows": rows,
        "generate_seconds": generated,
        "queries": results,
        "target_ms": TARGET_MS,
        "load_average": os.getloadavg()[0],
    }


def schema_url(base: str) -> tuple[str, str]:
    name = f"amodal_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{name}"')
    separator = "&" if "?" in base else "?"
    return name, f"{base}{separator}options={quote(f'-csearch_path={name}')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.usage_query")
    parser.add_argument("--url", default=os.environ.get("AMODAL_TEST_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="200,000 rows, 3 runs")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    rows, runs = (200_000, 3) if args.quick else (args.rows, args.runs)
    name, url = schema_url(args.url)
    try:
        result = anyio.run(measure, url, rows, runs)
    finally:
        with psycopg.connect(args.url, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"GET /usage over {rows:,} recorded calls (generated in {result['generate_seconds']:.1f} s)"
    )
    print(f"{'query':<32}{'median ms':>11}{'max ms':>9}{'rows':>7}{'calls':>10}")
    for query, row in result["queries"].items():
        print(
            f"{query:<32}{row['median_ms']:>11.1f}{row['max_ms']:>9.1f}"
            f"{row['rows']:>7}{row['calls_counted']:>10,}"
        )
    slowest = max(row["median_ms"] for row in result["queries"].values())
    verdict = "within" if slowest < TARGET_MS else "above"
    print(f"slowest median {slowest:.1f} ms: {verdict} the {TARGET_MS:.0f} ms target")
    print(f"load average {result['load_average']:.2f} (a shared machine: figures are noisy)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
