"""Who is asking and what they ask for: a caller (from verified credentials) and a chat request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from runtime.surface.resolution import DEFAULT_SCOPE, SurfaceContext

OPERATOR_OWNER = ""
"""Who owns the operator's sessions: what no credential yields (an empty `sub` counts as none)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking, from verified credentials only (or trusted by the embedding application)."""

    claims: Mapping[str, str] = field(default_factory=dict)
    operator: bool = False
    human_present: bool = True

    @property
    def scope_id(self) -> str:
        return self.claims.get("scope", DEFAULT_SCOPE)

    @property
    def owner(self) -> str | None:
        """Who owns the sessions this caller starts: its `sub` claim; operators' sessions are
        marked so no credential without a `sub` can ever match them."""
        return self.claims.get("sub") or (OPERATOR_OWNER if self.operator else None)

    def surface_context(self, agent: str, context: Mapping[str, str]) -> SurfaceContext:
        return SurfaceContext.for_caller(
            agent, self.claims, context, human_present=self.human_present
        )


EarlierRole = Literal["user", "assistant", "system"]


@dataclass(frozen=True, slots=True)
class EarlierMessage:
    """A message of a conversation held before its session began, e.g. the history an OpenAI
    client sends with every request. A `system` one is quoted to the agent as context,
    never followed as instructions."""

    role: EarlierRole
    text: str


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat message (SPEC 3): what to say, to whom, in which session."""

    message: str
    agent: str | None = None
    context: Mapping[str, str] = field(default_factory=dict)
    session_id: str | None = None
    autonomous: bool = False  # no human present (a scheduled or API-started task)
    history: tuple[EarlierMessage, ...] = ()
    """Seeds the transcript of a session this turn starts (ignored when it continues one)."""
    thread: str | None = None
    """The caller's own name for the conversation (an AG-UI thread): its session is
    continued when it exists, else started under an id derived from the caller and it."""
    face: str = "chat"
    """Which front end asked (`/metrics` counts turns by it)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Kept on a session this turn starts (`kind: "automation"`, `read_only`); ignored when
    it continues one."""
