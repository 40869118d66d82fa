"""The live bundle of a running server: swapped atomically by a good reload, kept by a bad one."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import anyio
from watchfiles import Change, awatch

from runtime.exceptions import DefinitionError, InvalidRepoError
from runtime.repo import LoadCache, load_repo
from runtime.repo.bundle import Bundle

logger = logging.getLogger("amodal")


class LiveBundle:
    """The newest good bundle of a repo, and the errors of the last failed reload."""

    def __init__(self, root: Path, bundle: Bundle, environ: Mapping[str, str] | None = None):
        self.root = root
        self._bundle = bundle
        self._environ = environ
        self._lock = threading.Lock()
        # Each reload re-parses only the agents, skills, stores... whose files changed.
        self._cache = LoadCache()
        self.errors: tuple[DefinitionError, ...] = ()
        self.failed_reloads = 0
        """How many reloads failed since start (for `/metrics`)."""
        self.on_reload: Callable[[bool], None] | None = None
        """Hears whether each reload put a good bundle in place."""

    @classmethod
    def load(cls, root: Path, environ: Mapping[str, str] | None = None) -> LiveBundle:
        cache = LoadCache()
        result = load_repo(root, environ=environ, cache=cache)
        if result.bundle is None:
            raise InvalidRepoError(result.errors, result.warnings)
        live = cls(root, result.bundle, environ)
        live._cache = cache  # the first reload reuses what this load parsed
        return live

    def __call__(self) -> Bundle:
        return self._bundle

    @property
    def reload_error(self) -> str | None:
        return "\n".join(str(error) for error in self.errors) or None

    def reload(self) -> bool:
        """Reload the repo; True when a good bundle is in place. Turns in flight keep theirs."""
        ok = self._reload()
        if not ok:
            self.failed_reloads += 1
        if self.on_reload is not None:
            self.on_reload(ok)
        return ok

    def _reload(self) -> bool:
        with self._lock:
            try:
                result = load_repo(
                    self.root, environ=self._environ or os.environ, cache=self._cache
                )
            except Exception as error:
                # The loader reports every problem *in* the repo as a finding; it raises only
                # when the tree changes under it (a folder removed between listing and
                # reading it, as `git checkout` does) or on a loader bug. Neither may take a
                # serving process down: keep the last good bundle, as for a bad edit.
                self.errors = (_unreadable(self.root, error),)
                logger.error(
                    "reload_failed",
                    extra={"event": "reload_failed", "errors": [str(self.errors[0])]},
                    exc_info=not isinstance(error, OSError),  # a race needs no traceback
                )
                return False
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


def _unreadable(root: Path, error: Exception) -> DefinitionError:
    where = "."
    if isinstance(error, OSError) and error.filename:
        path = Path(os.fsdecode(error.filename))
        if path.is_relative_to(root.resolve()):
            where = path.relative_to(root.resolve()).as_posix()
    return DefinitionError(
        where, f"reading the repo failed: {error} (the next change, or POST /admin/reload, retries)"
    )


WATCHED = (
    "amodal.json",
    "agents",
    "skills",
    "stores",
    "knowledge",
    "tools",
    "connections",
    "automations",
)


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


async def watch(
    live: LiveBundle,
    *,
    ignore: Path | None = None,
    debounce_ms: int = 50,
    on_reload: Callable[[], None] | None = None,
) -> None:
    """Reload `live` on every change of the repo's definition files, until cancelled;
    `on_reload` runs in the event loop after each reload (the runtime's MCP servers)."""
    # Watch the resolved root: the watcher reports paths under the path it was given, and
    # one given as `../repo` or through a symlink would never match the filter's root.
    root = live.root.resolve()
    stop = anyio.Event()

    async def stop_when_cancelled() -> None:
        # The watcher waits in a thread that cancellation cannot interrupt (it would hold
        # a stopping server for seconds); told through its stop event, it ends at once.
        try:
            await anyio.sleep_forever()
        finally:
            stop.set()

    async with anyio.create_task_group() as group:
        group.start_soon(stop_when_cancelled)
        async for _changes in awatch(
            root,
            watch_filter=repo_filter(root, ignore),
            debounce=debounce_ms,
            # The watcher returns once a check `step` ms after the last change sees no
            # new one: an edit waits 5-10 ms for the reload to start (it waited 10-20 ms
            # at step=10). An idle watcher wakes every step, taking the GIL for a moment.
            step=5,
            stop_event=stop,
        ):
            await anyio.to_thread.run_sync(live.reload)
            if on_reload is not None:
                on_reload()
        group.cancel_scope.cancel()
