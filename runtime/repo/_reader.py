"""Reading repo files once, recording every byte read for the bundle version."""

from __future__ import annotations

import hashlib
from pathlib import Path

from runtime.repo._report import Report


class Reader:
    """Reads files of one repo; what it read is what the bundle version hashes."""

    def __init__(self, root: Path, report: Report) -> None:
        self.root = root
        self.report = report
        self.files: dict[str, bytes] = {}
        self._hashes: dict[str, bytes] = {}  # each file hashed once, when read

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

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
        try:
            data = (self.root / relative).read_bytes()
        except OSError as error:
            self.report.error(relative, f"cannot read the file: {error.strerror or error}")
            return None
        self.files[relative] = data
        self._hashes[relative] = hashlib.blake2b(data, digest_size=16).digest()
        return data

    def digest(self, prefix: str = "") -> str:
        """A short hash over the files read (under `prefix`), by path and content."""
        hasher = hashlib.blake2b(digest_size=8)
        for relative in sorted(self.files):
            if relative.startswith(prefix):
                hasher.update(relative.encode())
                hasher.update(b"\0")
                hasher.update(self._hashes[relative])
        return hasher.hexdigest()
