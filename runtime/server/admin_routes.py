"""The server itself (SPEC 14, 16; docs/http-api.md, docs/observability.md):

- `POST /admin/reload`: reload the repo now; operators only;
- `GET /health`: the bundle in use, the last reload's error, each MCP server's state and
  which process answered; no credential needed (a load balancer asks it);
- `GET /metrics`: what this server has done, in Prometheus' text format; operators only.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse, Response

from runtime.api import Runtime
from runtime.observe.metrics import Metrics
from runtime.server.dependencies import MetricsDep, RuntimeDep, operator
from runtime.server.openapi import answers

router = APIRouter()


@router.post(
    "/admin/reload", dependencies=[Depends(operator("reload the repo"))], responses=answers(403)
)
async def reload(runtime: RuntimeDep) -> dict[str, Any]:
    """Reload the repo now (e.g. after `git pull` without a file watcher); operators only."""
    ok = await runtime.reload()
    live = runtime.live
    return {"reloaded": ok, "bundle_version": live().version, "reload_error": live.reload_error}


@router.get("/health")
async def health(runtime: RuntimeDep) -> dict[str, Any]:
    live = runtime.live
    servers = runtime.mcp.snapshot().servers
    return {
        "status": "ok",
        "bundle_version": live().version,
        "reload_error": live.reload_error,
        "mcp": {name: state.as_json() for name, state in servers.items()},
        "process": os.getpid(),  # which server process answered (`--workers N`)
    }


@router.get(
    "/metrics",
    dependencies=[Depends(operator("read /metrics"))],
    response_class=PlainTextResponse,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **answers(403),
    },
)
async def prometheus(metrics: MetricsDep) -> Response:
    """What this server has done, in Prometheus' text format; operators only."""
    return Response(metrics.render(), media_type=metrics.content_type)


def count(runtime: Runtime) -> Metrics:
    """The metrics of what `runtime` does from now on, for `GET /metrics`."""
    metrics = Metrics()
    metrics.count_reload_failures(lambda: runtime.live.failed_reloads)
    metrics.count_mcp_servers(lambda: runtime.mcp.snapshot())
    runtime.add_observer(metrics)
    return metrics


__all__ = ["count", "router"]
