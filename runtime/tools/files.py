"""File tools: read, write, list, glob and grep files under the file-tool root; propose
repo changes.

Agent definitions are out of reach by construction: every path is resolved
(symlinks included) before use and refused when it leaves the file-tool root or
lands in the repo's definitions (agents/, skills/, tools/, stores/, connections/,
amodal.json) or its private folders (.amodal/, .git/). Changes to definitions
can only be proposed with `propose_source_change`, which keeps a patch for a
person to review and never applies it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from runtime.repo.bundle import Bundle
from runtime.tools import Handler, Tool, ToolContext, ToolError
from runtime.tools._search import (
    MAX_GREP_BYTES,
    PatternError,
    Walk,
    compile_glob,
    compile_regex,
    grep_lines,
    literal_prefix,
    looks_binary,
)

PROTECTED = ("agents", "skills", "tools", "stores", "connections", "amodal.json", ".amodal", ".git")
MAX_READ_BYTES = 1_000_000
MAX_LIST_ENTRIES = 500
MAX_GLOB_RESULTS = 200
MAX_GREP_MATCHES = 200

Propose = Callable[[dict[str, Any], ToolContext], Awaitable[None]]


class FileArea:
    """The file-tool root of a bundle and the rules for paths inside it."""

    def __init__(self, bundle: Bundle) -> None:
        self.repo = bundle.root.resolve()
        self.root = (self.repo / bundle.config.file_tools.root).resolve()

    def resolve(self, path: str, *, for_proposal: bool = False) -> Path:
        """The real path for `path` (relative to the root), or ToolError saying why not."""
        if "\0" in path:
            raise ToolError("invalid path")
        base = self.repo if for_proposal else self.root
        target = (base / path).resolve()
        if not target.is_relative_to(base):
            raise ToolError(f"{path!r} is outside the file-tool root; paths are relative to it")
        if not for_proposal and target.is_relative_to(self.repo):
            parts = target.relative_to(self.repo).parts
            if parts and parts[0] in PROTECTED:
                raise ToolError(
                    f"{path!r} is part of the agent repo's definitions or private data: file "
                    "tools cannot read or change it; propose a change with "
                    "propose_source_change instead"
                )
        return target

    def shown(self, target: Path) -> str:
        return target.relative_to(self.root).as_posix() or "."

    def permitted(self, path: Path) -> bool:
        """Whether read_file could read `path` (an entry met while walking the root)."""
        try:
            self.resolve(path.relative_to(self.root).as_posix())
        except (ToolError, ValueError, OSError):
            return False
        return True

    def start(self, path: str) -> Path:
        """The folder (or file) a search starts from: resolved, and unresolved for display."""
        self.resolve(path)  # refuses escapes and protected paths with their reasons
        start = self.root / path
        if not start.exists():
            raise ToolError(f"no file or directory {path!r}")
        return start


READ_ONLY = frozenset({"read_file", "list_files", "glob_files", "grep_files"})
"""The file tools that only look: one a crash interrupted runs again (SPEC 23)."""


def file_tools(bundle: Bundle, propose: Propose) -> dict[str, Tool]:
    """The file tools over the bundle's file-tool root, and `propose_source_change`."""
    files = FileToolHandlers(FileArea(bundle), propose)
    handlers: dict[str, Handler] = {
        "read_file": files.read_file,
        "write_file": files.write_file,
        "list_files": files.list_files,
        "glob_files": files.glob_files,
        "grep_files": files.grep_files,
        "propose_source_change": files.propose_source_change,
    }
    return {
        name: Tool(
            name,
            bundle.registry[name].description,
            PARAMETERS[name],
            handler,
            idempotent=name in READ_ONLY,
        )
        for name, handler in handlers.items()
    }


class FileToolHandlers:
    """What each file tool does, inside one `FileArea`."""

    def __init__(self, area: FileArea, propose: Propose) -> None:
        self.area = area
        self.propose = propose

    async def read_file(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        target = self.area.resolve(arguments["path"])
        if not target.is_file():
            raise ToolError(f"no file {arguments['path']!r}")
        data = await anyio.to_thread.run_sync(_read, target)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ToolError(f"{arguments['path']!r} is not UTF-8 text") from error
        return {
            "path": self.area.shown(target),
            "content": text,
            "truncated": len(data) >= MAX_READ_BYTES,
        }

    async def write_file(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        target = self.area.resolve(arguments["path"])
        if target.is_dir():
            raise ToolError(f"{arguments['path']!r} is a directory")
        data = arguments["content"].encode("utf-8")
        await anyio.to_thread.run_sync(write_atomically, target, data)
        return {"path": self.area.shown(target), "bytes": len(data)}

    async def list_files(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        target = self.area.resolve(arguments.get("path", "."))
        if not target.is_dir():
            raise ToolError(f"no directory {arguments.get('path', '.')!r}")
        entries = []
        for entry in sorted(target.iterdir())[:MAX_LIST_ENTRIES]:
            kind = "dir" if entry.is_dir() else "file"
            entries.append(
                {
                    "name": entry.name,
                    "type": kind,
                    "size": entry.stat().st_size if kind == "file" else None,
                }
            )
        return {"path": self.area.shown(target), "entries": entries}

    async def glob_files(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        pattern = arguments["pattern"].removeprefix("./")
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise ToolError("the pattern is relative to the file-tool root, without '..'")
        try:
            program = compile_glob(pattern)
        except PatternError as error:
            raise ToolError(str(error)) from error
        prefix = literal_prefix(pattern)
        if prefix and not (self.area.root / prefix).is_dir():
            return {"pattern": pattern, "files": [], "truncated": False}
        walk = Walk(self.area.start(prefix or "."), self.area.permitted)
        return await anyio.to_thread.run_sync(self._glob, walk, program, pattern)

    def _glob(self, walk: Walk, program: Any, pattern: str) -> dict[str, Any]:
        files: list[str] = []
        truncated = False
        for path in walk.files():
            relative = path.relative_to(self.area.root).as_posix()
            if program.match(relative):
                if len(files) == MAX_GLOB_RESULTS:
                    truncated = True
                    break
                files.append(relative)
        return {"pattern": pattern, "files": files, "truncated": truncated or walk.truncated}

    async def grep_files(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        try:
            program = compile_regex(arguments["pattern"])
            only = compile_glob(arguments["glob"]) if arguments.get("glob") else None
        except PatternError as error:
            raise ToolError(str(error)) from error
        walk = Walk(self.area.start(arguments.get("path", ".")), self.area.permitted)
        return await anyio.to_thread.run_sync(self._grep, walk, program, only, arguments)

    def _grep(
        self, walk: Walk, program: Any, only: Any, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        matches: list[dict[str, Any]] = []
        searched, read_bytes, truncated = 0, 0, False
        for path in walk.files():
            if only is not None and not _glob_selects(only, arguments["glob"], path, walk.start):
                continue
            if read_bytes >= MAX_GREP_BYTES or len(matches) >= MAX_GREP_MATCHES:
                truncated = True
                break
            data = _read(path)
            read_bytes += len(data)
            if looks_binary(data) or not _is_utf8(data):
                continue
            searched += 1
            shown = path.relative_to(self.area.root).as_posix()
            for found in grep_lines(program, data, MAX_GREP_MATCHES - len(matches)):
                matches.append({"path": shown, "line": found.line, "text": found.text})
        return {
            "pattern": arguments["pattern"],
            "matches": matches,
            "files_searched": searched,
            "truncated": truncated or walk.truncated,
        }

    async def propose_source_change(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        target = self.area.resolve(arguments["path"], for_proposal=True)
        proposal = {
            "proposal_id": f"prop_{uuid.uuid4().hex[:12]}",
            "path": target.relative_to(self.area.repo).as_posix(),
            "content": arguments["content"],
            "reason": arguments["reason"],
        }
        await self.propose(proposal, context)
        return {
            "proposal_id": proposal["proposal_id"],
            "status": "kept for a person to review; nothing was changed",
        }


def _schema(optional: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


_PATH = {"type": "string", "minLength": 1, "description": "Relative to the file-tool root."}
PARAMETERS: dict[str, dict[str, Any]] = {
    "read_file": _schema(path=_PATH),
    "write_file": _schema(path=_PATH, content={"type": "string"}),
    "list_files": _schema(optional=("path",), path={"type": "string"}),
    "glob_files": _schema(
        pattern={
            "type": "string",
            "minLength": 1,
            "description": "Relative to the file-tool root; `**` matches any folders.",
        }
    ),
    "grep_files": _schema(
        optional=("path", "glob"),
        pattern={
            "type": "string",
            "minLength": 1,
            "description": "A regular expression (RE2); `(?i)` ignores case.",
        },
        path={
            "type": "string",
            "minLength": 1,
            "description": "A file or folder to search (default: the whole root).",
        },
        glob={
            "type": "string",
            "minLength": 1,
            "description": "Only files matching this glob, e.g. `*.py` or `src/**/*.ts`.",
        },
    ),
    "propose_source_change": _schema(
        path={
            "type": "string",
            "minLength": 1,
            "description": "Relative to the repo root, e.g. agents/x/AGENT.md.",
        },
        content={"type": "string", "description": "The file's proposed content."},
        reason={"type": "string", "minLength": 1},
    ),
}
"""Each file tool's JSON Schema."""


def _glob_selects(program: Any, pattern: str, path: Path, start: Path) -> bool:
    """A glob with a folder in it matches the path under the search folder; a bare one
    (`*.py`) matches the file name, as in ripgrep."""
    if "/" not in pattern:
        return bool(program.match(path.name))
    base = start if start.is_dir() else start.parent
    return bool(program.match(path.relative_to(base).as_posix()))


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        # A file cut at MAX_READ_BYTES may end inside a character; that is still text.
        return error.start >= len(data) - 3 and len(data) >= MAX_READ_BYTES
    return True


def _read(target: Path) -> bytes:
    with target.open("rb") as handle:
        return handle.read(MAX_READ_BYTES)


def write_atomically(target: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so a reader never sees half a file. A new
    file gets the mode any new file gets (0666 less the umask: 0644 usually, as `amodal
    init` writes); a file written over keeps its mode."""
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        temporary = target.parent / f".{target.name}.{uuid.uuid4().hex[:12]}"
        try:
            # Not mkstemp: its files are 0600 whatever the umask says.
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(handle, "wb") as file:
            with contextlib.suppress(FileNotFoundError):
                os.fchmod(file.fileno(), stat.S_IMODE(target.stat().st_mode))
            file.write(data)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise
