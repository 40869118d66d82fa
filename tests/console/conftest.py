"""The console in a real browser: Chromium from the system's packages, driven by Playwright.

One browser per module and a fresh context (its own sessionStorage) per test.
Each test's page fails the test on any error in the browser's console. Servers are real
`amodal serve` processes over loopback, their model the scripted OpenAI-compatible
server, answering by what each request asks (`desk_model`).

Chromium is found at $AMODAL_CHROMIUM, else `chromium` on the PATH (Debian:
`apt-get install chromium`), else Playwright's own (`python -m playwright install
chromium`). A machine with none skips these tests, saying so, so that the README's test
command passes anywhere; `.ci/run` installs Chromium and sets AMODAL_REQUIRE_BROWSER=1,
which makes a missing browser a failure.
Screenshots of each page go to test-artifacts/console/ (kept by CI, ignored by git).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from runtime.testing import RecordedRequest, ScriptedModel, Step, reply, tool_call
from tests.conftest import EXAMPLE_FILES, PROJECT_ROOT, write_repo
from tests.console._load import busy_core, stress_seconds
from tests.server.conftest import ServeProcess

# Every wait is for a state (an element, a text, an attribute), bounded generously: on a
# loaded 2-core machine a page or a streamed reply took longer than Playwright's 5 s default
# for `expect`, and two tests failed that way. A state that comes early ends the wait early.
STATE_TIMEOUT_MS = 60_000
expect.set_options(timeout=STATE_TIMEOUT_MS)
ARTIFACTS = PROJECT_ROOT / "test-artifacts" / "console"
CHROMIUM_FLAGS = [
    "--no-sandbox",  # as root (CI containers) the sandbox cannot start
    "--disable-gpu",
    # No calls home: on a closed network their refused connections are noise.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

OPERATOR_TOKEN = "operator-token-0123456789abcdef"
ALICE_KEY = "key-alice-0123456789abcdef"  # a manager of scope acme
BOB_KEY = "key-bob-0123456789abcdef"  # a viewer of scope acme

CHARGE_HANDLER = """\
import json
import os
from pathlib import Path


async def handler(args, ctx):
    # Every run leaves a line, so a test can count how often the tool ran.
    with Path(os.environ["CHARGE_LOG"]).open("a") as log:
        log.write(json.dumps(args) + "\\n")
    return {"charged": args["amount"]}
"""

DESK_REPO: dict[str, Any] = {
    "amodal.json": {
        "name": "console-desk",
        "version": "1.0.0",
        "auth": {
            "apiKeys": [
                {
                    "key": "env:ALICE_KEY",
                    "claims": {"sub": "alice", "scope": "acme", "role": "manager"},
                },
                {"key": "env:BOB_KEY", "claims": {"sub": "bob", "scope": "acme", "role": "viewer"}},
            ]
        },
    },
    "agents/default/AGENT.md": "You lead the desk.\n",
    "agents/default/agent.json": {
        "name": "Desk Lead",
        "description": "Answers and delegates.",
        "role": "planner",
        "tools": ["charge"],
        "subagents": ["researcher", "writer", "reviewer"],
    },
    "agents/researcher/AGENT.md": "You are the researcher.\n",
    "agents/researcher/agent.json": {"name": "Researcher", "role": "researcher"},
    "agents/writer/AGENT.md": "You are the writer.\n",
    "agents/writer/agent.json": {
        "name": "Writer",
        "role": "builder",
        "description": 'Drafts <img src=x onerror="window.pwned=1"> texts.',
    },
    "agents/reviewer/AGENT.md": "You are the reviewer.\n",
    "agents/reviewer/agent.json": {"name": "Reviewer", "role": "reviewer"},
    "agents/reviewer/agent.py": (
        "def is_manager(ctx):\n"
        "    return ctx.claims['role'] == 'manager'\n\n\n"
        "agent = {'stores': {'decisions': {'mode': 'rw', 'conditional': is_manager}}}\n"
    ),
    "tools/charge/tool.json": {
        "description": "Charge the customer's card.",
        "confirm": True,
        "parameters": {
            "type": "object",
            "properties": {"amount": {"type": "number"}},
            "required": ["amount"],
            "additionalProperties": False,
        },
    },
    "tools/charge/handler.py": CHARGE_HANDLER,
    "stores/decisions.json": {
        "entity": {
            "name": "Decision",
            "key": "{id}",
            "schema": {"id": {"type": "string"}, "subject": {"type": "string"}},
        }
    },
}

HTML_REPLY = '<script>window.pwned = 2</script><img src=x onerror="window.pwned=3"> <b>bold</b>'
SPECIALISTS = ("researcher", "writer", "reviewer")
INVOICES = ["INV-41", "INV-42"]
SLOW_START = "Let me ask the researcher first."
SLOW_END = "The researcher has answered: here it is."
# The end of the desk's slow reply waits for this (the `held_end` fixture sets it when the
# test lets go): a reload lands mid-turn by a state, not by a race against a timer.
HELD_END = threading.Event()


def desk_answer(request: RecordedRequest) -> Step | str:
    """What the scripted model answers, by who asks (the system prompt) and what."""
    system = request.system or ""
    for name in SPECIALISTS:
        if f"You are the {name}." in system:
            return f"{name} finished"
    said = (request.last_user or "").lower()
    results = [m for m in request.messages[-1:] if m["role"] == "tool"]
    if "slowly" in said:
        if not results:
            calls = [{"subagent": "researcher", "task": "researcher: look it up"}]
            return tool_call("call_subagent", {"calls": calls}, text=SLOW_START)
        HELD_END.wait(STATE_TIMEOUT_MS / 1000)
        return reply(SLOW_END)
    if results:
        if "charge" not in said:
            return reply("The team finished.")
        denied = "denied" in results[0]["content"]
        return reply("Not charged: you said no." if denied else "Charged.")
    if "delegate" in said:
        calls = [{"subagent": name, "task": f"{name}: part of the plan"} for name in SPECIALISTS]
        return tool_call("call_subagent", {"calls": calls})
    if "charge" in said:
        return tool_call("charge", {"amount": 20})
    if "choose" in said:
        return tool_call("ask_choice", {"question": "Which invoice?", "options": INVOICES})
    if said.startswith("inv-"):
        return reply(f"You chose {said.upper()}.")
    if "html" in said:
        return reply(HTML_REPLY)
    return reply("Hello from the desk. How can I help you today?")


@pytest.fixture(scope="session", autouse=True)
def console_stress() -> Iterator[None]:
    """With `AMODAL_CONSOLE_STRESS=SECONDS`, every console test runs beside a busy core
    (tests/console/_load.py): how the tests are shown to hold on a loaded machine."""
    seconds = stress_seconds()
    if seconds is None:
        yield
        return
    with busy_core(seconds):
        yield


@pytest.fixture
def held_end() -> Iterator[threading.Event]:
    """Holds the end of the desk's slow reply until the test sets the event (or ends)."""
    HELD_END.clear()
    try:
        yield HELD_END
    finally:
        HELD_END.set()


@pytest.fixture(scope="session")
def desk_model() -> Iterator[ScriptedModel]:
    # A pause between streamed chunks, so a reply arrives in pieces as a real one does.
    with ScriptedModel(stream_delay=0.03) as model:
        model.respond(desk_answer)
        yield model


def server_environment(model: ScriptedModel, data: Path, **extra: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "sk-console-test",
        "MODEL_MAIN": "scripted",
        "AMODAL_DATA_DIR": str(data),
        **extra,
    }


class Desk:
    """The desk repo served with auth, and where its `charge` tool logs its runs."""

    def __init__(self, server: ServeProcess, charge_log: Path) -> None:
        self.server = server
        self.url = server.url
        self.charge_log = charge_log

    def charges(self) -> list[dict[str, Any]]:
        if not self.charge_log.exists():
            return []
        return [json.loads(line) for line in self.charge_log.read_text().splitlines()]


@pytest.fixture(scope="session")
def desk(tmp_path_factory: pytest.TempPathFactory, desk_model: ScriptedModel) -> Iterator[Desk]:
    root = tmp_path_factory.mktemp("desk")
    repo = write_repo(root / "repo", DESK_REPO)
    charge_log = root / "charges.log"
    environ = server_environment(
        desk_model,
        root / "data",
        AMODAL_OPERATOR_TOKEN=OPERATOR_TOKEN,
        ALICE_KEY=ALICE_KEY,
        BOB_KEY=BOB_KEY,
        CHARGE_LOG=str(charge_log),
    )
    server = ServeProcess(repo, environ, "--no-reload")
    try:
        server.wait_ready()
        yield Desk(server, charge_log)
    finally:
        stop(server)


@pytest.fixture(scope="session")
def example_server(
    tmp_path_factory: pytest.TempPathFactory, desk_model: ScriptedModel
) -> Iterator[ServeProcess]:
    """The research desk at the project's root, served as a new user serves it: no auth."""
    root = tmp_path_factory.mktemp("example")
    for name in EXAMPLE_FILES:
        source = PROJECT_ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root / name)
    server = ServeProcess(root, server_environment(desk_model, root / ".amodal-data"))
    try:
        server.wait_ready()
        yield server
    finally:
        stop(server)


def stop(server: ServeProcess) -> None:
    server.stop()


def chromium_path(playwright: Playwright) -> str:
    candidates = [
        os.environ.get("AMODAL_CHROMIUM"),
        shutil.which("chromium"),
        playwright.chromium.executable_path,
    ]
    found = next((path for path in candidates if path and Path(path).exists()), None)
    if found is None:
        missing = (
            "no Chromium for the console's browser tests: apt-get install chromium, "
            "python -m playwright install chromium, or set AMODAL_CHROMIUM to one"
        )
        if os.environ.get("AMODAL_REQUIRE_BROWSER") == "1":
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)
    return found


# Module scope: while Playwright's driver runs, it holds an event loop in this thread, and
# the async tests of other modules could not start theirs.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(
        executable_path=chromium_path(playwright), headless=True, args=CHROMIUM_FLAGS
    )
    yield browser
    browser.close()


class ConsoleErrors:
    """Errors the browser logged: messages of type error, and uncaught exceptions."""

    def __init__(self, page: Page) -> None:
        self.seen: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.seen.append(f"uncaught: {error}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.seen.append(f"{message.text} ({message.location.get('url')})")


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(STATE_TIMEOUT_MS)  # actions (click, fill) wait as long
    page = context.new_page()
    errors = ConsoleErrors(page)
    yield page
    context.close()
    assert errors.seen == [], "the browser logged errors:\n" + "\n".join(errors.seen)


def sign_in(page: Page, token: str) -> None:
    """Give the page a credential as if it had been typed once in this tab."""
    page.add_init_script(f"sessionStorage.setItem('amodal.token', {json.dumps(token)})")


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
