"""The console's Usage page (SPEC 22) in Chromium: the operator sees spend by day and by
agent as charts the page draws, and the most expensive sessions linked to transcripts."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.console.conftest import ALICE_KEY, OPERATOR_TOKEN, Desk, screenshot, sign_in


def chat(page: Page, desk: Desk, token: str, message: str) -> str:
    response = page.request.post(
        f"{desk.url}/chat",
        data={"message": message, "stream": False},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.ok, response.text()
    return str(response.json()["session_id"])


def test_the_operator_reads_spend_by_day_and_agent_and_opens_the_costliest_session(
    page: Page, desk: Desk
) -> None:
    session = chat(page, desk, ALICE_KEY, "Please delegate this plan")
    sign_in(page, OPERATOR_TOKEN)
    page.goto(desk.url + "/")
    page.get_by_role("navigation").get_by_role("link", name="Usage").click()

    expect(page.get_by_role("heading", name="Usage", level=1)).to_be_visible()
    expect(page.get_by_text(re.compile(r"model call\(s\) in \d+ turn\(s\)"))).to_be_visible()
    by_day = page.get_by_role("img", name=re.compile(r"^Spend by day: \d{4}-\d\d-\d\d"))
    expect(by_day).to_be_visible()
    by_agent = page.get_by_role("img", name=re.compile("^Spend by agent: "))
    for agent in ["default", "researcher", "writer", "reviewer"]:
        expect(by_agent).to_have_attribute("aria-label", re.compile(rf"\b{agent} \d"))
    expect(by_agent.locator("rect")).to_have_count(4)  # drawn by the page: one bar per agent
    sessions = page.get_by_role("table", name="Most expensive sessions")
    screenshot(page, "usage")
    sessions.get_by_role("link", name=session, exact=True).click()
    expect(page).to_have_url(re.compile(f"/console/sessions/{session}$"))
    expect(page.locator("article.from-user")).to_have_text(re.compile("Please delegate this plan$"))


def test_an_end_user_is_told_usage_is_for_operators(page: Page, desk: Desk) -> None:
    sign_in(page, ALICE_KEY)
    page.goto(desk.url + "/")
    expect(page.get_by_role("navigation").get_by_role("link", name="Usage")).to_be_hidden()
    page.goto(desk.url + "/console/usage")
    expect(
        page.get_by_text("Usage is for operators: this credential cannot read everyone's.")
    ).to_be_visible()
    expect(page.get_by_role("img")).to_have_count(0)


def test_the_usage_page_fits_a_phone(page: Page, desk: Desk) -> None:
    chat(page, desk, OPERATOR_TOKEN, "hello")
    page.set_viewport_size({"width": 375, "height": 800})
    sign_in(page, OPERATOR_TOKEN)
    page.goto(desk.url + "/console/usage")
    expect(page.get_by_role("img", name=re.compile("^Spend by agent: "))).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375
