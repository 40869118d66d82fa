"""Compiled repo Python kept on disk (runtime/repo/_bytecode.py): it saves the compile,
never a change. An edit, a move or a damaged cache file is compiled afresh; a syntax error
is reported on every load; `AMODAL_NO_CACHE=1` keeps nothing."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from ._helpers import load, only_error, valid

AGENT_PY = "agents/default/agent.py"
PREDICATE = """\
def allowed(ctx):
    return ctx.claims.get("role") == "{role}"


agent = {{"tools": [{{"name": "load_knowledge", "conditional": allowed}}]}}
"""


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AMODAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("AMODAL_NO_CACHE", raising=False)
    return tmp_path / "cache"


def _cached(cache_dir: Path) -> list[Path]:
    return sorted(path for path in cache_dir.glob("code-*/*") if not path.name.startswith("."))


def _grants(root: Path, role: str) -> bool:
    """Whether the repo's default agent grants load_knowledge to a caller of `role`."""
    (entry,) = valid(load(root)).bundle.agents["default"].tools  # type: ignore[union-attr]
    return bool(entry.conditional(SimpleNamespace(claims={"role": role})))


def test_an_edit_is_compiled_afresh_and_an_unchanged_file_comes_from_the_cache(
    make_repo, cache_dir: Path
) -> None:
    root = make_repo({AGENT_PY: PREDICATE.format(role="manager")})
    assert _grants(root, "manager")
    (kept,) = _cached(cache_dir)
    written = kept.stat().st_mtime_ns

    assert _grants(root, "manager")  # read back, not written again
    assert [(path, path.stat().st_mtime_ns) for path in _cached(cache_dir)] == [(kept, written)]

    (root / AGENT_PY).write_text(PREDICATE.format(role="admin"), encoding="utf-8")
    assert _grants(root, "admin") and not _grants(root, "manager")
    assert len(_cached(cache_dir)) == 2  # the edit is another text: another entry


def test_a_damaged_cache_file_is_compiled_over(make_repo, cache_dir: Path) -> None:
    root = make_repo({AGENT_PY: PREDICATE.format(role="manager")})
    assert _grants(root, "manager")
    (kept,) = _cached(cache_dir)
    for damage in (b"", b"\x00garbage", kept.read_bytes()[:10]):
        kept.write_bytes(damage)
        assert _grants(root, "manager")
        assert kept.read_bytes() != damage


def test_a_moved_repo_reports_errors_at_its_new_path(make_repo, cache_dir: Path, tmp_path):
    failing = 'def boom():\n    raise RuntimeError("no")\n\n\nboom()\n'
    root = make_repo({AGENT_PY: failing})
    assert "raised RuntimeError" in only_error(load(root), AGENT_PY).message
    moved = shutil.move(root, tmp_path / "moved")
    assert _cached(cache_dir)  # it compiled (and raised when run): its code is kept
    error = only_error(load(Path(moved)), AGENT_PY)
    # The line is found in the traceback by the file's path: code compiled for the old
    # path would name the old one.
    assert error.line == 2


def test_a_syntax_error_is_reported_on_every_load_and_never_kept(make_repo, cache_dir) -> None:
    root = make_repo({AGENT_PY: "agent = {\n"})
    for _ in range(2):
        assert "syntax error" in only_error(load(root), AGENT_PY).message.lower()
    assert _cached(cache_dir) == []


def test_amodal_no_cache_keeps_nothing(make_repo, cache_dir, monkeypatch) -> None:
    monkeypatch.setenv("AMODAL_NO_CACHE", "1")
    root = make_repo({AGENT_PY: PREDICATE.format(role="manager")})
    assert _grants(root, "manager")
    assert not cache_dir.exists()
