"""`amodal chat` and `amodal serve --help` through the real entry point, in a subprocess.

The subprocess inherits the scripted model from the environment (the
`scripted_model` fixture sets OPENAI_BASE_URL and MODEL_MAIN), and keeps its
database in AMODAL_DATA_DIR under tmp_path, so nothing lands in the repo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.testing import ScriptedModel
from runtime.testing.pytest_plugin import GUARD_API_KEY
from tests.conftest import CliResult

DESK = {
    "amodal.json": {"name": "desk", "version": "1.0.0"},
    "agents/default/AGENT.md": "You are the front desk. Route people well.\n",
    "agents/default/CONTEXT.md": (
        "{% if scope.page %}\nThe person is on the {{ scope.page }} page.\n{% endif %}\n"
    ),
    "agents/triage/AGENT.md": "You are Triage. Sort incoming questions by urgency.\n",
    "agents/triage/agent.json": {"tools": ["load_knowledge"]},
    "agents/billing/AGENT.md": "You are Billing. Answer invoice questions.\n",
    "knowledge/refunds.md": "# Refunds\n\nRefunds take five days.\n",
}

Chat = Callable[..., CliResult]


@pytest.fixture
def desk(make_repo: Callable[..., Path]) -> Path:
    return make_repo(DESK)


@pytest.fixture
def chat(amodal: Callable[..., CliResult], desk: Path, tmp_path: Path) -> Chat:
    """`amodal --repo DESK chat ARGS...` with its data directory in tmp_path."""

    def run(*args: str) -> CliResult:
        return amodal(
            "--repo", str(desk), "chat", *args, env={"AMODAL_DATA_DIR": str(tmp_path / "data")}
        )

    return run


def json_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def session_of(result: CliResult) -> str:
    events = json_lines(result.stdout)
    assert events[0]["type"] == "session", result.stdout
    return str(events[0]["session_id"])


def contents(messages: list[dict[str, Any]], role: str) -> list[str]:
    return [m["content"] for m in messages if m["role"] == role]


# ---------------------------------------------------------------- one turn


def test_one_turn_prints_the_streamed_reply_and_exits_0(
    chat: Chat, scripted_model: ScriptedModel, desk: Path
) -> None:
    scripted_model.reply("Hello from the scripted model.")
    result = chat("Hi there")
    assert result.code == 0, result.stderr
    assert result.stdout == "Hello from the scripted model.\n"
    assert "(session " in result.stderr
    assert scripted_model.requests[0].last_user == "Hi there"
    assert not (desk / ".amodal").exists()  # the database went to AMODAL_DATA_DIR


def test_json_prints_one_event_per_line_from_session_to_done(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Hello from the scripted model.")
    result = chat("--json", "Hi there")
    assert result.code == 0, result.stderr
    events = json_lines(result.stdout)
    assert events[0]["type"] == "session"
    assert events[0]["agent"] == "default" and events[0]["created"] is True
    assert events[-1]["type"] == "done" and events[-1]["reason"] == "model_stop"
    assert set(events[-1]["usage"]) == {"input", "output", "cached"}
    for event in events:
        assert {"type", "session_id", "run_id"} <= set(event), event
    assert len({e["session_id"] for e in events}) == 1
    text = "".join(e["text"] for e in events if e["type"] == "text_delta")
    assert text == "Hello from the scripted model."
    usage = next(e for e in events if e["type"] == "usage")
    assert usage["model"] == "scripted"


# ---------------------------------------------------------------- rooting


def test_agent_option_roots_the_chat_in_that_agent(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Urgent.")
    result = chat("--agent", "triage", "--json", "My invoice is wrong")
    assert result.code == 0, result.stderr
    assert json_lines(result.stdout)[0]["agent"] == "triage"
    system = scripted_model.requests[0].system or ""
    assert "You are Triage. Sort incoming questions by urgency." in system
    assert "front desk" not in system
    assert "load_knowledge" in scripted_model.requests[0].tools  # triage's declaration


def test_unknown_agent_exits_1_naming_the_known_agents_without_a_model_call(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    result = chat("--agent", "ghost", "hi")
    assert result.code == 1
    assert result.stdout == ""
    assert "unknown agent 'ghost'" in result.stderr
    for known in ("billing", "default", "triage"):
        assert known in result.stderr
    assert scripted_model.requests == []


def test_context_is_rendered_from_context_md_just_before_the_user_message(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Here is your invoice.")
    result = chat("--context", "page=invoices", "Which invoice is open?")
    assert result.code == 0, result.stderr
    messages = scripted_model.requests[0].messages
    assert messages[-1] == {"role": "user", "content": "Which invoice is open?"}
    assert messages[-2] == {"role": "system", "content": "The person is on the invoices page."}
    assert "invoices" not in messages[0]["content"]  # not in the session's prompt


def test_context_without_an_equals_sign_is_a_usage_error(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    result = chat("--context", "page", "hi")
    assert result.code == 2
    assert "write KEY=VALUE" in result.stderr
    assert scripted_model.requests == []


# ---------------------------------------------------------------- sessions


def test_session_option_continues_the_conversation(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Nice to meet you, Ada.").reply("Your name is Ada.")
    first = chat("--json", "My name is Ada.")
    assert first.code == 0, first.stderr
    session_id = session_of(first)

    second = chat("--session", session_id, "--json", "What is my name?")
    assert second.code == 0, second.stderr
    assert session_of(second) == session_id
    assert json_lines(second.stdout)[0]["created"] is False
    messages = scripted_model.requests[1].messages
    assert contents(messages, "user") == ["My name is Ada.", "What is my name?"]
    assert contents(messages, "assistant") == ["Nice to meet you, Ada."]


def test_unknown_session_exits_1_and_starts_no_new_session(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    result = chat("--session", "no-such-session", "hi")
    assert result.code == 1
    assert "unknown session 'no-such-session'" in result.stderr
    assert scripted_model.requests == []


def test_a_second_agent_on_the_session_reroots_with_the_handoff_note(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("This is a billing question.").reply("Your refund is on its way.")
    first = chat("--agent", "triage", "--json", "Where is my refund?")
    session_id = session_of(first)

    second = chat("--session", session_id, "--agent", "billing", "--json", "Any news?")
    assert second.code == 0, second.stderr
    events = json_lines(second.stdout)
    assert events[0]["agent"] == "billing"
    rerooted = [e for e in events if e["type"] == "agent"]
    assert [(e["from"], e["to"]) for e in rerooted] == [("triage", "billing")]

    request = scripted_model.requests[1]
    assert "You are Billing." in (request.system or "")
    users = contents(request.messages, "user")
    assert users[0] == "Where is my refund?" and users[-1] == "Any news?"
    note = users[-2].splitlines()
    assert note[0] == "[Agent handoff] triage -> billing"
    assert note[1] == "triage had tools that billing lacks: load_knowledge"
    assert "written by triage" in note[2]
    assert contents(request.messages, "assistant") == ["This is a billing question."]


def test_rerooting_in_text_mode_says_so_on_stderr(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("Noted.").reply("Billing here.")
    session_id = session_of(chat("--agent", "triage", "--json", "Hello"))
    result = chat("--session", session_id, "--agent", "billing", "Hello again")
    assert result.code == 0, result.stderr
    assert result.stdout == "Billing here.\n"
    assert "[triage -> billing]" in result.stderr


# ---------------------------------------------------------------- failures


def test_a_model_error_exits_1_with_the_error_on_stderr(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    scripted_model.error(400, "the request was refused")
    result = chat("hi")
    assert result.code == 1
    assert "model 'scripted'" in result.stderr
    assert "HTTP 400: the request was refused" in result.stderr
    assert f"127.0.0.1:{scripted_model.port}/v1" in result.stderr
    assert GUARD_API_KEY not in result.stderr + result.stdout
    assert len(scripted_model.requests) == 1  # a 400 is not retried


def test_a_model_error_in_json_mode_ends_with_an_error_event_and_done(
    chat: Chat, scripted_model: ScriptedModel
) -> None:
    scripted_model.error(400, "the request was refused")
    result = chat("--json", "hi")
    assert result.code == 1
    events = json_lines(result.stdout)
    assert [e["type"] for e in events] == ["session", "error", "done"]
    assert events[1]["code"] == "model_error"
    assert "HTTP 400: the request was refused" in events[1]["message"]
    assert events[-1]["reason"] == "error"


def test_an_invalid_repo_exits_1_with_its_errors_on_stderr(
    chat: Chat, desk: Path, scripted_model: ScriptedModel
) -> None:
    (desk / "agents/billing/agent.json").write_text('{"tols": []}', encoding="utf-8")
    (desk / "amodal.json").write_text('{"name": "desk"}', encoding="utf-8")
    result = chat("hi")
    assert result.code == 1
    assert result.stdout == ""
    assert "agents/billing/agent.json:1: tols: unknown key 'tols'" in result.stderr
    assert "amodal.json" in result.stderr and "version" in result.stderr
    assert "2 error(s): the repo is not valid" in result.stderr
    assert scripted_model.requests == []


# ---------------------------------------------------------------- interactive


def test_without_a_message_each_stdin_line_is_a_turn_of_one_session(
    desk: Path, tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("First answer.").reply("Second answer.")
    completed = subprocess.run(
        [str(Path(sys.executable).with_name("amodal")), "--repo", str(desk), "chat"],
        input="first question\nsecond question\n",
        env={**os.environ, "AMODAL_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == "First answer.\nSecond answer.\n"
    sessions = [line for line in completed.stderr.splitlines() if "(session " in line]
    assert len(sessions) == 2
    assert sessions[0].split("(session ")[1] == sessions[1].split("(session ")[1]
    second = scripted_model.requests[1].messages
    assert contents(second, "user") == ["first question", "second question"]
    assert contents(second, "assistant") == ["First answer."]


def test_slash_compact_summarises_the_session_in_the_interactive_chat(
    desk: Path, tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    for number in range(1, 4):
        scripted_model.reply(f"Answer {number}: " + "a long explanation " * 20)
    scripted_model.reply("A record: three questions were asked and answered.")  # the summary
    scripted_model.reply("Answer 4.")
    completed = subprocess.run(
        [str(Path(sys.executable).with_name("amodal")), "--repo", str(desk), "chat"],
        input="q1\nq2\nq3\n/compact the answers\nq4\n",
        env={**os.environ, "AMODAL_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert "(compacted: 2 log entries summarised" in completed.stderr  # q1 and its answer
    summariser = scripted_model.requests[3]
    assert "keep in particular: the answers" in (summariser.system or "")
    after = scripted_model.requests[4].messages
    assert "three questions were asked" in contents(after, "user")[0]
    assert contents(after, "user")[1:] == ["q2", "q3", "q4"]


# ---------------------------------------------------------------- serve


def test_serve_help_shows_host_port_and_no_reload(amodal: Callable[..., CliResult]) -> None:
    result = amodal("serve", "--help")
    assert result.code == 0
    for option in ("--host", "--port", "--no-reload"):
        assert option in result.stdout
    assert "127.0.0.1" in result.stdout and "8000" in result.stdout


# ---------------------------------------------------------------- --claim


GATED_AGENT_PY = (
    "def is_manager(ctx):\n    return ctx.claims.get('role') == 'manager'\n\n\n"
    "agent = {'tools': [{'name': 'load_knowledge', 'conditional': is_manager}]}\n"
)


def test_claims_reach_the_predicates_on_every_turn_of_the_session(
    chat: Chat, scripted_model: ScriptedModel, desk: Path
) -> None:
    (desk / "agents/triage/agent.json").unlink()
    (desk / "agents/triage/agent.py").write_text(GATED_AGENT_PY, encoding="utf-8")
    scripted_model.reply("Without the claim.").reply("With the claim.").reply("Again.")

    plain = chat("Hi", "--agent", "triage")
    claimed = chat("Hi", "--agent", "triage", "--claim", "role=manager", "--json")

    assert plain.code == 0 and claimed.code == 0, plain.stderr + claimed.stderr
    assert "load_knowledge" not in scripted_model.requests[0].tools
    assert "load_knowledge" in scripted_model.requests[1].tools
    session = session_of(claimed)
    again = chat("More", "--session", session, "--claim", "role=manager")
    assert again.code == 0, again.stderr
    assert "load_knowledge" in scripted_model.requests[2].tools


def test_a_claim_that_is_not_key_equals_value_is_a_usage_error(chat: Chat) -> None:
    result = chat("Hi", "--claim", "manager")
    assert result.code == 2
    assert "'manager': write KEY=VALUE" in result.stderr
