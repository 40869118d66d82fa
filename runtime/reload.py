"""The live bundle of a running server: swapped atomically by a good reload, kept by a bad one."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import anyio
from watchfiles import Change, awatch

from runtime.bundle import Bundle
from runtime.exceptions import DefinitionError
from runtime.repo import load_repo

logger = logging.getLogger("amodal")


class LiveBundle:
    """The newest good bundle of a repo, and the errors of the last failed reload."""

    def __init__(self, root: Path, bundle: Bundle, environ: Mapping[str, str] | None = None):
        self.root = root
        self._bundle = bundle
        self._environ = environ
        self._lock = threading.Lock()
        self.errors: tuple[DefinitionError, ...] = ()

    @classmethod
    def load(cls, root: Path, environ: Mapping[str, str] | None = None) -> LiveBundle:
        from runtime.repo import load_bundle

        return cls(root, load_bundle(root, environ=environ), environ)

    def __call__(self) -> Bundle:
        return self._bundle

    @property
    def reload_error(self) -> str | None:
        return "\n".join(str(error) for error in self.errors) or None

    def reload(self) -> bool:
        """Reload the repo; True when a good bundle is in place. Turns in flight keep theirs."""
        with self._lock:
            result = load_repo(self.root, environ=self._environ or os.environ)
            if result.bundle is None:
                self.errors = result.errors
                logger.error(
                    "reload_failed",
                    extra={"event": "reload_failed", "errors": [str(e) for e in result.errors]},
                )
                return False
            changed = result.bundle.version != self._bundle.version
            self._bundle, self.errors = result.bundle, ()
            if changed:
                logger.info(
                    "reloaded", extra={"event": "reloaded", "version": self._bundle.version}
                )
            return True


WATCHED = ("amodal.json", "agents", "skills", "stores", "knowledge", "tools", "connections")


def repo_filter(root: Path, ignore: Path | None = None) -> Callable[[Change, str], bool]:
    """Accept changes of the repo's definition files only: never `.amodal/`, `.git/`, the
    data directory or bytecode, so the server's own writes can never trigger a reload."""
    root = root.resolve()
    ignored = ignore.resolve() if ignore is not None else None

    def accept(change: Change, path: str) -> bool:
        resolved = Path(path)
        if ignored is not None and resolved.is_relative_to(ignored):
            return False
        try:
            parts = resolved.relative_to(root).parts
        except ValueError:
            return False
        return bool(parts) and parts[0] in WATCHED and "__pycache__" not in parts

    return accept


async def watch(live: LiveBundle, *, ignore: Path | None = None, debounce_ms: int = 50) -> None:
    """Reload `live` on every change of the repo's definition files, until cancelled."""
    async for _changes in awatch(
        live.root, watch_filter=repo_filter(live.root, ignore), debounce=debounce_ms, step=10
    ):
        await anyio.to_thread.run_sync(live.reload)
