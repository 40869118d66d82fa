"""Errors over HTTP: always `{"error": {"code", "message"}}` with the status that says why."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from runtime.exceptions import RequestError


class ApiError(Exception):
    """A refusal a route raises; its status and code are the response's."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    @classmethod
    def of(cls, error: RequestError) -> ApiError:
        """The HTTP answer to a refusal of the runtime (404 unknown agent, 409 busy, ...)."""
        return cls(error.status, error.code, str(error))


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


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
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
        return error_response(error.status_code, code, str(error.detail))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(_problem(e) for e in error.errors())
        return error_response(422, "invalid_request", problems)


def _problem(error: Any) -> str:
    if error["type"] == "json_invalid":  # its loc is ("body", character offset)
        reason = error.get("ctx", {}).get("error", "invalid JSON")
        return f"body: not valid JSON at character {error['loc'][-1]}: {reason}"
    where = ".".join(str(part) for part in error["loc"] if part != "body") or "body"
    return f"{where}: {error['msg']}"
