"""Property: any agent repo, valid or broken, loads into findings, never an exception, and
the same files always give the same findings and the same bundle version.

Where `test_mutations.py` damages the example repo, this builds repos from nothing:
amodal.json, agents (AGENT.md with frontmatter and templates, agent.json, agent.py,
CONTEXT.md), skills, stores, knowledge, custom tools and connections, each drawn
valid, subtly wrong (unknown keys, wrong types, unknown references, odd names,
duplicate names) or broken (bad JSON and YAML, template syntax errors, Python that
fails or exits, files that are empty, huge, not UTF-8, or symlinks that loop, dangle
or lead out of the repo).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import LoadResult, load_repo
from runtime.repo.formats import TONES
from tests.repo._helpers import check_findings


@dataclass(frozen=True)
class Link:
    """A symlink to `target` (relative to the link's folder, or absolute)."""

    target: str


Entry = bytes | Link
Files = dict[str, Entry]

AGENT_NAMES = ["default", "main", "writer", "helper", "Writer", "bad name", "a" * 70, "ünï", "-x"]
SKILL_NAMES = ["Craft Greeting", "craft greeting", "Research", "", "x" * 300]
STORE_NAMES = ["notes", "research-notes", "Bad_Name", "9lives", "cache"]
TOOL_NAMES = ["word_count", "charge", "Bad-Tool", "load_skill", "_hidden"]
BUILTIN = ["load_skill", "load_knowledge", "read_file", "write_file", "request", "stop_execution"]
KNOWN_TOOLS = BUILTIN + TOOL_NAMES + ["store__notes__get", "store__notes__put", "nope__tool"]

text = st.text(max_size=30)
scalars = st.none() | st.booleans() | st.integers(-5, 300) | st.floats(allow_nan=False) | text
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


def entries(names: list[str]) -> st.SearchStrategy[Any]:
    """A list entry: a name, `{"name": ...}`, or something that is neither."""
    name = st.sampled_from(names)
    return st.one_of(
        name,
        st.builds(lambda n: {"name": n}, name),
        st.builds(lambda n: {"name": n, "conditional": "x"}, name),
        st.builds(lambda n: {"name": n, "extra": 1}, name),
        scalars,
    )


agent_fields: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=50) | st.integers(),
        "description": st.text(max_size=80) | st.just("x" * 1100),
        "role": st.sampled_from(["planner", "Reviewer", "custom role", "", "!!", "x" * 30]),
        "persona": st.fixed_dictionaries(
            {},
            optional={
                "tone": st.sampled_from([*TONES, "angry"]),
                "personality": text,
                "mood": text,
            },
        ),
        "tools": st.lists(entries(KNOWN_TOOLS), max_size=4) | scalars,
        "skills": st.lists(entries(SKILL_NAMES), max_size=3),
        "subagents": st.lists(entries(AGENT_NAMES), max_size=3),
        "mcp": st.lists(entries(["files", "search"]), max_size=2),
        "connections": st.lists(entries(["crm", "billing"]), max_size=2),
        "stores": st.dictionaries(
            st.sampled_from(STORE_NAMES),
            st.sampled_from(["read", "rw", "write", {"mode": "rw"}, {"mode": "x"}, 3]),
            max_size=2,
        ),
        "maxToolCalls": st.integers(-5, 300) | st.just("10"),
        "modelTier": st.sampled_from(["simple", "default", "advanced", "huge", None]),
        "modelSettings": st.fixed_dictionaries(
            {},
            optional={"temperature": st.floats(-1, 3), "maxTokens": st.integers(-1, 10**6)},
        ),
        "maxDepth": st.integers(0, 7),
        "timeout": st.integers(0, 700),
        "targetOutputMin": st.integers(0, 5000),
        "targetOutputMax": st.integers(0, 5000),
        "toolz": json_values,
    },
)


def json_file(value: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """A JSON file of `value`, or one that is broken in a way people break JSON."""
    good = value.map(lambda v: json.dumps(v, indent=2).encode())
    return st.one_of(
        good,
        good,
        good.map(lambda data: data[: len(data) // 2]),  # cut short
        good.map(lambda data: data.replace(b'"', b"'", 2)),  # single quotes
        good.map(lambda data: data + b",\n"),  # trailing comma
        st.sampled_from([b"", b"null", b"[]", b"\xff\xfe", b"[" * 5000, b'{"a": 1, "a": 2}']),
        json_values.map(lambda v: json.dumps(v).encode()),
    )


TEMPLATES = [
    "You help people write.",
    "",
    "   \n",
    "## Prompt\nDo the work.\n\n## Config\ntools: [x]\n",
    "Page: {{ scope.page }}.{% if scope.mission %} Mission.{% endif %}",
    "{% if scope.page %}never closed",
    "{{ scope.__class__.__mro__ }}",
    "{{ " + "(" * 200 + " }}",
    "{% raw %}{{ literal }}{% endraw %}",
    "{{ undefined_name.attr }}",
    "x" * 300_000,
]
FRONTMATTER = [
    "",
    "---\ndisplayName: Writer\ndescription: Writes.\n---\n",
    "---\ntools: [load_skill, nope]\nskills: [Research]\n---\n",
    "---\na: [unclosed\n---\n",
    "---\n- a list\n---\n",
    "---\na: &a [*a]\n---\n",
    "---\ndisplayName: 3\n---\n",
    "---\n",
]
agent_md = st.builds(
    lambda front, body: (front + body).encode(),
    st.sampled_from(FRONTMATTER),
    st.sampled_from(TEMPLATES),
)

AGENT_PY = [
    "agent = {}\n",
    "agent = 3\n",
    "",
    "tools = []\nagent = {}\n",
    "def ok(ctx):\n    return True\n\n"
    "agent = {'tools': [{'name': 'load_skill', 'conditional': ok}]}\n",
    "async def no(ctx):\n    return True\n\n"
    "agent = {'tools': [{'name': 'load_skill', 'conditional': no}]}\n",
    "agent = {'tools': [{'name': 'load_skill', 'conditional': 3}]}\n",
    "agent = {'stores': {'notes': {'mode': 'rw', 'conditional': lambda ctx: True}}}\n",
    "class Gate:\n    def __call__(self, ctx):\n        return True\n\n"
    "agent = {'skills': [{'name': 'Research', 'conditional': Gate()}]}\n",
    "raise ValueError('boom')\n",
    "raise SystemExit(2)\n",
    "import sys\nsys.exit(1)\n",
    "def broken(:\n",
    "agent = {}\nagent['skills'] = [agent]\n",
    "agent = {'tools': ['load_skill'] * 500}\n",
    "agent = {'name': object()}\n",
    "x = 1 / 0\n",
    "agent = {'conditional': print}\n",
]
agent_py = st.one_of(
    st.sampled_from(AGENT_PY),
    agent_fields.map(lambda fields: f"agent = {fields!r}\n"),
).map(str.encode)


@st.composite
def agent_folder(draw: st.DrawFn, name: str) -> Files:
    folder = f"agents/{name}"
    files: Files = {}
    if draw(st.integers(0, 9)):  # sometimes an agent folder without AGENT.md
        files[f"{folder}/AGENT.md"] = draw(agent_md)
    if draw(st.booleans()):
        files[f"{folder}/agent.json"] = draw(json_file(agent_fields))
    if draw(st.integers(0, 3)) == 0:
        files[f"{folder}/agent.py"] = draw(agent_py)
    if draw(st.integers(0, 3)) == 0:
        files[f"{folder}/CONTEXT.md"] = draw(st.sampled_from(TEMPLATES)).encode()
    if draw(st.integers(0, 7)) == 0:
        files[f"{folder}/notes.txt"] = b"stray file"
    return files


skill_md = st.sampled_from(
    [
        "# Skill: {name}\nTrigger: when asked\n\nBody.\n",
        "---\nname: {name}\ndescription: Does it.\nallowedTools: [load_knowledge, nope]\n---\nBody",
        "---\nname: {name}\nallowedTools: 3\n---\n",
        "No name at all.\n",
        "---\nname: [unclosed\n---\n",
        "# Skill: {name}\n{{% if %}}\n",
    ]
)


@st.composite
def skills(draw: st.DrawFn) -> Files:
    files: Files = {}
    for index, name in enumerate(draw(st.lists(st.sampled_from(SKILL_NAMES), max_size=3))):
        body = draw(skill_md).format(name=name)
        files[f"skills/skill-{index}/SKILL.md"] = body.encode()
    return files


field_types = st.sampled_from(
    ["string", "number", "boolean", "datetime", "enum", "array", "object", "date", 3]
)
store_field = st.fixed_dictionaries(
    {"type": field_types},
    optional={
        "nullable": st.booleans() | text,
        "values": st.lists(text, max_size=3) | text,
        "min": st.integers(-5, 5) | text,
        "max": st.integers(-5, 50),
        "item": st.just({"type": "string"}) | st.just({"type": "nope"}),
        "fields": st.just({"a": {"type": "string"}}) | st.just({}),
    },
)
store_json = st.fixed_dictionaries(
    {
        "entity": st.fixed_dictionaries(
            {
                "name": st.sampled_from(["Note", "", 3]),
                "key": st.sampled_from(["{id}", "note:{id}", "{missing}", "plain", "{id", 7]),
                "schema": st.dictionaries(st.sampled_from(["id", "title", "due"]), store_field),
            }
        )
    },
    optional={
        "ttl": st.integers(-1, 10**9) | text,
        "history": st.fixed_dictionaries({"versions": st.integers(-1, 200)}),
        "shared": st.booleans() | text,
        "name": st.sampled_from(STORE_NAMES),
        "backend": text,
    },
)
tool_json = st.fixed_dictionaries(
    {"description": text},
    optional={
        "parameters": st.sampled_from(
            [{"type": "object"}, {"type": "nope"}, {"properties": 3}, []]
        ),
        "confirm": st.booleans() | text,
        "timeout": st.integers(-1, 700),
        "extra": scalars,
    },
)
HANDLERS = [
    "async def handler(args, ctx):\n    return {'ok': True}\n",
    "def handler(args, ctx):\n    return 1\n",
    "async def handler(args):\n    return 1\n",
    "handler = 3\n",
    "",
    "raise SystemExit(3)\n",
    "async def handler(args, ctx:\n",
]
SPECS = [
    {"baseUrl": "https://api.example.com", "auth": {"type": "none"}},
    {"baseUrl": "ftp://x", "auth": {"type": "magic"}},
    {"protocol": "mcp", "transport": "stdio", "command": "true"},
    {"protocol": "mcp", "transport": "carrier-pigeon"},
    {"baseUrl": "env:MISSING_URL", "contextInjection": [{"from": "context:x", "in": "header"}]},
]
config = st.fixed_dictionaries(
    {"name": st.sampled_from(["repo", "", 3]), "version": st.sampled_from(["1", 1])},
    optional={
        "description": text,
        "basePrompt": st.sampled_from(["Be brief.", "{{ broken", ""]),
        "models": st.sampled_from(
            [{"main": "gpt-x"}, {"main": {"model": "m", "baseUrl": "env:MISSING"}}, {"huge": 1}]
        ),
        "limits": st.sampled_from(
            [{"maxToolCalls": 5}, {"maxRequestBytes": 10}, {"maxToolCalls": "many"}]
        ),
        "auth": st.sampled_from(
            [{"apiKeys": [{"key": "env:K", "claims": {"sub": "a"}}]}, {"jwt": {"key": 3}}]
        ),
        "delegation": st.sampled_from([{"maxRunsPerTurn": 3}, {"maxConcurrent": -1}]),
        "mcp": st.sampled_from([{"servers": {}}, {"servers": {"Bad Name": {}}}, []]),
        "fileTools": st.sampled_from([{"root": "."}, {"root": "/"}, {"nope": 1}]),
        "pages": json_values,
        "modles": json_values,
    },
)
LINK_TARGETS = ["/etc/hostname", "../../../outside", "loop", ".", "..", "/nonexistent", "AGENT.md"]


# ---------------------------------------------------------------- sound repos

SOUND_TEMPLATES = [
    "You help people write.",
    "Page: {{ scope.page }}.{% if scope.mission %} Mission.{% endif %}",
    "## Prompt\nDo the work.\n\n## Notes\nFor people.\n",
    "{% raw %}{{ literal }}{% endraw %} stays as written.",
    "x" * 300_000,
]
SOUND_STORE = {
    "entity": {
        "name": "Entry",
        "key": "entry:{id}",
        "schema": {
            "id": {"type": "string", "min": 1},
            "due": {"type": "datetime", "nullable": True},
            "level": {"type": "enum", "values": ["low", "high"]},
        },
    },
    "history": {"versions": 2},
}


def dump(value: Any) -> bytes:
    return json.dumps(value, indent=2).encode()


def some(items: list[str]) -> st.SearchStrategy[list[str]]:
    """A list drawn from `items` (empty when there are none)."""
    return st.lists(st.sampled_from(items), unique=True) if items else st.just([])


@st.composite
def sound_repos(draw: st.DrawFn) -> Files:
    """A repo that is meant to load: every reference resolves, every file is well formed."""
    stores = draw(some(["notes", "research-notes"]))
    tools = draw(some(["word_count", "charge"]))
    skills = draw(some(["Research", "Craft Greeting"]))
    agents = draw(some(["default", "writer", "helper"]))
    files: Files = {"amodal.json": dump({"name": "repo", "version": "1", "limits": {}})}
    for name in stores:
        files[f"stores/{name}.json"] = dump(SOUND_STORE)
    for name in tools:
        tool = {"description": "Does it.", "confirm": name == "charge"}
        files[f"tools/{name}/tool.json"] = dump(tool)
        files[f"tools/{name}/handler.py"] = HANDLERS[0].encode()
    for index, name in enumerate(skills):
        files[f"skills/skill-{index}/SKILL.md"] = f"# Skill: {name}\n\nHow to do it.\n".encode()
    for index in range(draw(st.integers(0, 2))):
        files[f"knowledge/doc-{index}.md"] = f"# Doc {index}\n\nFacts.\n".encode()
    for name in agents:
        folder = f"agents/{name}"
        files[f"{folder}/AGENT.md"] = draw(st.sampled_from(SOUND_TEMPLATES)).encode()
        specialists = [agent for agent in agents if agent not in (name, "default")]
        fields = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "description": st.text(max_size=40),
                    "role": st.sampled_from(["planner", "Reviewer", "custom role"]),
                    "persona": st.fixed_dictionaries({"tone": st.sampled_from(sorted(TONES))}),
                    "tools": some([*tools, "load_skill", "load_knowledge"]),
                    "skills": some(skills),
                    "subagents": some(specialists),
                    "stores": st.dictionaries(
                        st.sampled_from(stores), st.sampled_from(["read", "rw"])
                    )
                    if stores
                    else st.just({}),
                    "maxToolCalls": st.integers(1, 200),
                    "modelTier": st.sampled_from(["simple", "default", "advanced"]),
                },
            )
        )
        where = draw(st.sampled_from(["agent.json", "agent.py", "nowhere"]))
        if where == "agent.json":
            files[f"{folder}/agent.json"] = dump(fields)
        elif where == "agent.py":
            files[f"{folder}/agent.py"] = f"agent = {fields!r}\n".encode()
        if draw(st.booleans()):
            files[f"{folder}/CONTEXT.md"] = draw(st.sampled_from(SOUND_TEMPLATES[:3])).encode()
    return files


@st.composite
def flawed_repos(draw: st.DrawFn) -> Files:
    """A sound repo with one or two broken parts, the way a person's edit breaks one."""
    files = draw(sound_repos())
    chaos = draw(chaotic_repos())
    for path in draw(st.lists(st.sampled_from(sorted(chaos)), max_size=3)) if chaos else []:
        files[path] = chaos[path]
    return files


# ---------------------------------------------------------------- anything


@st.composite
def chaotic_repos(draw: st.DrawFn) -> Files:
    """Any mixture of valid, wrong and broken parts."""
    files: Files = {}
    if draw(st.integers(0, 9)):  # sometimes no amodal.json at all
        files["amodal.json"] = draw(json_file(config))
    for name in draw(st.lists(st.sampled_from(AGENT_NAMES), max_size=4, unique=True)):
        files.update(draw(agent_folder(name)))
    files.update(draw(skills()))
    for name in draw(st.lists(st.sampled_from(STORE_NAMES), max_size=2, unique=True)):
        files[f"stores/{name}.json"] = draw(json_file(store_json))
    for name in draw(st.lists(st.sampled_from(TOOL_NAMES), max_size=2, unique=True)):
        files[f"tools/{name}/tool.json"] = draw(json_file(tool_json))
        if draw(st.integers(0, 4)):
            files[f"tools/{name}/handler.py"] = draw(st.sampled_from(HANDLERS)).encode()
        else:
            files[f"tools/{name}/handler.ts"] = b"export async function handler() {}\n"
    for index in range(draw(st.integers(0, 2))):
        files[f"knowledge/doc-{index}.md"] = draw(
            st.sampled_from([b"# Knowledge: Facts\n\nWater is wet.\n", b"", b"\xff\xfe", b"x"])
        )
    if draw(st.integers(0, 4)) == 0:
        files["connections/crm/spec.json"] = draw(json_file(st.sampled_from(SPECS)))
    for _ in range(draw(st.integers(0, 2))):  # symlinks where the loader looks
        place = draw(
            st.sampled_from(
                [
                    "agents/linked",
                    "agents/default/AGENT.md",
                    "agents/default/agent.json",
                    "skills/linked/SKILL.md",
                    "stores/linked.json",
                    "knowledge/linked.md",
                    "tools/linked",
                    "agents/default/CONTEXT.md",
                ]
            )
        )
        files[place] = Link(draw(st.sampled_from(LINK_TARGETS)))
    return files


def write(root: Path, files: Files) -> None:
    for relative, entry in sorted(files.items()):
        path = root / relative
        if path.is_symlink() or path.exists():
            continue  # a symlinked folder may already hold it: keep what is there
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue  # the parent is a file or a link that leads nowhere useful
        if isinstance(entry, Link):
            os.symlink(path.name if entry.target == "loop" else entry.target, path)
        elif path.parent.is_dir():
            path.write_bytes(entry)


def findings(result: LoadResult) -> tuple[Any, ...]:
    version = result.bundle.version if result.bundle is not None else None
    return result.errors, result.warnings, version


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.one_of(sound_repos(), flawed_repos(), chaotic_repos()), st.booleans())
def test_any_repo_loads_into_findings_the_same_every_time(files: Files, offline: bool) -> None:
    with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
        write(Path(first), files)
        write(Path(second), files)

        result = load_repo(first, environ={}, offline=offline)
        again = load_repo(first, environ={}, offline=offline)
        elsewhere = load_repo(second, environ={}, offline=offline)

    check_findings(result)
    assert findings(again) == findings(result)
    assert findings(elsewhere) == findings(result)


def test_the_fuzzer_writes_what_it_draws(tmp_path: Path) -> None:
    # The property above is only as good as the repos it writes: a sanity check of `write`.
    files: Files = {
        "amodal.json": b'{"name": "r", "version": "1"}',
        "agents/default/AGENT.md": b"You help.",
        "agents/linked": Link("default"),
        "agents/default/CONTEXT.md": Link("loop"),
    }
    write(tmp_path, files)

    assert (tmp_path / "agents/linked/AGENT.md").read_bytes() == b"You help."
    assert (tmp_path / "agents/default/CONTEXT.md").is_symlink()
    result = load_repo(tmp_path, environ={})
    check_findings(result)
    shutil.rmtree(tmp_path / "agents")
