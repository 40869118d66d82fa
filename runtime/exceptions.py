"""Every error the runtime raises.

AmodalError
 ├── InvalidRepoError     a repo with at least one DefinitionError; never becomes a bundle
 ├── UnknownAgentError    a request named an agent the bundle does not have
 ├── RootForbiddenError   the caller may not root a chat on that agent (`main` is for operators)
 └── DocumentError        a store document, key or query that its store's schema refuses

DefinitionError / DefinitionWarning are values (a Finding each), not exceptions:
the loader collects them instead of raising one by one, so a person sees every
problem of the whole repo at once and fixes them in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class AmodalError(Exception):
    """Base class of every error this package raises on purpose."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found in a repo file: where it is and what to do about it.

    `file` is relative to the repo root, `line` is 1-based (None where the
    format has no lines or the place is unknown) and `field` is a dotted path
    inside the file (`tools[2]`, `persona.tone`), empty for the file as a whole.
    """

    file: str
    message: str
    line: int | None = None
    field: str = ""

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        what = f"{self.field}: {self.message}" if self.field else self.message
        return f"{where}: {what}"

    def as_json(self) -> dict[str, str | int | None]:
        return {"file": self.file, "line": self.line, "field": self.field, "message": self.message}


class DefinitionError(Finding):
    """An error in an agent repo: the repo cannot be served until it is fixed."""


class DefinitionWarning(Finding):
    """Accepted but suspicious input: printed by `amodal validate`, never fatal."""


class InvalidRepoError(AmodalError):
    """Raised by `load_bundle` for a repo with errors; carries every one of them."""

    def __init__(
        self, errors: tuple[DefinitionError, ...], warnings: tuple[DefinitionWarning, ...] = ()
    ) -> None:
        self.errors = errors
        self.warnings = warnings
        lines = "\n".join(f"  {error}" for error in errors)
        super().__init__(f"the agent repo has {len(errors)} error(s):\n{lines}")


class UnknownAgentError(AmodalError):
    """A request named an agent the bundle does not have. There is no fallback."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = sorted(known)
        listed = ", ".join(self.known) or "none"
        super().__init__(f"unknown agent {name!r}; known agents: {listed}")


class RootForbiddenError(AmodalError):
    """The caller may not root a chat there: unscoped chat (`main`) is for operators."""


class DocumentError(AmodalError):
    """A store document, key or query its store refuses; `problems` lists everything wrong.

    The store tools turn it into an error result for the model, the HTTP routes into a 422.
    """

    def __init__(self, store: str, what: str, problems: Sequence[str]) -> None:
        self.store = store
        self.problems = tuple(problems)
        super().__init__(f"{what} (store {store!r}): " + "; ".join(self.problems))
