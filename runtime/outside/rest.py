"""REST connections: calls to an API on behalf of an agent, within fixed rules (SPEC 9.2).

Every call is checked before a byte is sent:

- the origin lock: only the origin of the connection's `baseUrl` is reachable. A
  path must be relative (`/items/7`); absolute URLs, `..` and `.` segments, `@`,
  `\\`, `?`, `#`, control characters and encoded slashes or dots are refused,
  and a redirect is followed only within the same origin (at most 5);
- the access rules of access.json (or GET and HEAD everywhere when there is
  none), and the call's `intent` (a `read` is a GET or a HEAD);
- `contextInjection`: values from the caller's verified claims, never from the
  request context or the model; a caller without the claim is refused.

Auth and injected values are added here and go on the wire only: results and
error messages are scrubbed of them (`runtime.outside.secrets`), and nothing here logs
a header or a query value. Responses are shaped for the model: the status, a
few headers, and the body (JSON when the response is JSON), cut at
`maxResponseBytes`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import anyio

from runtime.exceptions import ToolError
from runtime.outside.secrets import scrub, scrub_text, scrubbed
from runtime.repo.bundle import ConnectionDefinition, Endpoint

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("amodal")

READ_METHODS = frozenset({"GET", "HEAD"})
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
MAX_REDIRECTS = 5
SHOWN_HEADERS = ("content-type", "etag", "location", "link", "retry-after")
USER_AGENT = "amodal-runtime"


class Refused(Exception):
    """A call that breaks a rule: refused before anything was sent; the message says why."""


def path_problem(path: str) -> str | None:
    """Why `path` could reach past the connection's origin or base path, or None."""
    if not isinstance(path, str) or not path.startswith("/") or path.startswith("//"):
        return "the path must start with a single '/': it is relative to the connection's base URL"
    if "://" in path:
        return "absolute URLs are refused: give a path relative to the connection's base URL"
    if any(ord(char) < 32 or ord(char) == 127 for char in path):
        return "control characters are refused in a path"
    for char, why in (("@", "'@'"), ("\\", "'\\'"), ("?", "'?' (put parameters in `query`)"),
                      ("#", "'#'")):  # fmt: skip
        if char in path:
            return f"{why} is refused in a path"
    once = unquote(path)
    if "/" in unquote(path.replace("/", "")) or "\\" in once:
        return "encoded slashes are refused in a path"
    if any(ord(char) < 32 or ord(char) == 127 for char in once):
        return "encoded control characters are refused in a path"
    for segment in path.split("/"):
        decoded = unquote(unquote(segment))
        if decoded in (".", ".."):
            return "'.' and '..' segments are refused in a path (encoded or not)"
        if "/" in decoded or "\\" in decoded:
            return "encoded slashes are refused in a path"
    return None


def _segments(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def _matches(pattern: tuple[str, ...], segments: list[str]) -> bool:
    for index, part in enumerate(pattern):
        if part == "**":
            return True
        if index >= len(segments):
            return False
        if part == "*" or (part.startswith("{") and part.endswith("}")):
            continue
        if part != segments[index]:
            return False
    return len(pattern) == len(segments)


def endpoint_for(connection: ConnectionDefinition, method: str, path: str) -> Endpoint | None:
    """The first access.json rule that matches the call, or None."""
    segments = _segments(path)
    return next(
        (e for e in connection.endpoints if e.method == method and _matches(e.segments, segments)),
        None,
    )


def access_problem(connection: ConnectionDefinition, method: str, path: str) -> str | None:
    """Why the access rules refuse this call, listing what is allowed; or None."""
    if endpoint_for(connection, method, path) is not None:
        return None
    if connection.default_access == "allow-read" and method in READ_METHODS:
        return None
    return (
        f"{method} {path} is not allowed on connection {connection.name!r}; allowed: "
        + "; ".join(allowed_calls(connection))
    )


def allowed_calls(connection: ConnectionDefinition) -> list[str]:
    """What the access rules allow, one line each (for refusals and the prompt)."""
    lines = [
        f"{e.method} {e.path}" + (" (needs a person's approval)" if e.confirm else "")
        for e in connection.endpoints
    ]
    if connection.default_access == "allow-read":
        lines.append("GET and HEAD on any path")
    return lines or ["nothing"]


def needs_confirmation(connection: ConnectionDefinition, method: str, path: str) -> bool:
    endpoint = endpoint_for(connection, method, path)
    return endpoint is not None and endpoint.confirm


class Connections:
    """The HTTP client REST connections share in one runtime; close it with `aclose`."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            # No environment: proxies and .netrc credentials never join a connection's calls.
            self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def call(
        self,
        connection: ConnectionDefinition,
        method: str,
        path: str,
        *,
        claims: Mapping[str, str] | None,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> dict[str, Any]:
        """One call: `{"status", "headers", "body"}` (and `"truncated": true` when cut).
        Raises `Refused` (nothing was sent), `ToolError` (the API could not be reached)
        or `TimeoutError`. `claims` are the caller's; None only for a call no caller makes
        (`amodal validate --online`), which sends no injected values."""
        headers, params, secrets = self._prepare(connection, method, path, claims, query, body)
        started = time.monotonic()
        try:
            with anyio.fail_after(connection.timeout):
                result = await self._send(connection, method, path, headers, params, body)
        except TimeoutError:
            raise TimeoutError(
                f"connection {connection.name!r}: the API did not answer within "
                f"{connection.timeout:g} s"
            ) from None
        except (Refused, ToolError):
            raise
        except Exception as error:  # httpx's transport errors: the model reads what failed
            text = f"connection {connection.name!r}: {type(error).__name__}: {error}"
            raise ToolError(scrub_text(text, secrets).rstrip(": ")) from None
        logger.debug(
            "connection_call",
            extra={"event": "connection_call", "connection": connection.name, "method": method,
                   "path": path, "status": result["status"],
                   "duration_ms": round((time.monotonic() - started) * 1000)},
        )  # fmt: skip
        return scrub(result, secrets)  # type: ignore[no-any-return]

    def _prepare(
        self,
        connection: ConnectionDefinition,
        method: str,
        path: str,
        claims: Mapping[str, str] | None,
        query: Mapping[str, Any] | None,
        body: Any,
    ) -> tuple[dict[str, str], dict[str, Any], tuple[str, ...]]:
        problem = path_problem(path) or access_problem(connection, method, path)
        if problem is not None:
            raise Refused(problem)
        if body is not None and method in READ_METHODS:
            raise Refused(f"a {method} has no body")
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json, */*;q=0.5"}
        headers.update(connection.auth_headers)
        params: dict[str, Any] = dict(query or {})
        fixed = set(connection.auth_query) | {
            i.name for i in connection.injections if i.in_ == "query"
        }
        taken = sorted(fixed & set(params))
        if taken:
            raise Refused(f"query parameter {taken[0]!r} is set by the connection, not the caller")
        params.update(connection.auth_query)
        injected = []
        for injection in connection.injections if claims is not None else ():
            value = claims.get(injection.claim) if claims is not None else None
            if value is None:
                raise Refused(
                    f"connection {connection.name!r} needs the caller's claim "
                    f"{injection.claim!r}, and this caller has none"
                )
            injected.append(value)
            if injection.in_ == "header":
                headers[injection.name] = value
            else:
                params[injection.name] = value
        return headers, params, scrubbed((*connection.secrets, *injected))

    async def _send(
        self,
        connection: ConnectionDefinition,
        method: str,
        path: str,
        headers: dict[str, str],
        params: dict[str, Any],
        body: Any,
    ) -> dict[str, Any]:
        http = self._http()
        url = connection.base_url + path
        origin = _origin(connection.base_url)
        if _origin(url) != origin:  # the checks above make this impossible; keep it so
            raise Refused("the path leaves the connection's origin")
        request = http.build_request(
            method, url, headers=headers, params=params or None,
            json=body if body is not None else None,
        )  # fmt: skip
        for _hop in range(MAX_REDIRECTS + 1):
            response = await http.send(request, stream=True)
            try:
                following = response.next_request if response.is_redirect else None
                if following is None:
                    return await _shaped(response, method, connection.max_response_bytes)
                if _origin(str(following.url)) != origin:
                    return {
                        "status": response.status_code,
                        "headers": _shown(response),
                        "body": None,
                        "error": "a redirect to another origin was not followed",
                    }
            finally:
                await response.aclose()
            request = following
        raise ToolError(
            f"connection {connection.name!r}: more than {MAX_REDIRECTS} redirects; stopped"
        )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, (parts.hostname or "").lower(), port


def _shown(response: httpx.Response) -> dict[str, str]:
    return {name: response.headers[name] for name in SHOWN_HEADERS if name in response.headers}


async def _shaped(response: httpx.Response, method: str, limit: int) -> dict[str, Any]:
    data = bytearray()
    truncated = False
    if method != "HEAD":
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > limit:
                del data[limit:]
                truncated = True
                break
    text = data.decode(response.encoding or "utf-8", errors="replace")
    body: Any = text
    if not truncated and "json" in response.headers.get("content-type", "").lower() and text:
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            body = text
    result: dict[str, Any] = {
        "status": response.status_code,
        "headers": _shown(response),
        "body": body,
    }
    if truncated:
        result["truncated"] = True
    return result


__all__ = [
    "HTTP_METHODS",
    "READ_METHODS",
    "Connections",
    "Refused",
    "access_problem",
    "allowed_calls",
    "endpoint_for",
    "needs_confirmation",
    "path_problem",
]
