"""`/metrics` counts turns by the face that started them (SPEC 24)."""

from __future__ import annotations

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from runtime.testing import ScriptedModel
from tests.server.faces.conftest import ANN_KEY, OPERATOR_TOKEN, Served

pytestmark = pytest.mark.anyio


async def test_turns_are_counted_by_face(faces: Served, scripted_model: ScriptedModel) -> None:
    scripted_model.reply("Via chat.").reply("Via OpenAI.").reply("Via Responses.")
    ann = faces.closed_after(
        openai.AsyncOpenAI(base_url=f"{faces.url}/v1", api_key=ANN_KEY, max_retries=0)
    )
    async with httpx.AsyncClient(base_url=faces.url) as http:
        chat = await http.post(
            "/chat", json={"message": "hi", "stream": False}, headers=faces.headers(ANN_KEY)
        )
        assert chat.status_code == 200
        await ann.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "hi"}]
        )
        await ann.responses.create(model="default", input="hi")
        metrics = await http.get("/metrics", headers=faces.headers(OPERATOR_TOKEN))

    turns = {
        sample.labels["face"]: sample.value
        for family in text_string_to_metric_families(metrics.text)
        for sample in family.samples
        if sample.name == "amodal_turns_total" and sample.labels["reason"] == "model_stop"
    }
    assert turns == {"chat": 1, "openai_chat": 1, "responses": 1}
