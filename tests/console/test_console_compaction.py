"""A compacted session in the console (SPEC 20): the transcript shows a folded marker with
the view's size before and after, and still every message of the log."""

from __future__ import annotations

import json
import re

import httpx
from playwright.sync_api import Page, expect

from tests.console.conftest import ALICE_KEY, Desk, screenshot, sign_in

MESSAGES = ["first: hello", "second: hello again", "third: one more"]


def chat(client: httpx.Client, text: str, session_id: str | None) -> str:
    body = {"message": text, **({"session_id": session_id} if session_id else {})}
    with client.stream("POST", "/chat", json=body) as response:
        assert response.status_code == 200, response.read()
        frames = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    return str(json.loads(frames[0])["session_id"])


def test_a_compacted_session_shows_a_folded_marker_and_every_message(
    page: Page, desk: Desk
) -> None:
    headers = {"Authorization": f"Bearer {ALICE_KEY}"}
    with httpx.Client(base_url=desk.url, headers=headers, timeout=30) as client:
        session_id = None
        for text in MESSAGES:
            session_id = chat(client, text, session_id)
        compacted = client.post(f"/sessions/{session_id}/compact", json={"focus": "greetings"})
        assert compacted.status_code == 200, compacted.text
        compaction = compacted.json()["compaction"]
    assert compaction["stage"] == "summary"

    sign_in(page, ALICE_KEY)
    page.goto(f"{desk.url}/console/sessions/{session_id}")
    marker = page.locator("details.compaction")
    expect(marker).to_have_count(1)
    expect(marker.locator("summary")).to_have_text(
        "Earlier conversation compacted (summarised): "
        f"{compaction['before_tokens']} → {compaction['after_tokens']} tokens"
    )
    marker.locator("summary").click()
    expect(marker).to_contain_text("keep every one")
    # The log stays whole: every message is still in the transcript, before the marker.
    expect(page.locator("article.from-user")).to_have_text(
        [re.compile(f"{text}$") for text in MESSAGES]
    )
    screenshot(page, "session-compacted")
