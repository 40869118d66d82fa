"""A busy core for the browser tests (issue 30, item 4): `AMODAL_CONSOLE_STRESS=SECONDS`
makes the console tests run beside one CPU-burning process, the `stress`-like load of a
loaded machine, started by the test run itself and bounded in time twice over: the process
stops by itself after SECONDS, and the test session kills it when it ends first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest

STRESS_VARIABLE = "AMODAL_CONSOLE_STRESS"
MAX_SECONDS = 6 * 3600

# Spins until its deadline: one core fully busy, no memory, no output.
BURN = """\
import sys, time
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    pass
"""


def stress_seconds(environ: Mapping[str, str] = os.environ) -> int | None:
    """The seconds `AMODAL_CONSOLE_STRESS` asks for, None when unset or empty; a clear
    `pytest.UsageError` for anything but a whole number from 1 to `MAX_SECONDS`."""
    value = environ.get(STRESS_VARIABLE, "").strip()
    if not value:
        return None
    if not value.isdigit() or not 1 <= int(value) <= MAX_SECONDS:
        raise pytest.UsageError(
            f"{STRESS_VARIABLE}={value!r}: give the seconds the load may last, "
            f"a whole number from 1 to {MAX_SECONDS} (e.g. {STRESS_VARIABLE}=900)"
        )
    return int(value)


@contextmanager
def busy_core(seconds: int) -> Iterator[subprocess.Popen[bytes]]:
    """One process burning a core for at most `seconds`, killed when the block ends."""
    burner = subprocess.Popen([sys.executable, "-c", BURN, str(seconds)])
    try:
        yield burner
    finally:
        if burner.poll() is None:
            burner.kill()
        burner.wait()
