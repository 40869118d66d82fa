"""Running an import over small source trees written for each test, and reading the result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime.importers import ImportReport, Outcome, import_claude_code, import_opencode
from runtime.importers.writer import expected_prompt
from runtime.repo import load_repo
from tests.conftest import write_repo


def run(kind: str, tmp_path: Path, files: dict[str, Any], **kwargs: Any) -> ImportReport:
    """Import `files` (written under tmp_path/src) into tmp_path/repo."""
    source = write_repo(tmp_path / "src", files) if files else tmp_path / "src"
    importer = import_claude_code if kind == "claude-code" else import_opencode
    return importer(source, tmp_path / "repo", **kwargs)


def outcome(report: ImportReport, source: str) -> Outcome:
    found = [item for item in report.outcomes if item.source == source]
    assert len(found) == 1, [item.source for item in report.outcomes]
    return found[0]


def config(tmp_path: Path, agent: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "repo/agents" / agent / "agent.json").read_text())
    return data


def warned(item: Outcome, *fragments: str) -> bool:
    """True when one warning holds every fragment."""
    return any(all(fragment in warning for fragment in fragments) for warning in item.warnings)


def assert_valid_and_faithful(report: ImportReport, source_root: Path) -> None:
    """The repo validates, and every imported prompt renders to its source body."""
    assert report.validation_errors == ()
    result = load_repo(report.target, offline=True)
    assert result.errors == (), [str(error) for error in result.errors]
    assert result.bundle is not None
    for item in report.outcomes:
        if item.kind != "agent" or item.name is None:
            continue
        agent = result.bundle.agents[item.name]
        body = _source_body(source_root, item.source)
        assert agent.prompt.render({}).rstrip() == expected_prompt(body), item.source


def _source_body(root: Path, source: str) -> str:
    from runtime.importers._source import read_jsonc, read_markdown

    path = root / source.split("#", 1)[0]
    if "#agent." in source:
        entry = read_jsonc(path, root)["agent"][source.split("#agent.", 1)[1]]
        prompt = str(entry["prompt"])
        if prompt.startswith("{file:"):
            return (path.parent / prompt[6:-1]).read_text()
        return prompt
    return read_markdown(path, root).body
