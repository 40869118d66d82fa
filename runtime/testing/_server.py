"""The scripted model servers: real HTTP on loopback, in a thread, one per wire format.

`ScriptedModel` speaks OpenAI's Chat Completions (`_chat_wire`), `ScriptedAnthropic`
Anthropic's Messages API (`_messages_wire`). Both take the same steps (`_steps`), inject
the same faults and record the same way; a `RecordedRequest` shows its body as sent and,
in `conversation`, as the runtime's model-neutral messages.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from runtime.testing._chat_wire import ChatWire
from runtime.testing._messages_wire import MessagesWire
from runtime.testing._requests import RecordedRequest
from runtime.testing._steps import (
    ScriptedToolCall,
    Step,
    cut_stream,
    error,
    raw_arguments,
    reply,
    tool_call,
    tool_calls,
)
from runtime.testing._wire import Call, Wire

Responder = Callable[["RecordedRequest"], "Step | str"]
"""Answers a request when the queue is empty; a plain string means `reply(text)`."""


@dataclass(slots=True)
class _Unexpected:
    request: RecordedRequest
    reason: str


class ScriptedServer:
    """A model server that answers from a script, in the wire format of a subclass.

    Queue steps with `reply`, `tool_call`, `tool_calls`, `raw_arguments`, `error`
    (or any `Step` with `enqueue`); each request consumes the next one, FIFO.
    When the queue is empty, `respond(fn)` answers instead; with neither, the
    request gets HTTP `unexpected_status` (500) and is recorded as unexpected.
    `assert_done()` fails if a queued step was never consumed or a request was
    unexpected. Every chat request is recorded in `requests`.

    `latency` seconds pass before each chat answer; `stream_delay` seconds pass
    between streamed chunks (0: the whole stream is written at once). Steps can
    inject a provider's faults (`error`, `cut_stream`, `unfinished`, `hang`,
    `stall`, `junk_chunk`, `raw_arguments`); a hanging step ends when the server
    closes.
    """

    wire: Wire

    def __init__(
        self, latency: float = 0.0, *, stream_delay: float = 0.0, unexpected_status: int = 500
    ) -> None:
        self.latency = latency
        self.stream_delay = stream_delay
        self.unexpected_status = unexpected_status
        self._lock = threading.Lock()
        self._steps: deque[Step] = deque()
        self._responder: Responder | None = None
        self._requests: list[RecordedRequest] = []
        self._unexpected: list[_Unexpected] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._call_number = 0
        self._server: _ScriptedHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._closing = threading.Event()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        if self._server is not None:
            return self
        self._closing = threading.Event()
        server = _ScriptedHTTPServer(self)
        wake = socket.socketpair()
        thread = threading.Thread(
            target=_serve, args=(server, wake[0]), name="scripted-model", daemon=True
        )
        self._server, self._wake, self._thread = server, wake, thread
        thread.start()
        return self

    def close(self) -> None:
        """Stop serving and drop every open connection. Safe to call twice."""
        server, wake, thread = self._server, self._wake, self._thread
        if server is None or wake is None or thread is None:
            return
        self._server = self._wake = self._thread = None
        self._closing.set()  # ends every hang and stall in progress
        wake[1].send(b"x")
        thread.join()
        server.server_close()
        server.drop_connections()
        for end in wake:
            end.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the scripted model is not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """Where a client is pointed: `http://127.0.0.1:PORT` (a subclass adds its prefix)."""
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------ scripting

    def enqueue(self, *steps: Step) -> Self:
        with self._lock:
            self._steps.extend(steps)
        return self

    def reply(self, text: str, *, cached_tokens: int = 0) -> Self:
        return self.enqueue(reply(text, cached_tokens=cached_tokens))

    def tool_call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        id: str | None = None,
        text: str = "",
    ) -> Self:
        return self.enqueue(tool_call(name, arguments, id=id, text=text))

    def tool_calls(
        self, calls: list[tuple[str, Mapping[str, Any]] | ScriptedToolCall], *, text: str = ""
    ) -> Self:
        return self.enqueue(tool_calls(calls, text=text))

    def raw_arguments(self, name: str, arguments: str, *, id: str | None = None) -> Self:
        return self.enqueue(raw_arguments(name, arguments, id=id))

    def error(self, status: int, message: str = "scripted error") -> Self:
        return self.enqueue(error(status, message))

    def cut_stream(self, text: str) -> Self:
        return self.enqueue(cut_stream(text))

    def respond(self, fn: Responder | None) -> Self:
        """Answer with `fn(request)` whenever the queue is empty (None: stop)."""
        with self._lock:
            self._responder = fn
        return self

    # ------------------------------------------------------------ inspection

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every chat-completions request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """How many queued steps no request has consumed yet."""
        with self._lock:
            return len(self._steps)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        """The most chat requests being handled at once so far."""
        with self._lock:
            return self._max_in_flight

    def assert_done(self) -> None:
        """Raise AssertionError if a step was never consumed or a request was unexpected."""
        with self._lock:
            steps, unexpected = list(self._steps), list(self._unexpected)
        problems: list[str] = []
        if steps:
            listed = "".join(f"\n  {_describe(step)}" for step in steps)
            problems.append(f"{len(steps)} scripted step(s) never consumed:{listed}")
        for item in unexpected:
            last = item.request.last_user
            about = f" (last user message {last[:80]!r})" if last is not None else ""
            problems.append(f"unexpected request{about}: {item.reason}")
        if problems:
            raise AssertionError("scripted model: " + "\n".join(problems))

    # ------------------------------------------------------------ serving (handler threads)

    def _next_step(self, request: RecordedRequest) -> Step | None:
        with self._lock:
            self._requests.append(request)
            if self._steps:
                return self._steps.popleft()
            responder = self._responder
            if responder is None:
                self._unexpected.append(_Unexpected(request, "no step queued and no responder set"))
                return None
        try:
            answer = responder(request)
        except Exception as e:  # the test's own function failed: make the test fail, loudly
            with self._lock:
                self._unexpected.append(_Unexpected(request, f"responder raised {e!r}"))
            return None
        return reply(answer) if isinstance(answer, str) else answer

    def _record_unexpected(self, request: RecordedRequest, reason: str) -> None:
        with self._lock:
            self._requests.append(request)
            self._unexpected.append(_Unexpected(request, reason))

    def _next_call_id(self) -> str:
        with self._lock:
            self._call_number += 1
            return f"call_{self._call_number}"

    def _pause(self, seconds: float) -> None:
        """Wait `seconds`, or less if the server closes meanwhile."""
        if seconds > 0:
            self._closing.wait(seconds)

    @contextmanager
    def _tracking(self) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1


class _ScriptedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, model: ScriptedServer) -> None:
        self.model = model
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def drop_connections(self) -> None:
        with self.connections_lock:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-answer is normal in tests (cancellation, cut streams).
        pass


def _serve(server: _ScriptedHTTPServer, wake: socket.socket) -> None:
    """Accept connections until `wake` becomes readable (close() writes to it).

    Not `serve_forever`: its shutdown waits up to a poll interval, and every
    test starts and stops a server.
    """
    server.timeout = 0
    with selectors.DefaultSelector() as selector:
        selector.register(server.socket, selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        while True:
            ready = selector.select()
            if any(key.fileobj is wake for key, _ in ready):
                return
            server.handle_request()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate sends; with Nagle on, every keep-alive reply
    # stalls ~40 ms against the client's delayed ACK (notes/benchmarking.md).
    disable_nagle_algorithm = True
    timeout = 30  # an idle keep-alive connection is closed after this
    server: _ScriptedHTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):  # the client is gone
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        wire = self.server.model.wire
        if self.path.rstrip("/") == wire.models_route:
            self._send_json(200, wire.models())
        else:
            self._send_error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        model = self.server.model
        wire = model.wire
        if self.path.rstrip("/") != wire.route:
            self._send_error(404, f"no route POST {self.path}")
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("the body is not a JSON object")
        except ValueError as e:
            request = RecordedRequest(self.path, headers, {}, provider=wire.provider)
            model._record_unexpected(request, f"bad body: {e}")
            self._send_error(400, f"invalid JSON body: {e}")
            return
        host, port = self.client_address[:2]
        request = RecordedRequest(self.path, headers, body, f"{host}:{port}", wire.provider)
        refused = wire.refusal(body)
        if refused is not None:  # what the real API refuses fails the test, loudly
            model._record_unexpected(request, f"the real API would refuse it: {refused}")
            self._send_error(400, refused)
            return
        with model._tracking():
            step = model._next_step(request)
            if model.latency:
                time.sleep(model.latency)
            if step is not None:
                model._pause(step.delay)
            try:
                self._answer(request, step)
            except OSError:
                self.close_connection = True  # the client hung up; nothing to answer

    def _answer(self, request: RecordedRequest, step: Step | None) -> None:
        model = self.server.model
        if step is None:
            self._send_error(
                model.unexpected_status,
                "scripted model: no step queued and no responder for this request",
            )
            return
        if step.status != 200:
            self._send_error(step.status, step.message)
            return
        calls: list[Call] = [
            (call.id or model._next_call_id(), call.name, call.arguments)
            for call in step.tool_calls
        ]
        if not request.stream:
            self._send_completion(model.wire.completion(request, step, calls), step)
            return
        plan = model.wire.stream(request, step, calls)
        events, text_end = list(plan.events), plan.text_end
        if step.junk is not None:
            events.insert(text_end, b"data: " + step.junk.encode() + b"\n\n")
            text_end += 1
        shift = 1 if step.junk is not None else 0
        dropped = step.cut or step.cut_in_call
        if step.cut:  # the text only: nothing that says the answer is over
            events = events[:text_end]
        elif step.cut_in_call:  # into the first tool call's arguments, then the line drops
            events = events[: plan.mid_call + shift]
        elif step.unfinished:  # everything but what says the answer is over; a clean end
            events = events[: plan.calls_end + shift]
        self._send_stream(events, cut=dropped, pause_after=text_end, pause=step.stall)

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: int, message: str) -> None:
        self._send_json(status, self.server.model.wire.error_body(status, message))

    def _send_completion(self, payload: dict[str, Any], step: Step) -> None:
        """A non-streamed answer: the JSON, its junk instead, or half of it (`cut`)."""
        if step.junk is not None:
            data = step.junk.encode()
        else:
            data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if step.cut or step.cut_in_call:
            self.wfile.write(data[: len(data) // 2])
            self.close_connection = True
        else:
            self.wfile.write(data)

    def _send_stream(
        self, events: list[bytes], *, cut: bool, pause_after: int, pause: float
    ) -> None:
        """Send `events` in chunked encoding (ended properly unless `cut`), silent for
        `pause` seconds after the first `pause_after` of them."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunks = [b"%x\r\n%s\r\n" % (len(event), event) for event in events]
        if not cut:
            chunks.append(b"0\r\n\r\n")
        model = self.server.model
        if model.stream_delay:
            for index, chunk in enumerate(chunks):
                if index == pause_after:
                    model._pause(pause)
                self.wfile.write(chunk)
                time.sleep(model.stream_delay)
        else:
            self.wfile.write(b"".join(chunks[:pause_after]))
            if pause:
                self.wfile.flush()
                model._pause(pause)
            self.wfile.write(b"".join(chunks[pause_after:]))
        if cut:
            self.close_connection = True


class ScriptedModel(ScriptedServer):
    """A scripted OpenAI-compatible Chat Completions server (`POST /v1/chat/completions`).

    Point `OPENAI_BASE_URL` (or an `openai` client) at `base_url`. `path` moves the API
    (`/v1beta/openai` as Gemini's, `/api/v1` as OpenRouter's); `quirks` plays what a
    provider does differently (`runtime.testing._chat_wire.QUIRKS`)."""

    def __init__(
        self,
        latency: float = 0.0,
        *,
        stream_delay: float = 0.0,
        unexpected_status: int = 500,
        path: str = "/v1",
        quirks: Iterable[str] = (),
    ) -> None:
        super().__init__(latency, stream_delay=stream_delay, unexpected_status=unexpected_status)
        self._chat = ChatWire(path, frozenset(quirks))
        self.wire = self._chat

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, `http://127.0.0.1:PORT/v1` (or the `path` given)."""
        return f"http://127.0.0.1:{self.port}{self._chat.path}"


class ScriptedAnthropic(ScriptedServer):
    """A scripted Anthropic Messages API server (`POST /v1/messages`), streaming the real
    SSE event sequence, refusing what the real API refuses, simulating its prompt cache.

    Point a model entry with `"provider": "anthropic"` (its `baseUrl`, or
    `ANTHROPIC_BASE_URL`) or an `anthropic` client at `base_url`. A prefix shorter than
    `cache_min_tokens` is never cached (the real API's minimum is 1,024 tokens or more,
    by model; 0 here, so a test's short prompt is cached)."""

    def __init__(
        self,
        latency: float = 0.0,
        *,
        stream_delay: float = 0.0,
        unexpected_status: int = 500,
        cache_min_tokens: int = 0,
    ) -> None:
        super().__init__(latency, stream_delay=stream_delay, unexpected_status=unexpected_status)
        self.wire = MessagesWire(cache_min_tokens)  # its own prompt cache


def _describe(step: Step) -> str:
    if step.status != 200:
        return f"error({step.status}, {step.message!r})"
    parts = []
    if step.text:
        parts.append(f"text {step.text[:60]!r}")
    parts.extend(f"tool call {call.name!r}" for call in step.tool_calls)
    return ", ".join(parts) or "empty reply"
