"""How long `session_search` takes over a large history (SPEC 21; not a test: nothing
asserts on time).

    python -m bench.session_search [--sessions 10000] [--events 20] [--runs 30] [--quick]
                                   [--url sqlite:///path] [--keep PATH [--reuse]]

Fills a fresh database through the storage API with `--sessions` sessions of `--events`
events each (alternating a person's message and an agent's answer, 12-40 words drawn
from a 3,000-word vocabulary with a Zipf-like skew whose commonest words are English stop
words, as in real text; deterministic) for one person, then as many for another: each
searches 10,000 sessions of their own (the worst case: everything is theirs to search),
one as the owner of the newest sessions, the other of the older ones. Then times
`search_sessions(..., limit=5)` for queries from a rare word to the commonest, as the tool
runs it, and prints the median and p95 of each, and the median CPU time (on a busy machine
wall time includes waiting for a core; CPU time mostly does not). Target: under 50 ms on SQLite for
10,000 x 20. `--keep PATH --reuse` searches a database an earlier `--keep PATH` filled.
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
from runtime.storage.sqlite import STOP_WORDS

SCOPE, OWNER, OTHER = "acme", "alice", "bob"
VOCABULARY = 3000
COMMONEST = ["the", "and", "to", "of", "a", "i", "you", "it", "in", "is", "that", "for"]
"""The commonest words of the vocabulary are English stop words, as in real text."""


def _words(seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    made: set[str] = set()
    while len(made) < VOCABULARY - len(COMMONEST):
        word = "".join(rng.choice(letters) for _ in range(rng.randint(3, 9)))
        if word not in STOP_WORDS:
            made.add(word)
    return COMMONEST + sorted(made)


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
            await storage.create_session(
                SessionRecord(session_id, SCOPE, owner, "default", now, now)
            )
            batch = []
            for seq in range(events):
                kind = "user" if seq % 2 == 0 else "assistant"
                text = texts.message()
                batch.append(NewEvent(kind, {"text": text}, "run", "default", "v1", text))
            await storage.append_events(session_id, batch)


def queries(texts: Texts) -> dict[str, str]:
    words = texts.words
    first = len(COMMONEST)  # the commonest word that is no stop word
    return {
        "rare word": words[2500],
        "uncommon word": words[300],
        "common word": words[first + 10],
        "commonest word": words[first],
        "two words": f"{words[first + 30]} {words[200]}",
        "phrase": f'"{words[first]} {words[first + 1]}"',
        "either word (or)": f"{words[900]} or {words[1500]}",
        "a stop word": "the",
        "no match": "zzzzzzzzzz",
    }


async def bench(target: str, sessions: int, events: int, runs: int, reuse: bool) -> None:
    texts = Texts(seed=21)
    storage = await open_storage(target)
    if reuse:
        print(f"searching {target} as an earlier run filled it")
    else:
        started = time.perf_counter()
        await fill(storage, sessions, events, texts)
        filled = time.perf_counter() - started
        total = 2 * sessions * events
        print(
            f"filled {2 * sessions} sessions x {events} events ({total} events, half of them "
            f"the searcher's) in {filled:.1f} s",
            flush=True,
        )
    worst = 0.0
    for who, why in ((OTHER, "whose sessions are the newest"), (OWNER, "whose are all older")):
        print(f"\nsearching as {who}, {why}:")
        worst = max(worst, await search_as(storage, who, texts, runs))
    await storage.close()
    print(f"\nslowest median: {worst * 1e3:.1f} ms (target: under 50 ms)")


async def search_as(storage: Storage, who: str, texts: Texts, runs: int) -> float:
    print(f"{'query':<20}{'matches':>8}{'median':>10}{'p95':>10}{'max':>10}{'cpu':>10}")
    worst = 0.0
    for name, query in queries(texts).items():
        found = await storage.search_sessions(SCOPE, who, query, limit=5)  # warm up
        timings, cpu = [], []
        for _ in range(runs):
            start, start_cpu = time.perf_counter(), time.process_time()
            await storage.search_sessions(SCOPE, who, query, limit=5, exclude_session="x")
            timings.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        timings.sort()
        p95 = timings[min(len(timings) - 1, round(0.95 * (len(timings) - 1)))]
        worst = max(worst, statistics.median(timings))
        print(
            f"{name:<20}{len(found):>8}{statistics.median(timings) * 1e3:>8.1f}ms"
            f"{p95 * 1e3:>8.1f}ms{timings[-1] * 1e3:>8.1f}ms"
            f"{statistics.median(cpu) * 1e3:>8.1f}ms",
            flush=True,
        )
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="10 runs of each query")
    parser.add_argument("--url", help="database to use (default: a temporary SQLite file)")
    parser.add_argument("--keep", type=Path, help="write the SQLite file here and keep it")
    parser.add_argument("--reuse", action="store_true", help="search --keep's file as it is")
    args = parser.parse_args()
    runs = 10 if args.quick else args.runs
    with tempfile.TemporaryDirectory() as directory:
        target = args.url or str(args.keep or Path(directory) / "bench.db")
        if args.reuse and (args.keep is None or not args.keep.exists()):
            parser.error("--reuse needs --keep PATH of a database an earlier run filled")
        anyio.run(bench, target, args.sessions, args.events, runs, args.reuse)


if __name__ == "__main__":
    main()
