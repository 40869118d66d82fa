"""The HTTP API (SPEC 14): chats streamed as SSE, sessions, agents, surfaces, stores, health,
and the protocol faces (SPEC 24).

A thin layer over `Runtime`, one router per resource: `chat_routes`, `session_routes`,
`agent_routes`, `store_routes`, `memory_routes` and `admin_routes`; their routes get the
runtime and the verified caller from `dependencies`, their bodies are `inputs`. The faces
(`faces/`) add a router each. In front of them all, the request guard bounds and checks
every request; behind them, `errors` gives every refusal as `{"error": {"code",
"message"}}`; `openapi` makes the document say what they answer.
"""

from __future__ import annotations

from fastapi import FastAPI

from runtime._version import __version__
from runtime.api import Runtime
from runtime.automations import Automations
from runtime.server import (
    admin_routes,
    agent_routes,
    automation_routes,
    chat_routes,
    faces,
    memory_routes,
    session_routes,
    store_routes,
    usage_routes,
)
from runtime.server.auth import Authenticator
from runtime.server.console import add_console
from runtime.server.dependencies import Served, serve
from runtime.server.errors import TextJSONResponse, install_error_handlers
from runtime.server.guard import RequestGuard
from runtime.server.openapi import install_openapi

# In this order in the OpenAPI document.
ROUTERS = (
    chat_routes.router,
    session_routes.router,
    agent_routes.router,
    admin_routes.router,
    store_routes.router,
    automation_routes.router,
    memory_routes.router,
    usage_routes.router,
)
# The protocol faces (SPEC 24), each its own router over the runtime and the credentials.
FACES = (
    faces.openai_chat_routes,
    faces.responses_routes,
    faces.mcp_routes,
    faces.a2a_routes,
    faces.ag_ui_routes,
)


def create_app(
    runtime: Runtime, auth: Authenticator, automations: Automations | None = None
) -> FastAPI:
    """The ASGI app serving `runtime` to the callers `auth` verifies; `/automations` serves
    `automations` (503 without)."""
    live = runtime.live
    app = FastAPI(title="amodal", version=__version__, default_response_class=TextJSONResponse)
    app.add_middleware(RequestGuard, limit=lambda: live().config.limits.max_request_bytes)
    install_error_handlers(app)
    install_openapi(app, live, auth.configured)
    metrics = admin_routes.count(runtime)
    if automations is not None:
        automations.on_run_ended = metrics.automation_run_ended
    serve(app, Served(runtime, auth, metrics, automations))
    for router in ROUTERS:
        app.include_router(router)
    for face in FACES:
        app.include_router(face(runtime, auth))
    add_console(app, auth)
    return app


__all__ = ["create_app"]
