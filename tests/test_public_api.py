"""The package's public surface: what `import runtime` promises."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import runtime
from runtime import exceptions


def test_every_public_name_exists_and_nothing_else_is_promised() -> None:
    assert sorted(runtime.__all__) == [
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
    for name in runtime.__all__:
        assert getattr(runtime, name) is not None, name


def test_every_exception_is_in_the_documented_tree_and_exported() -> None:
    raised = [
        value
        for value in vars(exceptions).values()
        if inspect.isclass(value) and issubclass(value, Exception)
    ]
    for error in raised:
        assert re.search(rf"^[ │├└─]*{error.__name__} ", exceptions.__doc__ or "", re.M), error
        assert error.__name__ in runtime.__all__, error
        # One tree: everything the runtime raises on purpose is an AmodalError, except the
        # signal a tool gives its model.
        assert issubclass(error, runtime.AmodalError) or error is runtime.ToolError


def test_refusals_carry_the_http_status_that_answers_them() -> None:
    statuses = {
        runtime.AuthError: 401,
        runtime.RootForbiddenError: 403,
        runtime.UnknownAgentError: 404,
        runtime.SessionNotFoundError: 404,
        runtime.ConfirmationNotFoundError: 404,
        runtime.MemoryNotFoundError: 404,
        runtime.SessionBusyError: 409,
        runtime.InvalidRequestError: 422,
        runtime.DocumentError: 422,
    }
    for error, status in statuses.items():
        assert issubclass(error, runtime.RequestError) and error.status == status


def test_loading_the_package_does_not_import_the_model_or_server_stacks() -> None:
    # `amodal validate` and `import runtime` must stay quick: the openai SDK and the web
    # server load only when a process calls a model or serves.
    code = (
        "import sys, runtime, runtime.cli; "
        "print(sorted({'openai', 'fastapi', 'uvicorn', 'httpx'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
