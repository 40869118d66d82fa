"""amodal: a filesystem-defined agent runtime.

A git repository is the configuration of a team of AI agents; this package loads
it into an immutable Bundle and runs those agents. The library's front door is
`Runtime` (docs/python-api.md):

    from runtime import Runtime
    print(Runtime.run_sync("path/to/repo", "Hello").text)
"""

from runtime.api import ChatResult, Runtime
from runtime.bundle import AgentDefinition, Bundle
from runtime.events import Event, Usage
from runtime.exceptions import (
    AmodalError,
    AuthError,
    ConfigurationError,
    ConfirmationNotFoundError,
    DefinitionError,
    DefinitionWarning,
    DocumentError,
    InvalidRepoError,
    InvalidRequestError,
    LocalModelError,
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
from runtime.models import Model, ModelSettings
from runtime.observe import RunObserver
from runtime.repo import LoadResult, load_bundle, load_repo

__version__ = "0.1.0"

__all__ = [
    "AgentDefinition",
    "AmodalError",
    "AuthError",
    "Bundle",
    "ChatResult",
    "ConfigurationError",
    "ConfirmationNotFoundError",
    "DefinitionError",
    "DefinitionWarning",
    "DocumentError",
    "Event",
    "InvalidRepoError",
    "InvalidRequestError",
    "LoadResult",
    "LocalModelError",
    "Model",
    "ModelConfigError",
    "ModelError",
    "ModelSettings",
    "NoModelError",
    "RecordExistsError",
    "RecordNotFoundError",
    "RequestError",
    "RootForbiddenError",
    "RunError",
    "RunObserver",
    "Runtime",
    "SessionBusyError",
    "SessionNotFoundError",
    "StorageClosedError",
    "StorageError",
    "TemplateRenderError",
    "ToolError",
    "UnknownAgentError",
    "UnsupportedDatabaseError",
    "Usage",
    "__version__",
    "load_bundle",
    "load_repo",
]
