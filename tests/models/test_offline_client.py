"""The offline model's client (`OfflineModel`): calls one at a time, HTML entities decoded.

Against the scripted OpenAI-compatible server over loopback: its responder counts the
requests it is answering at once, as llama-cpp-python's one-at-a-time server would suffer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

from runtime.models import Model, ModelReply, UserMessage
from runtime.models.endpoints import ModelEndpoint
from runtime.models.local import EntityDecoder, OfflineModel
from runtime.models.openai import OpenAIModel
from runtime.testing import RecordedRequest, ScriptedModel

pytestmark = pytest.mark.anyio


class Counting:
    """A responder that notes how many requests it answers at the same moment."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.active = self.most = 0
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> str:
        with self._lock:
            self.active += 1
            self.most = max(self.most, self.active)
        time.sleep(0.3)
        with self._lock:
            self.active -= 1
        return self.text


async def ask_three_at_once(model: Model) -> list[list[Any]]:
    streamed: list[list[Any]] = [[], [], []]

    async def one(index: int) -> None:
        async for item in model.stream([UserMessage.of(f"question {index}")], None):
            streamed[index].append(item)

    async with anyio.create_task_group() as group:
        for index in range(3):
            group.start_soon(one, index)
    return streamed


def client(server: ScriptedModel) -> OpenAIModel:
    return OpenAIModel.for_endpoint(ModelEndpoint("smollm2", server.base_url, "local"))


async def test_calls_to_the_offline_model_queue_behind_each_other() -> None:
    responder = Counting("It&#39;s done &amp; filed.")
    with ScriptedModel() as server:
        server.respond(responder)
        async with client(server) as plain:
            await ask_three_at_once(plain)
            assert responder.most > 1  # the server does see calls at once without the queue
        responder.most = 0
        offline = OfflineModel(client(server))
        try:
            streamed = await ask_three_at_once(offline)
        finally:
            await offline.aclose()
    assert responder.most == 1
    for items in streamed:
        reply = items[-1]
        assert isinstance(reply, ModelReply)
        assert reply.text == "It's done & filed."
        assert "".join(item for item in items if isinstance(item, str)) == reply.text
    assert len(server.requests) == 6


def test_an_entity_split_across_deltas_is_decoded_once_whole() -> None:
    decoder = EntityDecoder()
    deltas = ["doesn&#3", "9;t, AT&T &am", "p; R&", "D: &lt;b", "&gt; x &"]
    text = "".join(decoder.feed(delta) for delta in deltas) + decoder.flush()
    assert text == "doesn't, AT&T & R&D: <b> x &"
    # Nothing is held back that cannot begin an entity: a delta is shown as it arrives.
    assert EntityDecoder().feed("plain text, & more") == "plain text, & more"
