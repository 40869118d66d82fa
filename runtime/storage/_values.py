"""Values in and out of a database, shared by the backends so they refuse the same input."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from runtime.storage.records import (
    MAX_QUERY_LIMIT,
    MAX_SEARCH_LIMIT,
    MEMORY_KINDS,
    DocumentQuery,
    FilterValue,
    JSONObject,
    MemoryEntry,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The integers a store document or a query filter may hold (see `number_problem`)."""


def dump(value: JSONObject, what: str) -> str:
    """Compact JSON text of an object; `TypeError`/`ValueError` naming `what` if it is not JSON."""
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be a JSON object (a dict), got {type(value).__name__}")
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise type(e)(f"{what} is not JSON: {e}") from e
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (tool output decoded from broken JSON, say) cannot be
        # stored as UTF-8; as a \u escape it is plain ASCII and comes back exact.
        return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text


def load(text: str) -> JSONObject:
    return cast(JSONObject, json.loads(text))


def aware(moment: datetime, what: str) -> datetime:
    """`moment` in UTC; `ValueError` for a naive datetime."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(
            f"{what}: naive datetime {moment.isoformat()}; "
            "pass an aware one, e.g. datetime.now(UTC)"
        )
    return moment.astimezone(UTC)


def iso(moment: datetime, what: str) -> str:
    """ISO 8601 in UTC with microseconds: text order is time order."""
    return aware(moment, what).isoformat(timespec="microseconds")


def check_status(status: str, allowed: Sequence[str]) -> None:
    if status not in allowed:
        raise ValueError(f"run status {status!r} is not one of {', '.join(allowed)}")


def check_ttl(ttl_seconds: float) -> None:
    if not ttl_seconds > 0:
        raise ValueError(f"ttl_seconds must be more than 0, got {ttl_seconds!r}")


def check_document(
    scope_id: str, store: str, key: str, data: JSONObject, ttl_seconds: float | None, keep: int
) -> str:
    """The document's JSON text; refuses what one of the backends could not store exactly.

    PostgreSQL's `jsonb` holds neither U+0000 nor unpaired surrogates, so both
    backends refuse them (in keys and values alike) rather than differ; numbers
    follow `number_problem`.
    """
    for name, value in (("scope_id", scope_id), ("store", store), ("key", key)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        _check_text(value, name)
    if ttl_seconds is not None:
        check_ttl(ttl_seconds)
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValueError(f"keep_versions must be an int of 0 or more, got {keep!r}")
    _check_value(data, "document")
    return dump(data, f"document {key!r}")


def number_problem(value: object) -> str | None:
    """Why a number may not be in a store document or a query filter, or None.

    Integers must fit in 64 bits and floats must be finite: PostgreSQL's jsonb
    keeps any number exactly but SQLite's JSON reads a larger integer as a
    double, so the two would match different documents; and a JSON number
    beyond a double's range reads as infinity, which no JSON can hold. Never
    echoes a long number whole.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return None
        shown = str(value) if value.bit_length() <= 100 else f"a {value.bit_length()}-bit integer"
        return (
            f"{shown} is outside the 64-bit integer range ({INT64_MIN} to {INT64_MAX}); "
            "store a larger integer as a string, or as a float if an approximate value will do"
        )
    if isinstance(value, float) and not math.isfinite(value):
        # A JSON number beyond a double's range (1e400) is read as infinity.
        return f"{value!r} is not a JSON number: numbers must be finite (within about ±1.8e308)"
    return None


def _check_value(value: Any, path: str) -> None:
    if isinstance(value, str):
        _check_text(value, path)
    elif isinstance(value, int | float):
        problem = number_problem(value)
        if problem is not None:
            raise ValueError(f"{path}: {problem}")
    elif isinstance(value, dict):
        for name, item in value.items():
            _check_text(name, f"{path}: field name")
            _check_value(item, f"{path}.{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_value(item, f"{path}[{index}]")


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise ValueError(f"{path}: strings in documents cannot hold the character U+0000")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"{path}: strings in documents cannot hold unpaired surrogates") from e


def check_page(limit: int, offset: int) -> None:
    """`ValueError` unless `limit` is 1 to MAX_QUERY_LIMIT and `offset` 0 or more."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError(f"limit must be an int, got {limit!r}")
    if not 1 <= limit <= MAX_QUERY_LIMIT:
        raise ValueError(f"limit must be 1 to {MAX_QUERY_LIMIT}, got {limit}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an int of 0 or more, got {offset!r}")


def check_query(query: DocumentQuery) -> tuple[list[tuple[str, FilterValue]], str | None, bool]:
    """The query's filters, sort field and direction; `ValueError` for anything out of bounds."""
    check_page(query.limit, query.offset)
    filters: list[tuple[str, FilterValue]] = []
    for name, value in _items(query.filters):
        if not isinstance(name, str) or not name:
            raise ValueError(f"filter field names must be non-empty strings, got {name!r}")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise TypeError(
                f"filter {name!r}: values are strings, numbers, booleans or null, "
                f"got {type(value).__name__}"
            )
        problem = number_problem(value)
        if problem is not None:
            raise ValueError(f"filter {name!r}: {problem}")
        if isinstance(value, str):
            _check_text(value, f"filter {name!r}")
        filters.append((name, value))
    sort = query.sort
    if sort is None:
        return filters, None, False
    descending = sort.startswith("-")
    field = sort[1:] if descending else sort
    if not field:
        raise ValueError(f"sort must be 'field' or '-field', got {sort!r}")
    return filters, field, descending


def _items(filters: Mapping[str, FilterValue]) -> list[tuple[str, FilterValue]]:
    if not isinstance(filters, Mapping):
        raise TypeError(
            f"filters must be a mapping of field to value, got {type(filters).__name__}"
        )
    return list(filters.items())


def text_problem(text: str) -> str | None:
    """Why a text cannot be kept exactly by both backends (PostgreSQL's text holds neither
    U+0000 nor unpaired surrogates), or None."""
    if "\x00" in text:
        return "it holds the character U+0000"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "it holds an unpaired surrogate"
    return None


def check_memory(entry: MemoryEntry, max_entries: int, max_chars: int) -> None:
    """`ValueError` for an entry or limits a backend must refuse, before anything is written."""
    if entry.owner.kind not in MEMORY_KINDS:
        raise ValueError(f"memory kind {entry.owner.kind!r} is not one of {MEMORY_KINDS}")
    for name, value in (("id", entry.id), ("agent", entry.agent)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"memory {name} must be a non-empty string, got {value!r}")
    for name, value in (
        ("id", entry.id),
        ("agent", entry.agent),
        ("scope_id", entry.owner.scope_id),
        ("owner", entry.owner.owner),
        ("text", entry.text),
    ):
        problem = text_problem(value)
        if problem is not None:
            raise ValueError(f"memory {name}: {problem}")
    if not entry.text.strip():
        raise ValueError("memory text must not be empty")
    for name, limit in (("max_entries", max_entries), ("max_chars", max_chars)):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"{name} must be an int of 1 or more, got {limit!r}")


def check_search(query: str, limit: int) -> None:
    if not isinstance(query, str):
        raise TypeError(f"a search query is a string, got {type(query).__name__}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise ValueError(f"limit must be an int of 1 to {MAX_SEARCH_LIMIT}, got {limit!r}")


def index_text(text: str) -> str:
    """The words of a text as a full-text index keeps them: U+0000 as a space and unpaired
    surrogates as U+FFFD (the index is a copy for finding, the log keeps the original)."""
    text = text.replace("\x00", " ")
    if text_problem(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
