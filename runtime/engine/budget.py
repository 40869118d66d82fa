"""Bounded spend over a turn's whole delegation tree (SPEC 22).

One `TurnBudget` per turn, shared by the root run and every specialist through the
turn's `TurnScope`. Before every model call, a run asks `admit` with the call's input
tokens; the budget adds an estimate of the answer (the call's `maxTokens`, else the
model's `maxOutputTokens`, else 1,000 tokens), prices it, and compares what the turn,
the session and the owner's UTC day spent so far, plus the estimates of the calls still
in flight anywhere in the tree, with each limit. A call that would cross one is not
made. When the call completes, `charge` records its usage in the database (before the
answer is logged: a crash after the call never loses what it cost) and replaces its
estimate with what it really took.

The daily limit is counted in the database, so it holds across sessions, processes and
replicas. Concurrent turns of one owner each read what the others committed; each may
overshoot by at most the calls it has in flight (one estimate per call).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio

from runtime.events import Usage
from runtime.exceptions import AmodalError, ModelConfigError
from runtime.models import ModelReply
from runtime.models.catalog import DEFAULT_OUTPUT_TOKENS, ModelCard
from runtime.repo.bundle import Bundle
from runtime.repo.config import cost_limit, unpriced_message
from runtime.repo.formats import BudgetLimits, RepoConfig
from runtime.repo.model_bindings import model_card
from runtime.storage import Spend, UsageKind, UsageRecord, UsageStorage, utc_now

NOTICE_FROM = 0.8
"""From this share of a limit, the root model is told to finish (`_budget`)."""


class BudgetExhaustedError(AmodalError):
    """A specialist's next model call would cross a limit: it fails as a specialist."""


@dataclass(frozen=True, slots=True)
class Exhausted:
    """The limit the next call would cross: its name (as amodal.json spells it), its value,
    and what was used when the call was refused (the estimate not included)."""

    limit: str
    value: float
    used: float
    agent: str | None = None
    """The specialist whose own limit it is (`SubtreeBudget`); None: the turn's."""

    def as_json(self) -> dict[str, Any]:
        return {"limit": self.limit, "value": self.value, "used": round(self.used, 6)}

    def message(self) -> str:
        whose = f"{self.agent}'s own {self.limit}" if self.agent else self.limit
        return (
            f"budget_exhausted: the next model call would cross {whose} "
            f"({_shown(self.used)} of {_shown(self.value)} used)"
        )


@dataclass(frozen=True, slots=True)
class Ticket:
    """An admitted call's estimate, held against the limits until `charge` settles it."""

    tokens: int
    cost_usd: float
    input_tokens: int


@dataclass(frozen=True, slots=True)
class Charged:
    """What a call took: its usage (estimated when the provider reported none) and cost,
    and the usage record the call's answer is appended with (one transaction: a crash
    never keeps an answer without what it cost, nor a cost without its answer)."""

    usage: Usage
    cost_usd: float | None
    estimated: bool
    record: UsageRecord


@dataclass(frozen=True, slots=True)
class Spender:
    """Whose money a turn spends: the session, its owner and scope, the turn's root run."""

    session_id: str
    turn_id: str
    owner: str | None
    scope_id: str


class Budget(Protocol):
    """What a run asks before and after each model call: the turn's budget, or a
    specialist's own over it (`SubtreeBudget`)."""

    active: bool
    """Whether any limit is set (the root keeps room for its last answer only then)."""

    @property
    def turn(self) -> TurnBudget:
        """The turn's budget, which records every call."""
        ...

    async def admit(
        self,
        card: ModelCard,
        model: str,
        input_tokens: int,
        max_tokens: int | None,
        *,
        final: bool = False,
        keep: int | None = None,
    ) -> Ticket | Exhausted: ...

    def charge(
        self,
        ticket: Ticket,
        reply: ModelReply,
        run_id: str,
        agent: str,
        card: ModelCard,
        kind: UsageKind = "run",
    ) -> Charged: ...

    def release(self, ticket: Ticket) -> None: ...

    def notice(self) -> dict[str, Any] | None: ...


class TurnBudget:
    """The spend of one turn against its limits; shared by every run of the turn."""

    def __init__(
        self,
        limits: BudgetLimits,
        config: RepoConfig,
        storage: UsageStorage,
        caller: Spender,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.config = config
        self.storage = storage
        self.caller = caller
        self._clock = clock
        self._started = clock()
        self._keys = [(name, value) for name, value in _limit_values(limits) if value is not None]
        self.active = bool(self._keys)
        self._prices = cost_limit(limits) is not None
        self._session: Spend | None = None  # the earlier turns', read on first need
        self._daily = 0.0  # the owner's day as last read
        self.tokens = 0
        self.cost_usd = 0.0
        self.priced = True
        """False once a call's price was unknown (the turn's cost is then a lower bound)."""
        self._held_tokens = 0
        self._held_cost = 0.0
        self._lock = anyio.Lock(fast_acquire=True)
        self._seen: set[tuple[str, str]] = set()  # the turn's agents and models that called
        self._keep: Ticket | None = None
        """The root's last answer, as estimated at its latest call: kept from specialists."""
        self.exhausted: Exhausted | None = None
        """The limit the latest refused call would have crossed."""
        self.compaction = Usage()
        """What the turn's summaries took (SPEC 20): calls no run's answer reports."""

    @property
    def turn(self) -> TurnBudget:
        return self

    async def admit(
        self,
        card: ModelCard,
        model: str,
        input_tokens: int,
        max_tokens: int | None,
        *,
        final: bool = False,
        keep: int | None = None,
    ) -> Ticket | Exhausted:
        """Hold the call's estimate, or say which limit it would cross. `final`: the root's
        last call without tools (the wall-clock limit lets it answer). `keep`: the root's
        input without tools: every other call of the tree leaves room for the root's last
        answer after it (that input, this call's answer, and the last answer itself), so a
        turn that reaches a limit can still say what it found."""
        output = max_tokens or card.max_output_tokens or DEFAULT_OUTPUT_TOKENS
        if not self.active:
            return Ticket(input_tokens + output, 0.0, input_tokens)
        ticket = Ticket(
            input_tokens + output, self._price(card, model, input_tokens, output), input_tokens
        )
        async with self._lock:
            if keep is not None:
                last = keep + output  # what the root's last call would send after this one
                self._keep = Ticket(last + output, self._price(card, model, last, output), last)
            reserve = None if final else self._keep
            refused = await self._crossed(ticket, final, reserve)
            if refused is not None:
                self.exhausted = refused  # the latest: the root's own comes last
                return refused
            self._held_tokens += ticket.tokens
            self._held_cost += ticket.cost_usd
        return ticket

    def _price(self, card: ModelCard, model: str, input_tokens: int, output: int) -> float:
        if not self._prices:
            return 0.0
        return _estimated_cost(self.limits, card, model, input_tokens, output)

    async def _crossed(
        self, ticket: Ticket, final: bool, reserve: Ticket | None
    ) -> Exhausted | None:
        for name, value in self._keys:
            used = await self.used(name)
            if name == "maxTurnSeconds":
                if not final and used >= value:
                    return Exhausted(name, value, used)
                continue
            money = name.endswith("CostUsd") or name == "maxDailyCostUsdPerOwner"
            held, more = (
                (self._held_cost, ticket.cost_usd) if money else (self._held_tokens, ticket.tokens)
            )
            if reserve is not None:  # every call but the last leaves the root room to answer
                more += reserve.cost_usd if money else reserve.tokens
            if used + held + more > value:
                return Exhausted(name, value, used)
        return None

    def session_before(self, spent: Spend) -> None:
        """What the session's earlier turns spent, as its log says (read already: no query)."""
        self._session = spent

    async def used(self, name: str) -> float:
        """What limit `name` has used so far, not counting calls in flight."""
        if name == "maxTurnSeconds":
            return self._clock() - self._started
        if name == "maxTurnTokens":
            return self.tokens
        if name == "maxTurnCostUsd":
            return self.cost_usd
        if name == "maxDailyCostUsdPerOwner":  # committed by every turn of this owner
            spend = await self.storage.owner_spent(self.caller.owner, _today())
            self._daily = spend.cost_usd
            return self._daily
        if self._session is None:
            self._session = await self.storage.session_spent(self.caller.session_id)
        if name == "maxSessionTokens":
            return self._session.tokens + self.tokens
        return self._session.cost_usd + self.cost_usd

    def charge(
        self,
        ticket: Ticket,
        reply: ModelReply,
        run_id: str,
        agent: str,
        card: ModelCard,
        kind: UsageKind = "run",
    ) -> Charged:
        """Settle what an admitted call took; the usage record to keep (a run's answer is
        appended with it); `kind`: what the call was for."""
        usage, estimated = reply.usage, False
        if not usage.input_tokens and not usage.output_tokens:  # the provider said nothing
            produced = len(reply.text) + sum(
                len(call.name) + len(call.arguments) for call in reply.tool_calls
            )
            usage, estimated = Usage(ticket.input_tokens, max(1, produced // 4)), True
        cost = self.price(reply, card, usage)
        caller = self.caller
        record = UsageRecord(
            caller.session_id,
            caller.turn_id,
            run_id,
            agent,
            reply.model,
            caller.owner,
            caller.scope_id,
            utc_now(),
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_tokens,
            cost,
            estimated,
            *self._firsts(agent, reply.model, kind),
            kind,
        )
        self.settle(ticket, usage, cost)
        if kind == "compaction":
            self.compaction += usage
        return Charged(usage, cost, estimated, record)

    def _firsts(self, agent: str, model: str, kind: UsageKind) -> tuple[bool, bool, bool]:
        """Whether a call is the first of the turn, of its agent, of its model in the turn:
        what a usage report counts turns by. A summary is never the turn's first: the
        turn is counted by its runs' calls (a report by kind shows every turn under `run`)."""
        seen = self._seen
        turn = kind == "run" and ("turn", "") not in seen
        agent_first = ("agent", agent) not in seen
        model_first = ("model", model) not in seen
        seen |= {("agent", agent), ("model", model)}
        if turn:
            seen.add(("turn", ""))
        return turn, agent_first, model_first

    def price(self, reply: ModelReply, card: ModelCard, usage: Usage | None = None) -> float | None:
        """What a call's answer cost in USD (None: no known price); `usage` when it is not
        the reply's own (estimated)."""
        if reply.fallback_from is not None:  # priced at the model that answered (SPEC 25)
            card = model_card(self.config, reply.model)
        if card.price is None:
            return None
        took = usage or reply.usage
        return card.price.cost(took.input_tokens, took.output_tokens, took.cached_tokens)

    def settle(self, ticket: Ticket | None, usage: Usage, cost: float | None) -> None:
        """Replace a call's held estimate (None: a call that failed) with what it took."""
        if ticket is not None and self.active:
            self._held_tokens -= ticket.tokens
            self._held_cost -= ticket.cost_usd
        self.tokens += usage.input_tokens + usage.output_tokens
        if cost is None:
            self.priced = False
        else:
            self.cost_usd += cost

    def release(self, ticket: Ticket) -> None:
        """Give a held estimate back: the call failed before it answered."""
        if self.active:
            self._held_tokens -= ticket.tokens
            self._held_cost -= ticket.cost_usd

    def notice(self) -> dict[str, Any] | None:
        """From 80% of a limit: what the root model is told in its next tool result."""
        if not self.active:
            return None
        worst: tuple[float, str, float, float] | None = None
        for name, value in self._keys:
            used = self._known_use(name)
            share = used / value
            if share >= NOTICE_FROM and (worst is None or share > worst[0]):
                worst = (share, name, value, used)
        if worst is None:
            return None
        share, name, value, used = worst
        return {
            "limit": name,
            "value": value,
            "used": round(used, 6),
            "notice": f"{min(share, 1.0):.0%} of {name} is spent: finish now with what you "
            "have, and say what is left undone",
        }

    def _known_use(self, name: str) -> float:
        """What `name` has used, from what this turn already knows (no database read)."""
        if name == "maxTurnSeconds":
            return self._clock() - self._started
        if name in ("maxTurnTokens", "maxSessionTokens"):
            before = self._session.tokens if self._session and name != "maxTurnTokens" else 0
            return before + self.tokens
        if name == "maxDailyCostUsdPerOwner":
            return self._daily
        earlier = self._session.cost_usd if self._session and name != "maxTurnCostUsd" else 0.0
        return earlier + self.cost_usd

    @property
    def turn_cost(self) -> float | None:
        """The turn's cost in USD; None when no call of it had a known price."""
        return round(self.cost_usd, 8) if self.priced or self.cost_usd else None


class SubtreeBudget:
    """A specialist's own `limits` (its agent.json, SPEC 22) over its run and every run it
    delegates to, on top of the budget it runs under (the turn's, or its parent
    specialist's): a call must fit both, so the stricter holds. Its turn limits count what
    the subtree spent since the specialist started (its seconds, since then); its session
    and daily limits, what the session and the owner's day spent as the turn's budget sees
    them. A call it refuses fails the specialist (`budget_exhausted`); the turn goes on."""

    active = True

    def __init__(
        self,
        parent: Budget,
        limits: BudgetLimits,
        agent: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parent = parent
        self.limits = limits
        self.agent = agent
        self._keys = [(name, value) for name, value in _limit_values(limits) if value is not None]
        self._clock = clock
        self._started = clock()
        self.tokens = 0
        self.cost_usd = 0.0
        self._held: dict[int, tuple[int, float]] = {}  # id(ticket): its estimate, as priced here
        self._lock = anyio.Lock(fast_acquire=True)

    @staticmethod
    def over(parent: Budget, limits: BudgetLimits | None, agent: str) -> Budget:
        """`parent`, bounded by `agent`'s own limits when it sets any."""
        if limits is None or all(value is None for _, value in _limit_values(limits)):
            return parent
        return SubtreeBudget(parent, limits, agent)

    @property
    def turn(self) -> TurnBudget:
        return self.parent.turn

    async def admit(
        self,
        card: ModelCard,
        model: str,
        input_tokens: int,
        max_tokens: int | None,
        *,
        final: bool = False,
        keep: int | None = None,
    ) -> Ticket | Exhausted:
        """The parent's admission, then this subtree's own limits (the parent's hold is given
        back when they refuse)."""
        ticket = await self.parent.admit(
            card, model, input_tokens, max_tokens, final=final, keep=keep
        )
        if isinstance(ticket, Exhausted):
            return ticket
        output = ticket.tokens - ticket.input_tokens
        cost = _estimated_cost(self.limits, card, model, input_tokens, output)
        async with self._lock:
            refused = await self._crossed(ticket.tokens, cost)
            if refused is None:
                self._held[id(ticket)] = (ticket.tokens, cost)
                return ticket
        self.parent.release(ticket)
        return refused

    async def _crossed(self, tokens: int, cost: float) -> Exhausted | None:
        held_tokens = sum(held for held, _ in self._held.values()) + tokens
        held_cost = sum(held for _, held in self._held.values()) + cost
        for name, value in self._keys:
            if name == "maxTurnSeconds":
                used = self._clock() - self._started
                if used >= value:
                    return Exhausted(name, value, used, self.agent)
                continue
            money = name.endswith("CostUsd") or name == "maxDailyCostUsdPerOwner"
            if name.startswith("maxTurn"):  # this subtree's own spend
                used = self.cost_usd if money else self.tokens
            else:  # the session's, the owner's day: as the turn counts them
                used = await self.turn.used(name)
            if used + (held_cost if money else held_tokens) > value:
                return Exhausted(name, value, used, self.agent)
        return None

    def charge(
        self,
        ticket: Ticket,
        reply: ModelReply,
        run_id: str,
        agent: str,
        card: ModelCard,
        kind: UsageKind = "run",
    ) -> Charged:
        charged = self.parent.charge(ticket, reply, run_id, agent, card, kind)
        self._held.pop(id(ticket), None)
        self.tokens += charged.usage.input_tokens + charged.usage.output_tokens
        self.cost_usd += charged.cost_usd or 0.0
        return charged

    def release(self, ticket: Ticket) -> None:
        self.parent.release(ticket)
        self._held.pop(id(ticket), None)

    def notice(self) -> dict[str, Any] | None:
        return None  # only the root model is told to finish (a specialist just ends)


def _estimated_cost(
    limits: BudgetLimits, card: ModelCard, model: str, input_tokens: int, output: int
) -> float:
    """What a call would cost, when `limits` has a limit in dollars (else 0: not counted)."""
    name = cost_limit(limits)
    if name is None:
        return 0.0
    if card.price is None:
        raise ModelConfigError(unpriced_message(model, name))
    return card.price.cost(input_tokens, output)


def turn_budget(bundle: Bundle, agent: str, storage: UsageStorage, caller: Spender) -> TurnBudget:
    """The budget of a turn rooted on `agent`: amodal.json's limits, field by field under
    the agent's own."""
    root = bundle.agents.get(agent)
    limits = bundle.config.limits.over(root.limits if root is not None else None)
    return TurnBudget(limits, bundle.config, storage, caller)


def _limit_values(limits: BudgetLimits) -> list[tuple[str, float | None]]:
    return [
        (field.alias or key, getattr(limits, key))
        for key, field in BudgetLimits.model_fields.items()
    ]


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


def _shown(value: float) -> str:
    return f"{value:.4f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))


def spent_message(exhausted: Exhausted) -> str:
    """What the root model is told on its last call, made without tools."""
    return (
        f"The budget of this turn is spent ({exhausted.limit}). Do not call tools: answer now "
        "with what you have, and say what is left undone."
    )


def with_spend_notice(result: Any, notice: dict[str, Any]) -> Any:
    """`result` with the budget notice in its `_budget` (merged with the tool-call budget's)."""
    if not isinstance(result, dict):
        result = {"result": result}
    budget = dict(result.get("_budget") or {})
    earlier = budget.get("notice")
    budget["spend"] = {key: notice[key] for key in ("limit", "value", "used")}
    budget["notice"] = notice["notice"] + (f"; {earlier}" if earlier else "")
    return {**result, "_budget": budget}
