"""The bundle (SPEC 1): immutable, versioned by every file read, never from an invalid repo."""

from __future__ import annotations

import dataclasses
import shutil

import pydantic
import pytest

from runtime import (
    Bundle,
    DefinitionError,
    DefinitionWarning,
    InvalidRepoError,
    load_bundle,
)

from ._helpers import load, valid

# One file of each kind in the example repo, with an edit that keeps the repo valid.
EDITS = {
    "amodal.json": ('"version": "0.1.0"', '"version": "0.1.1"'),
    "agents/default/AGENT.md": ("You lead", "You run"),
    "agents/default/agent.json": ('"Desk Lead"', '"Desk Chief"'),
    "agents/default/CONTEXT.md": ("They need", "They want"),
    "agents/reviewer/agent.py": ('"maxToolCalls": 8', '"maxToolCalls": 9'),
    "agents/main/agent.json": ('"list_files", ', ""),
    "skills/craft-greeting/SKILL.md": ("one short sentence", "one sentence"),
    "stores/decisions.json": ('"ttl": 2592000', '"ttl": 86400'),
    "knowledge/glossary.md": ("\n", "\n\n"),
    "tools/word_count/tool.json": ("Count the words", "Count words"),
    "tools/word_count/handler.py": ("len(", "len( "),
}


def edit(path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_the_example_repo_is_valid(example_repo):
    bundle = valid(load(example_repo)).bundle

    assert set(bundle.agents) == {"default", "researcher", "reviewer", "writer"}
    assert bundle.root == example_repo.resolve()


def test_version_is_stable_when_nothing_changes(example_repo):
    assert load(example_repo).bundle.version == load(example_repo).bundle.version


def test_version_is_the_same_for_identical_copies(example_repo, tmp_path):
    copy = shutil.copytree(example_repo, tmp_path / "copy")

    assert load(copy).bundle.version == load(example_repo).bundle.version


@pytest.mark.parametrize("relative", sorted(EDITS))
def test_version_changes_when_any_file_changes(example_repo, relative):
    before = valid(load(example_repo)).bundle.version

    edit(example_repo / relative, *EDITS[relative])
    after = valid(load(example_repo)).bundle.version

    assert after != before


def test_version_changes_when_a_file_is_added_or_removed(example_repo):
    original = load(example_repo).bundle.version
    (example_repo / "knowledge/new.md").write_text("# New\n\nText.\n", encoding="utf-8")
    added = valid(load(example_repo)).bundle.version
    (example_repo / "knowledge/new.md").unlink()
    (example_repo / "knowledge/glossary.md").unlink()
    removed = valid(load(example_repo)).bundle.version

    assert len({original, added, removed}) == 3


def test_agent_digest_changes_only_with_the_agents_own_files(example_repo):
    before = load(example_repo).bundle.agents

    edit(example_repo / "agents/reviewer/agent.py", '"maxToolCalls": 8', '"maxToolCalls": 9')
    after = load(example_repo).bundle.agents

    assert after["reviewer"].digest != before["reviewer"].digest
    assert after["default"].digest == before["default"].digest


def test_bundle_and_its_definitions_are_frozen(example_repo):
    bundle = load(example_repo).bundle
    agent = bundle.agents["default"]

    with pytest.raises(dataclasses.FrozenInstanceError):
        bundle.version = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        agent.description = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        agent.tools[0].name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        bundle.skills["Craft Greeting"].body = "other"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        bundle.config.name = "other"  # type: ignore[misc]
    assert isinstance(agent.tools, tuple)


@pytest.mark.parametrize(
    "mapping", ["agents", "skills", "knowledge", "stores", "tools", "registry"]
)
def test_bundle_maps_are_read_only(example_repo, mapping):
    maps = getattr(load(example_repo).bundle, mapping)
    some_value = next(iter(maps.values()))

    with pytest.raises(TypeError):
        maps["intruder"] = some_value
    with pytest.raises(TypeError):
        del maps[next(iter(maps))]


def test_store_schema_of_the_bundle_is_read_only(example_repo):
    schema = load(example_repo).bundle.stores["decisions"].schema

    with pytest.raises(TypeError):
        schema["extra"] = schema["id"]  # type: ignore[index]


def test_bundle_reads_nothing_from_disk_after_loading(example_repo):
    bundle = load_bundle(example_repo)

    shutil.rmtree(example_repo)

    assert bundle.agents["default"].prompt.source.startswith("You lead a small research desk.")
    assert bundle.agents["default"].context is not None
    assert "scope.page" in bundle.agents["default"].context.source
    assert "Greet the person" in bundle.skills["Craft Greeting"].body
    assert bundle.knowledge["glossary"].body


def test_load_bundle_returns_the_bundle_of_a_valid_repo(example_repo):
    assert isinstance(load_bundle(example_repo, environ={}), Bundle)


def test_load_bundle_raises_with_every_error_of_an_invalid_repo(example_repo):
    edit(example_repo / "agents/researcher/agent.json", '"maxToolCalls"', '"maxToolCals"')
    edit(example_repo / "stores/decisions.json", '"key": "{id}"', '"key": "{uid}"')

    with pytest.raises(InvalidRepoError) as raised:
        load_bundle(example_repo)

    files = sorted(error.file for error in raised.value.errors)
    assert files == ["agents/researcher/agent.json", "stores/decisions.json"]
    assert "2 error(s)" in str(raised.value)
    assert "agents/researcher/agent.json:" in str(raised.value)


def test_errors_from_several_files_are_all_reported_at_once(example_repo):
    edit(example_repo / "amodal.json", '"name"', '"nmae"')
    edit(example_repo / "agents/default/agent.json", '"Craft Greeting"', '"craft-greeting"')
    edit(example_repo / "agents/writer/AGENT.md", "maxToolCalls: 6", "maxToolCalls: 600")
    edit(example_repo / "agents/reviewer/agent.py", "def is_manager", "async def is_manager")
    edit(example_repo / "skills/cite-sources/SKILL.md", "store__research_notes__query", "store_x")
    edit(example_repo / "agents/reviewer/AGENT.md", "for accuracy", "for {{ accuracy")
    edit(example_repo / "agents/researcher/agent.json", '"read"', '"reed"')

    result = load(example_repo)

    assert result.bundle is None
    assert {error.file for error in result.errors} == {
        "amodal.json",
        "agents/default/agent.json",
        "agents/researcher/agent.json",
        "agents/reviewer/AGENT.md",
        "agents/reviewer/agent.py",
        "agents/writer/AGENT.md",
        "skills/cite-sources/SKILL.md",
    }
    assert all(error.line is not None for error in result.errors)


def test_a_repo_with_any_error_gives_no_bundle_even_with_warnings(example_repo):
    (example_repo / "agents/draft").mkdir()
    edit(example_repo / "agents/writer/AGENT.md", "maxToolCalls: 6", "maxToolCalls: 0")

    result = load(example_repo)

    assert result.bundle is None
    assert not result.ok
    assert len(result.errors) == 1
    assert [warning.file for warning in result.warnings] == ["agents/draft"]


def test_warnings_of_a_valid_repo_travel_with_the_bundle(example_repo):
    (example_repo / "agents/draft").mkdir()

    result = valid(load(example_repo))

    assert result.ok
    assert result.bundle.warnings == result.warnings
    assert [warning.file for warning in result.warnings] == ["agents/draft"]


def test_findings_print_as_path_line_field_message():
    error = DefinitionError("agents/a/agent.json", "unknown key 'x'", 3, "tools[0].x")
    warning = DefinitionWarning("agents/b", "ignored")

    assert str(error) == "agents/a/agent.json:3: tools[0].x: unknown key 'x'"
    assert str(warning) == "agents/b: ignored"
    assert error.as_json() == {
        "file": "agents/a/agent.json",
        "line": 3,
        "field": "tools[0].x",
        "message": "unknown key 'x'",
    }
