"""Searching the file-tool root: glob patterns and regular expressions, both bounded.

Both compile to RE2, a linear-time engine: a match costs time proportional to the
text, whatever the pattern, so a pathological pattern (`(a+)+$`, `*a*a*a*a*b`)
cannot hang a turn the way a backtracking engine can. That is why no timeout is
needed, and why the syntax is RE2's (the family of ripgrep's, which Claude Code's
Grep uses): no backreferences and no lookaround. The walk is bounded too, in files
visited and bytes read, so a huge tree ends the search with `truncated` instead of
running on.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2

MAX_PATTERN_CHARS = 1_000
MAX_VISITED_FILES = 20_000
MAX_GREP_BYTES = 50_000_000
MAX_LINE_CHARS = 300
_BINARY_SNIFF = 8_192
_GLOB_MAGIC = re.compile(r"[*?\[{]")


class PatternError(ValueError):
    """A glob or regular expression that cannot be used; the message says why."""


def _options(case_sensitive: bool = True) -> Any:
    options = re2.Options()
    options.log_errors = False  # a bad pattern is the model's mistake, reported to it
    options.case_sensitive = case_sensitive
    return options


def compile_regex(pattern: str) -> Any:
    """`pattern` as an RE2 program with `^`/`$` at line ends, or PatternError saying why."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re2.compile(f"(?m){pattern}", _options())
    except re2.error as error:
        reason = error.args[0] if error.args else error
        detail = reason.decode() if isinstance(reason, bytes) else reason
        raise PatternError(
            f"invalid regular expression: {detail} (RE2 syntax: no backreferences or lookaround)"
        ) from error


def compile_glob(pattern: str) -> Any:
    """A glob (`*`, `?`, `[abc]`, `{a,b}`, `**` for any folders) as an RE2 full-path match."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re2.compile(f"^(?:{_glob_regex(pattern)})$", _options())
    except re2.error as error:
        raise PatternError(f"invalid glob pattern {pattern!r}") from error


def _glob_regex(pattern: str) -> str:
    out: list[str] = []
    depth, index = 0, 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
            continue
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = pattern.find("]", index + 2)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = pattern[index + 1 : end]
                negate = body.startswith(("!", "^"))
                body = body[1:] if negate else body
                out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
                index = end
        elif char == "{":
            depth += 1
            out.append("(?:")
        elif char == "," and depth:
            out.append("|")
        elif char == "}" and depth:
            depth -= 1
            out.append(")")
        else:
            out.append(re.escape(char))
        index += 1
    if depth:
        raise PatternError(f"unbalanced braces in {pattern!r}")
    return "".join(out)


def literal_prefix(pattern: str) -> str:
    """The leading folders of a glob that hold no wildcard: where a walk can start."""
    parts = pattern.split("/")
    fixed = []
    for part in parts[:-1]:
        if _GLOB_MAGIC.search(part):
            break
        fixed.append(part)
    return "/".join(fixed)


@dataclass
class Walk:
    """The files under a folder that the file tools may read, in path order, bounded."""

    start: Path
    permitted: Callable[[Path], bool]
    visited: int = 0
    truncated: bool = False

    def files(self) -> Iterator[Path]:
        if self.start.is_file():
            yield self.start
            return
        for folder, dirs, names in os.walk(self.start, followlinks=False):
            base = Path(folder)
            # Symlinked folders are not entered (no cycles, no escapes); symlinked files
            # are read only where read_file could read them.
            dirs[:] = sorted(
                name
                for name in dirs
                if not (base / name).is_symlink() and self.permitted(base / name)
            )
            for name in sorted(names):
                path = base / name
                if not self.permitted(path) or not path.is_file():
                    continue
                if self.visited >= MAX_VISITED_FILES:
                    self.truncated = True
                    return
                self.visited += 1
                yield path


@dataclass(frozen=True, slots=True)
class LineMatch:
    line: int
    text: str


def grep_lines(program: Any, data: bytes, limit: int) -> list[LineMatch]:
    """The lines of UTF-8 `data` where `program` matches (each line once), at most `limit`.

    Searching bytes keeps offsets in bytes (no re-encoding per call), and each search
    resumes at the next line, so the cost stays linear in `data` whatever the pattern.
    """
    found: list[LineMatch] = []
    position, line, counted_to = 0, 1, 0
    while position <= len(data) and len(found) < limit:
        match = program.search(data, position)
        if match is None:
            break
        line_start = data.rfind(b"\n", 0, match.start()) + 1
        line_end = data.find(b"\n", match.start())
        line_end = len(data) if line_end == -1 else line_end
        line += data.count(b"\n", counted_to, line_start)
        counted_to = line_start
        content = data[line_start:line_end].decode("utf-8", "replace").rstrip("\r")
        if len(content) > MAX_LINE_CHARS:
            content = content[:MAX_LINE_CHARS] + "…"
        found.append(LineMatch(line, content))
        position = line_end + 1
    return found


def looks_binary(data: bytes) -> bool:
    return b"\0" in data[:_BINARY_SNIFF]
