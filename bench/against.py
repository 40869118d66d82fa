"""This tree against another checkout (the previous main), side by side in one run (issue 29).

Measures, for both trees, interleaved round by round so drift on a shared machine falls
on both:

- CLI start-up: `python -c pass` (the floor), importing click, PyYAML and pydantic (the
  floor of `validate`), `amodal --help`, `amodal validate` on the example repo and on
  the large generated repo of `bench.load`;
- (d) cold load of the large repo: the first `load_repo` in a fresh process (imports
  done), and later loads in that process;
- (e) reload after a one-file edit of the large repo: `LiveBundle.reload()` right after
  rewriting `agents/default/AGENT.md`, checked to see the edit (the server's watcher
  adds its debounce on top, see bench/reload.py);

Rows marked "no memo" run with AMODAL_NO_CACHE=1: every template and tool schema is
checked again, as on the first run after each file changed (the other rows find the
checks that passed in the tree's own memo, warmed with its bytecode; the previous main
has no memo, so both rows are the same work there).

It prints each as CPU milliseconds (the process and its children: steadier than wall
time on a busy machine), the wall time next to it, and the ratio this / other. Then a
by-phase profile of one cold load of this tree (walk, read, parse, validate, bundle).

    python -m bench.against /work/baseline            # 7 rounds
    python -m bench.against /work/baseline --quick    # 3 rounds
    python -m bench.against /work/baseline --json

Both trees run on this interpreter with PYTHONPATH set to the tree, from a neutral
working directory, with bytecode cached (in a temporary PYTHONPYCACHEPREFIX, warmed
before timing) as an installed package has it.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.load import generate_repo

HERE = Path(__file__).resolve().parents[1]
EXAMPLE_FILES = (
    "amodal.json", "agents", "skills", "stores", "knowledge", "tools", "connections", "servers",
    "evals",
)  # fmt: skip
CLI = "import sys; from runtime.cli import main; main(sys.argv[1:], prog_name='amodal')"
_FLOOR = "import click, yaml, pydantic.main, pydantic.plugin._loader"
NO_MEMO = "import os; os.environ['AMODAL_NO_CACHE'] = '1'; "
"""Turns off the memo of passed checks (runtime/repo/_checks.py) for one process: the
rows marked "no memo" are what a first run after a change of every file costs."""

# Runs in a fresh process of each tree: (d) and (e), one JSON line on stdout.
WORKER = r"""
import json, sys, time
from pathlib import Path
t0 = time.process_time()
import runtime
from runtime.repo.reload import LiveBundle
big, edited, loads, edits = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
imported = time.process_time() - t0

def timed(call):
    cpu, wall = time.process_time(), time.perf_counter()
    value = call()
    return value, (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000

result, first_cpu, first_wall = timed(lambda: runtime.load_repo(big))
assert result.ok, [str(e) for e in result.errors]
later = [timed(lambda: runtime.load_repo(big))[1:] for _ in range(loads)]
live = LiveBundle.load(Path(edited))
agent_md = Path(edited) / "agents" / "default" / "AGENT.md"
original = agent_md.read_text()
reloads = []
for index in range(edits):
    marker = f"Marker line {index} of the reload benchmark."
    agent_md.write_text(original.replace("## Prompt\n", f"## Prompt\n\n{marker}\n", 1))
    ok, cpu, wall = timed(live.reload)
    assert ok and marker in live().agents["default"].prompt.source, live.reload_error
    reloads.append((cpu, wall))
print(json.dumps({
    "import_cpu_ms": imported * 1000,
    "first_load": [first_cpu, first_wall],
    "later_loads": later,
    "reloads": reloads,
}))
"""


@dataclass
class Samples:
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)

    def add(self, cpu: float, wall: float) -> None:
        self.cpu.append(cpu)
        self.wall.append(wall)

    def summary(self) -> dict[str, float]:
        return {
            "cpu_min_ms": round(min(self.cpu), 2),
            "cpu_median_ms": round(statistics.median(self.cpu), 2),
            "wall_min_ms": round(min(self.wall), 2),
            "wall_median_ms": round(statistics.median(self.wall), 2),
            "runs": len(self.cpu),
        }


def _environment(tree: Path, pycache: Path, memo: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONDONTWRITEBYTECODE", "AMODAL_NO_CACHE")
    }
    env["PYTHONPATH"] = str(tree)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env["AMODAL_CACHE_DIR"] = str(memo)  # each tree its own memo, warmed with the bytecode
    return env


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """Run a process; its CPU and wall milliseconds, and its stdout (exit 0 required)."""
    cpu, wall = _child_cpu(), time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall_ms, cpu_ms = (time.perf_counter() - wall) * 1000, (_child_cpu() - cpu) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])}... failed ({done.returncode}):\n{done.stderr}")
    return cpu_ms, wall_ms, done.stdout


def _commands(example: Path, big: Path) -> dict[str, list[str]]:
    python = sys.executable
    return {
        "python -c pass (floor)": [python, "-c", "pass"],
        # What validate cannot do without: its CLI, parser and formats' libraries (and the
        # package metadata pydantic reads for its plugins). The same in both trees.
        "floor: click, yaml, pydantic imported": [python, "-c", _FLOOR],
        "amodal --help": [python, "-c", CLI, "--help"],
        "amodal validate (example repo)": [python, "-c", CLI, "--repo", str(example), "validate"],
        "amodal validate (example, no memo)": [
            python, "-c", NO_MEMO + CLI, "--repo", str(example), "validate"
        ],
        "amodal validate (large repo)": [python, "-c", CLI, "--repo", str(big), "validate"],
    }  # fmt: skip


def _copy_example(target: Path) -> Path:
    target.mkdir(parents=True)
    for name in EXAMPLE_FILES:
        source = HERE / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy(source, target / name)
    return target


def measure(other: Path, rounds: int, work: Path) -> dict[str, Any]:
    trees = {"this": HERE, "other": other.resolve()}
    example = _copy_example(work / "example")
    big = work / "big"
    generate_repo(big)
    envs = {
        name: _environment(tree, work / f"pyc-{name}", work / f"memo-{name}")
        for name, tree in trees.items()
    }
    commands = _commands(example, big)
    results: dict[str, dict[str, Samples]] = {name: {} for name in trees}
    for name in trees:  # warm the bytecode caches and the file cache, untimed
        for command in commands.values():
            _run(command, envs[name], work)
    for _ in range(rounds):
        for name in trees:
            for label, command in commands.items():
                cpu, wall, _ = _run(command, envs[name], work)
                results[name].setdefault(label, Samples()).add(cpu, wall)
            edited = work / f"edited-{name}"
            if not edited.exists():
                shutil.copytree(big, edited)
            worker = [sys.executable, "-c", WORKER, str(big), str(edited), "3", "5"]
            _, _, out = _run(worker, envs[name], work)
            found = json.loads(out.strip().splitlines()[-1])
            results[name].setdefault("(d) first load_repo in a process", Samples()).add(
                *found["first_load"]
            )
            for cpu, wall in found["later_loads"]:
                results[name].setdefault("(d) later load_repo, same process", Samples()).add(
                    cpu, wall
                )
            for cpu, wall in found["reloads"]:
                results[name].setdefault("(e) reload after a one-file edit", Samples()).add(
                    cpu, wall
                )
            cold = [sys.executable, "-c", NO_MEMO + WORKER, str(big), str(edited), "3", "0"]
            _, _, out = _run(cold, envs[name], work)
            found = json.loads(out.strip().splitlines()[-1])
            # The first load without the memo imports Jinja2 and jsonschema in this tree
            # (the other imported them with the loader): the later loads compare the work.
            results[name].setdefault("(d) first load_repo, no memo", Samples()).add(
                *found["first_load"]
            )
            for cpu, wall in found["later_loads"]:
                results[name].setdefault("(d) later load_repo, no memo", Samples()).add(cpu, wall)
    return {
        name: {label: samples.summary() for label, samples in rows.items()}
        for name, rows in results.items()
    }


PHASES = {
    "walk": ("scandir", "listdir", "stat", "lstat", "iterdir", "is_dir", "is_file", "pathlib",
             "_stats", "isdir", "islink"),
    "read": ("io.open", "read_bytes", "method 'read'", "decode", "_contents", "open"),
    "parse": ("yaml", "json", "jinja2", "compile", "_markdown", "_positions", "ast.", "exec",
              "templates.py"),
    "validate": ("pydantic", "validate_python", "inspect", "loader.py", "registry.py",
                 "_report.py", "_python.py"),
    "bundle": ("digest", "blake2", "bundle.py", "MappingProxy", "_keep", "hexdigest"),
}  # fmt: skip
"""Profile entries by the phase they belong to: the first phase whose words match wins."""


def phases(repo: Path) -> dict[str, float]:
    """One cold in-process load of this tree, its own time split by phase (ms, unprofiled)."""
    import runtime

    runtime.load_repo(repo)  # imports and pydantic's deferred builds, untimed
    start = time.process_time()
    runtime.load_repo(repo)
    plain_ms = (time.process_time() - start) * 1000
    profiler = cProfile.Profile()
    profiler.enable()
    runtime.load_repo(repo)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    totals = dict.fromkeys([*PHASES, "other"], 0.0)
    for (file, _, function), (_, _, own, _, _) in stats.items():
        where = f"{file} {function}"
        phase = next((p for p, words in PHASES.items() if any(w in where for w in words)), None)
        if phase is None:  # the loaders' own code is their checks; builtins stay "other"
            phase = "validate" if "runtime/repo/" in file else "other"
        totals[phase] += own
    whole = sum(totals.values()) or 1.0
    return {phase: round(plain_ms * own / whole, 2) for phase, own in totals.items()}


def _table(results: dict[str, Any], rounds: int, profile: dict[str, float]) -> str:
    this, other = results["this"], results["other"]
    lines = [
        f"{rounds} rounds, this tree and the other interleaved; CPU ms (min / median) and "
        "wall ms (median); ratio = this / other, CPU min",
        "",
        f"{'measurement':<38} {'this cpu':>15} {'other cpu':>15} {'this wall':>10} "
        f"{'other wall':>10} {'ratio':>6}",
    ]
    for label, mine in this.items():
        theirs = other[label]
        ratio = mine["cpu_min_ms"] / theirs["cpu_min_ms"] if theirs["cpu_min_ms"] else 0
        lines.append(
            f"{label:<38} {mine['cpu_min_ms']:>7.1f} / {mine['cpu_median_ms']:<6.1f}"
            f"{theirs['cpu_min_ms']:>7.1f} / {theirs['cpu_median_ms']:<6.1f}"
            f"{mine['wall_median_ms']:>10.1f} {theirs['wall_median_ms']:>10.1f} {ratio:>6.2f}"
        )
    lines += [
        "",
        "one cold load of this tree by phase (ms of CPU, from a profile scaled to the "
        "unprofiled time): " + ", ".join(f"{phase} {ms:.1f}" for phase, ms in profile.items()),
        f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs: a shared "
        "machine; compare the CPU columns",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.against", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("other", type=Path, help="the other checkout (e.g. a worktree of main)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if not (args.other / "runtime" / "__init__.py").is_file():
        parser.error(f"{args.other}: no runtime/ package there")
    rounds = 3 if args.quick else args.rounds
    work = Path(tempfile.mkdtemp(prefix="amodal-against-"))
    try:
        results = measure(args.other, rounds, work)
        profile = phases(work / "big")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        report = {
            "benchmark": "against",
            "other": str(args.other.resolve()),
            "rounds": rounds,
            "load_average": os.getloadavg()[0],
            "results": results,
            "phases_ms": profile,
        }
        print(json.dumps(report, indent=2))
    else:
        print(_table(results, rounds, profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
