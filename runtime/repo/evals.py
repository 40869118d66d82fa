"""evals/<suite>.yaml|.yml|.json: eval suites, checked like every repo file (SPEC 18).

Suites are read only when asked (`load_repo(..., evals=True)`: `amodal validate` and
`amodal eval`): they are the repo's tests, not part of what it serves, so they never
change the bundle version and a typo in one never stops `amodal serve`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from runtime.repo._reader import Reader
from runtime.repo._report import Report, Source, did_you_mean, format_field, known
from runtime.repo.bundle import DEFAULT_AGENT, MAIN_AGENT, StoreDefinition
from runtime.repo.eval_suites import Case, CaseFile, Expect, Suite, SuiteFile

EVALS_DIR = "evals"
SUITE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".json": "json"}


@dataclass(frozen=True, slots=True)
class EvalNames:
    """What a suite may refer to, from the rest of the repo."""

    tools: frozenset[str]
    agents: frozenset[str]
    stores: Mapping[str, StoreDefinition]
    mcp: frozenset[str] | None
    """None when amodal.json failed: MCP tool names cannot be checked."""
    is_broken: Callable[[str], bool]
    """True for a name whose own errors are reported already."""


def load_suites(reader: Reader, names: EvalNames) -> list[Suite]:
    """Every suite under evals/, each problem reported with its file and line."""
    directory = reader.root / EVALS_DIR
    if not directory.is_dir():
        return []
    suites: list[Suite] = []
    seen: dict[str, str] = {}
    for entry in sorted(directory.iterdir()):
        relative = reader.relative(entry)
        syntax = _SUFFIXES.get(entry.suffix) if entry.is_file() else None
        if syntax is None:
            reader.report.warn(
                relative, "ignored: a suite is an `evals/<name>.yaml`, `.yml` or `.json` file"
            )
            continue
        name = entry.stem
        if not SUITE_NAME.match(name):
            reader.report.error(
                relative,
                f"suite name {name!r} must be 1-64 letters, digits, `-` and `_`, starting with "
                "a letter or digit (rename the file)",
            )
            continue
        if name in seen:
            reader.report.error(
                relative, f"suite {name!r} is defined twice: here and in {seen[name]}; keep one"
            )
            continue
        seen[name] = relative
        suite = _load_suite(reader, relative, name, syntax, names)
        if suite is not None:
            suites.append(suite)
    return suites


def _load_suite(
    reader: Reader, relative: str, name: str, syntax: str, names: EvalNames
) -> Suite | None:
    report = reader.report
    text = reader.read(relative)
    if text is None:
        return None
    source = Source(relative, text, syntax=syntax)
    found = len(report.errors)
    data = report.parse_json(source) if syntax == "json" else report.parse_yaml(source)
    if data is None:
        if len(report.errors) == found:  # an empty YAML document (or `~`): nothing reported yet
            report.error(relative, "the suite is empty: write `cases:` with at least one case")
        return None
    parsed = report.validate(SuiteFile, data, source, rename=_unquoted)
    checker = _Checker(report, source, names)
    if parsed is None:
        _check_what_parses(checker, data)  # every problem at once, not the first kind only
        return None
    if parsed.agent is not None:
        checker.agent(parsed.agent, ("agent",))
    cases: list[Case] = []
    named: set[str] = set()
    for index, case in enumerate(parsed.cases):
        at = ("cases", index)
        if case.name in named:
            checker.fail(f"case name {case.name!r} is used twice in this suite", (*at, "name"))
        named.add(case.name)
        checker.case(case, parsed.agent, at)
        cases.append(_case(name, relative, source, index, case, parsed))
    return Suite(name, relative, tuple(cases)) if not checker.failed else None


def _check_what_parses(checker: _Checker, data: object) -> None:
    """The reference checks of a suite that has schema errors, on the parts that parse:
    the suite's agent when it is a string, and each case that is valid on its own."""
    if not isinstance(data, dict):
        return
    agent = data.get("agent")
    if isinstance(agent, str) and agent:
        checker.agent(agent, ("agent",))
    cases = data.get("cases")
    for index, raw in enumerate(cases if isinstance(cases, list) else []):
        try:
            case = CaseFile.model_validate(raw)
        except ValidationError:
            continue  # its problems are reported already
        checker.case(case, agent if isinstance(agent, str) else None, ("cases", index))


def _case(
    suite: str, relative: str, source: Source, index: int, case: CaseFile, parsed: SuiteFile
) -> Case:
    turns = tuple(case.turns) if case.turns is not None else (case.message or "",)
    return Case(
        suite=suite,
        name=case.name,
        turns=turns,
        agent=case.agent or parsed.agent or DEFAULT_AGENT,
        claims=MappingProxyType({**parsed.claims, **case.claims}),
        context=MappingProxyType({**parsed.context, **case.context}),
        expect=case.expect,
        file=relative,
        line=source.line(("cases", index)),
    )


class _Checker:
    """Reference checks of one suite: every name must exist in the repo."""

    def __init__(self, report: Report, source: Source, names: EvalNames) -> None:
        self.report = report
        self.source = source
        self.names = names
        self.failed = False

    def fail(self, message: str, path: tuple[str | int, ...]) -> None:
        self.failed = True
        self.report.error(
            self.source.path, message, line=self.source.line(path), field=format_field(path)
        )

    def unknown(
        self, kind: str, name: str, options: Iterable[str], path: tuple[str | int, ...]
    ) -> None:
        choices = sorted(options)
        self.fail(
            f"unknown {kind} {name!r}{did_you_mean(name, choices)}; {known(kind + 's', choices)}",
            path,
        )

    def case(self, case: CaseFile, suite_agent: str | None, at: tuple[str | int, ...]) -> None:
        if case.agent is not None:
            self.agent(case.agent, (*at, "agent"))
        elif suite_agent is None and DEFAULT_AGENT not in self.names.agents:
            self.fail(
                "no agent: the repo has no `default` agent, so name one with `agent:` (in the "
                "case or the suite), or `main` for unscoped chat",
                at,
            )
        self.expectations(case.expect, (*at, "expect"))

    def agent(self, name: str, path: tuple[str | int, ...]) -> None:
        if name == MAIN_AGENT or name in self.names.agents or self.names.is_broken(name):
            return
        self.unknown("agent", name, [*self.names.agents, MAIN_AGENT], path)

    def expectations(self, expect: Expect, at: tuple[str | int, ...]) -> None:
        for key in ("tools_called", "tools_not_called"):
            for index, tool in enumerate(getattr(expect, key) or ()):
                self.tool(tool, (*at, key, index))
        for index, agent in enumerate(expect.subagents_called or ()):
            path = (*at, "subagents_called", index)
            if agent in (DEFAULT_AGENT, MAIN_AGENT):
                self.fail(f"{agent!r} is never called as a specialist", path)
            elif agent not in self.names.agents and not self.names.is_broken(agent):
                self.unknown("agent", agent, self.names.agents - {DEFAULT_AGENT}, path)
        for store, documents in (expect.store or {}).items():
            self.store(store, documents, (*at, "store", store))
        for index, pattern in enumerate(expect.reply_matches or ()):
            path = (*at, "reply_matches", index)
            try:
                re.compile(pattern)
            except re.error as error:
                self.fail(f"invalid regular expression {pattern!r}: {error}", path)

    def tool(self, name: str, path: tuple[str | int, ...]) -> None:
        names = self.names
        if name in names.tools or names.is_broken(name):
            return
        server = name.split("__", 1)[0] if "__" in name and not name.startswith("store__") else None
        if server is not None and (names.mcp is None or server in names.mcp):
            return  # an MCP tool: its names are known only once the server is reached
        store = name.removeprefix("store__").rpartition("__")[0]
        if name.startswith("store__") and names.is_broken(store):
            return
        self.unknown("tool", name, names.tools, path)

    def store(
        self,
        name: str,
        documents: Mapping[str, Mapping[str, object] | None],
        path: tuple[str | int, ...],
    ) -> None:
        definition = self.names.stores.get(name)
        if definition is None:
            if not self.names.is_broken(name):
                self.unknown("store", name, self.names.stores, path)
            return
        for key, fields in documents.items():
            for field in fields or {}:
                if field not in definition.schema:
                    self.fail(
                        f"store {name!r} has no field {field!r}"
                        f"{did_you_mean(field, definition.schema)}; its fields: "
                        + ", ".join(sorted(definition.schema)),
                        (*path, key, field),
                    )


def _unquoted(detail: ErrorDetails) -> str | None:
    """A clearer message for YAML's non-strings where text belongs (`yes`, `on`, `3`)."""
    value = detail.get("input")
    if detail["type"] not in ("string_type", "list_type") or not isinstance(
        value, bool | int | float
    ):
        return None
    expected = "a string" if detail["type"] == "string_type" else "a string or a list of strings"
    return (
        f"expected {expected}, got {value!r}: YAML reads unquoted yes, no, on, off, true, "
        "false and numbers as other types; quote it"
    )
