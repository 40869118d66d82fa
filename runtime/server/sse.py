"""Events as Server-Sent Events: one frame per event, `id: <event id>`, `event: <type>` and
`data: <the event as JSON>` (docs/chat.md), for a running turn and a followed session."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse

from runtime.events import Event


class EventStreamResponse(StreamingResponse):
    """Server-Sent Events (the media type the OpenAPI document gives such a route)."""

    media_type = "text/event-stream"


def event_stream(streamed: AsyncIterator[Event]) -> StreamingResponse:
    async def frames() -> AsyncIterator[bytes]:
        async for event in streamed:
            yield frame(event)

    return StreamingResponse(
        frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def frame(event: Event) -> bytes:
    data = json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":"))
    if not data.isascii():
        try:
            data.encode()
        except UnicodeEncodeError:  # an unpaired surrogate (a tool's broken output): escaped
            data = json.dumps(event.to_json(), separators=(",", ":"))
    return f"id: {event.id}\nevent: {event.type}\ndata: {data}\n\n".encode()


__all__ = ["EventStreamResponse", "event_stream", "frame"]
