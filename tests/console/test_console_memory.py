"""The console's Memory page in a real browser (SPEC 21): a person sees the notes an agent
keeps about them, and nobody else's, and deletes one with its button."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from runtime.testing import RecordedRequest, ScriptedModel, Step, reply, tool_call
from tests.conftest import write_repo
from tests.console.conftest import screenshot, server_environment, sign_in, stop
from tests.server.conftest import ServeProcess

OPERATOR = "operator-token-memory-page-0123"
ALICE = "key-alice-memory-page-0123"
BOB = "key-bob-memory-page-0123"
REPO: dict[str, Any] = {
    "amodal.json": {
        "name": "memory-page",
        "version": "1",
        "auth": {
            "apiKeys": [
                {"key": "env:ALICE_KEY", "claims": {"sub": "alice", "scope": "acme"}},
                {"key": "env:BOB_KEY", "claims": {"sub": "bob", "scope": "acme"}},
            ]
        },
    },
    "agents/default/AGENT.md": "You are the assistant.\n",
    "agents/default/agent.json": {"name": "Assistant", "memory": True},
    "agents/quiet/AGENT.md": "You keep nothing.\n",
}
METRIC = "Prefers metric units"
TEA = "Likes <b>green</b> tea"


def answer(request: RecordedRequest) -> Step | str:
    """Remember what the person says after "remember:", then say so."""
    if request.messages[-1]["role"] == "tool":
        return reply("Noted.")
    said = request.last_user or ""
    if said.startswith("remember:"):
        return tool_call("memory__add", {"text": said.removeprefix("remember:").strip()})
    return reply("Hello.")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("memory-page")
    with ScriptedModel() as model:
        model.respond(answer)
        environ = server_environment(
            model, root / "data", AMODAL_OPERATOR_TOKEN=OPERATOR, ALICE_KEY=ALICE, BOB_KEY=BOB
        )
        process = ServeProcess(write_repo(root / "repo", REPO), environ, "--no-reload")
        try:
            process.wait_ready()
            for token, note in ((ALICE, METRIC), (ALICE, "Lives in Lyon"), (BOB, TEA)):
                said = httpx.post(
                    f"{process.url}/chat",
                    json={"message": f"remember: {note}", "stream": False},
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=60,
                )
                assert said.status_code == 200, said.text
            yield process
        finally:
            stop(process)


def notes(server: ServeProcess, token: str) -> list[str]:
    response = httpx.get(
        f"{server.url}/memory?agent=default",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return [entry["text"] for entry in response.json()["entries"]]


def test_a_person_sees_only_their_notes_and_deletes_one(page: Page, server: ServeProcess) -> None:
    sign_in(page, ALICE)
    page.goto(server.url + "/")
    page.get_by_role("navigation").get_by_role("link", name="Memory", exact=True).click()
    expect(page.get_by_role("combobox", name="Agent")).to_have_value("default")
    notes_table = page.get_by_role("table", name="Notes Assistant keeps")
    expect(notes_table).to_contain_text(METRIC)
    expect(notes_table).to_contain_text("Lives in Lyon")
    expect(notes_table).to_contain_text("only you")
    expect(page.locator("#memory")).not_to_contain_text("tea")
    screenshot(page, "memory")

    page.get_by_role("button", name=f"Delete note: {METRIC}").click()
    expect(page.get_by_role("status")).to_have_text(f"Deleted: {METRIC}")
    expect(notes_table).not_to_contain_text(METRIC)
    expect(notes_table).to_contain_text("Lives in Lyon")
    assert notes(server, ALICE) == ["Lives in Lyon"]
    assert notes(server, BOB) == [TEA]

    page.get_by_role("combobox", name="Agent").select_option("quiet")
    expect(page.locator("#memory")).to_have_text("quiet keeps no notes about you.")


def test_a_note_holding_html_shows_as_text_and_fits_375_pixels(
    page: Page, server: ServeProcess
) -> None:
    sign_in(page, BOB)
    page.set_viewport_size({"width": 375, "height": 800})
    page.goto(server.url + "/console/memory")
    expect(page.get_by_role("table", name="Notes Assistant keeps")).to_contain_text(TEA)
    assert page.locator("#memory b").count() == 0  # the note's markup is text, not HTML
    expect(page.get_by_role("button", name=f"Delete note: {TEA}")).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375, f"the Memory page is {width} px wide at a 375 px viewport"
