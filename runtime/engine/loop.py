"""One run of the turn loop: call the model, run the tools it asks for, repeat (SPEC 6.1).

`run_loop` is an async generator of events that ends with one `RunOutcome`
(how the run ended). Everything that must survive (the assistant's messages,
tool calls and results) goes through the Recorder as it happens, before the
next step, so a crash loses at most the event being written and the transcript
rebuilt from storage is always valid for the next turn.

The loop knows nothing of sessions, storage or delegation: `runtime.engine.runs`
prepares a run and keeps its record, `runtime.tools.delegation` is one of its tools.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from runtime.engine.budget import (
    Budget,
    BudgetExhaustedError,
    Charged,
    Exhausted,
    Ticket,
    spent_message,
    with_spend_notice,
)
from runtime.engine.log import (
    AnswerEntry,
    ChoiceEntry,
    ConfirmationEntry,
    LogEntry,
    Recorder,
    TextEntry,
    ToolResultEntry,
    shown_arguments,
)
from runtime.engine.transcript import assistant_message, tool_message
from runtime.engine.view import estimate, message_tokens
from runtime.events import DoneReason, Event, ToolStatus, Usage
from runtime.exceptions import ContextOverflowError, ModelError, ToolError
from runtime.models import Model, ModelReply, ModelSettings, ToolCallRequest
from runtime.models.catalog import ModelCard
from runtime.models.messages import Message, SystemMessage, ToolSpec, UserMessage
from runtime.observe.hooks import (
    NO_OBSERVERS,
    ModelCallEnded,
    ModelCallStarted,
    Observers,
    ToolCallEnded,
    ToolCallStarted,
)
from runtime.repo.registry import ASK_CHOICE, STOP_EXECUTION
from runtime.storage import UsageRecord
from runtime.tools import Tool, ToolContext, encode_result, with_budget, with_notice

MAX_PARALLEL_TOOLS = 8
DEFAULT_REPEAT_LIMIT = 8
REPEAT_NOTICE_FROM = 5
"""From this identical call on, the result says the call repeats (SPEC 20's loop guard)."""
TEXT_FLUSH_SECONDS = 0.02
OUT_OF_BUDGET = (
    "You have used every tool call of this run. Do not call tools: answer now with what "
    "you have, and say what is left undone."
)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """Everything one run needs, fixed when it starts."""

    session_id: str
    run_id: str
    agent: str
    system_prompt: str
    context_prompt: str | None
    tools: Mapping[str, Tool]
    max_tool_calls: int
    model: Model
    card: ModelCard
    """What is known of the model: its window (SPEC 20)."""
    cache_key: str
    tool_context: ToolContext
    settings: ModelSettings = field(default_factory=ModelSettings)
    interactive: bool = True  # False for specialists: no confirmations, no ask_choice
    result_limit: int = 20_000
    repeat_limit: int = DEFAULT_REPEAT_LIMIT
    """The identical call (same tool, same arguments) this many times in one run is refused."""
    nested: EventSink | None = None  # the root run streams its specialists' events from here
    observers: Observers = NO_OBSERVERS
    budget: Budget | None = None
    """The turn's spend, shared by every run of its tree (SPEC 22), or a specialist's own
    budget over it; None: unbounded, and no usage recorded."""
    root: bool = False
    """The run that roots the turn: told of its budget, and answers when it is spent."""


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A confirm-required call waiting for a person; stored durably to resume the run."""

    call: ToolCallRequest
    used: int


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a run ended: the last item `run_loop` yields."""

    reason: DoneReason
    text: str
    pending: PendingCall | None = None


@dataclass(frozen=True, slots=True)
class Resume:
    """Continue a run paused on a confirmation: run the call (approved) or deny it."""

    pending: PendingCall
    approved: bool


@dataclass(frozen=True, slots=True)
class Continuation:
    """Continue a run whose process died (SPEC 23): `calls` were asked for by its last
    committed answer and have no result; `used` tool calls were spent before."""

    calls: tuple[ToolCallRequest, ...]
    used: int


class Conversation(Protocol):
    """What a run's model is shown, as the run goes."""

    def messages(self) -> list[Message]:
        """The conversation the next call sends (after the system prompt)."""
        ...

    def add(self, entry: AnswerEntry | ToolResultEntry) -> None:
        """An answer or a result the run just recorded."""
        ...

    async def fit(self, card: ModelCard, model: str, base: int) -> list[Event]:
        """Make the next call fit `card`'s window (`base`: the tokens of the system prompt
        and tool schemas), or raise `ContextOverflowError`; the events of what it did."""
        ...

    def tokens(self, base: int) -> int:
        """The input tokens of the next call (`base`: its prompts' and tool schemas')."""
        ...


class RunTranscript:
    """A specialist's conversation: its task, then what its run adds. Never compacted: one
    that outgrows its window fails as a specialist with `context_overflow`."""

    def __init__(self, first: Message) -> None:
        self._messages = [first]
        self._reported: tuple[int, int] | None = None  # (messages counted, their tokens)

    def messages(self) -> list[Message]:
        return self._messages

    def add(self, entry: AnswerEntry | ToolResultEntry) -> None:
        if isinstance(entry, AnswerEntry):
            if entry.usage.input_tokens:
                self._reported = (len(self._messages), entry.usage.input_tokens)
            self._messages.append(assistant_message(entry))
        else:
            self._messages.append(tool_message(entry))

    async def fit(self, card: ModelCard, model: str, base: int) -> list[Event]:
        tokens = self.tokens(base)
        if tokens > card.input_budget:
            raise ContextOverflowError(model, card.context_window, tokens)
        return []

    def tokens(self, base: int) -> int:
        counted, tokens = self._reported or (0, base)
        return tokens + sum(message_tokens(m) for m in self._messages[counted:])


async def run_loop(
    spec: RunSpec,
    conversation: Conversation,
    recorder: Recorder,
    *,
    resume: Resume | None = None,
    continuation: Continuation | None = None,
) -> AsyncGenerator[Event | RunOutcome]:
    """Run the loop over `conversation`; the events, then one `RunOutcome`. A model failure
    raises `ModelError` after the events so far; a call that cannot fit the model's window,
    `ContextOverflowError`."""
    base = _base_tokens(spec)
    used = 0
    repeats = _Repeats(spec.repeat_limit)
    if continuation is not None:
        used = continuation.used
        done = await _continued_calls(spec, continuation.calls)
        used += sum(1 for _, outcome in done if outcome is not _UNFINISHED)
        async for event in _results(spec, conversation, recorder, done, used):
            yield event
    if resume is not None:
        used = resume.pending.used
        result = await _resumed_result(spec, resume)
        used += 1 if resume.approved else 0
        async for event in _results(
            spec, conversation, recorder, [(resume.pending.call, result)], used
        ):
            yield event
    while True:
        out_of_budget = used >= spec.max_tool_calls
        for event in await conversation.fit(spec.card, spec.model.name, base):
            yield event
        closing = OUT_OF_BUDGET if out_of_budget else None
        ticket: Ticket | None = None
        spent = False
        if spec.budget is not None:
            admitted = await _admit(spec, conversation, base, closing is not None)
            if isinstance(admitted, Exhausted):
                if not spec.root:
                    raise BudgetExhaustedError(admitted.message())
                closing, spent = spent_message(admitted), True
                admitted = await _admit(spec, conversation, base, True)
                if isinstance(admitted, Exhausted):  # not even a last answer fits
                    yield RunOutcome("budget_exhausted", "")
                    return
            ticket = admitted
        reply: ModelReply | None = None
        charged: list[Charged] = []  # the observers' report of the call reads it
        text = _TextBuffer()
        try:
            async for item in _model_call(spec, conversation.messages(), closing, charged):
                if isinstance(item, ModelReply):
                    reply = item
                    if spec.budget is not None and ticket is not None:
                        charged.append(
                            spec.budget.charge(ticket, reply, spec.run_id, spec.agent, spec.card)
                        )
                        ticket = None
                elif text.add(item):
                    for event in await _record(spec, recorder, TextEntry(text.take())):
                        yield event
        except BaseException:
            if ticket is not None and spec.budget is not None:
                spec.budget.release(ticket)
            raise
        assert reply is not None  # a model always ends with a reply or raises
        rest = (TextEntry(text.take()),) if text else ()  # written with the answer
        usage, cost, estimated, record = reply.usage, None, False, None
        if charged:
            took = charged[0]
            usage, cost, estimated, record = took.usage, took.cost_usd, took.estimated, took.record
        calls = [] if closing is not None else list(reply.tool_calls)
        answer = AnswerEntry(
            reply.text, tuple(calls), reply.model, usage, reply.fallback_from, cost, estimated
        )
        for event in await _record(spec, recorder, *rest, answer, usage=record):
            yield event  # the text's rest, the model's usage, then one tool_call event a call
        conversation.add(answer)
        if spent:
            yield RunOutcome("budget_exhausted", reply.text)
            return
        if out_of_budget or not calls:
            yield RunOutcome("max_tool_calls" if out_of_budget else "model_stop", reply.text)
            return
        if spec.nested is None or not any(_nests(spec, call) for call in calls):
            step = await _run_calls(spec, calls, used, repeats)
        else:  # specialists run: stream their events while they work
            box: list[_Step] = []
            running = _run_calls(spec, calls, used, repeats)
            async for event in _streaming_nested(spec.nested, running, box):
                yield event
            step = box[0]
        used = step.used
        async for event in _results(spec, conversation, recorder, step.done, used):
            yield event
        if step.choice is not None:
            asked = ChoiceEntry(step.choice["question"], tuple(step.choice["options"]))
            for event in await _record(spec, recorder, asked):
                yield event
        if step.pending is not None:
            call = step.pending.call
            waiting = ConfirmationEntry(call.id, call.name, shown_arguments(call.arguments))
            for event in await _record(spec, recorder, waiting):
                yield event
        if step.reason is not None:
            yield RunOutcome(step.reason, reply.text, step.pending)
            return


class _TextBuffer:
    """A model's text deltas, written to the log in pieces: at most one piece every
    `TEXT_FLUSH_SECONDS`, counted from the call's start (the rest when the answer ends).
    A real model's first token comes later than that, so it goes out at once, and so does
    every delta of a slow model; an answer that streams in a burst costs one write."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._flushed = time.monotonic()

    def __bool__(self) -> bool:
        return bool(self._parts)

    def add(self, delta: str) -> bool:
        """Keep `delta`; True when the buffer is due to be written."""
        self._parts.append(delta)
        return time.monotonic() - self._flushed >= TEXT_FLUSH_SECONDS

    def take(self) -> str:
        self._flushed = time.monotonic()
        text, self._parts = "".join(self._parts), []
        return text


async def _record(
    spec: RunSpec, recorder: Recorder, *entries: LogEntry, usage: UsageRecord | None = None
) -> list[Event]:
    """Write entries of this run in one step (the last an answer with its call's `usage`);
    the events they stand for on the wire, with their ids."""
    return await recorder.record(*entries, run_id=spec.run_id, agent=spec.agent, usage=usage)


async def _admit(
    spec: RunSpec, conversation: Conversation, base: int, final: bool
) -> Ticket | Exhausted:
    """Ask the turn's budget for the next call (`final`: without tools)."""
    assert spec.budget is not None
    prompts = _prompt_tokens(spec)
    tokens = conversation.tokens(prompts if final else base)
    keep = None
    if spec.root and spec.budget.active:  # room for the root's last answer, kept
        keep = tokens if final else conversation.tokens(prompts)
    return await spec.budget.admit(
        spec.card, spec.model.name, tokens, spec.settings.max_tokens, final=final, keep=keep
    )


def _model_call(
    spec: RunSpec, conversation: list[Message], closing: str | None, charged: list[Charged]
) -> AsyncIterator[str | ModelReply]:
    """One model call; reported to the observers when there are any (without them, the
    model's own stream: no layer a turn's every delta would pass through). `closing`: the
    call is the run's last, without tools, and this tells the model why."""
    messages = _messages(spec, conversation, closing)
    tools = (
        None if closing is not None or not spec.tools else [t.spec() for t in spec.tools.values()]
    )
    stream = spec.model.stream(messages, tools, spec.settings, cache_key=spec.cache_key)
    if not spec.observers:
        return stream
    return _observed_model_call(spec, stream, messages, tools, charged)


async def _observed_model_call(
    spec: RunSpec,
    stream: AsyncIterator[str | ModelReply],
    messages: list[Message],
    tools: list[ToolSpec] | None,
    charged: list[Charged],
) -> AsyncIterator[str | ModelReply]:
    started = ModelCallStarted(
        spec.session_id,
        spec.run_id,
        spec.agent,
        f"model_{uuid.uuid4().hex[:12]}",
        spec.model.name,
        messages,
        tuple(spec.tools) if tools else (),
        getattr(spec.model, "provider", None),
    )
    spec.observers.notify("model_call_started", started)
    clock = time.monotonic()
    ended = ModelCallEnded(0.0, error="cancelled")
    try:
        async for item in stream:
            if isinstance(item, ModelReply):
                ended = ModelCallEnded(
                    0.0,
                    item.model,
                    item.usage,
                    item.finish_reason,
                    item.text,
                    len(item.tool_calls),
                    fallback_from=item.fallback_from,
                    provider=item.provider,
                )
                yield item
                if charged:  # what the call took as recorded: estimated when unreported
                    took = charged[0]
                    ended = dataclasses.replace(ended, usage=took.usage, cost_usd=took.cost_usd)
                continue
            yield item
    except ModelError as error:
        ended = ModelCallEnded(0.0, error=str(error))
        raise
    finally:
        elapsed = time.monotonic() - clock
        spec.observers.notify(
            "model_call_ended", started, dataclasses.replace(ended, duration_s=elapsed)
        )


class EventSink:
    """Where specialists send their events so the root run can stream them live."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[Event | None](math.inf)

    def publish(self, event: Event) -> None:
        self._send.send_nowait(event)  # the buffer is unbounded: this never waits

    async def drain(self) -> AsyncIterator[Event]:
        """Events until the producer marks the end with `close_phase`."""
        async for event in self._receive:
            if event is None:
                return
            yield event

    def close_phase(self) -> None:
        self._send.send_nowait(None)

    def close(self) -> None:
        """Release both ends (the turn is over)."""
        self._send.close()
        self._receive.close()


async def _streaming_nested(
    sink: EventSink, work: Awaitable[_Step], box: list[_Step]
) -> AsyncIterator[Event]:
    """Run the calls while streaming the events specialists emit meanwhile."""

    async def produce() -> None:
        try:
            box.append(await work)
        finally:
            sink.close_phase()

    async with anyio.create_task_group() as group:
        group.start_soon(produce)
        async for event in sink.drain():
            yield event


class _Repeats:
    """How often each exact call (tool and arguments) came in this run: a model that asks
    for the same thing again and again is told, then refused (SPEC 20's loop guard)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: dict[tuple[str, str], int] = {}

    def count(self, call: ToolCallRequest) -> int:
        """This call's number among its identical calls (1 the first time)."""
        key = (call.name, _canonical(call.arguments))
        self._seen[key] = self._seen.get(key, 0) + 1
        return self._seen[key]

    def notice(self, times: int) -> str:
        left = self.limit - times - 1
        return (
            f"you have made this exact call {times} times in this run; the result will not "
            f"change. Use what you have, or change the arguments ({left} more allowed)"
        )

    def refusal(self, call: ToolCallRequest, times: int) -> str:
        return (
            f"repeated_call: {call.name} was called with these exact arguments {times} times "
            "in this run and is not run again; answer with what you have, or call it "
            "with different arguments"
        )


def _canonical(arguments: str) -> str:
    parsed = _parsed(arguments)
    return arguments if parsed is _MALFORMED else json.dumps(parsed, sort_keys=True)


@dataclass
class _Step:
    """What one response's calls came to."""

    done: list[tuple[ToolCallRequest, _Outcome]]  # calls with a result, in call order
    used: int
    reason: DoneReason | None = None
    choice: dict[str, Any] | None = None
    pending: PendingCall | None = None


async def _run_calls(
    spec: RunSpec, calls: list[ToolCallRequest], used: int, repeats: _Repeats
) -> _Step:
    """Run one response's calls. `stop_execution` ends the run before anything else runs;
    `ask_choice` and a confirm-required call end the turn after the other calls ran."""
    step = _Step([], used)
    if any(call.name == STOP_EXECUTION and call.name in spec.tools for call in calls):
        step.reason = "stop_execution"
        step.done = [
            (
                call,
                _ok({"stopped": True})
                if call.name == STOP_EXECUTION
                else _error("not run: the run stopped"),
            )
            for call in calls
        ]
        return step
    results: dict[int, _Outcome] = {}
    notices: dict[int, str] = {}
    runnable: list[int] = []
    for index, call in enumerate(calls):
        tool = spec.tools.get(call.name)
        confirm = tool is not None and tool.needs_confirmation(_parsed(call.arguments))
        if tool is not None and (call.name == ASK_CHOICE or confirm) and not spec.interactive:
            results[index] = _denied(
                "a specialist runs without a person to ask or to "
                "approve; decide with the tools you have",
            )
        elif call.name == ASK_CHOICE and tool is not None and step.reason is None:
            arguments = _parsed(call.arguments)
            problems = tool.argument_errors(arguments)
            if problems:
                results[index] = _error("invalid arguments: " + "; ".join(problems))
            else:
                results[index] = _ok(
                    {"asked": True, "note": "the person's answer is the next user message"}
                )
                step.choice, step.reason = arguments, "awaiting_choice"
        elif tool is not None and confirm and step.reason is None:
            problem = _argument_problem(tool, call)
            if problem is not None:  # never ask a person to approve a call that cannot run
                results[index] = _error(problem)
            else:
                step.pending = PendingCall(call, used)  # its result comes when a person decides
                step.reason = "awaiting_confirmation"
        elif tool is not None and (confirm or call.name == ASK_CHOICE):
            results[index] = _error("not run: the turn is waiting for the person")
        elif (times := repeats.count(call)) >= repeats.limit:
            results[index] = _error(repeats.refusal(call, times))
        else:
            runnable.append(index)
            if times >= min(REPEAT_NOTICE_FROM, repeats.limit - 1):
                notices[index] = repeats.notice(times)
    budget_left = spec.max_tool_calls - used
    for index in runnable[budget_left:]:
        results[index] = _error("not run: the tool-call budget is spent")
    executed = runnable[:budget_left]
    for index, result in zip(
        executed, await _execute(spec, [calls[i] for i in executed]), strict=True
    ):
        notice = notices.get(index)
        results[index] = result if notice is None else dataclasses.replace(result, notice=notice)
    step.used = used + len(executed)
    if step.pending is not None:
        step.pending = PendingCall(step.pending.call, step.used)
    step.done = [(calls[index], results[index]) for index in sorted(results)]
    return step


async def _execute(spec: RunSpec, calls: list[ToolCallRequest]) -> list[_Outcome]:
    """Run calls concurrently (bounded); results come back in call order."""
    if len(calls) == 1:  # most responses make one call: no task to start for it
        return [await _observed_call(spec, calls[0])]
    results: list[_Outcome | None] = [None for _ in calls]
    limiter = anyio.CapacityLimiter(MAX_PARALLEL_TOOLS)

    async def one(index: int, call: ToolCallRequest) -> None:
        async with limiter:
            results[index] = await _observed_call(spec, call)

    async with anyio.create_task_group() as group:
        for index, call in enumerate(calls):
            group.start_soon(one, index, call)
    return [result for result in results if result is not None]


async def _observed_call(spec: RunSpec, call: ToolCallRequest) -> _Outcome:
    if not spec.observers:
        return await _call(spec, call)
    started = ToolCallStarted(
        spec.session_id,
        spec.run_id,
        spec.agent,
        call.id,
        call.name,
        shown_arguments(call.arguments),
    )
    spec.observers.notify("tool_call_started", started)
    clock = time.monotonic()
    ended = ToolCallEnded("error", 0.0, error="cancelled")
    try:
        result = await _call(spec, call)
        ended = ToolCallEnded(result.status, 0.0, result.result, result.error)
        return result
    finally:
        elapsed = time.monotonic() - clock
        spec.observers.notify(
            "tool_call_ended", started, dataclasses.replace(ended, duration_s=elapsed)
        )


async def _call(spec: RunSpec, call: ToolCallRequest) -> _Outcome:
    """One tool call: never raises; every failure is a result the model reads."""
    started = time.monotonic()
    tool = spec.tools.get(call.name)
    if tool is None:
        return _error(
            f"unknown tool {call.name!r}; available tools: " + ", ".join(sorted(spec.tools))
        )
    problem = _argument_problem(tool, call)
    if problem is not None:
        return _error(problem)
    arguments = _parsed(call.arguments)
    context = dataclasses.replace(spec.tool_context, call_id=call.id)
    try:
        with anyio.fail_after(tool.timeout):
            value = await tool.handler(arguments, context)
    except ToolError as error:
        return _status("error", error=str(error), started=started)
    except TimeoutError as error:
        return _status(
            "timeout",
            error=str(error) or f"the tool did not finish within {tool.timeout:g} s",
            started=started,
        )
    # A tool is user code: its failure is the model's to handle. SystemExit too: a handler
    # calling sys.exit() must not end a server.
    except (Exception, SystemExit) as error:
        return _status("error", error=f"{type(error).__name__}: {error}", started=started)
    return _status("ok", result=value, started=started)


def _nests(spec: RunSpec, call: ToolCallRequest) -> bool:
    tool = spec.tools.get(call.name)
    return tool is not None and tool.nests


def _argument_problem(tool: Tool, call: ToolCallRequest) -> str | None:
    """Why the call's arguments cannot be passed to the tool, listing what is valid."""
    arguments = _parsed(call.arguments)
    if arguments is _MALFORMED:
        return "the arguments are not valid JSON; send a JSON object matching the tool's parameters"
    problems = tool.argument_errors(arguments)
    if problems:
        return (
            "invalid arguments: "
            + "; ".join(problems)
            + f". Parameters: {json.dumps(dict(tool.parameters))}"
        )
    return None


async def _continued_calls(
    spec: RunSpec, calls: tuple[ToolCallRequest, ...]
) -> list[tuple[ToolCallRequest, _Outcome]]:
    """The calls a dead process left without a result: run again when that is safe (the
    tool is idempotent for these arguments and needed no approval), else an `interrupted`
    result, since the call may or may not have taken effect. A confirmed call is never
    run twice."""
    again = [
        call
        for call in calls
        if (tool := spec.tools.get(call.name)) is not None
        and tool.reruns_safely(_parsed(call.arguments))
    ]
    ran = dict(zip((call.id for call in again), await _execute(spec, again), strict=True))
    return [(call, ran.get(call.id, _UNFINISHED)) for call in calls]


async def _resumed_result(spec: RunSpec, resume: Resume) -> _Outcome:
    call = resume.pending.call
    if not resume.approved:
        return _denied("the person denied this call")
    return await _observed_call(spec, call)


async def _results(
    spec: RunSpec,
    conversation: Conversation,
    recorder: Recorder,
    done: list[tuple[ToolCallRequest, _Outcome]],
    used: int,
) -> AsyncIterator[Event]:
    """Append each result to the transcript and the log, then stream it."""
    for call, outcome in done:
        if outcome is _UNFINISHED:
            unfinished = ToolResultEntry.unfinished(call.id, call.name)
            for event in await _record(spec, recorder, unfinished):
                yield event
            conversation.add(unfinished)
            continue
        payload = outcome.result if outcome.status == "ok" else {"error": outcome.error}
        if outcome.notice is not None:
            payload = with_notice(payload, outcome.notice)
        payload = with_budget(payload, used, spec.max_tool_calls)
        if spec.root and spec.budget is not None:
            spend = spec.budget.notice()
            if spend is not None:
                payload = with_spend_notice(payload, spend)
        content = encode_result(payload, spec.result_limit)
        entry = ToolResultEntry(
            call.id,
            call.name,
            outcome.status,
            content,
            outcome.duration_ms,
            outcome.result,
            outcome.error,
        )
        for event in await _record(spec, recorder, entry):
            yield event
        conversation.add(entry)


def _base_tokens(spec: RunSpec) -> int:
    """What every call of the run sends besides the conversation: its prompts and tools."""
    tools = [tool.spec() for tool in spec.tools.values()]
    schemas = json.dumps([[t.name, t.description, dict(t.parameters)] for t in tools])
    return _prompt_tokens(spec) + estimate(schemas)


def _prompt_tokens(spec: RunSpec) -> int:
    """What a call without tools sends besides the conversation: its prompts."""
    return estimate(spec.system_prompt) + estimate(spec.context_prompt or "")


def _messages(spec: RunSpec, conversation: list[Message], closing: str | None) -> list[Message]:
    """System prompt, conversation, and the per-turn context just before the newest user
    message (the conversation before it stays a stable prefix for a provider's prompt cache)."""
    messages: list[Message] = [SystemMessage(spec.system_prompt), *conversation]
    if spec.context_prompt:
        newest_user = next(  # from the end: a long session's view is not walked per call
            (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], UserMessage)),
            len(messages),
        )
        messages.insert(newest_user, SystemMessage(spec.context_prompt))
    if closing is not None:
        messages.append(SystemMessage(closing))
    return messages


_MALFORMED: Any = object()


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return _MALFORMED


@dataclass(frozen=True, slots=True)
class _Outcome:
    """How one tool call ended: `result` when `ok`, else `error`."""

    status: ToolStatus
    duration_ms: int
    result: Any = None
    error: str | None = None
    notice: str | None = None
    """What the model is told besides the result (a call that repeats)."""


def _status(
    status: ToolStatus, *, started: float, result: Any = None, error: str | None = None
) -> _Outcome:
    duration_ms = round((time.monotonic() - started) * 1000)
    return _Outcome(status, duration_ms, result if status == "ok" else None, error)


def _ok(result: Any) -> _Outcome:
    return _Outcome("ok", 0, result)


def _error(message: str) -> _Outcome:
    return _Outcome("error", 0, error=message)


def _denied(message: str) -> _Outcome:
    return _Outcome("denied", 0, error=message)


_UNFINISHED = _Outcome("error", 0, error="interrupted")
"""A call a crash interrupted that is not run again (`ToolResultEntry.unfinished`)."""


__all__ = [
    "Continuation",
    "EventSink",
    "PendingCall",
    "Resume",
    "RunOutcome",
    "RunSpec",
    "Usage",
    "run_loop",
]
