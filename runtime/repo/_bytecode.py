"""Compiled repo Python (agent.py, handler.py) kept on disk, as Python keeps a module's .pyc.

Compiling the 55 Python files of the large bench repo is a sixth of its cold load;
reading their code back is a twentieth of that. A code object is a pure function of
the source text, its file name (it is in every traceback) and the interpreter, so the
cache file is named by the hash of exactly those: an edit, a move or another Python is
another file, and nothing is ever invalidated. The code still runs afresh in a new
namespace on every load (runtime/repo/_python.py); only the compile is saved.

Only code that compiled is kept; a file that does not compile is compiled (and its
syntax error reported) every time. A cache file that cannot be read back is compiled
over. The folder is `cache_directory()/code-<interpreter>` (runtime/repo/_checks.py:
`AMODAL_CACHE_DIR`, `AMODAL_NO_CACHE=1`), created private to its user: it holds code
this process runs, as trusted as the repo it came from.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import sys
from types import CodeType

from runtime.repo._checks import cache_directory, cache_enabled

_INTERPRETER = hashlib.blake2b(sys.version.encode(), digest_size=6).hexdigest()
"""This interpreter's build: a code object is only ever read by the Python that wrote it."""


def compiled(text: str, filename: str) -> CodeType:
    """`compile(text, filename, "exec")`, read from the cache when it compiled before;
    raises SyntaxError (never cached) as compile does."""
    if not cache_enabled():
        return _compile(text, filename)
    path = _cache_path(text, filename)
    with contextlib.suppress(OSError, ValueError, EOFError, TypeError):
        with open(path, "rb") as file:
            code = marshal.loads(file.read())
        if isinstance(code, CodeType):
            return code
    code = _compile(text, filename)
    _keep(path, marshal.dumps(code))
    return code


def _compile(text: str, filename: str) -> CodeType:
    return compile(text, filename, "exec", dont_inherit=True)


def _cache_path(text: str, filename: str) -> str:
    key = hashlib.blake2b(digest_size=16)
    key.update(filename.encode("utf-8", "surrogatepass"))
    key.update(b"\0")
    key.update(text.encode("utf-8", "surrogatepass"))
    return os.path.join(cache_directory(), f"code-{_INTERPRETER}", key.hexdigest())


def _keep(path: str, data: bytes) -> None:
    """Write the file whole or not at all (a rename): a concurrent reader never sees half
    of one. Unwritable, the cache only saves nothing."""
    with contextlib.suppress(OSError):
        folder, name = os.path.split(path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        temporary = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}")
        try:
            with open(temporary, "xb") as file:
                file.write(data)
            os.replace(temporary, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


__all__ = ["compiled"]
