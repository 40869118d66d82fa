"""What the runtime takes as text: valid Unicode without the character U+0000.

JSON can carry both (`"\\u0000"`, a lone `"\\ud800"`), but neither survives the
way to a model, a log or a database (PostgreSQL refuses both; UTF-8 cannot
encode a surrogate), so requests and store documents are checked here once,
where they enter, and refused with a message that says where.
"""

from __future__ import annotations


def text_problem(text: str) -> str | None:
    """Why `text` is not text the runtime takes, or None. Never echoes the text."""
    if "\x00" in text:
        return "holds the character U+0000; text cannot hold it"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            code = ord(text[error.start])
            return f"holds an unpaired surrogate (U+{code:04X}); send valid Unicode text"
    return None


def json_problem(value: object, where: str = "") -> str | None:
    """Where a parsed JSON value holds a key or a string that is not text, and why, or None.

    `where` names `value` itself (a dotted path, `body` when empty).
    """
    stack: list[tuple[object, str]] = [(value, where)]
    while stack:  # a loop, not recursion: the nesting depth is the sender's choice
        item, path = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return f"{path or 'body'}: {problem}"
        elif isinstance(item, dict):
            for key in item:
                problem = text_problem(key)
                if problem is not None:
                    return f"{path or 'body'}: a key {problem}"
            stack.extend((item[key], f"{path}.{key}" if path else key) for key in reversed(item))
        elif isinstance(item, list):
            stack.extend((item[i], f"{path}[{i}]") for i in reversed(range(len(item))))
    return None
