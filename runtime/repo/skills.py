"""skills/<dir>/SKILL.md: named instructions an agent can load on demand."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from runtime.repo import _markdown
from runtime.repo._reader import Reader
from runtime.repo._report import Source
from runtime.repo.bundle import SkillDefinition
from runtime.repo.formats import SkillFrontmatter

SKILLS_DIR = "skills"
MAX_SUPPORTING_FILE_BYTES = 1_000_000
MAX_SUPPORTING_FILES = 200
_SKILL_HEADING = re.compile(r"^Skill:\s*(.+)$", re.IGNORECASE)
_TRIGGER = re.compile(r"^Trigger:\s*(.*)$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class LoadedSkills:
    skills: list[LoadedSkill]
    broken: frozenset[str]  # names (or folders) of skills that failed to load


@dataclass(frozen=True, slots=True)
class LoadedSkill:
    skill: SkillDefinition
    folder: str
    source: Source  # the frontmatter, for the lines of `allowedTools` entries


def load_skills(reader: Reader) -> LoadedSkills:
    if not reader.is_dir(SKILLS_DIR):
        return LoadedSkills([], frozenset())
    loaded = []
    broken = set()
    for name, kind in reader.listing(SKILLS_DIR).items():
        relative = f"{SKILLS_DIR}/{name}"
        if kind != "dir":
            reader.report.warn(relative, "ignored: a skill is a folder with a SKILL.md")
        elif not reader.is_file(f"{relative}/SKILL.md"):
            reader.report.warn(relative, "ignored: the folder has no SKILL.md")
        else:
            load = partial(_load_skill, reader, f"{relative}/SKILL.md", name)
            skill = reader.unit(relative, load)
            if skill is not None:
                loaded.append(skill)
            else:
                broken.add(name)
                broken.update(_heading_name(reader.files.get(f"{relative}/SKILL.md", b"")))
    _check_unique(reader, loaded)
    return LoadedSkills(loaded, frozenset(broken))


def _heading_name(data: bytes) -> list[str]:
    """The `# Skill:` name of a file that failed to load, so references to it are not
    reported as unknown on top of its own error."""
    heading = _markdown.first_heading(_markdown.split(data.decode("utf-8", "replace")).body)
    match = _SKILL_HEADING.match(heading.title) if heading else None
    return [match.group(1).strip()] if match else []


def _load_skill(reader: Reader, relative: str, folder: str) -> LoadedSkill | None:
    report = reader.report
    text = reader.read(relative)
    if text is None:
        return None
    document = _markdown.split(text)
    if document.unclosed_frontmatter:
        report.error(relative, "the frontmatter opened by `---` on line 1 is never closed", line=1)
        return None
    source = Source(relative, document.frontmatter or "", "yaml", first_line=2)
    errors_before = len(report.errors)
    data = report.parse_yaml(source) if document.frontmatter else {}
    if data is None:
        if len(report.errors) > errors_before:
            return None
        data = {}  # frontmatter of blank lines or comments only
    if not isinstance(data, dict):
        report.error(relative, "the frontmatter must be YAML key: value pairs", line=2)
        return None
    front = report.validate(SkillFrontmatter, data, source)
    if front is None:
        return None

    heading = _markdown.first_heading(document.body)
    heading = heading if heading is not None and heading.level == 1 else None
    match = _SKILL_HEADING.match(heading.title) if heading else None
    name = match.group(1).strip() if match else (front.name or "").strip()
    if not name:
        report.error(
            relative,
            "the skill has no name: start the body with `# Skill: <Name>` or "
            "set `name` in the frontmatter",
            line=document.body_line,
        )
        return None
    description = front.description or (
        _heading_description(document.body, heading.index) if match and heading else ""
    )
    skill = SkillDefinition(
        name=name,
        description=" ".join(description.split()),
        body=document.body.strip(),
        allowed_tools=front.allowed_tools,
        file=relative,
        files=_supporting_files(reader, relative.rpartition("/")[0]),
    )
    return LoadedSkill(skill, folder, source)


def _supporting_files(reader: Reader, folder: str) -> dict[str, str]:
    """The skill folder's other text files, which `load_skill(name, file)` returns.

    They are read with the repo like every definition (so they are in the bundle version
    and hot reload sees them); files that are not UTF-8 text, too large, hidden, or past
    the count limit are left out with a warning that says so.
    """
    files: dict[str, str] = {}
    for inside, entry in _files_below(os.path.join(reader.root, folder)):
        relative = f"{folder}/{inside}"
        if inside == "SKILL.md":
            continue
        if len(files) >= MAX_SUPPORTING_FILES:
            reader.report.warn(
                relative, f"ignored: a skill serves at most {MAX_SUPPORTING_FILES} files"
            )
            break
        if entry.stat(follow_symlinks=False).st_size > MAX_SUPPORTING_FILE_BYTES:
            reader.report.warn(
                relative,
                f"ignored: larger than {MAX_SUPPORTING_FILE_BYTES:,} bytes, so load_skill "
                "does not serve it",
            )
            continue
        data = reader.read_bytes(relative)
        if data is None:
            continue
        try:
            files[inside] = data.decode("utf-8")
        except UnicodeDecodeError:
            reader.report.warn(relative, "ignored: not UTF-8 text, so load_skill does not serve it")
    return files


def _files_below(folder: str, prefix: str = "") -> Iterator[tuple[str, os.DirEntry[str]]]:
    """The regular files below `folder` as (path inside it, entry), in sorted path order;
    hidden names and `__pycache__` are skipped, links are not followed. (os.scandir: a
    repo of hundreds of skills walks every skill folder on each load.)"""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from _files_below(entry.path, f"{prefix}{entry.name}/")
        elif entry.is_file(follow_symlinks=False):
            yield prefix + entry.name, entry


def _heading_description(body: str, heading_index: int) -> str:
    """The optional `Trigger:` line after the heading and the text before the first `##`."""
    parts = []
    for line in body.splitlines()[heading_index + 1 :]:
        if line.startswith("##"):
            break
        trigger = _TRIGGER.match(line.strip())
        parts.append(trigger.group(1) if trigger else line)
    return "\n".join(parts)


def _check_unique(reader: Reader, loaded: list[LoadedSkill]) -> None:
    first: dict[str, LoadedSkill] = {}
    for item in loaded:
        key = item.skill.name.lower()
        if key in first:
            other = first[key].skill
            reader.report.error(
                item.skill.file,
                f"skill name {item.skill.name!r} is already "
                f"used by {other.file} ({other.name!r}); skill names are unique "
                "ignoring case",
            )
        else:
            first[key] = item
