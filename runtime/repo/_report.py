"""Collecting findings while the loader reads a repo, and turning pydantic errors into them."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from runtime.exceptions import DefinitionError, DefinitionWarning
from runtime.repo import _yaml
from runtime.repo._positions import Path, json_lines, literal_lines, nearest_line, yaml_lines
from runtime.repo.formats import FOREIGN_REPO_KEYS, FrontmatterConfig, RepoConfig

M = TypeVar("M", bound=BaseModel)
# Keys accepted only for compatibility (amodal.json) or only in agent.py: never suggested.
_UNLISTED = frozenset({"conditional"})
# Far beyond any real configuration, and well inside the recursion limit of what walks it.
MAX_JSON_DEPTH = 64


@dataclass
class Source:
    """A repo file being read: its relative path, text, and (lazily) the lines of its keys."""

    path: str
    text: str
    syntax: str = "json"  # "json", "yaml", "python" (the `agent` literal) or "text"
    first_line: int = 1  # where `text` starts inside the file (YAML frontmatter starts at 2)
    _lines: dict[Path, int] | None = field(default=None, repr=False)

    def line(self, path: Sequence[str | int] = ()) -> int | None:
        if self.syntax == "text":
            return None
        if self._lines is None:
            if self.syntax == "json":
                self._lines = json_lines(self.text)
            elif self.syntax == "python":
                self._lines = literal_lines(self.text, "agent")
            else:
                self._lines = yaml_lines(self.text, self.first_line)
        return nearest_line(self._lines, path)


def format_field(path: Iterable[str | int]) -> str:
    """`('tools', 2, 'name')` -> `tools[2].name`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def normalized(text: str) -> str:
    """`Craft Greeting`, `craft-greeting` and `craftGreeting` all give `craftgreeting`."""
    return "".join(char for char in text.lower() if char.isalnum())


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest candidate, ignoring case and separators."""
    options = list(candidates)
    norm = normalized

    by_norm = {norm(option): option for option in options}
    if norm(name) in by_norm:
        return f" (did you mean {by_norm[norm(name)]!r}?)"
    close = difflib.get_close_matches(norm(name), list(by_norm), n=1, cutoff=0.6)
    return f" (did you mean {by_norm[close[0]]!r}?)" if close else ""


def known(kind: str, names: Iterable[str], limit: int = 30) -> str:
    ordered = sorted(names)
    if not ordered:
        return f"there are no {kind}"
    shown = ", ".join(repr(name) for name in ordered[:limit])
    more = f" and {len(ordered) - limit} more" if len(ordered) > limit else ""
    return f"known {kind}: {shown}{more}"


class Report:
    """Every error and warning found in one load, in the order found."""

    def __init__(self) -> None:
        self.errors: list[DefinitionError] = []
        self.warnings: list[DefinitionWarning] = []

    def error(self, file: str, message: str, *, line: int | None = None, field: str = "") -> None:
        self.errors.append(DefinitionError(file, message, line, field))

    def warn(self, file: str, message: str, *, line: int | None = None, field: str = "") -> None:
        self.warnings.append(DefinitionWarning(file, message, line, field))

    def parse_json(self, source: Source) -> Any:
        """The parsed document, or None after reporting why there is none: a syntax error
        (with its line), a document of `null`, or nesting too deep to check safely."""
        too_deep = f"invalid JSON: nested more than {MAX_JSON_DEPTH} levels deep"
        try:
            data = json.loads(source.text)
        except json.JSONDecodeError as error:
            self.error(source.path, f"invalid JSON: {error.msg}", line=error.lineno)
            return None
        except RecursionError:
            self.error(source.path, too_deep)
            return None
        if data is None:
            # None means "already reported" to every caller, so say what is wrong here.
            self.error(source.path, "expected a JSON object, got null", line=source.line())
            return None
        # Nesting deeper than the limit needs more brackets than the limit: most files have
        # fewer in all, and skip the walk.
        brackets = source.text.count("{") + source.text.count("[")
        if brackets > MAX_JSON_DEPTH and _depth(data) > MAX_JSON_DEPTH:
            # Later steps (line mapping, env: resolution, JSON Schema checks) recurse.
            self.error(source.path, too_deep)
            return None
        return data

    def parse_yaml(self, source: Source) -> Any:
        try:
            return _yaml.load(source.text)
        except _yaml.YamlError as error:
            line = source.first_line + (error.line - 1 if error.line is not None else 0)
            self.error(source.path, f"invalid YAML: {error.problem}", line=line)
            return None

    def validate(
        self,
        model: type[M],
        data: Any,
        source: Source,
        *,
        prefix: tuple[str | int, ...] = (),
        rename: Callable[[ErrorDetails], str | None] | None = None,
    ) -> M | None:
        """`data` as `model`, or None after reporting each problem with its line and field.

        `rename` may replace the message of a given pydantic error (for rules whose
        generic wording would not tell a person what to do).
        """
        try:
            return model.model_validate(data)
        except ValidationError as error:
            for detail in error.errors(include_url=False):
                path = (*prefix, *detail["loc"])
                message = (rename(detail) if rename else None) or _message(model, detail)
                self.error(source.path, message, line=source.line(path), field=format_field(path))
            return None


def _depth(data: Any) -> int:
    """How deeply `data` nests lists and objects, counted without recursion."""
    deepest, pending = 0, [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                return depth
            deepest = max(deepest, depth)
            items = value.values() if isinstance(value, dict) else value
            pending.extend((item, depth + 1) for item in items)
    return deepest


def _message(model: type[BaseModel], detail: ErrorDetails) -> str:
    kind, loc = detail["type"], detail["loc"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        top_of_repo_config = model is RepoConfig and len(loc) == 1
        unlisted = _UNLISTED | (set(FOREIGN_REPO_KEYS) if top_of_repo_config else set())
        if model is FrontmatterConfig and len(loc) == 1:
            unlisted |= {"name"}  # AGENT.md frontmatter says `displayName`; `name` is an error
        allowed = [name for name in _keys_at(model, loc[:-1]) if name not in unlisted]
        return f"unknown key {key!r}{did_you_mean(key, allowed)}; expected one of: " + ", ".join(
            sorted(allowed)
        )
    if kind == "missing":
        return f"missing required key {str(loc[-1])!r}"
    message = detail["msg"].removeprefix("Value error, ")
    value = detail.get("input")
    if isinstance(value, str | int | float | bool) and len(repr(value)) <= 60:
        message += f" (got {value!r})"
    return message


def _keys_at(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The keys allowed in the object at `loc` inside `model`, following aliases."""
    current: Any = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    model_type = _model_in(current)
    if model_type is None:
        return []
    return [info.alias or name for name, info in model_type.model_fields.items()]


def _step(annotation: Any, part: str | int) -> Any:
    model_type = _model_in(annotation)
    if model_type is not None and isinstance(part, str):
        for name, info in model_type.model_fields.items():
            if part in (info.alias, name):
                return info.annotation
        return None
    for arg in _flatten(annotation):
        origin = get_origin(arg)
        if origin is dict:
            return get_args(arg)[1]
        if origin in (list, tuple) and isinstance(part, int):
            return get_args(arg)[0]
    return None


def _flatten(annotation: Any) -> list[Any]:
    if get_origin(annotation) is Union or type(annotation).__name__ == "UnionType":
        return [item for arg in get_args(annotation) for item in _flatten(arg)]
    if hasattr(annotation, "__metadata__"):  # Annotated[...]
        return _flatten(get_args(annotation)[0])
    return [annotation]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for arg in _flatten(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None
