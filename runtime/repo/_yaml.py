"""The one way the runtime reads YAML: safe, and without aliases.

YAML lets a document name a node (`&a`) and repeat it (`*a`); nine lines of nested
aliases expand to billions of nodes (a "billion laughs" bomb: 490 bytes of frontmatter
took 100 s and 3.7 GB). No file the runtime reads needs aliases, so a document with
one is refused before anything is built: its events are scanned first (linear in the
text, nothing expanded), and the error names the alias's line.
"""

from __future__ import annotations

from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlError(ValueError):
    """A document that cannot be read. `line` is 1-based within the text, or None."""

    def __init__(self, problem: str, line: int | None) -> None:
        super().__init__(problem if line is None else f"{problem} (line {line})")
        self.problem = problem
        self.line = line


def load(text: str) -> Any:
    """The document in `text` (None when empty); `YamlError` for a syntax error or an alias."""
    try:
        # An alias is written `*name`: text without a `*` has none, and skips the scan.
        events = yaml.parse(text, Loader=_Loader) if "*" in text else ()
        for event in events:
            if isinstance(event, yaml.AliasEvent):
                mark = event.start_mark
                raise YamlError(
                    f"YAML aliases (`*{event.anchor}`) are not supported: write the value out",
                    mark.line + 1 if mark is not None else None,
                )
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise YamlError(problem, mark.line + 1 if mark is not None else None) from error


__all__ = ["YamlError", "load"]
