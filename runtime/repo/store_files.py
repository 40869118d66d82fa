"""stores/<name>.json: typed document collections agents read and write through store tools."""

from __future__ import annotations

import re
from functools import partial
from types import MappingProxyType

from runtime.repo._reader import Reader, split_suffix
from runtime.repo._report import Source, did_you_mean
from runtime.repo.bundle import StoreDefinition
from runtime.repo.formats import StoreFile

STORES_DIR = "stores"
STORE_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_KEY_TYPES = ("string", "number", "enum", "datetime", "boolean")


def load_stores(reader: Reader) -> list[StoreDefinition]:
    if not reader.is_dir(STORES_DIR):
        return []
    stores = []
    for name, kind in reader.listing(STORES_DIR).items():
        relative = f"{STORES_DIR}/{name}"
        stem, suffix = split_suffix(name)
        if kind != "file" or suffix != ".json":
            reader.report.warn(relative, "ignored: a store is a `stores/<name>.json` file")
            continue
        store = reader.unit(relative, partial(_load_store, reader, relative, stem))
        if store is not None:
            stores.append(store)
    return stores


def _load_store(reader: Reader, relative: str, name: str) -> StoreDefinition | None:
    report = reader.report
    if not STORE_NAME.match(name):
        report.error(
            relative,
            f"store name {name!r} must be lowercase letters, digits and "
            "hyphens, starting with a letter (rename the file)",
        )
        return None
    text = reader.read(relative)
    if text is None:
        return None
    source = Source(relative, text)
    data = report.parse_json(source)
    if data is None:
        return None
    parsed = report.validate(StoreFile, data, source)
    if parsed is None:
        return None
    if parsed.name is not None and parsed.name != name:
        report.error(
            relative,
            f"`name` is {parsed.name!r} but the file defines store {name!r}; "
            "remove `name` or make it equal the file name",
            line=source.line(("name",)),
            field="name",
        )
        return None
    entity = parsed.entity
    key_fields = tuple(_PLACEHOLDER.findall(entity.key))
    key_path = ("entity", "key")  # its line only for an error: mapping lines re-parses
    if (
        not key_fields
        or "{" in _PLACEHOLDER.sub("", entity.key)
        or "}" in _PLACEHOLDER.sub("", entity.key)
    ):
        report.error(
            relative,
            f"key template {entity.key!r} must name schema fields in braces, "
            "like '{id}' or 'note:{id}'",
            line=source.line(key_path),
            field="entity.key",
        )
        return None
    for field in key_fields:
        spec = entity.schema_.get(field)
        if spec is None:
            report.error(
                relative,
                f"key field {field!r} is not in the schema"
                f"{did_you_mean(field, entity.schema_)}; schema fields: "
                + ", ".join(sorted(entity.schema_)),
                line=source.line(key_path),
                field="entity.key",
            )
            return None
        if spec.type not in _KEY_TYPES:
            report.error(
                relative,
                f"key field {field!r} is of type {spec.type!r}; a key field "
                f"must be one of {', '.join(_KEY_TYPES)}",
                line=source.line(key_path),
                field="entity.key",
            )
            return None
    return StoreDefinition(
        name=name,
        entity=entity.name,
        key=entity.key,
        key_fields=key_fields,
        schema=MappingProxyType(dict(entity.schema_)),
        ttl=parsed.ttl,
        history_versions=parsed.history.versions if parsed.history else 0,
        shared=parsed.shared,
        file=relative,
    )
