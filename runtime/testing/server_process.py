"""`ServeProcess` and `WorkerProcess`: `amodal serve` and `amodal worker` in a subprocess, as a
user runs them, for tests and benchmarks.

    environment = {"OPENAI_BASE_URL": model.base_url, "MODEL_MAIN": "scripted"}
    with ServeProcess(repo, environment) as server:
        server.wait_ready()
        httpx.post(f"{server.url}/chat", json={"message": "hi"})

It listens on a port the kernel picks (`--port 0`) and learns which from the line the
server prints when it binds: a free port picked first and bound by the server seconds
later (once it has imported and opened its database) could be taken in between by any
process on the machine. Its stderr is read as it comes (`output`), so a chatty server
never blocks on a full pipe.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

_SERVING = re.compile(r"^amodal: serving .* on http://[^ ]+:(\d+)")


class _AmodalProcess:
    """One `amodal COMMAND` process; its stderr read as it comes (`lines`), a line at a time
    through `_saw`."""

    def __init__(
        self,
        repo: Path,
        command: list[str],
        env: Mapping[str, str] | None,
        cpu: int | None,
    ) -> None:
        self.lines: list[str] = []
        """What the process printed on stderr so far."""

        def pin() -> None:
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})

        self.process = subprocess.Popen(
            [str(Path(sys.executable).with_name("amodal")), "--repo", str(repo), *command],
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=pin if cpu is not None else None,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            self._saw(line)
        self._ended()

    def _saw(self, line: str) -> None:
        """One line of stderr, as it comes."""

    def _ended(self) -> None:
        """Its stderr closed: it exited."""

    def wait(self, timeout: float) -> int:
        """Until the process exits by itself; its exit code (all its output is read)."""
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def stop(self) -> None:
        """Terminate it (kill it if it does not stop within 15 s) and read the rest."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ServeProcess(_AmodalProcess):
    """One `amodal serve` process; `args` are more command-line options (`--no-reload`,
    `--workers 2`, ...), `env` is added to this process's environment, `cpu` pins it."""

    def __init__(
        self,
        repo: Path,
        env: Mapping[str, str] | None = None,
        *args: str,
        cpu: int | None = None,
    ) -> None:
        self.port: int | None = None
        self._bound = threading.Event()
        super().__init__(repo, ["serve", "--port", "0", *args], env, cpu)

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("call wait_ready() first: the server picks its port as it starts")
        return f"http://127.0.0.1:{self.port}"

    def _saw(self, line: str) -> None:
        bound = _SERVING.match(line)
        if bound is not None and self.port is None:
            self.port = int(bound.group(1))
            self._bound.set()

    def _ended(self) -> None:
        self._bound.set()  # it exited: nobody waits for a port that will never come

    def wait_ready(self, timeout: float = 120) -> None:
        """Until `/health` answers 200. The deadline only bounds a server that hangs: one
        that fails exits, and that is seen at once; a start takes seconds on a busy machine."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._reader.join(timeout=5)
                raise RuntimeError(
                    f"amodal serve exited ({self.process.returncode}):\n{self.output}"
                )
            if self._bound.wait(timeout=0.05) and self.port is not None:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{self.url}/health", timeout=10).status_code == 200:
                        return
                time.sleep(0.05)
        raise RuntimeError(f"amodal serve did not answer /health within {timeout:g} s")


class WorkerProcess(_AmodalProcess):
    """One `amodal worker` process (no HTTP); `args` are more options (`--concurrency 2`)."""

    def __init__(
        self,
        repo: Path,
        env: Mapping[str, str] | None = None,
        *args: str,
        cpu: int | None = None,
    ) -> None:
        self._ready = threading.Event()
        super().__init__(repo, ["worker", *args], env, cpu)

    def _saw(self, line: str) -> None:
        if line.startswith("amodal: worker ready"):
            self._ready.set()

    def _ended(self) -> None:
        self._ready.set()

    def wait_ready(self, timeout: float = 120) -> None:
        """Until it says it takes queued turns."""
        if not self._ready.wait(timeout) or self.process.poll() is not None:
            self._reader.join(timeout=5)
            raise RuntimeError(f"amodal worker did not start:\n{self.output}")


__all__ = ["ServeProcess", "WorkerProcess"]
