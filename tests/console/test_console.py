"""The console of SPEC 17 in Chromium: what a person sees and does on each page."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, Route, expect

from runtime.testing import ScriptedModel
from tests.console.conftest import (
    ALICE_KEY,
    BOB_KEY,
    HTML_REPLY,
    OPERATOR_TOKEN,
    SLOW_END,
    SLOW_START,
    SPECIALISTS,
    Desk,
    screenshot,
    server_environment,
    sign_in,
    stop,
)
from tests.server.conftest import ServeProcess

NAVIGATION = ["Agents", "Chat", "Sessions", "Memory", "Stores", "Health"]


def send(page: Page, text: str) -> None:
    page.get_by_role("textbox", name="Message").fill(text)
    page.get_by_role("button", name="Send").click()


def open_listed(page: Page, session_id: str, first_message: str) -> None:
    """Open a session from the Sessions page by the link its row names it by: its first
    message (several sessions may share one; the row is found by its id)."""
    row = (
        page.get_by_role("table", name="Sessions")
        .get_by_role("row")
        .filter(has=page.get_by_role("link", name=f"Continue session {session_id} in Chat"))
    )
    row.get_by_role("link", name=first_message, exact=True).click()


def test_a_new_user_opens_the_roster_on_loopback_without_signing_in(
    page: Page, example_server: ServeProcess
) -> None:
    page.goto(example_server.url + "/")

    roster = page.get_by_role("table", name="Agents")
    for name in ["Desk Lead", "Researcher", "Reviewer", "Writer"]:
        expect(roster.get_by_role("link", name=name, exact=True)).to_be_visible()
    lead = roster.get_by_role("row").filter(has_text="Desk Lead")
    expect(lead).to_contain_text("planner")
    expect(lead).to_contain_text("Answers questions and coordinates the research desk's")
    expect(lead).to_contain_text("default")
    expect(page.get_by_text("Signed in as operator")).to_be_visible()
    expect(page.get_by_role("textbox", name="Token")).to_be_hidden()
    navigation = page.get_by_role("navigation")
    for name in NAVIGATION:
        expect(navigation.get_by_role("link", name=name, exact=True)).to_be_visible()
    screenshot(page, "agents")


def test_a_new_user_chats_with_the_research_desk_and_finds_the_session_again(
    page: Page, example_server: ServeProcess
) -> None:
    page.goto(example_server.url + "/")
    page.get_by_role("link", name="Chat with Desk Lead").click()
    expect(page.get_by_role("combobox", name="Agent")).to_have_value("default")
    send(page, "Please delegate this plan")

    expect(page.locator('[data-agent="default"]')).to_contain_text("The team finished.")
    root = page.get_by_role("tree").get_by_role("treeitem", name="default", exact=True)
    for name in SPECIALISTS:
        specialist = root.get_by_role("treeitem", name=name, exact=True)
        expect(specialist.locator(".status")).to_have_text("ok")
    expect(page.get_by_role("tree")).not_to_contain_text("null")  # an absent duration or task
    expect(page.locator(".pending")).to_have_count(0)  # the reply came: no "replying…" left
    session_id = page.url.split("session=")[1]

    page.get_by_role("navigation").get_by_role("link", name="Sessions").click()
    open_listed(page, session_id, "Please delegate this plan")
    expect(page.locator("article.from-user")).to_have_text(re.compile("Please delegate this plan$"))
    expect(page.locator('article.reply[data-agent="default"]')).to_contain_text(
        "The team finished."
    )


def test_a_token_typed_once_signs_the_tab_in_on_every_page(page: Page, desk: Desk) -> None:
    page.goto(desk.url + "/")
    expect(page.get_by_role("table", name="Agents")).to_have_count(0)

    page.get_by_role("textbox", name="Token").fill("not-a-valid-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("invalid credentials")
    page.get_by_role("textbox", name="Token").fill(OPERATOR_TOKEN)
    page.get_by_role("button", name="Sign in").click()

    expect(page.get_by_role("link", name="Desk Lead", exact=True)).to_be_visible()
    page.get_by_role("navigation").get_by_role("link", name="Chat").click()
    expect(page.get_by_text("Signed in as operator")).to_be_visible()
    expect(page.get_by_role("combobox", name="Agent")).to_have_value("default")
    expect(page.get_by_role("textbox", name="Token")).to_be_hidden()


def test_the_surface_of_an_agent_changes_when_a_claim_changes(page: Page, desk: Desk) -> None:
    sign_in(page, OPERATOR_TOKEN)
    page.goto(desk.url + "/console/agents/reviewer")
    expect(page.get_by_role("heading", name="Reviewer", level=1)).to_be_visible()
    claims = page.get_by_role("textbox", name="Claims")

    claims.fill("role=manager")
    page.get_by_role("button", name="Show surface").click()
    stores = page.get_by_role("heading", name="Stores").locator("xpath=following-sibling::*[1]")
    expect(stores).to_have_text("decisions (rw)")
    expect(page.get_by_text("Nothing: every declared resource is available.")).to_be_visible()

    claims.fill("role=viewer")
    page.get_by_role("button", name="Show surface").click()
    excluded = page.get_by_role("table", name="Excluded")
    row = excluded.get_by_role("row").filter(has_text="decisions")
    expect(row).to_contain_text("store")
    expect(row).to_contain_text(
        re.compile(r"predicate is_manager \(agents/reviewer/agent.py:\d+\) returned False")
    )
    expect(stores).to_have_text("none")
    expect(page.locator("pre.prompt").first).to_contain_text("You are the reviewer.")
    screenshot(page, "agent")


def test_a_reply_streams_in_carrying_the_agent_that_wrote_it(page: Page, desk: Desk) -> None:
    sign_in(page, ALICE_KEY)
    page.goto(desk.url + "/console/chat")
    # Record the reply's text each time it changes, to see it arrive in pieces.
    page.evaluate(
        """() => {
            window.seen = [];
            const watch = {subtree: true, childList: true, characterData: true};
            new MutationObserver(() => {
                const reply = document.querySelector('[data-agent] .text');
                if (reply) window.seen.push(reply.textContent);
                const pending = document.querySelector('#transcript .pending');
                if (pending && !reply) window.pending = pending.textContent;
            }).observe(document.getElementById('transcript'), watch);
        }"""
    )
    expect(page.get_by_text("A new session starts with your first message.")).to_be_visible()
    send(page, "Hello there")

    reply = page.locator('article[data-agent="default"]')
    expect(reply).to_contain_text("Hello from the desk. How can I help you today?")
    expect(reply).to_have_attribute("aria-busy", "false")
    # Before the first words, a sign that the reply is on its way; gone once they came.
    assert page.evaluate("window.pending") == "default is replying…"
    expect(page.locator("#transcript .pending")).to_have_count(0)
    seen = page.evaluate("window.seen")
    assert len(set(seen)) > 2 and seen[-1] == "Hello from the desk. How can I help you today?"
    assert re.search(r"\?session=[0-9a-f]{32}$", page.url)
    session_id = page.url.split("session=")[1]
    expect(page.get_by_role("link", name=session_id)).to_have_attribute(
        "href", f"/console/sessions/{session_id}"
    )
    screenshot(page, "chat")


def test_a_delegation_tree_shows_every_specialist_finishing(page: Page, desk: Desk) -> None:
    sign_in(page, OPERATOR_TOKEN)
    page.goto(desk.url + "/console/chat")
    # Record each specialist's status as the tree draws it, to see the tree grow live.
    page.evaluate(
        """() => {
            window.statuses = [];
            new MutationObserver(() => {
                for (const item of document.querySelectorAll('[role=treeitem][aria-level="2"]')) {
                    const status = item.querySelector('.status').textContent;
                    window.statuses.push(item.getAttribute('aria-label') + ' ' + status);
                }
            }).observe(document.getElementById('tree'), {subtree: true, childList: true});
        }"""
    )
    send(page, "Please delegate this plan")

    expect(page.locator('[data-agent="default"]')).to_contain_text("The team finished.")
    statuses = page.evaluate("window.statuses")
    for name in SPECIALISTS:
        seen = [status for status in statuses if status.startswith(f"{name} ")]
        assert seen[0] == f"{name} running" and seen[-1] == f"{name} ok", statuses
    tree = page.get_by_role("tree")
    root = tree.get_by_role("treeitem", name="default", exact=True)
    expect(root).to_contain_text("depth 0")
    for name in SPECIALISTS:
        item = root.get_by_role("treeitem", name=name, exact=True)
        expect(item.locator(".status")).to_have_text("ok")
        expect(item).to_contain_text("depth 1")
        expect(item).to_contain_text(f"{name}: part of the plan")
        expect(item.locator(".duration")).to_have_text(re.compile(r"^\d+(\.\d)? m?s$"))
    fold = page.locator("details.tool").filter(has_text="call_subagent")
    fold.locator("summary").click()
    expect(fold).to_contain_text("researcher finished")
    screenshot(page, "delegation")


def test_a_confirmation_approved_from_the_page_runs_the_tool_once(page: Page, desk: Desk) -> None:
    sign_in(page, ALICE_KEY)
    before = len(desk.charges())
    page.goto(desk.url + "/console/chat")
    send(page, "Please charge my card")

    expect(page.get_by_role("group", name="Approve charge?")).to_contain_text('"amount": 20')
    assert len(desk.charges()) == before
    screenshot(page, "confirmation")
    page.get_by_role("button", name="Approve").click()

    expect(page.locator('[data-agent="default"]').last).to_contain_text("Charged.")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_text("Approved.")).to_be_visible()
    assert desk.charges()[before:] == [{"amount": 20}]


def test_a_confirmation_left_waiting_is_approved_after_the_page_is_reloaded(
    page: Page, desk: Desk
) -> None:
    sign_in(page, ALICE_KEY)
    before = len(desk.charges())
    page.goto(desk.url + "/console/chat")
    send(page, "Please charge my card")
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    session_id = page.url.split("session=")[1]

    # The Sessions page shows the call waiting, and sends the person to Chat to decide.
    page.goto(f"{desk.url}/console/sessions/{session_id}")
    waiting = page.get_by_role("group", name="Approve charge?")
    expect(waiting).to_contain_text("Waiting for a decision (answer it in Chat).")
    page.get_by_role("link", name="Continue in Chat").click()

    # The stored log has no confirmation event: the page finds the call left unanswered.
    page.get_by_role("group", name="Approve charge?").get_by_role("button", name="Approve").click()
    expect(page.locator('[data-agent="default"]').last).to_contain_text("Charged.")
    assert desk.charges()[before:] == [{"amount": 20}]


def test_a_confirmation_denied_from_the_page_never_runs_the_tool(page: Page, desk: Desk) -> None:
    sign_in(page, ALICE_KEY)
    before = len(desk.charges())
    page.goto(desk.url + "/console/chat")
    send(page, "Please charge my card")

    page.get_by_role("button", name="Deny").click()

    expect(page.locator('[data-agent="default"]').last).to_contain_text("Not charged: you said no.")
    expect(page.locator("details.tool").filter(has_text="charge").locator(".status")).to_have_text(
        re.compile("^denied")
    )
    assert len(desk.charges()) == before


def test_ask_choice_is_answered_by_a_click(page: Page, desk: Desk) -> None:
    sign_in(page, BOB_KEY)
    page.goto(desk.url + "/console/chat")
    send(page, "Let me choose an invoice")

    question = page.get_by_role("group", name="Which invoice?")
    expect(question.get_by_role("button")).to_have_text(["INV-41", "INV-42"])
    question.get_by_role("button", name="INV-42").click()

    expect(page.locator("article.from-user").last).to_have_text(re.compile("INV-42$"))
    expect(page.locator('[data-agent="default"]').last).to_contain_text("You chose INV-42.")
    expect(question).to_contain_text("You chose: INV-42")


def test_picking_another_agent_hands_the_session_over_and_each_reply_keeps_its_agent(
    page: Page, desk: Desk
) -> None:
    sign_in(page, ALICE_KEY)
    page.goto(desk.url + "/console/chat")
    send(page, "Hello there")
    expect(page.locator('[data-agent="default"]')).to_contain_text("Hello from the desk.")

    page.get_by_role("combobox", name="Agent").select_option("researcher")
    send(page, "Over to you")

    expect(page.get_by_text("Handoff: default → researcher")).to_be_visible()
    researcher = page.locator('[data-agent="researcher"]')
    expect(researcher).to_contain_text("researcher finished")
    expect(researcher).to_have_attribute("aria-busy", "false")  # its `done` came: all logged
    page.reload()
    expect(page.get_by_role("combobox", name="Agent")).to_have_value("researcher")
    expect(page.locator("article.reply")).to_have_count(2)
    expect(page.locator("article.reply").first).to_have_attribute("data-agent", "default")
    expect(page.locator("article.reply").last).to_have_attribute("data-agent", "researcher")
    note = page.locator("details.handoff-note")
    note.locator("summary").click()
    expect(note).to_contain_text("[Agent handoff] default -> researcher")


def test_a_session_is_found_again_with_its_transcript_and_tree_after_a_reload(
    page: Page, desk: Desk
) -> None:
    sign_in(page, ALICE_KEY)
    page.goto(desk.url + "/console/chat")
    send(page, "Please delegate this plan")
    expect(page.locator('[data-agent="default"]')).to_contain_text("The team finished.")
    expect(page.locator('[data-agent="default"]')).to_have_attribute("aria-busy", "false")
    session_id = page.url.split("session=")[1]

    page.reload()  # the chat comes back from the session's log
    expect(page.locator("article.from-user")).to_have_text(re.compile("Please delegate this plan$"))
    expect(page.locator('[data-agent="default"]')).to_contain_text("The team finished.")
    expect(page.get_by_role("treeitem", name="writer")).to_contain_text("ok")

    page.get_by_role("navigation").get_by_role("link", name="Sessions").click()
    open_listed(page, session_id, "Please delegate this plan")
    page.reload()
    expect(page.get_by_role("heading", name="Transcript")).to_be_visible()
    expect(page.locator("article.from-user")).to_have_text(re.compile("Please delegate this plan$"))
    reply = page.locator('article.reply[data-agent="default"]')
    expect(reply).to_contain_text("The team finished.")
    root = page.get_by_role("treeitem", name="default", exact=True)
    expect(root).to_contain_text("Please delegate this plan")
    for name in SPECIALISTS:
        specialist = root.get_by_role("treeitem", name=name, exact=True)
        expect(specialist.locator(".status")).to_have_text("ok")
    screenshot(page, "session")


def test_a_reload_while_a_reply_streams_in_follows_the_turn_to_its_end(
    page: Page, desk: Desk, held_end: threading.Event
) -> None:
    sign_in(page, ALICE_KEY)
    page.goto(desk.url + "/console/chat")
    send(page, "Answer slowly, please")
    reply = page.locator('article.reply[data-agent="default"]')
    expect(reply).to_contain_text(SLOW_START)

    page.reload()  # the turn runs on: the log holds it so far, the page follows the rest
    expect(page.locator("article.from-user")).to_have_text(re.compile("Answer slowly, please$"))
    expect(reply).to_contain_text(SLOW_START)
    expect(reply).to_have_attribute("aria-busy", "true")
    expect(page.get_by_role("button", name="Send")).to_be_disabled()  # the session is busy
    session_id = page.url.split("session=")[1]
    listed = page.context.new_page()  # the session's own page, opened mid-turn, follows too
    sign_in(listed, ALICE_KEY)
    listed.goto(f"{desk.url}/console/sessions/{session_id}")
    listed_reply = listed.locator('article.reply[data-agent="default"]')
    expect(listed_reply).to_contain_text(SLOW_START)
    expect(listed_reply).to_have_attribute("aria-busy", "true")
    held_end.set()
    expect(reply).to_contain_text(SLOW_END)
    expect(reply).to_have_attribute("aria-busy", "false")
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    expect(listed_reply).to_contain_text(SLOW_END)
    expect(listed_reply).to_have_attribute("aria-busy", "false")
    root = page.get_by_role("treeitem", name="default", exact=True)
    expect(root.locator(".status").first).to_have_text("ok")
    expect(root.get_by_role("treeitem", name="researcher").locator(".status")).to_have_text("ok")


def test_an_end_user_lists_only_their_own_sessions(page: Page, desk: Desk) -> None:
    # Alice has a session of her own, whichever tests ran before this one.
    alices = page.request.post(
        desk.url + "/chat",
        data={"message": "Hello from alice", "stream": False},
        headers={"Authorization": f"Bearer {ALICE_KEY}"},
    )
    assert alices.ok, alices.text()
    sign_in(page, BOB_KEY)
    page.goto(desk.url + "/console/chat")
    send(page, "Hello from bob")
    expect(page.locator('[data-agent="default"]')).to_contain_text("Hello from the desk.")
    bobs = page.url.split("session=")[1]

    page.goto(desk.url + "/console/sessions")
    sessions = page.get_by_role("table", name="Sessions")
    # Each row names the session by its first message, with its agent and its time.
    mine = sessions.get_by_role("row").filter(
        has=page.get_by_role("link", name="Hello from bob", exact=True)
    )
    expect(mine).to_have_count(1)
    expect(mine.get_by_role("cell").nth(1)).to_have_text("default")
    expect(mine.get_by_role("cell").nth(2)).not_to_be_empty()
    expect(mine.get_by_role("link", name="Hello from bob")).to_have_attribute(
        "href", re.compile(f"/console/sessions/{bobs}$")
    )
    # Alice's sessions (same scope, another owner) are not listed.
    operator_view = page.request.get(
        desk.url + "/sessions?limit=100", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    ).json()["sessions"]
    bob_view = page.request.get(
        desk.url + "/sessions?limit=100", headers={"Authorization": f"Bearer {BOB_KEY}"}
    ).json()["sessions"]
    assert len(operator_view) > len(bob_view)
    expect(sessions.get_by_role("row")).to_have_count(len(bob_view) + 1)
    expect(sessions).not_to_contain_text("Hello from alice")
    screenshot(page, "sessions")


def test_an_operator_filters_the_documents_of_a_store(page: Page, desk: Desk) -> None:
    for number, subject in enumerate(["pricing", "hiring", "pricing"]):
        response = page.request.put(
            f"{desk.url}/stores/decisions/d{number}",
            data={"id": f"d{number}", "subject": subject},
            headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
        )
        assert response.ok, response.text()
    sign_in(page, OPERATOR_TOKEN)
    page.goto(desk.url + "/console/stores")

    expect(page.get_by_role("combobox", name="Store")).to_have_value("decisions")
    documents = page.get_by_role("table", name="Documents of decisions")
    expect(documents.get_by_role("row")).to_have_count(4)
    page.get_by_role("textbox", name="Filter").fill('{"subject": "pricing"}')
    page.get_by_role("button", name="Show documents").click()
    expect(documents.locator("tbody tr td:first-child")).to_have_text(["d0", "d2"])
    screenshot(page, "stores")


def test_an_end_user_never_sees_the_stores_page(page: Page, desk: Desk) -> None:
    sign_in(page, ALICE_KEY)
    page.goto(desk.url + "/")
    navigation = page.get_by_role("navigation")
    expect(navigation.get_by_role("link", name="Sessions")).to_be_visible()
    expect(navigation.get_by_role("link", name="Stores")).to_be_hidden()

    page.goto(desk.url + "/console/stores")

    refusal = page.get_by_text("Stores are for operators: this credential cannot read them.")
    expect(refusal).to_be_visible()
    expect(page.get_by_role("combobox", name="Store")).to_be_hidden()
    expect(page.get_by_text("decisions")).to_have_count(0)


def test_a_reply_or_a_description_holding_html_shows_as_text(page: Page, desk: Desk) -> None:
    sign_in(page, ALICE_KEY)
    page.goto(desk.url + "/")
    writer = page.get_by_role("row").filter(has_text="Writer")
    expect(writer).to_contain_text('Drafts <img src=x onerror="window.pwned=1"> texts.')

    page.goto(desk.url + "/console/chat")
    send(page, "Show me some html")

    reply = page.locator('[data-agent="default"] .text')
    expect(reply).to_have_text(HTML_REPLY)
    assert page.locator("[data-agent] script, [data-agent] img, [data-agent] b").count() == 0
    assert page.evaluate("window.pwned") is None


BROKEN_AGENT_JSON = '{\n  "description": "Answers.",\n  "tools": [\n}\n'  # line 4: no value


def test_a_broken_edit_shows_its_reload_error_on_health(
    page: Page, make_repo: Callable[..., Path], desk_model: ScriptedModel, tmp_path: Path
) -> None:
    repo = make_repo()
    server = ServeProcess(repo, server_environment(desk_model, tmp_path / "data"))
    try:
        server.wait_ready()
        page.goto(server.url + "/console/health")
        version = page.locator("dl.facts code")
        expect(version).to_have_text(re.compile(r"^[0-9a-f]{16}$"))
        good = version.inner_text()
        expect(page.get_by_text("None: the last reload succeeded.")).to_be_visible()

        staged = tmp_path / "agent.json"  # saved in one step, as editors do
        staged.write_text(BROKEN_AGENT_JSON)
        staged.replace(repo / "agents/default/agent.json")

        errors = page.locator("ul.errors li")
        expect(errors).to_have_count(1)
        expect(errors.first).to_have_text(re.compile(r"^agents/default/agent\.json:4: .+"))
        expect(page.get_by_text("The last reload failed; the bundle above keeps")).to_be_visible()
        expect(version).to_have_text(good)
        expect(page.get_by_text("No MCP servers are configured.")).to_be_visible()
        screenshot(page, "health")
    finally:
        stop(server)


def test_every_page_is_readable_at_375_pixels_wide(page: Page, desk: Desk) -> None:
    sign_in(page, OPERATOR_TOKEN)
    page.set_viewport_size({"width": 375, "height": 800})
    page.goto(desk.url + "/console/chat")
    send(page, "Please delegate this plan")
    expect(page.locator('[data-agent="default"]')).to_contain_text("The team finished.")
    session_id = page.url.split("session=")[1]
    screenshot(page, "chat-375px")

    pages = {
        "/": page.get_by_role("table", name="Agents"),
        "/console/agents/reviewer": page.locator("pre.prompt").first,
        f"/console/chat?session={session_id}": page.get_by_role("treeitem", name="writer"),
        "/console/sessions": page.get_by_role("table", name="Sessions"),
        f"/console/sessions/{session_id}": page.get_by_role("treeitem", name="writer"),
        "/console/memory": page.get_by_role("combobox", name="Agent"),
        "/console/stores": page.get_by_role("combobox", name="Store"),
        "/console/health": page.locator("dl.facts"),
    }
    for path, content in pages.items():
        page.goto(desk.url + path)
        expect(content).to_be_visible()
        navigation = page.get_by_role("navigation")
        for name in NAVIGATION:
            expect(navigation.get_by_role("link", name=name, exact=True)).to_be_in_viewport()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 375, f"{path} is {width} px wide at a 375 px viewport"


def test_a_chat_works_from_the_keyboard_alone(page: Page, desk: Desk) -> None:
    sign_in(page, ALICE_KEY)
    before = len(desk.charges())
    page.goto(desk.url + "/console/chat")
    expect(page.get_by_role("combobox", name="Agent")).to_have_value("default")

    focus_by_keys(page, "Tab", "textbox", "Message")
    page.keyboard.type("Please charge my card")
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    focus_by_keys(page, "Shift+Tab", "button", "Approve")
    page.keyboard.press("Enter")

    expect(page.locator('[data-agent="default"]').last).to_contain_text("Charged.")
    assert len(desk.charges()) == before + 1

    page.get_by_role("button", name="New chat").press("Enter")
    page.keyboard.type("Please delegate this plan")
    page.keyboard.press("Enter")
    expect(page.locator('[data-agent="default"]')).to_contain_text("The team finished.")
    expect(page.get_by_role("treeitem", name="reviewer").locator(".status")).to_have_text("ok")
    focus_by_keys(page, "Tab", "treeitem", "default")
    page.keyboard.press("ArrowDown")
    assert focused_label(page) == "researcher"
    page.keyboard.press("End")
    assert focused_label(page) == "reviewer"
    page.keyboard.press("Home")
    assert focused_label(page) == "default"


def focused_label(page: Page) -> str | None:
    label: str | None = page.evaluate("document.activeElement.getAttribute('aria-label')")
    return label


def focus_by_keys(page: Page, key: str, role: str, name: str, most: int = 40) -> None:
    """Press `key` until the element with this role and accessible name has the focus."""
    targets = page.get_by_role(role, name=name, exact=True)  # type: ignore[arg-type]
    for _ in range(most):
        page.keyboard.press(key)
        if targets.evaluate_all("all => all.includes(document.activeElement)"):
            return
    raise AssertionError(f"{key} never reached the {role} {name!r}")


def test_a_lost_stream_is_recovered_from_the_sessions_log(page: Page, desk: Desk) -> None:
    sign_in(page, ALICE_KEY)

    def cut_after_first_delta(route: Route) -> None:
        if route.request.method != "POST":  # the page itself, /console/chat
            route.continue_()
            return
        response = route.fetch()
        frames = response.text().split("\n\n")
        first_delta = next(i for i, f in enumerate(frames) if "\nevent: text_delta" in f)
        route.fulfill(response=response, body="\n\n".join(frames[: first_delta + 1]) + "\n\n")

    page.route("**/chat", cut_after_first_delta)
    page.goto(desk.url + "/console/chat")
    send(page, "Hello there")

    expect(page.get_by_text("The connection to this turn was lost")).to_be_visible()
    reply = page.locator('[data-agent="default"] .text')
    expect(reply).to_have_text("Hello from the desk. How can I help you today?")
    expect(page.locator("article.from-user")).to_have_count(1)
