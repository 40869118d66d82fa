"""REST connections: calls to an API on behalf of an agent, within fixed rules (SPEC 9.2).

Every call is checked before a byte is sent:

- the path is normalised once (`normalise_path`): escapes of unreserved characters
  decoded (`/%61dmin` is `/admin`), everything else in one canonical spelling. The
  rules are matched against that form and exactly that form is sent, so a server
  cannot read a path the rules did not see;
- the origin lock: only the origin of the connection's `baseUrl` is reachable. A
  path must be relative (`/items/7`); absolute URLs, `..` and `.` segments, `@`,
  `\\`, `?`, `#`, `;`, control characters and encoded slashes or dots are refused;
- the access rules of access.json (or GET and HEAD everywhere when there is
  none; a HEAD follows the GET rules), and the call's `intent` (a `read` is a GET
  or a HEAD);
- `contextInjection`: values from the caller's verified claims, never from the
  request context or the model; a caller without the claim is refused.

A redirect is one more call: it is followed (at most 5) only when every rule above
allows it as a first call (the same origin, under the base path, an allowed
method and path that needs no approval); otherwise the result carries the
redirect's status and location and says why it was not followed.

Auth and injected values are added here and go on the wire only: results and
error messages are scrubbed of them in every form they take on the wire
(`runtime.outside.secrets`), and nothing here logs a header or a query value.
Responses are shaped for the model: the status, a few headers, and the body (JSON
when the response is JSON), scrubbed, then cut at `maxResponseBytes`.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import string
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

import anyio

from runtime.exceptions import ToolError
from runtime.outside.secrets import longest, scrub, scrub_text, scrubbed, scrubbed_prefix
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


_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
# What a path may hold raw besides unreserved characters: RFC 3986's sub-delimiters and
# ':' ('@' and ';' are refused before this applies). Anything else is percent-encoded.
_RAW_IN_PATH = _UNRESERVED | frozenset("!$&'()*+,=:/")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_REFUSED_IN_PATH = (
    ("@", "'@'"),
    ("\\", "'\\'"),
    ("?", "'?' (put parameters in `query`)"),
    ("#", "'#'"),
    (";", "';' (path parameters, which some servers drop)"),
)


def normalise_path(path: object) -> str:
    """`path` in the one form access rules are matched against and the call is sent with;
    `Refused` when it could reach past the connection's origin or base path.

    Every server decodes a percent-escape of an unreserved character (`/%61dmin` is
    `/admin`), so those are decoded here, once; other escapes keep their meaning and
    get upper-case hex; characters a path cannot hold raw (a space, non-ASCII) are
    percent-encoded as UTF-8, as the HTTP client would send them. What is sent is
    exactly what was matched."""
    problem = _shape_problem(path)
    if problem is not None:
        raise Refused(problem)
    assert isinstance(path, str)
    normal = []
    index = 0
    while index < len(path):
        char = path[index]
        if char == "%":
            escape = _ESCAPE.match(path, index)
            if escape is None:
                raise Refused("a '%' in a path must begin a percent-escape such as %20")
            byte = int(escape.group(1), 16)
            if chr(byte) in "/\\":
                raise Refused("encoded slashes are refused in a path")
            if byte < 32 or byte == 127:
                raise Refused("encoded control characters are refused in a path")
            normal.append(chr(byte) if chr(byte) in _UNRESERVED else f"%{byte:02X}")
            index += 3
            continue
        normal.append(char if char in _RAW_IN_PATH else quote(char, safe=""))
        index += 1
    text = "".join(normal)
    for segment in text.split("/"):
        twice = unquote(unquote(segment))  # what a server that decodes twice would see
        if segment in (".", "..") or twice in (".", ".."):
            raise Refused("'.' and '..' segments are refused in a path (encoded or not)")
        if "/" in twice or "\\" in twice:
            raise Refused("encoded slashes are refused in a path")
    return text


def _shape_problem(path: object) -> str | None:
    if not isinstance(path, str) or not path.startswith("/") or path.startswith("//"):
        return "the path must start with a single '/': it is relative to the connection's base URL"
    if "://" in path:
        return "absolute URLs are refused: give a path relative to the connection's base URL"
    if any(ord(char) < 32 or ord(char) == 127 for char in path):
        return "control characters are refused in a path"
    for char, why in _REFUSED_IN_PATH:
        if char in path:
            return f"{why} is refused in a path"
    return None


def path_problem(path: object) -> str | None:
    """Why `path` could reach past the connection's origin or base path, or None."""
    try:
        normalise_path(path)
    except Refused as refusal:
        return str(refusal)
    return None


def _segments(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


@functools.lru_cache(maxsize=1024)
def _literal(part: str) -> str | None:
    """A rule's literal segment in normal form (None: no normal path has it)."""
    try:
        return normalise_path("/" + part).removeprefix("/")
    except Refused:
        return None


def _matches(pattern: tuple[str, ...], segments: list[str]) -> bool:
    for index, part in enumerate(pattern):
        if part == "**":
            return True
        if index >= len(segments):
            return False
        if part == "*" or (part.startswith("{") and part.endswith("}")):
            continue
        if _literal(part) != segments[index]:
            return False
    return len(pattern) == len(segments)


def endpoint_for(connection: ConnectionDefinition, method: str, path: str) -> Endpoint | None:
    """The first access.json rule that matches the call, or None. `path` is in normal form
    (`normalise_path`); a HEAD follows the rules written for GET as well as its own."""
    methods = {method, "GET"} if method == "HEAD" else {method}
    segments = _segments(path)
    return next(
        (e for e in connection.endpoints if e.method in methods and _matches(e.segments, segments)),
        None,
    )


def access_problem(connection: ConnectionDefinition, method: str, path: str) -> str | None:
    """Why the access rules refuse this call (`path` in normal form), listing what is
    allowed; or None."""
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
    """True when this call waits for a person. `path` is as the caller wrote it; one that
    is refused needs no approval (it fails at once)."""
    try:
        endpoint = endpoint_for(connection, method, normalise_path(path))
    except Refused:
        return False
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
        path = normalise_path(path)
        headers, params, secrets = self._prepare(connection, method, path, claims, query, body)
        started = time.monotonic()
        try:
            with anyio.fail_after(connection.timeout):
                result = await self._send(
                    _Call(connection, method, path, headers, params, body, secrets)
                )
        except TimeoutError:
            raise TimeoutError(
                f"connection {connection.name!r}: the API did not answer within "
                f"{connection.timeout:g} s"
            ) from None
        except (Refused, ToolError):
            raise
        except Exception as error:  # httpx's transport errors: the model reads what failed
            text = scrub_text(f"connection {connection.name!r}: {type(error).__name__}: {error}",
                              secrets)  # fmt: skip
            raise ToolError(text.rstrip(": ")) from None
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
        problem = access_problem(connection, method, path)
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

    async def _send(self, call: _Call) -> dict[str, Any]:
        http = self._http()
        connection = call.connection
        url = connection.base_url + call.path
        if _origin(url) != _origin(connection.base_url):  # impossible after the checks; kept
            raise Refused("the path leaves the connection's origin")
        request = http.build_request(
            call.method, url, headers=call.headers, params=call.params or None,
            json=call.body if call.body is not None else None,
        )  # fmt: skip
        for _hop in range(MAX_REDIRECTS + 1):
            response = await http.send(request, stream=True)
            try:
                if not response.is_redirect or response.next_request is None:
                    return await _shaped(response, request.method, call)
                following, refusal = _next_hop(connection, response.next_request)
                if following is None:
                    return {
                        "status": response.status_code,
                        "headers": _shown(response),
                        "body": None,
                        "error": refusal,
                    }
            finally:
                await response.aclose()
            request = following
        raise ToolError(
            f"connection {connection.name!r}: more than {MAX_REDIRECTS} redirects; stopped"
        )


@dataclass(frozen=True, slots=True)
class _Call:
    """One checked call, as it goes on the wire (`path` in normal form)."""

    connection: ConnectionDefinition
    method: str
    path: str
    headers: dict[str, str] = field(repr=False)
    params: dict[str, Any] = field(repr=False)
    body: Any = field(repr=False)
    secrets: tuple[str, ...] = field(repr=False)


def _next_hop(
    connection: ConnectionDefinition, following: httpx.Request
) -> tuple[httpx.Request | None, str]:
    """The redirect's request when every rule of a first call allows it (the origin, the
    base path, the path's shape, access.json, no approval needed); else None and why
    it was not followed, naming where it pointed."""
    if _origin(str(following.url)) != _origin(connection.base_url):
        return None, "a redirect to another origin was not followed"
    raw_path, _, query = following.url.raw_path.decode("ascii").partition("?")
    base = urlsplit(connection.base_url).path
    if raw_path != base and not raw_path.startswith(base + "/"):
        return None, f"a redirect to {raw_path} (outside the base path {base}) was not followed"
    rest = raw_path[len(base) :] or "/"
    method = following.method
    try:
        path = normalise_path(rest)
        problem = access_problem(connection, method, path)
    except Refused as refusal:
        problem = str(refusal)
    if problem is None and (endpoint := endpoint_for(connection, method, path)) is not None:
        problem = "it needs a person's approval" if endpoint.confirm else None
    if problem is not None:
        return None, f"a redirect to {method} {rest} was not followed: {problem}"
    target = (base + path + (f"?{query}" if query else "")).encode("ascii")
    following.url = following.url.copy_with(raw_path=target)
    return following, ""


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, (parts.hostname or "").lower(), port


def _shown(response: httpx.Response) -> dict[str, str]:
    return {name: response.headers[name] for name in SHOWN_HEADERS if name in response.headers}


async def _shaped(response: httpx.Response, method: str, call: _Call) -> dict[str, Any]:
    """The response for the model. A body over `maxResponseBytes` is cut, scrubbed first:
    enough past the cut is read to see any secret that runs across it, and it is dropped
    whole, so no part of one survives."""
    limit = call.connection.max_response_bytes
    wanted = limit + longest(call.secrets)
    data = bytearray()
    if method != "HEAD":
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > wanted:
                break
    truncated = len(data) > limit
    encoding = response.encoding or "utf-8"
    text = data.decode(encoding, errors="replace")
    body: Any = text
    if truncated:
        kept = len(bytes(data[:limit]).decode(encoding, errors="ignore"))
        body = scrubbed_prefix(text, kept, call.secrets)
    elif "json" in response.headers.get("content-type", "").lower() and text:
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
    "normalise_path",
    "path_problem",
]
