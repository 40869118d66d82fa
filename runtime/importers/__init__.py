"""Importers from other agent tools (SPEC 19): Claude Code and OpenCode.

Each reads its format into drafts; `writer` turns drafts into an agent repo and
`report` says what became of every source file.
"""

from runtime.importers.claude_code import import_claude_code
from runtime.importers.opencode import import_opencode
from runtime.importers.report import ImportReport, Outcome

__all__ = ["ImportReport", "Outcome", "import_claude_code", "import_opencode"]
