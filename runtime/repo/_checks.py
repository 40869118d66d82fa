"""A persistent memo of the pure checks that passed: templates and JSON Schemas.

Checking an AGENT.md template means importing Jinja2 and parsing it, checking a custom
tool's `parameters` means importing jsonschema and walking the metaschema: together
most of what `amodal validate` and a cold load pay on a repo that did not change. Both
checks are pure functions of their text and of the code that runs them, so the memo
keeps, for each check that found nothing wrong, the hash of

- what it checked (the template source, the schema as canonical JSON) and its kind;
- the code: this runtime's version, the Python version, and the size and mtime of
  each checking module of the runtime and of each folder on `sys.path` (installing,
  upgrading or removing any package, Jinja2 and jsonschema's optional format
  checkers included, changes its folder's mtime).

Only passes are kept: a check that found a problem runs again every time, so the memo
can skip work but never hide an error. It is one file of hex digests, one a line,
appended to at the end of a load (a torn or foreign line matches nothing); unreadable
or unwritable, it is as if empty. `AMODAL_CACHE_DIR` moves it (default
`$XDG_CACHE_HOME/amodal`, else `~/.cache/amodal`); `AMODAL_NO_CACHE=1` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from runtime._version import __version__

T = TypeVar("T")

_DIGEST_CHARS = 32
_MAX_ENTRIES = 100_000
"""Past this many lines the file starts again empty: it only ever saves time."""
_CHECKERS = ("_checks.py", "templates.py", "_sandbox.py", "automations.py", "custom_tools.py")
"""The runtime's modules whose code decides a check's result (with runtime/_jsonschema.py)."""


class _Memo:
    def __init__(self) -> None:
        self._passed: set[str] | None = None
        self._new: list[str] = []
        self._salt = b""
        self._file: Path | None = None

    def _open(self) -> set[str]:
        if self._passed is not None:
            return self._passed
        self._passed = set()
        if not cache_enabled():
            return self._passed
        self._salt = _fingerprint()
        name = hashlib.blake2b(self._salt, digest_size=8).hexdigest()
        self._file = cache_directory() / f"checks-{name}"
        try:
            lines = self._file.read_text("ascii", errors="replace").split()
        except OSError:
            return self._passed
        if len(lines) > _MAX_ENTRIES:
            with contextlib.suppress(OSError):
                self._file.unlink()
        else:
            self._passed.update(line for line in lines if len(line) == _DIGEST_CHARS)
        return self._passed

    def check(self, kind: str, subject: str, run: Callable[[], list[T]]) -> list[T]:
        """`run()`, unless a check of this kind on this subject passed before."""
        passed = self._open()
        if self._file is None:
            return run()
        key = hashlib.blake2b(
            b"%s\0%s\0%s" % (self._salt, kind.encode(), subject.encode("utf-8", "surrogatepass")),
            digest_size=_DIGEST_CHARS // 2,
        ).hexdigest()
        if key in passed:
            return []
        problems = run()
        if not problems:
            passed.add(key)
            self._new.append(key)
        return problems

    def flush(self) -> None:
        """Append the passes found since the last flush (a load calls this once, at its end)."""
        if not self._new or self._file is None:
            return
        lines, self._new = "".join(f"{key}\n" for key in self._new), []
        with contextlib.suppress(OSError):
            self._file.parent.mkdir(parents=True, exist_ok=True)
            # One write in append mode: concurrent loads interleave whole lines.
            with open(self._file, "a", encoding="ascii") as file:
                file.write(lines)


def cache_enabled() -> bool:
    """Whether the runtime keeps its caches on disk: `AMODAL_NO_CACHE=1` turns them off."""
    return os.environ.get("AMODAL_NO_CACHE", "") in ("", "0")


def cache_directory() -> Path:
    """Where the runtime's caches live: this memo, and compiled repo Python (`_bytecode`)."""
    chosen = os.environ.get("AMODAL_CACHE_DIR")
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "amodal"


def _fingerprint() -> bytes:
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, name) for name in _CHECKERS]
    paths.append(os.path.join(os.path.dirname(here), "_jsonschema.py"))
    paths += _library_paths()
    parts = [__version__, sys.version]
    for path in paths:
        try:
            found = os.stat(path)
        except OSError:
            parts.append(f"{path}:-")
        else:
            parts.append(f"{path}:{found.st_size}:{found.st_mtime_ns}")
    return "\0".join(parts).encode("utf-8", "surrogatepass")


def _library_paths() -> list[str]:
    """The folders of sys.path, less the script's own folder or the working directory that
    Python puts first: `amodal`, `python -m` and `python -c` then share one memo."""
    entries = list(sys.path)
    if entries and (
        not entries[0]
        or entries[0] == os.getcwd()
        or entries[0] == os.path.dirname(os.path.abspath(sys.argv[0] if sys.argv else ""))
    ):
        entries = entries[1:]
    return [entry for entry in entries if entry]


MEMO = _Memo()
