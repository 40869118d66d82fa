"""The documentation's Python examples run as written (each block is a whole script), from a
copy of the example repo, against the scripted model over loopback; the README's two
commands are what .ci/run runs, and install what the example repo needs."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from runtime.models.local import BUILD_OPTIONS, NO_MODEL
from runtime.testing import ScriptedModel
from tests.conftest import PROJECT_ROOT

RUNNABLE = ("README.md", "docs/python-api.md", "docs/observability.md", "docs/evals.md")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def blocks() -> Iterator[tuple[str, int, str]]:
    for page in RUNNABLE:
        text = (PROJECT_ROOT / page).read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            yield page, line, match.group(1)


@pytest.mark.parametrize(("page", "line", "code"), list(blocks()), ids=lambda v: str(v)[:40])
def test_a_python_example_of_the_docs_runs(
    page: str, line: int, code: str, example_repo: Path, tmp_path: Path
) -> None:
    with ScriptedModel() as model:
        model.respond(lambda request: "Hello from the research desk.")
        env = {
            **os.environ,
            "OPENAI_BASE_URL": model.base_url,
            "MODEL_MAIN": "scripted",
            "AMODAL_DATA_DIR": str(tmp_path / "data"),
        }
        env.pop("DATABASE_URL", None)
        ran = subprocess.run(
            [sys.executable, "-c", code],
            cwd=example_repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert ran.returncode == 0, f"{page}:{line}\n{ran.stderr}"


def test_the_pages_have_examples() -> None:
    assert {page for page, _, _ in blocks()} == set(RUNNABLE)


def test_security_md_names_the_owner_the_operators_sessions_really_have() -> None:
    from runtime.surface.caller import OPERATOR_OWNER, Caller

    text = (PROJECT_ROOT / "docs/security.md").read_text(encoding="utf-8")
    section = text.split("## 3. ", 1)[1].split("\n## ", 1)[0]
    assert Caller(operator=True).owner == OPERATOR_OWNER
    assert f"owned by `{OPERATOR_OWNER!r}`".replace("'", '"') in section
    assert "@operator`)," not in section and "owner `@operator`" not in section


# ---------------------------------------------------------------- the README's commands


def readme_commands() -> ModuleType:
    """.ci/readme_commands.py, the extractor .ci/run uses (a script, not a package)."""
    spec = importlib.util.spec_from_file_location(
        "readme_commands", PROJECT_ROOT / ".ci" / "readme_commands.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pip_install(command: str) -> tuple[set[str], str]:
    """The extras of the `pip install -e '.[...]'` in `command`, and its CMAKE_ARGS."""
    words = shlex.split(command.replace("&&", " && "))
    target = next(word for word in words if word.startswith(".["))
    cmake = next(word for word in words if word.startswith("CMAKE_ARGS="))
    return set(target[2:-1].split(",")), cmake.removeprefix("CMAKE_ARGS=")


def ci_llama_options() -> str:
    run = (PROJECT_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    found = re.search(r'^llama_options="([^"]*)"$', run, re.M)
    assert found is not None
    return found.group(1)


def test_the_readme_marks_the_two_commands_ci_runs_as_written() -> None:
    commands = readme_commands().commands((PROJECT_ROOT / "README.md").read_text("utf-8"))
    assert set(commands) == {"first", "test"}
    assert commands["first"].rstrip().endswith('amodal chat "Hello! Who is on this team?"')
    assert commands["test"].rstrip().endswith("python -m pytest -n 3")
    run = (PROJECT_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "readme_commands.py first" in run and "readme_commands.py test" in run
    assert '-c "$first_command"' in run and '-c "$test_command"' in run


def test_the_first_command_installs_every_extra_the_example_repo_uses() -> None:
    from runtime.repo import load_repo

    commands = readme_commands().commands((PROJECT_ROOT / "README.md").read_text("utf-8"))
    extras, cmake = pip_install(commands["first"])
    bundle = load_repo(PROJECT_ROOT).bundle
    assert bundle is not None
    needed = {"local"}  # no model is configured: the offline model answers
    if bundle.mcp_servers:
        needed.add("mcp")
    assert needed <= extras
    # Built as CI builds it, so CI's cached wheel is the build a user gets.
    assert cmake == ci_llama_options() == BUILD_OPTIONS == "-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
    assert f'CMAKE_ARGS="{BUILD_OPTIONS}"' in NO_MODEL  # the hint a user without it gets
    test_extras, test_cmake = pip_install(commands["test"])
    assert {"dev", "local"} <= test_extras and test_cmake == cmake


TEST_MARKER = "<!-- ci: test command (.ci/run runs this block as written) -->\n"
BROKEN_EDITS = {
    "unmarked": ("<!-- ci: first command", "<!-- first command"),
    "a gap": (TEST_MARKER + "```sh", TEST_MARKER + "\n```sh"),
    "twice": ("## Five-minute tour", TEST_MARKER + "```sh\nls\n```\n\n## Five-minute tour"),
}


@pytest.mark.parametrize("edit", BROKEN_EDITS)
def test_a_readme_edit_that_loses_a_command_is_an_error_not_a_skipped_check(edit: str) -> None:
    module = readme_commands()
    text = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    old, new = BROKEN_EDITS[edit]
    assert old in text
    with pytest.raises(ValueError, match=r"README\.md"):
        module.commands(text.replace(old, new))


def test_the_chat_check_wants_a_reply_from_the_offline_model_and_no_warning() -> None:
    module = readme_commands()
    pip = "Installing amodal ...\nCollecting x\nSuccessfully installed amodal-runtime-0.1 x-1\n"
    said = module.OFFLINE + " (smollm2, ...)\n(session 1a2b: ...)\n"
    pip_noise = "WARNING: Location 'file:///opt/pypi/simple/x/' is ignored\n"
    team = "Hello! I'm your Desk Lead; we have a researcher, a writer and a reviewer.\n"
    assert module.chat_problems(pip + team, pip_noise + said) == []
    assert module.chat_reply(pip + "Hello!\n") == "Hello!"
    assert module.chat_problems(pip, said) == ["the chat printed no reply"]
    assert module.chat_problems(pip + "There is no one on this team.\n", said) == [
        "the reply names no one of the team (Desk Lead, Researcher, Writer, Reviewer)"
    ]
    missing = "amodal.json: warning: MCP servers need the `mcp` extra: pip install ...\n"
    assert module.chat_problems(pip + team, missing + said) == [f"the chat said: {missing.strip()}"]
    failed = "Error: no model is configured. Either ...\n"
    assert "the chat did not say it uses the offline model" in module.chat_problems(pip, failed)


def tour() -> list[str]:
    """The README's Five-minute tour: its commands, comments cut, one a line."""
    text = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Five-minute tour", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_five_minute_tour_works_as_written_in_the_repo_amodal_init_makes(
    tmp_path: Path,
) -> None:
    commands = tour()
    assert commands[0] == "amodal init my-agents && cd my-agents"
    serve = "amodal serve"
    assert serve in commands  # it keeps running: started, asked for /health, stopped below
    with ScriptedModel() as model:
        model.respond(lambda request: "Hello! See you at Friday's demo.")
        env = {
            **os.environ,
            "OPENAI_BASE_URL": model.base_url,
            "MODEL_MAIN": "scripted",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }
        env.pop("AMODAL_DATA_DIR", None)
        env.pop("DATABASE_URL", None)
        port = free_port()
        started = (
            f"amodal serve --port {port} & server=$!\n"
            f"for _ in $(seq 1 150); do curl -sf localhost:{port}/health && break; sleep 0.2; done"
            "\nkill $server; wait $server || true"
        )
        script = "set -e\n" + "\n".join(
            started if command == serve else command for command in commands
        )
        ran = subprocess.run(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    out = ran.stdout
    assert "writer" in out.split("DESCRIPTION", 1)[1]  # `amodal agents` lists the writer
    assert '"status": "ok"' in out or '"status":"ok"' in out  # the server's /health
    assert "2 cases: 2 passed" in out  # evals/first.yaml, run twice, then compared
    assert "Error" not in ran.stderr


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ---------------------------------------------------------------- docs that drift


def test_the_cli_synopsis_lists_every_command_and_every_schema() -> None:
    from runtime.cli import main
    from runtime.repo.schema import SCHEMA_NAMES

    text = (PROJECT_ROOT / "docs/cli.md").read_text(encoding="utf-8")
    synopsis = text.split("```text\n", 1)[1].split("```", 1)[0]
    listed = {line.split()[0] for line in synopsis.splitlines()[1:] if line.startswith("  ")}
    assert set(main.commands) <= listed
    for command in main.commands:
        assert f"## `amodal {command}" in text, command  # and a section of its own
    for name in SCHEMA_NAMES:
        assert f"wrote .schemas/{name}.schema.json" in text
    assert f"name a schema ({', '.join(SCHEMA_NAMES)})" in text


def test_the_store_examples_of_tools_md_fit_the_research_notes_schema() -> None:
    import ast

    from runtime.repo import load_repo
    from runtime.stores import document_key, validate_document

    bundle = load_repo(PROJECT_ROOT).bundle
    assert bundle is not None
    store = bundle.stores["research-notes"]
    text = (PROJECT_ROOT / "docs/tools.md").read_text(encoding="utf-8")
    section = text.split("### `ctx.store(name)`", 1)[1].split("###", 1)[0]
    assert 'ctx.store("research-notes")' in section
    put = section.split("await notes.put(", 1)[1].split("\n                                  ")[0]
    document = ast.literal_eval(put.rsplit(")", 1)[0])
    validate_document(store, document)  # raises on a document the store refuses
    key = document_key(store, document)
    assert f'notes.get("{key}")' in section and f'notes.delete("{key}")' in section


def test_console_md_says_when_the_browser_tests_skip() -> None:
    text = (PROJECT_ROOT / "docs/console.md").read_text(encoding="utf-8")
    conftest = (PROJECT_ROOT / "tests/console/conftest.py").read_text(encoding="utf-8")
    assert "AMODAL_REQUIRE_BROWSER" in conftest and "pytest.skip" in conftest
    assert "never skip" not in text
    assert "Without Chromium they are skipped" in text and "AMODAL_REQUIRE_BROWSER=1" in text
