"""The shape of runtime/: no import cycle, rooms stacked in one order, faces off the engine.

Every import counts, inside functions and under `if TYPE_CHECKING:` too (a type is a
dependency); a package's `__init__` re-exporting its own submodules does not. A room
is a top-level module or package of runtime/ (docs/architecture.md draws the stack).
"""

from __future__ import annotations

import ast
from pathlib import Path

import runtime

ROOT = Path(runtime.__file__).parent

LAYERS = (
    ("_version", "_text", "_logs", "_jsonschema", "_outcomes", "exceptions"),
    ("events",),
    ("storage",),
    ("models",),
    ("repo",),
    ("outside",),
    ("surface",),
    ("stores",),
    ("tools",),
    ("observe",),
    ("otel",),
    ("engine",),
    ("api",),
    ("evals", "importers", "automations"),
    ("server",),
    ("cli",),
    ("testing",),
)
"""Low to high: a room may import rooms of lower layers only."""
FACES = ("server", "cli", "evals")


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = ["runtime", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The runtime modules `name` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for imported in names:
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported in ("", "runtime", name):
                continue
            if path.name == "__init__.py" and imported.startswith(name + "."):
                continue  # a package re-exporting its own submodules
            targets.add(imported)
    return targets


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _room(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, if there is any."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = walk(target)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(edges):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return None


def test_no_module_imports_itself_back_through_others() -> None:
    assert _cycle(_graph()) is None


def test_every_room_imports_only_rooms_below_it() -> None:
    rank = {room: index for index, layer in enumerate(LAYERS) for room in layer}
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in _graph().items()
        for target in targets
        if _room(module) != _room(target) and rank[_room(target)] >= rank[_room(module)]
    )
    assert upward == []


def test_every_room_has_its_place_in_the_stack() -> None:
    placed = {room for layer in LAYERS for room in layer}
    assert {_room(module) for module in _graph() if module != "runtime"} <= placed


def test_no_face_reaches_past_the_runtime_into_the_engine() -> None:
    reaching = sorted(
        f"{module} -> {target}"
        for module, targets in _graph().items()
        if _room(module) in FACES
        for target in targets
        if _room(target) == "engine"
    )
    assert reaching == []
