"""docs/automations.md says what is true: its example files load as written, and its signing
recipe makes a signature the webhook route accepts."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from runtime.automations import verified_payload
from runtime.repo.loader import load_repo
from tests.automations._repo import FILES
from tests.conftest import PROJECT_ROOT

PAGE = (PROJECT_ROOT / "docs/automations.md").read_text(encoding="utf-8")
EXAMPLE = re.compile(r"^`(automations/[^`]+)`\n```(?:json|yaml)\n(.*?)^```", re.M | re.S)


def test_every_example_file_of_the_page_loads(make_repo: Callable[..., Path]):
    examples = dict(EXAMPLE.findall(PAGE))
    assert sorted(examples) == ["automations/daily-digest.json", "automations/triage.yaml"]
    root = make_repo({**FILES, **examples})
    result = load_repo(root, environ={"TRIAGE_SECRET": "s"})
    assert result.ok and not result.bundle.automation_errors, result.bundle.automation_errors
    assert result.bundle.automations["daily-digest"].next_slot is not None
    assert result.bundle.automations["triage"].overlap == "queue"


def test_the_signing_recipe_makes_a_signature_the_route_accepts():
    code = re.search(r"^```python\n(.*?)^```", PAGE, re.M | re.S)
    assert code is not None
    scope: dict[str, object] = {}
    exec(code.group(1), scope)
    headers = {k.lower(): v for k, v in scope["headers"].items()}  # type: ignore[attr-defined]
    body = scope["body"]
    assert isinstance(body, bytes)
    payload = verified_payload("the-secret", headers, body, time.time())
    assert payload == {"ticket": 4711, "title": "Printer on fire"}
