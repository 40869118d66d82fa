"""`amodal eval` through its real entry point, against the scripted model over loopback: a
new user's first suite, the reports for people and CI, kept runs and their comparison."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from junitparser import Error, Failure, JUnitXml

from runtime.evals.judge import JUDGE_PROMPT
from runtime.testing import RecordedRequest, ScriptedModel, Step, error

TRIAGE = """\
cases:
  - name: greets
    message: Hello!
    expect:
      reply_contains: hello
  - name: signs off
    message: Thanks, that is all.
    expect:
      reply_contains: Cheers
      max_tool_calls: 0
"""


def follows_the_prompt(request: RecordedRequest) -> Step | str:
    """Greets; signs off with `Cheers` only when the agent's prompt says so."""
    if request.last_user == "Hello!":
        return "Hello! How can I help?"
    if "sign off with 'Cheers'" in (request.system or ""):
        return "You're welcome. Cheers!"
    return "You're welcome."


@pytest.fixture
def new_repo(amodal: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`amodal init` with evals/triage.yaml; data kept in the repo's own .amodal/."""
    monkeypatch.delenv("AMODAL_DATA_DIR", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    root = tmp_path / "my-agents"
    assert amodal("init", str(root)).code == 0
    (root / "evals").mkdir()
    (root / "evals/triage.yaml").write_text(TRIAGE, encoding="utf-8")
    return root


def test_a_new_user_finds_the_failing_case_fixes_the_prompt_and_compares_the_runs(
    new_repo: Path, amodal: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(follows_the_prompt)

    first = amodal("eval", cwd=new_repo)

    assert first.code == 1, first.stderr
    assert "triage/greets" in first.stdout and "pass" in first.stdout
    assert "FAIL triage/signs off (0/1 passed, evals/triage.yaml:6)" in first.stdout
    assert (
        "  reply_contains: expected the reply to contain 'Cheers' (ignoring case); "
        'the reply was "You\'re welcome."' in first.stdout
    )
    assert "2 cases: 1 passed, 1 failed, 0 errors" in first.stdout

    prompt = new_repo / "agents/default/AGENT.md"
    prompt.write_text(prompt.read_text() + "Always sign off with 'Cheers'.\n", encoding="utf-8")
    second = amodal("eval", cwd=new_repo)

    assert second.code == 0, second.stdout + second.stderr
    assert "2 cases: 2 passed, 0 failed, 0 errors" in second.stdout
    runs = sorted(path.stem for path in (new_repo / ".amodal/evals").glob("*.json"))
    assert len(runs) == 2
    assert f"run {runs[1]} saved to .amodal/evals/{runs[1]}.json" in second.stdout

    better = amodal("eval", "--compare", "previous", "latest", cwd=new_repo)

    assert better.code == 0, better.stderr
    assert better.stdout.splitlines()[:2] == [
        line for line in better.stdout.splitlines()[:2] if line.startswith(("a: ", "b: "))
    ]
    assert f"a: {runs[0]} (" in better.stdout and f"b: {runs[1]} (" in better.stdout
    assert "regressed: none" in better.stdout
    assert "improved (1):\n  triage/signs off: failed (0/1) -> passed (1/1)" in better.stdout

    worse = amodal("eval", "--compare", runs[1], runs[0], cwd=new_repo)

    assert worse.code == 1
    assert "regressed (1):\n  triage/signs off: passed (1/1) -> failed (0/1)" in worse.stdout
    assert "reply_contains: expected the reply to contain 'Cheers'" in worse.stdout

    as_json = amodal("eval", "--compare", "previous", "latest", "--json", cwd=new_repo).json()

    assert as_json["a"] == runs[0] and as_json["b"] == runs[1]
    assert as_json["improved"] == [
        {
            "case": "triage/signs off",
            "before": {"status": "failed", "pass_rate": 0.0},
            "after": {"status": "passed", "pass_rate": 1.0},
        }
    ]
    assert (as_json["regressed"], as_json["unchanged"]) == ([], ["triage/greets"])


def test_json_prints_the_run_record_that_is_kept(
    new_repo: Path, amodal: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(follows_the_prompt)

    result = amodal("eval", "--json", cwd=new_repo)

    assert result.code == 1
    record = result.json()
    kept = new_repo / ".amodal/evals" / f"{record['id']}.json"
    assert json.loads(kept.read_text()) == record
    assert f"run {record['id']} saved to" in result.stderr
    assert record["repo"] == "my-agents" and record["models"] == ["scripted"]
    assert [(case["id"], case["status"], case["pass_rate"]) for case in record["cases"]] == [
        ("triage/greets", "passed", 1.0),
        ("triage/signs off", "failed", 0.0),
    ]
    attempt = record["cases"][1]["attempts"][0]
    assert attempt["replies"] == ["You're welcome."]
    assert attempt["failures"][0]["expectation"] == "reply_contains"
    assert record["usage"]["input"] > 0 and record["judge_usage"]["input"] == 0


JUDGED = """\
cases:
  - name: greets
    message: Hello!
    expect: {reply_contains: hello}
  - name: signs off
    message: Thanks, that is all.
    expect: {reply_contains: Cheers}
  - name: graded
    message: Grade me
    expect: {judge: The reply is polite.}
"""


def test_junit_output_is_read_by_a_junit_reader(
    new_repo: Path, amodal: Callable[..., Any], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    (new_repo / "evals/triage.yaml").write_text(JUDGED, encoding="utf-8")
    judge = "not a verdict"
    scripted_model.respond(
        lambda request: judge if request.system == JUDGE_PROMPT else follows_the_prompt(request)
    )
    report = tmp_path / "reports/junit.xml"

    result = amodal("eval", "--junit", str(report), cwd=new_repo)

    assert result.code == 1
    xml = JUnitXml.fromfile(str(report))
    assert (xml.tests, xml.failures, xml.errors) == (3, 1, 1)
    (suite,) = list(xml)
    assert (suite.name, suite.tests, suite.failures, suite.errors) == ("triage", 3, 1, 1)
    cases = {case.name: case for case in suite}
    assert set(cases) == {"greets", "signs off", "graded"}
    assert cases["greets"].is_passed and cases["greets"].classname == "triage"
    assert cases["greets"].system_out == "Hello! How can I help?"
    (failure,) = cases["signs off"].result
    assert isinstance(failure, Failure)
    assert failure.message.startswith("reply_contains: expected the reply to contain 'Cheers'")
    (error,) = cases["graded"].result
    assert isinstance(error, Error)
    assert "the judge answered twice without a verdict" in error.message
    assert all(case.time >= 0 for case in suite)


def test_the_judge_is_the_advanced_tier(
    new_repo: Path,
    amodal: Callable[..., Any],
    scripted_model: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (new_repo / "evals/triage.yaml").write_text(JUDGED, encoding="utf-8")
    monkeypatch.setenv("MODEL_ADVANCED", "grader")
    scripted_model.respond(
        lambda request: (
            '{"pass": true, "reason": "It is polite."}'
            if request.system == JUDGE_PROMPT
            else follows_the_prompt(request)
        )
    )

    result = amodal("eval", "--case", "graded", "--json", cwd=new_repo)

    assert result.code == 0, result.stdout + result.stderr
    models = {
        (request.system == JUDGE_PROMPT, request.model) for request in scripted_model.requests
    }
    assert models == {(False, "scripted"), (True, "grader")}
    (case,) = result.json()["cases"]
    judge = case["attempts"][0]["judge"]
    assert (judge["passed"], judge["reason"], judge["model"]) == (True, "It is polite.", "grader")
    assert result.json()["judge_usage"]["input"] > 0


def digest(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_an_eval_leaves_the_repos_own_data_untouched(
    new_repo: Path, amodal: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(follows_the_prompt)
    assert amodal("chat", "Hello!", cwd=new_repo).code == 0  # the repo's own session
    before = digest(new_repo / ".amodal")
    assert "amodal.db" in before

    result = amodal("eval", "--repeat", "2", cwd=new_repo)

    after = digest(new_repo / ".amodal")
    added = {name for name in after if name not in before}
    assert result.code == 1
    assert {name: after[name] for name in before} == before
    assert len(added) == 1 and next(iter(added)).startswith("evals/")


def test_runs_are_kept_in_the_data_dir_when_it_is_set(
    new_repo: Path, amodal: Callable[..., Any], scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    scripted_model.respond(follows_the_prompt)
    data = {"AMODAL_DATA_DIR": str(tmp_path / "data")}

    first = amodal("eval", "--case", "greets", cwd=new_repo, env=data)
    second = amodal("eval", "--compare", "latest", "latest", cwd=new_repo, env=data)

    assert first.code == 0, first.stdout + first.stderr
    assert len(list((tmp_path / "data/evals").glob("*.json"))) == 1
    assert not (new_repo / ".amodal").exists()
    assert second.code == 0 and "unchanged: 1" in second.stdout


def test_case_runs_only_the_cases_named(
    new_repo: Path, amodal: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    scripted_model.respond(follows_the_prompt)

    result = amodal("eval", "--case", "greets", "--json", cwd=new_repo)

    assert result.code == 0
    assert [case["id"] for case in result.json()["cases"]] == ["triage/greets"]
    assert [request.last_user for request in scripted_model.requests] == ["Hello!"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["triag"], "unknown suite 'triag' (did you mean 'triage'?); known suites: 'triage'"),
        (["--case", "greet"], "unknown case 'greet' (did you mean 'greets'?)"),
    ],
)
def test_an_unknown_suite_or_case_is_a_usage_error(
    new_repo: Path, amodal: Callable[..., Any], arguments: list[str], message: str
) -> None:
    result = amodal("eval", *arguments, cwd=new_repo)

    assert result.code == 2
    assert message in result.stderr


def test_an_invalid_suite_stops_before_any_case_runs(
    new_repo: Path, amodal: Callable[..., Any], scripted_model: ScriptedModel
) -> None:
    (new_repo / "evals/triage.yaml").write_text(TRIAGE.replace("max_tool_calls", "max_tool_cals"))

    result = amodal("eval", cwd=new_repo)

    assert result.code == 1
    assert result.stderr.startswith(
        "evals/triage.yaml:10: cases[1].expect.max_tool_cals: unknown key 'max_tool_cals' "
        "(did you mean 'max_tool_calls'?)"
    )
    assert scripted_model.requests == []
    assert not (new_repo / ".amodal/evals").exists()


def test_a_repo_without_suites_says_how_to_write_one(
    new_repo: Path, amodal: Callable[..., Any]
) -> None:
    (new_repo / "evals/triage.yaml").unlink()

    result = amodal("eval", cwd=new_repo)

    assert result.code == 1
    assert "no eval suites: write evals/<name>.yaml" in result.stderr


def test_compare_names_a_run_that_does_not_exist(
    new_repo: Path, amodal: Callable[..., Any]
) -> None:
    result = amodal("eval", "--compare", "20990101-000000-abcd", "latest", cwd=new_repo)

    assert result.code == 1
    assert "no run '20990101-000000-abcd'" in result.stderr
    assert "`latest`, `previous` or a run's .json file" in result.stderr


def test_compare_refuses_a_file_that_is_not_a_run(
    new_repo: Path, amodal: Callable[..., Any], tmp_path: Path
) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"id": "x"}')

    result = amodal("eval", "--compare", str(other), str(other), cwd=new_repo)

    assert result.code == 1
    assert "is not an eval run record" in result.stderr


class Alternating:
    """Replies `hello` to every other request (thread-safe: the server answers in threads)."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> str:
        with self.lock:
            self.count += 1
            return "hello" if self.count % 2 else "bye"


@pytest.mark.parametrize(
    ("minimum", "code", "result"),
    [
        ([], 1, "FAIL"),
        (["--min-pass-rate", "0.5"], 0, "pass"),
        (["--min-pass-rate", "0.75"], 1, "FAIL"),
    ],
)
def test_repeat_reports_pass_rates_and_min_pass_rate_decides(
    new_repo: Path,
    amodal: Callable[..., Any],
    scripted_model: ScriptedModel,
    minimum: list[str],
    code: int,
    result: str,
) -> None:
    scripted_model.respond(Alternating())

    ran = amodal("eval", "--case", "greets", "--repeat", "4", *minimum, cwd=new_repo)

    assert ran.code == code, ran.stdout + ran.stderr
    row = next(line for line in ran.stdout.splitlines() if "triage/greets" in line)
    assert result in row and "2/4" in row
    assert "4 attempts" in ran.stdout


def test_the_progress_bar_shows_on_a_terminal_only(
    new_repo: Path, scripted_model: ScriptedModel, amodal: Callable[..., Any]
) -> None:
    scripted_model.respond(follows_the_prompt)
    piped = amodal("eval", cwd=new_repo)
    master, terminal = pty.openpty()
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("amodal")), "eval"],
        cwd=new_repo,
        stdout=subprocess.PIPE,
        stderr=terminal,
        env={**os.environ, "COLUMNS": "100"},
    )
    os.close(terminal)
    shown = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            shown += chunk
        elif process.poll() is not None:
            break
    process.communicate(timeout=60)
    os.close(master)

    assert "2/2" in shown.decode(errors="replace")  # attempts done, of all
    assert "━" in shown.decode(errors="replace")  # the bar
    assert "━" not in piped.stderr


def test_a_model_set_up_that_cannot_work_stops_the_run_before_any_case(
    new_repo: Path, amodal: Callable[..., Any]
) -> None:
    # The endpoint is set (the test guard's) but MODEL_MAIN is not: no model name.
    result = amodal("eval", cwd=new_repo)

    assert result.code == 1
    assert result.stderr.startswith("Error: a model endpoint is configured")
    assert "set MODEL_MAIN" in result.stderr
    assert not (new_repo / ".amodal/evals").exists()


def test_compare_takes_no_suite_or_case(new_repo: Path, amodal: Callable[..., Any]) -> None:
    result = amodal("eval", "triage", "--compare", "previous", "latest", cwd=new_repo)

    assert result.code == 2
    assert "--compare reads two kept runs" in result.stderr


def on_a_terminal(cwd: Path, *args: str) -> str:
    """`amodal ARGS` with its stderr on a terminal (the progress bar shows): what it showed."""
    master, terminal = pty.openpty()
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("amodal")), *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=terminal,
        env={**os.environ, "COLUMNS": "100"},
    )
    os.close(terminal)
    shown = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            shown += chunk
        elif process.poll() is not None:
            break
    process.communicate(timeout=60)
    os.close(master)
    return shown.decode(errors="replace")


def test_a_retry_warning_prints_above_the_progress_bar_not_through_it(
    new_repo: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.enqueue(error(503, "busy"))
    scripted_model.respond(follows_the_prompt)

    shown = on_a_terminal(new_repo, "eval", "--concurrency", "1")

    [warning] = [line for line in shown.splitlines() if "model_retry" in line]
    assert warning.lstrip("\r\x1b[2K").startswith("amodal: warning: model_retry")
    assert "━" not in warning  # the bar is redrawn below it, never mixed into the line
    assert "2/2" in shown


def test_eval_runs_four_cases_at_once_on_a_configured_model_and_one_on_the_offline_one(
    new_repo: Path,
    scripted_model: ScriptedModel,
    amodal: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtime import load_bundle
    from runtime.cli.eval_output import uses_offline_model

    scripted_model.respond(follows_the_prompt)
    ran = amodal("eval", "--json", cwd=new_repo)
    assert json.loads(ran.stdout)["concurrency"] == 4
    bundle = load_bundle(new_repo)
    assert not uses_offline_model(bundle)  # the scripted model's endpoint is configured
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "MODEL_MAIN"):
        monkeypatch.delenv(name, raising=False)
    assert uses_offline_model(bundle)  # nothing configured: the offline model, one at a time
