"""Reports of a run: why each case failed, JUnit XML for CI, and one run compared to another."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from dataclasses import dataclass

from runtime.evals.record import CaseRecord, EvalRun


def explain(case: CaseRecord) -> list[str]:
    """One line per distinct reason a case did not pass, with the attempts it happened in:
    `tools_called: expected ...` or `error: ...`."""
    reasons: dict[str, list[int]] = {}
    for attempt in case.attempts:
        lines = [f"{failure.expectation}: {failure.message}" for failure in attempt.failures]
        if attempt.error is not None:
            lines.append(f"error: {attempt.error}")
        for line in lines:
            reasons.setdefault(line, []).append(attempt.number)
    if len(case.attempts) == 1:
        return list(reasons)
    return [
        f"{line} (attempt{'s' if len(numbers) > 1 else ''} {_numbers(numbers)})"
        for line, numbers in reasons.items()
    ]


def rate(case: CaseRecord) -> str:
    """How many attempts passed, of how many: `3/5`."""
    return f"{case.passed}/{len(case.attempts)}"


# ---------------------------------------------------------------- JUnit


def junit_xml(run: EvalRun) -> str:
    """The run as JUnit XML: one `testsuite` per suite, one `testcase` per case, with a
    `failure` (an expectation did not hold) or an `error` (no verdict) explaining it."""
    root = ElementTree.Element(
        "testsuites",
        name=f"amodal eval {run.id}",
        tests=str(len(run.cases)),
        failures=str(run.count("failed")),
        errors=str(run.count("error")),
        time=_seconds(run.duration_ms),
    )
    for suite, cases in _by_suite(run):
        element = ElementTree.SubElement(
            root,
            "testsuite",
            name=suite,
            tests=str(len(cases)),
            failures=str(sum(case.status == "failed" for case in cases)),
            errors=str(sum(case.status == "error" for case in cases)),
            skipped="0",
            time=_seconds(sum(_case_ms(case) for case in cases)),
            timestamp=run.started_at.isoformat(),
        )
        for case in cases:
            _testcase(element, case, run)
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _testcase(parent: ElementTree.Element, case: CaseRecord, run: EvalRun) -> None:
    attributes = {
        "name": case.name,
        "classname": case.suite,
        "file": case.file,
        "time": _seconds(_case_ms(case)),
    }
    if case.line is not None:
        attributes["line"] = str(case.line)
    element = ElementTree.SubElement(parent, "testcase", attributes)
    if case.status != "passed":
        kind = "failure" if case.status == "failed" else "error"
        reasons = explain(case)
        summary = reasons[0] if reasons else case.status
        if len(case.attempts) > 1:
            summary = f"{rate(case)} passed, under {run.min_pass_rate:.0%}: {summary}"
        detail = ElementTree.SubElement(element, kind, message=summary, type=kind)
        detail.text = "\n".join(reasons)
    last = case.attempts[-1] if case.attempts else None
    if last is not None and last.replies and last.replies[-1]:
        ElementTree.SubElement(element, "system-out").text = last.replies[-1]


def _by_suite(run: EvalRun) -> Iterator[tuple[str, list[CaseRecord]]]:
    suites: dict[str, list[CaseRecord]] = {}
    for case in run.cases:
        suites.setdefault(case.suite, []).append(case)
    yield from suites.items()


def _case_ms(case: CaseRecord) -> int:
    return sum(sum(attempt.latency_ms) for attempt in case.attempts)


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.3f}"


def _numbers(numbers: list[int]) -> str:
    return ", ".join(str(number) for number in numbers)


# ---------------------------------------------------------------- compare


@dataclass(frozen=True, slots=True)
class Change:
    case: str
    before: CaseRecord
    after: CaseRecord

    def __str__(self) -> str:
        return (
            f"{self.case}: {self.before.status} ({rate(self.before)}) -> "
            f"{self.after.status} ({rate(self.after)})"
        )


@dataclass(frozen=True, slots=True)
class Comparison:
    """Run `a` against the later run `b`, case by case (by `suite/name`)."""

    a: EvalRun
    b: EvalRun
    regressed: tuple[Change, ...]
    improved: tuple[Change, ...]
    unchanged: tuple[str, ...]
    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]

    def as_json(self) -> dict[str, object]:
        def changes(items: tuple[Change, ...]) -> list[dict[str, object]]:
            return [
                {
                    "case": change.case,
                    "before": {
                        "status": change.before.status,
                        "pass_rate": change.before.pass_rate,
                    },
                    "after": {"status": change.after.status, "pass_rate": change.after.pass_rate},
                }
                for change in items
            ]

        return {
            "a": self.a.id,
            "b": self.b.id,
            "regressed": changes(self.regressed),
            "improved": changes(self.improved),
            "unchanged": list(self.unchanged),
            "only_in_a": list(self.only_in_a),
            "only_in_b": list(self.only_in_b),
        }


def compare(a: EvalRun, b: EvalRun) -> Comparison:
    """A case regressed when its pass rate fell from `a` to `b`, or it passed in `a` and
    not in `b`; it improved the other way round."""
    before = {case.id: case for case in a.cases}
    after = {case.id: case for case in b.cases}
    regressed, improved, unchanged = [], [], []
    for case_id in [case.id for case in b.cases if case.id in before]:
        old, new = before[case_id], after[case_id]
        lost = old.status == "passed" and new.status != "passed"
        won = new.status == "passed" and old.status != "passed"
        worse = new.pass_rate < old.pass_rate or lost
        better = new.pass_rate > old.pass_rate or won
        if worse:
            regressed.append(Change(case_id, old, new))
        elif better:
            improved.append(Change(case_id, old, new))
        else:
            unchanged.append(case_id)
    return Comparison(
        a,
        b,
        tuple(regressed),
        tuple(improved),
        tuple(unchanged),
        tuple(case.id for case in a.cases if case.id not in after),
        tuple(case.id for case in b.cases if case.id not in before),
    )
