"""Property: however a valid repo is damaged, loading it gives findings, never an exception.

Each example starts from the example repo, applies a few random mutations (delete a
file, truncate it, corrupt or insert bytes, insert random keys and values into a
JSON object or YAML frontmatter, add a file where the loader looks) and loads the
result. The loader must return a LoadResult whose errors explain every failure: a
bundle exactly when there is no error, each finding pointing into the repo.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import load_repo
from runtime.repo.formats import CONFIG_FIELDS
from tests.repo._helpers import check_findings

Files = dict[str, bytes]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_FILES = (
    "amodal.json", "agents", "skills", "stores", "knowledge", "tools", "connections", "servers",
)  # fmt: skip


def example_files() -> Files:
    files: Files = {}
    for name in EXAMPLE_FILES:
        source = PROJECT_ROOT / name
        paths = [source] if source.is_file() else sorted(source.rglob("*"))
        for path in paths:
            if path.is_file() and "__pycache__" not in path.parts:
                files[path.relative_to(PROJECT_ROOT).as_posix()] = path.read_bytes()
    return files


EXAMPLE = example_files()
PATHS = sorted(EXAMPLE)
# Real keys make a random key far more likely to reach a validator than to be "unknown".
KEYS = sorted(
    CONFIG_FIELDS
    | {"name", "version", "models", "mcp", "limits", "entity", "key", "schema", "type"}
    | {"values", "item", "fields", "mode", "conditional", "allowedTools", "displayName"}
    | {"description", "parameters", "timeout", "confirm", "servers", "memory", "pages"}
)
NEW_FILES = [
    "agents/extra/AGENT.md",
    "agents/extra/agent.json",
    "agents/extra/agent.py",
    "agents/default/agent.py",
    "agents/main/agent.json",
    "skills/extra/SKILL.md",
    "stores/extra.json",
    "stores/Bad_Name.json",
    "knowledge/extra.md",
    "tools/extra/tool.json",
    "tools/extra/handler.py",
    "tools/word_count/handler.ts",
    "connections/crm/spec.json",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["env:MISSING", "env:", "rw", "read", "{id}", "load_skill", "default"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
keys = st.sampled_from(KEYS) | st.text(max_size=12)
# Fragments that have broken loaders before: nothing, null, cycles, deep nesting, templates.
NASTY = [
    "",
    "null",
    "[]",
    '"text"',
    "---\n",
    "---\n# only a comment\n---\n",
    "a: &a [*a]\n",
    "[" * 3000,
    "{{ scope.__class__ }}",
    "{{ " + "(" * 300 + " }}",
    "{% if scope.page %}",
    "async def handler(args):\n    return 1\n",
    "agent = {'tools': [{'name': 'load_skill', 'conditional': print}]}\n",
    "\ufeff",
    "\x00",
]
contents = st.sampled_from(NASTY) | json_values.map(lambda value: json.dumps(value))
picks = st.integers(min_value=0, max_value=10_000)

byte_mutations = st.one_of(
    st.tuples(st.just("delete"), picks),
    st.tuples(st.just("truncate"), picks, st.floats(min_value=0, max_value=1)),
    st.tuples(
        st.just("corrupt"),
        picks,
        st.floats(min_value=0, max_value=1),
        st.binary(min_size=1, max_size=8),
    ),
    st.tuples(
        st.just("unicode"),
        picks,
        st.floats(min_value=0, max_value=1),
        st.text(min_size=1, max_size=12),
    ),
    st.tuples(st.just("new_file"), st.sampled_from(NEW_FILES), st.binary(max_size=60)),
)
structured_mutations = st.one_of(
    st.tuples(st.just("json_key"), picks, picks, keys, json_values),
    st.tuples(st.just("json_value"), picks, picks, json_values),
    st.tuples(st.just("yaml_key"), picks, keys, json_values),
)
nasty_mutations = st.one_of(
    st.tuples(st.just("replace"), picks, contents),
    st.tuples(st.just("insert"), picks, st.floats(min_value=0, max_value=1), contents),
    st.tuples(st.just("new_file"), st.sampled_from(NEW_FILES), contents.map(str.encode)),
)
# One third each, so the rarer nasty fragments still show up within a small example budget.
mutations = st.one_of(byte_mutations, structured_mutations, nasty_mutations)


def apply(files: Files, mutation: tuple[Any, ...]) -> None:
    kind = mutation[0]
    if kind == "new_file":
        files[mutation[1]] = mutation[2]
        return
    if not files:
        return
    paths = sorted(files)
    path = paths[mutation[1] % len(paths)]
    data = files[path]
    if kind == "delete":
        del files[path]
    elif kind == "truncate":
        files[path] = data[: int(len(data) * mutation[2])]
    elif kind == "corrupt":
        at = int(len(data) * mutation[2])
        files[path] = data[:at] + mutation[3] + data[at + len(mutation[3]) :]
    elif kind in ("unicode", "insert"):
        at = int(len(data) * mutation[2])
        files[path] = data[:at] + mutation[3].encode("utf-8", "surrogatepass") + data[at:]
    elif kind == "replace":
        files[path] = mutation[2].encode("utf-8", "surrogatepass")
    elif kind in ("json_key", "json_value"):
        files[path] = _mutate_json(data, mutation)
    elif kind == "yaml_key":
        files[path] = _mutate_frontmatter(data, mutation[2], mutation[3])


def _mutate_json(data: bytes, mutation: tuple[Any, ...]) -> bytes:
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return data  # not JSON (or no longer): the byte-level mutations cover it
    containers: list[Any] = []
    pending = [document]
    while pending:
        node = pending.pop()
        if isinstance(node, dict | list):
            containers.append(node)
            pending.extend(node.values() if isinstance(node, dict) else node)
    target = containers[mutation[2] % len(containers)] if containers else None
    if mutation[0] == "json_key" and isinstance(target, dict):
        target[mutation[3]] = mutation[4]
    elif mutation[0] == "json_value" and isinstance(target, dict) and target:
        keys = sorted(target, key=str)
        target[keys[mutation[2] % len(keys)]] = mutation[3]
    elif mutation[0] == "json_value" and isinstance(target, list) and target:
        target[mutation[2] % len(target)] = mutation[3]
    else:
        document = mutation[-1]
    return json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _mutate_frontmatter(data: bytes, key: str, value: Any) -> bytes:
    line = f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}\n"
    encoded = line.encode("utf-8", "surrogatepass")
    if data.startswith(b"---\n"):
        return b"---\n" + encoded + data[4:]
    return b"---\n" + encoded + b"---\n" + data


def write(root: Path, files: Files) -> None:
    for relative, data in files.items():
        path = root / relative
        if path.is_dir():  # a new file where the mutations left a folder of that name
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_the_unmutated_example_loads_into_a_bundle():
    with tempfile.TemporaryDirectory() as folder:
        write(Path(folder), dict(EXAMPLE))
        result = load_repo(folder, environ={})

    check_findings(result)
    assert result.bundle is not None


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(mutations, min_size=1, max_size=4), st.booleans())
def test_random_mutations_give_collected_errors_never_an_exception(changes, offline):
    files = dict(EXAMPLE)
    for mutation in changes:
        apply(files, mutation)

    with tempfile.TemporaryDirectory() as folder:
        write(Path(folder), files)
        result = load_repo(folder, environ={}, offline=offline)

    check_findings(result)
