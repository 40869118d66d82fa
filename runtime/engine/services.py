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


@dataclass(frozen=True, slots=True)
class Services:
    storage: Storage
    models: ModelRouter
    observers: Observers = NO_OBSERVERS
    connections: Connections = field(default_factory=Connections)
    """The HTTP client of REST connections."""
    mcp: McpServers | None = None
    """The MCP servers (None: no server runs, so none is ready)."""
    views: SessionViews = field(default_factory=SessionViews)
    """What each session's model is shown, kept in step with its log, and its system
    prompt (the sessions this process ran lately: a dropped one is read from the log)."""
