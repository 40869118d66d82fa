"""A turn through the chat service (SPEC 6): the events it streams and how it ends."""

from __future__ import annotations

import pytest

from runtime import events
from runtime.testing import ScriptedModel
from tests._harness import Harness, done, of_type, types

pytestmark = pytest.mark.anyio


async def test_a_turn_streams_text_and_ends_with_done(
    harness: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Hello there!")
    streamed = await harness.chat("hi")
    assert types(streamed)[0] == "session"
    assert "".join(e.text for e in of_type(streamed, events.TextDelta)) == "Hello there!"
    assert done(streamed).reason == "model_stop"
    request = scripted_model.requests[0]
    assert request.last_user == "hi"
    assert "You are" in (request.system or "")
