"""The storage contract of durable turns (SPEC 23): a lease's turn note, which expired leases
are turns to continue, and the queue of background turns. Every backend passes every test."""

from __future__ import annotations

import anyio
import pytest

from runtime.storage import QueuedTurn, RecordExistsError, Storage, utc_now

pytestmark = pytest.mark.anyio

NOTE = {"run_id": "run_1", "caller": {"claims": {}, "operator": True}}


def queued(turn_id: str, session_id: str = "s1") -> QueuedTurn:
    return QueuedTurn(
        turn_id, session_id, {"message": "hi"}, {"operator": True}, "queued", utc_now()
    )


# --- a lease's turn note ---------------------------------------------------------------


async def test_an_expired_lease_with_a_turn_note_is_listed_and_not_taken_by_a_new_turn(storage):
    assert await storage.try_acquire_turn("s1", "dead", 0.05, NOTE) is True
    await anyio.sleep(0.15)

    assert await storage.try_acquire_turn("s1", "new-turn", 30, {"run_id": "run_2"}) is False
    assert await storage.try_acquire_turn("s1", "probe", 30) is False
    [expired] = await storage.expired_turns()
    assert (expired.session_id, expired.holder, expired.turn) == ("s1", "dead", NOTE)


async def test_taking_over_a_dead_turn_keeps_its_note_and_hides_it_from_the_sweep(storage):
    await storage.try_acquire_turn("s1", "dead", 0.05, NOTE)
    await anyio.sleep(0.15)

    assert await storage.try_acquire_turn("s1", "resumer", 30, take_over=True) is True
    assert await storage.expired_turns() == []
    assert await storage.renew_turn("s1", "dead", 30) is False
    await storage.try_acquire_turn("s1", "resumer", 0.05)
    await anyio.sleep(0.15)
    [expired] = await storage.expired_turns()
    assert expired.turn == NOTE


async def test_a_live_or_released_lease_is_no_dead_turn(storage):
    await storage.try_acquire_turn("s1", "live", 30, NOTE)
    await storage.try_acquire_turn("s2", "gone", 0.05, NOTE)
    await storage.release_turn("s2", "gone")
    await anyio.sleep(0.15)

    assert await storage.expired_turns() == []
    assert await storage.try_acquire_turn("s2", "next", 30, NOTE) is True


async def test_of_racing_resumers_on_two_storages_exactly_one_takes_a_dead_turn(
    storage, second_storage
):
    await storage.try_acquire_turn("s1", "dead", 0.05, NOTE)
    await anyio.sleep(0.15)
    winners: list[str] = []

    async def contend(target: Storage, holder: str) -> None:
        if await target.try_acquire_turn("s1", holder, 30, take_over=True):
            winners.append(holder)

    async with anyio.create_task_group() as group:
        for i in range(10):
            group.start_soon(contend, storage if i % 2 else second_storage, f"resumer-{i}")

    assert len(winners) == 1


# --- the queue -----------------------------------------------------------------------------


async def test_a_queued_turn_is_claimed_once_and_keeps_its_request(storage):
    await storage.enqueue_turn(queued("t1"))

    claimed = await storage.claim_turn("worker-a", 30)
    assert claimed is not None
    assert (claimed.turn_id, claimed.state, claimed.attempts) == ("t1", "claimed", 1)
    assert claimed.request == {"message": "hi"} and claimed.caller == {"operator": True}
    assert await storage.claim_turn("worker-b", 30) is None


async def test_turns_are_claimed_oldest_first(storage):
    for name in ("t1", "t2", "t3"):
        await storage.enqueue_turn(queued(name, f"s-{name}"))

    order = [(await storage.claim_turn("w", 30)) for _ in range(3)]
    assert [turn.turn_id for turn in order if turn] == ["t1", "t2", "t3"]


async def test_a_lapsed_claim_is_claimed_again_and_counted(storage):
    await storage.enqueue_turn(queued("t1"))
    await storage.claim_turn("dead-worker", 0.05)
    await anyio.sleep(0.15)

    again = await storage.claim_turn("worker-b", 30)
    assert again is not None and again.attempts == 2
    assert await storage.defer_turn("t1", "dead-worker", 1) is False


async def test_a_started_or_done_turn_is_never_claimed(storage):
    await storage.enqueue_turn(queued("t1"))
    await storage.claim_turn("w", 0.05)
    await storage.mark_turn("t1", "started")
    await anyio.sleep(0.15)

    assert await storage.claim_turn("w2", 30) is None
    await storage.mark_turn("t1", "done")
    done = await storage.get_queued_turn("t1")
    assert done is not None and done.state == "done"
    assert done.started_at is not None and done.ended_at is not None
    assert await storage.queue_counts() == {"done": 1}


async def test_a_deferred_turn_waits_then_is_claimed_again(storage):
    await storage.enqueue_turn(queued("t1"))
    await storage.claim_turn("w", 30)

    assert await storage.defer_turn("t1", "w", 0.2) is True
    assert await storage.claim_turn("w", 30) is None
    await anyio.sleep(0.3)
    assert await storage.claim_turn("w", 30) is not None


async def test_a_turn_id_is_queued_once_and_bad_input_is_refused(storage):
    await storage.enqueue_turn(queued("t1"))

    with pytest.raises(RecordExistsError):
        await storage.enqueue_turn(queued("t1"))
    with pytest.raises(ValueError, match="started or done"):
        await storage.mark_turn("t1", "queued")
    assert await storage.queue_counts() == {"queued": 1}


async def test_many_workers_on_two_storages_claim_each_turn_exactly_once(storage, second_storage):
    for i in range(30):
        await storage.enqueue_turn(queued(f"t{i:02}", f"s{i}"))
    claimed: list[str] = []

    async def work(target: Storage, worker: str) -> None:
        while (turn := await target.claim_turn(worker, 30)) is not None:
            claimed.append(turn.turn_id)

    async with anyio.create_task_group() as group:
        for i in range(6):
            group.start_soon(work, storage if i % 2 else second_storage, f"w{i}")

    assert sorted(claimed) == [f"t{i:02}" for i in range(30)]


async def test_a_sessions_waiting_turns_are_those_not_started_yet(storage):
    for name in ("t1", "t2", "t3"):
        await storage.enqueue_turn(queued(name, "s1"))
    await storage.enqueue_turn(queued("other", "s2"))
    await storage.claim_turn("w", 30)
    await storage.mark_turn("t1", "started")

    assert [turn.turn_id for turn in await storage.waiting_turns("s1")] == ["t2", "t3"]
