"""A real HTTP API on loopback for connection tests (`http.server`, one thread per request).

Loaded as a pytest plugin by tests/conftest.py. The `http_api` fixture is a started
`LoopbackApi` that records every request it got:

- `GET /items`, `GET /items/{id}`: a small JSON catalogue;
- `POST /items/{id}/holds`: records a hold (a write endpoint), answers 201;
- `GET /echo`: the request's headers and query as JSON (an API that echoes secrets);
- `GET /redirect?to=PATH[&status=N]`: a redirect (302, or N) to PATH on the same origin;
- `GET /url`: the request's raw path and query, as text (an API that echoes its URL);
- `GET /padded?before=N`: N bytes of text, then the request's Authorization header;
- `GET /away?port=N`: 302 to the same path on another port (another origin);
- `GET /big?bytes=N`: N bytes of text; `GET /slow?seconds=S`: answers after S seconds;
- `GET /text`: plain text; `GET /missing`: 404 with a JSON error.

Every route answers under `/v1` too (`/v1/items`), for connections with a base path.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

ITEMS = {"1": {"id": "1", "title": "On Sources"}, "2": {"id": "2", "title": "Field Notes"}}


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class LoopbackApi:
    server: ThreadingHTTPServer
    requests: list[Seen] = field(default_factory=list)
    holds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _handler(api: LoopbackApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: Any, content_type: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            if content_type.startswith("text/") and isinstance(body, str):
                data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("ETag", '"v1"')
            self.send_header("X-Internal", "not shown")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _redirect(self, location: str, status: int = 302) -> None:
            self.send_response(status)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _handle(self) -> None:
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            api.requests.append(
                Seen(self.command, parts.path, query, dict(self.headers.items()), body)
            )
            path = parts.path.removeprefix("/v1")  # the same API under a base path
            segments = [s for s in path.split("/") if s]
            if path == "/items":
                self._answer(200, {"items": list(ITEMS.values())})
            elif len(segments) == 2 and segments[0] == "items":
                item = ITEMS.get(segments[1])
                self._answer(200 if item else 404, item or {"error": "no such item"})
            elif len(segments) == 3 and segments[::2] == ["items", "holds"]:
                api.holds.append({"item": segments[1], "body": json.loads(body or b"null")})
                self._answer(201, {"held": segments[1]})
            elif path == "/echo":
                self._answer(200, {"headers": dict(self.headers.items()), "query": query})
            elif path == "/redirect":
                self._redirect(query["to"][0], int(query.get("status", ["302"])[0]))
            elif path == "/url":
                self._answer(200, self.path, "text/plain")
            elif path == "/padded":
                padding = "x" * int(query["before"][0])
                self._answer(200, padding + self.headers.get("Authorization", ""), "text/plain")
            elif path == "/away":
                self._redirect(f"http://127.0.0.1:{query['port'][0]}/echo")
            elif path == "/big":
                self._answer(200, "x" * int(query["bytes"][0]), "text/plain")
            elif path == "/slow":
                time.sleep(float(query["seconds"][0]))
                self._answer(200, {"slow": True})
            elif path == "/text":
                self._answer(200, "plain words", "text/plain; charset=utf-8")
            else:
                self._answer(404, {"error": f"nothing at {path}"})

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

    return Handler


@pytest.fixture
def http_api() -> Iterator[LoopbackApi]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    api = LoopbackApi(server)
    server.RequestHandlerClass = _handler(api)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
