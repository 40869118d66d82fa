"""File tools: read, write and list files under the file-tool root; propose repo changes.

Agent definitions are out of reach by construction: every path is resolved
(symlinks included) before use and refused when it leaves the file-tool root or
lands in the repo's definitions (agents/, skills/, tools/, stores/, connections/,
amodal.json) or its private folders (.amodal/, .git/). Changes to definitions
can only be proposed with `propose_source_change`, which keeps a patch for a
person to review and never applies it.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from runtime.bundle import Bundle
from runtime.tools import Tool, ToolContext, ToolError

PROTECTED = ("agents", "skills", "tools", "stores", "connections", "amodal.json", ".amodal", ".git")
MAX_READ_BYTES = 1_000_000
MAX_LIST_ENTRIES = 500

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


def file_tools(bundle: Bundle, propose: Propose) -> dict[str, Tool]:
    area = FileArea(bundle)
    describe = bundle.registry

    async def read_file(arguments: dict[str, Any], context: ToolContext) -> Any:
        target = area.resolve(arguments["path"])
        if not target.is_file():
            raise ToolError(f"no file {arguments['path']!r}")
        data = await anyio.to_thread.run_sync(_read, target)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ToolError(f"{arguments['path']!r} is not UTF-8 text") from error
        return {
            "path": area.shown(target),
            "content": text,
            "truncated": len(data) >= MAX_READ_BYTES,
        }

    async def write_file(arguments: dict[str, Any], context: ToolContext) -> Any:
        target = area.resolve(arguments["path"])
        if target.is_dir():
            raise ToolError(f"{arguments['path']!r} is a directory")
        data = arguments["content"].encode("utf-8")
        await anyio.to_thread.run_sync(_write_atomically, target, data)
        return {"path": area.shown(target), "bytes": len(data)}

    async def list_files(arguments: dict[str, Any], context: ToolContext) -> Any:
        target = area.resolve(arguments.get("path", "."))
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
        return {"path": area.shown(target), "entries": entries}

    async def propose_source_change(arguments: dict[str, Any], context: ToolContext) -> Any:
        target = area.resolve(arguments["path"], for_proposal=True)
        proposal = {
            "proposal_id": f"prop_{uuid.uuid4().hex[:12]}",
            "path": target.relative_to(area.repo).as_posix(),
            "content": arguments["content"],
            "reason": arguments["reason"],
        }
        await propose(proposal, context)
        return {
            "proposal_id": proposal["proposal_id"],
            "status": "kept for a person to review; nothing was changed",
        }

    path = {"type": "string", "minLength": 1, "description": "Relative to the file-tool root."}
    tools = [
        Tool("read_file", describe["read_file"].description, _schema(path=path), read_file),
        Tool(
            "write_file",
            describe["write_file"].description,
            _schema(path=path, content={"type": "string"}),
            write_file,
        ),
        Tool(
            "list_files",
            describe["list_files"].description,
            _schema(optional=("path",), path={"type": "string"}),
            list_files,
        ),
        Tool(
            "propose_source_change",
            describe["propose_source_change"].description,
            _schema(
                path={
                    "type": "string",
                    "minLength": 1,
                    "description": "Relative to the repo root, e.g. agents/x/AGENT.md.",
                },
                content={"type": "string", "description": "The file's proposed content."},
                reason={"type": "string", "minLength": 1},
            ),
            propose_source_change,
        ),
    ]
    return {tool.name: tool for tool in tools}


def _schema(optional: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


def _read(target: Path) -> bytes:
    with target.open("rb") as handle:
        return handle.read(MAX_READ_BYTES)


def _write_atomically(target: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so a reader never sees half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise
