"""Line numbers for keys of JSON and YAML documents.

Parsers give a line only for syntax errors; a person fixing `"maxToolCals"` wants
the line of that key too. These walkers map a path of keys and indices to the
line where it appears. They run only when a file has an error, so the common
load stays on the C parsers.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import re
from collections.abc import Sequence
from json.decoder import scanstring  # type: ignore[attr-defined]

import yaml

Path = tuple[str | int, ...]

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


def json_lines(text: str) -> dict[Path, int]:
    """Map every key path of a valid JSON document to its 1-based line."""
    newlines = [index for index, char in enumerate(text) if char == "\n"]
    lines: dict[Path, int] = {}

    def line_of(pos: int) -> int:
        return bisect.bisect_right(newlines, pos) + 1

    def skip(pos: int) -> int:
        match = _WHITESPACE.match(text, pos)
        return match.end() if match else pos

    def value(pos: int, path: Path) -> int:
        pos = skip(pos)
        lines.setdefault(path, line_of(pos))
        char = text[pos]
        if char == "{":
            pos = skip(pos + 1)
            if text[pos] == "}":
                return pos + 1
            while True:
                key, pos = scanstring(text, skip(pos) + 1)
                lines[(*path, key)] = line_of(pos)
                pos = value(skip(pos) + 1, (*path, key))  # + 1 steps over ":"
                pos = skip(pos)
                if text[pos] == "}":
                    return pos + 1
                pos += 1  # ","
        if char == "[":
            pos = skip(pos + 1)
            if text[pos] == "]":
                return pos + 1
            index = 0
            while True:
                pos = skip(value(pos, (*path, index)))
                if text[pos] == "]":
                    return pos + 1
                pos, index = pos + 1, index + 1
        if char == '"':
            return int(scanstring(text, pos + 1)[1])
        match = _SCALAR.match(text, pos)
        return match.end() if match else pos + 1

    # The walker only maps: a document it cannot follow keeps what it found so far.
    with contextlib.suppress(IndexError, ValueError):
        value(0, ())
    return lines


def yaml_lines(text: str, first_line: int = 1) -> dict[Path, int]:
    """Map every key path of a YAML document to its line; `first_line` is where the text starts."""
    lines: dict[Path, int] = {}
    walked: set[int] = set()

    def walk(node: yaml.Node, path: Path) -> None:
        lines.setdefault(path, node.start_mark.line + first_line)
        if id(node) in walked:
            return  # an alias: its node is walked once (`a: &a [*a]` would never end)
        walked.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, item in node.value:
                child = (*path, str(key.value))
                lines[child] = key.start_mark.line + first_line
                walk(item, child)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*path, index))

    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


def literal_lines(text: str, variable: str) -> dict[Path, int]:
    """Lines of the keys and items of a dict literal assigned to `variable` at module level."""
    lines: dict[Path, int] = {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return lines

    def walk(node: ast.expr, path: Path) -> None:
        lines.setdefault(path, node.lineno)
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    lines[(*path, key.value)] = key.lineno
                    walk(value, (*path, key.value))
        elif isinstance(node, ast.List | ast.Tuple):
            for index, item in enumerate(node.elts):
                walk(item, (*path, index))

    for statement in tree.body:
        targets = _assigned_names(statement)
        if variable in targets and isinstance(statement, ast.Assign | ast.AnnAssign):
            if statement.value is not None:
                walk(statement.value, ())
        for name in targets:
            lines.setdefault(("<global>", name), statement.lineno)
    return lines


def _assigned_names(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.Assign):
        return [target.id for target in statement.targets if isinstance(target, ast.Name)]
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return [statement.target.id]
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [statement.name]
    return []


def nearest_line(lines: dict[Path, int], path: Sequence[str | int]) -> int | None:
    """The line of `path`, or of its closest ancestor that has one."""
    for end in range(len(path), -1, -1):
        line = lines.get(tuple(path[:end]))
        if line is not None:
            return line
    return None
