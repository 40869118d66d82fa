"""The OpenAPI document, as the server really answers (SPEC 12, 14).

FastAPI's generated document is a start; this module makes it true, so a client
generated from it, or a fuzzer such as schemathesis, finds no difference:

- every route declares the errors it answers, in the one error shape
  (`ErrorBody`): 401 on every authenticated route (when auth is configured,
  with a bearer security scheme), 413 on every route with a body, 422 on
  every route (the request guard checks every path, query and body), 403 on
  every route that changes something (the guard refuses such a request from a
  browser page of another site), and the 403/404/409 each route lists with
  `answers()`;
- every string is declared without U+0000 (the guard refuses it anywhere), and
  object keys the same way;
- the store routes are spelled out per store of the bundle (`/stores/notes`,
  `/stores/notes/{key}`): the filter fields, sort keys, document schema and
  bounds of each, which a generic `{name}` could not say;
- the document follows hot reloads: it is rebuilt when the bundle changes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict

from runtime.events import EVENT_TYPES
from runtime.repo.bundle import Bundle, StoreDefinition
from runtime.storage import MAX_QUERY_LIMIT
from runtime.stores import (
    MAX_KEY_CHARS,
    MAX_QUERY_OFFSET,
    SCALAR_TYPES,
    document_schema,
    field_schema,
)

NO_NUL = "^[^\\u0000]*$"
"""Every string of the API: anything but the character U+0000 (SPEC 12)."""


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error: `{"error": {"code", "message"}}`."""

    model_config = ConfigDict(extra="forbid")
    error: ErrorDetail


EVENT: dict[str, Any] = {
    "type": "object",
    "description": "one event of a turn (docs/chat.md): `type`, `session_id`, `run_id` and "
    "the fields of its type",
    "required": ["type", "session_id", "run_id"],
    "properties": {
        "type": {"type": "string", "enum": sorted(EVENT_TYPES)},
        "session_id": {"type": "string"},
        "run_id": {"type": "string"},
    },
}


class ChatReply(BaseModel):
    """A whole turn, the answer of `"stream": false`."""

    session_id: str
    agent: str
    reply: str
    events: list[dict[str, Any]]
    usage: dict[str, int]
    done_reason: str


FRAMES: dict[str, Any] = {
    # One item per frame: `id: <event id>`, `event: <type>` and `data: <the event as JSON>`.
    "itemSchema": {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9]+(:[0-9]+)?$"},
            "event": {"type": "string", "enum": sorted(EVENT_TYPES)},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": EVENT,
            },
        },
    }
}
EVENTS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The events as Server-Sent Events",
        "content": {"text/event-stream": FRAMES},
    }
}
"""The answer of a route that streams a session's events."""

TURN: dict[int | str, dict[str, Any]] = {
    200: {
        "model": ChatReply,
        "description": "The turn's events as Server-Sent Events, or, with "
        '`"stream": false`, the whole turn as one JSON document',
        "content": {"text/event-stream": FRAMES},
    }
}
"""The answer of a route that runs a turn (`POST /chat`, confirmations)."""

_WHY = {
    401: "No credential, an unknown one, or a JWT that does not verify (`unauthorized`)",
    403: "The caller may not do this (`forbidden`), or a browser page of another site sent "
    "a request that changes something (`cross_site`)",
    404: "No such agent, session, confirmation, store, document or memory entry for this caller",
    409: "The session has a turn running (`session_busy`)",
    413: "The body is larger than `limits.maxRequestBytes` (`body_too_large`)",
    422: "The request is not valid: its message says what and where",
}
_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}


def answers(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The errors a route answers besides 401, 413 and 422 (which are added for every
    route they apply to), for the route decorator's `responses=`."""
    return {status: {"model": ErrorBody, "description": _WHY[status]} for status in statuses}


def install_openapi(app: FastAPI, bundle: Callable[[], Bundle], auth_required: bool) -> None:
    """Serve the true document at /openapi.json, rebuilt when `bundle()` changes."""
    built: dict[str, dict[str, Any]] = {}

    def openapi() -> dict[str, Any]:
        current = bundle()
        if current.version not in built:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            built.clear()
            built[current.version] = finish(document, current, auth_required)
        return built[current.version]

    app.openapi = openapi  # type: ignore[method-assign]


def finish(document: dict[str, Any], bundle: Bundle, auth_required: bool) -> dict[str, Any]:
    """Make FastAPI's `document` say what the server answers (see the module docstring)."""
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for generated in ("HTTPValidationError", "ValidationError"):
        schemas.pop(generated, None)
    schemas["ErrorBody"] = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas["ErrorBody"].pop("$defs", None)
    schemas["ErrorDetail"] = ErrorDetail.model_json_schema()
    if auth_required:
        components["securitySchemes"] = {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "the operator token, an API key, or a JWT (docs/security.md)",
            }
        }
    _spell_out_stores(document["paths"], bundle)
    for operations in document["paths"].values():
        for method, operation in operations.items():
            _finish_operation(operation, auth_required, changes=method.upper() != "GET")
    _no_nul(document)
    return document


def _finish_operation(operation: dict[str, Any], auth_required: bool, *, changes: bool) -> None:
    # A protocol face answers its errors in its protocol's shape (docs/protocols.md).
    errors = operation.pop("x-error-content", None) or {"application/json": {"schema": _ERROR_REF}}
    parameters = operation.get("parameters", [])
    authenticated = any(p["in"] == "header" and p["name"] == "authorization" for p in parameters)
    kept = [p for p in parameters if not (p["in"] == "header" and p["name"] == "authorization")]
    for parameter in kept:
        if parameter["in"] == "header" and "schema" in parameter:
            parameter["schema"] = _never_null(parameter["schema"])
    if kept:
        operation["parameters"] = kept
    else:
        operation.pop("parameters", None)
    responses = operation["responses"]
    for status, response in responses.items():
        if status.startswith("4"):  # errors are JSON, whatever the route's own media type
            response["content"] = errors
    if authenticated and auth_required:
        operation["security"] = [{"bearer": []}]
        responses["401"] = _error(401, errors)
    if "requestBody" in operation:
        responses["413"] = _error(413, errors)
    if changes:  # the guard's cross_site refusal, in the route's own error shape
        responses.setdefault("403", _error(403, errors))
    responses["422"] = _error(422, errors)


def _never_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A header is absent or a string, never JSON's null: FastAPI's `str | None` is the
    string (a fuzzer would otherwise send the text `null`)."""
    options = [option for option in schema.get("anyOf", []) if option.get("type") != "null"]
    if len(options) != 1:
        return schema
    return {**{k: v for k, v in schema.items() if k != "anyOf"}, **options[0]}


def _error(status: int, content: dict[str, Any] | None = None) -> dict[str, Any]:
    answer = content or {"application/json": {"schema": _ERROR_REF}}
    return {"description": _WHY[status], "content": answer}


# ------------------------------------------------------------------ stores


def _spell_out_stores(paths: dict[str, Any], bundle: Bundle) -> None:
    """Replace `/stores/{name}` and `/stores/{name}/{key}` by one pair of paths per store."""
    query = paths.pop("/stores/{name}", None)
    document = paths.pop("/stores/{name}/{key}", None)
    if query is None or document is None:
        return
    for name in sorted(bundle.stores):
        store = bundle.stores[name]
        paths[f"/stores/{name}"] = {"get": _store_query(query["get"], store)}
        paths[f"/stores/{name}/{{key}}"] = {
            method: _store_document(operation, store, method)
            for method, operation in document.items()
        }


def _store_query(generic: dict[str, Any], store: StoreDefinition) -> dict[str, Any]:
    operation = _for_store(generic, store, "query")
    scalars = [name for name, spec in store.schema.items() if spec.type in SCALAR_TYPES]
    filters = {
        name: _any_value(store.schema[name].model_copy(update={"min": None, "max": None}))
        for name in scalars
    }
    schemas: dict[str, dict[str, Any]] = {
        # "" (an empty form field) is no sort: the store's own order.
        "sort": {"type": "string", "enum": ["", *scalars, *(f"-{name}" for name in scalars)]},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_QUERY_LIMIT},
        "offset": {"type": "integer", "minimum": 0, "maximum": MAX_QUERY_OFFSET},
    }
    for parameter in operation["parameters"]:
        name = parameter["name"]
        if name == "filter":
            parameter.pop("schema")
            parameter["content"] = {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": filters,
                        "additionalProperties": False,
                        "description": "field -> value; a document matches when all are equal",
                    }
                }
            }
        elif name in schemas:
            parameter["schema"] = schemas[name]
    return operation


def _store_document(generic: dict[str, Any], store: StoreDefinition, method: str) -> dict[str, Any]:
    operation = _for_store(generic, store, "document")
    for parameter in operation["parameters"]:
        if parameter["name"] == "key":
            parameter["schema"] = {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS}
            parameter["description"] = f"the document's key: its template is `{store.key}`"
    if method == "put":
        schema = document_schema(store)
        for name in store.key_fields:  # present, never null, never empty
            field = schema["properties"][name]
            if isinstance(field["type"], list):
                field["type"] = [kind for kind in field["type"] if kind != "null"]
                field["type"] = field["type"][0] if len(field["type"]) == 1 else field["type"]
            if "string" in str(field["type"]) and "enum" not in field:
                field["minLength"] = max(1, field.get("minLength", 0))
            if name not in schema["required"]:
                schema["required"].append(name)
        operation["requestBody"] = {
            "required": True,
            "description": f"the document; its key fields must give `{{key}}` ({store.key})",
            "content": {"application/json": {"schema": schema}},
        }
    return operation


def _for_store(generic: dict[str, Any], store: StoreDefinition, what: str) -> dict[str, Any]:
    operation = copy.deepcopy(generic)
    operation["operationId"] = f"{operation['operationId']}_{store.name}"
    operation["summary"] = f"{operation.get('summary', what)} ({store.name})"
    operation["parameters"] = [
        p
        for p in operation.get("parameters", [])
        if not (p["in"] == "path" and p["name"] == "name")
    ]
    operation["responses"].setdefault("404", _error(404))
    return operation


def _any_value(spec: Any) -> dict[str, Any]:
    """A filter value: the field's type without bounds, or null."""
    return field_schema(spec.model_copy(update={"nullable": True}))


# ------------------------------------------------------------------ text


def _no_nul(node: Any) -> None:
    """Declare every string and every object key of the document without U+0000."""
    if isinstance(node, list):
        for item in node:
            _no_nul(item)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "string" in kinds and not {"pattern", "enum", "const", "format"} & node.keys():
        node["pattern"] = NO_NUL
    if "object" in kinds and node.get("additionalProperties") is not False:
        node.setdefault("propertyNames", {"pattern": NO_NUL})
    for value in node.values():
        _no_nul(value)
