"""The scripted model servers of `bench.peers`, in a process of their own.

    python -m bench._model_server [--cpu 0] [--latency tools=0 --latency chat=0.1 ...]

Starts one `ScriptedModel` per workload (each with its latency and its
deterministic responder from `bench._scenario`), and a `ScriptedAnthropic` answering
workload (a) the same way, prints one JSON line
`{"tools": URL, "delegation": URL, "chat": URL, "tools-anthropic": URL}` and serves
until its standard input closes (the benchmark exited), so it never outlives the run.

Own process, own CPU: the server's work (JSON parsing, thread switches) must not
share a core or the GIL with the client under test (notes/benchmarking.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from bench._scenario import RESPONDERS
from runtime.testing import RecordedRequest, ScriptedAnthropic, ScriptedModel, ScriptedServer, Step
from runtime.testing._server import _ScriptedHTTPServer

DEFAULT_LATENCY = {"tools": 0.0, "delegation": 0.2, "chat": 0.1, "long": 0.0}
_KEEP_REQUESTS = 200


def _forgetful(
    model: ScriptedServer, answer: Callable[[RecordedRequest], Step]
) -> Callable[[RecordedRequest], Step]:
    """The responder, dropping old recorded requests: a run sends tens of thousands, and a
    growing heap would slow the server (longer GC pauses) as the run goes on."""

    def respond(request: RecordedRequest) -> Step:
        with model._lock:  # the ScriptedModel has no public way to forget; a test never needs one
            if len(model._requests) > _KEEP_REQUESTS:
                model._requests.clear()
        return answer(request)

    return respond


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._model_server")
    parser.add_argument("--cpu", type=int, help="pin the process to this CPU")
    parser.add_argument(
        "--latency", action="append", default=[], metavar="NAME=SECONDS", help="a server's latency"
    )
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    latency = dict(DEFAULT_LATENCY)
    for item in args.latency:
        name, _, seconds = item.partition("=")
        if name not in RESPONDERS:
            parser.error(f"--latency {item}: unknown server {name!r}")
        latency[name] = float(seconds)
    # socketserver listens with a backlog of 5: a burst of new connections (workload c opens
    # one per concurrent turn) overflows it, and each dropped SYN costs its client a 1 s
    # retransmission. Tests never open that many at once; the benchmark does.
    _ScriptedHTTPServer.request_queue_size = 1024
    models: dict[str, ScriptedServer] = {}
    for name in RESPONDERS:
        models[name] = ScriptedModel(latency[name]).start()
    models["tools-anthropic"] = ScriptedAnthropic(latency["tools"]).start()
    for name, model in models.items():
        model.respond(_forgetful(model, RESPONDERS[name.removesuffix("-anthropic")]))
    print(json.dumps({name: model.base_url for name, model in models.items()}), flush=True)
    try:
        sys.stdin.read()  # until the benchmark closes our stdin (or dies)
    finally:
        for model in models.values():
            model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
