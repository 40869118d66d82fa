"""glob_files and grep_files (SPEC 2, 12): the file tools' root and protections, bounded
results, and patterns that cannot hang a turn."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.testing import ScriptedModel
from runtime.tools import _search
from tests._harness import Harness
from tests.tools.test_files import call

pytestmark = pytest.mark.anyio

FILES = {
    "agents/default/agent.json": {"tools": ["glob_files", "grep_files", "read_file"]},
    "skills/secret/SKILL.md": "# Skill: Secret\nTODO: the skill's hidden text\n",
    "src/app.py": "def main():\n    # TODO: wire the CLI\n    return 0\n",
    "src/lib/util.py": "import os\nTODO = 'not a comment'\n",
    "src/lib/view.ts": "// TODO: types\nexport const x = 1;\n",
    "docs/guide.md": "# Guide\nNothing to do here.\n",
}


@pytest.fixture
async def repo(make_repo: Callable[..., Path], harness_for: Callable[[Path], Any]) -> Harness:
    return await harness_for(make_repo(FILES))  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("**/*.py", ["src/app.py", "src/lib/util.py"]),
        ("src/*.py", ["src/app.py"]),
        ("src/**/*.{py,ts}", ["src/app.py", "src/lib/util.py", "src/lib/view.ts"]),
        ("**/v?ew.[tj]s", ["src/lib/view.ts"]),
        ("*.md", []),
        ("docs/*.md", ["docs/guide.md"]),
        ("nowhere/**", []),
    ],
)
async def test_glob_finds_files_by_path_pattern(
    repo: Harness, scripted_model: ScriptedModel, pattern: str, expected: list[str]
) -> None:
    found = await call(repo, scripted_model, "glob_files", {"pattern": pattern})

    assert found["status"] == "ok"
    assert found["result"]["files"] == expected
    assert found["result"]["truncated"] is False


async def test_glob_and_grep_never_show_definitions_or_private_data(
    repo: Harness, scripted_model: ScriptedModel
) -> None:
    found = await call(repo, scripted_model, "glob_files", {"pattern": "**/*.md"})
    assert found["result"]["files"] == ["docs/guide.md"]  # not skills/secret/SKILL.md
    everything = await call(repo, scripted_model, "glob_files", {"pattern": "**"})
    assert not any(
        path.startswith(("agents/", "skills/", ".amodal/", "amodal.json"))
        for path in everything["result"]["files"]
    )
    grep = await call(repo, scripted_model, "grep_files", {"pattern": "hidden"})
    assert grep["result"]["matches"] == []


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("glob_files", {"pattern": "agents/**"}),
        ("glob_files", {"pattern": "../**"}),
        ("glob_files", {"pattern": "/etc/*"}),
        ("grep_files", {"pattern": "x", "path": "skills"}),
        ("grep_files", {"pattern": "x", "path": "amodal.json"}),
        ("grep_files", {"pattern": "x", "path": "../"}),
    ],
)
async def test_searching_a_protected_or_outside_path_is_refused(
    repo: Harness, scripted_model: ScriptedModel, tool: str, arguments: dict[str, str]
) -> None:
    refused = await call(repo, scripted_model, tool, arguments)

    assert refused["status"] == "error"
    assert "definitions" in refused["error"] or "root" in refused["error"]


async def test_grep_gives_file_line_and_text_of_each_match(
    repo: Harness, scripted_model: ScriptedModel
) -> None:
    found = await call(repo, scripted_model, "grep_files", {"pattern": r"TODO:"})

    assert found["result"]["matches"] == [
        {"path": "src/app.py", "line": 2, "text": "    # TODO: wire the CLI"},
        {"path": "src/lib/view.ts", "line": 1, "text": "// TODO: types"},
    ]


async def test_grep_narrows_by_path_and_glob_and_ignores_case_on_request(
    repo: Harness, scripted_model: ScriptedModel
) -> None:
    in_lib = await call(repo, scripted_model, "grep_files", {"pattern": "todo", "path": "src/lib"})
    assert in_lib["result"]["matches"] == []
    ignoring_case = await call(
        repo, scripted_model, "grep_files", {"pattern": "(?i)todo", "path": "src/lib"}
    )
    assert [m["path"] for m in ignoring_case["result"]["matches"]] == [
        "src/lib/util.py",
        "src/lib/view.ts",
    ]
    only_ts = await call(repo, scripted_model, "grep_files", {"pattern": "TODO", "glob": "*.ts"})
    assert [m["path"] for m in only_ts["result"]["matches"]] == ["src/lib/view.ts"]
    one_file = await call(
        repo, scripted_model, "grep_files", {"pattern": "^import", "path": "src/lib/util.py"}
    )
    assert one_file["result"]["matches"] == [
        {"path": "src/lib/util.py", "line": 1, "text": "import os"}
    ]


async def test_a_pathological_pattern_finishes_quickly_instead_of_hanging(
    repo: Harness, scripted_model: ScriptedModel
) -> None:
    root = repo.bundle.root
    (root / "src/evil.txt").write_text("a" * 200_000 + "!\n")

    found = await call(repo, scripted_model, "grep_files", {"pattern": r"(a+)+$"})
    globbed = await call(repo, scripted_model, "glob_files", {"pattern": "*a*a*a*a*a*a*a*b"})

    # A backtracking engine takes longer than the universe's age on these; RE2 is linear.
    assert found["status"] == "ok" and globbed["status"] == "ok"
    assert globbed["result"]["files"] == []


async def test_an_invalid_or_unsupported_regex_is_a_clear_error(
    repo: Harness, scripted_model: ScriptedModel
) -> None:
    broken = await call(repo, scripted_model, "grep_files", {"pattern": "(unclosed"})
    backreference = await call(repo, scripted_model, "grep_files", {"pattern": r"(a)\1"})

    assert broken["status"] == "error" and "invalid regular expression" in broken["error"]
    assert backreference["status"] == "error" and "no backreferences" in backreference["error"]


async def test_results_are_bounded_and_say_so(repo: Harness, scripted_model: ScriptedModel) -> None:
    root = repo.bundle.root
    (root / "many").mkdir()
    for index in range(250):
        (root / "many" / f"f{index:03}.txt").write_text("needle\n" * 3)

    globbed = await call(repo, scripted_model, "glob_files", {"pattern": "many/*.txt"})
    grepped = await call(repo, scripted_model, "grep_files", {"pattern": "needle"})

    assert len(globbed["result"]["files"]) == 200 and globbed["result"]["truncated"] is True
    assert len(grepped["result"]["matches"]) == 200 and grepped["result"]["truncated"] is True


async def test_binary_files_are_skipped_and_long_lines_cut(
    repo: Harness, scripted_model: ScriptedModel
) -> None:
    root = repo.bundle.root
    (root / "src/blob.bin").write_bytes(b"\0needle\0")
    (root / "src/long.txt").write_text("needle" + "x" * 1000 + "\n")

    found = await call(repo, scripted_model, "grep_files", {"pattern": "needle"})

    assert [m["path"] for m in found["result"]["matches"]] == ["src/long.txt"]
    assert len(found["result"]["matches"][0]["text"]) == 301


async def test_symlinks_are_followed_only_where_read_file_could_read(
    repo: Harness, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    root = repo.bundle.root
    outside = tmp_path / "outside.txt"
    outside.write_text("needle outside\n")
    os.symlink(outside, root / "src/escape.txt")
    os.symlink(root / "agents", root / "src/defs")
    os.symlink(root / "docs/guide.md", root / "src/guide-link.md")
    (root / "docs/guide.md").write_text("needle inside\n")

    found = await call(repo, scripted_model, "grep_files", {"pattern": "needle"})
    globbed = await call(repo, scripted_model, "glob_files", {"pattern": "src/**"})

    assert [m["path"] for m in found["result"]["matches"]] == [
        "docs/guide.md",
        "src/guide-link.md",
    ]
    assert "src/escape.txt" not in globbed["result"]["files"]
    assert not any(path.startswith("src/defs") for path in globbed["result"]["files"])


def test_walks_stop_at_the_visit_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for index in range(5):
        (tmp_path / f"{index}.txt").write_text("x")
    monkeypatch.setattr(_search, "MAX_VISITED_FILES", 3)
    walk = _search.Walk(tmp_path, lambda path: True)

    assert len(list(walk.files())) == 3
    assert walk.truncated is True


async def test_search_tools_are_offered_only_when_declared(
    make_repo: Callable[..., Path],
    harness_for: Callable[[Path], Any],
    scripted_model: ScriptedModel,
) -> None:
    h = await harness_for(make_repo({"agents/default/agent.json": {"tools": ["grep_files"]}}))
    scripted_model.reply("ok")
    await h.chat("hi")
    assert "grep_files" in scripted_model.requests[0].tools
    assert "glob_files" not in scripted_model.requests[0].tools
