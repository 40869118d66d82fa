"""What every turn of one runtime uses, in one object: the turn, its runs and their tools
take this instead of the same services handed down each layer."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.engine.model_pool import ModelRouter
from runtime.engine.view import SessionViews
from runtime.observe import NO_OBSERVERS, Observers
from runtime.outside.mcp import McpServers
from runtime.outside.rest import Connections
from runtime.storage import Storage
from runtime.surface.prompt import SessionPrompt


@dataclass(frozen=True, slots=True)
class Services:
    storage: Storage
    models: ModelRouter
    observers: Observers = NO_OBSERVERS
    connections: Connections = field(default_factory=Connections)
    """The HTTP client of REST connections."""
    mcp: McpServers | None = None
    """The MCP servers (None: no server runs, so none is ready)."""
    prompts: dict[str, SessionPrompt] = field(default_factory=dict)
    """Each session's system prompt, kept byte-stable between its turns."""
    views: SessionViews = field(default_factory=SessionViews)
    """What each session's model is shown, kept in step with its log."""

    def prompt(self, session_id: str) -> SessionPrompt:
        return self.prompts.setdefault(session_id, SessionPrompt())
