"""Records and payloads shared by the storage tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from runtime.storage import SessionRecord

T0 = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)

PAYLOAD: dict[str, Any] = {
    "text": "héllo wörld — 你好世界 — مرحبا بالعالم — 🦜🏳️‍🌈 — e\u0301 — \u2028",
    "escapes": 'quote " backslash \\ newline \n tab \t slash / <script>',
    "nested": {
        "list": [1, 2.5, -3, True, False, None, "x", [], {}],
        "deep": {"a": {"b": {"c": [{"d": "é", "e": [[["🙂"]]]}]}}},
    },
    "numbers": {"big": 2**62, "negative": -(2**62), "float": 0.1, "tiny": 1e-300, "zero": 0},
    "empty": "",
    "unicode key ✓": "value",
}
"""JSON that must come back exactly as it went in."""


def session_record(session_id: str = "s1", **changes: Any) -> SessionRecord:
    fields: dict[str, Any] = {
        "id": session_id,
        "scope_id": "scope-a",
        "owner": "user-1",
        "root_agent": "default",
        "created_at": T0,
        "updated_at": T0 + timedelta(seconds=1),
        "metadata": {},
    }
    fields.update(changes)
    return SessionRecord(**fields)
