"""`amodal chat` as a person runs it: replies streamed to stdout, everything else to stderr."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

import anyio

from runtime import events
from runtime.api import Runtime
from runtime.exceptions import AmodalError
from runtime.observe.tracing import tracing_from_environment
from runtime.repo.bundle import Bundle


def run_chat(
    bundle: Bundle,
    message: str | None,
    *,
    agent: str | None,
    context: Mapping[str, str],
    session_id: str | None,
    as_json: bool,
    claims: Mapping[str, str] | None = None,
) -> int:
    """One turn (or an interactive loop without a message); the process exit code. The
    caller is the operator, with `claims` when given (as `amodal inspect` takes them)."""
    asked = _Asked(agent, dict(context), dict(claims or {}))
    try:
        return anyio.run(_chat, bundle, message, asked, session_id, as_json)
    except AmodalError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


@dataclass(slots=True)
class _Asked:
    """What every turn of this chat asks for: the root (sticky once named), and who asks."""

    agent: str | None
    context: dict[str, str]
    claims: dict[str, str]


async def _chat(
    bundle: Bundle,
    message: str | None,
    asked: _Asked,
    session_id: str | None,
    as_json: bool,
) -> int:
    tracing = tracing_from_environment(os.environ)
    async with Runtime.open(bundle, observers=tracing) as runtime:
        if message is not None:
            ok, _ = await _turn(runtime, message, asked, session_id, as_json)
            return 0 if ok else 1
        failed = False
        while True:
            print("> ", end="", file=sys.stderr, flush=True)
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line or line.strip() in ("exit", "quit"):
                return 1 if failed else 0
            if line.strip().split(maxsplit=1)[0] == "/compact":
                await _compact(runtime, session_id, line.strip().removeprefix("/compact"))
            elif line.strip():
                ok, session_id = await _turn(runtime, line.strip(), asked, session_id, as_json)
                failed = failed or not ok
                asked.agent = None  # the root is sticky; name it again only to re-root


async def _compact(runtime: Runtime, session_id: str | None, focus: str) -> None:
    """`/compact [focus]`: the session's older turns summarised now (SPEC 20)."""
    if session_id is None:
        print("(nothing to compact yet: no session)", file=sys.stderr)
        return
    done = await runtime.compact(session_id, focus=focus.strip() or None, operator=True)
    if done is None:
        print("(nothing to compact: every turn is recent)", file=sys.stderr)
    else:
        print(
            f"(compacted: {done.covered} log entries summarised, about "
            f"{done.before_tokens:,} -> {done.after_tokens:,} input tokens)",
            file=sys.stderr,
        )


async def _turn(
    runtime: Runtime,
    message: str,
    asked: _Asked,
    session_id: str | None,
    as_json: bool,
) -> tuple[bool, str]:
    """One turn printed as it streams: (it ended without error, its session id)."""
    status = _Status(enabled=not as_json and sys.stderr.isatty())
    ok, root = True, ""
    async for event in runtime.stream(
        message,
        agent=asked.agent,
        context=asked.context,
        session_id=session_id,
        claims=asked.claims,
        operator=True,
    ):
        if as_json:
            print(json.dumps(event.to_json(), ensure_ascii=False), flush=True)
        else:
            _show(event, root, status)
        match event:
            case events.Session():
                root, session_id = event.run_id, event.session_id
            case events.Error():
                ok = False
            case events.Done(reason="error"):
                ok = False
    if not as_json:
        print(f"(session {session_id})", file=sys.stderr)
    return ok, session_id or ""


def _show(event: events.Event, root: str, status: _Status) -> None:
    match event:
        case events.TextDelta(run_id=run_id, text=text) if run_id == root:
            status.clear()
            sys.stdout.write(text)
            sys.stdout.flush()
        case events.ToolCall(name=name):
            status.show(f"running {name}...")
        case events.ToolResult():
            status.clear()
        case events.AgentChange(from_agent=before, to_agent=after):
            print(f"[{before} -> {after}]", file=sys.stderr)
        case events.Compaction(stage=stage, before_tokens=before, after_tokens=after):
            status.clear()
            what = "old tool results elided" if stage == "mask" else "older turns summarised"
            print(f"[context compacted: {what}, {before:,} -> {after:,} tokens]", file=sys.stderr)
        case events.Choice(question=question, options=options):
            print(f"\n{question}", file=sys.stderr)
            for index, option in enumerate(options, 1):
                print(f"  {index}. {option}", file=sys.stderr)
        case events.ConfirmationRequired(session_id=session, call_id=call_id, name=name):
            print(
                f"\n{name} needs a person's approval: with `amodal serve` running, "
                f"POST /sessions/{session}/confirmations/{call_id} "
                '{"approve": true} (or false)',
                file=sys.stderr,
            )
        case events.Error(message=text):
            status.clear()
            print(f"\nError: {text}", file=sys.stderr)
        case events.Done():
            status.clear()
            sys.stdout.write("\n")


class _Status:
    """A one-line status on stderr while tools run (only on a terminal)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\033[2K· {text}")
            sys.stderr.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[2K")
            sys.stderr.flush()
            self.shown = False
