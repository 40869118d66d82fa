"""`amodal automations` as a user runs it: the list, a run that waits for its reply, and
pause/resume kept in the repo's database."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runtime.testing import ScriptedModel
from tests.automations._repo import FILES
from tests.conftest import CliResult

NIGHTLY = {"message": "Clean up.", "trigger": {"cron": "30 2 * * *", "timezone": "Asia/Tokyo"}}


def test_list_run_pause_and_resume(
    make_repo: Callable[..., Path],
    amodal: Callable[..., CliResult],
    scripted_model: ScriptedModel,
    tmp_path: Path,
):
    root = make_repo({**FILES, "automations/nightly.json": NIGHTLY})
    env = {"AMODAL_DATA_DIR": str(tmp_path / "data")}
    listed = amodal("--repo", str(root), "automations", "--json", env=env)
    assert listed.code == 0, listed.stderr
    by_name = {a["name"]: a for a in listed.json()}
    assert by_name["nightly"]["next_run"].endswith("T17:30:00+00:00")  # 02:30 in Tokyo
    assert by_name["digest"]["trigger"] == "manual" and by_name["digest"]["last_run"] is None

    scripted_model.reply("Digest: nothing new.")
    ran = amodal("--repo", str(root), "automations", "run", "digest", "--wait", env=env)
    assert ran.code == 0, ran.stderr
    assert ran.stdout.strip() == "Digest: nothing new."
    assert ": ok" in ran.stderr

    assert amodal("--repo", str(root), "automations", "pause", "nightly", env=env).code == 0
    table = amodal("--repo", str(root), "automations", env=env)
    assert table.code == 0, table.stderr
    nightly = next(line for line in table.stdout.splitlines() if line.startswith("nightly"))
    assert "paused" in nightly
    digest = next(line for line in table.stdout.splitlines() if line.startswith("digest"))
    assert "ok" in digest
    assert amodal("--repo", str(root), "automations", "resume", "nightly", env=env).code == 0
    listed = amodal("--repo", str(root), "automations", "--json", env=env).json()
    assert not next(a for a in listed if a["name"] == "nightly")["paused"]

    missing = amodal("--repo", str(root), "automations", "run", "nope", env=env)
    assert missing.code == 1 and "no automation 'nope'" in missing.stderr
