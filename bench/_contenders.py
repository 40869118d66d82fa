"""The contenders of `bench.peers`: this runtime and the peers, doing the same work.

Each contender sets itself up against the scripted model servers (`urls`: one per
workload), then runs `turn()` (workload a: one user turn with three sequential
tool calls) and `delegation()` (workload b: a lead fans twelve tasks out to
twelve specialists) as idiomatically as its framework allows, and checks the
answer so a broken contender cannot look fast. Tracing and telemetry are off.
Peers are imported only by the contender that needs them.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from bench import _scenario as s


class BenchError(Exception):
    """A contender did not do the work it was asked (wrong answer, error event)."""


class Contender(Protocol):
    async def setup(self, urls: dict[str, str]) -> None: ...
    async def turn(self) -> None: ...
    async def delegation(self) -> None: ...
    async def aclose(self) -> None: ...


def _openai_client(url: str) -> Any:
    import openai

    return openai.AsyncOpenAI(base_url=url, api_key=s.API_KEY, max_retries=0)


# ---------------------------------------------------------------- this runtime


class Amodal:
    """`runtime.Runtime`, streaming (it always streams), over one of three stores.

    `sqlite`: a SQLite file in a temporary folder (production's default);
    `sqlite-memory`: SQLite on ':memory:', the same code with no file I/O;
    `memory`: `bench._memory_storage.MemoryStorage`, no database at all.
    `observers` are passed to `Runtime.open` (the OpenTelemetry contender's tracer).
    `provider="anthropic"`: workload (a) through `AnthropicModel` against the scripted
    Anthropic server (the same answers over Anthropic's Messages API).
    """

    def __init__(
        self, store: str, observers: Callable[[], list[Any]] = list, provider: str = "openai"
    ) -> None:
        self.store = store
        self.provider = provider
        self._observers = observers
        self._folder = tempfile.TemporaryDirectory(prefix="amodal-bench-peers-")
        self._stack = contextlib.AsyncExitStack()
        self._runtimes: dict[str, Any] = {}

    async def setup(self, urls: dict[str, str]) -> None:
        from runtime import OpenAIModel, Runtime, load_bundle

        bundle = load_bundle(s.write_repo(Path(self._folder.name) / "repo"))
        self.storage = await self._open_storage()
        observers = self._observers()
        for workload in ("tools", "delegation"):
            model: Any
            if workload == "tools" and self.provider == "anthropic":
                import anthropic

                from runtime import AnthropicModel

                client: Any = anthropic.AsyncAnthropic(
                    base_url=urls["tools-anthropic"], api_key=s.API_KEY, max_retries=0
                )
                model = AnthropicModel(client, s.MODEL)
            else:
                client = _openai_client(urls[workload])
                model = OpenAIModel(client, s.MODEL)
            self._runtimes[workload] = await self._stack.enter_async_context(
                Runtime.open(bundle, database=self.storage, model=model, observers=observers)
            )
            self._stack.push_async_callback(client.close)

    async def _open_storage(self) -> Any:
        from runtime.storage import open_storage

        if self.store == "sqlite":
            return await open_storage(Path(self._folder.name) / "amodal.db")
        if self.store == "sqlite-memory":
            return await open_storage(":memory:")
        from bench._memory_storage import MemoryStorage

        return MemoryStorage()

    async def _events(
        self, workload: str, message: str, agent: str | None, session_id: str | None = None
    ) -> list[Any]:
        from runtime import events

        runtime = self._runtimes[workload]
        streamed = [
            event
            async for event in runtime.stream(
                message, agent=agent, session_id=session_id, operator=True
            )
        ]
        done = streamed[-1]
        if not isinstance(done, events.Done) or done.reason != "model_stop":
            raise BenchError(f"amodal: the turn ended {streamed[-2:]!r}")
        return streamed

    async def session_turns(self, turns: int) -> list[float]:
        """CPU ms of each of `turns` turns of one session: what a long conversation costs."""
        session_id, cpu = None, []
        for _ in range(turns):
            start = time.process_time()
            streamed = await self._events("tools", s.PROMPT, None, session_id)
            session_id = streamed[0].session_id
            cpu.append((time.process_time() - start) * 1000)
        return cpu

    async def turn(self) -> None:
        from runtime import events

        streamed = await self._events("tools", s.PROMPT, None)
        results = [e for e in streamed if isinstance(e, events.ToolResult) and e.status == "ok"]
        if len(results) != s.TOOL_CALLS_PER_TURN:
            raise BenchError(f"amodal: {len(results)} tool results, expected 3")

    async def delegation(self) -> None:
        from runtime import events

        streamed = await self._events("delegation", s.DELEGATION_PROMPT, s.LEAD)
        ended = [e for e in streamed if isinstance(e, events.SubagentEnd) and e.status == "ok"]
        if len(ended) != len(s.SPECIALISTS):
            raise BenchError(f"amodal: {len(ended)} specialists ended ok, expected 12")

    async def aclose(self) -> None:
        await self._stack.aclose()
        await self.storage.close()
        self._folder.cleanup()


# ---------------------------------------------------------------- the floor


class RawOpenAI:
    """The `openai` client with a hand-written loop: the floor any framework on it can reach."""

    def __init__(self, streamed: bool, at_once: int) -> None:
        self.streamed = streamed
        self.at_once = at_once  # specialists in flight at once in `delegation()`

    async def setup(self, urls: dict[str, str]) -> None:
        self.client = _openai_client(urls["tools"])
        self.team = _openai_client(urls["delegation"])
        self.tools = [
            {
                "type": "function",
                "function": {
                    "name": s.TOOL_NAME,
                    "description": s.TOOL_DESCRIPTION,
                    "parameters": {
                        "type": "object",
                        "properties": {"query": {"type": "string"}},
                        "required": ["query"],
                    },
                },
            }
        ]

    async def _call(
        self, messages: list[dict[str, Any]], tools: Any = None, client: Any = None
    ) -> tuple[str, list[dict[str, Any]]]:
        create = (client or self.client).chat.completions.create
        tools = self.tools if tools is None else tools
        if not self.streamed:
            message = await create(model=s.MODEL, messages=messages, tools=tools)
            choice = message.choices[0].message
            calls = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in choice.tool_calls or ()
            ]  # fmt: skip
            return choice.content or "", calls
        text: list[str] = []
        parts: dict[int, dict[str, Any]] = {}
        stream = await create(
            model=s.MODEL,
            messages=messages,
            tools=tools,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    text.append(choice.delta.content)
                for fragment in choice.delta.tool_calls or ():
                    call = parts.setdefault(
                        fragment.index,
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    call["id"] = call["id"] or fragment.id or ""
                    if fragment.function is not None:
                        call["function"]["name"] += fragment.function.name or ""
                        call["function"]["arguments"] += fragment.function.arguments or ""
        return "".join(text), [parts[index] for index in sorted(parts)]

    async def turn(self) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": s.INSTRUCTIONS},
            {"role": "user", "content": s.PROMPT},
        ]
        while True:
            text, calls = await self._call(messages)
            if not calls:
                break
            messages.append({"role": "assistant", "content": text, "tool_calls": calls})
            for call in calls:
                arguments = json.loads(call["function"]["arguments"])
                result = s.lookup_result(arguments["query"])
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
                )
        if text != s.FINAL_TEXT:
            raise BenchError(f"raw openai: answered {text!r}")

    async def delegation(self) -> None:
        """The lead's call, the twelve specialists `at_once` at a time, the lead's answer."""
        import anyio

        tools = [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": "A specialist.",
                    "parameters": {
                        "type": "object",
                        "properties": {"task": {"type": "string"}},
                        "required": ["task"],
                    },
                },
            }
            for name in s.SPECIALISTS
        ]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": s.LEAD_INSTRUCTIONS},
            {"role": "user", "content": s.DELEGATION_PROMPT},
        ]
        _, calls = await self._call(messages, tools, self.team)
        answers: dict[str, str] = {}
        limiter = anyio.CapacityLimiter(self.at_once)

        async def specialist(call: dict[str, Any]) -> None:
            name = call["function"]["name"]
            task = json.loads(call["function"]["arguments"])["task"]
            async with limiter:
                answers[call["id"]], _ = await self._call(
                    [
                        {"role": "system", "content": s.specialist_instructions(name)},
                        {"role": "user", "content": task},
                    ],
                    [],
                    self.team,
                )

        async with anyio.create_task_group() as group:
            for call in calls:
                group.start_soon(specialist, call)
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        messages += [
            {"role": "tool", "tool_call_id": call["id"], "content": answers[call["id"]]}
            for call in calls
        ]
        text, _ = await self._call(messages, tools, self.team)
        if text != s.COMBINED_TEXT or len(answers) != len(s.SPECIALISTS):
            raise BenchError(f"raw openai: answered {text!r}")

    async def aclose(self) -> None:
        await self.client.close()
        await self.team.close()


# ---------------------------------------------------------------- openai-agents


class OpenAIAgents:
    """openai-agents: `Runner.run` or `Runner.run_streamed`; specialists with `as_tool`."""

    def __init__(self, streamed: bool) -> None:
        self.streamed = streamed
        self._clients: list[Any] = []

    async def setup(self, urls: dict[str, str]) -> None:
        from agents import (
            Agent,
            ModelSettings,
            OpenAIChatCompletionsModel,
            function_tool,
            set_tracing_disabled,
        )

        set_tracing_disabled(True)

        def model(workload: str) -> Any:
            client = _openai_client(urls[workload])
            self._clients.append(client)
            return OpenAIChatCompletionsModel(model=s.MODEL, openai_client=client)

        @function_tool(name_override=s.TOOL_NAME, description_override=s.TOOL_DESCRIPTION)
        async def lookup(query: str) -> dict[str, Any]:
            return s.lookup_result(query)

        self.agent = Agent(
            name="assistant", instructions=s.INSTRUCTIONS, tools=[lookup], model=model("tools")
        )
        team_model = model("delegation")
        specialists = [
            Agent(name=name, instructions=s.specialist_instructions(name), model=team_model)
            for name in s.SPECIALISTS
        ]
        self.lead = Agent(
            name=s.LEAD,
            instructions=s.LEAD_INSTRUCTIONS,
            model=team_model,
            tools=[
                specialist.as_tool(tool_name=specialist.name, tool_description="A specialist.")
                for specialist in specialists
            ],
            model_settings=ModelSettings(parallel_tool_calls=True),
        )

    async def _run(self, agent: Any, prompt: str) -> str:
        from agents import Runner

        if not self.streamed:
            return str((await Runner.run(agent, prompt)).final_output)
        result = Runner.run_streamed(agent, prompt)
        async for _event in result.stream_events():
            pass
        return str(result.final_output)

    async def turn(self) -> None:
        output = await self._run(self.agent, s.PROMPT)
        if output != s.FINAL_TEXT:
            raise BenchError(f"openai-agents: answered {output!r}")

    async def delegation(self) -> None:
        output = await self._run(self.lead, s.DELEGATION_PROMPT)
        if output != s.COMBINED_TEXT:
            raise BenchError(f"openai-agents: answered {output!r}")

    async def aclose(self) -> None:
        for client in self._clients:
            await client.close()


# ---------------------------------------------------------------- pydantic-ai


class PydanticAI:
    """pydantic-ai: `agent.run` or `agent.run_stream`; specialists run from a tool."""

    def __init__(self, streamed: bool) -> None:
        self.streamed = streamed
        self._clients: list[Any] = []

    async def setup(self, urls: dict[str, str]) -> None:
        from pydantic_ai import Agent, RunContext, Tool
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        def model(workload: str) -> Any:
            client = _openai_client(urls[workload])
            self._clients.append(client)
            return OpenAIChatModel(s.MODEL, provider=OpenAIProvider(openai_client=client))

        async def lookup(query: str) -> dict[str, Any]:
            return s.lookup_result(query)

        self.agent: Any = Agent(
            model("tools"),
            instructions=s.INSTRUCTIONS,
            tools=[Tool(lookup, name=s.TOOL_NAME, description=s.TOOL_DESCRIPTION)],
        )
        team_model = model("delegation")

        def delegate(name: str) -> Tool[None]:
            specialist: Any = Agent(team_model, instructions=s.specialist_instructions(name))

            async def run_specialist(ctx: RunContext[None], task: str) -> str:
                # The documented agent-delegation pattern: the child's usage counts in the parent's.
                return str((await specialist.run(task, usage=ctx.usage)).output)

            # With postponed annotations the name would be looked up in this module's globals,
            # where the lazily imported RunContext is not: give pydantic-ai the class itself.
            run_specialist.__annotations__["ctx"] = RunContext[None]
            return Tool(run_specialist, name=name, description="A specialist.")

        self.lead: Any = Agent(
            team_model,
            instructions=s.LEAD_INSTRUCTIONS,
            tools=[delegate(name) for name in s.SPECIALISTS],
        )

    async def _run(self, agent: Any, prompt: str) -> str:
        if not self.streamed:
            return str((await agent.run(prompt)).output)
        async with agent.run_stream(prompt) as result:
            async for _text in result.stream_text(delta=True):
                pass
            return str(await result.get_output())

    async def turn(self) -> None:
        output = await self._run(self.agent, s.PROMPT)
        if output != s.FINAL_TEXT:
            raise BenchError(f"pydantic-ai: answered {output!r}")

    async def delegation(self) -> None:
        output = await self._run(self.lead, s.DELEGATION_PROMPT)
        if output != s.COMBINED_TEXT:
            raise BenchError(f"pydantic-ai: answered {output!r}")

    async def aclose(self) -> None:
        for client in self._clients:
            await client.close()


# ---------------------------------------------------------------- the roster

# name -> (label in the table, framework, factory). Ours always streams. "floor" rows are
# the bare client, for reference.
CONTENDERS: dict[str, tuple[str, str, Callable[[], Contender]]] = {
    "amodal": ("amodal, SQLite file (stream)", "amodal", lambda: Amodal("sqlite")),
    "amodal-sqlite-memory": (
        "amodal, SQLite :memory: (stream)",
        "amodal",
        lambda: Amodal("sqlite-memory"),
    ),
    "amodal-memory": ("amodal, dict store (stream)", "amodal", lambda: Amodal("memory")),
    "amodal-anthropic": (
        "amodal, SQLite file, Anthropic API",
        "amodal",
        lambda: Amodal("sqlite", provider="anthropic"),
    ),
    "amodal-otel": (
        "amodal, SQLite file + OpenTelemetry",
        "amodal",
        lambda: Amodal("sqlite", observers=_tracing),
    ),
    "openai-agents": ("openai-agents Runner.run", "openai-agents", lambda: OpenAIAgents(False)),
    "openai-agents-stream": (
        "openai-agents Runner.run_streamed",
        "openai-agents",
        lambda: OpenAIAgents(True),
    ),
    "pydantic-ai": ("pydantic-ai agent.run", "pydantic-ai", lambda: PydanticAI(False)),
    "pydantic-ai-stream": ("pydantic-ai agent.run_stream", "pydantic-ai", lambda: PydanticAI(True)),
    # In (b) the non-streaming floor runs the peers' shape (all twelve at once), the streaming
    # one ours (five at once, as call_subagent allows).
    "openai-raw": ("floor: openai client, own loop", "floor", lambda: RawOpenAI(False, 12)),
    "openai-raw-stream": (
        "floor: openai client, own loop (stream)",
        "floor",
        lambda: RawOpenAI(True, 5),
    ),
}


def _tracing() -> list[Any]:
    """The OpenTelemetry observer as production runs it (a batch processor), exporting
    nowhere: what the spans cost this process, without a collector's network time."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from runtime.otel import OpenTelemetryObserver

    class Discard(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    return [OpenTelemetryObserver(provider, owns_provider=True)]


def make(name: str) -> Contender:
    return CONTENDERS[name][2]()


__all__ = [
    "CONTENDERS",
    "Amodal",
    "BenchError",
    "Contender",
    "OpenAIAgents",
    "PydanticAI",
    "RawOpenAI",
    "make",
]
