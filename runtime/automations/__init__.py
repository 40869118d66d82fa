"""Automations (SPEC 23): turns that start on a cron schedule, a signed webhook or by hand,
run without a person, and deliver their outcome. `Automations.open(runtime)` is the
service every front end uses."""

from runtime.automations.service import (
    AutomationInfo,
    AutomationNotFoundError,
    Automations,
    quote_payload,
    render_message,
)
from runtime.automations.signing import Refused, signature, verified_payload

__all__ = [
    "AutomationInfo",
    "AutomationNotFoundError",
    "Automations",
    "Refused",
    "quote_payload",
    "render_message",
    "signature",
    "verified_payload",
]
