"""Every client can talk to it (SPEC 24): the protocol faces of `amodal serve`.

One module per protocol, each built on `runtime.api.Runtime` and the caller's verified
credentials only, so none grants more than `/chat`:

- `openai_chat`: OpenAI Chat Completions (`GET /v1/models`, `POST /v1/chat/completions`);
- `responses`: Open Responses (`POST /v1/responses`, `GET /v1/responses/{id}`);
- `mcp_server`: an MCP server, one tool per agent (`/mcp`, and `amodal mcp` over stdio);
- `a2a`: A2A 1.0 (agent cards, JSON-RPC at `/a2a/{agent}`), on the `a2a-sdk` package;
- `ag_ui`: AG-UI (`POST /ag-ui/{agent}`), on the `ag-ui-protocol` package's types.

The functions here give each face's routes to `create_app`. A face whose protocol
package is an extra that is not installed answers at its paths with a 404 that says
which extra to install. `refusal_for(path)` is the error shape of the face serving a
path, for refusals made before any route runs (the request guard).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import Response

from runtime.api import Runtime
from runtime.server.auth import Authenticator
from runtime.server.errors import error_response
from runtime.server.faces._common import Refusal


def openai_chat_routes(runtime: Runtime, auth: Authenticator) -> APIRouter:
    from runtime.server.faces import openai_chat as face

    return face.router(runtime, auth)


def responses_routes(runtime: Runtime, auth: Authenticator) -> APIRouter:
    from runtime.server.faces import responses as face

    return face.router(runtime, auth)


def mcp_routes(runtime: Runtime, auth: Authenticator) -> APIRouter:
    if not _installed("mcp"):
        return _missing("/mcp", "mcp", "MCP")
    from runtime.server.faces import mcp_server as face

    return face.router(runtime, auth)


def a2a_routes(runtime: Runtime, auth: Authenticator) -> APIRouter:
    if not _installed("a2a"):
        return _missing("/a2a/{rest:path}", "a2a", "A2A")
    from runtime.server.faces import a2a as face

    return face.router(runtime, auth)


def ag_ui_routes(runtime: Runtime, auth: Authenticator) -> APIRouter:
    if not _installed("ag_ui"):
        return _missing("/ag-ui/{rest:path}", "ag-ui", "AG-UI")
    import runtime.server.faces.ag_ui as face

    return face.router(runtime, auth)


_SHAPES: tuple[tuple[str, str, str], ...] = (
    ("/v1/", "openai_chat", "openai_error"),
    ("/a2a/", "a2a", "jsonrpc_error"),
    ("/.well-known/agent-card.json", "a2a", "jsonrpc_error"),
    ("/ag-ui/", "ag_ui", "run_error"),
    ("/mcp", "mcp_server", "jsonrpc_error"),
)
_PACKAGES = {"a2a": "a2a", "ag_ui": "ag_ui", "mcp_server": "mcp"}


def refusal_for(path: str) -> Refusal | None:
    """The error answer of the face serving `path`, or None for the amodal API's own."""
    for prefix, module, function in _SHAPES:
        if path.startswith(prefix):
            package = _PACKAGES.get(module)
            if package is not None and not _installed(package):
                return None
            face = importlib.import_module(f"runtime.server.faces.{module}")
            refuse: Refusal = getattr(face, function)
            return refuse
    return None


def mcp_available() -> bool:
    """True when the `mcp` package (the `mcp` extra) is installed."""
    return _installed("mcp")


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def _missing(path: str, extra: str, protocol: str) -> APIRouter:
    """Routes that say how to get a face whose package is not installed."""
    routes = APIRouter(include_in_schema=False)
    hint = f"the {protocol} face needs the `{extra}` extra: pip install 'amodal-runtime[{extra}]'"

    def answer(request: Request) -> Response:
        return error_response(404, "face_not_installed", hint)

    endpoint: Callable[[Request], Response] = answer
    routes.add_api_route(path, endpoint, methods=["GET", "POST", "DELETE"])
    return routes


__all__ = [
    "a2a_routes",
    "ag_ui_routes",
    "mcp_available",
    "mcp_routes",
    "openai_chat_routes",
    "refusal_for",
    "responses_routes",
]
