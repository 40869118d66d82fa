"""The example repo's HTTP API: a tiny library catalogue the `library` connection calls.

Run it beside the runtime, then chat:

    python servers/library_api.py            # serves http://127.0.0.1:8770 until Ctrl-C

    GET  /books?q=TEXT         books whose title or topic contains TEXT
    GET  /books/{id}           one book
    POST /books/{id}/holds     place a hold ({"reader": "..."}); the connection's access.json
                               makes this wait for a person's approval

Without it running, the chat still works: a call is a tool error the agent reports.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

BOOKS = {
    "b1": {"id": "b1", "title": "The Craft of Research", "topic": "research methods"},
    "b2": {"id": "b2", "title": "On Writing Well", "topic": "writing"},
    "b3": {"id": "b3", "title": "How to Read a Paper", "topic": "research methods"},
}
HOLDS: list[dict[str, str]] = []


class Library(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = [part for part in url.path.split("/") if part]
        if parts == ["books"]:
            text = parse_qs(url.query).get("q", [""])[0].lower()
            found = [b for b in BOOKS.values() if text in (b["title"] + b["topic"]).lower()]
            self._answer(200, {"books": found})
        elif len(parts) == 2 and parts[0] == "books" and parts[1] in BOOKS:
            self._answer(200, BOOKS[parts[1]])
        else:
            self._answer(404, {"error": "no such book"})

    def do_POST(self) -> None:
        parts = [part for part in urlsplit(self.path).path.split("/") if part]
        if len(parts) == 3 and parts[0] == "books" and parts[2] == "holds" and parts[1] in BOOKS:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            HOLDS.append({"book": parts[1], "reader": str(body.get("reader", "someone"))})
            self._answer(201, {"held": parts[1], "holds": len(HOLDS)})
        else:
            self._answer(404, {"error": "no such book"})


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8770
    server = ThreadingHTTPServer(("127.0.0.1", port), Library)
    print(f"library API on http://127.0.0.1:{port} (Ctrl-C stops it)", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
