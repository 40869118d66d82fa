"""Which agent roots a conversation, and the handoff note when that changes (SPEC 3)."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.exceptions import RootForbiddenError, UnknownAgentError
from runtime.repo.bundle import DEFAULT_AGENT, MAIN_AGENT, Bundle
from runtime.surface.resolution import Surface

HANDOFF_PREFIX = "[Agent handoff]"


@dataclass(frozen=True, slots=True)
class Rooting:
    """The root for this turn, and the root it replaces (None when nothing changes)."""

    agent: str  # an agent directory name, or `main` for unscoped chat
    previous: str | None = None

    @property
    def changed(self) -> bool:
        return self.previous is not None and self.previous != self.agent


def rootable(bundle: Bundle, *, operator: bool) -> list[str]:
    """The agents a caller may root a chat at, by name: every agent, and `main` (unscoped
    chat) for an operator, or for anyone in a repo without `default` (the rule
    `choose_root` applies)."""
    names = sorted(bundle.agents)
    if operator or DEFAULT_AGENT not in bundle.agents:
        names.append(MAIN_AGENT)
    return names


def choose_root(
    bundle: Bundle,
    requested: str | None,
    current: str | None,
    *,
    operator: bool = True,
    human_present: bool = True,
) -> Rooting:
    """The root of a turn.

    `requested` is the request's `agent`; `current` the session's root (None for a
    new session). A named agent must exist (no fallback); an omitted one keeps the
    session's root, or on a new session (or one whose root a reload removed) takes
    `default` if it exists, else unscoped chat. An end user's autonomous run (no
    human present) takes `default` as chat does; an operator keeps unscoped chat.
    """
    if requested is not None:
        if requested == MAIN_AGENT and not operator and DEFAULT_AGENT in bundle.agents:
            # Unscoped chat has every resource and no predicates: an end user reaches it only
            # in a repo without `default`, never by naming it.
            raise RootForbiddenError(
                "'main' (unscoped chat) is for operators; name an agent or omit `agent`"
            )
        if requested != MAIN_AGENT and requested not in bundle.agents:
            raise UnknownAgentError(requested, [*bundle.agents, MAIN_AGENT])
        return Rooting(requested, current)
    if current is not None and (current == MAIN_AGENT or current in bundle.agents):
        return Rooting(current)
    if not human_present and operator:
        fallback = MAIN_AGENT  # an operator's autonomous run keeps the unscoped surface
    else:
        fallback = DEFAULT_AGENT if DEFAULT_AGENT in bundle.agents else MAIN_AGENT
    return Rooting(fallback, current)


def handoff_note(previous: str, new: str, previous_surface: Surface, new_surface: Surface) -> str:
    """The user message inserted when a session is re-rooted, first line exactly as SPEC 3 says."""
    lines = [f"{HANDOFF_PREFIX} {previous} -> {new}"]
    lacking = new_surface.lacks(previous_surface)
    if lacking:
        lines.append(f"{previous} had tools that {new} lacks: {', '.join(lacking)}")
    lines.append(
        f"You are {new} now. Earlier assistant replies in this conversation were written by "
        f"{previous}, not by you; check them before relying on them."
    )
    return "\n".join(lines)
