"""Stores: typed JSON documents that agents keep, checked against their entity schema.

The rules shared by the store tools (`runtime.tools.store_tools`) and the operators'
HTTP routes (`runtime.server.store_routes`), so both accept and refuse the same
documents (SPEC 1.4, 10; docs/stores.md):

- A document holds only schema fields. A field without `nullable` is required
  and never null; a `nullable` field may be null or left out.
- Types: `string` (min/max: length in characters), `number` (an int or a
  float; min/max: its value), `boolean`, `datetime` (ISO 8601: a date, or a
  date and time; one with an offset is stored in UTC with `Z`, so datetimes
  sort by time), `enum` (one of `values`), `array` (each element an `item`;
  min/max: the number of elements), `object` (with `fields`: the same rules
  one level down; without: any JSON object). min/max of other types are
  ignored. Bounds are inclusive.
- Numbers, anywhere in a document and in a query's filters: an integer fits
  in 64 bits (-2**63 to 2**63 - 1) and a float is finite
  (`runtime.storage.number_problem`), so both backends match the same
  documents; anything else is a problem naming the field.
- The key comes from the key template (`note:{slug}`): every key field must be
  present and not null or empty. Numbers appear as written (3, 2.5), booleans
  as `true`/`false`.
- Documents are partitioned by the caller's scope; a `shared` store has one
  partition (`SHARED_SCOPE`) that every scope reads and only operators write.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import anyio

from runtime._text import json_problem, text_problem
from runtime.exceptions import AmodalError, DocumentError
from runtime.repo.bundle import StoreDefinition
from runtime.repo.formats import StoreField
from runtime.storage import (
    MAX_QUERY_LIMIT,
    DocumentQuery,
    DocumentStorage,
    FilterValue,
    JSONObject,
    StorageError,
    number_problem,
)

logger = logging.getLogger("amodal")

SHARED_SCOPE = "*shared*"
"""The one partition of a `shared` store."""

DEFAULT_QUERY_LIMIT = 20
MAX_QUERY_OFFSET = 2**31 - 1
"""Beyond it an offset is refused (a database integer holds it; no store is that large)."""
MAX_KEY_CHARS = 512
PURGE_INTERVAL_SECONDS = 60.0
PURGE_INTERVAL_ENV = "AMODAL_STORE_PURGE_SECONDS"
SCALAR_TYPES = frozenset({"string", "number", "boolean", "datetime", "enum"})
"""Field types a query may filter and sort on."""

_DATETIME = re.compile(
    r"^\d{4}-\d{2}-\d{2}"
    r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|z|[+-]\d{2}:?\d{2})?)?$"
)
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def partition(store: StoreDefinition, scope_id: str) -> str:
    """The scope a store's documents live under for a caller of `scope_id`."""
    return SHARED_SCOPE if store.shared else scope_id


# --- documents ----------------------------------------------------------------


def validate_document(store: StoreDefinition, document: object) -> JSONObject:
    """The document as it will be stored (datetimes with an offset in UTC), or a
    `DocumentError` listing every problem."""
    problems: list[str] = []
    checked = _object(store.schema, document, "", problems)
    not_text = json_problem(document, "document")
    if not_text is not None:
        problems.append(not_text)
    if problems:
        what = f"the document does not fit the {store.entity} schema"
        raise DocumentError(store.name, what, problems)
    assert isinstance(checked, dict)
    return checked


def document_key(store: StoreDefinition, document: Mapping[str, Any]) -> str:
    """The key the template makes of a (valid) document's fields."""
    return _render_key(store, document)


def key_from_fields(store: StoreDefinition, fields: Mapping[str, Any]) -> str:
    """The key the template makes of key-field values given on their own (get, delete)."""
    problems: list[str] = []
    values: dict[str, Any] = {}
    for name in store.key_fields:
        if name in fields and fields[name] is not None:
            values[name] = _value(store.schema[name], fields[name], name, problems)
    if problems:
        raise DocumentError(store.name, "invalid key fields", problems)
    return _render_key(store, values)


def check_key(store: StoreDefinition, key: object) -> str:
    if not isinstance(key, str) or not key:
        raise DocumentError(store.name, "invalid key", ["a key is a non-empty string"])
    if len(key) > MAX_KEY_CHARS:
        limit = f"a key has at most {MAX_KEY_CHARS} characters"
        raise DocumentError(store.name, "invalid key", [limit])
    if "\x00" in key:
        raise DocumentError(store.name, "invalid key", ["a key cannot hold the character U+0000"])
    return key


def _render_key(store: StoreDefinition, values: Mapping[str, Any]) -> str:
    missing = [
        name for name in store.key_fields if values.get(name) is None or values.get(name) == ""
    ]
    if missing:
        fields = ", ".join(f"`{name}`" for name in missing)
        raise DocumentError(
            store.name,
            "no key",
            [f"the key template {store.key!r} needs {fields}; give a value for each"],
        )

    def text(match: re.Match[str]) -> str:
        return _key_text(values[match.group(1)])

    return check_key(store, _PLACEHOLDER.sub(text, store.key))


def _key_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value)


def _object(
    fields: Mapping[str, StoreField] | None, value: object, path: str, problems: list[str]
) -> object:
    if not isinstance(value, dict):
        problems.append(f"{_where(path)}expected an object, got {_json_type(value)}")
        return value
    if fields is None:
        _untyped_numbers(value, path, problems)
        return value
    checked: dict[str, Any] = {}
    for name, item in value.items():
        spec = fields.get(name)
        if spec is None:
            problems.append(f"unknown field `{_join(path, name)}` (fields: {', '.join(fields)})")
            continue
        checked[name] = _value(spec, item, _join(path, name), problems)
    for name, spec in fields.items():
        if not spec.nullable and name not in value:
            problems.append(
                f"missing field `{_join(path, name)}` ({_describe(spec)}): it is required"
            )
    return checked


def _value(spec: StoreField, value: object, path: str, problems: list[str]) -> Any:
    """The value to store, appending to `problems` when it breaks `spec`."""
    where = _where(path)
    if value is None:
        if not spec.nullable:
            problems.append(f"`{path}` is null but not nullable")
        return None
    kind = spec.type
    if kind == "string":
        if not isinstance(value, str):
            problems.append(f"{where}expected a string, got {_json_type(value)}")
        else:
            _bounds(spec, len(value), "characters", where, problems)
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"{where}expected a number, got {_json_type(value)}")
        elif (problem := number_problem(value)) is not None:
            problems.append(f"{where}{problem}")
        else:
            _bounds(spec, value, "", where, problems)
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            problems.append(f"{where}expected true or false, got {_json_type(value)}")
        return value
    if kind == "datetime":
        return _datetime(value, where, problems)
    if kind == "enum":
        values = spec.values or ()
        if not isinstance(value, str) or value not in values:
            problems.append(f"{where}{_show(value)} is not one of " + ", ".join(values))
        return value
    if kind == "array":
        if not isinstance(value, list):
            problems.append(f"{where}expected an array, got {_json_type(value)}")
            return value
        _bounds(spec, len(value), "elements", where, problems)
        if spec.item is None:
            _untyped_numbers(value, path, problems)
            return value
        item = spec.item
        return [_value(item, element, f"{path}[{i}]", problems) for i, element in enumerate(value)]
    return _object(spec.fields, value, path, problems)


def _untyped_numbers(value: object, path: str, problems: list[str]) -> None:
    """The number rule (`runtime.storage.number_problem`) in a value of no declared type:
    an object without `fields`, an array without `item`."""
    stack: list[tuple[object, str]] = [(value, path)]
    while stack:  # a loop, not recursion: the nesting depth is the sender's choice
        item, where = stack.pop()
        if isinstance(item, dict):
            stack.extend((item[name], _join(where, name)) for name in reversed(item))
        elif isinstance(item, list):
            stack.extend((item[i], f"{where}[{i}]") for i in reversed(range(len(item))))
        elif (problem := number_problem(item)) is not None:
            problems.append(f"{_where(where)}{problem}")


def _bounds(spec: StoreField, size: float, unit: str, where: str, problems: list[str]) -> None:
    label = f"{size:g} {unit}".strip() if unit else f"{size!r}"
    if spec.min is not None and size < spec.min:
        problems.append(f"{where}{label} is less than the minimum {spec.min:g}")
    if spec.max is not None and size > spec.max:
        problems.append(f"{where}{label} is more than the maximum {spec.max:g}")


def _datetime(value: object, where: str, problems: list[str]) -> object:
    example = "e.g. 2025-01-31 or 2025-01-31T09:30:00Z"
    if not isinstance(value, str):
        problems.append(
            f"{where}expected an ISO 8601 datetime string ({example}), got {_json_type(value)}"
        )
        return value
    if not _DATETIME.match(value):
        problems.append(f"{where}{_show(value)} is not an ISO 8601 datetime ({example})")
        return value
    try:
        moment = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        problems.append(f"{where}{_show(value)} is not a valid date or time ({example})")
        return value
    if moment.tzinfo is None:
        return value  # no offset: kept as written
    try:
        utc = moment.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:  # 0001-01-01T00:00+05:00 is before the first representable moment
        problems.append(f"{where}{_show(value)} is out of range in UTC ({example})")
        return value
    return utc.isoformat(timespec="microseconds" if utc.microsecond else "seconds") + "Z"


# --- queries ------------------------------------------------------------------


def check_query(
    store: StoreDefinition,
    filters: object = None,
    sort: object = None,
    limit: object = None,
    offset: object = None,
) -> DocumentQuery:
    """A query of `store` from loose input (tool arguments, query parameters)."""
    problems: list[str] = []
    checked: dict[str, FilterValue] = {}
    scalars = [name for name, spec in store.schema.items() if spec.type in SCALAR_TYPES]
    if filters is None:
        filters = {}
    if not isinstance(filters, dict):
        problems.append(f"filter: expected an object of field -> value, got {_json_type(filters)}")
        filters = {}
    for name, value in filters.items():
        spec = store.schema.get(name)
        if spec is None or spec.type not in SCALAR_TYPES:
            problems.append(
                f"filter: cannot filter on {name!r}; fields to filter on: " + ", ".join(scalars)
            )
        elif value is None:
            checked[name] = None
        elif isinstance(value, str) and text_problem(value) is not None:
            problems.append(f"filter.{name}: {text_problem(value)}")
        else:
            found: list[str] = []
            # Bounds do not apply: a value outside them simply matches nothing.
            unbounded = spec.model_copy(update={"min": None, "max": None})
            checked[name] = _value(unbounded, value, f"filter.{name}", found)
            problems.extend(found)
    sort_text: str | None = None
    if sort is not None and sort != "":
        field = sort[1:] if isinstance(sort, str) and sort.startswith("-") else sort
        spec = store.schema.get(field) if isinstance(field, str) else None
        if spec is None or spec.type not in SCALAR_TYPES:
            problems.append(
                f"sort: {sort!r} is not `field` or `-field` of a field to sort on: "
                + ", ".join(scalars)
            )
        else:
            sort_text = str(sort)
    size = _integer(limit, DEFAULT_QUERY_LIMIT, "limit", 1, MAX_QUERY_LIMIT, problems)
    skip = _integer(offset, 0, "offset", 0, MAX_QUERY_OFFSET, problems)
    if problems:
        raise DocumentError(store.name, "invalid query", problems)
    return DocumentQuery(checked, sort_text, size, skip)


def _integer(
    value: object, default: int, name: str, low: int, high: int, problems: list[str]
) -> int:
    if value is None:
        return default
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{name}: expected an integer, got {_show(value)}")
        return default
    if not low <= value <= high:
        problems.append(f"{name}: {value} is out of range ({low} to {high})")
        return default
    return value


# --- JSON Schemas for tools ---------------------------------------------------


def document_schema(store: StoreDefinition) -> dict[str, Any]:
    """The JSON Schema of a whole document (the `put` tool's parameters)."""
    return _object_schema(store.schema)


def field_schema(spec: StoreField) -> dict[str, Any]:
    """The JSON Schema of one field, bounds and nullability included."""
    schema: dict[str, Any]
    kind = spec.type
    if kind == "string":
        schema = {"type": "string"}
        if spec.min is not None:
            schema["minLength"] = math.ceil(spec.min)
        if spec.max is not None:
            schema["maxLength"] = math.floor(spec.max)
    elif kind == "number":
        schema = {"type": "number"}
        if spec.min is not None:
            schema["minimum"] = spec.min
        if spec.max is not None:
            schema["maximum"] = spec.max
    elif kind == "boolean":
        schema = {"type": "boolean"}
    elif kind == "datetime":
        schema = {
            "type": "string",
            "format": "date-time",
            "description": "ISO 8601, e.g. 2025-01-31T09:30:00Z (or a date: 2025-01-31)",
        }
    elif kind == "enum":
        schema = {"type": "string", "enum": list(spec.values or ())}
    elif kind == "array":
        schema = {"type": "array"}
        if spec.item is not None:
            schema["items"] = field_schema(spec.item)
        if spec.min is not None:
            schema["minItems"] = math.ceil(spec.min)
        if spec.max is not None:
            schema["maxItems"] = math.floor(spec.max)
    else:
        schema = _object_schema(spec.fields) if spec.fields is not None else {"type": "object"}
    if spec.nullable:
        schema["type"] = [schema["type"], "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
    return schema


def _object_schema(fields: Mapping[str, StoreField]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: field_schema(spec) for name, spec in fields.items()},
        "required": [name for name, spec in fields.items() if not spec.nullable],
        "additionalProperties": False,
    }


# --- the purge ------------------------------------------------------------------


def purge_interval(environ: Mapping[str, str]) -> float:
    """Seconds between purges: `AMODAL_STORE_PURGE_SECONDS`, or 60."""
    text = environ.get(PURGE_INTERVAL_ENV, "")
    try:
        value = float(text) if text else PURGE_INTERVAL_SECONDS
    except ValueError:
        raise AmodalError(
            f"{PURGE_INTERVAL_ENV}={text!r} is not a number of seconds; unset it or give e.g. 60"
        ) from None
    if not value > 0:
        raise AmodalError(f"{PURGE_INTERVAL_ENV} must be more than 0 seconds, got {text!r}")
    return value


async def purge_periodically(
    storage: DocumentStorage, interval_seconds: float = PURGE_INTERVAL_SECONDS
) -> None:
    """Delete expired documents every `interval_seconds`, forever (cancel to stop).

    Reads already hide expired documents; the purge only frees their space. A
    failed purge is logged and tried again next time.
    """
    while True:
        await anyio.sleep(interval_seconds)
        try:
            purged = await storage.purge_expired()
        except StorageError as error:
            logger.warning(
                "store_purge_failed", extra={"event": "store_purge_failed", "error": str(error)}
            )
            continue
        if purged:
            logger.info("store_purged", extra={"event": "store_purged", "documents": purged})


# --- words ----------------------------------------------------------------------


def _describe(spec: StoreField) -> str:
    if spec.type == "enum":
        return "one of " + ", ".join(spec.values or ())
    if spec.type == "array" and spec.item is not None:
        return f"an array of {_describe(spec.item)}"
    return {"datetime": "an ISO 8601 datetime", "object": "an object", "array": "an array"}.get(
        spec.type, f"a {spec.type}"
    )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {_show(value)}"
    if isinstance(value, str):
        return f"string {_show(value)}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _show(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 200:
        return f"a {value.bit_length()}-bit integer"  # never thousands of digits
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _where(path: str) -> str:
    return f"`{path}`: " if path else ""


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


__all__ = [
    "DEFAULT_QUERY_LIMIT",
    "MAX_QUERY_OFFSET",
    "SCALAR_TYPES",
    "SHARED_SCOPE",
    "DocumentError",
    "check_key",
    "check_query",
    "document_key",
    "document_schema",
    "field_schema",
    "key_from_fields",
    "partition",
    "purge_interval",
    "purge_periodically",
    "validate_document",
]
