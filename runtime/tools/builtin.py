"""The tools every bundle can build: protocol tools, skills, knowledge, stores, files and
custom tools.

Descriptions come from the registry, the one source of tool names and words.
"""

from __future__ import annotations

import logging
from typing import Any

from runtime.repo.bundle import Bundle
from runtime.repo.registry import ASK_CHOICE, FILE_TOOLS, LOAD_KNOWLEDGE, LOAD_SKILL, STOP_EXECUTION
from runtime.storage import DocumentStorage
from runtime.surface.resolution import Surface
from runtime.tools import Tool, ToolContext, ToolError
from runtime.tools.files import Propose, file_tools
from runtime.tools.store_tools import store_tools

logger = logging.getLogger("amodal")


async def _signal(arguments: dict[str, Any], context: ToolContext) -> Any:
    # Protocol tools end the run or the turn; the loop handles them before any handler.
    return {"ok": True}


def protocol_tools(bundle: Bundle) -> dict[str, Tool]:
    registry = bundle.registry
    return {
        STOP_EXECUTION: Tool(
            STOP_EXECUTION,
            registry[STOP_EXECUTION].description,
            {
                "type": "object",
                "properties": {"reason": {"type": "string", "description": "Why you stop."}},
                "additionalProperties": False,
            },
            _signal,
        ),
        ASK_CHOICE: Tool(
            ASK_CHOICE,
            registry[ASK_CHOICE].description,
            {
                "type": "object",
                "properties": {
                    "question": {"type": "string", "minLength": 1},
                    "options": {
                        "type": "array",
                        "items": {"type": "string", "minLength": 1},
                        "minItems": 2,
                        "maxItems": 10,
                    },
                },
                "required": ["question", "options"],
                "additionalProperties": False,
            },
            _signal,
        ),
    }


def skill_tool(bundle: Bundle, surface: Surface) -> Tool:
    names = list(surface.skills)

    async def load_skill(arguments: dict[str, Any], context: ToolContext) -> Any:
        skill = bundle.skills[arguments["name"]]
        file = arguments.get("file")
        if file is None:
            result: dict[str, Any] = {"name": skill.name, "instructions": skill.body}
            if skill.files:
                result["files"] = sorted(skill.files)
            return result
        file = file.removeprefix("./")
        if file not in skill.files:
            listed = ", ".join(sorted(skill.files)) or "none"
            raise ToolError(f"skill {skill.name!r} has no file {file!r}; its files: {listed}")
        return {"name": skill.name, "file": file, "content": skill.files[file]}

    parameters = _name_parameter(names, "The skill's name.")
    parameters["properties"]["file"] = {
        "type": "string",
        "minLength": 1,
        "description": "One of the skill's supporting files (listed when the skill loads), "
        "e.g. references/guide.md; omit it for the skill's instructions.",
    }
    return Tool(
        LOAD_SKILL,
        bundle.registry[LOAD_SKILL].description,
        parameters,
        load_skill,
        idempotent=True,
    )


def knowledge_tool(bundle: Bundle) -> Tool:
    names = sorted(bundle.knowledge)

    async def load_knowledge(arguments: dict[str, Any], context: ToolContext) -> Any:
        document = bundle.knowledge[arguments["name"]]
        return {"name": document.name, "title": document.title, "content": document.body}

    return Tool(
        LOAD_KNOWLEDGE,
        bundle.registry[LOAD_KNOWLEDGE].description,
        _name_parameter(names, "The document's name."),
        load_knowledge,
        idempotent=True,
    )


def build_tools(
    bundle: Bundle,
    surface: Surface,
    *,
    propose: Propose | None = None,
    storage: DocumentStorage | None = None,
) -> dict[str, Tool]:
    """The tools of a run: exactly those of `surface` that this module builds (custom tools,
    `call_subagent`, `request` and MCP tools come from the turn, `runtime.engine.runs`). `propose`
    keeps proposals durably; file tools are built only with it. Store tools keep their
    documents in `storage` and are built only with it."""
    tools = {name: tool for name, tool in protocol_tools(bundle).items() if name in surface.tools}
    if storage is not None:
        tools.update(store_tools(bundle, surface, storage))
    if LOAD_SKILL in surface.tools and surface.skills:
        tools[LOAD_SKILL] = skill_tool(bundle, surface)
    if LOAD_KNOWLEDGE in surface.tools and bundle.knowledge:
        tools[LOAD_KNOWLEDGE] = knowledge_tool(bundle)
    if propose is not None and surface.tools & set(FILE_TOOLS):
        for name, tool in file_tools(bundle, propose).items():
            if name in surface.tools:
                tools[name] = tool
    return dict(sorted(tools.items()))


def _name_parameter(names: list[str], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": names, "description": description}},
        "required": ["name"],
        "additionalProperties": False,
    }
