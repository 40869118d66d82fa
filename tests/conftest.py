"""Shared fixtures: agent repos written from dicts, and the CLI run as a user runs it."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The scripted OpenAI-compatible model server, the guard that fails any test whose
# model calls would reach a real endpoint, fresh PostgreSQL schemas, and chat harnesses.
pytest_plugins = [
    "runtime.testing.pytest_plugin",
    "tests._postgres",
    "tests._harness",
    "tests._http_api",
]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILES = (
    "amodal.json", "agents", "skills", "stores", "knowledge", "tools", "connections", "servers",
    "evals",
)  # fmt: skip

MINIMAL_REPO: dict[str, Any] = {
    "amodal.json": {"name": "test-repo", "version": "1.0.0"},
    "agents/default/AGENT.md": "You are a helpful assistant.\n",
}


def write_repo(root: Path, files: Mapping[str, Any]) -> Path:
    """Write `files` (relative path -> text, or a JSON-able value for .json files) under root.

    A value of None deletes the file if it exists.
    """
    for relative, content in files.items():
        path = root / relative
        if content is None:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if not isinstance(content, str):
            content = json.dumps(content, indent=2)
        path.write_text(content, encoding="utf-8")
    return root


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., Path]:
    """`make_repo({...})`: a minimal valid repo with these files added or replaced."""

    def make(files: Mapping[str, Any] | None = None, *, base: bool = True) -> Path:
        root = tmp_path / "repo"
        root.mkdir(exist_ok=True)
        if base:
            write_repo(root, MINIMAL_REPO)
        return write_repo(root, files or {})

    return make


def copy_example_repo(root: Path) -> Path:
    """Copy the example repo at the project root into `root` (created)."""
    root.mkdir(parents=True)
    for name in EXAMPLE_FILES:
        source = PROJECT_ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root / name)
    return root


@pytest.fixture
def example_repo(tmp_path: Path) -> Path:
    """A copy of the example repo at the project root, safe to edit."""
    return copy_example_repo(tmp_path / "example")


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def amodal() -> Callable[..., CliResult]:
    """Run the installed `amodal` entry point in a subprocess, as a user runs it."""

    def run(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> CliResult:
        executable = Path(sys.executable).with_name("amodal")
        completed = subprocess.run(
            [str(executable), *args],
            cwd=cwd,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
        )
        return CliResult(completed.returncode, completed.stdout, completed.stderr)

    return run


@pytest.fixture
def events(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], list[logging.LogRecord]]]:
    """The records of one structured event (`extra={"event": name}`) on the `amodal` logger."""
    # The CLI sets propagate=False when it configures its stderr handler; undo that in case
    # a CLI ran in this process, so caplog sees the records.
    monkeypatch.setattr(logging.getLogger("amodal"), "propagate", True)
    caplog.set_level(logging.INFO, logger="amodal")

    def records(name: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if getattr(r, "event", None) == name]

    yield records
