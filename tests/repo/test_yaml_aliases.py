"""YAML alias bombs (SPEC 12): every YAML the runtime reads refuses aliases with path:line,
before anything is expanded (a 490-byte bomb once took 100 s and 3.7 GB)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.importers import import_claude_code, import_opencode
from runtime.repo import load_repo
from tests.conftest import write_repo

# Each level repeats the last ten times: small enough to expand here, and as refused as
# the nine-level one.
BOMB = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{b}: &{b} [{', '.join(['*' + a] * 10)}]" for a, b in zip("abc", "bcd", strict=True)]
)


def frontmatter(body: str) -> str:
    return f"---\ndescription: Reviews.\n{BOMB}\n---\n{body}"


@pytest.mark.parametrize(
    ("files", "path", "line"),
    [
        ({"agents/reviewer/AGENT.md": frontmatter("You review.\n")}, "agents/reviewer/AGENT.md", 4),
        (
            {
                "skills/triage/SKILL.md": "---\nname: triage\ndescription: Sort.\n"
                + BOMB
                + "\n---\nDo it.\n"
            },
            "skills/triage/SKILL.md",
            5,
        ),
        (
            {"evals/smoke.yaml": "cases:\n  - name: one\n    message: hi\n" + BOMB + "\n"},
            "evals/smoke.yaml",
            5,
        ),
    ],
)
def test_an_alias_is_refused_with_its_file_and_line(
    make_repo, files: dict[str, str], path: str, line: int
) -> None:
    result = load_repo(make_repo(files), environ={}, evals=True)
    found = [e for e in result.errors if e.file == path]
    assert found, [str(e) for e in result.errors]
    assert "YAML aliases" in found[0].message and found[0].line == line, str(found[0])


@pytest.mark.parametrize("importer", [import_claude_code, import_opencode])
def test_an_import_refuses_an_alias_in_frontmatter_and_says_where(tmp_path: Path, importer) -> None:
    folder = "agents" if importer is import_claude_code else ".opencode/agent"
    source = write_repo(tmp_path / "src", {f"{folder}/reviewer.md": frontmatter("You review.\n")})
    report = importer(source, tmp_path / "repo")
    [item] = [o for o in report.outcomes if o.source.endswith("reviewer.md")]
    assert item.status == "skipped"
    assert "YAML aliases" in (item.reason or "") and "line 3" in (item.reason or ""), item.reason
