"""The console's Automations page in Chromium (SPEC 17, 23): next runs, a run started from the
page whose `confirm` tool waits for an operator's Approve, last runs linked to sessions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from runtime.testing import ScriptedModel
from tests.conftest import write_repo
from tests.console.conftest import (
    ALICE_KEY,
    BOB_KEY,
    DESK_REPO,
    OPERATOR_TOKEN,
    screenshot,
    server_environment,
    sign_in,
    stop,
)
from tests.server.conftest import ServeProcess

AUTOMATIONS = {
    "automations/monthly.json": {
        "agent": "default",
        "message": "Please charge the monthly plan.",
        "trigger": {"manual": True},
    },
    "automations/nightly.json": {
        "message": "Tidy up.",
        "trigger": {"cron": "0 3 * * *", "timezone": "UTC"},
    },
}


class Served:
    def __init__(self, server: ServeProcess, charges: Path) -> None:
        self.url = server.url
        self.charge_log = charges

    def charges(self) -> list[dict[str, object]]:
        if not self.charge_log.exists():
            return []
        return [json.loads(line) for line in self.charge_log.read_text().splitlines()]


@pytest.fixture(scope="module")
def automated(
    tmp_path_factory: pytest.TempPathFactory, desk_model: ScriptedModel
) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("automated")
    repo = write_repo(root / "repo", {**DESK_REPO, **AUTOMATIONS})
    charges = root / "charges.log"
    environ = server_environment(
        desk_model,
        root / "data",
        AMODAL_OPERATOR_TOKEN=OPERATOR_TOKEN,
        ALICE_KEY=ALICE_KEY,
        BOB_KEY=BOB_KEY,
        CHARGE_LOG=str(charges),
    )
    server = ServeProcess(repo, environ, "--no-reload")
    try:
        server.wait_ready()
        yield Served(server, charges)
    finally:
        stop(server)


def test_an_operator_runs_an_automation_and_approves_its_charge_from_the_page(
    page: Page, automated: Served
) -> None:
    sign_in(page, OPERATOR_TOKEN)
    page.goto(automated.url + "/console/automations")
    schedules = page.get_by_role("table", name="Automations")
    nightly = schedules.get_by_role("row").filter(has_text="nightly")
    expect(nightly).to_contain_text("cron 0 3 * * * (UTC)")
    expect(nightly).to_contain_text("active")
    expect(page.get_by_text("Nothing is waiting.")).to_be_visible()

    page.get_by_role("button", name="Run monthly now").click()
    approval = page.get_by_role("group", name="Approve charge?")
    expect(approval).to_contain_text('"amount": 20')
    assert automated.charges() == []  # never run unattended
    runs = page.get_by_role("table", name="Runs")
    expect(runs.get_by_role("row").filter(has_text="monthly")).to_contain_text(
        "awaiting_confirmation"
    )
    screenshot(page, "automations")
    approval.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Nothing is waiting.")).to_be_visible()
    assert automated.charges() == [{"amount": 20}]

    runs.get_by_role("link", name="Open session").first.click()
    expect(page.get_by_text("Charged.")).to_be_visible()


def test_pause_and_resume_from_the_page(page: Page, automated: Served) -> None:
    sign_in(page, OPERATOR_TOKEN)
    page.goto(automated.url + "/console/automations")
    page.get_by_role("button", name="Pause nightly").click()
    nightly = (
        page.get_by_role("table", name="Automations").get_by_role("row").filter(has_text="nightly")
    )
    expect(nightly).to_contain_text("paused")
    page.reload()
    expect(nightly).to_contain_text("paused")  # kept in the database
    page.get_by_role("button", name="Resume nightly").click()
    expect(nightly).to_contain_text("active")


def test_an_end_user_is_told_the_page_is_for_operators(page: Page, automated: Served) -> None:
    sign_in(page, ALICE_KEY)
    page.goto(automated.url + "/console/automations")
    expect(page.get_by_text("Automations are for operators")).to_be_visible()
    navigation = page.get_by_role("navigation")
    expect(navigation.get_by_role("link", name="Automations", exact=True)).to_be_hidden()
