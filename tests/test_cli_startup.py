"""`amodal` starts fast: each command imports only what it uses (issue 29).

People run `amodal validate` in pre-commit hooks and `amodal inspect` while they write
prompts. These tests run real commands in a fresh interpreter and read `sys.modules`
afterwards: the behaviour (what got imported), not a timing a busy machine would break.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from runtime.cli import COMMANDS, main

EXAMPLE = Path(__file__).resolve().parents[1]

HEAVY = (
    "fastapi",
    "starlette",
    "uvicorn",
    "openai",
    "anthropic",
    "httpx",
    "mcp",
    "opentelemetry",
    "rich",
    "runtime.api",
    "runtime.engine",
    "runtime.events",
    "runtime.server",
    "runtime.storage",
)
"""What a command that only reads or writes files must never import (the runtime's own
MCP client module is allowed to `inspect`: it shows what the servers offer, and imports
the `mcp` SDK only to start one)."""

_RUN = """
import json, sys
from runtime.cli import main
code = 0
try:
    main(sys.argv[1:], prog_name="amodal")
except SystemExit as exit:
    code = exit.code or 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _run(*args: str, cwd: Path = EXAMPLE) -> tuple[int, set[str], str]:
    """Run `amodal ARGS` in a fresh interpreter: its exit code, imported modules, stdout."""
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        # The test session points OPENAI_BASE_URL at a scripted server: name its model.
        env={**os.environ, "MODEL_MAIN": "scripted"},
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], set(report["modules"]), done.stdout


def _heavy(modules: set[str]) -> list[str]:
    return sorted(
        name for name in modules if any(name == h or name.startswith(h + ".") for h in HEAVY)
    )


def test_help_imports_no_command_and_no_loader() -> None:
    code, modules, out = _run("--help")
    assert code == 0 and "validate" in out and "serve" in out
    assert _heavy(modules) == []
    # Listing the commands imports none of them, nor the loader and its pydantic formats.
    assert not {"runtime.repo", "pydantic", "jinja2", "yaml"} & modules
    assert not [name for name in modules if name.startswith("runtime.cli.") and
                name not in ("runtime.cli._lazy", "runtime.cli._shared")]  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ("validate",),
        ("validate", "--json"),
        ("agents",),
        ("agents", "--json"),
        ("models",),
        ("inspect", "reviewer"),  # an agent that uses no MCP server: nothing to start
        ("schema", "agent"),
    ],
)
def test_repo_commands_never_import_the_model_server_or_mcp_stacks(args: tuple[str, ...]) -> None:
    code, modules, out = _run(*args)
    assert code == 0, out
    assert out or args[0] == "validate"
    assert _heavy(modules) == []


def test_validate_imports_the_loader_and_nothing_that_runs_or_resolves_agents() -> None:
    code, modules, _ = _run("validate")
    assert code == 0
    assert "runtime.repo.loader" in modules
    assert not [name for name in modules if name.startswith(("runtime.outside", "runtime.surface"))]


def test_a_failing_validate_is_as_light_and_still_lists_the_error(tmp_path: Path) -> None:
    (tmp_path / "amodal.json").write_text('{"name": "x", "version": "1.0.0", "modls": {}}\n')
    code, modules, out = _run("validate", cwd=tmp_path)
    assert code == 1
    assert "amodal.json:1" in out and "modls" in out
    assert _heavy(modules) == []


def test_init_and_import_stay_light(tmp_path: Path) -> None:
    code, modules, _ = _run("init", str(tmp_path / "new"), cwd=tmp_path)
    assert code == 0 and (tmp_path / "new" / "amodal.json").is_file()
    assert _heavy(modules) == []

    source = tmp_path / "claude" / ".claude" / "agents"
    source.mkdir(parents=True)
    (source / "helper.md").write_text(
        "---\nname: helper\ndescription: Helps with things.\n---\nYou help.\n"
    )
    code, modules, out = _run(
        "import", "claude-code", str(source), "--into", str(tmp_path / "new"), "--dry-run",
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0 and "helper" in out
    assert _heavy(modules) == []


def test_every_table_row_names_its_command_and_its_own_summary() -> None:
    context = click.Context(main)
    for name, row in COMMANDS.items():
        command = row.load()
        assert command.name in (name, name + "_", "import_group"), name
        assert main.get_command(context, name) is command
        # The summary --help prints from the table is the one the command would print.
        for limit in (45, 60, 200):
            assert row.short_help(limit) == command.get_short_help_str(limit), name


def test_an_unknown_command_is_refused_and_imports_no_command() -> None:
    result = CliRunner().invoke(main, ["valdate"])
    assert result.exit_code == 2
    assert "No such command 'valdate'" in result.output
    code, modules, _ = _run("valdate")
    assert code == 2 and "runtime.repo" not in modules


def test_only_commands_that_exit_at_once_turn_the_garbage_collector_off() -> None:
    # Counted in a fresh process from the moment the command's module is imported: the
    # loader's imports and the load take about 80 young-generation passes with the
    # collector on, and none with it off.
    probe = (
        "import gc, json, sys\n"
        "passes = []\n"
        "def count(phase, info):\n"
        "    if phase == 'start' and 'runtime.cli.repo_commands' in sys.modules:\n"
        "        passes.append(info)\n"
        "gc.callbacks.append(count)\n"
        + _RUN.replace("print(json.dumps(", "print(len(passes), gc.isenabled(), json.dumps(")
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "validate"],
        capture_output=True, text=True, cwd=EXAMPLE, check=False,
    )  # fmt: skip
    passes, enabled, _ = done.stderr.strip().splitlines()[-1].split(" ", 2)
    assert int(passes) <= 1, passes  # one may fall after the command, the collector on again
    assert enabled == "True"  # back on after the command, for whoever runs the CLI in process

    # A command that keeps running (a server, a chat) keeps the collector on: its garbage
    # must be collected as usual for as long as it runs.
    context = click.Context(main)
    for name, row in COMMANDS.items():
        command = main.get_command(context, name)
        assert command is not None
        wrapped = hasattr(command.invoke, "__wrapped__")
        assert wrapped is row.one_shot, name
    assert {name for name, row in COMMANDS.items() if not row.one_shot} >= {
        "chat", "serve", "mcp", "eval"
    }  # fmt: skip


def test_one_shot_commands_skip_pydantic_s_plugin_scan_and_give_the_switch_back() -> None:
    # pydantic looks for plugins in every installed distribution's entry points when it
    # builds its first validator; a command that checks files and exits never scans.
    probe = "import os, sys\n" + _RUN.replace(
        "print(json.dumps(",
        "from pydantic.plugin import _loader\n"
        "print(_loader._plugins is None, os.environ.get('PYDANTIC_DISABLE_PLUGINS'),"
        " json.dumps(",
    )
    environ = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}

    def run(*args: str, env: dict[str, str]) -> tuple[str, str]:
        done = subprocess.run(
            [sys.executable, "-c", probe, *args],
            capture_output=True, text=True, cwd=EXAMPLE, env=env, check=False,
        )  # fmt: skip
        never_scanned, switch, _ = done.stderr.strip().splitlines()[-1].split(" ", 2)
        return never_scanned, switch

    # Validated without a scan, and the switch is gone again afterwards (for a caller
    # running the CLI in process, whose own models keep their plugins).
    assert run("validate", env=environ) == ("True", "None")
    # A switch the person set is theirs: kept as it was.
    assert run("validate", env={**environ, "PYDANTIC_DISABLE_PLUGINS": "logfire"}) == (
        "False", "logfire"
    )  # fmt: skip


def test_validate_imports_eval_and_automation_formats_only_for_a_repo_with_them(
    tmp_path: Path,
) -> None:
    from runtime.repo import loader
    from runtime.repo.automations import AUTOMATIONS_DIR
    from runtime.repo.evals import EVALS_DIR

    # The loader checks for the folders by these names without importing their modules.
    assert (loader._AUTOMATIONS_DIR, loader._EVALS_DIR) == (AUTOMATIONS_DIR, EVALS_DIR)
    (tmp_path / "amodal.json").write_text('{"name": "x", "version": "1.0.0"}\n')
    code, modules, out = _run("validate", cwd=tmp_path)
    assert code == 0, out
    assert not {"runtime.repo.eval_suites", "runtime.repo.automations", "croniter"} & modules

    code, modules, out = _run("validate")  # the example repo has eval suites
    assert code == 0, out
    assert "runtime.repo.eval_suites" in modules
