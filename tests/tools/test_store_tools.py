"""Store tools (SPEC 2, 4.3, 10) through the turn loop and the scripted model, on both backends."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime.events import Event
from runtime.storage import DocumentQuery
from runtime.stores import SHARED_SCOPE
from runtime.surface.caller import Caller
from runtime.testing import ScriptedModel, tool_call, tool_calls
from tests._harness import Harness, done

pytestmark = pytest.mark.anyio

NOTES = {
    "entity": {
        "name": "Note",
        "key": "note:{slug}",
        "schema": {
            "slug": {"type": "string", "min": 1, "max": 40},
            "topic": {"type": "string"},
            "score": {"type": "number", "min": 0, "max": 10},
            "done": {"type": "boolean"},
            "level": {"type": "enum", "values": ["low", "high"]},
            "tags": {"type": "array", "item": {"type": "string"}, "max": 3},
            "due": {"type": "datetime", "nullable": True},
            "meta": {
                "type": "object",
                "nullable": True,
                "fields": {"source": {"type": "string"}},
            },
        },
    },
    "history": {"versions": 2},
}

REPO = {
    "stores/notes.json": NOTES,
    "stores/handbook.json": {
        "entity": {
            "name": "Page",
            "key": "{id}",
            "schema": {"id": {"type": "string"}, "text": {"type": "string"}},
        },
        "shared": True,
    },
    "stores/cache.json": {
        "entity": {
            "name": "Entry",
            "key": "{id}",
            "schema": {"id": {"type": "string", "nullable": True}, "v": {"type": "number"}},
        },
        "ttl": 1,
    },
    "agents/default/agent.json": {
        "stores": {"notes": "rw", "handbook": "rw", "cache": "rw"},
        "subagents": ["scribe"],
    },
    "agents/reader/AGENT.md": "You read notes.\n",
    "agents/reader/agent.json": {"stores": {"notes": "read"}},
    "agents/scribe/AGENT.md": "You write notes.\n",
    "agents/scribe/agent.json": {"description": "Writes notes.", "stores": {"notes": "rw"}},
}

EVERYTHING = DocumentQuery(limit=100)
ACME = Caller(claims={"scope": "acme", "sub": "ana"})
GLOBEX = Caller(claims={"scope": "globex", "sub": "bo"})


def note(slug: str = "db", **fields: Any) -> dict[str, Any]:
    document = {
        "slug": slug,
        "topic": "databases",
        "score": 7,
        "done": False,
        "level": "high",
        "tags": ["sql"],
    }
    document.update(fields)
    return document


@pytest.fixture
async def h(
    make_repo: Callable[..., Path], harness_for: Callable[..., Any], database_url: str | None
) -> Harness:
    """A harness on SQLite or PostgreSQL (one database per test)."""
    return await harness_for(make_repo(REPO), database_url)  # type: ignore[no-any-return]


def results(events: list[Event]) -> list[dict[str, Any]]:
    return [event.to_json() for event in events if event.type == "tool_result"]


async def call(
    h: Harness,
    model: ScriptedModel,
    *calls: tuple[str, dict[str, Any]],
    caller: Caller | None = None,
    **request: Any,
) -> list[dict[str, Any]]:
    """One turn making `calls` one after another; their tool results."""
    for name, arguments in calls:
        model.enqueue(tool_call(name, arguments))
    model.reply("done")
    events = await h.chat("go", caller=caller or ACME, **request)
    assert done(events).reason == "model_stop"
    found = results(events)
    assert len(found) == len(calls)
    return found


# --- the tools offered ------------------------------------------------------


async def test_rw_offers_all_four_tools_read_two_and_a_shared_store_never_writes(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("hi")
    scripted_model.reply("hi")
    await h.chat("hi", caller=ACME)
    await h.chat("hi", caller=ACME, agent="reader")

    offered = [set(request.tools) for request in scripted_model.requests]
    stores = [{name for name in tools if name.startswith("store__")} for tools in offered]
    assert stores[0] == {
        "store__notes__get",
        "store__notes__query",
        "store__notes__put",
        "store__notes__delete",
        "store__handbook__get",
        "store__handbook__query",
        "store__cache__get",
        "store__cache__query",
        "store__cache__put",
        "store__cache__delete",
    }
    assert stores[1] == {"store__notes__get", "store__notes__query"}


async def test_tool_schemas_show_the_entity_fields_types_and_bounds(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.reply("hi")
    await h.chat("hi", caller=ACME)

    tools = {
        tool["function"]["name"]: tool["function"]
        for tool in scripted_model.requests[0].body["tools"]
    }
    put = tools["store__notes__put"]["parameters"]
    assert put["required"] == ["slug", "topic", "score", "done", "level", "tags"]
    assert put["additionalProperties"] is False
    fields = put["properties"]
    assert fields["slug"] == {"type": "string", "minLength": 1, "maxLength": 40}
    assert fields["score"] == {"type": "number", "minimum": 0, "maximum": 10}
    assert fields["level"] == {"type": "string", "enum": ["low", "high"]}
    assert fields["tags"] == {"type": "array", "items": {"type": "string"}, "maxItems": 3}
    assert fields["due"]["type"] == ["string", "null"]
    assert fields["meta"]["properties"] == {"source": {"type": "string"}}
    assert "note:{slug}" in tools["store__notes__put"]["description"]
    get = tools["store__notes__get"]["parameters"]
    assert set(get["properties"]) == {"key", "slug"}
    query = tools["store__notes__query"]["parameters"]["properties"]
    assert set(query["filter"]["properties"]) == {"slug", "topic", "score", "done", "level", "due"}
    assert "-score" in query["sort"]["enum"]
    assert query["limit"]["maximum"] == 100
    assert "expire 1 seconds" in tools["store__cache__put"]["description"]


# --- put, get, query, delete ------------------------------------------------


async def test_put_get_query_and_delete_a_document(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    put, by_key, by_field, listed, deleted, gone, again = await call(
        h,
        scripted_model,
        ("store__notes__put", note(due="2025-01-31T10:00:00+02:00")),
        ("store__notes__get", {"key": "note:db"}),
        ("store__notes__get", {"slug": "db"}),
        ("store__notes__query", {"filter": {"topic": "databases"}}),
        ("store__notes__delete", {"slug": "db"}),
        ("store__notes__get", {"key": "note:db"}),
        ("store__notes__delete", {"key": "note:db"}),
    )

    assert put["status"] == "ok"
    assert put["result"] == {"ok": True, "key": "note:db", "version": 1, "created": True}
    stored = note(due="2025-01-31T08:00:00Z")  # an offset is stored in UTC
    assert by_key["result"] == stored
    assert by_field["result"] == stored
    assert listed["result"] == {
        "documents": [stored],
        "total": 1,
        "limit": 20,
        "offset": 0,
        "has_more": False,
    }
    assert deleted["result"] == {"deleted": True, "key": "note:db"}
    assert gone["result"] == {"found": False, "key": "note:db"}
    assert again["result"] == {"deleted": False, "key": "note:db"}


async def test_a_second_put_replaces_the_document_and_keeps_history(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    replies = await call(
        h,
        scripted_model,
        ("store__notes__put", note(score=1)),
        ("store__notes__put", note(score=2)),
        ("store__notes__put", note(score=3)),
        ("store__notes__get", {"slug": "db"}),
    )

    assert [r["result"].get("version") for r in replies[:3]] == [1, 2, 3]
    assert replies[2]["result"]["created"] is False
    assert replies[3]["result"]["score"] == 3
    history = await h.runtime.storage.document_history("acme", "notes", "note:db")
    assert [(entry.version, entry.data["score"]) for entry in history] == [(2, 2), (1, 1)]


async def test_query_filters_sorts_and_pages(h: Harness, scripted_model: ScriptedModel) -> None:
    puts = [
        ("store__notes__put", note("a", score=5, topic="db")),
        ("store__notes__put", note("b", score=9, topic="db", done=True)),
        ("store__notes__put", note("c", score=1, topic="ui")),
        ("store__notes__put", note("d", score=7, topic="db")),
    ]
    replies = await call(
        h,
        scripted_model,
        *puts,
        ("store__notes__query", {"filter": {"topic": "db"}, "sort": "-score"}),
        ("store__notes__query", {"sort": "score", "limit": 2, "offset": 1}),
        ("store__notes__query", {"filter": {"topic": "db", "done": False}}),
        ("store__notes__query", {"filter": {"due": None}, "limit": 1}),
    )

    by_score, page, undone, nulls = (r["result"] for r in replies[4:])
    assert [d["slug"] for d in by_score["documents"]] == ["b", "d", "a"]
    assert [d["slug"] for d in page["documents"]] == ["a", "d"]
    assert (page["total"], page["has_more"]) == (4, True)
    assert [d["slug"] for d in undone["documents"]] == ["a", "d"]
    assert (len(nulls["documents"]), nulls["total"], nulls["has_more"]) == (1, 4, True)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"sort": "tags"}, "sort"),
        ({"sort": "nope"}, "sort"),
        ({"filter": {"tags": "sql"}}, "filter"),
        ({"limit": 101}, "limit"),
        ({"offset": -1}, "offset"),
        ({"filter": {"score": "high"}}, "score"),
    ],
)
async def test_an_invalid_query_is_an_error_result_that_says_what_is_wrong(
    h: Harness, scripted_model: ScriptedModel, arguments: dict[str, Any], problem: str
) -> None:
    (result,) = await call(h, scripted_model, ("store__notes__query", arguments))

    assert result["status"] == "error"
    assert problem in result["error"]


# --- validation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (note(score=11), "11 is greater than the maximum of 10"),
        (note(score="7"), "'7' is not of type 'number'"),
        (note(level="medium"), "'medium' is not one of ['low', 'high']"),
        (note(done="yes"), "'yes' is not of type 'boolean'"),
        (note(tags=["a", "b", "c", "d"]), "is too long"),
        (note(tags=[1]), "1 is not of type 'string'"),
        (note(meta={"source": 3}), "3 is not of type 'string'"),
        (note(meta={"sauce": "x"}), "Additional properties are not allowed ('sauce'"),
        (note(colour="red"), "Additional properties are not allowed ('colour'"),
        ({k: v for k, v in note().items() if k != "topic"}, "'topic' is a required property"),
        (note(slug=""), "should be non-empty"),
        (note(due="next tuesday"), "`due`: 'next tuesday' is not an ISO 8601 datetime"),
        (note(due="2025-02-30"), "`due`: '2025-02-30' is not a valid date or time"),
    ],
)
async def test_a_document_that_breaks_the_schema_is_an_error_result_and_nothing_is_stored(
    h: Harness, scripted_model: ScriptedModel, document: dict[str, Any], problem: str
) -> None:
    (result,) = await call(h, scripted_model, ("store__notes__put", document))

    assert result["status"] == "error"
    assert problem in result["error"]
    page = await h.runtime.storage.query_documents("acme", "notes", EVERYTHING)
    assert page.total == 0


@pytest.mark.parametrize(
    "number", [2**63, -(2**63) - 1, 10**400], ids=["2**63", "-2**63-1", "10**400"]
)
async def test_an_integer_beyond_64_bits_is_an_error_result_in_a_document_and_a_filter(
    h: Harness, scripted_model: ScriptedModel, number: int
) -> None:
    put, query = await call(
        h,
        scripted_model,
        ("store__cache__put", {"id": "a", "v": number}),
        ("store__cache__query", {"filter": {"v": number}}),
    )

    for result, field in ((put, "`v`"), (query, "`filter.v`")):
        assert result["status"] == "error"
        assert f"{field}: " in result["error"]
        assert "outside the 64-bit integer range" in result["error"]
    page = await h.runtime.storage.query_documents("acme", "cache", EVERYTHING)
    assert page.total == 0


async def test_a_missing_key_field_is_an_error_result_and_nothing_is_stored(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    put, get = await call(
        h,
        scripted_model,
        ("store__cache__put", {"id": None, "v": 1}),
        ("store__notes__get", {}),
    )

    assert put["status"] == "error"
    assert "the key template '{id}' needs `id`" in put["error"]
    assert "Nothing was stored" in put["error"]
    assert get["status"] == "error"
    assert "needs `slug`" in get["error"]
    page = await h.runtime.storage.query_documents("acme", "cache", EVERYTHING)
    assert page.total == 0


async def test_a_key_that_disagrees_with_the_key_fields_is_refused(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    (result,) = await call(h, scripted_model, ("store__notes__get", {"key": "note:a", "slug": "b"}))

    assert result["status"] == "error"
    assert "different keys" in result["error"]


# --- scopes and modes -------------------------------------------------------


async def test_a_scope_never_sees_another_scopes_documents(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    await call(h, scripted_model, ("store__notes__put", note()), caller=ACME)

    get, query, delete = await call(
        h,
        scripted_model,
        ("store__notes__get", {"slug": "db"}),
        ("store__notes__query", {}),
        ("store__notes__delete", {"slug": "db"}),
        caller=GLOBEX,
    )

    assert get["result"] == {"found": False, "key": "note:db"}
    assert query["result"]["total"] == 0
    assert delete["result"] == {"deleted": False, "key": "note:db"}
    (still,) = await call(h, scripted_model, ("store__notes__get", {"slug": "db"}), caller=ACME)
    assert still["result"] == note()


async def test_a_shared_store_is_read_by_every_scope_and_written_by_no_agent(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    await h.runtime.storage.put_document(SHARED_SCOPE, "handbook", "p1", {"id": "p1", "text": "x"})

    for caller in (ACME, GLOBEX):
        get, query, put = await call(
            h,
            scripted_model,
            ("store__handbook__get", {"id": "p1"}),
            ("store__handbook__query", {}),
            ("store__handbook__put", {"id": "p2", "text": "mine"}),
            caller=caller,
        )
        assert get["result"] == {"id": "p1", "text": "x"}
        assert query["result"]["total"] == 1
        assert put["status"] == "error"
        assert "unknown tool" in put["error"].lower()
    assert await h.runtime.storage.get_document(SHARED_SCOPE, "handbook", "p2") is None


async def test_a_read_grant_cannot_write_whatever_the_model_calls(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    put, delete = await call(
        h,
        scripted_model,
        ("store__notes__put", note()),
        ("store__notes__delete", {"slug": "db"}),
        agent="reader",
    )

    assert put["status"] == delete["status"] == "error"
    assert await h.runtime.storage.get_document("acme", "notes", "note:db") is None


async def test_a_specialist_writes_to_the_callers_scope(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.enqueue(
        tool_call("call_subagent", {"calls": [{"subagent": "scribe", "task": "note it"}]})
    )
    scripted_model.enqueue(tool_call("store__notes__put", note("from-scribe")))
    scripted_model.reply("stored")
    scripted_model.reply("done")

    events = await h.chat("delegate", caller=GLOBEX)

    assert done(events).reason == "model_stop"
    stored = await h.runtime.storage.get_document("globex", "notes", "note:from-scribe")
    assert stored is not None
    assert await h.runtime.storage.get_document("acme", "notes", "note:from-scribe") is None


# --- ttl and restarts -------------------------------------------------------


async def test_an_expired_document_reads_as_absent(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    (put,) = await call(h, scripted_model, ("store__cache__put", {"id": "k", "v": 1}))
    assert "expires_at" in put["result"]

    await anyio.sleep(1.1)

    get, query = await call(
        h, scripted_model, ("store__cache__get", {"id": "k"}), ("store__cache__query", {})
    )
    assert get["result"] == {"found": False, "key": "k"}
    assert query["result"]["total"] == 0
    assert await h.runtime.storage.purge_expired() == 1


async def test_documents_survive_a_restart(
    make_repo: Callable[..., Path],
    harness_for: Callable[..., Any],
    database_url: str | None,
    tmp_path: Path,
    scripted_model: ScriptedModel,
) -> None:
    root = make_repo(REPO)
    database = database_url or str(tmp_path / "restart.db")
    first = await harness_for(root, database)
    await call(first, scripted_model, ("store__notes__put", note()))
    await first.runtime.storage.close()

    second = await harness_for(root, database)
    (get,) = await call(second, scripted_model, ("store__notes__get", {"slug": "db"}))

    assert get["result"] == note()


async def test_concurrent_tool_calls_in_one_response_each_store_their_document(
    h: Harness, scripted_model: ScriptedModel
) -> None:
    scripted_model.enqueue(tool_calls([("store__notes__put", note(f"n{i}")) for i in range(5)]))
    scripted_model.reply("done")

    events = await h.chat("go", caller=ACME)

    assert [r["status"] for r in results(events)] == ["ok"] * 5
    tool_messages = [
        json.loads(m["content"])
        for m in scripted_model.requests[-1].messages
        if m["role"] == "tool"
    ]
    assert [m["key"] for m in tool_messages] == [f"note:n{i}" for i in range(5)]
