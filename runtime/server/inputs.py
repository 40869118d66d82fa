"""What a client sends the HTTP API (SPEC 12, 14): request bodies as strict pydantic
models (an unknown field, or a value of the wrong type, is a 422: `"approve": "yes"` or
`"stream": 0` is never coerced to a bool), and session ids.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field

from runtime.server.errors import ApiError

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# Declared in the OpenAPI document; checked by `check_session_id` (its own error code).
SessionId = Annotated[str, Path(json_schema_extra={"pattern": SESSION_ID.pattern})]


def check_session_id(session_id: str) -> None:
    if not SESSION_ID.fullmatch(session_id):
        raise ApiError(
            422, "invalid_session_id", "a session id is 1-64 letters, digits, '-' or '_'"
        )


class StrictBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ChatBody(StrictBody):
    message: str = Field(min_length=1)
    agent: str | None = None
    context: dict[str, str] = Field(default_factory=dict)
    session_id: str | None = Field(None, json_schema_extra={"pattern": SESSION_ID.pattern})
    stream: bool = True
    autonomous: bool = False
    background: bool = False
    """Queue the turn and answer 202 {session_id, turn_id} at once (SPEC 23)."""


class ConfirmationBody(StrictBody):
    approve: bool
    stream: bool = True


class CompactBody(StrictBody):
    focus: str | None = Field(None, min_length=1, max_length=2_000)
    """What the summary should keep in particular."""


__all__ = [
    "SESSION_ID",
    "ChatBody",
    "CompactBody",
    "ConfirmationBody",
    "SessionId",
    "StrictBody",
    "check_session_id",
]
