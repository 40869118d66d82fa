"""Skills in the Agent Skills layout both tools share: `<name>/SKILL.md` plus its files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runtime.importers._source import SourceError, inside, read_markdown
from runtime.importers.report import Outcome
from runtime.importers.writer import Drafts, SkillDraft
from runtime.repo.skills import MAX_SUPPORTING_FILE_BYTES

# Kept as comments in the imported SKILL.md: they describe the skill and change nothing.
INFORMATIONAL = ("license", "version", "metadata", "compatibility", "author")
_SCRIPTS = (".py", ".sh", ".bash", ".zsh", ".js", ".mjs", ".ts", ".rb", ".ps1", ".pl")

MapTools = Callable[[list[str], list[str]], list[str]]
"""(source tool names, warnings to add to) -> runtime tool names."""


def read_skill(path: Path, tree: Path, drafts: Drafts, map_tools: MapTools) -> None:
    """The skill of `path` (a SKILL.md in `tree`, the source being imported)."""
    relative = path.relative_to(tree).as_posix()
    try:
        document = read_markdown(path, tree)
    except SourceError as error:
        drafts.skipped.append(Outcome("skill", relative, None, reason=str(error)))
        return
    front = document.front or {}
    warnings = [
        f"frontmatter: not valid YAML (an unquoted ': ' in `{key}`); read with the value quoted"
        for key in document.repaired
    ]
    warnings += document.changes
    name = str(front.get("name") or path.parent.name).strip()
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():
        drafts.skipped.append(
            Outcome("skill", relative, None, reason="no `description`: a skill needs one")
        )
        return
    comments = []
    allowed: list[str] = []
    for key, value in front.items():
        if key in ("name", "description"):
            continue
        if key in ("allowed-tools", "allowedTools", "allowed_tools"):
            items = value.split(",") if isinstance(value, str) else list(value or [])
            allowed = map_tools(
                [str(item).strip() for item in items if str(item).strip()], warnings
            )
        elif key in INFORMATIONAL:
            comments.append(f"{key}: {value}")
        else:
            warnings.append(f"{key}: not a skill field here; left out")
    files = _supporting_files(path.parent, tree, warnings)
    drafts.skills.append(
        SkillDraft(
            source=relative,
            name=name,
            description=" ".join(description.split()),
            body=document.body,
            folder=path.parent.name,
            allowed_tools=allowed,
            comments=comments,
            files=files,
            warnings=warnings,
        )
    )


def _supporting_files(folder: Path, tree: Path, warnings: list[str]) -> dict[str, bytes]:
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if relative == "SKILL.md" or not path.is_file():
            continue
        if any(part.startswith(".") or part == "__pycache__" for part in relative.split("/")):
            continue
        if path.is_symlink() or not inside(path, tree):
            warnings.append(f"{relative}: a symbolic link, or outside the source tree; not read")
            continue
        data = path.read_bytes()
        if len(data) > MAX_SUPPORTING_FILE_BYTES:
            warnings.append(f"{relative}: larger than load_skill serves; left out")
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            warnings.append(f"{relative}: not text, and load_skill serves text only; left out")
            continue
        if _is_script(path, data):
            warnings.append(
                f"{relative}: copied for reading; the runtime does not run skill scripts"
            )
        files[relative] = data
    return files


def _is_script(path: Path, data: bytes) -> bool:
    """A script by its extension, its `#!` line or its executable bit (`scripts/review`)."""
    return path.suffix in _SCRIPTS or data.startswith(b"#!") or bool(path.stat().st_mode & 0o111)
