"""The store-document part of the storage contract (SPEC 10): every backend passes it."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import anyio
import pytest

from runtime.storage import DocumentQuery, Storage, utc_now

from ._helpers import PAYLOAD

pytestmark = pytest.mark.anyio


async def put(storage: Storage, key: str, scope: str = "scope-a", **data: Any) -> int:
    document = await storage.put_document(scope, "notes", key, {"id": key, **data})
    return document.version


async def keys(storage: Storage, scope: str = "scope-a", **query: Any) -> list[str]:
    page = await storage.query_documents(scope, "notes", DocumentQuery(**query))
    return [document.key for document in page.documents]


# --- put, get, delete -------------------------------------------------------


async def test_a_put_document_reads_back_with_its_metadata(storage):
    before = utc_now()
    stored = await storage.put_document("scope-a", "notes", "n1", copy.deepcopy(PAYLOAD))

    found = await storage.get_document("scope-a", "notes", "n1")

    assert found == stored
    assert (found.scope_id, found.store, found.key, found.data) == (
        "scope-a",
        "notes",
        "n1",
        PAYLOAD,
    )
    assert (found.version, found.expires_at) == (1, None)
    assert found.created_at == found.updated_at
    assert abs(found.created_at - before) < timedelta(minutes=1)
    assert found.created_at.utcoffset() == timedelta(0)


async def test_an_absent_document_reads_as_none(storage):
    assert await storage.get_document("scope-a", "notes", "nope") is None


async def test_a_second_put_replaces_the_document_and_counts_its_version(storage):
    first = await storage.put_document("scope-a", "notes", "n1", {"text": "one"})
    await anyio.sleep(0.01)

    second = await storage.put_document("scope-a", "notes", "n1", {"other": 2})

    found = await storage.get_document("scope-a", "notes", "n1")
    assert found == second
    assert (found.data, found.version) == ({"other": 2}, 2)
    assert found.created_at == first.created_at
    assert found.updated_at > first.updated_at


async def test_documents_are_partitioned_by_scope_and_store(storage):
    await storage.put_document("scope-a", "notes", "k", {"v": "a"})
    await storage.put_document("scope-b", "notes", "k", {"v": "b"})
    await storage.put_document("scope-a", "tasks", "k", {"v": "task"})

    assert (await storage.get_document("scope-a", "notes", "k")).data == {"v": "a"}
    assert (await storage.get_document("scope-b", "notes", "k")).data == {"v": "b"}
    assert (await storage.get_document("scope-a", "tasks", "k")).data == {"v": "task"}
    assert await storage.get_document("scope-c", "notes", "k") is None
    assert await keys(storage, "scope-b") == ["k"]

    assert await storage.delete_document("scope-b", "notes", "k") is True
    assert (await storage.get_document("scope-a", "notes", "k")).data == {"v": "a"}


async def test_delete_returns_true_once_then_false(storage):
    await put(storage, "n1")

    assert await storage.delete_document("scope-a", "notes", "n1") is True
    assert await storage.delete_document("scope-a", "notes", "n1") is False
    assert await storage.get_document("scope-a", "notes", "n1") is None


async def test_a_deleted_key_starts_again_at_version_one(storage):
    await put(storage, "n1")
    await put(storage, "n1")
    await storage.delete_document("scope-a", "notes", "n1")

    assert await put(storage, "n1") == 1


@pytest.mark.parametrize(
    "data",
    [{"text": "a\x00b"}, {"a\x00": 1}, {"list": ["broken \ud800 pair"]}],
    ids=["nul", "nul-in-a-field-name", "lone-surrogate"],
)
async def test_text_no_backend_can_keep_exactly_is_refused_and_nothing_is_stored(storage, data):
    with pytest.raises(ValueError, match=r"U\+0000|surrogate"):
        await storage.put_document("scope-a", "notes", "n1", data)

    assert await storage.get_document("scope-a", "notes", "n1") is None


async def test_a_document_that_is_not_json_is_refused(storage):
    with pytest.raises((TypeError, ValueError), match="not a JSON number"):
        await storage.put_document("scope-a", "notes", "n1", {"x": float("nan")})
    with pytest.raises(TypeError, match="JSON object"):
        await storage.put_document("scope-a", "notes", "n1", ["not", "an", "object"])  # type: ignore[arg-type]

    assert await storage.get_document("scope-a", "notes", "n1") is None


async def test_concurrent_puts_of_one_key_from_two_storages_number_every_version(
    storage, second_storage
):
    async def many(target: Storage, writer: str) -> None:
        for i in range(10):
            await target.put_document("scope-a", "notes", "n1", {"writer": writer, "i": i})

    async with anyio.create_task_group() as group:
        group.start_soon(many, storage, "a")
        group.start_soon(many, second_storage, "b")
        group.start_soon(many, storage, "c")

    found = await second_storage.get_document("scope-a", "notes", "n1")
    assert found is not None
    assert found.version == 30


# --- query ------------------------------------------------------------------


async def test_query_filters_on_equality_of_every_given_field(storage):
    await put(storage, "a", topic="db", done=True, score=1)
    await put(storage, "b", topic="db", done=False, score=1.0)
    await put(storage, "c", topic="ui", done=True, score=2)
    await put(storage, "d", topic="db", done=True, score="1")

    assert await keys(storage, filters={"topic": "db"}) == ["a", "b", "d"]
    assert await keys(storage, filters={"topic": "db", "done": True}) == ["a", "d"]
    assert await keys(storage, filters={"score": 1}) == ["a", "b"]  # 1 equals 1.0
    assert await keys(storage, filters={"score": "1"}) == ["d"]  # a string is not a number
    assert await keys(storage, filters={"done": 1}) == []  # a number is not true
    assert await keys(storage, filters={"topic": "DB"}) == []


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"n": 2**63}, "document.n"),
        ({"n": -(2**63) - 1}, "document.n"),
        ({"n": 10**400}, "document.n"),
        ({"deep": {"list": [1, 2**64]}}, r"document.deep.list\[1\]"),
    ],
    ids=["2**63", "-2**63-1", "10**400", "nested"],
)
async def test_an_integer_beyond_64_bits_is_refused_naming_its_field(storage, data, field):
    with pytest.raises(ValueError, match=rf"^{field}: .* outside the 64-bit integer range"):
        await storage.put_document("scope-a", "notes", "n1", data)

    assert await storage.get_document("scope-a", "notes", "n1") is None


@pytest.mark.parametrize(
    "value",
    [2**63, -(2**63) - 1, 10**400, float("inf")],
    ids=["2**63", "-2**63-1", "10**400", "inf"],
)
async def test_a_filter_number_no_document_may_hold_is_refused(storage, value):
    with pytest.raises(ValueError, match=r"^filter 'n': .*(64-bit integer|JSON number)"):
        await storage.query_documents("scope-a", "notes", DocumentQuery({"n": value}))


async def test_the_64_bit_extremes_and_large_floats_are_kept_and_found_exactly(storage):
    await put(storage, "max", n=2**63 - 1)
    await put(storage, "min", n=-(2**63))
    await put(storage, "below-max", n=2**63 - 2)
    await put(storage, "float", n=1e19)

    found = await storage.get_document("scope-a", "notes", "max")
    assert found is not None and found.data["n"] == 2**63 - 1
    assert await keys(storage, filters={"n": 2**63 - 1}) == ["max"]
    assert await keys(storage, filters={"n": -(2**63)}) == ["min"]
    assert await keys(storage, filters={"n": 1e19}) == ["float"]
    assert await keys(storage, sort="n") == ["min", "below-max", "max", "float"]


async def test_a_null_filter_matches_null_and_absent_fields(storage):
    await put(storage, "a", owner=None)
    await put(storage, "b")
    await put(storage, "c", owner="ana")

    assert await keys(storage, filters={"owner": None}) == ["a", "b"]


async def test_a_filter_never_matches_inside_arrays_or_objects(storage):
    await put(storage, "a", tags=["x"], meta={"tags": "x"})
    await put(storage, "b", tags="x")

    assert await keys(storage, filters={"tags": "x"}) == ["b"]


async def test_query_sorts_ascending_and_descending_with_missing_values_last(storage):
    await put(storage, "a", title="beta", n=10)
    await put(storage, "b", title="Alpha", n=9.5)
    await put(storage, "c", title="alpha")
    await put(storage, "d", title=None, n=-1)
    await put(storage, "e", title="Émile", n=10)

    # Code point order: upper case before lower case, accented letters after.
    assert await keys(storage, sort="title") == ["b", "c", "a", "e", "d"]
    assert await keys(storage, sort="-title") == ["e", "a", "c", "b", "d"]
    # Ties by key; documents without the field last either way.
    assert await keys(storage, sort="n") == ["d", "b", "a", "e", "c"]
    assert await keys(storage, sort="-n") == ["a", "e", "b", "d", "c"]


async def test_booleans_sort_false_first(storage):
    await put(storage, "a", done=True)
    await put(storage, "b", done=False)
    await put(storage, "c", done=True)

    assert await keys(storage, sort="done") == ["b", "a", "c"]
    assert await keys(storage, sort="-done") == ["a", "c", "b"]


async def test_without_a_sort_documents_come_by_key(storage):
    for key in ("b", "a", "C", "c"):
        await put(storage, key)

    assert await keys(storage) == ["C", "a", "b", "c"]


async def test_limit_and_offset_page_through_and_total_counts_every_match(storage):
    for i in range(7):
        await put(storage, f"n{i}", even=i % 2 == 0)

    page = await storage.query_documents(
        "scope-a", "notes", DocumentQuery({"even": True}, limit=2, offset=1)
    )

    assert [d.key for d in page.documents] == ["n2", "n4"]
    assert page.total == 4
    late = await storage.query_documents("scope-a", "notes", DocumentQuery(offset=50))
    assert (late.documents, late.total) == ([], 7)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (DocumentQuery(limit=0), "limit"),
        (DocumentQuery(limit=101), "limit"),
        (DocumentQuery(offset=-1), "offset"),
        (DocumentQuery(sort="-"), "sort"),
        (DocumentQuery({"tags": ["x"]}), "tags"),  # type: ignore[dict-item]
        (DocumentQuery({"x": float("inf")}), "JSON number"),
    ],
    ids=["limit-0", "limit-101", "negative-offset", "empty-sort", "list-value", "infinity"],
)
async def test_queries_out_of_bounds_are_refused(storage, query, message):
    with pytest.raises((TypeError, ValueError), match=message):
        await storage.query_documents("scope-a", "notes", query)


async def test_a_hundred_documents_fit_one_page(storage):
    for i in range(105):
        await storage.put_document("scope-a", "notes", f"n{i:03}", {"i": i})

    page = await storage.query_documents("scope-a", "notes", DocumentQuery(limit=100))

    assert len(page.documents) == 100
    assert page.total == 105


# --- ttl --------------------------------------------------------------------


async def test_an_expired_document_is_hidden_from_every_read_and_purged(storage):
    short = await storage.put_document("scope-a", "notes", "short", {"v": 1}, ttl_seconds=0.2)
    await storage.put_document("scope-a", "notes", "long", {"v": 1}, ttl_seconds=600)
    await storage.put_document("scope-b", "notes", "short", {"v": 1}, ttl_seconds=0.2)
    await storage.put_document("scope-a", "notes", "forever", {"v": 1})
    assert short.expires_at is not None
    assert short.expires_at - short.updated_at == timedelta(seconds=0.2)
    assert await keys(storage) == ["forever", "long", "short"]

    await anyio.sleep(0.3)

    assert await storage.get_document("scope-a", "notes", "short") is None
    assert await keys(storage) == ["forever", "long"]
    page = await storage.query_documents("scope-a", "notes", DocumentQuery({"v": 1}))
    assert page.total == 2
    assert await storage.delete_document("scope-a", "notes", "short") is False
    assert await storage.purge_expired() == 2
    assert await storage.purge_expired() == 0
    assert await keys(storage) == ["forever", "long"]


async def test_each_put_counts_the_ttl_again(storage):
    await storage.put_document("scope-a", "notes", "n1", {"v": 1}, ttl_seconds=0.3)
    await anyio.sleep(0.2)
    await storage.put_document("scope-a", "notes", "n1", {"v": 2}, ttl_seconds=0.3)
    await anyio.sleep(0.2)

    found = await storage.get_document("scope-a", "notes", "n1")
    assert found is not None
    assert found.data == {"v": 2}


async def test_a_put_over_an_expired_document_starts_a_new_one(storage):
    await storage.put_document("scope-a", "notes", "n1", {"v": 1}, ttl_seconds=0.1, keep_versions=3)
    await storage.put_document("scope-a", "notes", "n1", {"v": 2}, ttl_seconds=0.1, keep_versions=3)
    await anyio.sleep(0.2)

    fresh = await storage.put_document("scope-a", "notes", "n1", {"v": 3}, keep_versions=3)

    assert fresh.version == 1
    assert fresh.expires_at is None
    assert await storage.document_history("scope-a", "notes", "n1") == []


async def test_a_ttl_that_is_not_positive_is_refused(storage):
    with pytest.raises(ValueError, match="ttl_seconds"):
        await storage.put_document("scope-a", "notes", "n1", {}, ttl_seconds=0)


# --- history ----------------------------------------------------------------


async def test_history_keeps_the_newest_previous_versions(storage):
    for i in range(1, 5):
        await storage.put_document("scope-a", "notes", "n1", {"v": i}, keep_versions=2)

    history = await storage.document_history("scope-a", "notes", "n1")

    assert [(h.version, h.data) for h in history] == [(3, {"v": 3}), (2, {"v": 2})]
    current = await storage.get_document("scope-a", "notes", "n1")
    assert current is not None
    assert (current.version, current.data) == (4, {"v": 4})
    assert all(h.created_at == current.created_at for h in history)
    assert history[0].updated_at > history[1].updated_at
    assert all(h.expires_at is None for h in history)


async def test_without_kept_versions_there_is_no_history(storage):
    for i in range(3):
        await storage.put_document("scope-a", "notes", "n1", {"v": i})

    assert await storage.document_history("scope-a", "notes", "n1") == []


async def test_keeping_fewer_versions_trims_the_history(storage):
    for i in range(5):
        await storage.put_document("scope-a", "notes", "n1", {"v": i}, keep_versions=3)
    await storage.put_document("scope-a", "notes", "n1", {"v": 5}, keep_versions=1)

    history = await storage.document_history("scope-a", "notes", "n1")

    assert [h.version for h in history] == [5]


async def test_deleting_a_document_deletes_its_history(storage):
    for i in range(3):
        await storage.put_document("scope-a", "notes", "n1", {"v": i}, keep_versions=5)
    await storage.delete_document("scope-a", "notes", "n1")

    assert await storage.document_history("scope-a", "notes", "n1") == []
    await storage.put_document("scope-a", "notes", "n1", {"v": "again"}, keep_versions=5)
    assert await storage.document_history("scope-a", "notes", "n1") == []


async def test_history_is_per_scope(storage):
    for scope in ("scope-a", "scope-b"):
        for i in range(2):
            await storage.put_document(
                scope, "notes", "n1", {"scope": scope, "v": i}, keep_versions=5
            )

    (entry,) = await storage.document_history("scope-b", "notes", "n1")
    assert entry.data == {"scope": "scope-b", "v": 0}
    assert entry.scope_id == "scope-b"


# --- restart ----------------------------------------------------------------


async def test_documents_and_their_history_survive_a_reopen(backend):
    first = await backend.open()
    await first.put_document("scope-a", "notes", "n1", {"v": 1}, keep_versions=2)
    stored = await first.put_document("scope-a", "notes", "n1", {"v": 2}, keep_versions=2)
    await first.close()

    again = await backend.open()
    try:
        assert await again.get_document("scope-a", "notes", "n1") == stored
        assert [h.data for h in await again.document_history("scope-a", "notes", "n1")] == [
            {"v": 1}
        ]
    finally:
        await again.close()
