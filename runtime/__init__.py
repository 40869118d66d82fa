"""amodal: a filesystem-defined agent runtime.

A git repository is the configuration of a team of AI agents; this package loads
it into an immutable Bundle and runs those agents. The library's front door is
`Runtime` (docs/python-api.md):

    from runtime import Runtime
    print(Runtime.run_sync("path/to/repo", "Hello").text)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from runtime._version import __version__
from runtime.exceptions import (
    AmodalError,
    AuthError,
    ConfigurationError,
    ConfirmationNotFoundError,
    ContextOverflowError,
    DefinitionError,
    DefinitionWarning,
    DocumentError,
    InvalidEventIdError,
    InvalidRepoError,
    InvalidRequestError,
    LocalModelError,
    MemoryNotFoundError,
    ModelConfigError,
    ModelError,
    NoModelError,
    RecordExistsError,
    RecordNotFoundError,
    RequestError,
    RootForbiddenError,
    RunError,
    SessionBusyError,
    SessionNotFoundError,
    StorageClosedError,
    StorageError,
    TemplateRenderError,
    ToolError,
    UnknownAgentError,
    UnsupportedDatabaseError,
)

if TYPE_CHECKING:
    from runtime.api import (
        ChatResult,
        EarlierMessage,
        PastTurn,
        RunningTurn,
        Runtime,
        SessionHistory,
    )
    from runtime.events import (
        AgentChange,
        Choice,
        Compaction,
        ConfirmationRequired,
        Done,
        Error,
        Event,
        ModelUsage,
        Session,
        SubagentEnd,
        SubagentStart,
        SurfaceChanged,
        TextDelta,
        ToolCall,
        ToolResult,
        Usage,
    )
    from runtime.models import Model, ModelSettings
    from runtime.models.anthropic import AnthropicModel
    from runtime.models.openai import OpenAIModel
    from runtime.observe.hooks import RunObserver
    from runtime.repo import LoadResult, load_bundle, load_repo
    from runtime.repo.bundle import AgentDefinition, Bundle

# Everything but the exceptions loads on first use: `import runtime` (and so every `amodal`
# command, `--help` included) costs only what it uses; loading a repo pulls the loader and
# never the turn loop (tests/test_cli_startup.py pins it; bench/load.py measures it).
_ON_FIRST_USE = {
    "LoadResult": "runtime.repo",
    "load_bundle": "runtime.repo",
    "load_repo": "runtime.repo",
    "AgentDefinition": "runtime.repo.bundle",
    "Bundle": "runtime.repo.bundle",
    "ChatResult": "runtime.api",
    "EarlierMessage": "runtime.api",
    "PastTurn": "runtime.api",
    "RunningTurn": "runtime.api",
    "Runtime": "runtime.api",
    "SessionHistory": "runtime.api",
    "Event": "runtime.events",
    "Usage": "runtime.events",
    **dict.fromkeys(
        (
            "AgentChange",
            "Choice",
            "Compaction",
            "ConfirmationRequired",
            "Done",
            "Error",
            "ModelUsage",
            "Session",
            "SubagentEnd",
            "SubagentStart",
            "SurfaceChanged",
            "TextDelta",
            "ToolCall",
            "ToolResult",
        ),
        "runtime.events",
    ),
    "Model": "runtime.models",
    "ModelSettings": "runtime.models",
    "OpenAIModel": "runtime.models.openai",
    "AnthropicModel": "runtime.models.anthropic",  # needs the `anthropic` extra
    "RunObserver": "runtime.observe.hooks",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


__all__ = [
    "AgentChange",
    "AgentDefinition",
    "AmodalError",
    "AnthropicModel",
    "AuthError",
    "Bundle",
    "ChatResult",
    "Choice",
    "Compaction",
    "ConfigurationError",
    "ConfirmationNotFoundError",
    "ConfirmationRequired",
    "ContextOverflowError",
    "DefinitionError",
    "DefinitionWarning",
    "DocumentError",
    "Done",
    "EarlierMessage",
    "Error",
    "Event",
    "InvalidEventIdError",
    "InvalidRepoError",
    "InvalidRequestError",
    "LoadResult",
    "LocalModelError",
    "MemoryNotFoundError",
    "Model",
    "ModelConfigError",
    "ModelError",
    "ModelSettings",
    "ModelUsage",
    "NoModelError",
    "OpenAIModel",
    "PastTurn",
    "RecordExistsError",
    "RecordNotFoundError",
    "RequestError",
    "RootForbiddenError",
    "RunError",
    "RunObserver",
    "RunningTurn",
    "Runtime",
    "Session",
    "SessionBusyError",
    "SessionHistory",
    "SessionNotFoundError",
    "StorageClosedError",
    "StorageError",
    "SubagentEnd",
    "SubagentStart",
    "SurfaceChanged",
    "TemplateRenderError",
    "TextDelta",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "UnknownAgentError",
    "UnsupportedDatabaseError",
    "Usage",
    "__version__",
    "load_bundle",
    "load_repo",
]
