"""`RecordedRequest`: one chat request as a scripted server received it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.models.messages import Message, UserMessage
from runtime.testing._conversation import conversation
from runtime.testing._steps import content_text


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One chat request as a scripted server received it."""

    path: str
    headers: Mapping[str, str]
    """Header names lower-cased."""
    body: Mapping[str, Any]
    """The parsed JSON body, in the wire's own shape."""
    connection: str = ""
    """The client's `host:port`: requests on one kept-alive connection share it."""
    provider: str = "openai"
    """Which wire it came over: `openai` (Chat Completions) or `anthropic` (Messages)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The body's `messages` as sent (Chat Completions' or Anthropic's shape)."""
        return list(self.body.get("messages") or [])

    @property
    def conversation(self) -> list[Message]:
        """The messages as the runtime's model-neutral ones (`runtime.models.messages`), the
        same whichever wire they came over: write a responder once for both servers.
        Anthropic's wire carries the runtime's notes (the per-turn context) as user text."""
        return conversation(self.body, self.provider)

    @property
    def system(self) -> str | None:
        """The text of the system prompt (the first system message, or Anthropic's
        `system`), or None."""
        if self.provider == "anthropic":
            return content_text(self.body.get("system")) or None
        for message in self.messages:
            if message.get("role") == "system":
                return content_text(message.get("content"))
        return None

    @property
    def tools(self) -> list[str]:
        """The names of the tools offered, in the order sent."""
        offered = self.body.get("tools") or []
        if self.provider == "anthropic":
            return [tool["name"] for tool in offered]
        return [tool["function"]["name"] for tool in offered]

    @property
    def model(self) -> str | None:
        value = self.body.get("model")
        return value if isinstance(value, str) else None

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def last_user(self) -> str | None:
        """The text of the last user message, or None."""
        if self.provider == "anthropic":
            for message in reversed(self.conversation):
                if isinstance(message, UserMessage):
                    return message.text
            return None
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return content_text(message.get("content"))
        return None
