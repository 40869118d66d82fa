"""What every request must be before a route sees it (SPEC 12): from this site, a bounded
body, and text.

`RequestGuard` is one ASGI middleware in front of every route, so no route can
forget a rule:

- a request that changes something (any method but GET, HEAD and OPTIONS) sent
  by a browser from another site is a 403 `cross_site`. A page the user visits can
  make the browser POST to `http://127.0.0.1:8000/admin/reload`, and a server with
  no auth treats every caller as the operator; the browser says where the request
  comes from (`Sec-Fetch-Site`, else `Origin`), and only `same-origin` (or a
  request the user made directly) passes. A client that is no browser (curl, an
  SDK) sends neither header and is not affected;

- a body larger than `limits.maxRequestBytes` is a 413, declared or chunked;
- every string of a request is text (`runtime._text`): the path and the query,
  percent-decoded, are valid UTF-8 without U+0000, and so is every key and every
  string of a JSON body (`"\\ud800"` is valid JSON but no text). Anything else is
  a 422 `invalid_request` naming where, before any route runs;
- a body that is no UTF-8, or JSON nested deeper than the parser can follow, is
  a 422 too (FastAPI would answer a 400 or fail).

The offending value is never echoed: the message says where and which character. A
refusal of a path a protocol face serves is in that protocol's error shape
(`runtime.server.faces.refusal_for`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import unquote_to_bytes, urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runtime._text import json_problem, text_problem
from runtime.server.errors import error_response
from runtime.server.faces import refusal_for


class RequestGuard:
    """Refuse oversized bodies (413) and requests with strings that are not text (422)."""

    def __init__(self, app: ASGIApp, limit: Callable[[], int]) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refuse = _refusal(scope)
        refusal = cross_site_problem(scope)
        if refusal is not None:
            await refuse(403, "cross_site", refusal)(scope, receive, send)
            return
        limit = int(self.limit())
        too_large = f"request bodies are limited to {limit} bytes"
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await refuse(413, "body_too_large", too_large)(scope, receive, send)
            return
        # Read the body here, counting (a Content-Length can be absent or false). An error
        # raised from inside receive() would reach FastAPI's body parsing, which turns it
        # into a 400; refusing before the app runs keeps it a 413.
        buffered: list[Message] = []
        body = bytearray()
        while True:
            message = await receive()
            buffered.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if len(body) > limit:
                await refuse(413, "body_too_large", too_large)(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        problem = url_problem(scope) or body_problem(bytes(body))
        if problem is not None:
            await refuse(422, "invalid_request", problem)(scope, receive, send)
            return

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, send)


def _refusal(scope: Scope) -> Callable[[int, str, str], ASGIApp]:
    """The error answer for this request's path, looked up only when it is refused."""

    def refuse(status: int, code: str, message: str) -> ASGIApp:
        shaped = refusal_for(scope["path"]) or error_response
        return shaped(status, code, message)

    return refuse


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def cross_site_problem(scope: Scope) -> str | None:
    """Why a browser request from another site may not run here, or None. Only requests
    that change something are checked: reading needs the response, which the browser
    keeps from the other site."""
    if scope["method"] in _SAFE_METHODS:
        return None
    headers = dict(scope.get("headers") or [])
    site = headers.get(b"sec-fetch-site")
    if site is not None:
        if site in (b"same-origin", b"none"):
            return None
        where = f"Sec-Fetch-Site: {site.decode('latin-1')}"
    else:
        origin = headers.get(b"origin")
        if origin is None:
            return None  # not a browser's request, or one from a page of this server
        if origin != b"null" and urlsplit(origin.decode("latin-1")).netloc.encode() == headers.get(
            b"host"
        ):
            return None
        where = f"Origin: {origin.decode('latin-1')}"
    return (
        f"a {scope['method']} from a page of another site ({where}) may not change anything "
        "here; call the API from this server's own pages or from a client that is no browser"
    )


def url_problem(scope: Scope) -> str | None:
    """What is wrong with the text of the request's path or query, or None."""
    raw_path = scope.get("raw_path") or scope["path"].encode()
    problem = _bytes_problem(unquote_to_bytes(raw_path.decode("latin-1")))
    if problem is not None:
        return f"path: {problem}"
    query = scope.get("query_string", b"").decode("latin-1")
    for pair in filter(None, query.split("&")):
        name, _, value = pair.partition("=")
        name_bytes = unquote_to_bytes(name.replace("+", " "))
        label = name_bytes.decode("utf-8", "replace")
        problem = _bytes_problem(name_bytes)
        if problem is not None:
            return f"query: a parameter name {problem}"
        problem = _bytes_problem(unquote_to_bytes(value.replace("+", " ")))
        if problem is not None:
            return f"query parameter `{label}`: {problem}"
    return None


def body_problem(body: bytes) -> str | None:
    """What is wrong with the text of a JSON body, or None (also for a body that is not
    JSON: the route that reads it says so)."""
    if not body:
        return None
    try:
        value = json.loads(body)
    except RecursionError:
        return "body: nested too deeply"
    except UnicodeDecodeError:
        return "body: not valid UTF-8; send JSON text"
    except ValueError:
        return None
    return json_problem(value)


def _bytes_problem(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "is not valid UTF-8 once percent-decoded; send valid Unicode text"
    return text_problem(text)
