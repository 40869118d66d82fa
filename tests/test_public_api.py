"""The package's public surface: what `import runtime` promises."""

from __future__ import annotations

import subprocess
import sys

import runtime


def test_every_public_name_exists_and_nothing_else_is_promised() -> None:
    assert sorted(runtime.__all__) == [
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
    for name in runtime.__all__:
        assert getattr(runtime, name) is not None, name


def test_loading_the_package_does_not_import_the_model_or_server_stacks() -> None:
    # `amodal validate` must stay quick: the openai SDK and the web server load only
    # for commands that chat or serve.
    code = (
        "import sys, runtime, runtime.cli; "
        "print(sorted({'openai', 'fastapi', 'uvicorn'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
