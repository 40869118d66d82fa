"""Running the Python files of a repo (agent.py, handler.py) and checking what they define.

These files are code from the repo and run in the runtime's process: a repo is
trusted like any code you deploy. Each load executes them afresh in a new
namespace (never through sys.modules), so a reload can never see a stale module.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.repo._bytecode import compiled
from runtime.repo._report import Report


def run_module(path: Path, text: str, relative: str, report: Report) -> dict[str, Any] | None:
    """Execute a repo Python file; its globals, or None after reporting why it failed."""
    filename = str(path)
    try:
        code = compiled(text, filename)
    except SyntaxError as error:
        report.error(relative, f"Python syntax error: {error.msg}", line=error.lineno)
        return None
    namespace: dict[str, Any] = {"__name__": f"amodal_repo.{relative}", "__file__": filename}
    try:
        exec(code, namespace)
    # The file is user code: any failure is a finding, `sys.exit()` included (it would
    # otherwise end `amodal validate`, or a server on a hot reload).
    except (Exception, SystemExit) as error:
        report.error(
            relative,
            f"running the file raised {type(error).__name__}: {error}",
            line=_line_in(error, filename),
        )
        return None
    return namespace


def predicate_problem(value: object) -> str | None:
    """Why `value` is not a plain synchronous callable of one argument, or None."""
    if not callable(value):
        return f"a conditional must be a function of one argument, got {type(value).__name__}"
    call = getattr(value, "__call__", None)  # noqa: B004 - objects with an async __call__
    if inspect.iscoroutinefunction(value) or inspect.iscoroutinefunction(call):
        return "a conditional must be synchronous: write `def`, not `async def`"
    if inspect.isasyncgenfunction(value) or inspect.isgeneratorfunction(value):
        return "a conditional must return True or False, not yield"
    takes_one = _plain_function_takes_one(value)
    if takes_one is None:
        try:
            inspect.signature(value).bind(None)
            takes_one = True
        except TypeError:
            takes_one = False
        except ValueError:
            return None  # builtins without a signature: accept, resolution guards the call
    if not takes_one:
        return "a conditional must take exactly one argument (the surface context `ctx`)"
    return None


def _plain_function_takes_one(value: object) -> bool | None:
    """Whether a plain `def` accepts one positional argument, read off its code object
    (what `inspect.signature(value).bind(None)` decides, at a tenth of the cost); None
    for anything else (wrapped, partial, callable objects): ask inspect."""
    if type(value) is not types.FunctionType or hasattr(value, "__wrapped__"):
        return None
    if hasattr(value, "__signature__"):
        return None
    code = value.__code__
    required = code.co_argcount - len(value.__defaults__ or ())
    required_keywords = code.co_kwonlyargcount - len(value.__kwdefaults__ or {})
    accepts_one = code.co_argcount >= 1 or bool(code.co_flags & inspect.CO_VARARGS)
    return accepts_one and required <= 1 and required_keywords == 0


def handler_problem(value: object) -> str | None:
    """Why `value` is not `async def handler(args, ctx)`, or None."""
    if value is None:
        return "handler.py must define `async def handler(args: dict, ctx) -> Any`"
    if not inspect.iscoroutinefunction(value):
        return "`handler` must be an async function: `async def handler(args, ctx)`"
    try:
        inspect.signature(value).bind(None, None)
    except TypeError:
        return "`handler` must take two arguments: `async def handler(args, ctx)`"
    return None


def callable_line(value: Callable[..., Any]) -> int | None:
    code = getattr(value, "__code__", None)
    return int(code.co_firstlineno) if code is not None else None


def _line_in(error: BaseException, filename: str) -> int | None:
    line = None
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == filename:
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return line
