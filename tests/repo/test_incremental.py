"""An incremental reload gives exactly what a cold load gives (issue 29, SPEC 11).

A reload keeps a `LoadCache` and re-parses only the agents, skills, stores, knowledge
documents and custom tools whose files changed. Every step below edits the example
repo on disk, then loads it cold and through the one cache kept across all steps, and
compares everything: the bundle (field by field, predicates by their code), the
version, and every error and warning. Cross-file rules (an agent naming a deleted
skill or store) run over the whole repo on every load, so they must hold the same.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runtime.repo import LoadCache, LoadResult, load_repo
from runtime.repo.reload import LiveBundle


def _plain(value: Any, seen: frozenset[int] = frozenset()) -> Any:
    """A comparable picture of a loaded value: functions by their code, not their identity."""
    if id(value) in seen:
        return "<cycle>"
    seen = seen | {id(value)}
    if isinstance(value, types.FunctionType):
        code = value.__code__
        return ("function", value.__qualname__, code.co_filename, code.co_firstlineno,
                code.co_code, _plain(code.co_consts, seen))  # fmt: skip
    if isinstance(value, types.CodeType):
        return ("code", value.co_name, value.co_code)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value).__name__,
            {
                field.name: _plain(getattr(value, field.name), seen)
                for field in dataclasses.fields(value)
                if field.compare
            },
        )
    if isinstance(value, BaseModel):
        return (type(value).__name__, _plain(dict(value), seen))
    if isinstance(value, Mapping):
        return {str(key): _plain(item, seen) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item, seen) for item in value]
    if isinstance(value, set | frozenset):
        return sorted(repr(_plain(item, seen)) for item in value)
    if isinstance(value, str | int | float | bool | bytes | Path) or value is None:
        return value
    return repr(value)


def _picture(result: LoadResult) -> dict[str, Any]:
    return {
        "bundle": _plain(result.bundle),
        "version": result.bundle.version if result.bundle else None,
        "errors": [str(error) for error in result.errors],
        "warnings": [str(warning) for warning in result.warnings],
    }


def _edit(path: Path, change: Callable[[str], str]) -> None:
    path.write_text(change(path.read_text()))


def test_every_step_of_an_edit_sequence_matches_a_cold_load(example_repo: Path) -> None:
    root = example_repo
    cache = LoadCache()
    first = load_repo(root, cache=cache)
    assert first.ok and cache.misses > 0 and cache.hits == 0

    def same_as_cold(*, ok: bool) -> LoadResult:
        incremental = load_repo(root, cache=cache)
        cold = load_repo(root)
        assert _picture(incremental) == _picture(cold)
        assert incremental.ok is ok, [str(e) for e in incremental.errors]
        return incremental

    again = same_as_cold(ok=True)
    assert cache.misses == 0 and cache.hits > 0  # nothing changed: nothing re-parsed

    steps: list[tuple[str, Callable[[], None], bool]] = [
        ("prompt", lambda: _edit(root / "agents/default/AGENT.md", lambda t: t + "\nBe brief.\n"),
         True),
        ("predicate", lambda: _edit(root / "agents/reviewer/agent.py",
                                    lambda t: t.replace('"maxToolCalls": 8', '"maxToolCalls": 9')),
         True),
        ("delete a skill an agent names", lambda: shutil.rmtree(root / "skills/craft-greeting"),
         False),
        ("add it back", lambda: _write_skill(root, "craft-greeting", "Craft Greeting"), True),
        ("delete a store agents grant",
         lambda: (root / "stores/decisions.json").unlink(), False),
        ("add it back under another schema", lambda: _write_store(root, "decisions"), True),
        ("rename a skill agents name",
         lambda: _edit(root / "skills/cite-sources/SKILL.md",
                       lambda t: t.replace("Cite Sources", "Quote Sources", 1)), False),
        ("name it back",
         lambda: _edit(root / "skills/cite-sources/SKILL.md",
                       lambda t: t.replace("Quote Sources", "Cite Sources", 1)), True),
        ("broken agent.json", lambda: _edit(root / "agents/researcher/agent.json",
                                            lambda t: t.replace("{", "{,", 1)), False),
        ("fixed", lambda: _edit(root / "agents/researcher/agent.json",
                                lambda t: t.replace("{,", "{", 1)), True),
        ("knowledge", lambda: _edit(root / "knowledge/glossary.md", lambda t: t + "\nMore.\n"),
         True),
        ("a new agent", lambda: _write_agent(root, "editor"), True),
        ("a custom tool's schema", lambda: _edit(root / "tools/word_count/tool.json",
                                                 lambda t: t.replace('"object"', '"array"', 1)),
         False),
        ("schema back", lambda: _edit(root / "tools/word_count/tool.json",
                                      lambda t: t.replace('"array"', '"object"', 1)), True),
        ("the agent removed", lambda: shutil.rmtree(root / "agents/editor"), True),
    ]  # fmt: skip
    for name, step, ok in steps:
        step()
        result = same_as_cold(ok=ok)
        assert cache.misses <= 2, name  # only what changed was parsed again
    assert result.bundle is not None and again.bundle is not None
    assert result.bundle.version != again.bundle.version  # the edits stay in the version


def test_a_rewrite_within_one_clock_tick_keeping_the_size_is_still_seen(
    example_repo: Path,
) -> None:
    # Same size, written at once: mtime and size may both be unchanged. The cache compares
    # the bytes of files this recent, as git does for racily clean entries.
    store = example_repo / "stores/decisions.json"
    store.write_text(store.read_text())  # written just now, as by an editor
    cache = LoadCache()
    load_repo(example_repo, cache=cache)
    text, before = store.read_text(), store.stat()
    store.write_text(text.replace('"string"', '"number"', 1))
    # As within one tick of a coarse filesystem clock: the same size and mtime as before.
    os.utime(store, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert store.stat().st_size == before.st_size
    result = load_repo(example_repo, cache=cache)
    assert _picture(result) == _picture(load_repo(example_repo))


def test_a_broken_edit_keeps_the_last_good_bundle_and_names_path_and_line(
    example_repo: Path,
) -> None:
    live = LiveBundle.load(example_repo)
    good = live()
    agent_json = example_repo / "agents/researcher/agent.json"
    original = agent_json.read_text()
    agent_json.write_text(original.replace('"maxToolCalls": 12', '"maxToolCals": 12'))
    assert live.reload() is False
    assert live() is good
    assert live.reload_error is not None
    assert (
        "agents/researcher/agent.json:" in live.reload_error and "maxToolCals" in live.reload_error
    )

    agent_json.write_text(original.replace('"maxToolCalls": 12', '"maxToolCalls": 11'))
    assert live.reload() is True and live.errors == ()
    assert live().agents["researcher"].max_tool_calls == 11
    cold = load_repo(example_repo)
    assert _plain(live()) == _plain(cold.bundle)
    # What did not change is the very object of the last good bundle, not a copy.
    assert live().agents["reviewer"] is good.agents["reviewer"]


def _write_skill(root: Path, folder: str, name: str) -> None:
    (root / "skills" / folder).mkdir()
    (root / "skills" / folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: Greets people warmly.\n---\n\nSay hello.\n"
    )


def _write_store(root: Path, name: str) -> None:
    schema = {"id": {"type": "string"}, "title": {"type": "string"}, "why": {"type": "string"}}
    entity = {"name": "Decision", "key": "{id}", "schema": schema}
    (root / "stores" / f"{name}.json").write_text(json.dumps({"entity": entity}))


def _write_agent(root: Path, name: str) -> None:
    (root / "agents" / name).mkdir()
    (root / "agents" / name / "AGENT.md").write_text("You edit drafts.\n")
    (root / "agents" / name / "agent.json").write_text(
        json.dumps({"description": "Edits drafts.", "skills": ["Cite Sources"]})
    )
