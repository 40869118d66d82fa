"""`amodal init`: a new agent repo that validates and shows each file format once."""

from __future__ import annotations

import json
import re
from pathlib import Path

from runtime.exceptions import AmodalError

_FILES: dict[str, str] = {
    "agents/default/AGENT.md": """\
You are the assistant of this repo. Answer the person's questions clearly and
briefly. When a question needs facts from the knowledge base, load the document
first and say which one you used.
""",
    "agents/default/agent.json": json.dumps(
        {
            "name": "Assistant",
            "description": "Answers questions, using the knowledge base when it helps.",
            "persona": {"tone": "friendly"},
            "tools": ["load_knowledge", "load_skill"],
            "skills": ["Say Hello"],
        },
        indent=2,
    )
    + "\n",
    "agents/main/AGENT.md": """\
You are the operator console of this repo: you can use every agent, skill,
store and tool it defines.
""",
    "skills/say-hello/SKILL.md": """\
# Skill: Say Hello
Trigger: the person greets you.

Greet the person in one short sentence and offer one thing you can do next.
""",
    "knowledge/about.md": """\
# Knowledge: About This Repo

Each folder under agents/ is an agent; AGENT.md is its prompt and agent.json its
configuration. Run `amodal validate` after every change.
""",
    ".gitignore": ".amodal/\n",
}


_TOUR_FILES: dict[str, str] = {
    "agents/writer/AGENT.md": """\
You are the writer. Turn the notes or the request you are given into a short, clear
draft: plain words, short sentences, no filler.
""",
    "agents/writer/agent.json": json.dumps(
        {"name": "Writer", "description": "Turns notes into a short, clear draft."}, indent=2
    )
    + "\n",
    "evals/first.yaml": """\
# Cases `amodal eval` runs: each is one message in a fresh session, and what the reply
# must show. Run it again after you change an agent, then compare the two runs:
# `amodal eval --compare previous latest`. The format is in docs/evals.md.
agent: default
cases:
  - name: greets back
    message: Hello!
    expect:
      reply_contains: hello
      max_tool_calls: 3
  - name: the writer drafts without tools
    agent: writer
    message: Write one sentence inviting the team to Friday's demo.
    expect:
      reply_contains: demo
      max_tool_calls: 0
""",
}
"""What the README's tour uses: a second agent to root a chat on, a first eval suite."""


def init_repo(path: Path, *, tour: bool = True) -> list[Path]:
    """Write a new agent repo at `path`; refuses to touch an existing repo. `tour` False
    leaves out the writer and the eval suite (`amodal import`: the imported agents are the
    repo's, and one named `writer` keeps its name)."""
    if (path / "amodal.json").exists():
        raise AmodalError(f"{path / 'amodal.json'} already exists: this is an agent repo already")
    written = []
    for relative, text in _new_files(path, tour).items():
        target = path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def files_to_init(path: Path, *, tour: bool = True) -> list[str]:
    """The files `init_repo(path)` would write (relative; those not there already)."""
    return list(_new_files(path, tour))


def _new_files(path: Path, tour: bool) -> dict[str, str]:
    name = re.sub(r"[^a-z0-9-]+", "-", path.resolve().name.lower()).strip("-") or "agents"
    files = {
        "amodal.json": json.dumps({"name": name, "version": "0.1.0"}, indent=2) + "\n",
        **_FILES,
        **(_TOUR_FILES if tour else {}),
    }
    return {relative: text for relative, text in files.items() if not (path / relative).exists()}
