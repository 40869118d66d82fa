"""Reading repo files once, recording every byte read for the bundle version."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from runtime.exceptions import DefinitionError, DefinitionWarning
from runtime.repo._report import Report

T = TypeVar("T")


_Stat = tuple[int, int, int]  # size, mtime_ns, inode; (-1, 0, 0) for a folder
_RACY_NS = 2_000_000_000
"""A file written this close to the recording may have changed within one tick of the
filesystem clock, keeping its size and mtime: its bytes are compared (as git does)."""


@dataclass(frozen=True, slots=True)
class _Unit:
    """What loading one unit (an agent folder, a skill, a store...) read, said and made."""

    stats: dict[str, _Stat]  # every file and folder at and under the unit
    recorded_ns: int  # the wall clock just before those stats were taken
    contents: dict[str, bytes]  # every file's bytes, as the unit saw them
    read: tuple[str, ...]  # the files it read, in order: they go into the bundle version
    errors: tuple[DefinitionError, ...]
    warnings: tuple[DefinitionWarning, ...]
    value: Any

    def still_matches(self, root: Path, stats: dict[str, _Stat]) -> bool:
        if stats != self.stats:
            return False
        for relative, (size, mtime_ns, _) in stats.items():
            if size >= 0 and mtime_ns >= self.recorded_ns - _RACY_NS:
                try:
                    with open(os.path.join(root, relative), "rb") as file:
                        if file.read() != self.contents.get(relative):
                            return False
                except OSError:
                    return False
        return True


class LoadCache:
    """The units of the last loads of one repo, reused while their files are byte-identical.

    A reload (runtime/repo/reload.py) keeps one: an edit re-parses the units whose
    files changed, and every cross-file rule still runs over the whole repo, so the
    result is the one a cold load gives (tests/repo/test_incremental.py).
    """

    def __init__(self) -> None:
        self._units: dict[str, _Unit] = {}
        self._seen: set[str] = set()
        self.hits = 0
        self.misses = 0

    def begin(self) -> None:
        self._seen.clear()
        self.hits = self.misses = 0

    def end(self) -> None:
        """Forget the units this load did not meet (deleted folders and files)."""
        for key in self._units.keys() - self._seen:
            del self._units[key]


class Reader:
    """Reads files of one repo; what it read is what the bundle version hashes."""

    def __init__(self, root: Path, report: Report, cache: LoadCache | None = None) -> None:
        self.root = root
        self._root = str(root)
        self.report = report
        self._listings: dict[str, dict[str, str]] = {}
        self._sorted: list[str] | None = None  # self.files' paths in order, for digest()
        self.files: dict[str, bytes] = {}
        self._hashes: dict[str, bytes] = {}  # each file hashed once, when read
        self._cache = cache
        self._preloaded: dict[str, bytes] = {}

    def relative(self, path: Path) -> str:
        text = str(path)
        if text.startswith(self._root) and text[len(self._root) : len(self._root) + 1] == "/":
            return text[len(self._root) + 1 :]  # pathlib's relative_to is most of a listing
        return path.relative_to(self.root).as_posix()

    def listing(self, folder: str) -> dict[str, str]:
        """The names in a repo folder (relative, "" for the root), sorted, each with its
        kind: "dir", "file" (links followed, as Path.is_dir and is_file do) or "other";
        OSError when it is no folder. Each folder is listed once a load: the loaders ask
        about the same files many times, and pathlib's stat of each is most of a listing."""
        found = self._listings.get(folder)
        if found is None:
            # An OSError goes up, as Path.iterdir's does: a folder removed under the load
            # (a branch switch) fails it, and a reload keeps the last good bundle.
            with os.scandir(self._path(folder)) as entries:
                pairs = [(entry.name, _kind(entry)) for entry in entries]
            found = self._listings[folder] = dict(sorted(pairs))
        return found

    def _path(self, relative: str) -> str:
        # The loaders name files by relative POSIX paths they built from the listings, so a
        # join is a concatenation (posixpath.join is a tenth of a load's Python steps).
        return f"{self._root}/{relative}" if relative else self._root

    def is_file(self, relative: str) -> bool:
        """Path.is_file: from the folder's listing when it was listed, else one stat (a
        reload asks about one file of each folder it then need not list)."""
        folder, _, name = relative.rpartition("/")
        listed = self._listings.get(folder)
        if listed is None:
            return os.path.isfile(self._path(relative))
        return listed.get(name) == "file"

    def is_dir(self, relative: str) -> bool:
        folder, _, name = relative.rpartition("/")
        listed = self._listings.get(folder)
        if listed is None:
            return os.path.isdir(self._path(relative))
        return listed.get(name) == "dir"

    def read(self, relative: str) -> str | None:
        """The file's text, or None after reporting why it cannot be read."""
        data = self.read_bytes(relative)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data[: error.start].count(b"\n") + 1
            self.report.error(relative, "the file is not UTF-8 text", line=line)
            return None

    def read_bytes(self, relative: str) -> bytes | None:
        """The file's bytes, or None after reporting why it cannot be read."""
        data = self._preloaded.get(relative)
        if data is None:
            try:
                with open(self._path(relative), "rb") as file:
                    data = file.read()
            except OSError as error:
                self.report.error(relative, f"cannot read the file: {error.strerror or error}")
                return None
        self._keep(relative, data)
        return data

    def _keep(self, relative: str, data: bytes) -> None:
        if relative not in self.files:
            self._sorted = None
        self.files[relative] = data
        self._hashes[relative] = hashlib.blake2b(data, digest_size=16).digest()

    def digest(self, prefix: str = "") -> str:
        """A short hash over the files read (under `prefix`), by path and content."""
        hasher = hashlib.blake2b(digest_size=8)
        if self._sorted is None:
            self._sorted = sorted(self.files)
        # The paths under `prefix` are one run of the sorted list: each agent's digest
        # would otherwise filter every file of the repo.
        start = bisect.bisect_left(self._sorted, prefix)
        for relative in itertools.takewhile(
            lambda path: path.startswith(prefix), itertools.islice(self._sorted, start, None)
        ):
            hasher.update(relative.encode())
            hasher.update(b"\0")
            hasher.update(self._hashes[relative])
        return hasher.hexdigest()

    def unit(self, relative: str, load: Callable[[], T]) -> T:
        """`load()` of the unit at `relative` (a folder or a file), or, with a cache, what it
        gave last time when no file under `relative` changed since.

        A unit may read only files under `relative`: one that read elsewhere is never reused.
        """
        if self._cache is None:
            return load()
        cache = self._cache
        cache._seen.add(relative)
        recorded_ns = time.time_ns()
        stats = _stats(self.root, relative)
        known = cache._units.get(relative)
        if stats is None:
            cache._units.pop(relative, None)
            return load()
        if known is not None and known.still_matches(self.root, stats):
            cache.hits += 1
            for path in known.read:
                self._keep(path, known.contents[path])
            self.report.errors.extend(known.errors)
            self.report.warnings.extend(known.warnings)
            return known.value  # type: ignore[no-any-return]
        cache.misses += 1
        contents = _contents(self.root, stats)
        files_before, errors_before = len(self.files), len(self.report.errors)
        warnings_before = len(self.report.warnings)
        self._preloaded = contents  # the unit's reads come from the walk: each file read once
        try:
            value = load()
        finally:
            self._preloaded = {}
        read = tuple(list(self.files)[files_before:])
        if all(path in contents and self.files[path] == contents[path] for path in read):
            cache._units[relative] = _Unit(
                stats,
                recorded_ns,
                contents,
                read,
                tuple(self.report.errors[errors_before:]),
                tuple(self.report.warnings[warnings_before:]),
                value,
            )
        else:
            cache._units.pop(relative, None)  # it read outside itself: never reused
        return value


def split_suffix(name: str) -> tuple[str, str]:
    """A file name's stem and suffix exactly as pathlib gives them (`a.tar.gz` -> `a.tar`,
    `.gz`; `.md` -> `.md`, no suffix), without building a path."""
    dot = name.rfind(".")
    if 0 < dot < len(name) - 1:
        return name[:dot], name[dot:]
    return name, ""


def _kind(entry: os.DirEntry[str]) -> str:
    try:
        return "dir" if entry.is_dir() else "file" if entry.is_file() else "other"
    except OSError:
        return "other"


def _stats(root: Path, relative: str) -> dict[str, _Stat] | None:
    """The stat of every file and folder at and under `relative`; None when a symlink is
    among them (what it points at may change unseen: such a unit is never reused)."""
    path = os.path.join(root, relative)
    found: dict[str, _Stat] = {}
    try:
        top = os.lstat(path)
    except OSError:
        return found  # gone: the unit reports it when it reads
    if stat.S_ISLNK(top.st_mode):
        return None
    if not stat.S_ISDIR(top.st_mode):
        found[relative] = (top.st_size, top.st_mtime_ns, top.st_ino)
        return found
    found[relative] = (-1, 0, 0)
    pending = [(path, relative)]
    while pending:
        folder, name = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return None
        for entry in entries:
            inner = f"{name}/{entry.name}"
            if entry.is_symlink():
                return None
            if entry.is_dir(follow_symlinks=False):
                found[inner] = (-1, 0, 0)
                pending.append((entry.path, inner))
            else:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    return None
                found[inner] = (info.st_size, info.st_mtime_ns, info.st_ino)
    return found


def _contents(root: Path, stats: dict[str, _Stat]) -> dict[str, bytes]:
    contents = {}
    for relative, (size, _, _) in stats.items():
        if size >= 0:
            try:
                with open(os.path.join(root, relative), "rb") as file:
                    contents[relative] = file.read()
            except OSError:
                pass  # the unit reports it when it reads
    return contents
