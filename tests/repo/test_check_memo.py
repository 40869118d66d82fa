"""The memo of checks that passed (runtime/repo/_checks.py): it saves work, never an error.

A template or a tool schema that passed its check in one process is not checked again
by the next (so `amodal validate` on an unchanged repo imports neither Jinja2 nor
jsonschema); anything that fails is checked every time, an edit is a new subject, and
new code (another runtime, an installed package) is a new memo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.repo._checks import _Memo

from ._helpers import load, only_error, valid

TEMPLATE = "You help.\n{% if scope.page %}On the {{ scope.page }} page.{% endif %}\n"
TOOL = {
    "tools/echo/tool.json": {
        "description": "Echo.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
    "tools/echo/handler.py": "async def handler(args: dict, ctx) -> dict:\n    return args\n",
}

_VALIDATE = """
import json, sys
from runtime.cli import main
code = 0
try:
    main(["validate"], prog_name="amodal")
except SystemExit as exit:
    code = exit.code or 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _validate(root: Path, cache: Path) -> tuple[int, set[str], str]:
    """`amodal validate` in a fresh interpreter with its memo in `cache`."""
    done = subprocess.run(
        [sys.executable, "-c", _VALIDATE],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "AMODAL_CACHE_DIR": str(cache), "AMODAL_NO_CACHE": ""},
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], set(report["modules"]), done.stdout


class _Counted:
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        self.runs = 0

    def __call__(self) -> list[str]:
        self.runs += 1
        return list(self.problems)


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AMODAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("AMODAL_NO_CACHE", raising=False)
    return tmp_path / "cache"


def _in_two_processes(subject: str, check: _Counted) -> tuple[list[str], list[str]]:
    first = _Memo()
    found = first.check("template", subject, check)
    first.flush()
    return found, _Memo().check("template", subject, check)


def test_a_check_that_passed_is_not_run_again_by_a_later_process(cache_dir: Path) -> None:
    check = _Counted([])

    assert _in_two_processes("{{ scope.page }}", check) == ([], [])
    assert check.runs == 1
    assert _Memo().check("template", "{{ scope.other }}", check) == []
    assert check.runs == 2  # another subject is checked


def test_a_check_that_found_a_problem_runs_every_time(cache_dir: Path) -> None:
    check = _Counted(["unknown template variable 'x'"])

    first, second = _in_two_processes("{{ x }}", check)

    assert first == second == ["unknown template variable 'x'"]
    assert check.runs == 2


def test_the_memo_forgets_what_passed_when_installed_code_changes(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    check = _Counted([])
    _in_two_processes("{{ scope.page }}", check)
    assert check.runs == 1

    (site / "jinja2-9.9.dist-info").mkdir()  # what installing a package does to its folder
    os.utime(site, ns=(1, 1))

    assert _Memo().check("template", "{{ scope.page }}", check) == []
    assert check.runs == 2


def test_no_memo_when_turned_off(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMODAL_NO_CACHE", "1")
    check = _Counted([])

    _in_two_processes("{{ scope.page }}", check)

    assert check.runs == 2
    assert not cache_dir.exists()


def test_an_unusable_memo_file_is_as_if_empty(cache_dir: Path) -> None:
    cache_dir.mkdir()
    memo = _Memo()
    check = _Counted([])
    memo.check("template", "{{ scope.page }}", check)
    memo.flush()
    [written] = cache_dir.iterdir()
    written.write_bytes(b"\xff\xfe not a digest\n" + b"0" * 31)  # torn and foreign lines

    assert _Memo().check("template", "{{ scope.page }}", check) == []
    assert check.runs == 2


def test_validate_of_an_unchanged_repo_skips_jinja2_and_jsonschema_and_an_edit_is_checked(
    make_repo, tmp_path: Path
) -> None:
    root = make_repo({"agents/default/AGENT.md": TEMPLATE, **TOOL})
    cache = tmp_path / "cache"

    first = _validate(root, cache)
    second = _validate(root, cache)

    assert first[0] == second[0] == 0, first[2] + second[2]
    assert {"jinja2", "jsonschema"} <= first[1]
    assert not {"jinja2", "jsonschema", "croniter"} & second[1]

    (root / "agents/default/AGENT.md").write_text(TEMPLATE.replace("scope.page }}", "page }}"))
    spec = json.loads((root / "tools/echo/tool.json").read_text())
    spec["parameters"]["properties"]["text"]["type"] = "text"  # not a JSON Schema type
    (root / "tools/echo/tool.json").write_text(json.dumps(spec, indent=2) + "\n")
    code, _, out = _validate(root, cache)

    assert code == 1
    assert "agents/default/AGENT.md:2: unknown template variable 'page'" in out
    assert "tools/echo/tool.json:" in out and "is not a valid JSON Schema" in out


def test_a_memoized_template_gives_the_same_bundle_and_a_broken_one_its_error(
    make_repo,
) -> None:
    root = make_repo({"agents/default/AGENT.md": TEMPLATE, **TOOL})
    cold = valid(load(root)).bundle
    again = valid(load(root)).bundle  # every check of this load passed before

    assert again.version == cold.version
    assert again.agents["default"].prompt.render({"page": "billing"}) == (
        "You help.\nOn the billing page."
    )
    assert again.tools["echo"].parameters() == cold.tools["echo"].parameters()

    (root / "agents/default/AGENT.md").write_text(TEMPLATE.replace("{% endif %}", ""))
    error = only_error(load(root))

    assert (error.file, error.line) == ("agents/default/AGENT.md", 2)
    assert "template syntax error" in error.message
