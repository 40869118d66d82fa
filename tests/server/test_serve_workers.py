"""`amodal serve --workers N` (SPEC 13): healthy even when a worker takes long to start."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from runtime.server.serve import WORKER_HEALTHCHECK_SECONDS
from runtime.testing.server_process import ServeProcess
from tests.server.test_several_servers import _worker_processes

SLOW_START = 12  # seconds: more than uvicorn's default health-ping timeout (5 s)


def test_a_worker_that_takes_long_to_start_is_waited_for_not_replaced(
    make_repo: Callable[..., Path], serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    # Every worker process sleeps before its interpreter gets to uvicorn, as one does
    # whose imports crawl on a loaded machine: until then it cannot answer a ping.
    slow = tmp_path / "slow-start"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(
        "import os, time\n"
        "if os.environ.get('AMODAL_SERVE_PARENT'):\n"
        f"    time.sleep({SLOW_START})\n"
    )
    path = os.pathsep.join(filter(None, [str(slow), os.environ.get("PYTHONPATH")]))
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "MODEL_MAIN": "scripted", "PYTHONPATH": path}
    server = serve(make_repo(), env, "--no-reload", "--workers", "2")
    server.wait_ready()
    first = _worker_processes(server)
    assert SLOW_START < WORKER_HEALTHCHECK_SECONDS
    # The same two workers keep serving: none was killed for answering its ping late.
    assert _worker_processes(server) == first
