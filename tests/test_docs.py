"""The documentation's Python examples run as written (each block is a whole script), from a
copy of the example repo, against the scripted model over loopback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.testing import ScriptedModel
from tests.conftest import PROJECT_ROOT

RUNNABLE = ("docs/python-api.md", "docs/observability.md", "docs/evals.md")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def blocks() -> Iterator[tuple[str, int, str]]:
    for page in RUNNABLE:
        text = (PROJECT_ROOT / page).read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            yield page, line, match.group(1)


@pytest.mark.parametrize(("page", "line", "code"), list(blocks()), ids=lambda v: str(v)[:40])
def test_a_python_example_of_the_docs_runs(
    page: str, line: int, code: str, example_repo: Path, tmp_path: Path
) -> None:
    with ScriptedModel() as model:
        model.respond(lambda request: "Hello from the research desk.")
        env = {
            **os.environ,
            "OPENAI_BASE_URL": model.base_url,
            "MODEL_MAIN": "scripted",
            "AMODAL_DATA_DIR": str(tmp_path / "data"),
        }
        env.pop("DATABASE_URL", None)
        ran = subprocess.run(
            [sys.executable, "-c", code],
            cwd=example_repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert ran.returncode == 0, f"{page}:{line}\n{ran.stderr}"


def test_the_pages_have_examples() -> None:
    assert {page for page, _, _ in blocks()} == set(RUNNABLE)


def test_security_md_names_the_owner_the_operators_sessions_really_have() -> None:
    from runtime.surface.caller import OPERATOR_OWNER, Caller

    text = (PROJECT_ROOT / "docs/security.md").read_text(encoding="utf-8")
    section = text.split("## 3. ", 1)[1].split("\n## ", 1)[0]
    assert Caller(operator=True).owner == OPERATOR_OWNER
    assert f"owned by `{OPERATOR_OWNER!r}`".replace("'", '"') in section
    assert "@operator`)," not in section and "owner `@operator`" not in section
