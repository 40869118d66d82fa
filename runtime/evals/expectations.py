"""What a case did (`Observation`), and each expectation of SPEC 18 checked against it.

Every check returns None when it holds, or a `Failure` whose message says what was
expected and what happened, so a person reading a failed case needs nothing else.
The judge is graded by `runtime.evals.judge`; the runner adds its verdict.

Scope of each expectation: the reply ones read the case's last reply; the
trajectory ones (`tools_called`, `tools_not_called`, `max_tool_calls`) and
`subagents_called` cover every turn and every agent of the case (specialists
included, in the order their calls streamed); `done_reason` is the last turn's;
`max_latency_ms` bounds each turn; `max_tokens` bounds the whole case.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.events import Usage
from runtime.repo.eval_suites import Expect

REPLY_SHOWN = 300
"""How much of a reply a failure message quotes."""


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call of the case: which tool, which agent asked, how it ended."""

    name: str
    agent: str
    status: str | None = None
    """`ok`, `error`, `denied`, `timeout`; None when it never ended (awaiting confirmation)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything a case showed, across its turns."""

    agent: str
    """The agent the case talked to; its own tool calls are shown without an agent name."""
    replies: tuple[str, ...]
    """The root agent's reply to each turn."""
    trajectory: tuple[ToolUse, ...]
    subagents: tuple[str, ...]
    """Every specialist run, in the order they started."""
    done_reason: str
    latencies_ms: tuple[int, ...]
    usage: Usage
    models: tuple[str, ...] = ()
    """The models that answered, as they named themselves."""
    documents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """After the case, per store named by `expect.store`: key -> document."""

    @property
    def reply(self) -> str:
        return self.replies[-1] if self.replies else ""


@dataclass(frozen=True, slots=True)
class Failure:
    """One expectation that did not hold."""

    expectation: str
    message: str


def check(expect: Expect, seen: Observation) -> list[Failure]:
    """Every expectation of `expect` but `judge` that does not hold, in checking order."""
    failures = []
    for name in expect.given():
        rule = _RULES.get(name)
        if rule is None:
            continue  # the judge: graded by the runner
        message = rule(getattr(expect, name), seen)
        if message is not None:
            failures.append(Failure(name, message))
    return failures


# ---------------------------------------------------------------- the rules


def _reply_contains(wanted: str | list[str], seen: Observation) -> str | None:
    missing = [text for text in _texts(wanted) if text.casefold() not in seen.reply.casefold()]
    if not missing:
        return None
    return f"expected the reply to contain {_listed(missing)} (ignoring case); {_the_reply(seen)}"


def _reply_not_contains(unwanted: str | list[str], seen: Observation) -> str | None:
    found = [text for text in _texts(unwanted) if text.casefold() in seen.reply.casefold()]
    if not found:
        return None
    return f"expected the reply not to contain {_listed(found)} (ignoring case); {_the_reply(seen)}"


def _reply_matches(patterns: str | list[str], seen: Observation) -> str | None:
    missing = [pattern for pattern in _texts(patterns) if re.search(pattern, seen.reply) is None]
    if not missing:
        return None
    shown = ", ".join(f"/{pattern}/" for pattern in missing)
    return f"expected the reply to match {shown}; {_the_reply(seen)}"


def _tools_called(wanted: list[str], seen: Observation) -> str | None:
    names = [use.name for use in seen.trajectory]
    position = 0
    for index, tool in enumerate(wanted):
        try:
            position = names.index(tool, position) + 1
        except ValueError:
            after = f" after {wanted[index - 1]}" if index else ""
            return (
                f"expected the tools {_sequence(wanted)} to be called in this order; "
                f"{tool} was not called{after}. The trajectory was {_trajectory(seen)}"
            )
    return None


def _tools_not_called(unwanted: list[str], seen: Observation) -> str | None:
    called = [use for use in seen.trajectory if use.name in unwanted]
    if not called:
        return None
    return (
        f"expected {_listed(sorted({use.name for use in called}))} never to be called; "
        f"the trajectory was {_trajectory(seen)}"
    )


def _subagents_called(wanted: list[str], seen: Observation) -> str | None:
    missing = [name for name in wanted if name not in seen.subagents]
    if not missing:
        return None
    ran = _sequence(list(dict.fromkeys(seen.subagents))) if seen.subagents else "none"
    return f"expected the specialists {_listed(missing)} to run; the specialists that ran: {ran}"


def _done_reason(wanted: str, seen: Observation) -> str | None:
    if seen.done_reason == wanted:
        return None
    return f"expected the last turn to end with {wanted!r}; it ended with {seen.done_reason!r}"


def _max_tool_calls(limit: int, seen: Observation) -> str | None:
    if len(seen.trajectory) <= limit:
        return None
    return (
        f"expected at most {limit} tool call(s); the case made {len(seen.trajectory)}: "
        f"{_trajectory(seen)}"
    )


def _store(
    wanted: Mapping[str, Mapping[str, Mapping[str, Any] | None]], seen: Observation
) -> str | None:
    problems = []
    for store, documents in wanted.items():
        found = seen.documents.get(store, {})
        for key, fields in documents.items():
            document = found.get(key)
            if fields is None:
                if document is not None:
                    problems.append(f"{store} {key!r} should not exist; it is {_json(document)}")
            elif document is None:
                keys = ", ".join(repr(k) for k in sorted(found)) or "none"
                problems.append(
                    f"{store} {key!r} should exist with {_json(dict(fields))}; it does not "
                    f"(the documents of {store}: {keys})"
                )
            else:
                for name, value in fields.items():
                    if name not in document:
                        problems.append(
                            f"{store} {key!r}: expected {name} = {_json(value)}; it has no {name}"
                        )
                    elif not json_equal(document[name], value):
                        problems.append(
                            f"{store} {key!r}: expected {name} = {_json(value)}; "
                            f"it is {_json(document[name])}"
                        )
    return "; ".join(problems) or None


def _max_latency_ms(limit: int, seen: Observation) -> str | None:
    slow = [(index, ms) for index, ms in enumerate(seen.latencies_ms, 1) if ms > limit]
    if not slow:
        return None
    turns = ", ".join(
        f"turn {index} took {ms} ms" if len(seen.latencies_ms) > 1 else f"it took {ms} ms"
        for index, ms in slow
    )
    return f"expected every turn to answer within {limit} ms; {turns}"


def _max_tokens(limit: int, seen: Observation) -> str | None:
    used = seen.usage.input_tokens + seen.usage.output_tokens
    if used <= limit:
        return None
    return (
        f"expected at most {limit} tokens; the case used {used} "
        f"({seen.usage.input_tokens} in, {seen.usage.output_tokens} out)"
    )


_RULES: dict[str, Callable[[Any, Observation], str | None]] = {
    "reply_contains": _reply_contains,
    "reply_not_contains": _reply_not_contains,
    "reply_matches": _reply_matches,
    "tools_called": _tools_called,
    "tools_not_called": _tools_not_called,
    "subagents_called": _subagents_called,
    "done_reason": _done_reason,
    "max_tool_calls": _max_tool_calls,
    "store": _store,
    "max_latency_ms": _max_latency_ms,
    "max_tokens": _max_tokens,
}


# ---------------------------------------------------------------- helpers


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: 1 equals 1.0, but a boolean never equals a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _texts(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _listed(texts: Sequence[str]) -> str:
    return ", ".join(repr(text) for text in texts)


def _sequence(names: Sequence[str]) -> str:
    return "[" + ", ".join(names) + "]"


def _trajectory(seen: Observation) -> str:
    if not seen.trajectory:
        return "empty (no tool was called)"
    shown = [
        use.name if use.agent == seen.agent else f"{use.name} ({use.agent})"
        for use in seen.trajectory
    ]
    return _sequence(shown)


def _the_reply(seen: Observation) -> str:
    reply = seen.reply
    if not reply:
        return "the reply was empty"
    if len(reply) > REPLY_SHOWN:
        reply = reply[:REPLY_SHOWN] + "…"
    return f"the reply was {reply!r}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
