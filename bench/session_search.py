"""How long `session_search` takes over a large history (SPEC 21; not a test: nothing
asserts on time).

    python -m bench.session_search [--sessions 10000] [--events 20] [--runs 30] [--quick]
                                   [--url sqlite:///path] [--keep PATH]

Fills a fresh database through the storage API with `--sessions` sessions of `--events`
events each (alternating a person's message and an agent's answer, 12-40 words drawn
from a 3,000-word vocabulary with a Zipf-like skew, deterministic), all of them owned by
the one person who searches (the worst case: every session is theirs to search) plus the
same number again for another owner (never found). Then times `search_sessions(...,
limit=5)` for queries from a rare word to the commonest, as the tool runs it, and prints
the median and p95 of each. Target: under 50 ms on SQLite for 10,000 x 20.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import anyio

from runtime.storage import NewEvent, SessionRecord, Storage, open_storage, utc_now

SCOPE, OWNER, OTHER = "acme", "alice", "bob"
VOCABULARY = 3000


def _words(seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    made: set[str] = set()
    while len(made) < VOCABULARY:
        made.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))))
    return sorted(made)


class Texts:
    """Deterministic messages: word i is drawn with weight 1/(i+1) (Zipf, s=1)."""

    def __init__(self, seed: int) -> None:
        self.words = _words(seed)
        self.weights = [1 / (rank + 1) for rank in range(VOCABULARY)]
        self.rng = random.Random(seed + 1)

    def message(self) -> str:
        count = self.rng.randint(12, 40)
        return " ".join(self.rng.choices(self.words, self.weights, k=count))


async def fill(storage: Storage, sessions: int, events: int, texts: Texts) -> None:
    now = utc_now()
    for owner in (OWNER, OTHER):
        for index in range(sessions):
            session_id = f"{owner}-{index:06d}"
            await storage.create_session(SessionRecord(session_id, SCOPE, owner, "default", now, now))
            batch = []
            for seq in range(events):
                kind = "user" if seq % 2 == 0 else "assistant"
                text = texts.message()
                batch.append(NewEvent(kind, {"text": text}, "run", "default", "v1", text))
            await storage.append_events(session_id, batch)


def queries(texts: Texts) -> dict[str, str]:
    words = texts.words
    return {
        "rare word": words[2500],
        "uncommon word": words[300],
        "common word": words[10],
        "commonest word": words[0],
        "two words": f"{words[40]} {words[200]}",
        "phrase": f'"{words[0]} {words[1]}"',
        "either word (or)": f"{words[900]} or {words[1500]}",
        "no match": "zzzzzzzzzz",
    }


async def bench(target: str, sessions: int, events: int, runs: int) -> None:
    texts = Texts(seed=21)
    storage = await open_storage(target)
    started = time.perf_counter()
    await fill(storage, sessions, events, texts)
    filled = time.perf_counter() - started
    total = 2 * sessions * events
    print(
        f"filled {2 * sessions} sessions x {events} events ({total} events, half of them "
        f"the searcher's) in {filled:.1f} s"
    )
    print(f"{'query':<20}{'matches':>8}{'median':>10}{'p95':>10}{'max':>10}")
    worst = 0.0
    for name, query in queries(texts).items():
        found = await storage.search_sessions(SCOPE, OWNER, query, limit=5)  # warm up
        timings = []
        for _ in range(runs):
            start = time.perf_counter()
            await storage.search_sessions(SCOPE, OWNER, query, limit=5, exclude_session="x")
            timings.append(time.perf_counter() - start)
        timings.sort()
        p95 = timings[min(len(timings) - 1, round(0.95 * (len(timings) - 1)))]
        worst = max(worst, statistics.median(timings))
        print(
            f"{name:<20}{len(found):>8}{statistics.median(timings) * 1e3:>8.1f}ms"
            f"{p95 * 1e3:>8.1f}ms{timings[-1] * 1e3:>8.1f}ms"
        )
    await storage.close()
    print(f"slowest median: {worst * 1e3:.1f} ms (target: under 50 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="10 runs of each query")
    parser.add_argument("--url", help="database to use (default: a temporary SQLite file)")
    parser.add_argument("--keep", type=Path, help="write the SQLite file here and keep it")
    args = parser.parse_args()
    runs = 10 if args.quick else args.runs
    with tempfile.TemporaryDirectory() as directory:
        target = args.url or str(args.keep or Path(directory) / "bench.db")
        anyio.run(bench, target, args.sessions, args.events, runs)


if __name__ == "__main__":
    main()
