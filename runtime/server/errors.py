"""Errors over HTTP: always `{"error": {"code", "message"}}` with the status that says why."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from runtime.exceptions import AmodalError, RequestError

T = TypeVar("T")


class ApiError(Exception):
    """A refusal a route raises; its status and code are the response's."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    @classmethod
    def of(cls, error: RequestError) -> ApiError:
        """The HTTP answer to a refusal of the runtime (404 unknown agent, 409 busy, ...)."""
        return cls(error.status, error.code, str(error))


class TextJSONResponse(JSONResponse):
    """JSON that always encodes: a string that is no text (an unpaired surrogate, say from a
    model's output or echoed from a request) is sent as a `\\u` escape instead of failing."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()


async def runtime_call(call: Awaitable[T]) -> T:
    """Await a call of the runtime; a refusal becomes its HTTP answer, any other error a 500."""
    try:
        return await call
    except RequestError:
        raise
    except AmodalError as error:
        raise ApiError(500, "runtime_error", str(error)) from error


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return TextJSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, error: ApiError) -> JSONResponse:
        return error_response(error.status, error.code, error.message)

    @app.exception_handler(RequestError)
    async def _refused(request: Request, error: RequestError) -> JSONResponse:
        return error_response(error.status, error.code, str(error))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        # Routing's own refusals (no such route, wrong method) in the same error shape.
        if error.status_code == 405:
            allowed = ", ".join(allowed_methods(request))
            message = f"{request.method} is not allowed here; allowed: {allowed}"
            return error_response(405, "method_not_allowed", message, {"Allow": allowed})
        code = {404: "not_found"}.get(error.status_code, "http_error")
        return error_response(error.status_code, code, str(error.detail), error.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(_problem(e) for e in error.errors())
        return error_response(422, "invalid_request", problems)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (the `Allow` header of a 405).

    Starlette answers 405 from the first route whose path matches, so its own header
    would list that route's methods only; FastAPI has one route per method. The routes of
    included routers are reached through FastAPI's `iter_route_contexts` (`router.routes`
    holds the routers, not their routes).
    """
    methods: set[str] = set()
    for route in iter_route_contexts(request.app.router.routes):
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match != Match.NONE:
            methods.update(route.methods or ())
    return sorted(methods)


def _problem(error: Any) -> str:
    if error["type"] == "json_invalid":  # its loc is ("body", character offset)
        reason = error.get("ctx", {}).get("error", "invalid JSON")
        return f"body: not valid JSON at character {error['loc'][-1]}: {reason}"
    where = ".".join(str(part) for part in error["loc"] if part != "body") or "body"
    return f"{where}: {error['msg']}"
