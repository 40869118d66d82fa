"""Just enough Markdown for agent files: YAML frontmatter, headings and sections."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_CANDIDATE = re.compile(r"^[ \t]*[#`~].*", re.MULTILINE)
_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""Line breaks of str.splitlines other than \\n: a body with one takes the slow path."""


@dataclass(frozen=True, slots=True)
class Document:
    """A Markdown file split into its frontmatter and body, with line numbers kept."""

    frontmatter: str | None  # the YAML text between the `---` lines, None when absent
    body: str
    body_line: int  # the file line where `body` starts
    unclosed_frontmatter: bool = False


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    title: str
    index: int  # line index within the body


def split(text: str) -> Document:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        return Document(None, text, 1)
    for index in range(1, len(lines)):
        if lines[index].rstrip() == "---":
            return Document("".join(lines[1:index]), "".join(lines[index + 1 :]), index + 2)
    return Document(None, text, 1, unclosed_frontmatter=True)


def headings(body: str) -> list[Heading]:
    """The ATX headings of `body`, skipping fenced code blocks."""
    return list(_iter_headings(body))


def first_heading(body: str, level: int | None = None) -> Heading | None:
    """The first heading of `body` (of `level`, when given): read no further than it."""
    return next((h for h in _iter_headings(body) if level is None or h.level == level), None)


def _iter_headings(body: str) -> Iterator[Heading]:
    """The ATX headings of `body` in order, found as they are asked for."""
    if _OTHER_BREAKS.search(body):  # lines as str.splitlines cuts them
        return _headings(enumerate(body.splitlines()))
    return _headings(_candidates(body))


def _candidates(body: str) -> Iterator[tuple[int, str]]:
    # Only lines starting with `#`, a backtick or `~` can be a heading or a fence: one
    # regex finds them, instead of a Python step for every line of every file.
    index = position = 0
    for match in _CANDIDATE.finditer(body):
        index += body.count("\n", position, match.start())
        position = match.start()
        yield index, match.group()


def _headings(lines: Iterable[tuple[int, str]]) -> Iterator[Heading]:
    fence: str | None = None
    for index, line in lines:
        if line.lstrip(" \t")[:1] not in ("#", "`", "~"):
            continue  # neither a heading nor a fence
        marker = _FENCE.match(line)
        if marker:
            fence = None if fence == marker.group(1) else (fence or marker.group(1))
            continue
        if fence is None:
            match = _HEADING.match(line)
            if match:
                yield Heading(len(match.group(1)), match.group(2).strip(), index)


def sections(body: str, titles: Iterable[str]) -> dict[str, tuple[str, int]]:
    """The text under each level-2 heading of `titles` up to the next level-1/2 heading, with
    its line index within the body, by lowercased title (the first such heading of each;
    a title without one is left out). `body` is read once for all of them."""
    wanted = {title.lower() for title in titles}
    found: dict[str, tuple[str, int]] = {}
    lines: list[str] | None = None
    all_headings = headings(body)
    for position, heading in enumerate(all_headings):
        key = heading.title.lower()
        if heading.level == 2 and key in wanted and key not in found:
            lines = body.splitlines(keepends=True) if lines is None else lines
            end = next((h.index for h in all_headings[position + 1 :] if h.level <= 2), len(lines))
            found[key] = "".join(lines[heading.index + 1 : end]), heading.index + 1
    return found
