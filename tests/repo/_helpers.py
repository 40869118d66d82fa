"""Assertions shared by the loader tests: find the findings about one file, and where a text is."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from runtime import DefinitionError, DefinitionWarning, LoadResult, load_repo

TOP_LEVEL = {"amodal.json", "agents", "skills", "stores", "knowledge", "tools", "connections"}


def load(
    root: Path, *, environ: Mapping[str, str] | None = None, offline: bool = False
) -> LoadResult:
    """`load_repo` with an empty environment unless the test gives one."""
    return load_repo(root, environ={} if environ is None else environ, offline=offline)


def errors_in(result: LoadResult, file: str) -> list[DefinitionError]:
    return [error for error in result.errors if error.file == file]


def warnings_in(result: LoadResult, file: str) -> list[DefinitionWarning]:
    return [warning for warning in result.warnings if warning.file == file]


def only_error(result: LoadResult, file: str | None = None) -> DefinitionError:
    """The one error of an invalid repo (of `file`, when given), failing on any other count."""
    assert result.bundle is None, "a repo with an error must not give a bundle"
    found = list(result.errors) if file is None else errors_in(result, file)
    assert len(found) == 1, "\n".join(str(error) for error in result.errors) or "no errors"
    return found[0]


def valid(result: LoadResult) -> LoadResult:
    """The result, after checking it is a valid repo (showing the errors when it is not)."""
    assert result.errors == (), "\n".join(str(error) for error in result.errors)
    assert result.bundle is not None
    return result


def line_of(path: Path, text: str, occurrence: int = 1) -> int:
    """The 1-based line of the `occurrence`-th line of `path` that contains `text`."""
    matches = [
        number
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if text in line
    ]
    assert len(matches) >= occurrence, f"{text!r} is not in {path}"
    return matches[occurrence - 1]


def check_findings(result: LoadResult) -> None:
    """A load result keeps its promises: a bundle exactly when there is no error, and every
    finding points at a repo file and prints."""
    assert isinstance(result, LoadResult)
    assert (result.bundle is None) == bool(result.errors), "a bundle exactly when there is no error"
    for finding in (*result.errors, *result.warnings):
        assert isinstance(finding, DefinitionError | DefinitionWarning)
        assert finding.file and not finding.file.startswith("/")
        assert finding.file.split("/")[0] in TOP_LEVEL, finding
        assert finding.line is None or finding.line >= 1, finding
        assert finding.message
        str(finding)  # every finding prints
    assert all(isinstance(error, DefinitionError) for error in result.errors)
