"""Every error the runtime raises, in one tree.

AmodalError                       anything this package raises on purpose
 ├── ConfigurationError           the runtime cannot run as configured (fix the setup)
 │    ├── InvalidRepoError        a repo with at least one DefinitionError; never becomes a bundle
 │    ├── ModelConfigError        an endpoint without a model name; a provider not installed
 │    ├── NoModelError            no model endpoint, and the offline model is not installed
 │    └── LocalModelError         the offline model did not start
 ├── RequestError                 a request the runtime refuses; `status` is its HTTP status
 │    ├── AuthError               401: missing or invalid credentials
 │    ├── RootForbiddenError      403: the caller may not root a chat there (`main`)
 │    ├── UnknownAgentError       404: a request named an agent the bundle does not have
 │    ├── SessionNotFoundError    404: no such session for this caller
 │    ├── ConfirmationNotFoundError 404: no such pending confirmation
 │    ├── MemoryNotFoundError     404: no such memory entry for this caller
 │    ├── SessionBusyError        409: the session has a turn running
 │    ├── InvalidRequestError     422: a request that is not valid (a string that is no text)
 │    │    └── InvalidEventIdError  422: `after` / `Last-Event-ID` is not an event id
 │    └── DocumentError           422: a store document, key or query its schema refuses
 ├── RunError                     a turn failed while it ran (reported as an `error` event)
 │    ├── ModelError              a model call failed after its retries
 │    ├── ContextOverflowError    a call's input does not fit its model's window, even compacted
 │    └── TemplateRenderError     AGENT.md or CONTEXT.md failed to render
 └── StorageError                 the database failed (locked past the busy timeout, disk, ...)
      ├── UnsupportedDatabaseError  a URL this build cannot open (postgresql:// without the extra)
      ├── StorageClosedError        an operation after `close()`
      ├── RecordNotFoundError       a write that names a session or run that does not exist
      └── RecordExistsError         a create whose key is taken (session, run, pending call)

Signals to the model (never escape a run: they become the tool result the model reads):

ToolError                         a tool's refusal; its message is the whole result

DefinitionError / DefinitionWarning are values (a Finding each), not exceptions:
the loader collects them instead of raising one by one, so a person sees every
problem of the whole repo at once and fixes them in one pass.

A custom tool's `ctx` raises the builtin `PermissionError` for anything outside its
caller's surface, as Python code expects of a refused capability.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class AmodalError(Exception):
    """Base class of every error this package raises on purpose."""


# --- mistakes in the repo or the set-up ---------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found in a repo file: where it is and what to do about it.

    `file` is relative to the repo root, `line` is 1-based (None where the
    format has no lines or the place is unknown) and `field` is a dotted path
    inside the file (`tools[2]`, `persona.tone`), empty for the file as a whole.
    """

    file: str
    message: str
    line: int | None = None
    field: str = ""

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        what = f"{self.field}: {self.message}" if self.field else self.message
        return f"{where}: {what}"

    def as_json(self) -> dict[str, str | int | None]:
        return {"file": self.file, "line": self.line, "field": self.field, "message": self.message}


class DefinitionError(Finding):
    """An error in an agent repo: the repo cannot be served until it is fixed."""


class DefinitionWarning(Finding):
    """Accepted but suspicious input: printed by `amodal validate`, never fatal."""


class ConfigurationError(AmodalError):
    """The runtime cannot run as configured; the message says what to change."""


class InvalidRepoError(ConfigurationError):
    """Raised by `load_bundle` for a repo with errors; carries every one of them."""

    def __init__(
        self, errors: tuple[DefinitionError, ...], warnings: tuple[DefinitionWarning, ...] = ()
    ) -> None:
        self.errors = errors
        self.warnings = warnings
        lines = "\n".join(f"  {error}" for error in errors)
        super().__init__(f"the agent repo has {len(errors)} error(s):\n{lines}")


class ModelConfigError(ConfigurationError):
    """The model configuration cannot be used: an endpoint is set but no model name, or a
    provider whose package is not installed (the message gives the pip command)."""


class NoModelError(ConfigurationError):
    """No model endpoint is configured and the offline model is not installed."""


class LocalModelError(ConfigurationError):
    """The offline model is not installed or did not start."""


# --- requests the runtime refuses ---------------------------------------------


class RequestError(AmodalError):
    """A request refused before anything ran; `status` and `code` are its HTTP answer."""

    status = 400
    code = "bad_request"


class AuthError(RequestError):
    """Missing or invalid credentials; the message never echoes a token."""

    status = 401
    code = "unauthorized"


class RootForbiddenError(RequestError):
    """The caller may not root a chat there: unscoped chat (`main`) is for operators."""

    status = 403
    code = "forbidden"


class UnknownAgentError(RequestError):
    """A request named an agent the bundle does not have. There is no fallback."""

    status = 404
    code = "unknown_agent"

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = sorted(known)
        listed = ", ".join(self.known) or "none"
        super().__init__(f"unknown agent {name!r}; known agents: {listed}")


class SessionNotFoundError(RequestError):
    """No such session for this caller (another scope's session is not found either)."""

    status = 404
    code = "unknown_session"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"unknown session {session_id!r}")


class ConfirmationNotFoundError(RequestError):
    """No such pending confirmation (never asked, already answered, or answered elsewhere)."""

    status = 404
    code = "unknown_confirmation"

    def __init__(self, session_id: str, call_id: str) -> None:
        super().__init__(f"no pending confirmation {call_id!r} in session {session_id!r}")


class MemoryNotFoundError(RequestError):
    """No such memory entry for this caller (another owner's entry is not found either)."""

    status = 404
    code = "unknown_memory"

    def __init__(self, entry_id: str) -> None:
        super().__init__(f"unknown memory entry {entry_id!r}")


class SessionBusyError(RequestError):
    """The session has a turn running; one turn at a time per session."""

    status = 409
    code = "session_busy"

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} has a turn running; retry when it is done")


class InvalidRequestError(RequestError):
    """A request that is not valid, such as a message or context value that is no text
    (U+0000, an unpaired surrogate); the message says where."""

    status = 422
    code = "invalid_request"


class InvalidEventIdError(InvalidRequestError):
    """A position in a session's log that is not an event id (`SEQ` or `SEQ:K`, digits)."""

    code = "invalid_event_id"

    def __init__(self, given: str) -> None:
        super().__init__(f"not an event id: {given!r} (expected SEQ or SEQ:K, digits)")


class DocumentError(RequestError):
    """A store document, key or query its store refuses; `problems` lists everything wrong.

    The store tools turn it into an error result for the model, the HTTP routes into a 422.
    """

    status = 422
    code = "invalid_document"

    def __init__(self, store: str, what: str, problems: Sequence[str]) -> None:
        self.store = store
        self.problems = tuple(problems)
        super().__init__(f"{what} (store {store!r}): " + "; ".join(self.problems))


# --- failures while a turn runs -----------------------------------------------


class RunError(AmodalError):
    """A turn failed while it ran; the turn reports it as an `error` event, then `done`."""


class ModelError(RunError):
    """A model call failed (after any retries). Names the model and endpoint, never the key.

    `transient` when another endpoint might have answered: a rate limit, a 5xx, a timeout,
    a connection error, a stream that broke off; never a 400-class error (the request
    itself was refused). A model's fallback (SPEC 25) is asked only then."""

    def __init__(
        self,
        *,
        model: str,
        endpoint: str,
        reason: str,
        status: int | None,
        attempts: int,
        transient: bool = False,
    ) -> None:
        self.model = model
        self.endpoint = endpoint
        self.reason = reason
        self.status = status
        self.attempts = attempts
        self.transient = transient
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"model {model!r} at {endpoint} failed{tries}: {reason}")


class ContextOverflowError(RunError):
    """A model call's input would not fit the model's window, even after compaction: the run
    ends with error code `context_overflow` instead of a provider's raw 400."""

    code = "context_overflow"

    def __init__(self, model: str, window: int, needed: int) -> None:
        self.model, self.window, self.needed = model, window, needed
        super().__init__(
            f"context_overflow: the next call to model {model!r} needs about {needed:,} input "
            f"tokens, more than its {window:,}-token window leaves room for (less its longest "
            "answer); compaction could not shorten it enough. Start a new session, or use a "
            "model with a larger window (contextWindow in amodal.json)."
        )


class TemplateRenderError(RunError):
    """A template failed to render with this request's context; names the file and line."""


# --- the database -------------------------------------------------------------


class StorageError(AmodalError):
    """The database failed an operation; the message names the database and the cause."""


class UnsupportedDatabaseError(StorageError):
    """`open_storage` was given a URL this installation cannot open."""


class StorageClosedError(StorageError):
    """An operation on a storage after its `close()`."""


class RecordNotFoundError(StorageError):
    """A write named a record that does not exist (`kind` is "session" or "run")."""

    def __init__(self, kind: str, key: str) -> None:
        self.kind = kind
        self.key = key
        super().__init__(f"no {kind} with id {key!r}; create it first")


class RecordExistsError(StorageError):
    """A create named a key that is already taken."""

    def __init__(self, kind: str, key: str) -> None:
        self.kind = kind
        self.key = key
        super().__init__(f"a {kind} with id {key!r} already exists; ids must be unique")


# --- signals to the model -----------------------------------------------------


class ToolError(Exception):
    """A tool's refusal: its message is the whole result the model reads.

    Not an AmodalError: it never escapes a run, so no caller of the runtime sees it.
    """
