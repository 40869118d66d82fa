"""Reading other tools' files: Markdown with YAML frontmatter (repaired where that is safe),
JSON with comments, and names made fit for an agent repo."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.repo import _markdown, _yaml

_KEY_LINE = re.compile(r"^([A-Za-z_][\w-]*):[ \t]+(.*)$")
_SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", "venv"})


class SourceError(Exception):
    """A source file that cannot be imported; the message is the report's reason."""


@dataclass(frozen=True, slots=True)
class MarkdownFile:
    """A source Markdown file: its frontmatter as data and its body exactly as written."""

    front: dict[str, Any] | None
    body: str
    repaired: tuple[str, ...] = ()  # keys whose unquoted value was quoted to parse
    changes: tuple[str, ...] = ()  # warnings: what reading changed (line endings, a BOM)


def inside(path: Path, tree: Path) -> bool:
    """True when `path`, symbolic links followed, lies in the folder `tree`."""
    return path.resolve().is_relative_to(tree.resolve())


def read_text(path: Path, tree: Path) -> str:
    """The file's text. SourceError when it cannot be read, or when it is not in `tree` (the
    source being imported) once symbolic links are followed: an import never reads a file
    the source does not hold, such as `/proc/self/environ` or `~/.bashrc`."""
    if not inside(path, tree):
        raise SourceError(
            f"{path} is outside the source tree {tree} (a symbolic link, or a path with "
            "`..`, `~` or `/`); not read"
        )
    try:
        return path.read_bytes().decode("utf-8")  # as written: CRLF stays CRLF
    except UnicodeDecodeError as error:
        raise SourceError("the file is not UTF-8 text") from error
    except OSError as error:
        raise SourceError(f"cannot read the file: {error.strerror or error}") from error


def read_markdown(path: Path, tree: Path) -> MarkdownFile:
    """Frontmatter and body; SourceError when the frontmatter cannot be read."""
    text, changes = normalised(read_text(path, tree))
    document = _markdown.split(text)
    if document.unclosed_frontmatter:
        raise SourceError("the frontmatter opened by `---` on line 1 is never closed")
    if document.frontmatter is None:
        _late_frontmatter(text)
        return MarkdownFile(None, document.body, changes=changes)
    data, repaired = parse_frontmatter(document.frontmatter)
    if data is not None and not isinstance(data, dict):
        raise SourceError("the frontmatter is not `key: value` pairs")
    return MarkdownFile(data or {}, document.body, repaired, changes)


def normalised(text: str) -> tuple[str, tuple[str, ...]]:
    """`text` with LF line endings and no byte order mark, and a warning for each change."""
    changes = []
    if text.startswith("\ufeff"):
        text = text[1:]
        changes.append("encoding: the file starts with a byte order mark; it was left out")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        changes.append("line endings: the file has Windows line endings (CRLF); kept as LF")
    return text, tuple(changes)


def _late_frontmatter(text: str) -> None:
    """SourceError for frontmatter that does not start on line 1: after blank lines it is
    no frontmatter to Claude Code or OpenCode either, and reading it as a prompt would
    put its settings in the prompt."""
    lines = text.split("\n")
    first = next((index for index, line in enumerate(lines) if line.strip()), None)
    if first and lines[first].rstrip() == "---":
        raise SourceError(
            f"line 1 is blank: frontmatter starts on line 1, so the `---` on line {first + 1} "
            "opens none (remove the blank lines above it)"
        )


def parse_frontmatter(text: str) -> tuple[Any, tuple[str, ...]]:
    """YAML frontmatter; where its only fault is an unquoted `: ` inside a one-line value
    (`description: Use when: the user asks`), that value is quoted and the keys returned."""
    try:
        return _yaml.load(text), ()
    except _yaml.YamlError as error:
        if error.problem.startswith("YAML aliases"):
            raise SourceError(f"the frontmatter is not read: {error} of the frontmatter") from None
        first_error = error
    lines, repaired = [], []
    for line in text.split("\n"):
        match = _KEY_LINE.match(line)
        value = match.group(2).strip() if match else ""
        if match and ": " in value and not value.startswith(("'", '"', "[", "{", "|", ">")):
            lines.append(f"{match.group(1)}: {json.dumps(value, ensure_ascii=False)}")
            repaired.append(match.group(1))
        else:
            lines.append(line)
    if repaired:
        try:
            return _yaml.load("\n".join(lines)), tuple(repaired)
        except _yaml.YamlError:
            pass
    where = f" (frontmatter line {first_error.line})" if first_error.line is not None else ""
    raise SourceError(f"the frontmatter is not valid YAML: {first_error.problem}{where}")


def read_jsonc(path: Path, tree: Path) -> Any:
    """JSON that may carry `//` and `/* */` comments and trailing commas (opencode.jsonc)."""
    text = read_text(path, tree)
    try:
        return json.loads(_strip_jsonc(text))
    except json.JSONDecodeError as error:
        raise SourceError(f"invalid JSON: {error.msg} (line {error.lineno})") from error


def _strip_jsonc(text: str) -> str:
    out: list[str] = []
    index, in_string = 0, False
    while index < len(text):
        char = text[index]
        if in_string:
            out.append(char)
            if char == "\\" and index + 1 < len(text):
                out.append(text[index + 1])
                index += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif text.startswith("//", index):
            end = text.find("\n", index)
            index = len(text) if end == -1 else end
            continue
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            index = len(text) if end == -1 else end + 2
            continue
        else:
            out.append(char)
        index += 1
    return re.sub(r",(\s*[}\]])", r"\1", "".join(out))


def normalise_name(name: str) -> str:
    """A name fit for `agents/<name>/`: lowercase letters, digits, `-` and `_`, at most 64."""
    text = re.sub(r"[^a-z0-9_-]+", "-", name.strip().lower())
    text = re.sub(r"-{2,}", "-", text).strip("-_")
    return text[:64].rstrip("-_") or "agent"


def markdown_files(folder: Path) -> list[Path]:
    """Every `*.md` under `folder`, in path order, outside VCS and dependency folders and
    outside skills (a skill's own `agents/` notes are the skill's files, not agents)."""
    found = []
    for path in sorted(folder.rglob("*.md")):
        parts = path.relative_to(folder).parts
        if any(part in _SKIP_DIRS for part in parts) or not path.is_file():
            continue
        if not _in_a_skill(path.parent, folder):
            found.append(path)
    return found


def folders_named(root: Path, names: tuple[str, ...]) -> list[Path]:
    """Folders under `root` (itself included) called one of `names`, in path order, leaving
    out those inside a skill's folder."""
    found = [root] if root.name in names else []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).parts
        if any(part in _SKIP_DIRS for part in relative):
            continue
        if path.is_dir() and path.name in names and not path.is_symlink():
            if not _in_a_skill(path.parent, root):
                found.append(path)
    # Nested matches (agents/x/agents/) belong to the outer folder's walk already.
    return [p for p in found if not any(p != q and p.is_relative_to(q) for q in found)]


def _in_a_skill(folder: Path, root: Path) -> bool:
    """True when `folder` or a folder above it (up to `root`) holds a SKILL.md."""
    for parent in (folder, *folder.parents):
        if (parent / "SKILL.md").is_file():
            return True
        if parent == root or not parent.is_relative_to(root):
            return False
    return False


def skill_files(root: Path) -> list[Path]:
    """Every `skills/<name>/SKILL.md` (or `skill/<name>/SKILL.md`) under `root`."""
    found = []
    for folder in folders_named(root, ("skills", "skill")):
        found.extend(sorted(path for path in folder.glob("*/SKILL.md") if path.is_file()))
    return sorted(set(found))


def outside(paths: list[Path], exclude: Path | None) -> list[Path]:
    """`paths` less those inside `exclude`."""
    if exclude is None:
        return paths
    return [path for path in paths if not path.resolve().is_relative_to(exclude)]


def unique(items: list[str]) -> tuple[str, ...]:
    """`items` without repeats, in their first order (a tool listed twice warns once)."""
    return tuple(dict.fromkeys(items))
