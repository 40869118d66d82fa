"""Hot reload (SPEC 11): a running server sees edits on the next turn; a bad edit never
takes it down.

The watcher tests run a real `amodal serve` process (watching, as a person runs it) and
wait for a reload by polling `/health`; the rest drive `LiveBundle` in process.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
from watchfiles import Change

import runtime.repo.reload
from runtime.repo import load_repo
from runtime.repo.reload import LiveBundle, repo_filter, watch
from runtime.testing import RecordedRequest, ScriptedModel, Step, reply, tool_call
from tests.server.conftest import Api, ServeProcess

T = TypeVar("T")

BROKEN_AGENT_JSON = '{\n  "description": "Answers.",\n  "tools": [\n}\n'  # line 4: no value
BROKEN_AT = "agents/default/agent.json:4"
# The reload filter waits for quiet (debounce 50 ms): an edit the watcher accepts has
# long been picked up after this long. Only used where nothing can be polled: to show
# that something did *not* happen.
QUIET_SECONDS = 0.5


# ---------------------------------------------------------------- helpers


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 15.0) -> T:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def save(repo: Path, relative: str, text: str) -> None:
    """Replace a repo file in one step, as editors save: a watcher never sees it half written."""
    staged = repo.parent / "staged.tmp"  # outside the watched tree, on the same filesystem
    staged.write_text(text)
    staged.replace(repo / relative)


def health(server: ServeProcess) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/health", timeout=10)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def new_version(server: ServeProcess, old: str) -> str:
    """The bundle version once a reload replaced `old`."""

    def changed() -> str | None:
        version: str = health(server)["bundle_version"]
        return version if version != old else None

    return wait_for(changed, f"a reload replacing bundle {old}")


def chat(server: ServeProcess, **body: Any) -> dict[str, Any]:
    response = httpx.post(f"{server.url}/chat", json={"stream": False, **body}, timeout=30)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert answer["done_reason"] == "model_stop", answer
    return answer


def served_by(answer: dict[str, Any]) -> str:
    """The bundle version the turn announced in its `session` event."""
    session = answer["events"][0]
    assert session["type"] == "session"
    version: str = session["bundle_version"]
    return version


def started(serve: Callable[..., ServeProcess], repo: Path, *args: str, **env: str) -> ServeProcess:
    server = serve(repo, env, *args)
    server.wait_ready()  # the watcher is set up before the HTTP socket is bound
    return server


def stderr_of(server: ServeProcess) -> str:
    server.stop()
    return server.output


# ---------------------------------------------------------------- the watcher, end to end


def test_an_agent_md_edit_reaches_the_next_turns_prompt_and_the_turn_records_its_bundle(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    scripted_model: ScriptedModel,
) -> None:
    repo = make_repo({"agents/default/AGENT.md": "You are the first desk.\n"})
    server = started(serve, repo)
    scripted_model.reply("one")
    first = chat(server, message="hi")
    old = served_by(first)
    assert health(server)["bundle_version"] == old
    assert "first desk" in (scripted_model.requests[-1].system or "")

    save(repo, "agents/default/AGENT.md", "You are the second desk.\n")
    new = new_version(server, old)
    scripted_model.reply("two")
    second = chat(server, message="again", session_id=first["session_id"])

    system = scripted_model.requests[-1].system or ""
    assert "second desk" in system and "first desk" not in system
    assert served_by(second) == new
    events = httpx.get(f"{server.url}/sessions/{first['session_id']}").json()["events"]
    assert [e["bundle_version"] for e in events if e["type"] == "user"] == [old, new]
    assert health(server)["reload_error"] is None


def test_a_new_agent_directory_becomes_routable(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    scripted_model: ScriptedModel,
) -> None:
    repo = make_repo()
    server = started(serve, repo)
    refused = httpx.post(f"{server.url}/chat", json={"message": "hi", "agent": "writer"})
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "unknown_agent"
    old = health(server)["bundle_version"]

    (repo / "agents/writer").mkdir()
    save(repo, "agents/writer/AGENT.md", "You write crisp release notes.\n")
    new = new_version(server, old)
    scripted_model.reply("notes")
    answer = chat(server, message="hi", agent="writer")

    assert answer["agent"] == "writer" and served_by(answer) == new
    assert "crisp release notes" in (scripted_model.requests[-1].system or "")
    assert "writer" in [a["name"] for a in httpx.get(f"{server.url}/agents").json()]


def test_a_broken_edit_shows_on_health_while_chats_keep_the_last_good_bundle_until_fixed(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    scripted_model: ScriptedModel,
) -> None:
    repo = make_repo({"agents/default/AGENT.md": "You are the trusted desk.\n"})
    server = started(serve, repo)
    good = health(server)["bundle_version"]

    # Broken first, so that no reload can ever see the new prompt with a valid agent.json.
    save(repo, "agents/default/agent.json", BROKEN_AGENT_JSON)
    save(repo, "agents/default/AGENT.md", "You are the untested desk.\n")
    error = wait_for(lambda: health(server)["reload_error"], "reload_error on /health")
    assert BROKEN_AT in error and "invalid JSON" in error
    assert health(server)["bundle_version"] == good

    scripted_model.reply("still here")
    answer = chat(server, message="are you there?")
    assert served_by(answer) == good
    system = scripted_model.requests[-1].system or ""
    assert "trusted desk" in system and "untested desk" not in system

    save(repo, "agents/default/agent.json", '{"description": "Answers."}\n')
    fixed = new_version(server, good)
    assert health(server)["reload_error"] is None
    scripted_model.reply("new me")
    assert served_by(chat(server, message="and now?")) == fixed
    assert "untested desk" in (scripted_model.requests[-1].system or "")

    log = stderr_of(server)
    failed = [line for line in log.splitlines() if "reload_failed" in line]
    assert failed and all(BROKEN_AT in line for line in failed), log


PREDICATE = """\
def allowed(ctx):
    return ctx.claims.get("role") == {role!r}


agent = {{"tools": [{{"name": "load_knowledge", "conditional": allowed}}]}}
"""


def test_an_agent_py_edit_changes_predicate_results(
    make_repo: Callable[..., Path], serve: Callable[..., ServeProcess]
) -> None:
    repo = make_repo({"agents/default/agent.py": PREDICATE.format(role="manager")})
    server = started(serve, repo, MODEL_MAIN="scripted")  # no chat: the guard endpoint

    def tools(role: str) -> list[str]:
        response = httpx.get(
            f"{server.url}/agents/default/surface", params={"claim.role": role}, timeout=10
        )
        assert response.status_code == 200, response.text
        names: list[str] = response.json()["tools"]
        return names

    assert "load_knowledge" in tools("manager") and "load_knowledge" not in tools("admin")
    old = health(server)["bundle_version"]

    save(repo, "agents/default/agent.py", PREDICATE.format(role="admin"))
    new_version(server, old)

    assert "load_knowledge" not in tools("manager")  # no stale predicate answers
    assert "load_knowledge" in tools("admin")


LOAD_COUNTER = """\
from pathlib import Path

# Runs on every load of the repo: a reload counter outside the repo.
with Path({path!r}).open("a") as loads:
    loads.write("load\\n")

agent = {{"description": "Counts its loads."}}
"""


def test_the_servers_own_writes_trigger_no_reload(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    scripted_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    counter = tmp_path / "loads.log"
    repo = make_repo({"agents/default/agent.py": LOAD_COUNTER.format(path=str(counter))})
    (repo / ".git/objects/ab").mkdir(parents=True)
    # No AMODAL_DATA_DIR: the database lives in the repo, under .amodal/, as by default.
    server = started(serve, repo, AMODAL_DATA_DIR="")

    def loads() -> int:
        return len(counter.read_text().splitlines())

    started_with = loads()  # the CLI validates the repo, then serves it: two loads
    version = health(server)["bundle_version"]
    scripted_model.respond(lambda request: "ok")
    session = chat(server, message="one")["session_id"]
    for text in ("two", "three", "four"):
        chat(server, message=text, session_id=session)
    chat(server, message="a new session")
    assert (repo / ".amodal/amodal.db").is_file()  # the chats really wrote inside the repo
    (repo / ".amodal/notes.txt").write_text("server state\n")
    (repo / ".git/objects/ab/cdef0123").write_bytes(b"blob")
    (repo / ".git/index").write_bytes(b"index")
    (repo / "agents/default/__pycache__").mkdir()
    (repo / "agents/default/__pycache__/agent.cpython-311.pyc").write_bytes(b"\0")
    (repo / "README.md").write_text("Not a definition file.\n")
    time.sleep(QUIET_SECONDS)  # absence cannot be polled: give a wrong reload time to happen

    assert loads() == started_with
    state = health(server)
    assert (state["status"], state["bundle_version"], state["reload_error"], state["mcp"]) == (
        "ok",
        version,
        None,
        {},
    )
    # The watcher is alive all along: one edit it must see is one load more.
    save(repo, "agents/default/AGENT.md", "You are a counted helper.\n")
    new_version(server, version)
    assert loads() == started_with + 1
    assert "reload_failed" not in stderr_of(server)


def test_no_reload_does_not_watch_and_admin_reload_reloads_on_request(
    make_repo: Callable[..., Path],
    serve: Callable[..., ServeProcess],
    scripted_model: ScriptedModel,
) -> None:
    repo = make_repo({"agents/default/AGENT.md": "You are the pinned desk.\n"})
    server = started(serve, repo, "--no-reload")
    old = health(server)["bundle_version"]

    save(repo, "agents/default/AGENT.md", "You are the pulled desk.\n")
    time.sleep(QUIET_SECONDS)  # absence cannot be polled
    assert health(server)["bundle_version"] == old
    scripted_model.reply("pinned")
    chat(server, message="hi")
    assert "pinned desk" in (scripted_model.requests[-1].system or "")

    reloaded = httpx.post(f"{server.url}/admin/reload", timeout=30).json()
    assert reloaded["reloaded"] is True and reloaded["reload_error"] is None
    assert reloaded["bundle_version"] == health(server)["bundle_version"] != old
    scripted_model.reply("pulled")
    chat(server, message="hi")
    assert "pulled desk" in (scripted_model.requests[-1].system or "")

    save(repo, "agents/default/agent.json", BROKEN_AGENT_JSON)
    refused = httpx.post(f"{server.url}/admin/reload", timeout=30).json()
    assert refused["reloaded"] is False
    assert refused["bundle_version"] == reloaded["bundle_version"]
    assert BROKEN_AT in refused["reload_error"]
    assert health(server)["reload_error"] == refused["reload_error"]

    (repo / "agents/default/agent.json").unlink()
    again = httpx.post(f"{server.url}/admin/reload", timeout=30).json()
    assert again == reloaded  # the same files as then: the same version
    assert health(server)["reload_error"] is None


# ---------------------------------------------------------------- the filter


@pytest.mark.parametrize(
    "relative",
    [
        "amodal.json",
        "agents/default/AGENT.md",
        "agents/x/AGENT.md",
        "agents/x/agent.json",
        "agents/x/agent.py",
        "agents/new",
        "skills/triage/SKILL.md",
        "stores/notes.json",
        "knowledge/faq.md",
        "tools/charge/handler.py",
        "connections/crm/spec.json",
    ],
)
def test_the_filter_accepts_definition_files(tmp_path: Path, relative: str) -> None:
    accept = repo_filter(tmp_path / "repo", ignore=tmp_path / "data")
    assert accept(Change.modified, str(tmp_path / "repo" / relative))


@pytest.mark.parametrize(
    "relative",
    [
        ".amodal/amodal.db",
        ".amodal/amodal.db-wal",
        ".git/index",
        ".git/objects/ab/cdef",
        "agents/x/__pycache__/agent.cpython-311.pyc",
        "tools/charge/__pycache__/handler.cpython-311.pyc",
        "README.md",
        "amodal.json.swp",
        "pyproject.toml",
        "docs/reload.md",
        "runtime/chat.py",
        "",
    ],
)
def test_the_filter_rejects_everything_else(tmp_path: Path, relative: str) -> None:
    accept = repo_filter(tmp_path / "repo", ignore=tmp_path / "data")
    assert not accept(Change.modified, str(tmp_path / "repo" / relative))


def test_the_filter_rejects_the_data_directory_and_files_outside_the_repo(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    # A data directory inside a watched folder is still the server's own.
    accept = repo_filter(repo, ignore=repo / "knowledge/.db")
    assert not accept(Change.added, str(repo / "knowledge/.db/amodal.db"))
    assert accept(Change.added, str(repo / "knowledge/faq.md"))
    outside = repo_filter(repo, ignore=tmp_path / "data")
    assert not outside(Change.added, str(tmp_path / "data/amodal.db"))
    assert not outside(Change.added, str(tmp_path / "elsewhere/agents/x/AGENT.md"))
    assert not outside(Change.added, str(tmp_path / "repository/agents/x/AGENT.md"))


# ---------------------------------------------------------------- in process


def test_a_reload_of_unchanged_files_keeps_the_version_and_logs_nothing(
    make_repo: Callable[..., Path], events: Callable[[str], list[logging.LogRecord]]
) -> None:
    live = LiveBundle.load(make_repo())
    before = live()
    assert live.reload() is True
    assert live().version == before.version and live.reload_error is None
    assert events("reloaded") == [] and events("reload_failed") == []


def test_a_bad_reload_keeps_the_bundle_and_logs_every_error(
    make_repo: Callable[..., Path], events: Callable[[str], list[logging.LogRecord]]
) -> None:
    root = make_repo()
    live = LiveBundle.load(root)
    good = live()
    (root / "agents/default/agent.json").write_text(BROKEN_AGENT_JSON)
    (root / "amodal.json").write_text('{"name": "t", "version": "1", "modles": {}}')

    assert live.reload() is False
    assert live() is good
    assert sorted(error.file for error in live.errors) == [
        "agents/default/agent.json",
        "amodal.json",
    ]
    assert live.reload_error is not None and BROKEN_AT in live.reload_error
    [failed] = events("reload_failed")
    assert len(failed.__dict__["errors"]) == 2

    (root / "agents/default/agent.json").unlink()
    (root / "amodal.json").write_text('{"name": "t", "version": "2"}')
    assert live.reload() is True
    assert live.errors == () and live.reload_error is None
    assert [r.__dict__["version"] for r in events("reloaded")] == [live().version]


def test_a_repo_changing_under_the_loader_fails_the_reload_instead_of_raising(
    make_repo: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    events: Callable[[str], list[logging.LogRecord]],
) -> None:
    # `git checkout` can remove a folder between the loader listing it and reading it.
    root = make_repo()
    live = LiveBundle.load(root)
    good = live()
    gone = root.resolve() / "agents/writer"
    real_load = load_repo

    def racing(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError(2, "No such file or directory", str(gone))

    monkeypatch.setattr(runtime.repo.reload, "load_repo", racing)
    assert live.reload() is False
    assert live() is good
    assert live.reload_error is not None and live.reload_error.startswith("agents/writer: ")
    assert len(events("reload_failed")) == 1
    monkeypatch.setattr(runtime.repo.reload, "load_repo", real_load)
    assert live.reload() is True and live.reload_error is None


async def edited_until_reloaded(live: LiveBundle, root: Path) -> None:
    """Run `watch(live)` and edit AGENT.md under `root` until a reload swaps the bundle.

    Edits repeat because the first may come before the watcher task has started.
    """
    before = live().version
    async with anyio.create_task_group() as group:
        group.start_soon(watch, live)
        with anyio.fail_after(15):
            edit = 0
            while live().version == before:
                edit += 1
                (root / "agents/default/AGENT.md").write_text(f"You are edit {edit}.\n")
                await anyio.sleep(0.1)
        group.cancel_scope.cancel()
    assert live.reload_error is None


@pytest.mark.anyio
async def test_the_watcher_keeps_watching_after_a_reload_raised(
    make_repo: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_repo()
    live = LiveBundle.load(root)
    real_load = load_repo
    calls = 0

    def first_fails(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:  # as when a folder vanishes between listing and reading it
            raise FileNotFoundError(2, "No such file or directory", str(root / "agents/x"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(runtime.repo.reload, "load_repo", first_fails)
    await edited_until_reloaded(live, root)
    assert calls >= 2


@pytest.mark.anyio
@pytest.mark.parametrize("route", ["symlink", "dotdot"])
async def test_the_watcher_follows_a_repo_named_through_a_symlink_or_dotdot(
    make_repo: Callable[..., Path], tmp_path: Path, route: str
) -> None:
    repo = make_repo()
    if route == "symlink":
        root = tmp_path / "link"
        root.symlink_to(repo)
    else:  # `amodal --repo ../repo serve`
        (tmp_path / "elsewhere").mkdir()
        root = tmp_path / "elsewhere" / ".." / "repo"
    await edited_until_reloaded(LiveBundle.load(root), root)


ECHO_TOOL = {
    "tools/echo/tool.json": {"description": "Echo the arguments."},
    "tools/echo/handler.py": "async def handler(args, ctx):\n    return {'echo': args}\n",
    "agents/default/agent.json": {"tools": ["echo"]},
    "agents/default/AGENT.md": "You are the old desk.\n",
}


@pytest.mark.anyio
async def test_a_turn_in_flight_finishes_on_the_bundle_it_started_with(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    root = make_repo(ECHO_TOOL)
    api: Api = await api_for(root)
    live = api.runtime.live
    old = live().version
    arrived, swapped = threading.Event(), threading.Event()
    steps: list[Step] = [tool_call("echo", {"n": 1}, id="call_1"), reply("done")]

    def answer(request: RecordedRequest) -> Step:
        if len(scripted_model.requests) == 1:  # hold the turn's first call until the swap
            arrived.set()
            swapped.wait(15)
        return steps.pop(0)

    scripted_model.respond(answer)
    result: list[dict[str, Any]] = []

    async def first_turn() -> None:
        result.extend(await api.chat(message="hi"))

    async with anyio.create_task_group() as group:
        group.start_soon(first_turn)
        assert await anyio.to_thread.run_sync(arrived.wait, 15)
        (root / "agents/default/AGENT.md").write_text("You are the new desk.\n")
        (root / "agents/default/agent.json").write_text("{}")  # and the tool is gone
        assert await anyio.to_thread.run_sync(live.reload) is True
        new = live().version
        assert new != old
        swapped.set()

    # Both model calls of the running turn: the old prompt, the old tools.
    first_call, second_call = scripted_model.requests
    for request in (first_call, second_call):
        assert "old desk" in (request.system or "") and "echo" in request.tools
    assert next(e for e in result if e["type"] == "tool_result")["result"] == {"echo": {"n": 1}}
    assert result[0]["bundle_version"] == old and result[-1]["reason"] == "model_stop"
    session_id = result[0]["session_id"]
    events = (await api.client.get(f"/sessions/{session_id}")).json()["events"]
    assert {e["bundle_version"] for e in events} == {old}  # even those written after the swap

    scripted_model.respond(None)
    scripted_model.reply("new")
    second = await api.chat(message="again", session_id=session_id)
    assert second[0]["bundle_version"] == new
    assert "new desk" in (scripted_model.requests[-1].system or "")
    assert "echo" not in scripted_model.requests[-1].tools


@pytest.mark.anyio
async def test_a_session_whose_root_was_removed_re_roots_with_the_handoff_note(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    root = make_repo({"agents/writer/AGENT.md": "You write release notes.\n"})
    api: Api = await api_for(root)
    scripted_model.reply("writer here")
    first = await api.chat(message="hi", agent="writer")
    session_id = first[0]["session_id"]

    shutil.rmtree(root / "agents/writer")
    assert await anyio.to_thread.run_sync(api.runtime.live.reload) is True
    assert (await api.client.get("/agents/writer")).status_code == 404
    scripted_model.reply("default here")
    second = await api.chat(message="still there?", session_id=session_id)

    assert second[0]["agent"] == "default"
    handoff = next(e for e in second if e["type"] == "agent")
    assert (handoff["from"], handoff["to"]) == ("writer", "default")
    request = scripted_model.requests[-1]
    users = [m["content"] for m in request.messages if m["role"] == "user"]
    assert users[-2].startswith("[Agent handoff] writer -> default\n")
    assert users[-1] == "still there?"
    assert "release notes" not in (request.system or "")
    session = (await api.client.get(f"/sessions/{session_id}")).json()
    assert session["agent"] == "default"


@pytest.mark.anyio
async def test_a_reload_rebuilds_a_sessions_prompt_only_when_its_agent_changed(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    root = make_repo()
    api: Api = await api_for(root)
    live = api.runtime.live
    scripted_model.respond(lambda request: "ok")
    session_id = (await api.chat(message="one"))[0]["session_id"]

    # Another agent appears: the repo's version changes, default's prompt does not.
    (root / "agents/other/AGENT.md").parent.mkdir()
    (root / "agents/other/AGENT.md").write_text("You are someone else.\n")
    old = live().version
    assert await anyio.to_thread.run_sync(live.reload) is True and live().version != old
    await api.chat(message="two", session_id=session_id)
    (root / "agents/default/AGENT.md").write_text("You are a changed assistant.\n")
    assert await anyio.to_thread.run_sync(live.reload) is True
    await api.chat(message="three", session_id=session_id)

    one, two, three = (r.system or "" for r in scripted_model.requests)
    assert one == two and "changed assistant" in three
    events = (await api.client.get(f"/sessions/{session_id}")).json()["events"]
    assert [e["type"] for e in events].count("prompt") == 2
