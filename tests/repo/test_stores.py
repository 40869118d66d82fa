"""stores/ (SPEC 1.4): store names, the entity shape, key templates over the schema."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ._helpers import line_of, load, only_error, valid, warnings_in


def with_schema(store_file: dict[str, Any], **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(store_file)
    data["entity"].update(changes)
    return data


def test_a_store_file_defines_a_store_named_after_the_file(make_repo, store_file):
    data = {**store_file, "ttl": 60, "history": {"versions": 3}, "shared": True}
    root = make_repo({"stores/research-notes.json": data})

    store = valid(load(root)).bundle.stores["research-notes"]

    assert (store.entity, store.key, store.key_fields) == ("Note", "note:{id}", ("id",))
    assert (store.ttl, store.history_versions, store.shared) == (60, 3, True)
    assert set(store.schema) == {"id", "text"}
    assert store.file == "stores/research-notes.json"


@pytest.mark.parametrize("name", ["Notes", "1notes", "my_notes", "-notes"])
def test_store_name_outside_the_pattern_is_an_error(make_repo, store_file, name):
    root = make_repo({f"stores/{name}.json": store_file})

    error = only_error(load(root))

    assert error.file == f"stores/{name}.json"
    assert "rename the file" in error.message


@pytest.mark.parametrize("name", ["n", "notes2", "research-notes"])
def test_store_name_inside_the_pattern_is_accepted(make_repo, store_file, name):
    assert name in valid(load(make_repo({f"stores/{name}.json": store_file}))).bundle.stores


def test_explicit_name_equal_to_the_file_name_is_accepted(make_repo, store_file):
    valid(load(make_repo({"stores/notes.json": {"name": "notes", **store_file}})))


def test_explicit_name_different_from_the_file_name_is_an_error(make_repo, store_file):
    root = make_repo({"stores/notes.json": {"name": "memos", **store_file}})

    error = only_error(load(root))

    assert (error.field, error.line) == ("name", line_of(root / "stores/notes.json", '"name"'))
    assert "'memos'" in error.message


def test_key_field_missing_from_the_schema_is_an_error_suggesting_a_field(make_repo, store_file):
    root = make_repo({"stores/notes.json": with_schema(store_file, key="note:{idd}")})

    error = only_error(load(root))

    assert error.field == "entity.key"
    assert error.line == line_of(root / "stores/notes.json", '"key"')
    assert "'idd' is not in the schema" in error.message
    assert "did you mean 'id'?" in error.message


def test_key_with_several_fields_from_the_schema_is_accepted(make_repo, store_file):
    root = make_repo({"stores/notes.json": with_schema(store_file, key="{id}-{text}")})

    assert valid(load(root)).bundle.stores["notes"].key_fields == ("id", "text")


@pytest.mark.parametrize("key", ["id", "note:{id", "{}", "note:{id}}"])
def test_key_that_is_not_a_template_of_fields_is_an_error(make_repo, store_file, key):
    root = make_repo({"stores/notes.json": with_schema(store_file, key=key)})

    error = only_error(load(root))

    assert error.field == "entity.key"


def test_key_field_of_a_type_that_cannot_be_a_key_is_an_error(make_repo, store_file):
    schema = {"tags": {"type": "array", "item": {"type": "string"}}}
    root = make_repo({"stores/notes.json": with_schema(store_file, key="{tags}", schema=schema)})

    error = only_error(load(root))

    assert "'array'" in error.message


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ({"type": "enum"}, "`values` is required for an enum"),
        ({"type": "enum", "values": []}, "at least one value"),
        ({"type": "string", "values": ["a"]}, "only allowed for an enum"),
        ({"type": "text"}, "'string', 'number'"),
        ({"type": "string", "item": {"type": "string"}}, "`item` is only allowed for an array"),
        ({"type": "string", "fields": {}}, "`fields` is only allowed for an object"),
        ({"type": "number", "min": 5, "max": 1}, "`min` must not be greater than `max`"),
        ({"type": "string", "required": True}, "unknown key 'required'"),
    ],
)
def test_schema_field_of_the_wrong_shape_is_an_error(make_repo, store_file, field, expected):
    schema = {"id": {"type": "string"}, "extra": field}
    root = make_repo({"stores/notes.json": with_schema(store_file, schema=schema)})

    error = only_error(load(root))

    assert error.field.startswith("entity.schema.extra")
    assert expected in error.message


def test_every_field_type_of_the_reference_shape_is_accepted(make_repo, store_file):
    schema = {
        "id": {"type": "string"},
        "score": {"type": "number", "min": 0, "max": 10},
        "done": {"type": "boolean"},
        "at": {"type": "datetime", "nullable": True},
        "level": {"type": "enum", "values": ["low", "high"]},
        "tags": {"type": "array", "item": {"type": "string"}},
        "owner": {"type": "object", "fields": {"name": {"type": "string"}}},
    }
    root = make_repo({"stores/notes.json": with_schema(store_file, schema=schema)})

    assert set(valid(load(root)).bundle.stores["notes"].schema) == set(schema)


def test_empty_schema_is_an_error(make_repo, store_file):
    root = make_repo({"stores/notes.json": with_schema(store_file, schema={})})

    assert only_error(load(root)).field == "entity.schema"


def test_misspelt_store_key_suggests_the_right_one(make_repo, store_file):
    root = make_repo({"stores/notes.json": {**store_file, "tll": 60}})

    error = only_error(load(root))

    assert "did you mean 'ttl'?" in error.message


def test_history_versions_below_one_is_an_error(make_repo, store_file):
    root = make_repo({"stores/notes.json": {**store_file, "history": {"versions": 0}}})

    assert only_error(load(root)).field == "history.versions"


def test_store_json_syntax_error_is_at_its_line(make_repo):
    root = make_repo({"stores/notes.json": '{\n  "entity": {\n    "name": "N",,\n  }\n}'})

    error = only_error(load(root))

    assert (error.file, error.line) == ("stores/notes.json", 3)


def test_a_file_in_stores_that_is_not_json_is_ignored_with_a_warning(make_repo):
    root = make_repo({"stores/README.md": "About stores."})

    result = valid(load(root))

    assert "stores/<name>.json" in warnings_in(result, "stores/README.md")[0].message
