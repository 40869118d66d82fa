"""AGENT.md and CONTEXT.md as sandboxed Jinja2 templates over the request context.

Templates see exactly one variable, `scope`: the request context after the rules
of `clean_context`. They run in Jinja2's immutable sandbox, and on top of it any
access to an underscore attribute is refused at load time (with its line) and at
render time, so a template can shape words but never reach Python internals.
Values are inserted as text and never evaluated again: template syntax inside a
context value is printed literally.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.exceptions import TemplateRenderError
from runtime.repo._checks import MEMO

if TYPE_CHECKING:
    import jinja2
    from jinja2 import nodes

logger = logging.getLogger("amodal")

CONTEXT_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
SCOPE_LARGE_CHARS = 100_000
_SYNTAX = ("{{", "{%", "{#")


@dataclass(frozen=True, slots=True)
class Template:
    """One prompt template: its source, where it came from, compiled on first render."""

    source: str
    file: str
    first_line: int = 1
    _compiled: list[jinja2.Template] = field(default_factory=list, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def is_literal(self) -> bool:
        return not any(marker in self.source for marker in _SYNTAX)

    def render(self, scope: Mapping[str, str]) -> str:
        """The text for this scope; raises TemplateRenderError naming the file and line."""
        if self.is_literal:
            return self.source
        import jinja2

        try:
            return self._template().render(scope=dict(scope))
        except (jinja2.TemplateError, TypeError, ValueError, ArithmeticError) as error:
            line = _error_line(error)
            where = f"{self.file}:{self.first_line + line - 1}" if line else self.file
            raise TemplateRenderError(f"{where}: template failed: {error}") from error

    def render_with(self, variables: Mapping[str, Any]) -> str:
        """The text with these top-level variables instead of `scope` (an automation's
        message sees `payload`, `now`, ...); errors as `render`."""
        if self.is_literal:
            return self.source
        import jinja2

        try:
            return self._template().render(**dict(variables))
        except (jinja2.TemplateError, TypeError, ValueError, ArithmeticError) as error:
            line = _error_line(error)
            where = f"{self.file}:{self.first_line + line - 1}" if line else self.file
            raise TemplateRenderError(f"{where}: template failed: {error}") from error

    def _template(self) -> jinja2.Template:
        # Compiling costs about four times parsing, and load time matters (hot reload,
        # cold start), so load only parses and the first render compiles.
        if not self._compiled:
            with self._lock:
                if not self._compiled:
                    self._compiled.append(template_environment().from_string(self.source))
        return self._compiled[0]


def template_environment() -> jinja2.Environment:
    """The sandbox every repo template is parsed and rendered in (imports Jinja2)."""
    from runtime.repo._sandbox import ENVIRONMENT

    return ENVIRONMENT


def check_template(source: str) -> list[tuple[int, str]]:
    """Problems of a template as (line within the template, message); empty when it is fine."""
    if not any(marker in source for marker in _SYNTAX):
        return []
    return MEMO.check("template", source, lambda: _template_problems(source))


def _template_problems(source: str) -> list[tuple[int, str]]:
    import jinja2
    from jinja2 import nodes

    try:
        tree = template_environment().parse(source)
    except jinja2.TemplateSyntaxError as error:
        return [(error.lineno, f"template syntax error: {error.message}")]
    problems: list[tuple[int, str]] = []
    for name in sorted(_unknown_names(tree)):
        problems.append(
            (
                _first_use(tree, name),
                f"unknown template variable {name!r}: templates see only "
                "`scope` (the request context), e.g. {{ scope.page }}",
            )
        )
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        attr = node.attr if isinstance(node, nodes.Getattr) else _const(getattr(node, "arg", None))
        if isinstance(attr, str) and attr.startswith("_"):
            problems.append(
                (
                    node.lineno,
                    f"templates may not access {attr!r}: "
                    "underscore attributes reach Python internals",
                )
            )
    return problems


def clean_context(context: Mapping[str, Any]) -> dict[str, str]:
    """The request context as templates and predicates see it (SPEC 5.3).

    Keys that are not identifiers are dropped and logged; empty and
    whitespace-only values are dropped; every other string, `"false"` and `"0"`
    included, is kept as it is. Callers validate that values are strings.
    """
    cleaned: dict[str, str] = {}
    dropped = []
    for key, value in context.items():
        if not CONTEXT_KEY.match(key):
            dropped.append(key)
        elif isinstance(value, str) and value.strip():
            cleaned[key] = value
    if dropped:
        logger.info(
            "context_keys_dropped", extra={"event": "context_keys_dropped", "keys": dropped}
        )
    total = sum(len(key) + len(value) for key, value in cleaned.items())
    if total > SCOPE_LARGE_CHARS:
        logger.warning(
            "prompt_template_scope_large",
            extra={"event": "prompt_template_scope_large", "chars": total},
        )
    return cleaned


# Names a template may read without defining them: its one variable, Jinja's loop and
# macro helpers, and the environment's globals (range, dict, namespace...).
_KNOWN_NAMES = frozenset({"scope", "loop", "self", "caller", "varargs", "kwargs"})


def _unknown_names(tree: nodes.Template) -> set[str]:
    """Names read but never assigned. A walk of the parse tree: jinja2.meta's
    find_undeclared_variables runs the code generator and costs as much as parsing."""
    from jinja2 import nodes

    loaded: set[str] = set()
    assigned: set[str] = set()
    for node in tree.find_all(nodes.Name):
        (loaded if node.ctx == "load" else assigned).add(node.name)
    return loaded - assigned - _KNOWN_NAMES - set(template_environment().globals)


def _first_use(tree: nodes.Template, name: str) -> int:
    from jinja2 import nodes

    for node in tree.find_all(nodes.Name):
        if node.name == name:
            return int(node.lineno)
    return 1


def _const(node: nodes.Node | None) -> Any:
    from jinja2 import nodes

    return node.value if isinstance(node, nodes.Const) else None


def _error_line(error: BaseException) -> int | None:
    lineno = getattr(error, "lineno", None)
    if isinstance(lineno, int):
        return lineno
    traceback = error.__traceback__
    line = None
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == "<template>":
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return line
