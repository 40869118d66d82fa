"""Store tools: `store__<name>__get|query|put|delete`, exactly as the resolved modes allow.

Each tool is built from the store's entity schema, so the model sees the fields,
their types and bounds in the parameters. Every read and write goes to the
caller's scope (`ToolContext.caller.scope_id`): a caller never reaches another
scope's documents. A shared store has one partition that every scope reads;
its put and delete tools are never built (SPEC 10). Results:

- get: the document itself, or `{"found": false, "key": ...}`
- query: `{"documents": [...], "total", "limit", "offset", "has_more"}`
- put: `{"ok": true, "key", "version", "created"}` (plus `expires_at` with a ttl)
- delete: `{"deleted": bool, "key"}`

A document that breaks the schema, or a missing key field, is an error result
(`ToolError`) that says what is wrong; nothing is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime.repo.bundle import Bundle, StoreDefinition
from runtime.repo.registry import WRITE_OPS, StoreOp, store_ops, store_tool_name
from runtime.storage import DocumentStorage
from runtime.stores import (
    SCALAR_TYPES,
    DocumentError,
    check_key,
    check_query,
    document_key,
    document_schema,
    field_schema,
    key_from_fields,
    partition,
    validate_document,
)
from runtime.surface.resolution import Surface
from runtime.tools import Tool, ToolContext, ToolError


def store_tools(bundle: Bundle, surface: Surface, storage: DocumentStorage) -> dict[str, Tool]:
    """The store tools of `surface`: read ops for `read`, all four for `rw` (never a write
    op of a shared store), each only if the surface grants its name."""
    tools: dict[str, Tool] = {}
    for name, mode in surface.stores.items():
        store = bundle.stores.get(name)
        if store is None:
            continue
        for op in store_ops(mode):
            tool_name = store_tool_name(name, op)
            if tool_name not in surface.tools or (op in WRITE_OPS and store.shared):
                continue
            tools[tool_name] = _BUILDERS[op](bundle, store, storage)
    return tools


async def get_document(
    storage: DocumentStorage, store: StoreDefinition, scope_id: str, key: str
) -> dict[str, Any] | None:
    """The document at `key` in the caller's partition, or None."""
    document = await storage.get_document(partition(store, scope_id), store.name, key)
    return None if document is None else document.data


async def query_documents(
    storage: DocumentStorage,
    store: StoreDefinition,
    scope_id: str,
    filter: Any = None,
    sort: Any = None,
    limit: Any = None,
    offset: Any = None,
) -> dict[str, Any]:
    """`{documents, total, limit, offset, has_more}`; a query the store refuses is a
    `ToolError`."""
    try:
        asked = check_query(store, filter, sort, limit, offset)
    except DocumentError as error:
        raise ToolError(str(error)) from error
    page = await storage.query_documents(partition(store, scope_id), store.name, asked)
    return {
        "documents": [document.data for document in page.documents],
        "total": page.total,
        "limit": asked.limit,
        "offset": asked.offset,
        "has_more": asked.offset + len(page.documents) < page.total,
    }


async def put_document(
    storage: DocumentStorage, store: StoreDefinition, scope_id: str, document: Any
) -> dict[str, Any]:
    """Validate and upsert; `{ok, key, version, created}` (and `expires_at` with a ttl). A
    document the schema refuses is a `ToolError` and nothing is stored."""
    try:
        valid = validate_document(store, document)
        key = document_key(store, valid)
    except DocumentError as error:
        raise ToolError(f"{error}. Nothing was stored.") from error
    stored = await storage.put_document(
        partition(store, scope_id),
        store.name,
        key,
        valid,
        ttl_seconds=store.ttl,
        keep_versions=store.history_versions,
    )
    result: dict[str, Any] = {
        "ok": True,
        "key": key,
        "version": stored.version,
        "created": stored.version == 1,
    }
    if stored.expires_at is not None:
        result["expires_at"] = stored.expires_at.isoformat()
    return result


async def delete_document(
    storage: DocumentStorage, store: StoreDefinition, scope_id: str, key: str
) -> bool:
    return await storage.delete_document(partition(store, scope_id), store.name, key)


def _get(bundle: Bundle, store: StoreDefinition, storage: DocumentStorage) -> Tool:
    async def get(arguments: dict[str, Any], context: ToolContext) -> Any:
        key = _key(store, arguments)
        document = await get_document(storage, store, context.caller.scope_id, key)
        return {"found": False, "key": key} if document is None else document

    return Tool(
        store_tool_name(store.name, "get"),
        _description(bundle, store, "get")
        + f' {_key_help(store)} Returns the document, or {{"found": false, "key": ...}}.',
        _key_parameters(store),
        get,
        idempotent=True,
    )


def _query(bundle: Bundle, store: StoreDefinition, storage: DocumentStorage) -> Tool:
    async def query(arguments: dict[str, Any], context: ToolContext) -> Any:
        return await query_documents(
            storage,
            store,
            context.caller.scope_id,
            arguments.get("filter"),
            arguments.get("sort"),
            arguments.get("limit"),
            arguments.get("offset"),
        )

    scalars = {name: spec for name, spec in store.schema.items() if spec.type in SCALAR_TYPES}
    # Any field may be compared with null (null or absent); bounds do not limit a filter.
    filters = {
        name: field_schema(spec.model_copy(update={"min": None, "max": None, "nullable": True}))
        for name, spec in scalars.items()
    }
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "filter": {
                "type": "object",
                "description": "Field -> value; a document matches when every field equals "
                "its value (null: the field is null or absent).",
                "properties": filters,
                "additionalProperties": False,
            },
            "sort": {
                "type": "string",
                "description": "A field to sort by, ascending; prefix '-' for descending. "
                "Default: by key.",
                "enum": [f"{sign}{name}" for name in scalars for sign in ("", "-")],
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
        },
        "additionalProperties": False,
    }
    if not scalars:
        del parameters["properties"]["sort"]
    return Tool(
        store_tool_name(store.name, "query"),
        _description(bundle, store, "query")
        + " Returns {documents, total, limit, offset, has_more}.",
        parameters,
        query,
        idempotent=True,
    )


def _put(bundle: Bundle, store: StoreDefinition, storage: DocumentStorage) -> Tool:
    async def put(arguments: dict[str, Any], context: ToolContext) -> Any:
        return await put_document(storage, store, context.caller.scope_id, arguments)

    notes = [
        f"The arguments are the document; its key is `{store.key}`, made from its fields.",
        "Fields that are not nullable are required. A put replaces the whole document.",
    ]
    if store.ttl is not None:
        notes.append(f"Documents expire {store.ttl} seconds after their last put.")
    return Tool(
        store_tool_name(store.name, "put"),
        _description(bundle, store, "put") + " " + " ".join(notes),
        document_schema(store),
        put,
    )


def _delete(bundle: Bundle, store: StoreDefinition, storage: DocumentStorage) -> Tool:
    async def delete(arguments: dict[str, Any], context: ToolContext) -> Any:
        key = _key(store, arguments)
        deleted = await delete_document(storage, store, context.caller.scope_id, key)
        return {"deleted": deleted, "key": key}

    return Tool(
        store_tool_name(store.name, "delete"),
        _description(bundle, store, "delete") + f" {_key_help(store)}",
        _key_parameters(store),
        delete,
    )


_BUILDERS: dict[StoreOp, Callable[[Bundle, StoreDefinition, DocumentStorage], Tool]] = {
    "get": _get,
    "query": _query,
    "put": _put,
    "delete": _delete,
}


def _description(bundle: Bundle, store: StoreDefinition, op: StoreOp) -> str:
    return bundle.registry[store_tool_name(store.name, op)].description


def _key_help(store: StoreDefinition) -> str:
    fields = ", ".join(f"`{name}`" for name in store.key_fields)
    return f"Give the document's `key` (`{store.key}`) or its key field(s) {fields}."


def _key_parameters(store: StoreDefinition) -> dict[str, Any]:
    properties: dict[str, Any] = {
        name: field_schema(store.schema[name]) for name in store.key_fields
    }
    # A key field called `key` is the key's only spelling.
    properties.setdefault(
        "key", {"type": "string", "minLength": 1, "description": f"The key: `{store.key}`."}
    )
    return {"type": "object", "properties": properties, "additionalProperties": False}


def _key(store: StoreDefinition, arguments: dict[str, Any]) -> str:
    """The key a get or delete names: `key`, or the key fields (which must agree with it)."""
    try:
        fields = {name: arguments[name] for name in store.key_fields if name in arguments}
        given = arguments.get("key") if "key" not in store.key_fields else None
        if given is None:
            return key_from_fields(store, fields)
        key = check_key(store, given)
        if fields and key_from_fields(store, fields) != key:
            raise ToolError(
                f"`key` {key!r} and the key fields give different keys; give one of them"
            )
        return key
    except DocumentError as error:
        raise ToolError(str(error)) from error


__all__ = ["delete_document", "get_document", "put_document", "query_documents", "store_tools"]
