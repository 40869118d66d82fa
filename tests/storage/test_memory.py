"""The storage contract for memory and full-text search (SPEC 21): every backend passes."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from runtime.storage import (
    MemoryEntry,
    MemoryOwner,
    NewEvent,
    RecordExistsError,
    Storage,
)

from ._helpers import T0, session_record

pytestmark = pytest.mark.anyio

ALICE = MemoryOwner("user", "acme", "alice")
BOB = MemoryOwner("user", "acme", "bob")


def note(text: str, entry_id: str = "m1", owner: MemoryOwner = ALICE, agent: str = "helper"):
    return MemoryEntry(entry_id, agent, owner, text, T0)


async def add(storage: Storage, text: str, entry_id: str, owner: MemoryOwner = ALICE) -> bool:
    usage = await storage.add_memory(note(text, entry_id, owner), max_entries=50, max_chars=8000)
    return usage.added


async def test_entries_are_kept_per_agent_and_owner_oldest_first(storage: Storage) -> None:
    for index, text in enumerate(["prefers metric units", "lives in Lyon", "has a cat"]):
        await storage.add_memory(
            MemoryEntry(f"m{index}", "helper", ALICE, text, T0 + timedelta(seconds=index)),
            max_entries=50,
            max_chars=8000,
        )
    await add(storage, "bob's note", "b1", BOB)
    await storage.add_memory(note("other agent", "o1", agent="writer"), max_entries=5, max_chars=99)

    mine = await storage.list_memory("helper", kind="user", scope_id="acme", owner="alice")
    assert [entry.text for entry in mine] == ["prefers metric units", "lives in Lyon", "has a cat"]
    assert mine[0] == MemoryEntry("m0", "helper", ALICE, "prefers metric units", T0)
    assert [e.id for e in await storage.list_memory("helper", owner="bob")] == ["b1"]
    assert len(await storage.list_memory("helper")) == 4  # the operator's view: every owner
    assert [e.id for e in await storage.list_memory("helper", limit=2, offset=1)] == ["m1", "m2"]
    assert await storage.get_memory("b1") == note("bob's note", "b1", BOB)
    assert await storage.get_memory("nope") is None


async def test_an_add_over_a_limit_writes_nothing_and_says_how_full_it_is(
    storage: Storage,
) -> None:
    first = await storage.add_memory(note("12345", "m1"), max_entries=2, max_chars=12)
    assert (first.entries, first.chars, first.added) == (1, 5, True)
    too_long = await storage.add_memory(note("12345678", "m2"), max_entries=2, max_chars=12)
    assert (too_long.entries, too_long.chars, too_long.added) == (1, 5, False)
    await storage.add_memory(note("1234567", "m3"), max_entries=2, max_chars=12)
    full = await storage.add_memory(note("x", "m4"), max_entries=2, max_chars=100)
    assert (full.entries, full.chars, full.added) == (2, 12, False)
    assert [e.id for e in await storage.list_memory("helper")] == ["m1", "m3"]
    # Another owner's room is its own.
    assert (await storage.add_memory(note("x", "b1", BOB), max_entries=2, max_chars=12)).added


async def test_concurrent_adds_never_pass_the_limit(storage: Storage, second_storage: Storage):
    added: list[bool] = []

    async def one(target: Storage, index: int) -> None:
        usage = await target.add_memory(
            note(f"n{index}", f"m{index}"), max_entries=5, max_chars=999
        )
        added.append(usage.added)

    async with anyio.create_task_group() as group:
        for index in range(12):
            group.start_soon(one, storage if index % 2 else second_storage, index)
    assert added.count(True) == 5
    assert len(await storage.list_memory("helper")) == 5


@pytest.mark.parametrize(
    ("text", "problem"),
    [("nul \x00 inside", r"U\+0000"), ("lone \ud800 surrogate", "surrogate"), ("  ", "empty")],
)
async def test_text_a_backend_cannot_keep_is_refused_and_nothing_stored(
    storage: Storage, text: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        await storage.add_memory(note(text), max_entries=5, max_chars=999)
    assert await storage.list_memory("helper") == []


async def test_a_taken_id_is_refused(storage: Storage) -> None:
    await add(storage, "one", "m1")
    with pytest.raises(RecordExistsError):
        await add(storage, "two", "m1")


async def test_delete_only_within_the_owner_given(storage: Storage) -> None:
    await add(storage, "alice's", "m1")
    assert not await storage.delete_memory("m1", owner=BOB)
    assert not await storage.delete_memory("m1", agent="writer", owner=ALICE)
    assert await storage.delete_memory("m1", agent="helper", owner=ALICE)
    assert not await storage.delete_memory("m1")
    await add(storage, "again", "m2")
    assert await storage.delete_memory("m2")  # the operator: no owner given
    assert await storage.search_memory("helper", ALICE, "again") == []  # gone from the index


async def test_search_memory_ranks_by_text_match_within_one_owner(storage: Storage) -> None:
    await add(storage, "The person prefers metric units for distances", "m1")
    await add(storage, "Their cat is called Units", "m2")
    await add(storage, "Metric units, always metric: kilometres and kilograms", "m3")
    await add(storage, "prefers metric units too", "b1", BOB)

    found = await storage.search_memory("helper", ALICE, "metric unit")
    assert [match.entry.id for match in found] == ["m3", "m1"]  # stems: "unit" finds "units"
    assert "[metric]" in found[1].snippet.lower()
    assert [m.entry.id for m in await storage.search_memory("helper", ALICE, "cat or lyon")] == [
        "m2"
    ]
    assert [m.entry.id for m in await storage.search_memory("helper", ALICE, "units -metric")] == [
        "m2"
    ]
    assert [m.entry.id for m in await storage.search_memory("helper", BOB, "metric")] == ["b1"]
    # Search syntax of either database typed by a person is just words.
    for query in ['"unclosed', "NEAR(a b)", "units*", "a:b & !c | (", "-", "", "   ", '""']:
        await storage.search_memory("helper", ALICE, query)
    assert await storage.search_memory("helper", ALICE, "  ") == []
    with pytest.raises(ValueError, match="limit"):
        await storage.search_memory("helper", ALICE, "metric", limit=0)


async def searchable(storage: Storage, session_id: str, *texts: str) -> None:
    await storage.append_events(
        session_id,
        [
            NewEvent("user", {"text": text}, "run-1", "helper", "v1", search_text=text)
            for text in texts
        ],
    )


async def test_search_sessions_finds_only_the_owners_sessions(storage: Storage) -> None:
    await storage.create_session(session_record("a1", scope_id="acme", owner="alice"))
    await storage.create_session(session_record("a2", scope_id="acme", owner="alice"))
    await storage.create_session(session_record("b1", scope_id="acme", owner="bob"))
    await storage.create_session(session_record("x1", scope_id="other", owner="alice"))
    await searchable(storage, "a1", "We planned the trip to Lyon in kilometres", "ok thanks")
    await searchable(storage, "a2", "Lyon again", "the weather")
    await searchable(storage, "b1", "Bob's secret trip to Lyon")
    await searchable(storage, "x1", "another tenant's Lyon")
    await storage.append_event(
        "a1", "tool_result", {"text": "Lyon"}, run_id="r", agent="helper", bundle_version="v"
    )  # not searchable: no search_text

    found = await storage.search_sessions("acme", "alice", "lyon")
    assert {match.session_id for match in found} == {"a1", "a2"}
    assert len(found) == 2
    assert all(match.agent == "helper" for match in found)
    assert "[Lyon]" in found[0].snippet
    assert [m.session_id for m in await storage.search_sessions("acme", "alice", "trip lyon")] == [
        "a1"
    ]
    excluded = await storage.search_sessions("acme", "alice", "lyon", exclude_session="a1")
    assert [m.session_id for m in excluded] == ["a2"]
    assert [m.session_id for m in await storage.search_sessions("acme", "bob", "lyon")] == ["b1"]
    assert await storage.search_sessions("acme", "carol", "lyon") == []
    assert await storage.search_sessions("acme", None, "lyon") == []


async def test_a_deleted_session_leaves_the_search(storage: Storage) -> None:
    await storage.create_session(session_record("a1", scope_id="acme", owner="alice"))
    await searchable(storage, "a1", "remember the lighthouse")
    assert len(await storage.search_sessions("acme", "alice", "lighthouse")) == 1
    assert await storage.delete_session("a1")
    assert await storage.search_sessions("acme", "alice", "lighthouse") == []


async def test_texts_written_between_searches_are_found_and_deleted_ones_are_not(
    storage: Storage, second_storage: Storage
) -> None:
    # SQLite indexes a text when someone searches (m015): what was written since the last
    # search, by this process or another, is found by the next one; a session deleted
    # before or after its texts reached the index leaves no match behind.
    for name in ("a1", "a2", "a3"):
        await storage.create_session(session_record(name, scope_id="acme", owner="alice"))
    await searchable(storage, "a1", "the lighthouse keeper")
    assert [m.session_id for m in await storage.search_sessions("acme", "alice", "lighthouse")] == [
        "a1"
    ]
    await searchable(second_storage, "a2", "a lighthouse at dusk")
    await searchable(storage, "a3", "lighthouse stairs")
    assert await storage.delete_session("a3")  # never indexed
    found = await second_storage.search_sessions("acme", "alice", "lighthouse")
    assert {m.session_id for m in found} == {"a1", "a2"}
    assert await storage.delete_session("a1")  # indexed
    await searchable(storage, "a2", "the lighthouse lamp")
    found = await storage.search_sessions("acme", "alice", "lighthouse")
    assert [m.session_id for m in found] == ["a2", "a2"]
    assert await storage.search_sessions("acme", "alice", "keeper") == []


async def test_a_search_text_the_database_cannot_hold_is_indexed_cleaned(storage: Storage) -> None:
    await storage.create_session(session_record("a1", scope_id="acme", owner="alice"))
    text = "nul\x00byte and a lone \ud800 surrogate near the harbour"
    await searchable(storage, "a1", text)
    (event,) = await storage.list_events("a1")
    assert event.data == {"text": text}  # the log keeps it exactly
    assert len(await storage.search_sessions("acme", "alice", "harbour")) == 1
    assert len(await storage.search_sessions("acme", "alice", "byte \ud800")) == 1


async def test_other_owners_matches_never_crowd_out_the_owners_own(storage: Storage) -> None:
    # Far more of another owner's matching events than a search ranks, all newer than the
    # one that matters: the index matches by owner first, so hers is still found.
    await storage.create_session(session_record("a1", scope_id="acme", owner="alice"))
    await searchable(storage, "a1", "the lighthouse keeper's log")
    for index in range(3):
        session_id = f"b{index}"
        await storage.create_session(session_record(session_id, scope_id="acme", owner="bob"))
        await searchable(storage, session_id, *["another lighthouse, and more"] * 400)
    found = await storage.search_sessions("acme", "alice", "lighthouse")
    assert [match.session_id for match in found] == ["a1"]
    assert len(await storage.search_sessions("acme", "bob", "lighthouse", limit=50)) == 50


async def test_the_session_searched_from_never_crowds_out_the_others(storage: Storage) -> None:
    await storage.create_session(session_record("old", scope_id="acme", owner="alice"))
    await searchable(storage, "old", "we talked about the harbour")
    await storage.create_session(session_record("now", scope_id="acme", owner="alice"))
    await searchable(storage, "now", *["harbour harbour harbour"] * 30)
    found = await storage.search_sessions(
        "acme", "alice", "harbour", limit=1, exclude_session="now"
    )
    assert [match.session_id for match in found] == ["old"]


async def test_one_owners_notes_are_searched_apart_from_everyone_elses(storage: Storage) -> None:
    for index in range(60):
        other = MemoryOwner("user", "acme", f"user-{index}")
        await storage.add_memory(
            note("likes the harbour view", f"o{index}", other), max_entries=5, max_chars=999
        )
    await add(storage, "likes the harbour at dawn", "mine")
    found = await storage.search_memory("helper", ALICE, "harbour")
    assert [match.entry.id for match in found] == ["mine"]


async def test_stop_words_are_left_out_of_a_search_on_both_backends(storage: Storage) -> None:
    await storage.create_session(session_record("a1", scope_id="acme", owner="alice"))
    await searchable(storage, "a1", "the harbour is where the boats are")
    assert await storage.search_sessions("acme", "alice", "the") == []
    assert await storage.search_sessions("acme", "alice", "is the") == []
    found = await storage.search_sessions("acme", "alice", "the harbour")
    assert [match.session_id for match in found] == ["a1"]
    await add(storage, "the person likes the harbour", "m1")
    assert await storage.search_memory("helper", ALICE, "the") == []
    assert len(await storage.search_memory("helper", ALICE, "harbour or the")) == 1
