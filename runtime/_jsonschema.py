"""Checking tool arguments against a JSON Schema that may come from outside the runtime.

An MCP server's `inputSchema` (and `outputSchema`) is written by whoever runs the
server, and a tool's arguments are written by the model: neither is trusted. Two
things a plain validator does with them are refused here:

- **fetching.** A `$ref` may name any URI, and a validator with the default registry
  retrieves it (`http://...`, `file://...`). Here references resolve only inside the
  schema (`#/$defs/x`, `#anchor`): `schema_problem` calls any other `$ref` a bad
  schema, and the validator's registry retrieves nothing, so a reference it cannot
  resolve is an error, never a request;
- **backtracking.** A `pattern` such as `^(a+)+$` takes time exponential in the length
  of the text on Python's `re`, on the event loop. Here `pattern` and
  `patternProperties` run on RE2 (as the file tools' patterns do), whose time is
  linear; a pattern RE2 cannot run (a backreference, a lookaround) is a bad schema.

`schema_problem(schema)` says what is wrong with a schema (None when it is usable);
`argument_check(schema, tool)` is the function that lists why arguments do not fit, and
never raises. The same rules hold for every tool, custom tools' `tool.json` included.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import re2
from jsonschema import Draft202012Validator, SchemaError, validators
from jsonschema.exceptions import ValidationError
from referencing import Registry
from referencing.jsonschema import DRAFT202012

MAX_PATTERN_CHARS = 1_000
_REFERENCES = ("$ref", "$dynamicRef")


LOCAL_ONLY: Registry[Any] = Registry()
"""A registry that knows no resource and retrieves none (jsonschema's default registry
fetches any URI a `$ref` names): references stay in the schema."""


@functools.lru_cache(maxsize=1024)
def _program(pattern: str) -> Any:
    """`pattern` as an RE2 program; `re2.error` when RE2 cannot run it."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise re2.error(f"longer than {MAX_PATTERN_CHARS} characters")
    options = re2.Options()
    options.log_errors = False
    return re2.compile(pattern, options)


def _found(pattern: str, text: str) -> bool:
    return _program(pattern).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _found(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _found(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [
        key
        for key in instance
        if key not in known and not any(_found(pattern, key) for pattern in patterns)
    ]
    if validator.is_type(allowed, "object"):
        for key in extras:
            yield from validator.descend(instance[key], allowed, path=key)
    elif allowed is False and extras:  # jsonschema's own wording
        listed = ", ".join(repr(key) for key in sorted(extras))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(pattern) for pattern in sorted(patterns))
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            message = f"Additional properties are not allowed ({listed} {verb} unexpected)"
            yield ValidationError(message)


_Checker = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


def schema_problem(schema: Any, *, metaschema: bool = True) -> str | None:
    """Why `schema` cannot be used to check arguments here, or None. `metaschema=False`
    skips the check against JSON Schema 2020-12 (a caller that made its own)."""
    if not isinstance(schema, Mapping):
        return "it is not a JSON object"
    try:
        if metaschema:
            Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        return f"it is not a valid JSON Schema: {error.message}"
    except RecursionError:
        return "it is nested too deeply"
    found = list(_keywords(schema))
    names = {keyword for keyword, _ in found}
    if "unevaluatedProperties" in names and "patternProperties" in names:
        # jsonschema matches patternProperties for unevaluatedProperties with Python's re.
        return "it combines unevaluatedProperties with patternProperties, which is not supported"
    # As 2020-12 whatever its `$schema` says: an unknown dialect must not fail the listing.
    resolver = LOCAL_ONLY.resolver_with_root(DRAFT202012.create_resource(dict(schema)))
    for keyword, value in found:
        if keyword in _REFERENCES:
            problem = _reference_problem(resolver, keyword, value)
        elif keyword == "pattern":
            problem = _pattern_problem(value)
        elif keyword == "patternProperties":
            problem = next(filter(None, map(_pattern_problem, value)), None)
        else:
            problem = None
        if problem is not None:
            return problem
    return None


def _reference_problem(resolver: Any, keyword: str, value: Any) -> str | None:
    if not isinstance(value, str) or not value.startswith("#"):
        return (
            f"its {keyword} {value!r} points outside the schema: only local references "
            "(#/...) are resolved"
        )
    try:
        resolver.lookup(value)
    except Exception:  # Unresolvable, or a fragment no JSON pointer can be made of
        return f"its {keyword} {value!r} does not resolve within the schema"
    return None


def _pattern_problem(pattern: str) -> str | None:
    try:
        _program(pattern)
    except re2.error as error:
        reason = error.args[0] if error.args else error
        detail = reason.decode() if isinstance(reason, bytes) else str(reason)
        return (
            f"its pattern {pattern!r} cannot run on RE2 ({detail}): backreferences and "
            "lookaround are not supported"
        )
    return None


# Keywords whose values are data, not schemas: a `$ref` inside an `enum` is just a value.
_DATA = frozenset({"enum", "const", "default", "examples"})


def _keywords(schema: Any) -> Iterator[tuple[str, Any]]:
    """The references, patterns and property keywords of `schema` and its subschemas."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        if not isinstance(node, Mapping):
            continue
        for key, value in node.items():
            if key in _DATA:
                continue
            if key == "properties" and isinstance(value, Mapping):
                stack.extend(value.values())  # its keys are names, never keywords
                continue
            if key in (*_REFERENCES, "pattern"):
                yield key, value
            elif key in ("patternProperties", "unevaluatedProperties"):
                yield key, value
            stack.append(value)


ArgumentCheck = Callable[[Any], list[str]]
"""Why arguments do not fit (empty when they do)."""


def argument_check(schema: Mapping[str, Any], tool: str) -> ArgumentCheck:
    """The argument check of tool `tool`: it never raises. A schema that cannot be applied
    (an unresolvable reference a server slipped past `schema_problem`) is one problem
    naming the tool, so the call gets an error result and the turn goes on."""
    validator = _Checker(dict(schema), registry=LOCAL_ONLY)

    def check(arguments: Any) -> list[str]:
        try:
            return [
                f"{'/'.join(map(str, error.absolute_path)) or 'arguments'}: {error.message}"
                for error in validator.iter_errors(arguments)
            ]
        # A schema is outside input: whatever it makes the validator do, the call gets an
        # error result that says so, and the turn goes on.
        except Exception as error:
            why = f"{type(error).__name__}: {error}"
            return [f"the inputSchema of tool {tool!r} cannot be applied: {why}"]

    return check


__all__ = ["LOCAL_ONLY", "ArgumentCheck", "argument_check", "schema_problem"]
