"""`/stores` (SPEC 14): the operators' routes, with the store tools' rules, on both backends."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.testing import ScriptedModel, tool_call
from tests.server.conftest import Api

pytestmark = pytest.mark.anyio

OPERATOR_TOKEN = "operator-token-0123456789abcdef"
USER_KEY = "key-user-0123456789abcdef"

NOTES = {
    "entity": {
        "name": "Note",
        "key": "note:{slug}",
        "schema": {
            "slug": {"type": "string", "min": 1},
            "topic": {"type": "string"},
            "score": {"type": "number", "min": 0, "max": 10},
            "level": {"type": "enum", "values": ["low", "high"]},
            "due": {"type": "datetime", "nullable": True},
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
            "schema": {"id": {"type": "number"}, "meta": {"type": "object", "nullable": True}},
        },
        "ttl": 3600,
    },
    "agents/default/agent.json": {"stores": {"notes": "rw", "handbook": "read"}},
}


JSON_BODY = {"content-type": "application/json"}


def note(slug: str = "db", **fields: Any) -> dict[str, Any]:
    return {"slug": slug, "topic": "databases", "score": 7, "level": "high", **fields}


@pytest.fixture
async def api(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], database_url: str | None
) -> Api:
    environ = {"DATABASE_URL": database_url} if database_url else {}
    return await api_for(make_repo(REPO), environ)  # type: ignore[no-any-return]


async def test_get_stores_lists_every_store_with_its_schema_and_document_count(api: Api) -> None:
    await api.client.put("/stores/notes/note:db", json=note())

    response = await api.client.get("/stores")

    assert response.status_code == 200
    stores = {store["name"]: store for store in response.json()}
    assert sorted(stores) == ["cache", "handbook", "notes"]
    notes = stores["notes"]
    assert notes["entity"] == "Note"
    assert (notes["key"], notes["key_fields"]) == ("note:{slug}", ["slug"])
    assert notes["schema"]["score"] == {"type": "number", "min": 0, "max": 10}
    assert notes["schema"]["level"] == {"type": "enum", "values": ["low", "high"]}
    assert (notes["history_versions"], notes["ttl"], notes["shared"]) == (2, None, False)
    assert notes["documents"] == 1
    assert (stores["cache"]["ttl"], stores["handbook"]["shared"]) == (3600, True)
    assert stores["cache"]["documents"] == 0


async def test_put_get_and_delete_a_document(api: Api) -> None:
    created = await api.client.put("/stores/notes/note:db", json=note())
    replaced = await api.client.put("/stores/notes/note:db", json=note(score=8))

    assert created.status_code == replaced.status_code == 200
    assert (created.json()["created"], created.json()["version"]) == (True, 1)
    assert (replaced.json()["created"], replaced.json()["version"]) == (False, 2)
    found = await api.client.get("/stores/notes/note:db")
    assert found.status_code == 200
    body = found.json()
    assert body["document"] == note(score=8)
    assert (body["key"], body["scope"], body["version"], body["expires_at"]) == (
        "note:db",
        "default",
        2,
        None,
    )
    assert body["created_at"] < body["updated_at"]
    assert "history" not in body

    deleted = await api.client.delete("/stores/notes/note:db")
    assert deleted.status_code == 204
    again = await api.client.delete("/stores/notes/note:db")
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "unknown_document"
    missing = await api.client.get("/stores/notes/note:db")
    assert missing.status_code == 404


async def test_history_shows_the_kept_previous_versions_newest_first(api: Api) -> None:
    for score in (1, 2, 3, 4):
        await api.client.put("/stores/notes/note:db", json=note(score=score))

    body = (await api.client.get("/stores/notes/note:db?history=1")).json()

    assert body["document"]["score"] == 4
    assert [(h["version"], h["document"]["score"]) for h in body["history"]] == [(3, 3), (2, 2)]


async def test_a_ttl_store_answers_with_the_expiry(api: Api) -> None:
    response = await api.client.put("/stores/cache/2.5", json={"id": 2.5})

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["expires_at"] is not None
    assert body["expires_at"] > body["updated_at"]


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (note(score=11), "`score`: 11 is more than the maximum 10"),
        (note(score="7"), "`score`: expected a number, got string '7'"),
        (note(level="medium"), "`level`: 'medium' is not one of low, high"),
        (note(colour="red"), "unknown field `colour`"),
        ({"slug": "db"}, "missing field `topic` (a string): it is required"),
        (note(due="soon"), "`due`: 'soon' is not an ISO 8601 datetime"),
        (note(slug=""), "`slug`: 0 characters is less than the minimum 1"),
        (["not", "an", "object"], "expected an object, got an array"),
    ],
)
async def test_a_document_that_breaks_the_schema_is_422_and_nothing_is_stored(
    api: Api, document: Any, problem: str
) -> None:
    response = await api.client.put("/stores/notes/note:db", json=document)

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_document"
    assert problem in error["message"]
    assert (await api.client.get("/stores/notes/note:db")).status_code == 404


async def test_a_document_whose_key_fields_do_not_give_the_path_key_is_422(api: Api) -> None:
    response = await api.client.put("/stores/notes/note:other", json=note("db"))

    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert "'note:db'" in message and "'note:other'" in message
    assert (await api.client.get("/stores/notes/note:other")).status_code == 404
    assert (await api.client.get("/stores/notes/note:db")).status_code == 404


async def test_a_body_that_is_not_json_is_422(api: Api) -> None:
    response = await api.client.put(
        "/stores/notes/note:db", content=b"{not json", headers={"content-type": "application/json"}
    )

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"


async def test_an_unknown_store_is_404_listing_the_stores(api: Api) -> None:
    for response in (
        await api.client.get("/stores/nope"),
        await api.client.get("/stores/nope/k"),
        await api.client.put("/stores/nope/k", json={}),
        await api.client.delete("/stores/nope/k"),
    ):
        assert response.status_code == 404
        error = response.json()["error"]
        assert error["code"] == "unknown_store"
        assert "cache, handbook, notes" in error["message"]


async def test_query_filters_sorts_and_pages(api: Api) -> None:
    for slug, score, topic in (("a", 5, "db"), ("b", 9, "db"), ("c", 1, "ui"), ("d", 7, "db")):
        await api.client.put(
            f"/stores/notes/note:{slug}", json=note(slug, score=score, topic=topic)
        )

    by_score = await api.client.get(
        "/stores/notes", params={"filter": json.dumps({"topic": "db"}), "sort": "-score"}
    )
    page = await api.client.get("/stores/notes", params={"sort": "score", "limit": 2, "offset": 1})

    assert by_score.status_code == 200
    body = by_score.json()
    assert [d["key"] for d in body["documents"]] == ["note:b", "note:d", "note:a"]
    assert body["documents"][0]["document"] == note("b", score=9, topic="db")
    assert (body["total"], body["scope"], body["store"]) == (3, "default", "notes")
    paged = page.json()
    assert [d["key"] for d in paged["documents"]] == ["note:a", "note:d"]
    assert (paged["total"], paged["limit"], paged["offset"], paged["has_more"]) == (4, 2, 1, True)


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"filter": "{oops"}, "filter: not valid JSON"),
        ({"filter": "[1]"}, "filter: expected an object"),
        ({"filter": json.dumps({"nope": 1})}, "cannot filter on 'nope'"),
        ({"filter": json.dumps({"score": "high"})}, "`filter.score`: expected a number"),
        ({"sort": "-nope"}, "sort: '-nope'"),
        ({"limit": "101"}, "limit: 101 is out of range (1 to 100)"),
        ({"limit": "many"}, "limit: expected an integer"),
        ({"offset": "-1"}, "offset: -1 is out of range (0 to 2147483647)"),
    ],
)
async def test_an_invalid_query_is_422_saying_what_is_wrong(
    api: Api, params: dict[str, str], problem: str
) -> None:
    response = await api.client.get("/stores/notes", params=params)

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_query"
    assert problem in response.json()["error"]["message"]


async def test_scope_selects_the_partition_and_defaults_to_default(api: Api) -> None:
    await api.client.put("/stores/notes/note:db", params={"scope": "acme"}, json=note())

    assert (await api.client.get("/stores/notes/note:db")).status_code == 404
    found = await api.client.get("/stores/notes/note:db", params={"scope": "acme"})
    assert found.status_code == 200
    assert found.json()["scope"] == "acme"
    listed = await api.client.get("/stores/notes", params={"scope": "globex"})
    assert listed.json()["total"] == 0
    counts = {
        s["name"]: s["documents"] for s in (await api.client.get("/stores?scope=acme")).json()
    }
    assert counts["notes"] == 1


async def test_a_shared_store_has_one_partition_whatever_the_scope(api: Api) -> None:
    put = await api.client.put(
        "/stores/handbook/p1", params={"scope": "acme"}, json={"id": "p1", "text": "x"}
    )
    assert put.status_code == 200
    assert put.json()["scope"] == "*shared*"

    for scope in ("acme", "globex", None):
        params = {"scope": scope} if scope else {}
        found = await api.client.get("/stores/handbook/p1", params=params)
        assert found.json()["document"] == {"id": "p1", "text": "x"}


async def test_documents_put_over_http_are_what_the_agents_of_that_scope_read(
    api: Api, scripted_model: ScriptedModel
) -> None:
    await api.client.put("/stores/notes/note:db", json=note())
    await api.client.put("/stores/handbook/p1", json={"id": "p1", "text": "x"})
    scripted_model.enqueue(tool_call("store__notes__get", {"slug": "db"}))
    scripted_model.enqueue(tool_call("store__handbook__get", {"id": "p1"}))
    scripted_model.reply("done")

    events = await api.chat(message="read", stream=True)

    results = [e["result"] for e in events if e["type"] == "tool_result"]
    assert results == [note(), {"id": "p1", "text": "x"}]


async def test_only_an_operator_may_use_the_store_routes(
    make_repo: Callable[..., Path], api_for: Callable[..., Any], database_url: str | None
) -> None:
    files = {
        **REPO,
        "amodal.json": {
            "name": "test-repo",
            "version": "1.0.0",
            "auth": {"apiKeys": [{"key": "env:USER_KEY", "claims": {"sub": "u", "scope": "s"}}]},
        },
    }
    environ = {"AMODAL_OPERATOR_TOKEN": OPERATOR_TOKEN, "USER_KEY": USER_KEY}
    if database_url:
        environ["DATABASE_URL"] = database_url
    api = await api_for(make_repo(files), environ)
    user = {"Authorization": f"Bearer {USER_KEY}"}
    operator = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}

    for method, path in (
        ("GET", "/stores"),
        ("GET", "/stores/notes"),
        ("GET", "/stores/notes/note:db"),
        ("PUT", "/stores/notes/note:db"),
        ("DELETE", "/stores/notes/note:db"),
    ):
        body = note() if method == "PUT" else None
        anonymous = await api.client.request(method, path, json=body)
        assert anonymous.status_code == 401, (method, path)
        refused = await api.client.request(method, path, json=body, headers=user)
        assert refused.status_code == 403, (method, path)
        assert refused.json()["error"]["code"] == "forbidden"
    allowed = await api.client.put("/stores/notes/note:db", json=note(), headers=operator)
    assert allowed.status_code == 200


# ---------------------------------------------------------------- found by schemathesis


@pytest.mark.parametrize("due", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"])
async def test_a_datetime_that_leaves_the_calendar_in_utc_is_422_not_a_crash(
    api: Api, due: str
) -> None:
    put = await api.client.put("/stores/notes/note:db", json=note(due=due))
    query = await api.client.get("/stores/notes", params={"filter": json.dumps({"due": due})})

    for response in (put, query):
        assert response.status_code == 422, response.text
        assert "out of range" in response.json()["error"]["message"]
    assert (await api.client.get("/stores/notes/note:db")).status_code == 404


BEYOND_64_BITS = {"2**63": str(2**63), "-2**63-1": str(-(2**63) - 1), "10**400": "1" + "0" * 400}


@pytest.mark.parametrize("number", BEYOND_64_BITS.values(), ids=BEYOND_64_BITS.keys())
async def test_an_integer_beyond_64_bits_is_422_naming_the_field_both_ways(
    api: Api, number: str
) -> None:
    """One rule for both backends: PostgreSQL would keep such a number exactly and
    SQLite as a double, so the same filter would find different documents."""
    typed = await api.client.put(
        "/stores/cache/1", content=f'{{"id": {number}}}', headers=JSON_BODY
    )
    nested = await api.client.put(
        "/stores/cache/1", content=f'{{"id": 1, "meta": {{"n": [{number}]}}}}', headers=JSON_BODY
    )
    query = await api.client.get("/stores/cache", params={"filter": f'{{"id": {number}}}'})

    for response, field in ((typed, "`id`"), (nested, "`meta.n[0]`"), (query, "`filter.id`")):
        assert response.status_code == 422, response.text
        message = response.json()["error"]["message"]
        assert f"{field}: " in message and "outside the 64-bit integer range" in message
        assert "0" * 100 not in message  # a long number is never echoed whole
    assert (await api.client.get("/stores/cache/1")).status_code == 404


async def test_the_64_bit_extremes_are_stored_and_found_exactly(api: Api) -> None:
    for number in (2**63 - 1, -(2**63)):
        put = await api.client.put(f"/stores/cache/{number}", json={"id": number})
        assert put.status_code == 200, put.text
        found = await api.client.get("/stores/cache", params={"filter": f'{{"id": {number}}}'})
        assert [d["document"]["id"] for d in found.json()["documents"]] == [number]


async def test_a_number_too_long_to_parse_is_422_not_a_crash(api: Api) -> None:
    digits = "9" * 5000  # past Python's limit on converting digits to an integer

    put = await api.client.put("/stores/cache/1", content=f'{{"id": {digits}}}', headers=JSON_BODY)
    query = await api.client.get("/stores/cache", params={"filter": f'{{"id": {digits}}}'})

    assert (put.status_code, put.json()["error"]["code"]) == (422, "invalid_request")
    assert (query.status_code, query.json()["error"]["code"]) == (422, "invalid_query")
