"""The import report: every source file, what became of it, and why (SPEC 19)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["agent", "skill"]
Status = Literal["imported", "imported with warnings", "skipped"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One source file: the name it got in the repo, or the reason it was skipped.

    Each warning names the source field or tool, then says what the runtime does instead.
    """

    kind: Kind
    source: str
    name: str | None
    warnings: tuple[str, ...] = ()
    reason: str | None = None

    @property
    def status(self) -> Status:
        if self.reason is not None:
            return "skipped"
        return "imported with warnings" if self.warnings else "imported"

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "agent": self.name,
            "kind": self.kind,
            "status": self.status,
            "warnings": list(self.warnings),
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What one `amodal import` did (or, with --dry-run, would do)."""

    format: str
    source: str
    target: str
    outcomes: tuple[Outcome, ...]
    notes: tuple[str, ...] = ()
    written: tuple[str, ...] = ()
    dry_run: bool = False
    validation_errors: tuple[str, ...] = field(default=())

    def count(self, kind: Kind, status: Status) -> int:
        return sum(1 for item in self.outcomes if item.kind == kind and item.status == status)

    def summary(self) -> str:
        parts = []
        for kind in ("agent", "skill"):
            clean = self.count(kind, "imported")
            warned = self.count(kind, "imported with warnings")
            skipped = self.count(kind, "skipped")
            if clean or warned or skipped:
                parts.append(
                    f"{clean + warned} {kind}s imported ({clean} clean, {warned} with "
                    f"warnings), {skipped} skipped"
                )
        did = "would write" if self.dry_run else "wrote"
        changed = f"{did} {len(self.written)} file(s)" if self.written else "no file changed"
        return f"{'; '.join(parts) or 'nothing to import'}; {changed} in {self.target}"

    def common_warnings(self, top: int = 10) -> list[tuple[str, int]]:
        """The most frequent warnings, by the field or tool they name."""
        counts = Counter(
            warning.split(":", 1)[0] for item in self.outcomes for warning in item.warnings
        )
        return counts.most_common(top)

    def as_json(self) -> list[dict[str, Any]]:
        """Every source file, then each note as a row of its own (`"kind": "note"`, the
        text in `"note"`): what a person must still do is in the JSON too."""
        notes: list[dict[str, Any]] = [
            {"source": None, "agent": None, "kind": "note", "status": "note", "warnings": [],
             "reason": None, "note": note}
            for note in self.notes
        ]  # fmt: skip
        return [item.as_json() for item in self.outcomes] + notes

    def text(self) -> str:
        lines = []
        for item in self.outcomes:
            target = (
                f" -> {item.kind}s/{item.name}"
                if item.name and item.kind == "agent"
                else (f" -> skill {item.name!r}" if item.name else "")
            )
            lines.append(f"{item.status}: {item.source}{target}")
            lines.extend(f"    warning: {warning}" for warning in item.warnings)
            if item.reason:
                lines.append(f"    reason: {item.reason}")
        lines.extend(f"note: {note}" for note in self.notes)
        lines.append(self.summary())
        return "\n".join(lines)


def dumps(report: ImportReport) -> str:
    return json.dumps(report.as_json(), indent=2)
