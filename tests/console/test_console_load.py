"""`AMODAL_CONSOLE_STRESS`: the load the browser tests can be run under is real, bounded in
time, and refused with a clear message when the value is not a number of seconds."""

from __future__ import annotations

import os
import time

import pytest

from tests.console._load import MAX_SECONDS, busy_core, stress_seconds


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc (Linux)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_load_burns_a_core_and_is_killed_when_the_session_ends() -> None:
    with busy_core(600) as burner:
        # It burns: half a second of CPU, which a loaded machine may take a while to give.
        deadline = time.monotonic() + 60
        while cpu_seconds(burner.pid) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cpu_seconds(burner.pid) >= 0.5
        assert burner.poll() is None
    assert burner.returncode is not None  # killed at the end, long before its 600 s


def test_the_load_stops_by_itself_after_its_seconds() -> None:
    with busy_core(1) as burner:
        assert burner.wait(timeout=30) == 0


def test_unset_means_no_load_and_seconds_are_read() -> None:
    assert stress_seconds({}) is None
    assert stress_seconds({"AMODAL_CONSOLE_STRESS": ""}) is None
    assert stress_seconds({"AMODAL_CONSOLE_STRESS": "900"}) == 900


@pytest.mark.parametrize("value", ["ten", "-5", "0", "1.5", str(MAX_SECONDS + 1)])
def test_a_value_that_is_not_seconds_is_refused_with_the_fix(value: str) -> None:
    with pytest.raises(pytest.UsageError, match="AMODAL_CONSOLE_STRESS=900"):
        stress_seconds({"AMODAL_CONSOLE_STRESS": value})
