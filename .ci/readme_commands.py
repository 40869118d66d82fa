"""The README's two commands, as a user copies them: `python .ci/readme_commands.py first|test`;
and `check-chat STDOUT STDERR`: did the first command end with the research desk's reply?

Each is the ```sh block right after a `<!-- ci: first command ... -->` or
`<!-- ci: test command ... -->` line of README.md; .ci/run runs them as written, so a
README edit that breaks either fails CI. A marker that is missing, doubled, or not followed
by a sh block is an error here (exit 2), never a silently skipped check.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
KINDS = ("first", "test")
MARKED = re.compile(r"^<!-- ci: (\w+) command\b[^\n]*-->\n```sh\n(.*?)^```$", re.M | re.S)
MARKER = re.compile(r"^<!-- ci: (\w+) command\b", re.M)


def commands(text: str) -> dict[str, str]:
    """Each marked command by kind; ValueError naming what is wrong with the markers."""
    found: dict[str, str] = {}
    for match in MARKED.finditer(text):
        kind, block = match.group(1), match.group(2)
        if kind in found:
            raise ValueError(f"README.md marks two {kind!r} commands")
        found[kind] = block
    marked = MARKER.findall(text)
    if sorted(marked) != sorted(found):
        raise ValueError(
            "README.md: every `<!-- ci: ... command -->` line must be followed at once by "
            "a ```sh block"
        )
    missing = [kind for kind in KINDS if kind not in found]
    if missing:
        raise ValueError(f"README.md marks no {' or '.join(missing)} command for CI to run")
    unknown = sorted(set(found) - set(KINDS))
    if unknown:
        raise ValueError(f"README.md marks unknown commands {unknown}: known are {KINDS}")
    return found


OFFLINE = "amodal: no model configured, using the offline model"


def chat_reply(stdout: str) -> str:
    """The chat's reply: the first command's stdout after pip's last line."""
    lines = stdout.splitlines()
    done = [i for i, line in enumerate(lines) if line.startswith("Successfully installed ")]
    return "\n".join(lines[done[-1] + 1 :] if done else lines).strip()


# amodal's own warnings and errors (pip's are `WARNING:` and `ERROR:`, and a pip error
# fails the command anyway): a validation warning, a log line, click's `Error:`.
TROUBLE = re.compile(r"^amodal: (warning|error)|^[^ ]+: warning: |^Error: |^Traceback", re.M)


# The example desk's team (agents/*: display names), as the question asks for it. The
# offline model answers the same at temperature 0 and names them from the lead's
# CONTEXT.md; a reply naming none of them lost the tour's point.
TEAM = ("Desk Lead", "Researcher", "Writer", "Reviewer")


def chat_problems(stdout: str, stderr: str) -> list[str]:
    """What is wrong with the first command's output: its chat must have printed a reply
    from the offline model that names someone of the team, and nothing a newcomer would
    read as a problem (a warning, an error, a missing extra)."""
    problems = []
    reply = chat_reply(stdout)
    if not reply:
        problems.append("the chat printed no reply")
    elif not any(member.lower() in reply.lower() for member in TEAM):
        problems.append(f"the reply names no one of the team ({', '.join(TEAM)})")
    if OFFLINE not in stderr:
        problems.append("the chat did not say it uses the offline model")
    for line in stderr.splitlines():
        if TROUBLE.search(line):
            problems.append(f"the chat said: {line}")
    return problems


def check_chat(stdout_file: str, stderr_file: str) -> int:
    stdout = Path(stdout_file).read_text(encoding="utf-8", errors="replace")
    stderr = Path(stderr_file).read_text(encoding="utf-8", errors="replace")
    problems = chat_problems(stdout, stderr)
    for problem in problems:
        print(f"ci: README's first command: {problem}", file=sys.stderr)
    if problems:
        print(stderr, file=sys.stderr)
        return 1
    print(f"ci: the README's first command answered: {chat_reply(stdout)[:300]}", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "check-chat":
        return check_chat(argv[1], argv[2])
    if len(argv) != 1 or argv[0] not in KINDS:
        print(
            f"usage: readme_commands.py {'|'.join(KINDS)} | check-chat STDOUT STDERR",
            file=sys.stderr,
        )
        return 2
    try:
        found = commands(README.read_text(encoding="utf-8"))
    except ValueError as error:
        print(f"ci: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(found[argv[0]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
