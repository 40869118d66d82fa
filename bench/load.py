"""Cold load + validate of a large generated agent repo (SPEC 13, workload d).

Generates a deterministic repo (50 agents, each with AGENT.md, agent.json and an
agent.py predicate; 200 skills; 50 stores; 100 knowledge documents; a few custom
tools) into a temporary folder, checks that it validates, then times:

- `runtime.load_repo(path)` in this process, a fresh load each run;
- a new Python process that only imports `runtime` (what every CLI call pays);
- a new Python process that imports `runtime` and loads the repo;
- `amodal --repo PATH validate`, the command a person runs.

Run from the project root:

    python -m bench.load            # 15 runs each, a table
    python -m bench.load --quick    # 5 runs each
    python -m bench.load --json     # one JSON object, for machines
    python -m bench.load --profile  # also the top 15 cumulative entries of one load
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import math
import os
import pstats
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGET_MS = 150.0
DEFAULT_RUNS = 15
QUICK_RUNS = 5
DEFAULT_SEED = 20261130


@dataclass(frozen=True)
class Size:
    agents: int = 50  # including `default`; `main` comes on top
    skills: int = 200
    stores: int = 50
    knowledge: int = 100
    tools: int = 5


# ---------------------------------------------------------------- generating the repo

_TOPICS = (
    "billing", "shipping", "returns", "pricing", "onboarding", "security", "compliance",
    "analytics", "support", "inventory", "payroll", "legal", "marketing", "research",
    "procurement", "forecasting", "hiring", "training", "quality", "logistics",
)  # fmt: skip
_VERBS = ("Check", "Draft", "Review", "Summarise", "Compare", "Explain", "Plan", "Audit")
_ROLES = ("planner", "designer", "builder", "tester", "reviewer", "researcher", "Triage Lead")
_TONES = ("neutral", "friendly", "concise", "formal", "playful", "teacher", "technical")
_WORDS = (
    "account customer order invoice report policy request record summary detail "
    "status history owner team deadline budget risk estimate source answer"
).split()


def _sentence(rng: random.Random, words: int = 12) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def _paragraph(rng: random.Random, sentences: int = 4) -> str:
    return " ".join(_sentence(rng, rng.randint(8, 16)) for _ in range(sentences))


def _store_schema(rng: random.Random, key_field: str) -> dict[str, Any]:
    schema: dict[str, Any] = {key_field: {"type": "string"}}
    kinds = ["string", "number", "boolean", "datetime", "enum", "array", "object"]
    for index in range(rng.randint(4, 7)):  # 5-8 fields with the key
        kind = rng.choice(kinds)
        spec: dict[str, Any] = {"type": kind}
        if kind == "enum":
            spec["values"] = ["low", "medium", "high"][: rng.randint(1, 3)]
        elif kind == "number" and rng.random() < 0.5:
            spec.update(min=0, max=rng.randint(10, 1000))
        elif kind == "array":
            spec["item"] = {"type": rng.choice(["string", "number"])}
        elif kind == "object":
            spec["fields"] = {"name": {"type": "string"}, "count": {"type": "number"}}
        if rng.random() < 0.3:
            spec["nullable"] = True
        schema[f"{kind}_{index}"] = spec
    return schema


def generate_repo(root: Path, size: Size = Size(), seed: int = DEFAULT_SEED) -> None:
    """Write the benchmark repo under `root`; the same seed always writes the same bytes."""
    rng = random.Random(seed)
    files: dict[str, str] = {}

    def put_json(relative: str, data: Any) -> None:
        files[relative] = json.dumps(data, indent=2) + "\n"

    put_json(
        "amodal.json",
        {
            "name": "bench-large",
            "version": "1.0.0",
            "description": "A generated repo for the load benchmark.",
            "models": {"main": "gpt-4o-mini", "simple": {"model": "gpt-4o-mini"}},
            "limits": {"maxToolCalls": 30},
        },
    )

    tool_names = [f"tool_{index:02d}" for index in range(size.tools)]
    for name in tool_names:
        put_json(
            f"tools/{name}/tool.json",
            {
                "description": f"{_sentence(rng, 6)} ({name})",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What to look up."},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                    },
                    "required": ["query"],
                    "additionalProperties": False,
                },
                "confirm": rng.random() < 0.3,
                "timeout": rng.choice([10, 30, 60]),
            },
        )
        files[f"tools/{name}/handler.py"] = (
            "async def handler(args: dict, ctx) -> dict:\n"
            '    return {"query": args["query"], "results": []}\n'
        )

    store_names = [f"{_TOPICS[index % len(_TOPICS)]}-{index:02d}" for index in range(size.stores)]
    for index, name in enumerate(store_names):
        key_field = "id" if index % 2 else "slug"
        store: dict[str, Any] = {
            "entity": {
                "name": name.split("-")[0].title() + "Record",
                "key": "{id}" if index % 2 else f"{name.split('-')[0]}:{{slug}}",
                "schema": _store_schema(rng, key_field),
            }
        }
        if index % 3 == 0:
            store["ttl"] = 86_400 * rng.randint(1, 30)
        if index % 4 == 0:
            store["history"] = {"versions": rng.randint(1, 10)}
        if index % 10 == 0:
            store["shared"] = True
        put_json(f"stores/{name}.json", store)

    def store_tool(store: str, op: str) -> str:
        return f"store__{store.replace('-', '_')}__{op}"

    skill_names = []
    for index in range(size.skills):
        topic = _TOPICS[index % len(_TOPICS)]
        name = f"{rng.choice(_VERBS)} {topic.title()} {index:03d}"
        skill_names.append(name)
        allowed = [store_tool(rng.choice(store_names), "query"), rng.choice(tool_names)]
        body = (
            f"{_paragraph(rng)}\n\n## Steps\n\n"
            + "\n".join(f"{step}. {_sentence(rng)}" for step in range(1, 6))
            + f"\n\n## Examples\n\n{_paragraph(rng, 3)}\n"
        )
        folder = f"skills/{topic}-{index:03d}"
        if index % 2 == 0:  # heading form; every other one also carries allowedTools
            front = f"---\nallowedTools: [{', '.join(allowed)}]\n---\n" if index % 4 == 0 else ""
            files[f"{folder}/SKILL.md"] = (
                f"{front}# Skill: {name}\nTrigger: the person asks about {topic}.\n\n{body}"
            )
        else:  # frontmatter form
            files[f"{folder}/SKILL.md"] = (
                f"---\nname: {name}\ndescription: {_sentence(rng, 10)}\n"
                f"allowedTools: [{', '.join(allowed)}]\n---\n\n{body}"
            )

    for index in range(size.knowledge):
        topic = _TOPICS[index % len(_TOPICS)]
        prefix = "Knowledge: " if index % 2 else ""
        sections = "\n\n".join(
            f"## {rng.choice(_VERBS)} {topic}\n\n{_paragraph(rng, 5)}" for _ in range(4)
        )
        files[f"knowledge/{topic}-{index:03d}.md"] = (
            f"# {prefix}{topic.title()} Guide {index:03d}\n\n{_paragraph(rng)}\n\n{sections}\n"
        )

    # Agent `index` (default is 0) is about topic `index`, in its folder name and display name.
    specialists = [
        f"{_TOPICS[index % len(_TOPICS)]}-agent-{index:02d}" for index in range(1, size.agents)
    ]
    for index, name in enumerate(["default", *specialists]):
        _write_agent(files, rng, index, name, specialists, skill_names, store_names, tool_names)
    files["agents/main/AGENT.md"] = f"You are the operator console.\n\n{_paragraph(rng)}\n"
    put_json("agents/main/agent.json", {"tools": ["read_file", "list_files"]})

    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _write_agent(
    files: dict[str, str],
    rng: random.Random,
    index: int,
    name: str,
    specialists: list[str],
    skill_names: list[str],
    store_names: list[str],
    tool_names: list[str],
) -> None:
    base = f"agents/{name}"
    topic = _TOPICS[index % len(_TOPICS)]
    files[f"{base}/AGENT.md"] = (
        f"# {name}\n\n## Prompt\n\nYou are the {topic} specialist of the team. "
        f"{_paragraph(rng)}\n\n"
        "{% if scope.page %}\nThe person is looking at the {{ scope.page }} page.\n{% endif %}\n"
        "Address the customer as {{ scope.customer | default('the customer') }}.\n\n"
        + "\n".join(f"- {_sentence(rng)}" for _ in range(6))
        + f"\n\n{_paragraph(rng, 5)}\n\n## Notes for maintainers\n\n{_paragraph(rng, 2)}\n"
    )
    if index % 4 == 0:
        files[f"{base}/CONTEXT.md"] = (
            "{% if scope.topic %}\nThe current topic is {{ scope.topic }}.\n{% endif %}\n"
            "{% if scope.deadline %}\nAnswer before {{ scope.deadline }}.\n{% endif %}\n"
        )
    others = [other for other in specialists if other != name]
    config: dict[str, Any] = {
        "name": f"{topic.title()} Agent {index:02d}",
        "description": _sentence(rng, 10)[:120],
        "role": rng.choice(_ROLES),
        "persona": {"tone": rng.choice(_TONES), "personality": _paragraph(rng, 2)},
        "skills": rng.sample(skill_names, rng.randint(4, 8)),
        "subagents": rng.sample(others, 10 if name == "default" else rng.randint(0, 3)),
        "maxToolCalls": rng.randint(5, 40),
        "modelTier": rng.choice(["simple", "default", "advanced"]),
    }
    files[f"{base}/agent.json"] = json.dumps(config, indent=2) + "\n"
    read_store, write_store = rng.sample(store_names, 2)
    write_tool = f"store__{write_store.replace('-', '_')}__put"
    # agent.py owns `tools` and `stores`, agent.json the rest: no field is set twice, so the
    # load logs no `agent_definition_overrides_json`.
    files[f"{base}/agent.py"] = f'''\
"""Permissions read verified claims, never the client-controlled request context."""


def is_manager(ctx):
    return ctx.claims.get("role") == "manager"


def on_{topic}_page(ctx):
    return ctx.is_subagent or ctx.context.get("page") == "{topic}"


agent = {{
    "tools": [
        "load_skill",
        "load_knowledge",
        {{"name": "{rng.choice(tool_names)}", "conditional": on_{topic}_page}},
        {{"name": "{write_tool}", "conditional": is_manager}},
    ],
    "stores": {{
        "{read_store}": "read",
        "{write_store}": {{"mode": "rw", "conditional": is_manager}},
    }},
}}
'''


# ---------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Timing:
    """Wall-clock samples, and the CPU time (this process and its children) of each run.

    CPU time is what to compare when the machine is busy with other work: wall time
    then includes waiting for a core, CPU time mostly does not.
    """

    label: str
    samples_ms: tuple[float, ...]
    cpu_ms: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p95(self) -> float:
        """Nearest-rank 95th percentile: with 15 runs, the slowest but none."""
        ordered = sorted(self.samples_ms)
        return ordered[math.ceil(0.95 * len(ordered)) - 1]

    def as_json(self) -> dict[str, Any]:
        return {
            "median_ms": round(self.median, 2),
            "p95_ms": round(self.p95, 2),
            "min_ms": round(min(self.samples_ms), 2),
            "max_ms": round(max(self.samples_ms), 2),
            "cpu_median_ms": round(statistics.median(self.cpu_ms), 2),
            "samples_ms": [round(sample, 2) for sample in self.samples_ms],
            "cpu_ms": [round(sample, 2) for sample in self.cpu_ms],
        }


def _cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _time(label: str, runs: int, once: Callable[[], None]) -> Timing:
    samples, cpu = [], []
    for _ in range(runs):
        gc.collect()  # each run starts from the same heap, outside the timing
        start, start_cpu = time.perf_counter(), _cpu_seconds()
        once()
        samples.append((time.perf_counter() - start) * 1000)
        cpu.append((_cpu_seconds() - start_cpu) * 1000)
    return Timing(label, tuple(samples), tuple(cpu))


def _run_ok(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")


def measure(repo: Path, runs: int) -> list[Timing]:
    import runtime

    def load() -> None:
        if not runtime.load_repo(repo).ok:
            raise SystemExit("the generated repo stopped validating during the benchmark")

    python = sys.executable
    amodal = Path(python).with_name("amodal")
    load_code = "import sys, runtime; sys.exit(0 if runtime.load_repo(sys.argv[1]).ok else 1)"
    timings = [
        _time("load_repo (in process)", runs, load),
        _time("process: import runtime", runs, lambda: _run_ok([python, "-c", "import runtime"])),
        _time(
            "process: import + load_repo",
            runs,
            lambda: _run_ok([python, "-c", load_code, str(repo)]),
        ),
    ]
    if amodal.exists():
        timings.append(
            _time(
                "amodal validate (CLI)",
                runs,
                lambda: _run_ok([str(amodal), "--repo", str(repo), "validate"]),
            )
        )
    return timings


def profile(repo: Path, top: int = 15) -> str:
    """The top `top` entries by cumulative time of one fresh in-process load.

    cProfile's default (wall-clock) timer: a CPU-time timer costs a system call per
    event and distorts the profile far more than a busy machine does.
    """
    import runtime

    profiler = cProfile.Profile()
    profiler.enable()
    runtime.load_repo(repo)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def check_valid(repo: Path) -> dict[str, Any]:
    """Load once and describe the repo; exit if it does not validate."""
    import runtime

    result = runtime.load_repo(repo)
    if result.bundle is None:
        problems = "\n".join(f"  {error}" for error in result.errors[:20])
        raise SystemExit(f"the generated repo does not validate:\n{problems}")
    bundle = result.bundle
    files = [path for path in repo.rglob("*") if path.is_file()]
    return {
        "agents": len(bundle.agents),
        "agents_with_agent_py": sum(
            (repo / "agents" / n / "agent.py").is_file() for n in bundle.agents
        ),
        "agents_with_context": sum(agent.context is not None for agent in bundle.agents.values()),
        "skills": len(bundle.skills),
        "stores": len(bundle.stores),
        "knowledge": len(bundle.knowledge),
        "custom_tools": len(bundle.tools),
        "files": len(files),
        "bytes": sum(path.stat().st_size for path in files),
        "warnings": len(result.warnings),
        "version": bundle.version,
    }


def _table(repo: dict[str, Any], timings: list[Timing], runs: int) -> str:
    lines = [
        f"repo: {repo['agents']} agents ({repo['agents_with_agent_py']} with agent.py, "
        f"{repo['agents_with_context']} with CONTEXT.md), {repo['skills']} skills, "
        f"{repo['stores']} stores, {repo['knowledge']} knowledge documents, "
        f"{repo['custom_tools']} custom tools; {repo['files']} files, "
        f"{repo['bytes'] / 1024:.0f} KiB; version {repo['version']}; "
        f"{repo['warnings']} warnings",
        f"{runs} runs each, times in ms",
        "",
        f"{'measurement':<30} {'median':>8} {'p95':>8} {'min':>8} {'max':>8} {'cpu med':>8}",
    ]
    for timing in timings:
        lines.append(
            f"{timing.label:<30} {timing.median:>8.1f} {timing.p95:>8.1f} "
            f"{min(timing.samples_ms):>8.1f} {max(timing.samples_ms):>8.1f} "
            f"{statistics.median(timing.cpu_ms):>8.1f}"
        )
    load = timings[0]
    verdict = "met" if load.median < TARGET_MS else "MISSED"
    lines += [
        "",
        f"target: in-process load median under {TARGET_MS:.0f} ms: {verdict}",
        f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs: "
        "wall times above the CPU times mean the runs waited for a core",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--runs", type=int, default=None, help=f"runs each (default {DEFAULT_RUNS})"
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS} runs each")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--profile", action="store_true", help="profile one load with cProfile")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="generator seed")
    parser.add_argument(
        "--keep", type=Path, help="generate into this (new or empty) folder and keep it"
    )
    args = parser.parse_args(argv)
    runs = args.runs or (QUICK_RUNS if args.quick else DEFAULT_RUNS)
    if runs < 1:
        parser.error("--runs must be at least 1")

    if args.keep is not None:
        if args.keep.exists() and any(args.keep.iterdir()):
            parser.error(f"--keep {args.keep}: the folder is not empty")
        repo = args.keep
        repo.mkdir(parents=True, exist_ok=True)
    else:
        repo = Path(tempfile.mkdtemp(prefix="amodal-bench-"))
    try:
        generate_repo(repo, seed=args.seed)
        described = check_valid(repo)
        timings = measure(repo, runs)
        profiled = profile(repo) if args.profile else None
    finally:
        if args.keep is None:
            shutil.rmtree(repo, ignore_errors=True)

    if args.json:
        report = {
            "benchmark": "load",
            "runs": runs,
            "seed": args.seed,
            "python": sys.version.split()[0],
            "load_average": os.getloadavg()[0],
            "target_ms": TARGET_MS,
            "target_met": timings[0].median < TARGET_MS,
            "repo": described,
            "results": {timing.label: timing.as_json() for timing in timings},
        }
        if profiled is not None:
            report["profile"] = profiled
        print(json.dumps(report, indent=2))
    else:
        print(_table(described, timings, runs))
        if profiled is not None:
            print("\nprofile of one load (top 15 by cumulative time, in seconds):\n")
            print(profiled.rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
