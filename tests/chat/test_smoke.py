from __future__ import annotations

import pytest

from runtime.testing import ScriptedModel
from tests.chat.conftest import Harness, done, types

pytestmark = pytest.mark.anyio


async def test_a_turn_streams_text_and_ends_with_done(
    harness: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Hello there!")
    events = await harness.chat("hi")
    assert types(events)[0] == "session"
    assert "".join(e.data["text"] for e in events if e.type == "text_delta") == "Hello there!"
    assert done(events)["reason"] == "model_stop"
    request = scripted_model.requests[0]
    assert request.last_user == "hi"
    assert "You are" in (request.system or "")
