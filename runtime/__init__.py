"""amodal: a filesystem-defined agent runtime.

A git repository is the configuration of a team of AI agents; this package loads
it into an immutable Bundle and runs those agents.
"""

from runtime.bundle import AgentDefinition, Bundle
from runtime.exceptions import (
    AmodalError,
    DefinitionError,
    DefinitionWarning,
    InvalidRepoError,
)
from runtime.repo import LoadResult, load_bundle, load_repo

__version__ = "0.1.0"

__all__ = [
    "AgentDefinition",
    "AmodalError",
    "Bundle",
    "DefinitionError",
    "DefinitionWarning",
    "InvalidRepoError",
    "LoadResult",
    "__version__",
    "load_bundle",
    "load_repo",
]
