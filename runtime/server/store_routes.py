"""`/stores`: the operators' HTTP view of store documents (SPEC 14; docs/stores.md).

The same rules as the store tools (`runtime.stores`): a PUT is validated
against the entity schema and its key fields must give the `{key}` of the
path. Operators only. Documents live in scope `?scope=` (default "default");
a shared store has one partition and ignores `?scope=`.

- `GET /stores`: every store of the bundle with its schema, and its number of
  documents in the scope.
- `GET /stores/{name}?filter=&sort=&limit=&offset=`: `filter` is a JSON object
  of field -> value (all equal), `sort` is `field` or `-field`, `limit` 1..100
  (default 20), `offset` 0 or more.
- `GET /stores/{name}/{key}[?history=1]`: the document with its metadata
  (`history=1` adds the kept previous versions, newest first); 404 when absent.
- `PUT /stores/{name}/{key}`: the body is the document; 200 with the stored
  document and `created`, 422 when it breaks the schema or its key is not `{key}`.
- `DELETE /stores/{name}/{key}`: 204, or 404 when absent.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from runtime.exceptions import DocumentError
from runtime.repo.bundle import Bundle, StoreDefinition
from runtime.server.dependencies import RuntimeDep, operator
from runtime.server.errors import ApiError
from runtime.server.openapi import answers
from runtime.storage import StoreDocument
from runtime.stores import (
    check_key,
    check_query,
    document_key,
    partition,
    validate_document,
)
from runtime.surface.resolution import DEFAULT_SCOPE

MAX_SCOPE_CHARS = 200

# Declared in the OpenAPI document; checked by `_scope` (its own error code).
Scope = Annotated[
    str | None, Query(json_schema_extra={"minLength": 1, "maxLength": MAX_SCOPE_CHARS})
]


router = APIRouter(tags=["stores"], dependencies=[Depends(operator("use /stores"))])


@router.get("/stores", responses=answers(403))
async def list_stores(runtime: RuntimeDep, scope: Scope = None) -> list[dict[str, Any]]:
    bundle = runtime.bundle
    listed = []
    for name in sorted(bundle.stores):
        store = bundle.stores[name]
        page = await runtime.storage.query_documents(
            _scope(store, scope), name, check_query(store, limit=1)
        )
        listed.append({**store_json(store), "documents": page.total})
    return listed


@router.get("/stores/{name}", responses=answers(403, 404))
async def query_documents(
    name: str,
    runtime: RuntimeDep,
    filter_: Annotated[str | None, Query(alias="filter")] = None,
    sort: str | None = None,
    limit: str | None = None,
    offset: str | None = None,
    scope: Scope = None,
) -> dict[str, Any]:
    store = _store(runtime.bundle, name)
    try:
        query = check_query(store, _filters(filter_), sort, limit, offset)
    except DocumentError as error:
        raise ApiError(422, "invalid_query", str(error)) from error
    where = _scope(store, scope)
    page = await runtime.storage.query_documents(where, store.name, query)
    return {
        "store": store.name,
        "scope": where,
        "documents": [document_json(document) for document in page.documents],
        "total": page.total,
        "limit": query.limit,
        "offset": query.offset,
        "has_more": query.offset + len(page.documents) < page.total,
    }


@router.get("/stores/{name}/{key:path}", responses=answers(403, 404))
async def get_document(
    name: str,
    key: str,
    runtime: RuntimeDep,
    history: bool = False,
    scope: Scope = None,
) -> dict[str, Any]:
    store = _store(runtime.bundle, name)
    where = _scope(store, scope)
    document = await runtime.storage.get_document(where, store.name, _key(store, key))
    if document is None:
        raise _not_found(store, key, where)
    found = document_json(document)
    if history:
        versions = await runtime.storage.document_history(where, store.name, key)
        found["history"] = [
            {
                "version": version.version,
                "document": version.data,
                "updated_at": version.updated_at.isoformat(),
            }
            for version in versions
        ]
    return found


@router.put("/stores/{name}/{key:path}", responses=answers(403, 404))
async def put_document(
    name: str,
    key: str,
    request: Request,
    runtime: RuntimeDep,
    scope: Scope = None,
) -> dict[str, Any]:
    store = _store(runtime.bundle, name)
    key = _key(store, key)
    document = _document(store, key, await request.body())
    stored = await runtime.storage.put_document(
        _scope(store, scope),
        store.name,
        key,
        document,
        ttl_seconds=store.ttl,
        keep_versions=store.history_versions,
    )
    return {**document_json(stored), "created": stored.version == 1}


@router.delete("/stores/{name}/{key:path}", status_code=204, responses=answers(403, 404))
async def delete_document(
    name: str,
    key: str,
    runtime: RuntimeDep,
    scope: Scope = None,
) -> Response:
    store = _store(runtime.bundle, name)
    where = _scope(store, scope)
    if not await runtime.storage.delete_document(where, store.name, _key(store, key)):
        raise _not_found(store, key, where)
    return Response(status_code=204)


def store_json(store: StoreDefinition) -> dict[str, Any]:
    """A store's definition as the API shows it."""
    return {
        "name": store.name,
        "entity": store.entity,
        "key": store.key,
        "key_fields": list(store.key_fields),
        "schema": {
            name: spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
            for name, spec in store.schema.items()
        },
        "ttl": store.ttl,
        "history_versions": store.history_versions,
        "shared": store.shared,
    }


def document_json(document: StoreDocument) -> dict[str, Any]:
    """A stored document with its metadata."""
    return {
        "key": document.key,
        "scope": document.scope_id,
        "document": document.data,
        "version": document.version,
        "created_at": document.created_at.isoformat(),
        "updated_at": document.updated_at.isoformat(),
        "expires_at": document.expires_at.isoformat() if document.expires_at else None,
    }


def _store(bundle: Bundle, name: str) -> StoreDefinition:
    store = bundle.stores.get(name)
    if store is None:
        known = ", ".join(sorted(bundle.stores)) or "(none)"
        raise ApiError(404, "unknown_store", f"unknown store {name!r}; stores: {known}")
    return store


def _scope(store: StoreDefinition, scope: str | None) -> str:
    if scope is not None and (not scope or len(scope) > MAX_SCOPE_CHARS or "\x00" in scope):
        raise ApiError(422, "invalid_scope", f"scope must be 1 to {MAX_SCOPE_CHARS} characters")
    return partition(store, scope or DEFAULT_SCOPE)


def _filters(filter_: str | None) -> object:
    """The `?filter=` JSON object (None when absent or blank; `check_query` checks it)."""
    if filter_ is None or not filter_.strip():
        return None
    try:
        return json.loads(filter_)
    except ValueError as error:  # not JSON, or a number of more digits than Python reads
        raise ApiError(
            422, "invalid_query", f"filter: not valid JSON ({error}); send a JSON object"
        ) from error


def _document(store: StoreDefinition, key: str, body: bytes) -> dict[str, Any]:
    """The body of a PUT to `key`, as the store's schema takes it; its key fields give `key`."""
    try:
        sent = json.loads(body)
    except ValueError as error:  # not JSON, not UTF-8, or a number Python will not read
        raise ApiError(
            422, "invalid_request", f"body: not valid JSON ({error}); send the document"
        ) from error
    try:
        document = validate_document(store, sent)
        derived = document_key(store, document)
    except DocumentError as error:
        raise ApiError(422, "invalid_document", str(error)) from error
    if derived != key:
        raise ApiError(
            422,
            "invalid_document",
            f"the document's key fields give key {derived!r} (template {store.key!r}), "
            f"not {key!r}: PUT it to /stores/{store.name}/{derived} or fix its fields",
        )
    return document


def _key(store: StoreDefinition, key: str) -> str:
    try:
        return check_key(store, key)
    except DocumentError as error:
        raise ApiError(422, "invalid_key", str(error)) from error


def _not_found(store: StoreDefinition, key: str, scope: str) -> ApiError:
    return ApiError(
        404,
        "unknown_document",
        f"no document {key!r} in store {store.name!r} (scope {scope!r})",
    )


__all__ = ["document_json", "router", "store_json"]
