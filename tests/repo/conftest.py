"""Fixtures of the loader tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def store_file() -> dict[str, Any]:
    """The content of a valid `stores/<name>.json`, keyed by `{id}`."""
    return {
        "entity": {
            "name": "Note",
            "key": "note:{id}",
            "schema": {"id": {"type": "string"}, "text": {"type": "string"}},
        }
    }
