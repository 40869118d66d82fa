"""automations/<name>.json|yaml (SPEC 23): what loads, and every problem reported with its
`path:line` while the repo and the other automations still load."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runtime.repo.loader import load_repo
from tests.conftest import CliResult

STORE = {
    "entity": {
        "name": "Digest",
        "key": "{run_id}",
        "schema": {"run_id": {"type": "string"}, "reply": {"type": "string", "nullable": True}},
    }
}
GOOD = {
    "agent": "default",
    "message": "Write the daily digest for {{ now }}.",
    "trigger": {"cron": "0 9 * * 1-5", "timezone": "Europe/Paris"},
    "deliver": [{"store": "digests"}, {"webhook": "https://example.com/hook"}],
}


def load(make_repo: Callable[..., Path], files: dict[str, Any], **env: str) -> Any:
    return load_repo(make_repo({"stores/digests.json": STORE, **files}), environ=env)


def test_a_good_automation_loads_with_its_schedule(make_repo):
    result = load(make_repo, {"automations/digest.json": GOOD})
    assert result.ok and not result.bundle.automation_errors
    digest = result.bundle.automations["digest"]
    assert (digest.trigger, digest.cron, digest.timezone) == ("cron", "0 9 * * 1-5", "Europe/Paris")
    assert digest.operator and not digest.write_enabled and digest.overlap == "skip"
    # 09:00 in Paris on a weekday is 08:00 UTC in December.
    after = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
    assert digest.next_slot(after) == datetime(2026, 12, 2, 8, 0, tzinfo=UTC)


def test_a_six_field_cron_has_a_leading_seconds_field_and_five_fields_stay_minutes(make_repo):
    every = {**GOOD, "trigger": {"cron": "*/20 * * * * *"}}
    result = load(make_repo, {"automations/often.json": every, "automations/digest.json": GOOD})
    assert not result.bundle.automation_errors
    often = result.bundle.automations["often"]
    at = datetime(2026, 12, 2, 1, 0, 25, 500, tzinfo=UTC)
    assert often.next_slot(at) == datetime(2026, 12, 2, 1, 0, 40, tzinfo=UTC)
    assert often.previous_slot(at) == datetime(2026, 12, 2, 1, 0, 20, tzinfo=UTC)
    assert often.previous_slot(at.replace(second=40, microsecond=7)) == at.replace(
        second=40, microsecond=0
    )
    minutely = {**GOOD, "trigger": {"cron": "* * * * *"}}
    each = load(make_repo, {"automations/minutely.json": minutely}).bundle
    assert each.automations["minutely"].previous_slot(at) == datetime(2026, 12, 2, 1, 0, tzinfo=UTC)


def test_a_cron_of_other_than_five_or_six_valid_fields_is_refused_saying_what_fits(make_repo):
    files = {
        f"automations/{name}.json": {**GOOD, "trigger": {"cron": cron}}
        for name, cron in {
            "seconds-out-of-range": "61 * * * * *",
            "seven": "0 0 9 * * * 2030",
            "four": "0 9 * *",
        }.items()
    }
    result = load(make_repo, files)
    assert result.ok and not result.bundle.automations
    messages = {e.file.split("/")[-1]: e.message for e in result.bundle.automation_errors}
    assert set(messages) == {"seconds-out-of-range.json", "seven.json", "four.json"}
    for message in messages.values():
        assert "invalid cron expression" in message and "leading seconds field" in message


def test_yaml_works_like_json(make_repo):
    text = (
        "message: Triage {{ payload }}\n"
        "as:\n  claims:\n    sub: bot\n"
        "trigger:\n  webhook:\n    secret: env:HOOK_SECRET\n"
        "overlap: queue\n"
    )
    result = load(make_repo, {"automations/triage.yaml": text}, HOOK_SECRET="s3cret")
    triage = result.bundle.automations["triage"]
    assert triage.trigger == "webhook" and triage.webhook_secret == "s3cret"
    assert not triage.operator and dict(triage.claims) == {"sub": "bot"}
    assert triage.overlap == "queue"


def test_each_broken_automation_is_reported_with_its_line_and_the_others_load(make_repo):
    files = {
        "automations/good.json": GOOD,
        "automations/unknown-agent.json": {**GOOD, "agent": "nobody"},
        "automations/bad-cron.json": {**GOOD, "trigger": {"cron": "61 * * * *"}},
        "automations/bad-zone.json": {**GOOD, "trigger": {"cron": "0 9 * * *", "timezone": "Mars"}},
        "automations/no-secret.json": {**GOOD, "trigger": {"webhook": {"secret": "env:MISSING"}}},
        "automations/inline-secret.json": {**GOOD, "trigger": {"webhook": {"secret": "hunter2"}}},
        "automations/bad-store.json": {**GOOD, "deliver": [{"store": "nope"}]},
        "automations/bad-template.json": {**GOOD, "message": "Hi {{ scope.user }"},
        "automations/unknown-var.json": {**GOOD, "message": "Hi {{ user }}"},
        "automations/typo.json": {**GOOD, "overlapp": "skip"},
    }
    result = load(make_repo, files)
    assert result.ok, "the repo is served without its broken automations"
    assert sorted(result.bundle.automations) == ["good"]
    found = {e.file.split("/")[-1].split(".")[0]: e for e in result.bundle.automation_errors}
    assert set(found) == {n.split("/")[1].removesuffix(".json") for n in files} - {"good"}
    assert "unknown agent 'nobody'" in found["unknown-agent"].message
    assert "invalid cron expression" in found["bad-cron"].message
    assert "unknown time zone 'Mars'" in found["bad-zone"].message
    assert "'MISSING' is not set" in found["no-secret"].message
    assert "env:NAME" in found["inline-secret"].message
    assert "unknown store 'nope'" in found["bad-store"].message
    assert "template syntax error" in found["bad-template"].message
    assert "unknown template variable 'user'" in found["unknown-var"].message
    assert "overlapp" in str(found["typo"])
    for error in found.values():
        assert error.line is not None, error  # every one of them points at its line


def test_a_missing_secret_is_only_checked_for_form_offline(make_repo):
    hook = {**GOOD, "trigger": {"webhook": {"secret": "env:MISSING"}}}
    root = make_repo({"stores/digests.json": STORE, "automations/hook.json": hook})
    assert "hook" in load_repo(root, environ={}, offline=True).bundle.automations
    assert "hook" not in load_repo(root, environ={}).bundle.automations


def test_amodal_validate_fails_on_a_broken_automation_naming_its_line(
    make_repo: Callable[..., Path], amodal: Callable[..., CliResult]
):
    broken = '{\n  "message": "hi",\n  "trigger": {"cron": "every day"}\n}\n'
    root = make_repo({"automations/daily.json": broken, "automations/fine.json": GOOD,
                      "stores/digests.json": STORE})  # fmt: skip
    result = amodal("--repo", str(root), "validate")
    assert result.code == 1
    assert "automations/daily.json:3" in result.stderr + result.stdout
    assert "invalid cron expression 'every day'" in result.stderr + result.stdout
    fixed = make_repo({"automations/daily.json": None})
    result = amodal("--repo", str(fixed), "validate")
    assert result.code == 0, result.stderr
    assert "1 automations" in result.stderr
