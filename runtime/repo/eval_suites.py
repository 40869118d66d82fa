"""The eval suite format (SPEC 18): `evals/<suite>.yaml` (or `.yml`, `.json`).

    agent: default                 # optional: the agent every case talks to
    claims: {role: manager}        # optional: the caller's claims (trusted, as in the API)
    context: {page: review}        # optional: the request context
    cases:
      - name: answers from the glossary
        message: What is a Decision?          # or `turns: [first, second, ...]`
        expect:
          tools_called: [load_knowledge]
          reply_contains: verdict

The pydantic models are the trust boundary (unknown keys are errors, no type
coercion); `Suite` and `Case` are what the loader makes of a valid file, with
the suite's agent, claims and context folded into each case. The keys are
snake_case as the SPEC writes them, unlike the camelCase repo files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic import StrictStr as _StrictStr

from runtime._outcomes import DoneReason

Text = Annotated[_StrictStr, StringConstraints(min_length=1)]
OneLine = Annotated[
    _StrictStr, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\r\n]*$")
]
Texts = Annotated[
    list[Text],
    BeforeValidator(lambda value: [value] if isinstance(value, str) else value),
    Field(min_length=1),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
            ]
        }
    ),
]
"""One text, or a list of them (each must hold); read as a list."""

EXPECTATIONS = (
    "reply_contains",
    "reply_not_contains",
    "reply_matches",
    "tools_called",
    "tools_not_called",
    "subagents_called",
    "done_reason",
    "max_tool_calls",
    "store",
    "judge",
    "max_latency_ms",
    "max_tokens",
)
"""Every expectation, in the order they are checked and reported."""


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Expect(_Shape):
    """What a case must show. Every key is optional; each one given must hold."""

    reply_contains: Texts | None = Field(
        default=None, description="Text the last reply contains, ignoring case (each of a list)."
    )
    reply_not_contains: Texts | None = Field(
        default=None, description="Text the last reply does not contain, ignoring case."
    )
    reply_matches: Texts | None = Field(
        default=None, description="A Python regular expression `re.search` finds in the last reply."
    )
    tools_called: Texts | None = Field(
        default=None,
        description="Tools called in this order, others allowed in between (a subsequence).",
    )
    tools_not_called: Texts | None = Field(
        default=None, description="Tools never called, by any agent of the case."
    )
    subagents_called: Texts | None = Field(
        default=None, description="Specialists that ran at least once, in any order."
    )
    done_reason: DoneReason | None = Field(default=None, description="How the last turn ended.")
    max_tool_calls: Annotated[StrictInt, Field(ge=0)] | None = Field(
        default=None, description="The most tool calls the case may make, specialists included."
    )
    store: dict[Text, dict[Text, dict[Text, Any] | None]] | None = Field(
        default=None,
        description="Documents after the case: {store: {key: {field: value}}}; a key mapped to "
        "null must not exist.",
    )
    judge: Text | None = Field(
        default=None, description="A rubric the `advanced` tier grades the conversation against."
    )
    max_latency_ms: Annotated[StrictInt, Field(ge=1)] | None = Field(
        default=None, description="The longest any turn of the case may take, in milliseconds."
    )
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = Field(
        default=None,
        description="The most tokens (input + output, specialists included, judge excluded).",
    )

    @field_validator("store")
    @classmethod
    def _json_values(
        cls, store: dict[str, dict[str, dict[str, Any] | None]] | None
    ) -> dict[str, dict[str, dict[str, Any] | None]] | None:
        for documents in (store or {}).values():
            for fields in documents.values():
                for name, value in (fields or {}).items():
                    _check_json(value, name)
        return store

    def given(self) -> list[str]:
        """The names of the expectations this case sets, in checking order."""
        return [name for name in EXPECTATIONS if getattr(self, name) is not None]


def _check_json(value: Any, where: str) -> None:
    """A store value must be JSON: YAML's dates and timestamps are not (quote them)."""
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: {value} is not a JSON number")
        return
    if isinstance(value, list):
        for item in value:
            _check_json(item, where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _check_json(item, f"{where}.{key}")
        return
    raise ValueError(
        f"{where}: {value!r} is a {type(value).__name__}, not a JSON value "
        "(in YAML, quote dates and times: '2026-01-31')"
    )


class CaseFile(_Shape):
    """One case: a message (or several turns) to one agent, and what must come of it."""

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["message"]}, {"required": ["turns"]}]}
    )

    name: OneLine
    message: Text | None = None
    turns: Annotated[list[Text], Field(min_length=1)] | None = None
    agent: Text | None = None
    claims: dict[Text, _StrictStr] = Field(default_factory=dict)
    context: dict[Text, _StrictStr] = Field(default_factory=dict)
    expect: Expect = Field(default_factory=Expect)

    @model_validator(mode="after")
    def _message_or_turns(self) -> CaseFile:
        if (self.message is None) == (self.turns is None):
            raise ValueError("a case has either `message` or `turns` (a list of messages)")
        return self


class SuiteFile(_Shape):
    """evals/<suite>.yaml: cases, and the agent, claims and context they share."""

    agent: Text | None = None
    claims: dict[Text, _StrictStr] = Field(default_factory=dict)
    context: dict[Text, _StrictStr] = Field(default_factory=dict)
    cases: Annotated[list[CaseFile], Field(min_length=1)]


# ---------------------------------------------------------------- what the loader makes


@dataclass(frozen=True, slots=True)
class Case:
    """One case, ready to run: the suite's agent, claims and context folded in."""

    suite: str
    name: str
    turns: tuple[str, ...]
    agent: str
    """The agent that roots the case's session (`main`: the operator's unscoped chat)."""
    claims: Mapping[str, str]
    context: Mapping[str, str]
    expect: Expect
    file: str
    line: int | None

    @property
    def id(self) -> str:
        """`suite/case name`: how reports, JUnit and `--compare` name the case."""
        return f"{self.suite}/{self.name}"


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    """The file name without its extension."""
    file: str
    cases: tuple[Case, ...]


__all__ = [
    "EXPECTATIONS",
    "Case",
    "CaseFile",
    "Expect",
    "Suite",
    "SuiteFile",
]
