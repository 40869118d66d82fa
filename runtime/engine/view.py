"""What the model is shown of a session, kept in step with its log (SPEC 6, 20).

A `SessionView` reads a session's log once, then only what was appended since: the
200th turn of a session reads what the log gained after the 199th, not the whole log
again. It keeps the conversation of the root runs after the newest summary, what the
newest compactions say, the newest turn and prompt, and the input tokens the endpoint
reported for the newest answer. `messages()` is what the next model call sends: the
summary of what compaction covered, the tool results it masked shown elided, and every
tool call left without a result closed (a crash, a cancelled turn), except the calls a
person is asked to approve. A server that restarts, or another server of the same
database, rebuilds the same view from the log.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Set

from runtime.engine.log import (
    AnswerEntry,
    CompactionEntry,
    DoneEntry,
    HandoffEntry,
    Logged,
    PromptEntry,
    SeedEntry,
    ToolResultEntry,
    TurnEntry,
    UserEntry,
    read,
)
from runtime.engine.transcript import (
    assistant_message,
    close_open_calls,
    masked_content,
    masked_tool_message,
    open_calls,
    seed_message,
    summary_message,
    tool_message,
    user_message,
)
from runtime.models.messages import AssistantMessage, Message, ToolResultMessage
from runtime.storage import Storage
from runtime.surface.prompt import SessionPrompt

MASK_OVER = 2_000
"""A compacted tool result longer than this many characters is shown elided."""
CHARS_PER_TOKEN = 4
"""How text is counted where no endpoint counted it: a rough, provider-neutral estimate,
used only for what was appended since the endpoint last reported its count."""
MESSAGE_TOKENS = 4
"""What a message costs besides its text (its role and framing)."""
KEPT_SESSIONS = 1024
"""How many sessions' views (and system prompts) a process keeps between their turns."""

Conversational = UserEntry | SeedEntry | HandoffEntry | AnswerEntry | ToolResultEntry


def estimate(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN + MESSAGE_TOKENS


def message_tokens(message: Message) -> int:
    """A message's estimated tokens, whatever its kind."""
    if isinstance(message, AssistantMessage):
        calls = sum(estimate(call.name + call.arguments) for call in message.tool_calls)
        return estimate(message.text) + calls
    if isinstance(message, ToolResultMessage):
        return estimate(message.content)
    return estimate(message.text)


class SessionView:
    """One session's view; `catch_up` before using it, `add` every entry appended after.

    Each item is shown and counted once, when it arrives (and again only when a compaction
    changes how it is shown), so a model call costs what was appended since the last one,
    not the whole view: the view's messages, its token estimate and its open calls are kept
    as the log grows, never rebuilt from it.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.seq = 0
        """The last log entry this view has seen."""
        self.items: list[Logged] = []
        """The root runs' conversation after the newest summary."""
        self.summary: CompactionEntry | None = None
        self.mask_through = 0
        self.last_turn: Logged | None = None
        self.turn_open = False
        self.prompt: PromptEntry | None = None
        self._root_runs: set[str] = set()
        self.spent_tokens = 0
        """Input plus output tokens of every model call the log records, specialists' too."""
        self.spent_usd = 0.0
        """What those calls cost, of the ones with a known price (SPEC 22)."""
        self._reported: tuple[int, int] | None = None
        """(seq, tokens): the input the endpoint counted for the newest answer, or what the
        newest compaction left."""
        self._shown: list[Message] = []
        """Each item as the model is shown it (`items`' order)."""
        self._costs: list[int] = []
        """Each item's estimated tokens as shown."""
        self._total = 0
        """The sum of `_costs`."""
        self._users: list[int] = []
        """The seq of each user message of `items`."""
        self._open: dict[str, str] = {}
        """Call id -> tool name of the calls of `items` without a result yet."""
        self.rendered = SessionPrompt()
        """The system prompt as this process last rendered it (empty until a turn restores
        `prompt` from the log or renders one)."""

    async def catch_up(self, storage: Storage) -> list[Logged]:
        """Read what the log gained since this view last saw it; those entries."""
        new = await read(storage, self.session_id, self.seq)
        for logged in new:
            self.add(logged)
        return new

    def add(self, logged: Logged) -> None:
        if logged.seq <= self.seq:
            return  # seen already (a turn's own entry read back by a later catch-up)
        self.seq = logged.seq
        entry = logged.entry
        if isinstance(entry, AnswerEntry | CompactionEntry):  # every run's and every summary's:
            # a session's budget counts them all
            self.spent_tokens += entry.usage.input_tokens + entry.usage.output_tokens
            self.spent_usd += entry.cost_usd or 0.0
        if isinstance(entry, TurnEntry):
            self._root_runs.add(logged.run_id)
            self.last_turn, self.turn_open = logged, True
        elif logged.run_id not in self._root_runs:
            return
        elif isinstance(entry, DoneEntry):
            if self.last_turn is not None and logged.run_id == self.last_turn.run_id:
                self.turn_open = False
        elif isinstance(entry, PromptEntry):
            self.prompt = entry
        elif isinstance(entry, CompactionEntry):
            self._compacted(logged.seq, entry)
        elif isinstance(entry, Conversational):
            self._append(logged)
            if isinstance(entry, AnswerEntry) and entry.usage.input_tokens:
                self._reported = (logged.seq, entry.usage.input_tokens)

    def _append(self, logged: Logged) -> None:
        cost = self.cost(logged)
        self.items.append(logged)
        self._shown.append(self._message(logged))
        self._costs.append(cost)
        self._total += cost
        entry = logged.entry
        if isinstance(entry, UserEntry):
            self._users.append(logged.seq)
        elif isinstance(entry, AnswerEntry):
            self._open.update((call.id, call.name) for call in entry.calls)
        elif isinstance(entry, ToolResultEntry):
            self._open.pop(entry.call_id, None)

    def _compacted(self, seq: int, entry: CompactionEntry) -> None:
        if entry.stage == "summary":
            self.summary = entry
            self._drop_through(entry.through)
        elif entry.through > self.mask_through:
            self._mask(self.mask_through, entry.through)
        self._reported = (seq, entry.after_tokens)

    def _drop_through(self, through: int) -> None:
        """Leave out the items a summary covers (once per summary: what is left is counted
        again, everything else is kept as it was)."""
        start = bisect_right([item.seq for item in self.items], through)
        del self.items[:start], self._shown[:start], self._costs[:start]
        self._total = sum(self._costs)
        self._users = [item.seq for item in self.items if isinstance(item.entry, UserEntry)]
        self._open = dict(open_calls(self._shown))

    def _mask(self, after: int, through: int) -> None:
        """Show elided the results a mask newly covers, those after `after` up to `through`."""
        self.mask_through = through
        for index, item in enumerate(self.items):
            if item.seq > through:
                break
            if item.seq > after and self.masks(item):
                cost = self.cost(item)
                self._total += cost - self._costs[index]
                self._costs[index] = cost
                self._shown[index] = self._message(item)

    @property
    def open_turn(self) -> Logged | None:
        """The newest turn when it has no `done`: its holder died, or it is running now."""
        return self.last_turn if self.turn_open else None

    def messages(self, pending: Set[str] = frozenset()) -> list[Message]:
        """The conversation as the next model call sends it (`pending`: calls awaiting a
        person's approval, left open)."""
        messages: list[Message] = []
        if self.summary is not None:
            messages.append(summary_message(self.summary.summary))
        messages += self._shown
        if self._open.keys() - pending:  # a crash or a cancel left a call without its result
            return close_open_calls(messages, pending)
        return messages

    def unanswered(self, pending: Set[str]) -> list[tuple[str, str]]:
        """(id, tool name) of the calls left without a result but those in `pending`."""
        return [(call, name) for call, name in self._open.items() if call not in pending]

    def _message(self, logged: Logged) -> Message:
        entry = logged.entry
        if isinstance(entry, AnswerEntry):
            return assistant_message(entry)
        if isinstance(entry, ToolResultEntry):
            if self.masks(logged):
                return masked_tool_message(entry)
            return tool_message(entry)
        if isinstance(entry, SeedEntry):
            return seed_message(entry)
        assert isinstance(entry, UserEntry | HandoffEntry)
        return user_message(entry.text)

    def masks(self, logged: Logged, through: int | None = None) -> bool:
        """Whether a tool result is shown elided (up to `through`, else the newest mask)."""
        entry = logged.entry
        limit = self.mask_through if through is None else through
        return (
            isinstance(entry, ToolResultEntry)
            and logged.seq <= limit
            and len(entry.content) > MASK_OVER
        )

    def tokens(self, base: int) -> int:
        """The input tokens of a call sending this view: what the endpoint counted for the
        newest answer plus an estimate of what came after it, or all of it estimated
        (`base`: the tokens of the system prompt and tool schemas) when none counted."""
        if self._reported is not None:
            since, counted = self._reported
            return counted + self._cost_since(since)
        summary = estimate(self.summary.summary) if self.summary is not None else 0
        return base + summary + self._total

    def _cost_since(self, since: int) -> int:
        """The estimated tokens of the items from `since` on: the newest few, read from the end."""
        cost = 0
        for index in range(len(self.items) - 1, -1, -1):
            if self.items[index].seq < since:
                break
            cost += self._costs[index]
        return cost

    def cost(self, logged: Logged, mask_through: int | None = None) -> int:
        """One item's estimated tokens as the view shows it."""
        entry = logged.entry
        if isinstance(entry, AnswerEntry):
            return estimate(entry.text) + sum(
                estimate(call.name + call.arguments) for call in entry.calls
            )
        if isinstance(entry, ToolResultEntry):
            if self.masks(logged, mask_through):
                return estimate(masked_content(entry))
            return estimate(entry.content)
        assert isinstance(entry, UserEntry | SeedEntry | HandoffEntry)
        return estimate(entry.text)

    def user_turns(self) -> list[int]:
        """The seq of each user message of the view, oldest first."""
        return list(self._users)


class SessionViews:
    """The views of the sessions this process ran lately (a view is rebuilt from the log
    when it was dropped, its prompt restored from the log's newest: only its cost
    changes), so a server's memory does not grow with every session it ever ran."""

    def __init__(self, keep: int | None = None) -> None:
        self._keep = KEPT_SESSIONS if keep is None else keep
        self._views: OrderedDict[str, SessionView] = OrderedDict()

    def get(self, session_id: str) -> SessionView:
        view = self._views.pop(session_id, None) or SessionView(session_id)
        self._views[session_id] = view
        while len(self._views) > self._keep:
            self._views.popitem(last=False)
        return view

    def drop(self, session_id: str) -> None:
        self._views.pop(session_id, None)
