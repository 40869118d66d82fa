"""The `amodal` logger's output: one line per event, `event key=value ...`.

Code logs with `logger.warning("event_name", extra={"event": "event_name", ...})`;
this formatter prints the extra fields so the structured events of the SPEC
(`predicate_excluded`, `reload_failed`, ...) are readable and greppable.
"""

from __future__ import annotations

import json
import logging
import sys

logger = logging.getLogger("amodal")

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "event",
    "taskName",
}


class EventFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = {key: value for key, value in record.__dict__.items() if key not in _STANDARD}
        parts = [f"amodal: {record.levelname.lower()}: {record.getMessage()}"]
        parts += [f"{key}={_text(value)}" for key, value in fields.items()]
        return " ".join(parts)


def _text(value: object) -> str:
    return value if isinstance(value, str) and " " not in value else json.dumps(value, default=str)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a record comes: a progress bar that takes
    stderr over (`amodal eval`'s) then prints a log line above itself, not through it."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure(level: int = logging.WARNING) -> None:
    """Send the `amodal` logger to stderr, once per process."""
    if any(isinstance(handler.formatter, EventFormatter) for handler in logger.handlers):
        logger.setLevel(level)
        return
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(EventFormatter())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
