"""A repo with automations for the automation tests, and a webhook receiver on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIGESTS = {
    "entity": {
        "name": "Digest",
        "key": "{run_id}",
        "schema": {
            "run_id": {"type": "string"},
            "automation": {"type": "string"},
            "reply": {"type": "string", "nullable": True},
            "status": {"type": "string"},
        },
    }
}
NOTES = {
    "entity": {
        "name": "Note",
        "key": "{id}",
        "schema": {"id": {"type": "string"}, "text": {"type": "string"}},
    }
}

FILES: dict[str, Any] = {
    "agents/default/AGENT.md": "You are the default agent.\n",
    "agents/default/agent.json": {"stores": {"notes": "rw"}, "tools": ["charge"]},
    "agents/reporter/AGENT.md": "You write reports.\n",
    "agents/reporter/agent.json": {"stores": {"notes": "rw"}},
    "stores/digests.json": DIGESTS,
    "stores/notes.json": NOTES,
    "tools/charge/tool.json": {"description": "Charge a card.", "confirm": True},
    "tools/charge/handler.py": (
        "CALLS = []\n\nasync def handler(args, ctx):\n"
        "    CALLS.append(1)\n    return {'charged': len(CALLS)}\n"
    ),
    "automations/digest.json": {
        "message": "Write the digest.",
        "trigger": {"manual": True},
        "deliver": [{"store": "digests"}],
    },
}


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A webhook target: records every POST, answers each with the next status of
    `statuses` (then 200)."""

    url: str
    received: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


@dataclass
class _State:
    receiver: Receiver
    lock: threading.Lock = field(default_factory=threading.Lock)


def serve_receiver() -> Iterator[Receiver]:
    state: _State

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            with state.lock:
                receiver = state.receiver
                receiver.received.append(Received(self.path, dict(self.headers), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = _State(Receiver(f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state.receiver
    finally:
        server.shutdown()
        server.server_close()
