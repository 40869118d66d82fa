"""Fixtures of the automation tests: a webhook receiver on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.automations._repo import Receiver, serve_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from serve_receiver()
